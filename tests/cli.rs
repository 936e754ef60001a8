//! The command line end to end (SPEC §2, §4, §6, §11): every test runs the real
//! `clef` binary on example tables or on tables written to a temporary folder.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------
// helpers

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tables() -> PathBuf {
    root().join("tables")
}

/// Runs `clef ARGS`, feeding `stdin` (empty when `None`).
fn clef(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clef"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start clef");
    {
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(bytes) = stdin {
            // The child may exit before reading everything (e.g. on a bad table).
            let _ = pipe.write_all(bytes);
        }
    }
    child.wait_with_output().expect("wait for clef")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("clef exited by a signal")
}

fn describe(o: &Output) -> String {
    format!("exit {:?}\n--- stdout\n{}\n--- stderr\n{}", o.status.code(), out(o), err(o))
}

/// Asserts that stdout is exactly one JSON object (on one line) and returns it.
fn one_object(o: &Output) -> serde_json::Map<String, Json> {
    let text = out(o);
    let mut values = serde_json::Deserializer::from_str(&text).into_iter::<Json>();
    let first = values.next().unwrap_or_else(|| panic!("no JSON on stdout\n{}", describe(o)));
    let first = first.unwrap_or_else(|e| panic!("stdout is not JSON: {e}\n{}", describe(o)));
    assert!(values.next().is_none(), "more than one JSON value on stdout\n{}", describe(o));
    assert_eq!(text.trim_end().lines().count(), 1, "the decision is not one line\n{}", describe(o));
    match first {
        Json::Object(m) => m,
        other => panic!("stdout is not a JSON object: {other}"),
    }
}

fn sha12(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().take(6).map(|b| format!("{b:02x}")).collect()
}

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Checks the fields every decision carries (SPEC §6) for a table file.
fn assert_decision_shape(d: &serde_json::Map<String, Json>, table_file: &Path, table_name: &str) {
    for key in ["rule_id", "matched", "action", "timestamp", "table", "version", "instance"] {
        assert!(d.contains_key(key), "missing key {key} in {d:?}");
    }
    let allowed = [
        "rule_id",
        "matched",
        "action",
        "timestamp",
        "table",
        "version",
        "instance",
        "snapshot_id",
        "recorded",
        "warnings",
        "degraded",
        "degraded_reason",
        "fallback",
        "trace",
        "skipped",
    ];
    for key in d.keys() {
        assert!(allowed.contains(&key.as_str()), "unexpected key {key} in {d:?}");
    }
    assert!(d["matched"].is_boolean(), "{d:?}");
    if d["matched"] == json!(true) {
        assert!(d["rule_id"].is_string(), "{d:?}");
        assert!(d["action"].is_object(), "{d:?}");
    } else {
        assert!(d["rule_id"].is_null(), "{d:?}");
    }
    assert_eq!(d["table"], json!(table_name));
    assert_eq!(d["instance"], json!("local"));
    let bytes = std::fs::read(table_file).expect("read table");
    let version = d["version"].as_str().expect("version is a string");
    assert_eq!(version.len(), 12, "{version}");
    assert!(version.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')), "{version}");
    assert_eq!(version, sha12(&bytes), "version is not the first 12 hex chars of the file's SHA-256");
    assert_timestamp(d["timestamp"].as_str().expect("timestamp is a string"));
}

/// RFC 3339 in UTC with milliseconds, `YYYY-MM-DDTHH:MM:SS.mmmZ`, close to now.
fn assert_timestamp(ts: &str) {
    let b = ts.as_bytes();
    assert_eq!(b.len(), 24, "timestamp {ts}");
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ";
    for (c, want) in b.iter().zip(shape.bytes()) {
        let ok = if want == b'd' { c.is_ascii_digit() } else { *c == want };
        assert!(ok, "timestamp {ts} is not of the form {shape}");
    }
    let t = humantime::parse_rfc3339(ts).expect("parse timestamp");
    let now = SystemTime::now();
    let diff = now.duration_since(t).unwrap_or_else(|e| e.duration());
    assert!(diff < Duration::from_secs(120), "timestamp {ts} is not now");
}

fn vip_cn() -> &'static [u8] {
    br#"{"user_tier":"vip","order_amount_usd":1200,"country_code":"CN"}"#
}

// ---------------------------------------------------------------------------
// clef decide

#[test]
fn decide_match_prints_one_decision_object() {
    let table = tables().join("risk.json");
    let o = clef(&["decide", s(&table), "tables/samples/risk.vip_cn.json"], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "risk");
    assert_eq!(d["matched"], json!(true));
    assert_eq!(d["rule_id"], json!("rule_001"));
    assert_eq!(d["action"], json!({"risk_level": "low", "review_required": false, "max_retries": 3}));
    assert!(!d.contains_key("trace"), "no trace without --explain: {d:?}");
}

#[test]
fn decide_no_match_returns_the_default_action() {
    let table = tables().join("risk.json");
    let o = clef(&["decide", s(&table)], Some(b"{}"));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "risk");
    assert_eq!(d["matched"], json!(false));
    assert_eq!(d["rule_id"], Json::Null);
    let file: Json = serde_json::from_slice(&std::fs::read(&table).unwrap()).unwrap();
    assert!(file["default"].is_object());
    assert_eq!(d["action"], file["default"]);
}

#[test]
fn decide_no_match_without_default_gives_null_action() {
    // The seeds' bare-array table has no default.
    let table = tables().join("decision_table.json");
    let o = clef(&["decide", s(&table), "-"], Some(br#"{"user_tier":"nobody"}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "decision_table");
    assert_eq!(d["matched"], json!(false));
    assert_eq!(d["rule_id"], Json::Null);
    assert_eq!(d["action"], Json::Null);
}

#[test]
fn decide_seed_bare_array_table_matches() {
    let table = tables().join("decision_table.json");
    let o = clef(&["decide", s(&table), "--explain"], Some(br#"{"user_tier":"premium","country_code":"JP"}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "decision_table");
    assert_eq!(d["rule_id"], json!("rule_027"));
    assert_eq!(d["action"], json!({"allow": true, "priority": "high"}));
    let trace = d["trace"].as_array().expect("trace");
    let last = trace.last().expect("trace is not empty");
    assert_eq!(last["rule_id"], json!("rule_027"));
    assert_eq!(last["matched"], json!(true));
    assert_eq!(
        last["reason"],
        json!(
            r#"Rule rule_027 matched: user_tier == "premium" && country_code in ["US", "JP"] → {"allow":true,"priority":"high"}"#
        )
    );
}

/// `clef decide … | head`: a reader that stops early ends the command quietly, with success,
/// not with a panic (the output here, a trace of 2,000 long lines that no index skips, is far
/// more than a pipe holds).
#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let rules: Vec<Json> = (0..2000)
        .map(|i| json!({"id": format!("r{i}"), "condition": format!("tag == other || tag == \"{}{i}\"", "x".repeat(100)), "action": {"n": i}}))
        .collect();
    let table = write(dir.path(), "long.json", json!({"name": "long", "rules": rules}).to_string());
    let input = br#"{"tag": "y", "other": "z"}"#;
    let whole = clef(&["decide", s(&table), "--explain"], Some(input));
    assert!(whole.stdout.len() > 256 << 10, "the trace outgrows a pipe: {} bytes", whole.stdout.len());
    let mut child = Command::new(env!("CARGO_BIN_EXE_clef"))
        .args(["decide", s(&table), "--explain"])
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    assert_eq!(&first[..1], b"{");
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "status {:?}, stderr: {stderr}", o.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn decide_explain_adds_a_trace() {
    let table = tables().join("risk.json");
    let o = clef(&["decide", s(&table), "tables/samples/risk.vip_cn.json", "--explain"], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "risk");
    let trace = d["trace"].as_array().expect("--explain adds a trace array");
    assert!(!trace.is_empty());
    for t in trace {
        let t = t.as_object().expect("trace entries are objects");
        let mut keys: Vec<&str> = t.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["matched", "reason", "rule_id"], "{t:?}");
        assert!(t["rule_id"].is_string() && t["matched"].is_boolean() && t["reason"].is_string(), "{t:?}");
    }
    // The match is the last rule tried, and its line names the condition and the action.
    let (last, before) = trace.split_last().unwrap();
    assert!(before.iter().all(|t| t["matched"] == json!(false)), "{trace:?}");
    assert_eq!(last["matched"], json!(true));
    assert_eq!(last["rule_id"], json!("rule_001"));
    assert_eq!(
        last["reason"],
        json!(
            r#"Rule rule_001 matched: user_tier == "vip" && order_amount_usd > 1000 && country_code == "CN" → {"risk_level":"low","review_required":false,"max_retries":3}"#
        )
    );
}

#[test]
fn decide_explain_without_match_lists_only_failures() {
    let dir = tempfile::tempdir().unwrap();
    let table = write(
        dir.path(),
        "t.json",
        // `n + k` (two fields, in one rule each) keeps the rule index from ruling the rules
        // out, so both are tried.
        r#"[{"id": "big", "condition": "n + k > 5", "action": {"a": 1}},
            {"id": "small", "condition": "k + n < 0", "action": {"a": 2}}]"#,
    );
    let o = clef(&["decide", s(&table), "-", "--explain"], Some(br#"{"n": 3, "k": 0}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "t");
    assert_eq!(d["matched"], json!(false));
    let trace = d["trace"].as_array().expect("trace");
    assert!(trace.iter().all(|t| t["matched"] == json!(false) && !t["reason"].as_str().unwrap().is_empty()));
    let ids: Vec<&str> = trace.iter().map(|t| t["rule_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["big", "small"], "every rule tried, in order");
}

#[test]
fn decide_explain_reason_quotes_a_whole_sub_expression() {
    // A false sub-expression that starts with a parenthesis is quoted whole:
    // `(n ?? m) > 5`, not `n ?? m) > 5`. (`n ?? m` reads two fields: the index cannot rule
    // the rule out, so it is tried.)
    let dir = tempfile::tempdir().unwrap();
    let table = write(
        dir.path(),
        "t.json",
        r#"[{"id": "a", "condition": "(n ?? m) > 5 && flag == true", "action": {}},
            {"id": "b", "condition": "true", "action": {"x": 1}}]"#,
    );
    let o = clef(&["decide", s(&table), "--explain"], Some(br#"{"n": 1, "flag": true}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    let trace = d["trace"].as_array().expect("trace");
    let a = trace.iter().find(|t| t["rule_id"] == json!("a")).expect("rule a was tried");
    let reason = a["reason"].as_str().unwrap();
    let opens = reason.matches('(').count();
    let closes = reason.matches(')').count();
    assert_eq!(opens, closes, "unbalanced sub-expression in the trace reason: {reason}");
    assert!(reason.contains("(n ?? m) > 5"), "{reason}");
}

#[test]
fn decide_reads_stdin_with_dash_and_without_input() {
    let table = tables().join("risk.json");
    for args in [vec!["decide", s(&table), "-"], vec!["decide", s(&table)]] {
        let o = clef(&args, Some(vip_cn()));
        assert_eq!(code(&o), 0, "{args:?}: {}", describe(&o));
        let d = one_object(&o);
        assert_eq!(d["rule_id"], json!("rule_001"), "{args:?}");
    }
}

#[test]
fn decide_accepts_input_with_bom() {
    let table = tables().join("risk.json");
    let mut body = b"\xEF\xBB\xBF".to_vec();
    body.extend_from_slice(vip_cn());
    let o = clef(&["decide", s(&table), "-"], Some(&body));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    assert_eq!(one_object(&o)["rule_id"], json!("rule_001"));

    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "in.json", &body);
    let o = clef(&["decide", s(&table), s(&input)], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    assert_eq!(one_object(&o)["rule_id"], json!("rule_001"));
}

#[test]
fn decide_invalid_json_input_exits_2() {
    let table = tables().join("risk.json");
    for body in [&b"{\"a\": "[..], b"{\"a\" 1}", b"not json", b"", b"{\"a\": 1} {}"] {
        let o = clef(&["decide", s(&table)], Some(body));
        assert_eq!(code(&o), 2, "{:?}: {}", String::from_utf8_lossy(body), describe(&o));
        assert!(err(&o).contains("invalid_json"), "{}", describe(&o));
        assert!(out(&o).trim().is_empty(), "nothing on stdout on error: {}", describe(&o));
    }
}

#[test]
fn decide_invalid_json_input_says_what_in_plain_words() {
    let table = tables().join("risk.json");
    for (body, said) in [
        (&b""[..], "invalid JSON at byte 0: the body is empty"),
        (b"  \n", "invalid JSON at byte 0: the body is empty"),
        (b"{1: 2}", "invalid JSON at byte 1: expected a key in double quotes or `}`, found `1`"),
        (b"{\"a\": 1,\n}", "invalid JSON at byte 7: trailing comma before `}`"),
    ] {
        let o = clef(&["decide", s(&table)], Some(body));
        assert_eq!(code(&o), 2, "{}", describe(&o));
        assert_eq!(err(&o).trim_end(), format!("error: invalid_json: stdin: {said}"), "{}", describe(&o));
    }
}

#[test]
fn decide_non_object_input_exits_2() {
    let table = tables().join("risk.json");
    for body in [&b"[1, 2]"[..], b"[]", b"\"text\"", b"42", b"null"] {
        let o = clef(&["decide", s(&table), "-"], Some(body));
        assert_eq!(code(&o), 2, "{:?}: {}", String::from_utf8_lossy(body), describe(&o));
        assert!(err(&o).contains("not_an_object"), "{}", describe(&o));
        assert!(out(&o).trim().is_empty(), "{}", describe(&o));
    }
}

/// A rate-limit gate with a schema: `burst_10s: "lots"` must not reach the default `allow`.
fn gate(dir: &Path) -> PathBuf {
    write(
        dir,
        "gate.json",
        r#"{"schema": {"burst_10s": "number"}, "default": {"allow": true},
            "rules": [{"id": "deny_burst", "condition": "burst_10s > 100", "action": {"allow": false}}]}"#,
    )
}

#[test]
fn decide_schema_mismatch_exits_2_with_the_field_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let table = gate(dir.path());
    let o = clef(&["decide", s(&table)], Some(br#"{"burst_10s": "lots"}"#));
    assert_eq!(code(&o), 2, "{}", describe(&o));
    assert!(out(&o).trim().is_empty(), "no decision on stdout: {}", describe(&o));
    assert_eq!(
        err(&o).trim_end(),
        r#"error: schema_mismatch: stdin: field "burst_10s" must be a number (schema), got a string"#
    );
    let o = clef(&["decide", s(&table)], Some(br#"{"burst_10s": 500}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    assert_eq!(one_object(&o)["rule_id"], json!("deny_burst"));
}

#[test]
fn test_reports_a_stored_input_the_schema_rejects_as_that_test_failing() {
    let dir = tempfile::tempdir().unwrap();
    let table = gate(dir.path());
    write(
        dir.path(),
        "gate.tests.json",
        r#"[{"name": "burst", "input": {"burst_10s": 500}, "expect": {"rule_id": "deny_burst"}},
            {"name": "typo", "input": {"burst_10s": "500"}, "expect": {"rule_id": "deny_burst"}},
            {"name": "quiet", "input": {"burst_10s": 3}, "expect": {"matched": false}}]"#,
    );
    let o = clef(&["test", s(&table)], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let text = out(&o);
    assert!(text.contains("FAIL gate: typo"), "{text}");
    assert!(
        text.contains(r#"error: schema_mismatch: field "burst_10s" must be a number (schema), got a string"#),
        "{text}"
    );
    assert!(text.contains("2 passed, 1 failed"), "the other tests still run: {text}");
}

#[test]
fn bench_schema_mismatch_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let table = gate(dir.path());
    let input = write(dir.path(), "in.json", r#"{"burst_10s": "lots"}"#);
    let o = clef(&["bench", s(&table), s(&input), "-n", "10"], None);
    assert_eq!(code(&o), 2, "{}", describe(&o));
    assert!(err(&o).contains("schema_mismatch"), "{}", describe(&o));
}

/// `levels` nested objects: the top-level object is level 1.
fn nested_objects(levels: usize) -> Vec<u8> {
    let mut s = "{\"a\":".repeat(levels - 1);
    s.push_str("{}");
    s.push_str(&"}".repeat(levels - 1));
    s.into_bytes()
}

/// A top-level object holding `levels - 1` nested arrays.
fn nested_arrays(levels: usize) -> Vec<u8> {
    format!("{{\"a\":{}{}}}", "[".repeat(levels - 1), "]".repeat(levels - 1)).into_bytes()
}

#[test]
fn decide_input_nesting_128_accepted_129_rejected() {
    let table = tables().join("decision_table.json");
    for body in [nested_objects(128), nested_arrays(128)] {
        let o = clef(&["decide", s(&table)], Some(&body));
        assert_eq!(code(&o), 0, "128 levels must be accepted: {}", describe(&o));
        assert_eq!(one_object(&o)["matched"], json!(false));
    }
    for body in [nested_objects(129), nested_arrays(129), nested_objects(100_000), nested_arrays(100_000)] {
        let o = clef(&["decide", s(&table)], Some(&body));
        assert_eq!(code(&o), 2, "{} levels must be rejected: {}", body.len(), describe(&o));
        assert!(err(&o).contains("invalid_json"), "{}", describe(&o));
        assert!(!err(&o).contains("panicked"), "{}", describe(&o));
    }
}

#[test]
fn decide_invalid_table_exits_2_with_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let table =
        write(dir.path(), "bad.json", "[\n  {\"id\": \"a\", \"condition\": \"lenght(x) > 1\", \"action\": {}}\n]\n");
    let o = clef(&["decide", s(&table)], Some(b"{}"));
    assert_eq!(code(&o), 2, "{}", describe(&o));
    assert!(out(&o).trim().is_empty(), "{}", describe(&o));
    let e = err(&o);
    assert!(e.contains(&format!("{}:2:29: error:", s(&table))), "{e}");
    assert!(e.contains("lenght"), "{e}");

    let missing = dir.path().join("missing.json");
    let o = clef(&["decide", s(&missing)], Some(b"{}"));
    assert_eq!(code(&o), 2, "{}", describe(&o));
    assert!(err(&o).contains("missing.json"), "{}", describe(&o));
    assert!(out(&o).trim().is_empty(), "{}", describe(&o));

    let not_json = write(dir.path(), "broken.json", "{ \"rules\": [ ");
    let o = clef(&["decide", s(&not_json)], Some(b"{}"));
    assert_eq!(code(&o), 2, "{}", describe(&o));
    assert!(err(&o).contains("broken.json:"), "{}", describe(&o));
}

#[test]
fn decide_table_with_bom_and_crlf() {
    let dir = tempfile::tempdir().unwrap();
    let text = "{\r\n  \"default\": {\"d\": true},\r\n  \"rules\": [\r\n    {\"id\": \"r1\",\r\n     \"condition\": \"a == \\\"x\\\"\",\r\n     \"action\": {\"hit\": 1}}\r\n  ]\r\n}\r\n";
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(text.as_bytes());
    let table = write(dir.path(), "win.json", &bytes);

    let o = clef(&["decide", s(&table)], Some(br#"{"a": "x"}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "win");
    assert_eq!(d["rule_id"], json!("r1"));
    assert_eq!(d["action"], json!({"hit": 1}));

    let o = clef(&["decide", s(&table)], Some(br#"{"a": "y"}"#));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_eq!(d["matched"], json!(false));
    assert_eq!(d["action"], json!({"d": true}));

    let o = clef(&["check", s(&table)], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
}

#[test]
fn decide_table_name_drops_every_extension() {
    let dir = tempfile::tempdir().unwrap();
    let table = write(dir.path(), "net.v2.json", r#"[{"id": "r", "condition": "true", "action": {}}]"#);
    let o = clef(&["decide", s(&table)], Some(b"{}"));
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    assert_decision_shape(&d, &table, "net");
    assert_eq!(d["action"], json!({}));
}

#[test]
fn every_example_table_answers_its_samples() {
    let mut samples: Vec<PathBuf> = std::fs::read_dir(tables().join("samples"))
        .expect("tables/samples")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    samples.sort();
    assert!(!samples.is_empty());
    let mut tables_seen = std::collections::BTreeSet::new();
    for sample in &samples {
        let file = sample.file_name().unwrap().to_str().unwrap();
        let name = file.split('.').next().unwrap();
        let table = ["json", "yaml", "flash.json"]
            .iter()
            .map(|ext| tables().join(format!("{name}.{ext}")))
            .find(|t| t.is_file())
            .unwrap_or_else(|| panic!("sample {file} has no table {name}.json, {name}.yaml or {name}.flash.json"));
        tables_seen.insert(name.to_string());
        let o = clef(&["decide", s(&table), s(sample)], None);
        assert_eq!(code(&o), 0, "{file}: {}", describe(&o));
        let d = one_object(&o);
        assert_decision_shape(&d, &table, name);
    }
    // Every example table has at least one sample.
    for entry in std::fs::read_dir(tables()).unwrap() {
        let p = entry.unwrap().path();
        let f = p.file_name().unwrap().to_str().unwrap().to_string();
        if (f.ends_with(".json") || f.ends_with(".yaml")) && !f.ends_with(".tests.json") {
            let name = f.split('.').next().unwrap();
            assert!(tables_seen.contains(name), "table {f} has no sample in tables/samples/");
        }
    }
}

// ---------------------------------------------------------------------------
// clef check

#[test]
fn check_example_tables_is_clean() {
    let o = clef(&["check", "tables"], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    assert!(!err(&o).contains("error:"), "{}", describe(&o));
    // Every table and its tests file.
    let files = std::fs::read_dir(tables()).unwrap().filter(|e| e.as_ref().unwrap().path().is_file()).count();
    assert_eq!(out(&o).lines().last(), Some(format!("checked {files} files: {files} ok, 0 with errors").as_str()));
}

#[test]
fn check_reports_problems_in_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad1 = write(dir.path(), "bad1.json", "[\n  {\"id\": \"a\", \"condition\": \"x >\", \"action\": {}}\n]\n");
    let good = write(dir.path(), "good.json", r#"[{"id": "a", "condition": "x > 1", "action": {}}]"#);
    let bad2 = write(dir.path(), "bad2.json", "[\n  {\"id\": \"a\", \"condition\": \"true\", \"action\": 3}\n]\n");
    let bad3 = write(dir.path(), "bad3.json", "[\n  {\"id\": \"a\" \"condition\": \"true\"}\n]\n");
    let o = clef(&["check", s(&bad1), s(&good), s(&bad2), s(&bad3)], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let e = err(&o);
    assert!(e.contains(&format!("{}:2:", s(&bad1))), "first file not reported: {e}");
    assert!(e.contains(&format!("{}:2:46: error:", s(&bad2))), "second bad file not reported: {e}");
    assert!(e.contains(&format!("{}:2:14: error:", s(&bad3))), "third bad file not reported: {e}");
    assert!(!e.contains("good.json:"), "{e}");

    // A folder: every table inside is checked.
    let o = clef(&["check", s(dir.path())], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let e = err(&o);
    for f in ["bad1.json:", "bad2.json:", "bad3.json:"] {
        assert!(e.contains(f), "{f} not reported when checking the folder: {e}");
    }
}

#[test]
fn check_reports_every_problem_of_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(
        dir.path(),
        "multi.json",
        "[\n  {\"id\": \"a\", \"condition\": \"x > 1\", \"action\": {}},\n  {\"id\": \"b\", \"condition\": \"y >\", \"action\": {}},\n  {\"id\": \"c\", \"condition\": \"true\", \"action\": 3},\n  {\"id\": \"d\", \"condition\": \"lenght(z)\", \"action\": {}}\n]\n",
    );
    let o = clef(&["check", s(&t)], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let e = err(&o);
    let p = s(&t);
    assert!(e.contains(&format!("{p}:3:32: error:")), "{e}");
    assert!(e.contains(&format!("{p}:4:46: error:")), "{e}");
    assert!(e.contains(&format!("{p}:5:29: error:")), "{e}");
}

#[test]
fn check_reads_tests_files_too_and_ends_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let table = r#"{"rules": [{"id": "big", "condition": "n > 5", "action": {"v": 1}},
                             {"id": "old", "condition": "n > 9", "action": {"v": 2}, "enabled": false}]}"#;
    write(dir.path(), "good.json", table);
    write(dir.path(), "good.tests.json", r#"[{"name": "big", "input": {"n": 6}, "expect": {"rule_id": "big"}}]"#);
    write(dir.path(), "comma.json", table);
    // A trailing comma: `clef check` used to say ok while `clef test` failed.
    let comma = write(
        dir.path(),
        "comma.tests.json",
        "[\n  {\"name\": \"big\", \"input\": {\"n\": 6}, \"expect\": {\"rule_id\": \"big\"}},\n]\n",
    );
    write(dir.path(), "ids.json", table);
    let ids = write(
        dir.path(),
        "ids.tests.json",
        "[{\"name\": \"typo\", \"input\": {}, \"expect\": {\"rule_id\": \"bgi\"}},\n {\"name\": \"off\", \"input\": {\"n\": 10}, \"expect\": {\"rule_id\": \"old\"}}]\n",
    );

    let o = clef(&["check", s(dir.path())], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let e = err(&o);
    assert!(e.contains(&format!("{}:2:67: error: trailing comma before `]`", s(&comma))), "{e}");
    assert!(e.contains(&format!("{}:1:54: error: test \"typo\": the table has no rule \"bgi\"", s(&ids))), "{e}");
    assert!(e.contains(&format!("{}:2:60: error: test \"off\": rule \"old\" is disabled", s(&ids))), "{e}");
    let text = out(&o);
    assert!(text.contains("good.tests.json: ok (1 tests for table \"good\")"), "{text}");
    assert_eq!(text.lines().last(), Some("checked 6 files: 4 ok, 2 with errors"), "{text}");

    // `clef test` reads tests files with the same loader: the same diagnostics.
    let o = clef(&["test", s(dir.path())], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    assert!(err(&o).contains(&format!("{}:2:67: error: trailing comma before `]`", s(&comma))), "{}", describe(&o));
    assert!(err(&o).contains("the table has no rule \"bgi\""), "{}", describe(&o));

    // A tests file named on its own is checked against its table.
    let o = clef(&["check", s(&ids)], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    assert!(err(&o).contains("the table has no rule \"bgi\""), "{}", describe(&o));
    assert_eq!(out(&o).lines().last(), Some("checked 1 file: 0 ok, 1 with errors"), "{}", describe(&o));
}

// ---------------------------------------------------------------------------
// clef test

#[test]
fn test_example_tables_with_coverage() {
    let o = clef(&["test", "tables", "--coverage"], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let text = out(&o);
    let summary = text.lines().rev().find(|l| l.contains("passed")).expect("summary line");
    let words: Vec<&str> = summary.split_whitespace().collect();
    assert_eq!(words.len(), 4, "summary `{summary}`");
    let n: usize = words[0].parse().expect("N passed");
    assert!(n > 0, "{summary}");
    assert_eq!(&words[1..], ["passed,", "0", "failed"], "{summary}");
}

#[test]
fn test_failing_expectation_prints_a_diff_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let table = write(
        dir.path(),
        "t.json",
        r#"{"default": {"d": 0},
            "rules": [{"id": "a", "condition": "n > 5", "action": {"v": 1}},
                      {"id": "b", "condition": "n > 0", "action": {"v": 2}}],
            "tests": [{"name": "inline ok", "input": {"n": 3}, "expect": {"rule_id": "b"}}]}"#,
    );
    write(
        dir.path(),
        "t.tests.json",
        r#"[{"name": "wrong rule", "input": {"n": 9}, "expect": {"rule_id": "b", "matched": true}},
            {"name": "right default", "input": {"n": -1}, "expect": {"matched": false, "action": {"d": 0}}}]"#,
    );
    let o = clef(&["test", s(&table)], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let text = out(&o) + &err(&o);
    assert!(text.contains("wrong rule"), "the failing test is named: {text}");
    assert!(text.contains(r#"- rule_id: "b""#), "{text}");
    assert!(text.contains(r#"+ rule_id: "a""#), "{text}");
    // `matched` was right: no diff line for it.
    assert!(!text.contains("- matched"), "{text}");
    assert!(text.contains("2 passed, 1 failed"), "{text}");
}

#[test]
fn test_failing_action_is_a_diff_too() {
    let dir = tempfile::tempdir().unwrap();
    let table = write(
        dir.path(),
        "t.json",
        r#"{"rules": [{"id": "a", "condition": "true", "action": {"v": 1}}],
            "tests": [{"name": "act", "input": {}, "expect": {"action": {"v": 2}}}]}"#,
    );
    let o = clef(&["test", s(&table)], None);
    assert_eq!(code(&o), 1, "{}", describe(&o));
    let text = out(&o);
    assert!(text.contains(r#"- action: {"v":2}"#), "{text}");
    assert!(text.contains(r#"+ action: {"v":1}"#), "{text}");
}

#[test]
fn test_coverage_lists_unreached_rules() {
    let dir = tempfile::tempdir().unwrap();
    let table = write(
        dir.path(),
        "cov.json",
        r#"{"rules": [{"id": "reached", "condition": "n > 5", "action": {"v": 1}},
                      {"id": "never_reached", "condition": "n < 0", "action": {"v": 2}}],
            "tests": [{"name": "t", "input": {"n": 9}, "expect": {"rule_id": "reached"}}]}"#,
    );
    let o = clef(&["test", s(&table), "--coverage"], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let text = out(&o);
    assert!(text.contains("1 passed, 0 failed"), "{text}");
    let line = text.lines().find(|l| l.contains("never_reached")).expect("the unreached rule is listed");
    let listed: Vec<&str> =
        line.split(|c: char| c == ',' || c == ':' || c.is_whitespace()).filter(|w| !w.is_empty()).collect();
    assert!(listed.contains(&"never_reached"), "{line}");
    assert!(!line.contains(" reached,") && !line.ends_with(" reached"), "the reached rule is not unreached: {line}");
    // Without --coverage nothing is listed.
    let o = clef(&["test", s(&table)], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    assert!(!out(&o).contains("never_reached"), "{}", describe(&o));
}

// ---------------------------------------------------------------------------
// clef bench

#[test]
fn bench_json_prints_the_timing_object() {
    let o = clef(&["bench", "tables/risk.json", "tables/samples/risk.vip_cn.json", "-n", "2000", "--json"], None);
    assert_eq!(code(&o), 0, "{}", describe(&o));
    let d = one_object(&o);
    for key in ["median_ns", "p99_ns", "per_second", "compile_ms"] {
        let v = d.get(key).unwrap_or_else(|| panic!("missing {key}: {d:?}"));
        let n = v.as_f64().unwrap_or_else(|| panic!("{key} is not a number: {v}"));
        assert!(n.is_finite() && n >= 0.0, "{key} = {n}");
    }
    assert!(d["per_second"].as_f64().unwrap() > 0.0, "{d:?}");
    assert!(d["p99_ns"].as_f64().unwrap() >= d["median_ns"].as_f64().unwrap(), "{d:?}");
}

#[test]
fn bench_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "in.json", "[1]");
    let o = clef(&["bench", "tables/risk.json", s(&input), "-n", "10", "--json"], None);
    assert_eq!(code(&o), 2, "{}", describe(&o));
    assert!(err(&o).contains("not_an_object"), "{}", describe(&o));
}
