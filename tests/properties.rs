//! Property tests: the optimized path (compiler, folding, sets, memos, pattern
//! groups, rule index) against the plain reference evaluator, on generated
//! tables and inputs; and "never panics" for the parsers and loaders.

use std::path::Path;

use clef::expr::{Env, Expression};
use clef::table::{Limits, Table};
use proptest::prelude::*;
use proptest::test_runner::Config;

const FIELDS: &[&str] = &["a", "b", "s", "n", "flag", "obj.x", "obj.y", "items[0]", "items[-1]", "tags"];

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (-3i64..12).prop_map(|i| i.to_string()),
        Just("9223372036854775807".to_string()),
        prop::sample::select(vec!["0.5", "1.5", "2.0", "1e3", "-0.0"]).prop_map(|s| s.to_string()),
        prop::sample::select(vec!["\"gold\"", "\"a\"", "\"\"", "\"x y\"", "\"GOLD\"", "'b'"])
            .prop_map(|s| s.to_string()),
        prop::sample::select(vec!["true", "false", "nil"]).prop_map(|s| s.to_string()),
    ]
}

fn field() -> impl Strategy<Value = String> {
    prop::sample::select(FIELDS.to_vec()).prop_map(|s| s.to_string())
}

fn list() -> impl Strategy<Value = String> {
    prop::collection::vec(literal(), 0..5).prop_map(|items| format!("[{}]", items.join(", ")))
}

/// Terms the rule index understands, and some it does not.
fn term() -> impl Strategy<Value = String> {
    prop_oneof![
        (field(), prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="]), literal())
            .prop_map(|(f, op, l)| format!("{f} {op} {l}")),
        (literal(), prop::sample::select(vec!["==", "<", ">="]), field())
            .prop_map(|(l, op, f)| format!("{l} {op} {f}")),
        (field(), prop::sample::select(vec!["in", "not in"]), list()).prop_map(|(f, op, l)| format!("{f} {op} {l}")),
        field().prop_map(|f| f.to_string()),
        field().prop_map(|f| format!("!{f}")),
        (field(), literal(), literal()).prop_map(|(f, x, y)| format!("({f} == {x} || {f} == {y})")),
        (
            field(),
            prop::sample::select(vec!["contains", "startsWith", "endsWith"]),
            prop::sample::select(vec!["\"a\"", "\"go\"", "\"ld\"", "\"\""])
        )
            .prop_map(|(f, op, s)| format!("{f} {op} {s}")),
        (field(), prop::sample::select(vec!["\"^g\"", "\"o+\"", "\"[0-9]\"", "\"(?i)GOLD\""]))
            .prop_map(|(f, re)| format!("{f} matches {re}")),
        field().prop_map(|f| format!("lower({f}) contains \"g\"")),
        field().prop_map(|f| format!("len({f}) > 1")),
        (field(), field()).prop_map(|(f, g)| format!("{f} == {g}")),
    ]
}

/// General expressions, for conditions the index cannot use.
fn expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![literal(), field()];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), prop::sample::select(vec!["+", "-", "*", "/", "%", "**", "??"]), inner.clone())
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (inner.clone(), prop::sample::select(vec!["==", "!=", "<", ">=", "in", "contains"]), inner.clone())
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (inner.clone(), prop::sample::select(vec!["&&", "||"]), inner.clone())
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            inner.clone().prop_map(|a| format!("!({a})")),
            inner.clone().prop_map(|a| format!("-({a})")),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| format!("({c} ? {a} : {b})")),
            (
                prop::sample::select(vec!["len", "abs", "lower", "string", "int", "float", "round", "upper", "trim"]),
                inner.clone()
            )
                .prop_map(|(f, a)| format!("{f}({a})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("max({a}, {b})")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("[{a}, {b}]")),
        ]
    })
}

fn condition() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(term(), 1..5).prop_map(|t| t.join(" && ")),
        1 => expr(),
        1 => (prop::collection::vec(term(), 1..3), expr()).prop_map(|(t, e)| format!("{} && {e}", t.join(" && "))),
    ]
}

/// The same rules as a YAML rule set: each condition a `when:`, single-quoted or (as JSON, whose
/// escapes YAML reads the same) double-quoted, alternately; the action in flow style.
fn yaml_of(table_json: &str) -> String {
    let table: serde_json::Value = serde_json::from_str(table_json).expect("a generated table");
    let mut out = String::from("default: {n: -1}\nrules:\n");
    for (i, rule) in table["rules"].as_array().into_iter().flatten().enumerate() {
        let cond = rule["condition"].as_str().unwrap_or("true");
        let when =
            if i % 2 == 0 { format!("'{}'", cond.replace('\'', "''")) } else { serde_json::to_string(cond).unwrap() };
        out.push_str(&format!(
            "  - id: {}\n    when: {when}\n    action: {{n: {}}}\n    enabled: {}\n",
            rule["id"].as_str().unwrap_or("r"),
            rule["action"]["n"],
            rule["enabled"]
        ));
    }
    out
}

fn table() -> impl Strategy<Value = String> {
    prop::collection::vec((condition(), prop::bool::weighted(0.9)), 1..40).prop_map(|rules| {
        // Keep the conditions that load: a generated `"a" + 1` is a (tested) load error, not the point here.
        let rules: Vec<serde_json::Value> = rules
            .into_iter()
            .filter(|(cond, _)| Expression::compile(cond, &Env::default(), true).is_ok())
            .enumerate()
            .map(|(i, (cond, enabled))| {
                serde_json::json!({"id": format!("r{i}"), "condition": cond, "action": {"n": i}, "enabled": enabled})
            })
            .collect();
        serde_json::json!({"default": {"n": -1}, "rules": rules}).to_string()
    })
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let scalar = prop_oneof![
        (-3i64..12).prop_map(serde_json::Value::from),
        Just(serde_json::Value::from(i64::MAX)),
        prop::sample::select(vec![0.5, 1.5, 2.0, 1000.0, -0.0]).prop_map(serde_json::Value::from),
        prop::sample::select(vec!["gold", "a", "", "x y", "GOLD", "b", "golden", "9"])
            .prop_map(serde_json::Value::from),
        any::<bool>().prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
    ];
    scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
            prop::collection::btree_map(prop::sample::select(vec!["x", "y", "z"]).prop_map(String::from), inner, 0..3)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn input() -> impl Strategy<Value = String> {
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "s", "n", "flag", "obj", "items", "tags", "other"]).prop_map(String::from),
        json_value(),
        0..9,
    )
    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()).to_string())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

proptest! {
    #![proptest_config(Config { cases: cases(), max_global_rejects: 1_000_000, ..Config::default() })]

    /// Same matched rule (hence action) as a top-to-bottom scan with the reference
    /// evaluator, and every warning the optimized path gives is one the scan gives too.
    #[test]
    fn optimized_engine_agrees_with_reference(table_json in table(), inputs in prop::collection::vec(input(), 1..6)) {
        let loaded = Table::from_bytes(Path::new("gen.json"), table_json.as_bytes(), &Limits::default());
        let table = loaded.expect("conditions that load alone load together");
        for body in &inputs {
            let fast = table.decide(body.as_bytes(), false).expect("valid input");
            let slow = table.decide_reference(body.as_bytes()).expect("valid input");
            prop_assert_eq!(fast.rule, slow.rule, "input {} table {}", body, table_json);
            for w in &fast.warnings {
                prop_assert!(slow.warnings.contains(w), "warning {:?} not in reference {:?}; input {} table {}", w, slow.warnings, body, table_json);
            }
            let explained = table.decide(body.as_bytes(), true).expect("valid input");
            prop_assert_eq!(explained.rule, fast.rule);
        }
        // the same rules written as a YAML rule set decide the same, warnings included
        let yaml = yaml_of(&table_json);
        let rule_set = Table::from_bytes(Path::new("gen.yaml"), yaml.as_bytes(), &Limits::default());
        let rule_set = rule_set.unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        for body in &inputs {
            let jev = table.decide(body.as_bytes(), false).expect("valid input");
            let yaml_decision = rule_set.decide(body.as_bytes(), false).expect("valid input");
            prop_assert_eq!(jev, yaml_decision, "input {} rule set {}", body, yaml);
        }
    }
}

proptest! {
    #![proptest_config(Config { cases: cases() / 4, ..Config::default() })]

    /// Any text as a condition: an error or a table, never a panic.
    #[test]
    fn any_condition_text_loads_or_fails_cleanly(cond in "[ -~]{0,60}|[a-z0-9_.()\\[\\]\"'!&|<>=+*/%?:~, -]{0,80}") {
        let table = serde_json::json!([{"id": "r", "condition": cond, "action": {}}]).to_string();
        if let Ok(t) = Table::from_bytes(Path::new("t.json"), table.as_bytes(), &Limits::default()) {
            let _ = t.decide(br#"{"a": 1, "b": "x", "items": [1, 2]}"#, true);
        }
    }

    /// Any bytes as a table file or as an input: an error or a result, never a panic.
    #[test]
    fn any_bytes_as_table_or_input(bytes in prop::collection::vec(any::<u8>(), 0..200), text in "[\\[\\]{}\",:0-9a-z ]{0,120}") {
        let _ = Table::from_bytes(Path::new("t.json"), &bytes, &Limits::default());
        let _ = Table::from_bytes(Path::new("t.json"), text.as_bytes(), &Limits::default());
        let _ = Table::from_bytes(Path::new("t.yaml"), &bytes, &Limits::default());
        let _ = Table::from_bytes(Path::new("t.yaml"), text.as_bytes(), &Limits::default());
        let t = Table::from_bytes(Path::new("t.json"), br#"[{"id": "r", "condition": "a.b[0] > 1 || s matches \"x\"", "action": {}}]"#, &Limits::default()).unwrap();
        let _ = t.decide(&bytes, true);
        let _ = t.decide(text.as_bytes(), true);
    }
}
