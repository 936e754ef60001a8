//! Clef YAML rule sets (SPEC §4.2, §11): every operator against the expression it stands for,
//! the position of every kind of problem, templates and fallbacks, `enabled`, params, the
//! guards of the YAML reader, and the commands on the example rule sets.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

use clef::diagnostic::Diagnostic;
use clef::render::ResponseMeta;
use clef::table::{Decision, Limits, Table};
use proptest::prelude::*;
use serde_json::{json, Value as Json};

fn load(text: &str) -> Result<Table, Vec<Diagnostic>> {
    Table::from_bytes(Path::new("t.yaml"), text.as_bytes(), &Limits::default()).map_err(|e| e.diagnostics)
}

fn loaded(text: &str) -> Table {
    load(text).unwrap_or_else(|d| panic!("{text}\n{}", d.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")))
}

/// The decision response body for `input`, as JSON.
fn answer(table: &Table, input: &Json) -> Json {
    let d = table.decide(input.to_string().as_bytes(), false).expect("a decision");
    let mut out = String::new();
    let meta =
        ResponseMeta { timestamp: SystemTime::UNIX_EPOCH.into(), snapshot_id: None, recorded: true, variant: None };
    clef::render::write_decision(table, &d, &meta, &mut out);
    serde_json::from_str(&out).expect("the body is JSON")
}

/// The errors of a rule set that does not load, as `(line, column, message)`.
fn errors(text: &str) -> Vec<(usize, usize, String)> {
    match load(text) {
        Ok(_) => panic!("expected load errors:\n{text}"),
        Err(d) => d.iter().map(|d| (d.line, d.column, d.message.clone())).collect(),
    }
}

/// The 1-based line and column (in characters) of the `nth` occurrence of `needle` in `text`.
fn pos(text: &str, needle: &str, nth: usize) -> (usize, usize) {
    let at = text.match_indices(needle).nth(nth).unwrap_or_else(|| panic!("no {needle:?} #{nth} in {text}")).0;
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    (text[..at].matches('\n').count() + 1, text[line_start..at].chars().count() + 1)
}

/// Asserts that `text` fails with an error at `needle` (its `nth` occurrence) whose message holds
/// `fragment`.
fn error_at(text: &str, needle: &str, nth: usize, fragment: &str) {
    let want = pos(text, needle, nth);
    let all = errors(text);
    assert!(
        all.iter().any(|(l, c, m)| (*l, *c) == want && m.contains(fragment)),
        "expected an error at {want:?} containing {fragment:?}, got {all:#?}\nin:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Every operator is the expression it stands for

/// `(operator, value as YAML, the equivalent expression, inputs)`: each decided by the
/// `conditions:` form and the `when:` form, which must give the same decision.
fn operator_cases() -> Vec<(&'static str, &'static str, &'static str, Vec<Json>)> {
    let numbers = || {
        vec![
            json!({"m": {"x-rate": 5}}),
            json!({"m": {"x-rate": 4}}),
            json!({"m": {"x-rate": 6}}),
            json!({"m": {"x-rate": 5.0}}),
            json!({"m": {"x-rate": "5"}}),
            json!({"m": {"x-rate": null}}),
            json!({"m": {}}),
            json!({}),
            json!({"m": 3}),
            json!({"m": {"x-rate": [5]}}),
        ]
    };
    let strings = || {
        vec![
            json!({"m": {"x-rate": "abc"}}),
            json!({"m": {"x-rate": "xabcx"}}),
            json!({"m": {"x-rate": "zzz"}}),
            json!({"m": {"x-rate": ""}}),
            json!({"m": {"x-rate": "ABC"}}),
            json!({"m": {"x-rate": null}}),
            json!({"m": {}}),
            json!({}),
            json!({"m": {"x-rate": 5}}),
        ]
    };
    vec![
        ("eq", "5", "m[\"x-rate\"] == 5", numbers()),
        ("eq", "abc", "m[\"x-rate\"] == \"abc\"", strings()),
        ("eq", "null", "m[\"x-rate\"] == nil", numbers()),
        ("eq", "[5]", "m[\"x-rate\"] == [5]", numbers()),
        ("ne", "5", "m[\"x-rate\"] != 5", numbers()),
        ("ne", "'5'", "m[\"x-rate\"] != \"5\"", numbers()),
        ("gt", "5", "m[\"x-rate\"] != nil && m[\"x-rate\"] > 5", numbers()),
        ("gt", "4.5", "m[\"x-rate\"] != nil && m[\"x-rate\"] > 4.5", numbers()),
        ("gte", "5", "m[\"x-rate\"] != nil && m[\"x-rate\"] >= 5", numbers()),
        ("lt", "5", "m[\"x-rate\"] != nil && m[\"x-rate\"] < 5", numbers()),
        ("lt", "abd", "m[\"x-rate\"] != nil && m[\"x-rate\"] < \"abd\"", strings()),
        ("lte", "-5", "m[\"x-rate\"] != nil && m[\"x-rate\"] <= -5", numbers()),
        ("in", "[4, 5]", "m[\"x-rate\"] in [4, 5]", numbers()),
        ("in", "[abc, zzz, null]", "m[\"x-rate\"] in [\"abc\", \"zzz\", nil]", strings()),
        ("not_in", "[4, 5]", "m[\"x-rate\"] not in [4, 5]", numbers()),
        ("not_in", "[]", "m[\"x-rate\"] not in []", strings()),
        ("contains", "ab", "m[\"x-rate\"] != nil && m[\"x-rate\"] contains \"ab\"", strings()),
        ("not_contains", "ab", "m[\"x-rate\"] != nil && not (m[\"x-rate\"] contains \"ab\")", strings()),
        ("starts_with", "ab", "m[\"x-rate\"] != nil && m[\"x-rate\"] startsWith \"ab\"", strings()),
        ("ends_with", "bc", "m[\"x-rate\"] != nil && m[\"x-rate\"] endsWith \"bc\"", strings()),
        ("matches", "'^a.c$'", "m[\"x-rate\"] != nil && m[\"x-rate\"] matches \"^a.c$\"", strings()),
        (
            "matches",
            "'(?i)\\bABC\\b'",
            "m[\"x-rate\"] != nil && m[\"x-rate\"] matches \"(?i)\\\\bABC\\\\b\"",
            strings(),
        ),
        ("exists", "", "m[\"x-rate\"] != nil", numbers()),
        ("not_exists", "", "m[\"x-rate\"] == nil", numbers()),
    ]
}

fn with_conditions(operator: &str, value: &str) -> String {
    let value = if value.is_empty() { String::new() } else { format!(", value: {value}") };
    format!(
        "rules:\n  - id: r\n    conditions:\n      - {{field: m.x-rate, operator: {operator}{value}}}\n    \
         action: {{hit: true}}\ndefault: {{hit: false}}\n"
    )
}

fn with_when(expression: &str) -> String {
    format!(
        "rules:\n  - id: r\n    when: '{}'\n    action: {{hit: true}}\ndefault: {{hit: false}}\n",
        expression.replace('\'', "''")
    )
}

#[test]
fn every_operator_decides_as_the_expression_it_stands_for() {
    let mut seen = std::collections::BTreeSet::new();
    for (operator, value, expression, inputs) in operator_cases() {
        seen.insert(operator);
        let written = loaded(&with_conditions(operator, value));
        let when = loaded(&with_when(expression));
        for input in inputs {
            let body = input.to_string();
            let a = written.decide(body.as_bytes(), false).unwrap();
            let b = when.decide(body.as_bytes(), false).unwrap();
            assert_eq!(a, b, "{operator} {value} vs `{expression}` on {body}");
            // and the reference evaluator agrees
            assert_eq!(written.decide_reference(body.as_bytes()).unwrap().rule, a.rule, "{operator} on {body}");
        }
    }
    assert_eq!(seen.len(), clef::table::ruleset::OPERATORS.len(), "every operator has cases");
}

/// `(matched, warned)` of a one-condition rule set on `input`, by the reference evaluator; the
/// optimized path (rule index included) must give the same rule and the same warnings.
fn outcome(operator: &str, value: &str, input: Json) -> (bool, bool) {
    let table = loaded(&with_conditions(operator, value));
    let body = input.to_string();
    let d: Decision = table.decide_reference(body.as_bytes()).unwrap();
    let fast = table.decide(body.as_bytes(), false).unwrap();
    assert_eq!((fast.rule, &fast.warnings), (d.rule, &d.warnings), "{operator} {value} on {body}");
    (d.rule.is_some(), !d.warnings.is_empty())
}

#[test]
fn missing_and_null_fields_are_false_without_a_warning_under_operators_that_need_a_value() {
    // SPEC §4.2, revision 4: rule sets are written for inputs that vary, so an absent or null
    // field makes a comparison, string or regex entry false, quietly
    let five = json!({"m": {"x-rate": 5}});
    let null = json!({"m": {"x-rate": null}});
    let missing = json!({"m": {}});
    let no_parent = json!({});
    for op in ["gt", "gte", "lt", "lte"] {
        for input in [&missing, &null, &no_parent] {
            assert_eq!(outcome(op, "5", input.clone()), (false, false), "{op} on {input}");
        }
        // a present value of a type the operator cannot take still warns
        assert_eq!(outcome(op, "5", json!({"m": {"x-rate": "5"}})), (false, true), "{op}");
        assert_eq!(outcome(op, "5", json!({"m": {"x-rate": [5]}})), (false, true), "{op}");
    }
    assert_eq!(outcome("gte", "5", five.clone()), (true, false));
    assert_eq!(outcome("lt", "5", five.clone()), (false, false));
    for op in ["contains", "not_contains", "starts_with", "ends_with", "matches"] {
        for input in [&missing, &null, &no_parent] {
            assert_eq!(outcome(op, "a", input.clone()), (false, false), "{op} on {input}");
        }
        assert_eq!(outcome(op, "a", five.clone()), (false, true), "{op} on a number");
    }
    assert_eq!(outcome("not_contains", "a", json!({"m": {"x-rate": "xyz"}})), (true, false));
    assert_eq!(outcome("contains", "a", json!({"m": {"x-rate": "abc"}})), (true, false));
    // a parent that is not an object is not an absent field: reading it is the error
    assert_eq!(outcome("gt", "5", json!({"m": 3})), (false, true));
    // null counts as missing
    assert_eq!(outcome("exists", "", null.clone()), (false, false));
    assert_eq!(outcome("exists", "", missing.clone()), (false, false));
    assert_eq!(outcome("exists", "", five.clone()), (true, false));
    assert_eq!(outcome("not_exists", "", null.clone()), (true, false));
    assert_eq!(outcome("not_exists", "", json!({})), (true, false));
    // `==`, `!=` and `in` take nil as §3 says, unchanged: absent `ne 5` holds
    assert_eq!(outcome("eq", "5", missing.clone()), (false, false));
    assert_eq!(outcome("ne", "5", missing.clone()), (true, false));
    assert_eq!(outcome("in", "[5]", null.clone()), (false, false));
    assert_eq!(outcome("not_in", "[5]", null.clone()), (true, false));
    // a trace names the part that did not hold: the guard, with the value it read (the rule
    // index rules the rule out, so the reference scan's trace, which tries every rule)
    let table = loaded(&with_conditions("gt", "5"));
    let trace = table.decide_reference(null.to_string().as_bytes()).unwrap().trace.unwrap();
    assert_eq!(trace[0].reason, "m[\"x-rate\"] != nil was false (m[\"x-rate\"] = null)");
    // `when:` keeps §3's rules: the same comparison written as an expression warns
    let when = loaded(&with_when("m[\"x-rate\"] > 5"));
    let d = when.decide_reference(missing.to_string().as_bytes()).unwrap();
    assert_eq!((d.rule.is_some(), d.warnings.len()), (false, 1));
}

#[test]
fn the_router_fallback_table_answers_a_bare_request_without_warnings() {
    // The shipped backup_rules answered every router fallback (a request without metrics or
    // the optional headers) with a warning per comparison on an absent field.
    let path = tables().join("backup_rules.yaml");
    let table = Table::load(&path, &Limits::default()).unwrap();
    for input in [
        json!({"method": "GET", "path": "/search", "headers": {"user-agent": "Firefox"}}),
        json!({"method": "POST", "headers": {}}),
        json!({}),
    ] {
        let a = answer(&table, &input);
        assert_eq!(a["rule_id"], "everything_else", "{input}: {a}");
        assert!(a.get("warnings").is_none(), "{input}: {a}");
    }
    // a value of the wrong type is still said
    let a = answer(&table, &json!({"method": "GET", "metrics": {"query_tokens": "many"}}));
    assert!(a["warnings"].as_array().is_some_and(|w| !w.is_empty()), "{a}");
}

#[test]
fn rules_without_conditions_always_match_and_conditions_and_when_must_all_hold() {
    let t = loaded(
        "rules:\n  - id: both\n    conditions:\n      - {field: a, operator: eq, value: 1}\n    when: b == 2\n    \
         action: {r: both}\n  - id: all\n    action: {r: all}\n",
    );
    assert_eq!(answer(&t, &json!({"a": 1, "b": 2}))["rule_id"], "both");
    assert_eq!(answer(&t, &json!({"a": 1, "b": 3}))["rule_id"], "all");
    assert_eq!(answer(&t, &json!({"a": 2, "b": 2}))["rule_id"], "all");
    assert_eq!(answer(&t, &json!({}))["action"], json!({"r": "all"}));
}

// ---------------------------------------------------------------------------------------------
// Where each kind of problem is reported

#[test]
fn yaml_syntax_errors_have_positions() {
    // an unclosed flow mapping: where the parser finds what it expected is missing
    let text = "rules:\n  - id: a\n    action: {t: 1\n  - id: b\n";
    error_at(text, ": b", 0, "not valid YAML: while parsing a flow mapping, did not find expected ',' or '}'");
    let text = "rules:\n  - id: a\n\twhen: x\n";
    error_at(text, "\t", 0, "YAML indents with spaces, not tabs");
    let text = "rules:\n  - id: a\n    when: 'unterminated\n";
    error_at(text, "'unterminated", 0, "this `'` opens a quoted value that is never closed");
    error_at("rules: []\n---\nrules: []\n", "---", 0, "a second YAML document");
}

#[test]
fn misspelt_keys_are_errors_with_a_suggestion() {
    let text = "version: \"1.0\"\nrule:\n  - id: a\n";
    error_at(text, "rule:", 0, "unknown key \"rule\"; did you mean \"rules\"?");
    let text = "rules:\n  - id: a\n    wehn: 'true'\n    action: {}\n";
    error_at(text, "wehn", 0, "rule \"a\": unknown key \"wehn\"; did you mean \"when\"?");
    let text = "rules:\n  - id: a\n    conditions:\n      - {feild: x, operator: eq, value: 1}\n    action: {}\n";
    error_at(text, "feild", 0, "rule \"a\": condition #1: unknown key \"feild\"; did you mean \"field\"?");
    // the misspelt key is the one problem: no second "there is no field"
    assert_eq!(errors(text).len(), 1, "{:?}", errors(text));
    let text = "rules:\n  - id: a\n    conditions:\n      - field: x\n        operater: eq\n        value: 1\n    action: {}\n";
    error_at(text, "operater", 0, "did you mean \"operator\"?");
    let text = "params:\n  limit: {valeu: 3}\nrules:\n  - id: a\n    when: x > params.limit\n    action: {}\n";
    error_at(text, "valeu", 0, "unknown key \"valeu\" in parameter \"limit\"; did you mean \"value\"?");
    let text = "tests: []\nrules: []\n";
    error_at(text, "tests", 0, "NAME.tests.json");
}

#[test]
fn unknown_operators_are_errors_at_the_operator() {
    let text =
        "rules:\n  - id: a\n    conditions:\n      - {field: x, operator: greater_than, value: 1}\n    action: {}\n";
    error_at(text, "greater_than", 0, "unknown operator \"greater_than\"");
    let text = "rules:\n  - id: a\n    conditions:\n      - {field: x, operator: '>=', value: 1}\n    action: {}\n";
    error_at(text, "'>='", 0, "write \"gte\"");
    let text =
        "rules:\n  - id: a\n    conditions:\n      - {field: x, operator: startswith, value: a}\n    action: {}\n";
    error_at(text, "startswith", 0, "did you mean \"starts_with\"?");
}

#[test]
fn values_of_the_wrong_type_are_errors_at_the_value() {
    for (operator, value, fragment) in [
        ("gt", "[1, 2]", "\"value\" of \"gt\" must be a number or a string, not a list"),
        ("gte", "true", "must be a number or a string, not true or false"),
        ("lt", "null", "must be a number or a string, not null"),
        ("in", "abc", "\"value\" of \"in\" must be a list, not a string"),
        ("not_in", "3", "must be a list, not a number"),
        ("contains", "5", "\"value\" of \"contains\" must be a string, not a number (quote it: '5')"),
        ("starts_with", "[a]", "must be a string, not a list"),
        ("matches", "{a: 1}", "a mapping is only `{param: NAME}`"),
        ("eq", "{a: 1}", "a mapping is only `{param: NAME}`"),
        ("eq", ".inf", "not a number a condition can compare with"),
        ("eq", "18446744073709551615", "larger than the condition language's integers"),
    ] {
        let text = format!(
            "rules:\n  - id: a\n    conditions:\n      - {{field: x, operator: {operator}, value: {value}}}\n    action: {{}}\n"
        );
        error_at(&text, value, 0, fragment);
    }
    let text = "rules:\n  - id: a\n    conditions:\n      - {field: x, operator: exists, value: 1}\n    action: {}\n";
    error_at(text, "value", 0, "\"exists\" takes no \"value\"");
    let text = "rules:\n  - id: a\n    conditions:\n      - {field: x, operator: gt}\n    action: {}\n";
    error_at(text, "{field", 0, "\"gt\" needs a \"value\": a number or a string");
    for (field, fragment) in [
        ("a..b", "empty name between dots"),
        ("user-agent", "must start with a name"),
        ("nil.x", "a word of the condition language"),
        ("[a]", "must be a dotted path"),
    ] {
        let text = format!(
            "rules:\n  - id: a\n    conditions:\n      - {{field: {field}, operator: exists}}\n    action: {{}}\n"
        );
        error_at(&text, field, 0, fragment);
    }
}

#[test]
fn bad_regexes_are_errors_at_the_pattern() {
    let text =
        "rules:\n  - id: a\n    conditions:\n      - {field: ua, operator: matches, value: '(bot'}\n    action: {}\n";
    error_at(text, "'(bot'", 0, "invalid regex");
    // inside a `when:`, at the pattern's literal, through the double quotes' escapes
    let text = "rules:\n  - id: a\n    when: \"ua ~ \\\"[a-\\\"\"\n    action: {}\n";
    error_at(text, "\\\"[a-", 0, "invalid regex");
}

#[test]
fn bad_placeholders_are_errors_at_their_string() {
    let text = "rules:\n  - id: a\n    action: {type: cache, key: \"k_{{ a..b }}\"}\n";
    error_at(text, "\"k_{{", 0, "the placeholder `{{ a..b }}` is not a dotted path");
    let text = "rules:\n  - id: a\n    action: {ok: 1}\n    fallback:\n      upstream: \"{{ x\"\n";
    error_at(text, "\"{{ x\"", 0, "in the fallback");
    let text = "rules:\n  - id: a\n    action: {ok: 1}\ndefault: {k: \"{{ x }}\"}\n";
    error_at(text, "{k:", 0, "never filled in");
}

#[test]
fn duplicate_ids_and_keys_are_errors_at_the_second_one() {
    let text = "rules:\n  - id: same\n    action: {}\n  - id: same\n    action: {}\n";
    error_at(text, "same", 1, "the id is already used by rule #1");
    let text = "rules:\n  - id: a\n    action: {x: 1, x: 2}\n";
    error_at(text, "x: 2", 0, "`x` is given twice in `rules[0].action`; keep one");
}

#[test]
fn other_shapes_are_errors_naming_the_rule() {
    error_at("rules:\n  - id: a\n    action: [1]\n", "[1]", 0, "rule \"a\": \"action\" must be an object");
    error_at("rules:\n  - id: a\n    when: 'true'\n", "id: a", 0, "rule \"a\" has no \"action\"");
    error_at("rules:\n  - when: 'true'\n    action: {}\n", "when", 0, "rule #1 has no \"id\"");
    error_at("rules:\n  - id: ''\n    action: {}\n", "''", 0, "\"id\" must be a non-empty string");
    error_at("rules:\n  - id: a\n    enabled: no\n    action: {}\n", "no", 0, "\"enabled\" must be true or false");
    error_at("rules:\n  - id: a\n    when: \n    action: {}\n", "when", 0, "\"when\" is empty");
    error_at("rules:\n  - id: a\n    when: [x]\n    action: {}\n", "[x]", 0, "must be an expression");
    error_at("rules:\n  - id: a\n    conditions: {field: x}\n    action: {}\n", "{field", 0, "must be a list of");
    error_at("rules: {a: 1}\n", "{a: 1}", 0, "\"rules\" must be a list of rules");
    error_at("- id: a\n", "-", 0, "a rule set is a mapping with `rules:`");
    error_at("version: 1\n", "version", 0, "has no \"rules\"");
    error_at("default: 3\nrules: []\n", "3", 0, "\"default\" must be an action");
    error_at("schema: {x: int}\nrules: []\n", "int", 0, "schema type of \"x\" must be one of");
    error_at("rules:\n  - id: a\n    action: !custom {x: 1}\n", "!custom", 0, "the tag `!custom` is not supported");
    assert!(errors("").iter().any(|e| e.2.contains("the rule set is empty")));
}

/// The `when:` error (an unknown function `lenght`) of `text` is at the `lenght` written in it.
fn when_error_at(text: &str) {
    error_at(text, "lenght", 0, "unknown function `lenght`; did you mean `len`?");
}

#[test]
fn errors_inside_when_are_at_their_character_however_the_scalar_is_written() {
    let action = "    action: {}\n";
    // plain
    when_error_at(&format!("rules:\n  - id: a\n    when: x == 1 && lenght(y) > 2\n{action}"));
    // single-quoted, with a doubled quote before the error
    when_error_at(&format!("rules:\n  - id: a\n    when: 'x == ''é'' && lenght(y) > 2'\n{action}"));
    // double-quoted, with escapes before the error
    when_error_at(&format!("rules:\n  - id: a\n    when: \"x == \\\"\\u00e9\\t\\\" && lenght(y) > 2\"\n{action}"));
    // plain and quoted over several lines (folded into spaces)
    when_error_at(&format!("rules:\n  - id: a\n    when: x == 1 &&\n      y == 2 &&\n      lenght(y) > 2\n{action}"));
    when_error_at(&format!("rules:\n  - id: a\n    when: \"x == 1 &&\n\n      lenght(y) > 2\"\n{action}"));
    // literal and folded blocks
    when_error_at(&format!("rules:\n  - id: a\n    when: |\n      x == 1 &&\n        lenght(y) > 2\n{action}"));
    when_error_at(&format!("rules:\n  - id: a\n    when: >-\n      x == 1\n      && lenght(y) > 2\n{action}"));
    // CRLF line ends
    when_error_at(&format!("rules:\r\n  - id: a\r\n    when: >\r\n      x == 1\r\n      && lenght(y) > 2\r\n{action}"));
    // the underline covers the whole name
    let text = format!("rules:\n  - id: a\n    when: 'lenght(y) > 2'\n{action}");
    let d = load(&text).unwrap_err();
    assert_eq!(d[0].width, 6, "{}", d[0]);
}

#[test]
fn errors_in_conditions_entries_are_at_the_piece_they_are_about() {
    // with a schema, an undeclared field is the field's fault
    let text = "schema: {amount: number}\nrules:\n  - id: a\n    conditions:\n      \
                - {field: amout, operator: gt, value: 5}\n    action: {}\n";
    error_at(text, "amout", 0, "did you mean `amount`?");
    // an undeclared parameter is the value's
    let text =
        "rules:\n  - id: a\n    conditions:\n      - {field: x, operator: gt, value: {param: limt}}\n    action: {}\n";
    error_at(text, "{param: limt}", 0, "limt");
}

// ---------------------------------------------------------------------------------------------
// Templates and fallbacks

const TEMPLATES: &str = r#"
rules:
  - id: cache
    when: kind == "cache"
    action: {type: cache, key: "rewrite_{{ h.x-query-hash }}", ttl: "{{ ttl }}", flags: "{{flags}}", note: "ttl={{ ttl }}; flags={{ flags }}"}
    fallback: {type: proxy, upstream: "fallback-{{ region }}"}
  - id: pinned
    when: kind == "pin"
    action: {upstream: "{{ h.x-upstream }}"}
  - id: last
    action: {type: default}
"#;

#[test]
fn templates_are_filled_per_decision_with_their_types() {
    let t = loaded(TEMPLATES);
    let a = answer(
        &t,
        &json!({"kind": "cache", "h": {"x-query-hash": "abc"}, "ttl": 15, "flags": [1, "a"], "region": "eu"}),
    );
    assert_eq!(a["rule_id"], "cache");
    assert_eq!(a["matched"], true);
    // a whole-string placeholder takes the value with its JSON type; inside text it is text
    assert_eq!(
        a["action"],
        json!({"type": "cache", "key": "rewrite_abc", "ttl": 15, "flags": [1, "a"], "note": "ttl=15; flags=[1,\"a\"]"})
    );
    assert_eq!(a["fallback"], json!({"type": "proxy", "upstream": "fallback-eu"}));
    assert!(a.get("degraded").is_none() && a.get("warnings").is_none(), "{a}");
}

#[test]
fn a_missing_value_gives_the_fallback_degraded_with_a_warning() {
    let t = loaded(TEMPLATES);
    for input in [
        json!({"kind": "cache", "h": {}, "ttl": 15, "flags": 1, "region": "eu"}),
        json!({"kind": "cache", "h": {"x-query-hash": null}, "ttl": 15, "flags": 1, "region": "eu"}),
        json!({"kind": "cache", "h": {"x-query-hash": "abc"}, "ttl": null, "flags": 1, "region": "eu"}),
    ] {
        let a = answer(&t, &input);
        assert_eq!(a["matched"], true, "{a}");
        assert_eq!(a["rule_id"], "cache");
        assert_eq!(a["action"], json!({"type": "proxy", "upstream": "fallback-eu"}));
        assert_eq!((a["degraded"].clone(), a["degraded_reason"].clone()), (json!(true), json!("template")));
        let warnings = a["warnings"].as_array().expect("a warning");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0]["rule_id"], "cache");
        assert!(warnings[0]["message"].as_str().unwrap().contains("answered with the rule's fallback"), "{a}");
    }
}

#[test]
fn a_missing_value_without_a_fallback_is_no_match_and_a_warning() {
    let t = loaded(TEMPLATES);
    let a = answer(&t, &json!({"kind": "pin", "h": {}}));
    assert_eq!(a["rule_id"], "last");
    assert_eq!(a["action"], json!({"type": "default"}));
    assert!(a.get("degraded").is_none(), "{a}");
    let w = &a["warnings"][0];
    assert_eq!(w["rule_id"], "pinned");
    assert!(w["message"].as_str().unwrap().contains("the rule has no fallback: it did not match"), "{a}");
    // a fallback that cannot be built either: no match
    let t = loaded(
        "rules:\n  - id: a\n    action: {k: \"{{ x }}\"}\n    fallback: {k: \"{{ y }}\"}\ndefault: {none: true}\n",
    );
    let a = answer(&t, &json!({}));
    assert_eq!((a["matched"].clone(), a["action"].clone()), (json!(false), json!({"none": true})), "{a}");
}

// ---------------------------------------------------------------------------------------------
// enabled, params, schema

#[test]
fn disabled_rules_never_answer() {
    let t = loaded("rules:\n  - id: off\n    enabled: false\n    action: {a: 1}\n  - id: on\n    enabled: true\n    action: {a: 2}\n");
    assert_eq!(answer(&t, &json!({}))["rule_id"], "on");
    assert!(!t.engine.outcome_enabled(0) && t.engine.outcome_enabled(1));
}

#[test]
fn params_are_read_in_conditions_and_in_when() {
    let text = "params:\n  limit: {value: 10, min: 1, max: 100, step: 1, tunable: true, description: cap}\n  \
                tiers: {value: [gold, vip]}\nrules:\n  - id: big\n    conditions:\n      \
                - {field: n, operator: gt, value: {param: limit}}\n      - {field: tier, operator: in, value: {param: tiers}}\n    \
                action: {big: true}\n  - id: small\n    when: n <= params.limit\n    action: {big: false}\n";
    let t = loaded(text);
    assert_eq!(answer(&t, &json!({"n": 11, "tier": "vip"}))["rule_id"], "big");
    assert_eq!(answer(&t, &json!({"n": 11, "tier": "basic"}))["matched"], false);
    assert_eq!(answer(&t, &json!({"n": 10, "tier": "vip"}))["rule_id"], "small");
    assert_eq!(t.params.as_ref().unwrap()["limit"]["value"], 10);
    // a parameter of the wrong type for its operator
    let text = "params:\n  tiers: {value: gold}\nrules:\n  - id: a\n    conditions:\n      \
                - {field: t, operator: in, value: {param: tiers}}\n    action: {}\n";
    error_at(text, "{param: tiers}", 0, "\"in\" needs a list, but parameter \"tiers\" is a string");
    error_at("params:\n  x: 3\nrules: []\n", "3", 0, "parameter \"x\" must be a mapping");
}

#[test]
fn a_schema_is_declared_and_checked_as_in_jev_tables() {
    let text = "schema:\n  n: number\n  headers.user-agent: string\nrules:\n  - id: a\n    conditions:\n      \
                - {field: headers.user-agent, operator: contains, value: Mobile}\n    action: {}\n";
    let t = loaded(text);
    assert_eq!(answer(&t, &json!({"headers": {"user-agent": "x Mobile"}}))["matched"], true);
    let e = t.decide(br#"{"n": "five"}"#, false).unwrap_err();
    assert!(e.to_string().contains("must be a number"), "{e}");
}

#[test]
fn top_level_names_and_descriptions_are_kept() {
    let t = loaded("version: 2\nname: other\ndescription: What it does\nrules: []\n");
    assert_eq!((t.declared_name.as_deref(), t.description.as_deref()), (Some("other"), Some("What it does")));
    assert_eq!(t.engine.outcome_count(), 0);
}

#[test]
fn anchors_and_aliases_share_actions() {
    let t = loaded(
        "rules:\n  - id: a\n    when: a == 1\n    action: &prod {type: proxy, upstream: prod}\n  - id: b\n    \
         when: a == 2\n    action: *prod\n",
    );
    assert_eq!(answer(&t, &json!({"a": 2}))["action"], json!({"type": "proxy", "upstream": "prod"}));
    // an error in an aliased value is shown at the alias
    let text = "rules:\n  - id: a\n    action: &bad [1]\n  - id: b\n    action: *bad\n";
    error_at(text, "*bad", 0, "rule \"b\": \"action\" must be an object");
}

// ---------------------------------------------------------------------------------------------
// Guards

#[test]
fn deep_nesting_and_alias_bombs_are_refused_at_once() {
    let started = std::time::Instant::now();
    let deep = format!("rules:\n  - id: a\n    action: {}\n", "[".repeat(100_000));
    let e = errors(&deep);
    assert!(e[0].2.contains("nested more than 128 levels deep"), "{e:?}");
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
    }
    bomb.push_str("rules: []\n");
    let e = errors(&bomb);
    assert!(e[0].2.contains("anchors and aliases here copy more than"), "{e:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn a_big_rule_set_loads_in_reasonable_time() {
    let mut text = String::from("rules:\n");
    for i in 0..20_000 {
        text.push_str(&format!(
            "  - id: r{i}\n    conditions:\n      - {{field: user.tier, operator: eq, value: t{i}}}\n      \
             - {{field: amount, operator: gt, value: {i}}}\n    action: {{n: {i}}}\n"
        ));
    }
    let started = std::time::Instant::now();
    let t = loaded(&text);
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    assert_eq!(answer(&t, &json!({"user": {"tier": "t19999"}, "amount": 1e9}))["rule_id"], "r19999");
}

/// The cases of each property: `PROPTEST_CASES`, else 2000.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

/// `text` written as a YAML scalar in the style `style` (0 plain, 1 single-quoted, 2 double-quoted,
/// 3 literal block, 4 folded block, 5 double-quoted over two lines), when that style can hold it.
fn styled(text: &str, style: u8) -> Option<String> {
    let blank_ends = text.starts_with([' ', '\t']) || text.ends_with([' ', '\t']);
    let one_line = !text.contains(['\n', '\r']);
    match style {
        0 => {
            let safe = one_line
                && !text.is_empty()
                && !blank_ends
                && !text.contains(": ")
                && !text.contains(" #")
                && !text.ends_with(':')
                && !text.contains('\t')
                && !text.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@`".contains(c));
            safe.then(|| text.to_string())
        }
        1 => one_line.then(|| format!("'{}'", text.replace('\'', "''"))),
        2 => Some(serde_json::to_string(text).unwrap()),
        3 | 4 => {
            let ok = !text.is_empty()
                && !text.starts_with([' ', '\t', '\n'])
                && !text.ends_with(['\n', ' ', '\t'])
                && !text.contains("\n\n")
                && !text.contains('\r')
                && !text.contains("\n ")
                && !text.contains("\n\t")
                && (style == 3 || one_line);
            let lines: Vec<String> = text.split('\n').map(|l| format!("  {l}")).collect();
            ok.then(|| format!("{}\n{}", if style == 3 { "|-" } else { ">-" }, lines.join("\n")))
        }
        _ => {
            // a line break between two words folds into the space that was there
            let (a, b) = text.split_once(' ')?;
            let ok = one_line && !a.is_empty() && !b.starts_with([' ', '\t']) && !a.ends_with(['\t']);
            ok.then(|| {
                let a = serde_json::to_string(a).unwrap();
                let b = serde_json::to_string(b).unwrap();
                format!("{}\n  {}", &a[..a.len() - 1], &b[1..])
            })
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// A scalar however it is written maps each of its characters back to the character (or the
    /// escape, or the line break folded into a space) it was read from.
    #[test]
    fn scalar_maps_lead_back_to_the_source(text in "[ -~é日\t\n]{0,40}", style in 0..6u8) {
        let Some(scalar) = styled(&text, style) else { return Ok(()) };
        let source = format!("w: {scalar}\nx: 1\n");
        let options = clef::yaml::Options { max_depth: 8, depth_hint: "", what: "a test" };
        let doc = match clef::yaml::parse(&source, &options) {
            Ok(doc) => doc,
            Err(e) => return Err(TestCaseError::fail(format!("{source:?}: {}", e.message))),
        };
        let root = doc.root.unwrap();
        let node = root.get("w").unwrap();
        let decoded = &node.scalar().unwrap().text;
        prop_assert_eq!(decoded.as_ref(), text.as_str(), "{:?}", source);
        let map = clef::yaml::scalar_map(&source, node);
        prop_assert!(map.is_some(), "no map for {:?}", source);
        let map = map.unwrap();
        prop_assert_eq!(map.len(), text.len() + 1);
        for (i, c) in text.char_indices() {
            let at = map[i];
            let src = source[at..].chars().next().unwrap();
            let fits = src == c || src == '\\' || (c == ' ' && src == '\n') || (c == '\'' && src == '\'');
            prop_assert!(fits, "{:?}: {:?} at {} maps to {:?} at {}", source, c, i, src, at);
        }
    }

    /// Any bytes as a rule set: an error or a table, never a panic.
    #[test]
    fn any_bytes_load_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = Table::from_bytes(Path::new("t.yaml"), &bytes, &Limits::default());
    }

    /// The example rule sets with bytes replaced, removed or inserted: an error or a table,
    /// never a panic; and every error has a position inside the file.
    #[test]
    fn mutated_rule_sets_load_or_fail_cleanly(
        which in 0..2usize,
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, prop::sample::select(
            vec![b' ', b'\n', b'\t', b':', b'-', b'{', b'}', b'[', b']', b'\'', b'"', b'\\', b'#', b'&', b'*', b'!',
                 b'|', b'>', b'a', b'1', b'.', b',', b'?', 0xC3, 0xA9]
        )), 1..6),
    ) {
        let name = ["search_rewrite.yaml", "backup_rules.yaml"][which];
        let mut bytes = std::fs::read(tables().join(name)).unwrap();
        for (at, kind, b) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 if i < bytes.len() => bytes[i] = b,
                1 if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.insert(i, b),
            }
        }
        if let Err(e) = Table::from_bytes(Path::new(name), &bytes, &Limits::default()) {
            let lines = bytes.split(|&b| b == b'\n').count();
            for d in &e.diagnostics {
                prop_assert!(d.line >= 1 && d.line <= lines.max(1), "{d}");
            }
        }
        // the same text as a config: an error or a config, never a panic
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = clef::config::parse_text("config.yaml", text);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The commands, on the example rule sets

fn tables() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tables")
}

fn clef(args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clef"));
    cmd.args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    cmd.stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() });
    let mut child = cmd.spawn().expect("run clef");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().expect("clef ran")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn clef_decide_answers_with_a_rule_set() {
    let table = tables().join("search_rewrite.yaml");
    let sample = tables().join("samples/search_rewrite.mobile_high_errors.json");
    let o = clef(&["decide", table.to_str().unwrap(), sample.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let d: Json = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["table"], "search_rewrite");
    assert_eq!(d["rule_id"], "search_rewrite_mobile");
    assert_eq!(d["action"]["key"], "qwen_rewrite_abc123");
    assert_eq!(d["action"]["error_rate"], 0.08);
    // degraded: the fallback, with the reason and a warning
    let sample = tables().join("samples/search_rewrite.mobile_no_hash.json");
    let o = clef(&["decide", table.to_str().unwrap(), sample.to_str().unwrap(), "--explain"], None);
    let d: Json = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["action"], json!({"type": "proxy", "upstream": "qwen-rewrite-fallback"}));
    assert_eq!((d["degraded"].clone(), d["degraded_reason"].clone()), (json!(true), json!("template")));
    assert!(d["trace"][1]["reason"].as_str().unwrap().contains("fallback"), "{d}");
    // the backup rule set answers anything
    let table = tables().join("backup_rules.yaml");
    let o = clef(&["decide", table.to_str().unwrap(), "-"], Some(b"{}"));
    let d: Json = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((d["matched"].clone(), d["rule_id"].clone()), (json!(true), json!("everything_else")));
}

#[test]
fn clef_test_runs_the_tests_beside_a_rule_set() {
    let o = clef(
        &[
            "test",
            tables().join("search_rewrite.yaml").to_str().unwrap(),
            tables().join("backup_rules.yaml").to_str().unwrap(),
            "--coverage",
        ],
        None,
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(out.contains("search_rewrite: 16 tests, 16 passed, 0 failed"), "{out}");
    assert!(out.contains("coverage: 6/6 enabled rules reached by a test"), "{out}");
    // a failing test of a rule set fails the run, with its diff
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.yaml"), "rules:\n  - id: a\n    when: n > 1\n    action: {big: true}\n").unwrap();
    std::fs::write(
        dir.path().join("r.tests.json"),
        r#"[{"name": "two is big", "input": {"n": 2}, "expect": {"action": {"big": false}}}]"#,
    )
    .unwrap();
    let o = clef(&["test", dir.path().join("r.yaml").to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("FAIL r: two is big"), "{}", text(&o.stdout));
}

#[test]
fn clef_check_tells_a_rule_set_from_a_config_by_its_rules_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tables")).unwrap();
    // a rule set named config.yaml
    let rules = dir.path().join("config.yaml");
    std::fs::write(&rules, "# the rules of the gate\nrules:\n  - id: all\n    action: {ok: true}\n").unwrap();
    let o = clef(&["check", rules.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("ok (ruleset table \"config\", 1 rules"), "{}", text(&o.stdout));
    // a broken one is still a rule set: its problem is a rule set's
    std::fs::write(&rules, "rules:\n  - id: all\n    acton: {ok: true}\n").unwrap();
    let o = clef(&["check", rules.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr)
            .contains("config.yaml:3:5: error: rule \"all\": unknown key \"acton\"; did you mean \"action\"?"),
        "{}",
        text(&o.stderr)
    );
    // a syntax error after the `rules:` key too
    std::fs::write(&rules, "rules:\n  - id: all\n    action: {ok: true\n").unwrap();
    let o = clef(&["check", rules.to_str().unwrap()], None);
    assert!(text(&o.stderr).contains("config.yaml:3:13: error: this is not valid YAML"), "{}", text(&o.stderr));
    // a `rules` key that is not at the top level does not make a rule set
    let config = dir.path().join("other.yaml");
    std::fs::write(&config, "server:\n  port: 8080\ntuning:\n  rules: 1\n").unwrap();
    let o = clef(&["check", config.to_str().unwrap()], None);
    // checked as a config: the nested key is a config's problem, not a rule set's
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("other.yaml:4:3: error: unknown key `rules` in `tuning`"), "{}", text(&o.stderr));
    std::fs::write(&config, "server:\n  port: 8080\ntuning:\n  traffic: 0.1\n").unwrap();
    let o = clef(&["check", config.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("other.yaml: ok (config)"), "{}", text(&o.stdout));
    // the examples, with their tests files
    let o = clef(
        &[
            "check",
            tables().join("search_rewrite.yaml").to_str().unwrap(),
            tables().join("backup_rules.tests.json").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("search_rewrite.tests.json: ok (16 tests for table \"search_rewrite\")"), "{out}");
    assert!(out.contains("backup_rules.tests.json: ok (11 tests for table \"backup_rules\")"), "{out}");
}
