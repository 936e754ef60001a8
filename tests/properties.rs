//! Property tests: the optimized path (compiler, folding, sets, memos, pattern
//! groups, rule index) against the plain reference evaluator, on generated
//! tables and inputs; and "never panics" for the parsers and loaders.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;

use clef::expr::{Env, Expression};
use clef::table::{Decision, Limits, Table};
use proptest::prelude::*;
use proptest::test_runner::Config;

const FIELDS: &[&str] = &[
    "a",
    "b",
    "s",
    "n",
    "flag",
    "obj.x",
    "obj.y",
    "obj.z.w",
    "obj[\"x\"]",
    "items[0]",
    "items[-1]",
    "items[1].x",
    "items[-2].y",
    "tags",
    "headers[\"x-k\"]",
];

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (-3i64..12).prop_map(|i| i.to_string()),
        prop::sample::select(vec![
            "9223372036854775807",
            "9007199254740992",
            "9007199254740993",
            "2147483648",
            "4611686018427387904",
        ])
        .prop_map(|s| s.to_string()),
        prop::sample::select(vec![
            "0.5",
            "1.5",
            "2.0",
            "1e3",
            "-0.0",
            "9007199254740992.0",
            "0.1",
            "0.30000000000000004"
        ])
        .prop_map(|s| s.to_string()),
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

/// Regexes and substrings tested on the same subjects, so that the tests of one subject are
/// answered together (a literal prefilter and a set): with literals, case-insensitive ones
/// (where `k` also matches the Kelvin sign), and none at all.
fn pattern() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "\"^g\"",
        "\"o+\"",
        "\"[0-9]\"",
        "\"(?i)GOLD\"",
        "\"(?i)k\"",
        "\"(?i)s\\\\b\"",
        "\"go(ld|lden)\"",
        "\"\\\\d+(\\\\.\\\\d+)?\\\\s*元\"",
        "\"t\\\\.me/\"",
        "\"(微信|wechat)[0-9]*\"",
        "\"[a-z]{3,}\"",
        "\"x y$\"",
        "\"^$\"",
        "\"\\\\bg\"",
        "\"é|ÉCOLE\"",
    ])
    .prop_map(|s| s.to_string())
}

fn needle() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["\"a\"", "\"go\"", "\"ld\"", "\"\"", "\"元\"", "\"K\"", "\"x y\""])
        .prop_map(|s| s.to_string())
}

fn subject() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["s", "s", "lower(s)", "a", "obj.x", "trim(s ?? \"\")"]).prop_map(|s| s.to_string())
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
        (field(), prop::sample::select(vec!["== nil", "!= nil"])).prop_map(|(f, t)| format!("{f} {t}")),
        (field(), literal(), literal()).prop_map(|(f, x, y)| format!("({f} == {x} || {f} == {y})")),
        (field(), literal(), prop::sample::select(vec!["<", "==", ">="]), literal())
            .prop_map(|(f, d, op, l)| format!("({f} ?? {d}) {op} {l}")),
        (
            prop::sample::select(vec!["\"x\"", "\"y\"", "\"z\"", "\"x-k\"", "1"]),
            prop::sample::select(vec!["in", "not in"]),
            prop::sample::select(vec!["obj", "headers", "tags", "items[0]", "s"])
        )
            .prop_map(|(k, op, f)| format!("{k} {op} {f}")),
        (subject(), prop::sample::select(vec!["contains", "startsWith", "endsWith"]), needle())
            .prop_map(|(f, op, s)| format!("{f} {op} {s}")),
        (subject(), needle()).prop_map(|(f, s)| format!("!({f} contains {s})")),
        (subject(), prop::sample::select(vec!["matches", "~", "!~"]), pattern())
            .prop_map(|(f, op, re)| format!("{f} {op} {re}")),
        field().prop_map(|f| format!("lower({f}) contains \"g\"")),
        field().prop_map(|f| format!("len({f}) > 1")),
        field().prop_map(|f| format!("len(trim({f})) < 3")),
        (field(), field()).prop_map(|(f, g)| format!("{f} == {g}")),
        (field(), field(), literal()).prop_map(|(f, g, l)| format!("({f} ?? {g}) < {l}")),
        (field(), field(), -3i64..40).prop_map(|(f, g, l)| format!("len({f}) * 10 + {g} < {l}")),
        (field(), field(), field(), -3i64..40).prop_map(|(f, g, h, l)| format!("{f} - {g} * {h} > {l}")),
        (field(), field(), literal(), literal()).prop_map(|(c, f, x, y)| format!("({c} ? {f} > {x} : {f} < {y})")),
    ]
}

fn conjunction() -> impl Strategy<Value = String> {
    prop::collection::vec(term(), 1..4).prop_map(|t| t.join(" && "))
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
        2 => (conjunction(), conjunction()).prop_map(|(a, b)| format!("({a}) || ({b})")),
        1 => (conjunction(), conjunction()).prop_map(|(a, b)| format!("!({a}) && {b}")),
        1 => (conjunction(), conjunction()).prop_map(|(a, b)| format!("not (({a}) || {b})")),
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
        3 => (-3i64..12).prop_map(serde_json::Value::from),
        2 => prop::sample::select(vec![i64::MAX, i64::MIN, 9_007_199_254_740_992, 9_007_199_254_740_993, 2_147_483_648])
            .prop_map(serde_json::Value::from),
        1 => prop::sample::select(vec![0.5, 1.5, 2.0, 1000.0, -0.0, 0.1, 0.30000000000000004, 9_007_199_254_740_992.0])
            .prop_map(serde_json::Value::from),
        3 => prop::sample::select(vec![
            "gold",
            "a",
            "",
            "x y",
            "GOLD",
            "b",
            "golden",
            "9",
            "x",
            "\u{212a}elvin",
            "ſ ",
            "3.5 元",
            "t.me/abc",
            "加微信123",
            "ÉCOLE",
            " go ",
            "é",
        ])
        .prop_map(serde_json::Value::from),
        1 => any::<bool>().prop_map(serde_json::Value::from),
        1 => Just(serde_json::Value::Null),
    ];
    scalar.prop_recursive(3, 10, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec!["x", "y", "z", "w", "x-k"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn input() -> impl Strategy<Value = String> {
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "s", "n", "flag", "obj", "items", "tags", "headers", "other"])
            .prop_map(String::from),
        json_value(),
        0..10,
    )
    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()).to_string())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

proptest! {
    #![proptest_config(Config { cases: cases(), max_global_rejects: 1_000_000, ..Config::default() })]

    /// The same decision as a top-to-bottom scan with the reference evaluator — matched rule,
    /// action, degraded answer and every warning, in order — with and without explain.
    #[test]
    fn optimized_engine_agrees_with_reference(table_json in table(), inputs in prop::collection::vec(input(), 1..6)) {
        let loaded = Table::from_bytes(Path::new("gen.json"), table_json.as_bytes(), &Limits::default());
        let table = loaded.expect("conditions that load alone load together");
        for body in &inputs {
            let slow = table.decide_reference(body.as_bytes()).expect("valid input");
            for explain in [false, true] {
                let fast = table.decide(body.as_bytes(), explain).expect("valid input");
                prop_assert_eq!(fast.rule, slow.rule, "explain {} input {} table {}", explain, body, table_json);
                prop_assert_eq!(table.outcome_id(&fast), table.outcome_id(&slow));
                prop_assert_eq!(table.action_json(&fast), table.action_json(&slow));
                prop_assert_eq!(fast.degraded_reason, slow.degraded_reason);
                prop_assert_eq!(&fast.warnings, &slow.warnings, "explain {} input {} table {}", explain, body, table_json);
                same_trace(&fast, &slow)?;
            }
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

/// The fields a `conditions:` entry reads: dotted paths, one with a `-`, over the keys `input`
/// gives values (often absent or null, sometimes of another type than the operator takes).
const ENTRY_FIELDS: &[&str] = &["a", "s", "n", "tags", "obj.x", "obj.x-k", "obj.z.w", "headers.x-k"];

/// One `conditions:` entry: `(field, operator, value as YAML)`.
type Entry = (String, String, String);

/// One `conditions:` entry, the value fitting the operator.
fn entry() -> impl Strategy<Value = Entry> {
    let field = prop::sample::select(ENTRY_FIELDS.to_vec()).prop_map(String::from);
    let ordered = prop::sample::select(vec!["5", "0.5", "-3", "gold", "''", "9007199254740993"]);
    let text = prop::sample::select(vec!["a", "go", "''", "gold", "'x y'"]);
    let regex = prop::sample::select(vec!["'^g'", "'(?i)GOLD'", "'[0-9]'", "'x y$'", "'^$'"]);
    let list = prop::sample::select(vec!["[4, 5]", "[gold, a, null]", "[]", "[0.5, '9']"]);
    let any = prop::sample::select(vec!["5", "gold", "null", "[5]", "true", "0.5"]);
    prop_oneof![
        (field.clone(), prop::sample::select(vec!["gt", "gte", "lt", "lte"]), ordered).prop_map(|(f, o, v)| (
            f,
            o.to_string(),
            v.to_string()
        )),
        (field.clone(), prop::sample::select(vec!["contains", "not_contains", "starts_with", "ends_with"]), text)
            .prop_map(|(f, o, v)| (f, o.to_string(), v.to_string())),
        (field.clone(), regex).prop_map(|(f, v)| (f, "matches".to_string(), v.to_string())),
        (field.clone(), prop::sample::select(vec!["in", "not_in"]), list).prop_map(|(f, o, v)| (
            f,
            o.to_string(),
            v.to_string()
        )),
        (field.clone(), prop::sample::select(vec!["eq", "ne"]), any).prop_map(|(f, o, v)| (
            f,
            o.to_string(),
            v.to_string()
        )),
        (field, prop::sample::select(vec!["exists", "not_exists"])).prop_map(|(f, o)| (
            f,
            o.to_string(),
            String::new()
        )),
    ]
}

/// Rules of `conditions:` entries, some with a `when:` beside them, as a YAML rule set.
fn entries_rule_set() -> impl Strategy<Value = (String, Vec<Vec<Entry>>)> {
    prop::collection::vec((prop::collection::vec(entry(), 1..4), prop::option::weighted(0.2, term())), 1..20).prop_map(
        |rules| {
            let mut yaml = String::from("default: {n: -1}\nrules:\n");
            let mut entries = Vec::new();
            for (i, (list, when)) in rules.into_iter().enumerate() {
                yaml.push_str(&format!("  - id: r{i}\n    action: {{n: {i}}}\n    conditions:\n"));
                for (field, operator, value) in &list {
                    let value = if value.is_empty() { String::new() } else { format!(", value: {value}") };
                    yaml.push_str(&format!("      - {{field: {field}, operator: {operator}{value}}}\n"));
                }
                if let Some(when) = when.filter(|w| Expression::compile(w, &Env::default(), true).is_ok()) {
                    yaml.push_str(&format!("    when: '{}'\n", when.replace('\'', "''")));
                }
                entries.push(list);
            }
            (yaml, entries)
        },
    )
}

/// Whether the dotted `path` reads nil from `input` without an error: it is absent or null, or
/// a step on the way is (a step into a value that is not an object is an error, not nil).
fn reads_nil(input: &serde_json::Value, path: &str) -> bool {
    let mut at = input;
    for step in path.split('.') {
        match at {
            serde_json::Value::Null => return true,
            serde_json::Value::Object(members) => match members.get(step) {
                Some(v) => at = v,
                None => return true,
            },
            _ => return false,
        }
    }
    at.is_null()
}

proptest! {
    #![proptest_config(Config { cases: cases() / 4, max_global_rejects: 1_000_000, ..Config::default() })]

    /// YAML `conditions:` entries on inputs whose fields are often absent or null: the indexed
    /// path decides as the reference scan, warnings included; and (SPEC §4.2, revision 4) an
    /// entry of `gt gte lt lte contains not_contains starts_with ends_with matches` on a field
    /// that reads nil makes its rule false, and a rule all of whose entries read nil (and that
    /// has no `when:`) never warns.
    #[test]
    fn conditions_entries_are_quiet_on_absent_fields_and_agree_with_reference(
        (yaml, entries) in entries_rule_set(),
        inputs in prop::collection::vec(input(), 1..6),
    ) {
        let table = Table::from_bytes(Path::new("gen.yaml"), yaml.as_bytes(), &Limits::default())
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let has_when: Vec<bool> = yaml.split("  - id: ").skip(1).map(|r| r.contains("    when: ")).collect();
        for body in &inputs {
            let slow = table.decide_reference(body.as_bytes()).expect("valid input");
            for explain in [false, true] {
                let fast = table.decide(body.as_bytes(), explain).expect("valid input");
                prop_assert_eq!(fast.rule, slow.rule, "explain {} input {} rule set {}", explain, body, yaml);
                prop_assert_eq!(&fast.warnings, &slow.warnings, "explain {} input {} rule set {}", explain, body, yaml);
                same_trace(&fast, &slow)?;
            }
            let input: serde_json::Value = serde_json::from_str(body).expect("JSON");
            let guarded = ["gt", "gte", "lt", "lte", "contains", "not_contains", "starts_with", "ends_with", "matches"];
            if let Some(r) = slow.rule {
                let absent = entries[r].iter().find(|(f, o, _)| guarded.contains(&o.as_str()) && reads_nil(&input, f));
                prop_assert!(absent.is_none(), "rule r{} matched with {:?} on {} in\n{}", r, absent, body, yaml);
            }
            for w in &slow.warnings {
                let r = w.rule;
                let all_nil = entries[r].iter().all(|(f, _, _)| reads_nil(&input, f));
                prop_assert!(has_when[r] || !all_nil, "{:?} on {} in\n{}", w, body, yaml);
            }
        }
    }
}

/// A test of a message, mostly one the literal pass of its subject's pattern group answers:
/// regexes with and without literals, substrings, on the message and on `lower(message)`.
fn message_test() -> impl Strategy<Value = String> {
    let subject = prop::sample::select(vec!["s", "s", "s", "lower(s)"]);
    let regex = prop::sample::select(vec![
        "\"t\\\\.me/[a-z]+\"",
        "\"(微信|wechat)[0-9]+\"",
        "\"(?i)free\\\\s+(coins|gold)\"",
        "\"(?i)\\\\bgo\\\\b\"",
        "\"\\\\d+(\\\\.\\\\d+)?\\\\s*元\"",
        "\"casino|bitcoin\"",
        "\"[A-Z]{4,}\"",
        "\"^$\"",
        "\"(?i)k\"",
        "\"x y$\"",
        // several required sets (each part's literal must occur), ASCII case folded
        "\"\\\\bfree\\\\b.{0,12}\\\\bgold\\\\b\"",
        "\"(?i)\\\\b(casino|bitcoin|jackpot)\\\\b\"",
        "\"(?i)fr[e3]{2}\\\\s*c[o0]ins\"",
        "\"(?i)see\\\\s+(?:\\\\w+\\\\s+){0,2}now\"",
        // classes a non-ASCII character is in or not (the table's alphabet keeps them apart)
        "\"(?i)stra(ss|ß)e\"",
        "\"^.{2,5}$\"",
        "\"\\\\d{3}\"",
        "\"\\\\w+\\\\W+\\\\w+\"",
        "\"[^a-z ]{2}\"",
    ]);
    let needle = prop::sample::select(vec!["\"hello\"", "\"元\"", "\"gold\"", "\"x y\"", "\"casino\"", "\"\""]);
    prop_oneof![
        (subject.clone(), prop::sample::select(vec!["~", "matches", "!~"]), regex)
            .prop_map(|(s, op, r)| format!("{s} {op} {r}")),
        (subject.clone(), needle.clone()).prop_map(|(s, n)| format!("{s} contains {n}")),
        (subject, needle).prop_map(|(s, n)| format!("!({s} contains {n})")),
    ]
}

/// Conditions of message tests in `&&`, `||` and `!`, with a few other terms beside them.
fn message_condition() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        4 => message_test(),
        1 => (message_test(), message_test()).prop_map(|(a, b)| format!("({a} || {b})")),
        1 => (message_test(), message_test()).prop_map(|(a, b)| format!("!({a} && {b})")),
        1 => term(),
    ];
    prop_oneof![
        3 => prop::collection::vec(part.clone(), 1..4).prop_map(|t| t.join(" && ")),
        2 => prop::collection::vec(part.clone(), 2..4).prop_map(|t| t.join(" || ")),
        1 => (part.clone(), part).prop_map(|(a, b)| format!("!({a} || {b})")),
    ]
}

fn message_table() -> impl Strategy<Value = String> {
    prop::collection::vec(message_condition(), 4..30).prop_map(|conditions| {
        let rules: Vec<serde_json::Value> = conditions
            .into_iter()
            .filter(|cond| Expression::compile(cond, &Env::default(), true).is_ok())
            .enumerate()
            .map(|(i, cond)| serde_json::json!({"id": format!("r{i}"), "condition": cond, "action": {"n": i}}))
            .collect();
        serde_json::json!({"default": {"n": -1}, "rules": rules}).to_string()
    })
}

fn message_input() -> impl Strategy<Value = String> {
    let text = prop::sample::select(vec![
        "hello",
        "see t.me/abc now",
        "t.me/",
        "加wechat123",
        "微信",
        "FREE  Coins",
        "free gold",
        "go, gopher",
        "3.5 元 元旦",
        "元旦快乐",
        "CASINO bitcoin",
        "\u{212a}elvin",
        "x y",
        "",
        "SHOUT",
        "Jackpot",
        "free the gold",
        "fr33 C0ins",
        "ſee it now",
        "gold free",
        "straße",
        "STRASSE",
        "١٢٣",
        "é\u{a0}ü",
        "🎉",
    ]);
    prop_oneof![
        4 => (prop::collection::vec(text, 0..4), -1i64..4).prop_map(|(parts, n)| {
            serde_json::json!({"s": parts.join(" "), "n": n, "a": parts.len()}).to_string()
        }),
        1 => input(),
    ]
}

proptest! {
    #![proptest_config(Config { cases: cases() / 4, max_global_rejects: 1_000_000, ..Config::default() })]

    /// Tables of many regex and substring tests on one message (so that their pattern groups'
    /// literal passes index the rules): the decisions and warnings of the reference scan.
    #[test]
    fn pattern_groups_decide_as_the_reference(table_json in message_table(), inputs in prop::collection::vec(message_input(), 1..6)) {
        decides_as_the_reference(&table_json, &inputs)?;
    }
}

/// Nested paths of a policy input: 3-4 deep, hyphenated keys, negative indexes.
const POLICY_FIELDS: &[&str] = &[
    "req.http[\"x-k\"]",
    "req.http.hdr[\"user-agent\"]",
    "req.geo[\"cc-code\"].x",
    "acct[\"bill-info\"].seats",
    "acct[\"bill-info\"].paid",
    "acct.hist[-1].st",
    "acct.hist[0][\"age-m\"]",
    "acct.roles[-2]",
    "n",
];

fn policy_field() -> impl Strategy<Value = String> {
    prop::sample::select(POLICY_FIELDS.to_vec()).prop_map(String::from)
}

/// The tests of a policy table: path tests and tests no index can use (arithmetic on both
/// sides, `??` of two fields, ternaries, string functions, presence), the kinds a table repeats.
fn policy_term() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (policy_field(), prop::sample::select(vec!["==", "!=", "<", ">="]), literal())
            .prop_map(|(f, op, l)| format!("{f} {op} {l}")),
        1 => (policy_field(), prop::sample::select(vec!["in", "not in"]), list()).prop_map(|(f, op, l)| format!("{f} {op} {l}")),
        1 => (policy_field(), prop::sample::select(vec!["== nil", "!= nil"])).prop_map(|(f, t)| format!("{f} {t}")),
        1 => (prop::sample::select(vec!["\"x-k\"", "\"seats\"", "\"hdr\""]), prop::sample::select(vec!["req.http", "acct[\"bill-info\"]", "acct.hist[-1]"]))
            .prop_map(|(k, o)| format!("{k} in {o}")),
        1 => (policy_field(), -2i64..6, policy_field()).prop_map(|(f, d, g)| format!("{f} + {d} <= {g}")),
        1 => (policy_field(), policy_field(), literal()).prop_map(|(f, g, l)| format!("({f} ?? {g}) < {l}")),
        1 => (policy_field(), policy_field(), literal(), literal())
            .prop_map(|(c, f, x, y)| format!("({c} ? {f} > {x} : {f} < {y})")),
        // branches that are not tests (a field of any type) or are connectives themselves
        1 => (policy_field(), policy_field(), policy_field(), literal())
            .prop_map(|(c, f, g, x)| format!("({c} ? {f} : {g} == {x} || !{f})")),
        1 => (policy_field(), needle()).prop_map(|(f, s)| format!("lower({f}) contains {s}")),
        1 => (policy_field(), needle()).prop_map(|(f, s)| format!("upper(trim({f})) startsWith {s}")),
        1 => (policy_field(), pattern()).prop_map(|(f, re)| format!("{f} matches {re}")),
        1 => policy_field().prop_map(|f| format!("!{f}")),
    ]
}

/// A policy table: rules written from a small pool of tests, so that most tests occur in many
/// rules (answered once per decision), as ORs of conjunctions and negations.
fn policy_table() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(policy_term(), 2..12),
        prop::collection::vec((0u8..4, prop::collection::vec(any::<prop::sample::Index>(), 1..5)), 1..40),
    )
        .prop_map(|(pool, rules)| {
            let rules: Vec<serde_json::Value> = rules
                .into_iter()
                .map(|(shape, picks)| {
                    let terms: Vec<&str> = picks.iter().map(|i| i.get(&pool).as_str()).collect();
                    let (head, tail) = terms.split_at(terms.len() / 2);
                    match (shape, head.is_empty()) {
                        (0, false) => format!("({}) || ({})", head.join(" && "), tail.join(" && ")),
                        (1, false) => format!("!({}) && {}", head.join(" && "), tail.join(" && ")),
                        (2, false) => format!("{} && ({})", tail.join(" && "), head.join(" || ")),
                        _ => terms.join(" && "),
                    }
                })
                .filter(|cond| Expression::compile(cond, &Env::default(), true).is_ok())
                .enumerate()
                .map(|(i, cond)| serde_json::json!({"id": format!("r{i}"), "condition": cond, "action": {"n": i}}))
                .collect();
            serde_json::json!({"default": {"n": -1}, "rules": rules}).to_string()
        })
}

/// Policy inputs: the nested objects the paths read, their leaves of any type (often absent).
fn policy_input() -> impl Strategy<Value = String> {
    let leaf = || prop::option::of(json_value());
    let leaves = (leaf(), leaf(), leaf(), leaf(), leaf(), leaf(), leaf(), leaf(), leaf());
    (leaves, any::<bool>()).prop_map(|((xk, ua, cc, seats, paid, st, age, role, n), no_bill)| {
        let mut v = serde_json::json!({
            "req": {"http": {"x-k": xk, "hdr": {"user-agent": ua}}, "geo": {"cc-code": {"x": cc}}},
            "acct": {"bill-info": {"seats": seats, "paid": paid},
                     "hist": [{"age-m": age}, {"st": st}], "roles": [role, "editor", "admin"]},
            "n": n,
        });
        // a whole object absent, not only leaves
        if let (true, Some(acct)) = (no_bill, v["acct"].as_object_mut()) {
            acct.remove("bill-info");
        }
        v.to_string()
    })
}

proptest! {
    #![proptest_config(Config { cases: cases() / 4, max_global_rejects: 1_000_000, ..Config::default() })]

    /// Policy tables that repeat their tests across rules (each answered once per decision):
    /// the decisions, warnings and traces of the reference scan.
    #[test]
    fn repeated_tests_decide_as_the_reference(table_json in policy_table(), inputs in prop::collection::vec(policy_input(), 1..6)) {
        decides_as_the_reference(&table_json, &inputs)?;
    }
}

/// The decisions, warnings and traces of the reference scan on each input, with and without explain.
fn decides_as_the_reference(table_json: &str, inputs: &[String]) -> Result<(), TestCaseError> {
    let table = Table::from_bytes(Path::new("gen.json"), table_json.as_bytes(), &Limits::default())
        .expect("conditions that load alone load together");
    for body in inputs {
        let slow = table.decide_reference(body.as_bytes()).expect("valid input");
        for explain in [false, true] {
            let fast = table.decide(body.as_bytes(), explain).expect("valid input");
            prop_assert_eq!(fast.rule, slow.rule, "explain {} input {} table {}", explain, body, table_json);
            prop_assert_eq!(&fast.warnings, &slow.warnings, "explain {} input {} table {}", explain, body, table_json);
            same_trace(&fast, &slow)?;
        }
    }
    Ok(())
}

/// With explain, each rule the fast path tried is in the reference's trace (which tries every
/// rule) with the same outcome and the same reason; a reason written escaped for JSON too reads
/// back as the reason.
fn same_trace(fast: &Decision, slow: &Decision) -> Result<(), TestCaseError> {
    let Some(trace) = &fast.trace else { return Ok(()) };
    let reference = slow.trace.as_ref().expect("the reference decision has a trace");
    for entry in trace {
        let found = reference.iter().find(|e| e.rule == entry.rule);
        prop_assert_eq!(Some(entry), found, "trace of rule {}", entry.rule);
        if let Some(escaped) = &entry.reason_json {
            let read: Option<String> = serde_json::from_str(&format!("\"{escaped}\"")).ok();
            prop_assert_eq!(read.as_deref(), Some(entry.reason.as_str()), "escaped reason of rule {}", entry.rule);
        }
    }
    Ok(())
}

/// The text of a generated Jev table (an object with `rules`) with `"enabled": false` written
/// into the rules `disabled` names.
fn disabled_in_file(source: &serde_json::Value, disabled: &[String]) -> Vec<u8> {
    let mut source = source.clone();
    for rule in source["rules"].as_array_mut().expect("the generated table has rules") {
        if rule["id"].as_str().is_some_and(|id| disabled.iter().any(|d| d == id)) {
            rule["enabled"] = serde_json::Value::Bool(false);
        }
    }
    serde_json::to_vec(&source).expect("JSON")
}

proptest! {
    #![proptest_config(Config { cases: cases() / 10, max_global_rejects: 1_000_000, ..Config::default() })]

    /// Kill switches decide exactly as `"enabled": false` in the file: the same decision, trace,
    /// skipped count and warnings, on the indexed path and the reference one (ids the table
    /// has no rule for switch nothing off).
    #[test]
    fn switched_off_rules_decide_as_rules_disabled_in_the_file(
        table_json in table(),
        off in prop::collection::btree_set(0..45usize, 0..8),
        inputs in prop::collection::vec(input(), 1..5),
    ) {
        let limits = Limits::default();
        let table = Table::from_bytes(Path::new("gen.json"), table_json.as_bytes(), &limits).expect("it loads");
        let ids: std::collections::BTreeSet<String> = off.iter().map(|i| format!("r{i}")).collect();
        let (switched, missing) = table.with_switched_off(&ids);
        prop_assert!(missing.iter().all(|id| !table.engine.rules().iter().any(|r| r.id == *id)));
        let source: serde_json::Value = serde_json::from_str(&table_json).expect("JSON");
        let disabled: Vec<String> = ids.iter().cloned().collect();
        let variant = disabled_in_file(&source, &disabled);
        let in_file = Table::from_bytes(Path::new("gen.json"), &variant, &limits).expect("the variant loads");
        for body in &inputs {
            for explain in [false, true] {
                let a = switched.decide(body.as_bytes(), explain).expect("valid input");
                let b = in_file.decide(body.as_bytes(), explain).expect("valid input");
                prop_assert_eq!(a, b, "explain {} input {} off {:?} table {}", explain, body, ids, table_json);
            }
            let a = switched.decide_reference(body.as_bytes()).expect("valid input");
            prop_assert_eq!(a, in_file.decide_reference(body.as_bytes()).expect("valid input"));
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

/// A table reading nested paths, array elements from both ends, whole arrays and objects, and
/// a schema: what the scan of a body must read exactly as the full parse does.
const SCAN_TABLE: &str = r#"{
  "schema": {"n": "number", "o": "any", "o.k": "string", "a": "any", "s": "any", "o.p.q": "any", "o.x-y": "any", "s.t": "any", "b.c.d": "any", "b.f": "any"},
  "rules": [
    {"id": "nested", "condition": "o.k == \"v\" || o.p.q > 1", "action": {"r": 1}},
    {"id": "elements", "condition": "a[0] == 1 || a[-1] == \"x\" || a[-2].k != nil", "action": {"r": 2}},
    {"id": "whole", "condition": "len(a) > 3 || \"k\" in o || len(s) > 2", "action": {"r": 3}},
    {"id": "numbers", "condition": "n > 9007199254740992 || n == 0.1 || n < -1e300", "action": {"r": 4}},
    {"id": "strings", "condition": "s startsWith \"é\" || s contains \"\\n\" || o[\"x-y\"] == \"\\u0000\"", "action": {"r": 5}},
    {"id": "type", "condition": "s.t == 1 || a.k == 1", "action": {"r": 6}},
    {"id": "deep", "condition": "b.c.d == 1 || b.f == 2", "action": {"r": 7}}
  ]
}"#;

/// JSON-like text: valid objects mostly, with the mistakes and corners that matter.
fn body() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("1".to_string()),
        Just("-0".to_string()),
        Just("-0.0".to_string()),
        Just("0.1".to_string()),
        Just("1e400".to_string()),
        Just("1E-400".to_string()),
        Just("9007199254740993".to_string()),
        Just("9223372036854775808".to_string()),
        Just("-9223372036854775809".to_string()),
        Just("123456789012345678901234567890".to_string()),
        Just("01".to_string()),
        Just("1.".to_string()),
        Just("\"x\"".to_string()),
        Just("\"é\\n\"".to_string()),
        Just("\"\\u0000\\ud83d\\ude00\"".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("\"\\q\"".to_string()),
        Just("\"a\tb\"".to_string()),
        Just("true".to_string()),
        Just("nul".to_string()),
        Just("null".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("[1, 2,]".to_string()),
        Just("[[[[[[[[[[1]]]]]]]]]]".to_string()),
        Just("{\"k\": \"v\", \"k\": [1]}".to_string()),
        Just("{\"p\": {\"q\": 2}}".to_string()),
        Just("{\"k\": \"v\"}, \"o\": {}".to_string()),
        Just("{\"c\": {\"d\": 1}, \"f\": 2}, \"b\": {}".to_string()),
        Just("{\"c\": {\"d\": 1}}".to_string()),
        Just("[1, 2], \"a\": [{}]".to_string()),
        Just("[{\"k\": 1}, \"x\"]".to_string()),
    ];
    let key = prop::sample::select(vec![
        "\"a\"",
        "\"b\"",
        "\"o\"",
        "\"n\"",
        "\"s\"",
        "\"z\"",
        "\"x-y\"",
        "\"\\u0061\"",
        "\"k\"",
    ]);
    (
        prop::collection::vec((key, piece), 0..6),
        prop::sample::select(vec!["", " ", "\u{feff}", "\n"]),
        prop::sample::select(vec!["", " ", "x", ",", "}"]),
        0..5usize,
    )
        .prop_map(|(members, before, after, depth)| {
            let inner: Vec<String> = members.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
            let mut body = format!("{before}{{{}}}{after}", inner.join(", "));
            for _ in 0..depth {
                body = format!("{{\"o\": {body}}}");
            }
            body
        })
}

proptest! {
    #![proptest_config(Config { cases: cases() / 2, ..Config::default() })]

    /// A body decided after the table-aware scan gets what the full parse gives it: the same
    /// decision, or the same error (byte offset and message) when it is not valid JSON, not an
    /// object, nested too deeply or refused by the schema.
    #[test]
    fn the_scan_reads_as_the_full_parse(text in body(), deep in 125..131usize) {
        let table = Table::from_bytes(Path::new("scan.json"), SCAN_TABLE.as_bytes(), &Limits::default()).unwrap();
        let nested = format!("{{\"z\": {}1{}}}", "[".repeat(deep), "]".repeat(deep));
        for body in [text.as_str(), nested.as_str()] {
            let fast = table.decide(body.as_bytes(), false);
            let slow = table.decide_reference(body.as_bytes());
            match (&fast, &slow) {
                (Ok(f), Ok(s)) => {
                    prop_assert_eq!(f.rule, s.rule, "{}", body);
                    prop_assert_eq!(&f.warnings, &s.warnings, "{}", body);
                }
                (Err(f), Err(s)) => prop_assert_eq!(f, s, "{}", body),
                _ => prop_assert!(false, "{:?} but the full parse gives {:?} for {}", fast, slow, body),
            }
        }
    }
}
