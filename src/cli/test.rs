//! `clef test PATH... [--coverage]`: runs the tests stored with tables, in the
//! table file (`"tests": [...]`) or beside it (`NAME.tests.json`).
// `clef test`: fields are looked up by the keys just checked present, and rule positions come from
// the table's own id list.
#![allow(clippy::indexing_slicing)]

use crate::server::errors::ApiError as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::value::RawValue;
use serde_json::Value as Json;

use crate::diagnostic::Diagnostic;
use crate::expr::same_value;
use crate::input::InputError;
use crate::suggest::did_you_mean;
use crate::table::jev::{self, Loader};
use crate::table::{Limits, Table};

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
    /// the differences found (`(key, expected, actual)`)
    pub diffs: Vec<(String, Json, Json)>,
    /// why the input got no decision (it does not match the table's schema, say)
    pub error: Option<InputError>,
    /// the rule that matched
    pub matched_rule: Option<usize>,
}

impl TestOutcome {
    /// Whether the test passed: a decision, as expected.
    pub fn passed(&self) -> bool {
        self.diffs.is_empty() && self.error.is_none()
    }
}

/// The sibling test file of a table: `dir/NAME.tests.json`.
pub fn tests_file_for(table_path: &Path) -> PathBuf {
    let name = crate::table::table_name(table_path);
    table_path.with_file_name(format!("{name}.tests.json"))
}

/// Reads a table's tests, from the table file and its sibling file. On a
/// problem, returns every problem found, positioned in its file.
pub fn load_tests(table: &Table) -> Result<Vec<TableTest>, Vec<Diagnostic>> {
    let mut tests = Vec::new();
    let mut problems = Vec::new();
    if table.tests.is_some() {
        match load_tests_in_table(table) {
            Ok(t) => tests.extend(t),
            Err(d) => problems.extend(d),
        }
    }
    let sibling = tests_file_for(&table.path);
    if sibling.is_file() {
        match load_tests_file(&sibling, Some(table)) {
            Ok(t) => tests.extend(t),
            Err(d) => problems.extend(d),
        }
    }
    if problems.is_empty() {
        Ok(tests)
    } else {
        Err(problems)
    }
}

/// Reads one `NAME.tests.json`. With its table, expectations that no decision
/// of that table can meet (an unknown or disabled `rule_id`) are problems too.
pub fn load_tests_file(path: &Path, table: Option<&Table>) -> Result<Vec<TableTest>, Vec<Diagnostic>> {
    let shown = path.display().to_string();
    let text = crate::files::read_limited(path, crate::table::MAX_TABLE_BYTES)
        .and_then(|b| {
            String::from_utf8(b).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
        })
        .map_err(|e| vec![Diagnostic::whole_file(&shown, format!("cannot read the file: {e}"))])?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let raw: &RawValue = serde_json::from_str(text).map_err(|e| vec![jev::json_error(&shown, text, &e)])?;
    parse_tests(Loader::new(&shown, text), raw, table)
}

/// The `"tests"` of a table file, read again from the file so that problems
/// have positions (the loaded table keeps them as values only).
pub fn load_tests_in_table(table: &Table) -> Result<Vec<TableTest>, Vec<Diagnostic>> {
    let shown = table.path.display().to_string();
    let whole = |message: String| vec![Diagnostic::whole_file(&shown, message)];
    let text = std::fs::read_to_string(&table.path).map_err(|e| whole(format!("cannot read the file: {e}")))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_str(text).map_err(|_| whole("the file changed while it was read".into()))?;
    match fields.get("tests") {
        Some(raw) => parse_tests(Loader::new(&shown, text), raw, Some(table)),
        None => Ok(Vec::new()),
    }
}

/// The keys a stored test may have.
pub const TEST_KEYS: &[&str] = &["name", "input", "expect", "description"];
/// What a test's `expect` may check.
pub const EXPECT_KEYS: &[&str] = &["matched", "rule_id", "action"];

fn parse_tests<'s>(
    mut p: Loader<'s>,
    raw: &'s RawValue,
    table: Option<&Table>,
) -> Result<Vec<TableTest>, Vec<Diagnostic>> {
    let source = p.path().to_string();
    let Ok(list) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        p.at(raw, "tests must be a JSON array of {\"name\", \"input\", \"expect\"} objects".into());
        return Err(p.diags);
    };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let Ok(fields) = serde_json::from_str::<BTreeMap<String, &RawValue>>(t.get()) else {
            p.at(t, format!("test #{} must be an object with \"name\", \"input\" and \"expect\"", i + 1));
            continue;
        };
        let name = match fields.get("name").map(|v| serde_json::from_str::<String>(v.get())) {
            Some(Ok(n)) => n,
            Some(Err(_)) => {
                p.at(fields["name"], format!("test #{}: \"name\" must be a string", i + 1));
                format!("test #{}", i + 1)
            }
            None => format!("test #{}", i + 1),
        };
        let label = if fields.contains_key("name") { format!("test \"{name}\"") } else { name.clone() };
        // A misspelt key is reported with its fix; the key it meant is then not "missing" too.
        let mut meant = Vec::new();
        for (key, v) in &fields {
            if !TEST_KEYS.contains(&key.as_str()) {
                let suggestion = did_you_mean(key, TEST_KEYS.iter().copied());
                meant.extend(suggestion);
                let hint = suggestion
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| "a test has name, input, expect".into());
                p.at_key(v, key, format!("{label}: unknown key \"{key}\"; {hint}"));
            }
        }
        let input = match fields.get("input") {
            None => {
                if !meant.contains(&"input") {
                    p.at(t, format!("{label} has no \"input\""));
                }
                None
            }
            Some(v) => match serde_json::from_str::<Json>(v.get()) {
                Ok(input @ Json::Object(_)) => Some(input),
                _ => {
                    p.at(v, format!("{label}: \"input\" must be a JSON object"));
                    None
                }
            },
        };
        let expect = match fields.get("expect") {
            None => {
                if !meant.contains(&"expect") {
                    p.at(
                        t,
                        format!("{label} has no \"expect\" (what the decision must hold: matched, rule_id, action)"),
                    );
                }
                None
            }
            Some(v) => expectations(&mut p, v, &label, table),
        };
        if let (Some(input), Some(expect)) = (input, expect) {
            out.push(TableTest { name, input, expect, source: source.clone() });
        }
    }
    if p.diags.is_empty() {
        Ok(out)
    } else {
        p.diags.sort_by_key(|d| (d.line, d.column));
        Err(p.diags)
    }
}

/// Reads `expect`, reporting what no decision can give.
fn expectations<'s>(
    p: &mut Loader<'s>,
    raw: &'s RawValue,
    label: &str,
    table: Option<&Table>,
) -> Option<serde_json::Map<String, Json>> {
    let Ok(fields) = serde_json::from_str::<BTreeMap<String, &RawValue>>(raw.get()) else {
        p.at(raw, format!("{label}: \"expect\" must be an object with matched, rule_id and/or action"));
        return None;
    };
    let errors = p.diags.len();
    let mut expect = serde_json::Map::new();
    for (key, v) in &fields {
        let value: Json = serde_json::from_str(v.get()).unwrap_or(Json::Null);
        match (key.as_str(), &value) {
            ("matched", Json::Bool(_)) | ("rule_id", Json::String(_) | Json::Null) => {}
            ("action", Json::Object(_) | Json::Null) => {}
            ("matched", _) => p.at(v, format!("{label}: \"matched\" must be true or false")),
            ("rule_id", _) => p.at(v, format!("{label}: \"rule_id\" must be a rule id (a string) or null")),
            ("action", _) => p.at(v, format!("{label}: \"action\" must be an object (or null: no default)")),
            _ => {
                let hint = did_you_mean(key, EXPECT_KEYS.iter().copied())
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| "it may hold matched, rule_id and action".into());
                p.at_key(v, key, format!("{label}: \"expect\" has an unknown key \"{key}\"; {hint}"));
            }
        }
        expect.insert(key.clone(), value);
    }
    if let (Some(Json::String(id)), Some(table)) = (expect.get("rule_id"), table) {
        let ids = table.engine.outcome_ids();
        match ids.iter().position(|r| r == id) {
            None => {
                let hint = did_you_mean(id, ids.iter().map(String::as_str))
                    .map(|s| format!("; did you mean \"{s}\"?"))
                    .unwrap_or_default();
                let noun = table.engine.outcome_noun().trim_end_matches('s');
                p.at(fields["rule_id"], format!("{label}: the table has no {noun} \"{id}\"{hint}"));
            }
            Some(i) if !table.engine.outcome_enabled(i) => p.at(
                fields["rule_id"],
                format!("{label}: rule \"{id}\" is disabled (\"enabled\": false), so no decision names it"),
            ),
            Some(_) => {}
        }
    }
    match (expect.get("matched"), expect.get("rule_id")) {
        (Some(Json::Bool(false)), Some(Json::String(_))) | (Some(Json::Bool(true)), Some(Json::Null)) => {
            p.at(raw, format!("{label}: \"matched\" and \"rule_id\" contradict each other"));
        }
        _ => {}
    }
    (p.diags.len() == errors).then_some(expect)
}

/// Runs one test against a table.
pub fn run_test(table: &Table, test: &TableTest) -> TestOutcome {
    let body = test.input.to_string();
    let mut diffs = Vec::new();
    let mut matched_rule = None;
    let mut error = None;
    match table.decide(body.as_bytes(), false) {
        Err(e) => error = Some(e),
        Ok(d) => {
            matched_rule = d.rule;
            let actual_action: Json = serde_json::from_str(table.action_json(&d)).unwrap_or(Json::Null);
            let actual_rule = table.outcome_id(&d).map(Json::String).unwrap_or(Json::Null);
            for (key, expected) in &test.expect {
                let actual = match key.as_str() {
                    "matched" => Json::Bool(d.rule.is_some()),
                    "rule_id" => actual_rule.clone(),
                    _ => actual_action.clone(),
                };
                if !same_value(expected, &actual) {
                    diffs.push((key.clone(), expected.clone(), actual));
                }
            }
        }
    }
    TestOutcome { test: test.clone(), diffs, error, matched_rule }
}

/// Runs `clef test`; returns the exit code.
pub fn run(paths: &[PathBuf], coverage: bool) -> i32 {
    let (mut passed, mut failed, mut errors) = (0usize, 0usize, 0usize);
    // One run per table, as the server serves it: a `.cfb` beside its `.flash.json` is one
    // table (whose tests file both would read), and two files that cannot be one are an error.
    for group in super::table_groups(paths) {
        let served = group.map(|files| (super::served_file(&files), files));
        let path = match served {
            Ok((Ok(p), _)) => p,
            Ok((Err(problem), files)) => {
                let shown = files.first().map(|f| f.display().to_string()).unwrap_or_default();
                eprintln!("{}", Diagnostic::whole_file(&shown, problem.summary));
                errors += 1;
                continue;
            }
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
            Err(problems) => {
                for d in problems {
                    eprintln!("{d}");
                }
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
            if outcome.passed() {
                table_passed += 1;
            } else {
                table_failed += 1;
                outln!("FAIL {}: {} ({})", table.name, test.name, test.source);
                if let Some(e) = &outcome.error {
                    outln!("  error: {}: {e}", e.error_code().as_str());
                }
                for (key, expected, actual) in &outcome.diffs {
                    outln!("  - {key}: {expected}");
                    outln!("  + {key}: {actual}");
                }
            }
        }
        outln!("{}: {} tests, {} passed, {} failed", table.name, tests.len(), table_passed, table_failed);
        if tests.is_empty() {
            outln!("  warning: {} has no tests (add {})", table.name, tests_file_for(&path).display());
        }
        if coverage {
            let engine = &table.engine;
            let ids = engine.outcome_ids();
            let on = |i: usize| engine.outcome_enabled(i);
            let enabled = (0..ids.len()).filter(|&i| on(i)).count();
            let missing: Vec<&str> =
                (0..ids.len()).filter(|&i| on(i) && !reached.contains(&i)).map(|i| ids[i].as_str()).collect();
            let disabled: Vec<&str> = (0..ids.len()).filter(|&i| !on(i)).map(|i| ids[i].as_str()).collect();
            outln!(
                "  coverage: {}/{} enabled {} reached by a test",
                enabled - missing.len(),
                enabled,
                engine.outcome_noun()
            );
            if !missing.is_empty() {
                outln!("  not reached: {}", missing.join(", "));
            }
            if !disabled.is_empty() {
                outln!("  disabled (not counted): {}", disabled.join(", "));
            }
        }
        passed += table_passed;
        failed += table_failed;
    }
    outln!("{passed} passed, {failed} failed");
    if errors > 0 {
        eprintln!("{errors} table(s) or test file(s) could not be loaded");
    }
    i32::from(failed > 0 || errors > 0)
}
