//! `clef test PATH... [--coverage]`: runs the tests stored with tables, in the
//! table file (`"tests": [...]`) or beside it (`NAME.tests.json`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::table::{Limits, Table};

/// The keys a stored test may have.
pub const TEST_KEYS: &[&str] = &["name", "input", "expect", "description"];
/// What a test's `expect` may check.
pub const EXPECT_KEYS: &[&str] = &["matched", "rule_id", "action"];

/// One stored test.
#[derive(Debug, Clone)]
pub struct TableTest {
    /// its name
    pub name: String,
    /// the input object
    pub input: Json,
    /// expected `matched`, `rule_id` and/or `action`
    pub expect: serde_json::Map<String, Json>,
    /// where it was read from
    pub source: String,
}

/// The outcome of one test.
#[derive(Debug)]
pub struct TestOutcome {
    /// which test
    pub test: TableTest,
    /// the differences found (`(key, expected, actual)`); empty means it passed
    pub diffs: Vec<(String, Json, Json)>,
    /// the rule that matched
    pub matched_rule: Option<usize>,
}

/// The sibling test file of a table: `dir/NAME.tests.json`.
pub fn tests_file_for(table_path: &Path) -> PathBuf {
    let name = crate::table::table_name(table_path);
    table_path.with_file_name(format!("{name}.tests.json"))
}

/// Reads a table's tests from the table and its sibling file.
pub fn load_tests(table: &Table) -> Result<Vec<TableTest>, String> {
    let mut tests = Vec::new();
    if let Some(t) = &table.tests {
        tests.extend(parse_tests(t, &table.path.display().to_string())?);
    }
    let sibling = tests_file_for(&table.path);
    if sibling.is_file() {
        let shown = sibling.display().to_string();
        let text = std::fs::read_to_string(&sibling).map_err(|e| format!("{shown}: cannot read: {e}"))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let v: Json = serde_json::from_str(text)
            .map_err(|e| format!("{shown}:{}:{}: error: invalid JSON: {e}", e.line(), e.column()))?;
        tests.extend(parse_tests(&v, &shown)?);
    }
    Ok(tests)
}

fn parse_tests(v: &Json, source: &str) -> Result<Vec<TableTest>, String> {
    let list = v.as_array().ok_or_else(|| format!("{source}: error: tests must be a JSON array"))?;
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let obj = t.as_object().ok_or_else(|| format!("{source}: error: test #{} must be an object", i + 1))?;
        let name =
            obj.get("name").and_then(Json::as_str).map(str::to_string).unwrap_or_else(|| format!("test #{}", i + 1));
        for key in obj.keys() {
            if !TEST_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "{source}: error: test \"{name}\": unknown key \"{key}\" (a test has name, input, expect)"
                ));
            }
        }
        let input =
            obj.get("input").cloned().ok_or_else(|| format!("{source}: error: test \"{name}\" has no \"input\""))?;
        let expect = obj
            .get("expect")
            .and_then(Json::as_object)
            .cloned()
            .ok_or_else(|| format!("{source}: error: test \"{name}\" needs an \"expect\" object"))?;
        for key in expect.keys() {
            if !EXPECT_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "{source}: error: test \"{name}\": \"expect\" may hold matched, rule_id and action, not \"{key}\""
                ));
            }
        }
        out.push(TableTest { name, input, expect, source: source.to_string() });
    }
    Ok(out)
}

/// Runs one test against a table.
pub fn run_test(table: &Table, test: &TableTest) -> TestOutcome {
    let body = test.input.to_string();
    let mut diffs = Vec::new();
    let mut matched_rule = None;
    match table.decide(body.as_bytes(), false) {
        Err(e) => diffs.push(("input".to_string(), Json::String("a valid input".into()), Json::String(e.to_string()))),
        Ok(d) => {
            matched_rule = d.rule;
            let actual_action: Json = serde_json::from_str(table.action_json(&d)).unwrap_or(Json::Null);
            let actual_rule = d.rule.map(|r| Json::String(table.engine.rules[r].id.clone())).unwrap_or(Json::Null);
            for (key, expected) in &test.expect {
                let actual = match key.as_str() {
                    "matched" => Json::Bool(d.rule.is_some()),
                    "rule_id" => actual_rule.clone(),
                    _ => actual_action.clone(),
                };
                if *expected != actual {
                    diffs.push((key.clone(), expected.clone(), actual));
                }
            }
        }
    }
    TestOutcome { test: test.clone(), diffs, matched_rule }
}

/// Runs `clef test`; returns the exit code.
pub fn run(paths: &[PathBuf], coverage: bool) -> i32 {
    let (mut passed, mut failed, mut errors) = (0usize, 0usize, 0usize);
    for entry in super::expand(paths) {
        let path = match entry {
            Ok(p) => p,
            Err(msg) => {
                eprintln!("{msg}");
                errors += 1;
                continue;
            }
        };
        let table = match Table::load(&path, &Limits::default()) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                errors += 1;
                continue;
            }
        };
        let tests = match load_tests(&table) {
            Ok(t) => t,
            Err(msg) => {
                eprintln!("{msg}");
                errors += 1;
                continue;
            }
        };
        let mut reached = BTreeSet::new();
        let (mut table_passed, mut table_failed) = (0, 0);
        for test in &tests {
            let outcome = run_test(&table, test);
            if let Some(r) = outcome.matched_rule {
                reached.insert(r);
            }
            if outcome.diffs.is_empty() {
                table_passed += 1;
            } else {
                table_failed += 1;
                println!("FAIL {}: {} ({})", table.name, test.name, test.source);
                for (key, expected, actual) in &outcome.diffs {
                    println!("  - {key}: {expected}");
                    println!("  + {key}: {actual}");
                }
            }
        }
        println!("{}: {} tests, {} passed, {} failed", table.name, tests.len(), table_passed, table_failed);
        if tests.is_empty() {
            println!("  warning: {} has no tests (add {})", table.name, tests_file_for(&path).display());
        }
        if coverage {
            let rules = &table.engine.rules;
            let enabled = rules.iter().filter(|r| r.enabled).count();
            let missing: Vec<&str> = rules
                .iter()
                .enumerate()
                .filter(|(i, r)| r.enabled && !reached.contains(i))
                .map(|(_, r)| r.id.as_str())
                .collect();
            let disabled: Vec<&str> = rules.iter().filter(|r| !r.enabled).map(|r| r.id.as_str()).collect();
            println!("  coverage: {}/{} enabled rules reached by a test", enabled - missing.len(), enabled);
            if !missing.is_empty() {
                println!("  not reached: {}", missing.join(", "));
            }
            if !disabled.is_empty() {
                println!("  disabled (not counted): {}", disabled.join(", "));
            }
        }
        passed += table_passed;
        failed += table_failed;
    }
    println!("{passed} passed, {failed} failed");
    if errors > 0 {
        eprintln!("{errors} table(s) or test file(s) could not be loaded");
    }
    i32::from(failed > 0 || errors > 0)
}
