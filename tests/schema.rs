//! The request-time schema check (SPEC §3): a table that declares a `schema`
//! fails closed on an input field of another type — `schema_mismatch` (422)
//! instead of a decision — through `Table::decide` and the reference path alike.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::path::Path;

use clef::input::InputError;
use clef::server::errors::ApiError as _;
use clef::table::{Limits, Table};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value as Json};

fn load(table: &Json) -> Table {
    Table::from_bytes(Path::new("t.json"), table.to_string().as_bytes(), &Limits::default())
        .unwrap_or_else(|e| panic!("the table must load: {e}\n{table}"))
}

/// Decides with both paths; they must agree on the outcome.
fn decide(table: &Table, input: &Json) -> Result<Option<String>, InputError> {
    let body = input.to_string();
    let fast = table.decide(body.as_bytes(), false);
    let explained = table.decide(body.as_bytes(), true);
    let reference = table.decide_reference(body.as_bytes());
    let rule = |r: &Result<clef::table::Decision, InputError>| r.clone().map(|d| d.rule);
    assert_eq!(rule(&fast), rule(&reference), "optimized and reference differ on {input}");
    assert_eq!(rule(&fast), rule(&explained), "explain changes the outcome on {input}");
    fast.map(|d| table.outcome_id(&d))
}

fn mismatch(path: &str, declared: &'static str, actual: &'static str) -> InputError {
    InputError::SchemaMismatch { path: path.into(), declared, actual }
}

/// The rate-limit gate of the issue: `burst_10s: "lots"` used to slip past the
/// deny rule (a warning, no match) and get the default `allow: true`.
fn gate() -> Table {
    load(&json!({
        "schema": {"burst_10s": "number", "client": "string"},
        "default": {"allow": true},
        "rules": [{"id": "deny_burst", "condition": "burst_10s > 100", "action": {"allow": false}}]
    }))
}

#[test]
fn a_mistyped_field_fails_closed() {
    let t = gate();
    let e = decide(&t, &json!({"burst_10s": "lots"})).expect_err("a string where a number is declared");
    assert_eq!(e, mismatch("burst_10s", "number", "string"));
    assert_eq!(e.error_code().as_str(), "schema_mismatch");
    assert_eq!(e.error_code().status(), 422);
    assert_eq!(e.to_string(), r#"field "burst_10s" must be a number (schema), got a string"#);

    assert_eq!(decide(&t, &json!({"burst_10s": 500})), Ok(Some("deny_burst".into())));
    assert_eq!(decide(&t, &json!({"burst_10s": 5})), Ok(None));
}

#[test]
fn missing_null_and_undeclared_fields_are_fine() {
    let t = gate();
    assert_eq!(decide(&t, &json!({})), Ok(None));
    assert_eq!(decide(&t, &json!({"burst_10s": null, "client": null})), Ok(None));
    assert_eq!(decide(&t, &json!({"burst_10s": 1.5, "extra": "anything", "more": [1, {"x": 2}]})), Ok(None));
}

#[test]
fn a_declared_field_no_condition_reads_is_checked_too() {
    let t = gate();
    assert_eq!(decide(&t, &json!({"burst_10s": 1, "client": 7})), Err(mismatch("client", "string", "number")));
}

#[test]
fn every_declared_type_against_every_json_type() {
    let values = [
        ("string", json!("s")),
        ("number", json!(1.5)),
        ("boolean", json!(true)),
        ("array", json!([1])),
        ("object", json!({"k": 1})),
    ];
    for (declared, admitted) in [
        ("string", &["string"][..]),
        ("number", &["number"][..]),
        ("boolean", &["boolean"][..]),
        ("bool", &["boolean"][..]),
        ("array", &["array"][..]),
        ("object", &["object"][..]),
        ("any", &["string", "number", "boolean", "array", "object"][..]),
    ] {
        let t = load(&json!({"schema": {"f": declared}, "rules": [{"id": "r", "condition": "true", "action": {}}]}));
        for (actual, value) in &values {
            let got = decide(&t, &json!({ "f": value }));
            if admitted.contains(actual) {
                assert_eq!(got, Ok(Some("r".into())), "{declared} must admit {value}");
            } else {
                let shown = if declared == "bool" { "boolean" } else { declared };
                let e = got.expect_err(&format!("{declared} must reject {value}"));
                assert_eq!(e, mismatch("f", shown, actual), "{declared} vs {value}");
            }
        }
    }
}

#[test]
fn integer_means_an_int_as_clef_reads_it() {
    let t =
        load(&json!({"schema": {"n": "integer"}, "rules": [{"id": "even", "condition": "n % 2 == 0", "action": {}}]}));
    for ok in ["0", "-5", "4", "9223372036854775807", "-9223372036854775808"] {
        let body = format!("{{\"n\": {ok}}}");
        let d = t.decide(body.as_bytes(), false).unwrap_or_else(|e| panic!("{ok} is an integer: {e}"));
        assert!(d.warnings.is_empty(), "{ok}: {:?}", d.warnings);
    }
    // A fraction, an exponent, or beyond i64 (read as a float): `%` could not use them.
    for float in ["2.5", "2.0", "1e3", "9223372036854775808", "-1e400"] {
        let body = format!("{{\"n\": {float}}}");
        match t.decide(body.as_bytes(), false) {
            Err(InputError::InvalidJson { .. }) => {} // out of the float range: not JSON clef reads
            other => assert_eq!(other.map(|d| d.rule), Err(mismatch("n", "integer", "float")), "{float}"),
        }
        assert_eq!(
            t.decide(body.as_bytes(), false).map(|d| d.rule),
            t.decide_reference(body.as_bytes()).map(|d| d.rule),
            "{float}"
        );
    }
    let e = t.decide(br#"{"n": 2.0}"#, false).expect_err("2.0");
    assert_eq!(e.to_string(), r#"field "n" must be an integer (schema), got a float"#);
    assert_eq!(
        t.decide(br#"{"n": "2"}"#, false).map(|d| d.rule),
        Err(mismatch("n", "integer", "string")),
        "a string is a string, whatever it holds"
    );
}

#[test]
fn dotted_paths_check_the_inside_and_the_way_there() {
    let t = load(&json!({
        "schema": {"headers.user-agent": "string", "method": "string"},
        "rules": [{"id": "bot", "condition": "headers[\"user-agent\"] contains \"bot\"", "action": {}}]
    }));
    assert_eq!(decide(&t, &json!({"headers": {"user-agent": "a bot"}})), Ok(Some("bot".into())));
    assert_eq!(decide(&t, &json!({"headers": {"accept": 5}})), Ok(None), "undeclared members are free");
    assert_eq!(decide(&t, &json!({"headers": null})), Ok(None));
    assert_eq!(
        decide(&t, &json!({"headers": {"user-agent": ["x"]}})),
        Err(mismatch("headers.user-agent", "string", "array"))
    );
    // `headers.user-agent` is declared, so `headers` can only be an object.
    assert_eq!(decide(&t, &json!({"headers": "curl"})), Err(mismatch("headers", "object", "string")));
    assert_eq!(decide(&t, &json!({"headers": [{"user-agent": "x"}]})), Err(mismatch("headers", "object", "array")));
    let e = decide(&t, &json!({"headers": 3})).unwrap_err();
    assert_eq!(e.to_string(), r#"field "headers" must be an object (schema), got a number"#);
}

#[test]
fn of_several_mismatches_the_first_path_in_order_is_reported() {
    let t = load(&json!({
        "schema": {"b": "string", "a": "number", "c.d": "boolean"},
        "rules": [{"id": "r", "condition": "true", "action": {}}]
    }));
    let input = json!({"c": {"d": 1}, "b": 2, "a": "x"});
    for _ in 0..3 {
        assert_eq!(decide(&t, &input), Err(mismatch("a", "number", "string")));
    }
}

#[test]
fn a_table_without_schema_checks_nothing() {
    let t = load(&json!({"rules": [{"id": "r", "condition": "burst_10s > 100", "action": {}}]}));
    let d = t.decide(br#"{"burst_10s": "lots"}"#, false).expect("no schema, no schema check");
    assert_eq!(d.rule, None);
    let d = t.decide_reference(br#"{"burst_10s": "lots"}"#).expect("no schema, no schema check");
    assert_eq!(d.warnings.len(), 1, "the comparison fails as a warning, as before");
}

#[test]
fn statuses_of_input_errors() {
    let t = gate();
    let invalid = t.decide(b"{", false).unwrap_err();
    assert_eq!((invalid.error_code().as_str(), invalid.error_code().status()), ("invalid_json", 400));
    let not_object = t.decide(b"[]", false).unwrap_err();
    assert_eq!((not_object.error_code().as_str(), not_object.error_code().status()), ("not_an_object", 400));
}

// ---------------------------------------------------------------------------
// the slot-based check against the path-walking reference

const PATHS: &[&str] = &["a", "b", "s", "n", "flag", "obj", "obj.x", "obj.y", "items", "tags"];
const TYPES: &[&str] = &["string", "number", "integer", "boolean", "array", "object", "any"];

fn schema() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(PATHS.to_vec()).prop_map(String::from),
        prop::sample::select(TYPES.to_vec()).prop_map(String::from),
        1..7,
    )
}

fn json_value() -> impl Strategy<Value = Json> {
    let scalar = prop_oneof![
        (-3i64..12).prop_map(Json::from),
        Just(Json::from(i64::MAX)),
        prop::sample::select(vec![0.5, 2.0, -0.0]).prop_map(Json::from),
        prop::sample::select(vec!["gold", "", "9"]).prop_map(Json::from),
        any::<bool>().prop_map(Json::from),
        Just(Json::Null),
    ];
    scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Json::from),
            prop::collection::btree_map(prop::sample::select(vec!["x", "y", "z"]).prop_map(String::from), inner, 0..3)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

fn input() -> impl Strategy<Value = String> {
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "s", "n", "flag", "obj", "items", "tags", "other"]).prop_map(String::from),
        json_value(),
        0..8,
    )
    .prop_map(|m| Json::Object(m.into_iter().collect()).to_string())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000) / 4
}

proptest! {
    #![proptest_config(Config { cases: cases(), ..Config::default() })]

    /// The same error (path, declared, actual) or the same rule, both ways.
    #[test]
    fn slot_check_agrees_with_the_reference(schema in schema(), inputs in prop::collection::vec(input(), 1..6)) {
        // One rule per declared path, reading it, and a catch-all.
        let mut rules: Vec<Json> = schema
            .keys()
            .enumerate()
            .map(|(i, p)| json!({"id": format!("r{i}"), "condition": format!("{p} == 2"), "action": {}}))
            .collect();
        rules.push(json!({"id": "all", "condition": "true", "action": {}}));
        let text = json!({"schema": schema, "rules": rules}).to_string();
        // `obj: string` with `obj.x` declared is a load error (tested in load_errors).
        let Ok(table) = Table::from_bytes(Path::new("gen.json"), text.as_bytes(), &Limits::default()) else {
            return Ok(());
        };
        for body in &inputs {
            let fast = table.decide(body.as_bytes(), false).map(|d| d.rule);
            let slow = table.decide_reference(body.as_bytes()).map(|d| d.rule);
            prop_assert_eq!(&fast, &slow, "input {} table {}", body, text);
            let explained = table.decide(body.as_bytes(), true).map(|d| d.rule);
            prop_assert_eq!(&fast, &explained);
        }
    }
}
