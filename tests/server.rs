//! `clef serve` end to end (SPEC §5, §6, §10, §11): every test starts the real binary on free
//! loopback ports with a config and tables written to a temporary folder, and talks to it over
//! raw TCP (keep-alive, pipelining and the limits need raw sockets anyway).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{json, Value as Json};

mod common;

use common::*;

// ---------------------------------------------------------------------------------------------
// decisions

#[test]
fn decide_answers_the_decision_json() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let file = srv.path().join("tables/risk.json");
    for path in ["/decide/risk", "/v1/decide/risk", "/decide", "/v1/decide"] {
        let d = assert_decision(&srv.post(path, r#"{"x": 50}"#), "risk", &file);
        assert_eq!(d["matched"], json!(true), "{path}: {d}");
        assert_eq!(d["rule_id"], json!("big"), "{path}: {d}");
        assert_eq!(d["action"], json!({"a": "big"}), "{path}: {d}");
        assert!(d.get("trace").is_none(), "no trace without ?explain: {d}");
    }
}

#[test]
fn no_match_gives_the_default_action() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let file = srv.path().join("tables/risk.json");
    // x == 0 would match the disabled rule "off"
    let d = assert_decision(&srv.post("/decide/risk", r#"{"x": 0, "tier": "basic"}"#), "risk", &file);
    assert_eq!(d["matched"], json!(false), "{d}");
    assert_eq!(d["rule_id"], json!(null), "{d}");
    assert_eq!(d["action"], json!({"a": "default"}), "{d}");
    // a table without a default answers null
    srv.write_table("nodefault.json", r#"[{"id": "r", "condition": "x > 1", "action": {"a": 1}}]"#);
    assert_eq!(srv.admin_post("/reload").status, 200);
    let d = srv.post("/decide/nodefault", r#"{"x": 0}"#).json();
    assert_eq!((&d["matched"], &d["rule_id"], &d["action"]), (&json!(false), &json!(null), &json!(null)), "{d}");
}

#[test]
fn explain_adds_a_trace() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let r = srv.post("/decide/risk?explain=true", r#"{"x": 5, "tier": "vip"}"#);
    let d = assert_decision(&r, "risk", &srv.path().join("tables/risk.json"));
    assert_eq!(d["rule_id"], json!("vip"), "{d}");
    let trace = d["trace"].as_array().unwrap_or_else(|| panic!("no trace array: {d}"));
    assert!(!trace.is_empty(), "{d}");
    for t in trace {
        assert!(t["rule_id"].is_string() && t["matched"].is_boolean() && t["reason"].is_string(), "{t}");
    }
    let last = trace.last().unwrap();
    assert_eq!((&last["rule_id"], &last["matched"]), (&json!("vip"), &json!(true)), "{d}");
    assert!(last["reason"].as_str().unwrap().contains("vip"), "{last}");
    // a rule that is tried and fails is listed with why, before the match
    let ex = r#"{"rules": [
  {"id": "long", "condition": "len(name) > 3", "action": {"a": "long"}},
  {"id": "has_b", "condition": "name contains \"b\"", "action": {"a": "b"}}
]}"#;
    srv.write_table("ex.json", ex);
    assert_eq!(srv.admin_post("/reload").status, 200);
    let d = srv.post("/v1/decide/ex?explain=true", r#"{"name": "ab"}"#).json();
    assert_eq!(d["rule_id"], json!("has_b"), "{d}");
    let trace = d["trace"].as_array().unwrap_or_else(|| panic!("no trace array: {d}"));
    let ids: Vec<&Json> = trace.iter().map(|t| &t["rule_id"]).collect();
    assert_eq!(ids, [&json!("long"), &json!("has_b")], "{d}");
    assert_eq!(trace[0]["matched"], json!(false), "{d}");
    assert!(!trace[0]["reason"].as_str().unwrap().is_empty(), "{d}");
    let line = trace[1]["reason"].as_str().unwrap();
    assert!(line.contains("has_b") && line.contains("matched"), "{line}");
    // explain=false is no trace
    assert!(srv.post("/decide/risk?explain=false", r#"{"x": 5}"#).json().get("trace").is_none());
}

#[test]
fn post_decide_uses_the_default_table() {
    let tables = [("risk.json", table("from-risk")), ("other.json", table("from-other"))];
    let tables: Vec<(&str, &str)> = tables.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let srv = Server::start(&plain(), &tables);
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "from-risk");
    let d = srv.post("/decide", r#"{"x": 50}"#).json();
    assert_eq!((&d["table"], &d["action"]["a"]), (&json!("risk"), &json!("from-risk")), "{d}");
    let srv2 = Server::start(&config("", "", "model:\n  default_table: other\n"), &tables);
    let d = srv2.post("/decide", r#"{"x": 50}"#).json();
    assert_eq!((&d["table"], &d["action"]["a"]), (&json!("other"), &json!("from-other")), "{d}");
}

#[test]
fn unknown_table_is_404_unknown_table() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    srv.post("/decide/nope", "{}").assert_error(404, "unknown_table");
    srv.post("/v1/decide/nope", "{}").assert_error(404, "unknown_table");
    srv.get("/tables/nope").assert_error(404, "unknown_table");
    srv.get("/v1/tables/nope").assert_error(404, "unknown_table");
    // a near miss names the table that was meant
    let message = srv.post("/decide/rsik", "{}").assert_error(404, "unknown_table");
    assert!(message.contains("did you mean \"risk\""), "{message}");
}

#[test]
fn a_mistyped_field_under_a_schema_is_422_not_a_decision() {
    // A gate that must deny a burst: with a string where the schema says number, the deny rule
    // cannot hold, and the default would let the request through. The schema fails closed.
    let gate = r#"{"schema": {"burst_10s": "number", "client.tier": "string"},
      "default": {"allow": true},
      "rules": [{"id": "burst", "condition": "burst_10s > 100", "action": {"allow": false}}]}"#;
    let srv =
        Server::start(&config("", "", "model:\n  default_table: gate\n  watch_file: false\n"), &[("gate.json", gate)]);
    let message = srv.post("/decide/gate", r#"{"burst_10s": "lots"}"#).assert_error(422, "schema_mismatch");
    assert!(message.contains("burst_10s") && message.contains("number") && message.contains("string"), "{message}");
    let message =
        srv.post("/decide", r#"{"burst_10s": 5, "client": {"tier": 3}}"#).assert_error(422, "schema_mismatch");
    assert!(message.contains("client.tier"), "{message}");
    // missing and null fields are nil; undeclared fields are ignored
    for ok in [r#"{}"#, r#"{"burst_10s": null}"#, r#"{"burst_10s": 5, "other": "x"}"#] {
        let r = srv.post("/decide/gate", ok);
        assert_eq!(r.status, 200, "{ok}: {}", r.text());
        assert_eq!(r.json()["action"]["allow"], json!(true), "{ok}");
    }
    assert_eq!(srv.post("/decide/gate", r#"{"burst_10s": 500}"#).json()["action"]["allow"], json!(false));
}

#[test]
fn a_default_table_that_is_not_loaded_makes_health_degraded() {
    let srv = Server::start(&plain(), &[("other.json", &table("other"))]);
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    let why = h["errors"]["risk"].as_str().unwrap_or_else(|| panic!("no reason for risk in {h}"));
    assert!(why.contains("default table") && why.contains("model.default_table"), "{why}");
    srv.post("/decide", "{}").assert_error(404, "unknown_table");
}

#[test]
fn unknown_path_is_404_not_found() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    srv.get("/nope").assert_error(404, "not_found");
    srv.post("/v1/nope", "{}").assert_error(404, "not_found");
    srv.get("/").assert_error(404, "not_found");
    srv.post("/decide/risk/extra", "{}").assert_error(404, "not_found");
    call(srv.admin, "GET", "/nope", &[], b"").assert_error(404, "not_found");
}

#[test]
fn wrong_method_is_405() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let r = srv.get("/decide/risk");
    r.assert_error(405, "method_not_allowed");
    assert!(r.header("allow").is_some_and(|a| a.contains("POST")), "{r:?}");
    srv.get("/v1/decide").assert_error(405, "method_not_allowed");
    srv.post("/health", "{}").assert_error(405, "method_not_allowed");
    call(srv.port, "DELETE", "/tables", &[], b"").assert_error(405, "method_not_allowed");
    call(srv.port, "PUT", "/metrics", &[], b"").assert_error(405, "method_not_allowed");
    call(srv.admin, "GET", "/reload", &[], b"").assert_error(405, "method_not_allowed");
}

#[test]
fn invalid_json_is_400_with_the_byte_offset() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    for body in [r#"{"x": 1,, "y": 2}"#, r#"{"x": 1"#, "{x: 1}", "", r#"{"x": tru}"#] {
        let m = srv.post("/decide/risk", body).assert_error(400, "invalid_json");
        let at = m.find("byte ").unwrap_or_else(|| panic!("no byte offset in {m:?} for {body:?}"));
        let digits: String = m[at + 5..].chars().take_while(char::is_ascii_digit).collect();
        let offset: usize = digits.parse().unwrap_or_else(|_| panic!("no byte offset in {m:?} for {body:?}"));
        assert!(offset <= body.len(), "offset {offset} past the body {body:?}: {m}");
    }
    // the offset points at the offending byte: the second comma
    let m = srv.post("/decide/risk", r#"{"x": 1,, "y": 2}"#).assert_error(400, "invalid_json");
    assert!(m.contains("byte 8"), "{m}");
}

#[test]
fn a_body_that_is_not_an_object_is_400_not_an_object() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    for body in ["[1, 2]", "[]", "42", "\"x\"", "null", "true"] {
        srv.post("/decide/risk", body).assert_error(400, "not_an_object");
    }
}

#[test]
fn a_body_over_max_body_bytes_is_413() {
    let srv = Server::start(
        &config("  max_body_bytes: 1024\n", "", "model:\n  default_table: risk\n"),
        &[("risk.json", &table("big"))],
    );
    // at the limit: fine
    let pad = "p".repeat(1024 - r#"{"x": 50, "pad": ""}"#.len());
    let body = format!(r#"{{"x": 50, "pad": "{pad}"}}"#);
    assert_eq!(body.len(), 1024);
    assert_eq!(srv.action("risk", &body), "big");
    // one byte over: refused from the Content-Length alone (the body need not be sent)
    let mut c = Conn::open(srv.port);
    c.send(b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n");
    let r = c.read_response().expect("a 413 answer");
    let message = r.assert_error(413, "body_too_large");
    assert!(message.contains("server.max_body_bytes"), "{message}");
    assert_eq!(srv.health()["status"], json!("ok"));
}

#[test]
fn more_than_64_headers_is_431() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let names: Vec<String> = (0..70).map(|i| format!("X-H-{i}")).collect();
    // request_bytes adds Host and Content-Length: 62 more make 64
    let headers: Vec<(&str, &str)> = names.iter().take(62).map(|n| (n.as_str(), "v")).collect();
    let r = call(srv.port, "POST", "/decide/risk", &headers, br#"{"x": 50}"#);
    assert_eq!(r.status, 200, "64 headers are allowed: {}", r.text());
    let headers: Vec<(&str, &str)> = names.iter().take(63).map(|n| (n.as_str(), "v")).collect();
    call(srv.port, "POST", "/decide/risk", &headers, br#"{"x": 50}"#).assert_error(431, "headers_too_large");
    let headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    call(srv.port, "GET", "/health", &headers, b"").assert_error(431, "headers_too_large");
    assert_eq!(srv.health()["status"], json!("ok"));
}

#[test]
fn more_than_16_kib_of_headers_is_431() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let fits = "a".repeat(15 * 1024);
    let r = call(srv.port, "POST", "/decide/risk", &[("X-Big", &fits)], br#"{"x": 50}"#);
    assert_eq!(r.status, 200, "15 KiB of headers are allowed: {}", r.text());
    let big = "a".repeat(17 * 1024);
    call(srv.port, "POST", "/decide/risk", &[("X-Big", &big)], br#"{"x": 50}"#).assert_error(431, "headers_too_large");
    // many medium headers adding up to more than 16 KiB
    let v = "b".repeat(400);
    let names: Vec<String> = (0..45).map(|i| format!("X-M-{i}")).collect();
    let headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), v.as_str())).collect();
    call(srv.port, "GET", "/health", &headers, b"").assert_error(431, "headers_too_large");
    assert_eq!(srv.health()["status"], json!("ok"));
}

#[test]
fn chunked_bodies_get_a_clear_411_or_400() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    c.send(b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"x\": 50}\r\n0\r\n\r\n");
    let r = c.read_response().expect("an answer to a chunked request");
    if r.status == 200 {
        assert_eq!(r.json()["action"]["a"], json!("big"), "chunked bodies that work must work right");
    } else {
        assert!(r.status == 411 || r.status == 400, "{r:?}");
        let j = r.json();
        assert!(j["error"]["code"].is_string() && j["error"]["message"].is_string(), "{j}");
    }
    assert_eq!(srv.health()["status"], json!("ok"));
}

// ---------------------------------------------------------------------------------------------
// admin listener and tokens

#[test]
fn admin_endpoints_are_not_served_on_the_main_port() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    srv.post("/reload", "").assert_error(404, "not_found");
    srv.post("/v1/reload", "").assert_error(404, "not_found");
    srv.post("/tables/risk/rollback", "").assert_error(404, "not_found");
    srv.post("/v1/tables/risk/rollback", "").assert_error(404, "not_found");
    // the GET endpoints are on the admin listener too
    for path in ["/health", "/metrics", "/tables", "/tables/risk", "/v1/health"] {
        assert_eq!(call(srv.admin, "GET", path, &[], b"").status, 200, "admin GET {path}");
    }
    assert_eq!(srv.admin_post("/reload").status, 200);
    assert_eq!(srv.admin_post("/v1/reload").status, 200);
}

#[test]
fn admin_token_file_guards_the_admin_listener() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    write(dir.path(), "secrets/admin.token", "  s3cret-admin\n\n");
    let text = config("", "  token_file: ./secrets/admin.token\n", "model:\n  watch_file: false\n");
    let srv = Server::launch(dir, |p| p.fill(&text).into_bytes(), |_, _| None);
    let a = srv.admin;
    call(a, "POST", "/reload", &[], b"").assert_error(401, "unauthorized");
    call(a, "POST", "/reload", &[("Authorization", "Bearer wrong")], b"").assert_error(401, "unauthorized");
    call(a, "POST", "/reload", &[("Authorization", "Bearer s3cret-admi")], b"").assert_error(401, "unauthorized");
    call(a, "POST", "/reload", &[("Authorization", "Basic s3cret-admin")], b"").assert_error(401, "unauthorized");
    call(a, "POST", "/tables/risk/rollback", &[], b"").assert_error(401, "unauthorized");
    let r = call(a, "POST", "/reload", &[("Authorization", "Bearer s3cret-admin")], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(a, "POST", "/v1/reload", &[("authorization", "bearer s3cret-admin")], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    // the decision port asks no token
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
}

#[test]
fn server_token_file_guards_decisions() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    write(dir.path(), "decide.token", "\tdecide-token  \n");
    let text = config("  token_file: decide.token\n", "", "model:\n  default_table: risk\n");
    let srv = Server::launch(dir, |p| p.fill(&text).into_bytes(), |_, _| None);
    let body = br#"{"x": 50}"#;
    call(srv.port, "POST", "/decide/risk", &[], body).assert_error(401, "unauthorized");
    call(srv.port, "POST", "/decide", &[], body).assert_error(401, "unauthorized");
    call(srv.port, "POST", "/decide/risk", &[("Authorization", "Bearer nope")], body).assert_error(401, "unauthorized");
    for path in ["/decide/risk", "/v1/decide", "/decide"] {
        let r = call(srv.port, "POST", path, &[("Authorization", "Bearer decide-token")], body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.json()["action"]["a"], json!("big"));
    }
    // health stays open for load balancers
    assert_eq!(srv.get("/health").status, 200);
}

/// What the Debian package does: no token file in the config, the token handed to the service as
/// a systemd credential (`LoadCredential=server-token:…`), read from `$CREDENTIALS_DIRECTORY`.
#[test]
fn a_systemd_credential_closes_the_decision_listener() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    write(dir.path(), "credentials/server-token", "cred-token\n");
    let credentials = dir.path().join("credentials");
    let text = config("", "", "model:\n  default_table: risk\n");
    let srv = Server::launch(
        dir,
        |p| p.fill(&text).into_bytes(),
        move |cmd, _| {
            cmd.env("CREDENTIALS_DIRECTORY", &credentials);
            None
        },
    );
    let r = srv.get("/tables");
    r.assert_error(401, "unauthorized");
    assert!(!r.text().contains("\"rules\""), "the rules must not show without the token: {}", r.text());
    call(srv.port, "POST", "/decide/risk", &[], br#"{"x": 50}"#).assert_error(401, "unauthorized");
    let r = call(srv.port, "GET", "/tables", &[("Authorization", "Bearer cred-token")], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(srv.port, "POST", "/decide/risk", &[("Authorization", "Bearer cred-token")], br#"{"x": 50}"#);
    assert_eq!(r.json()["action"]["a"], json!("big"), "{}", r.text());
    assert!(srv.log_text().contains("decision calls need the bearer token in"), "{}", srv.log_text());
}

// ---------------------------------------------------------------------------------------------
// tables, health, metrics

#[test]
fn a_table_that_fails_at_start_makes_health_degraded_and_is_503() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("broken.json", BROKEN)]);
    let r = srv.get("/health");
    assert_eq!(r.status, 200, "degraded is still 200: {}", r.text());
    let h = r.json();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    let err = h["errors"]["broken"].as_str().unwrap_or_else(|| panic!("no errors.broken: {h}"));
    // the decision port names the kind of failure; the admin listener has the diagnostic
    assert!(err.contains("not a valid table") && !err.contains("bogus"), "{err}");
    let full = call(srv.admin, "GET", "/health", &[], b"").json();
    let detail = full["errors"]["broken"].as_str().unwrap_or_else(|| panic!("no errors.broken: {full}"));
    assert!(detail.contains("bogus") && detail.contains("broken.json"), "the diagnostic names the problem: {detail}");
    assert_eq!(h["tables"]["risk"], json!(sha12(table("big").as_bytes())), "{h}");
    assert!(h["tables"].get("broken").is_none(), "{h}");
    for key in ["uptime_seconds", "version", "inflight", "load"] {
        assert!(h.get(key).is_some(), "no {key} in {h}");
    }
    let load = h["load"].as_f64().expect("load is a number");
    assert!((0.0..=1.0).contains(&load), "{h}");
    srv.post("/decide/broken", "{}").assert_error(503, "table_unavailable");
    // the others serve
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
    let t = srv.get("/tables").json();
    let broken = t["tables"].as_array().unwrap().iter().find(|t| t["name"] == json!("broken")).cloned();
    assert!(broken.is_some_and(|b| b["error"].is_string()), "{t}");
}

#[test]
fn health_is_ok_when_every_table_loads() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("b.json", &table("b"))]);
    let h = srv.health();
    assert_eq!(h["status"], json!("ok"), "{h}");
    assert!(h.get("errors").is_none(), "{h}");
    assert_eq!(h["tables"], json!({"risk": sha12(table("big").as_bytes()), "b": sha12(table("b").as_bytes())}));
    assert_eq!(h["version"], json!(env!("CARGO_PKG_VERSION")));
}

#[test]
fn tables_endpoints_describe_the_tables() {
    let other = r#"[{"id": "o1", "condition": "x > 1", "action": {"go": true}}]"#;
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("gate.json", other)]);
    let r = srv.get("/tables");
    assert_eq!(r.status, 200);
    let all = r.json();
    let list = all["tables"].as_array().unwrap_or_else(|| panic!("{all}"));
    let risk = list.iter().find(|t| t["name"] == json!("risk")).unwrap_or_else(|| panic!("{all}"));
    assert_eq!(risk["version"], json!(sha12(table("big").as_bytes())), "{risk}");
    assert!(risk["kind"].is_string(), "{risk}");
    assert!(risk["loaded_at"].is_string(), "{risk}");
    assert!(list.iter().any(|t| t["name"] == json!("gate")), "{all}");

    for path in ["/tables/risk", "/v1/tables/risk"] {
        let t = srv.get(path).json();
        assert_eq!(t["name"], json!("risk"), "{t}");
        assert_eq!(t["version"], json!(sha12(table("big").as_bytes())), "{t}");
        assert!(t["kind"].is_string() && t["loaded_at"].is_string(), "{t}");
        let rules = t["rules"].as_array().unwrap_or_else(|| panic!("{t}"));
        let ids: Vec<&Json> = rules.iter().map(|r| &r["id"]).collect();
        assert_eq!(ids, [&json!("big"), &json!("vip"), &json!("off")], "{t}");
        let enabled: Vec<&Json> = rules.iter().map(|r| &r["enabled"]).collect();
        assert_eq!(enabled, [&json!(true), &json!(true), &json!(false)], "{t}");
    }
    let g = srv.get("/tables/gate").json();
    assert_eq!(g["rules"][0]["id"], json!("o1"), "{g}");
    assert_eq!(g["rules"][0]["enabled"], json!(true), "{g}");
}

#[test]
fn metrics_count_decisions_and_show_table_info() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    for _ in 0..3 {
        srv.post("/decide/risk", r#"{"x": 50}"#);
    }
    srv.post("/decide/risk", r#"{"x": 0}"#);
    let r = srv.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/plain")), "{:?}", r.headers);
    let text = r.text();
    let version = sha12(table("big").as_bytes());
    let info = text
        .lines()
        .find(|l| l.starts_with("clef_table_info{") && l.contains("table=\"risk\""))
        .unwrap_or_else(|| panic!("no clef_table_info for risk:\n{text}"));
    assert!(info.contains(&format!("version=\"{version}\"")), "{info}");
    let big = text
        .lines()
        .find(|l| l.starts_with("clef_decisions_total{") && l.contains("table=\"risk\"") && l.contains("\"big\""))
        .unwrap_or_else(|| panic!("no clef_decisions_total for rule big:\n{text}"));
    assert!(big.ends_with(" 3"), "{big}");
    assert_eq!(srv.get("/v1/metrics").status, 200);
}

// ---------------------------------------------------------------------------------------------
// CORS

#[test]
fn cors_under_server_answers_preflight_and_marks_responses() {
    let text = config("  cors: {enabled: true}\n", "", "model:\n  default_table: risk\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    check_cors(&srv);
}

#[test]
fn cors_at_the_top_level_as_in_the_seed_works_too() {
    let text = config("", "", "model:\n  default_table: risk\ncors: {enabled: true}\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    check_cors(&srv);
}

#[test]
fn cors_is_off_by_default() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let r = call(srv.port, "POST", "/decide/risk", &[("Origin", "http://app.example")], br#"{"x": 50}"#);
    assert_eq!(r.status, 200);
    assert!(r.header("access-control-allow-origin").is_none(), "{:?}", r.headers);
}

fn check_cors(srv: &Server) {
    let pre = [("Origin", "http://app.example"), ("Access-Control-Request-Method", "POST")];
    let r = call(srv.port, "OPTIONS", "/decide/risk", &pre, b"");
    assert!(r.status == 200 || r.status == 204, "{r:?}");
    assert!(r.header("access-control-allow-origin").is_some(), "{:?}", r.headers);
    let methods = r.header("access-control-allow-methods").unwrap_or_else(|| panic!("{:?}", r.headers));
    assert!(methods.contains("POST"), "{methods}");
    let r = call(srv.port, "POST", "/decide/risk", &[("Origin", "http://app.example")], br#"{"x": 50}"#);
    assert_eq!(r.status, 200);
    assert!(r.header("access-control-allow-origin").is_some(), "{:?}", r.headers);
    assert_eq!(r.json()["action"]["a"], json!("big"));
}

// ---------------------------------------------------------------------------------------------
// config tolerance

fn launch_with(files: &[(&str, &str)], config_bytes: impl FnMut(&Ports) -> Vec<u8>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    Server::launch(dir, config_bytes, |_, _| None)
}

#[test]
fn config_with_a_utf8_bom_works() {
    let srv =
        launch_with(&[("tables/risk.json", &table("big"))], |p| format!("\u{feff}{}", p.fill(&plain())).into_bytes());
    assert_eq!(srv.post("/decide", r#"{"x": 50}"#).json()["action"]["a"], json!("big"));
}

#[test]
fn config_with_crlf_line_ends_works() {
    let srv = launch_with(&[("tables/risk.json", &table("big"))], |p| {
        p.fill(&config("  max_body_bytes: 2048\n", "", "model:\n  default_table: risk\n"))
            .replace('\n', "\r\n")
            .into_bytes()
    });
    assert_eq!(srv.post("/decide", r#"{"x": 50}"#).json()["action"]["a"], json!("big"));
    // the values after the CR were read right
    let mut c = Conn::open(srv.port);
    c.send(b"POST /decide/risk HTTP/1.1\r\nContent-Length: 2049\r\n\r\n");
    c.read_response().expect("413").assert_error(413, "body_too_large");
}

#[test]
fn config_with_a_backslash_relative_tables_dir_works() {
    let text = config("", "", "model:\n  tables_dir: .\\conf\\rules\n  default_table: risk\n");
    let srv = launch_with(&[("conf/rules/risk.json", &table("from-conf"))], |p| p.fill(&text).into_bytes());
    assert_eq!(srv.post("/decide", r#"{"x": 50}"#).json()["action"]["a"], json!("from-conf"));
}

#[test]
fn config_with_a_double_quoted_backslash_path_works() {
    // YAML would read `\r` as a carriage return; SPEC §5 says this works as a path
    let text = config("", "", "model:\n  decision_table_path: \"other\\risk.json\"\n");
    let srv = launch_with(&[("other/risk.json", &table("quoted"))], |p| p.fill(&text).into_bytes());
    let d = srv.post("/decide", r#"{"x": 50}"#).json();
    assert_eq!((&d["table"], &d["action"]["a"]), (&json!("risk"), &json!("quoted")), "{d}");
}

#[test]
fn a_windows_absolute_path_refuses_to_start_and_says_so() {
    for path in ["C:\\clef\\tables", "'C:/clef/tables'"] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "tables/risk.json", table("big"));
        let (status, err) = refused(&dir, &config("", "", &format!("model:\n  tables_dir: {path}\n")), &[]);
        assert!(!status.success(), "{status}\n{err}");
        assert!(err.contains("Windows"), "the message should mention Windows:\n{err}");
    }
}

#[test]
fn an_unknown_key_refuses_to_start_with_position_and_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    // line 3, column 3: `prot`
    let (status, err) =
        refused(&dir, "server:\n  host: 127.0.0.1\n  prot: 1\nadmin:\n  listen: 127.0.0.1:@ADMIN@\n", &[]);
    assert!(!status.success(), "{status}\n{err}");
    assert!(err.contains("config.yaml:3:3"), "no config.yaml:3:3 in:\n{err}");
    assert!(err.contains("did you mean"), "no suggestion in:\n{err}");
    assert!(err.contains("port"), "should suggest `port`:\n{err}");
    // flow style, as the seed writes it
    let (status, err) = refused(&dir, "server: {host: 127.0.0.1, prot: 1}\nadmin: {listen: 127.0.0.1:@ADMIN@}\n", &[]);
    assert!(!status.success(), "{status}\n{err}");
    assert!(err.contains("config.yaml:1:27"), "no config.yaml:1:27 in:\n{err}");
    assert!(err.contains("did you mean"), "no suggestion in:\n{err}");
}

#[test]
fn an_unknown_key_in_the_environment_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    let (status, err) = refused(&dir, &plain(), &[("CLEF_SERVER__PROT", "9")]);
    assert!(!status.success(), "{err}");
    assert!(err.contains("CLEF_SERVER__PROT") && err.contains("did you mean"), "{err}");
}

#[test]
fn relative_paths_resolve_against_the_config_folder_not_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    write(dir.path(), "keys/token", "tok\n");
    let text = config("  token_file: ./keys/token\n", "", "model:\n  tables_dir: ./tables\n  default_table: risk\n");
    let srv = Server::launch(
        dir,
        |p| p.fill(&text).into_bytes(),
        |cmd, _| {
            cmd.current_dir("/");
            None
        },
    );
    let r = call(srv.port, "POST", "/decide", &[("Authorization", "Bearer tok")], br#"{"x": 50}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["action"]["a"], json!("big"));
}

#[test]
fn the_clef_server_port_env_var_picks_the_port() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    let text = plain();
    let mut file_port = 0;
    let srv = Server::launch(
        dir,
        |p| p.fill(&text).into_bytes(),
        |cmd, p| {
            file_port = p.main;
            cmd.env("CLEF_SERVER__PORT", p.spare.to_string());
            Some(p.spare)
        },
    );
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
    assert!(TcpStream::connect(("127.0.0.1", file_port)).is_err(), "the file's port should not be used");
}

#[test]
fn the_port_flag_overrides_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    let text = plain();
    let mut file_port = 0;
    let srv = Server::launch(
        dir,
        |p| p.fill(&text).into_bytes(),
        |cmd, p| {
            file_port = p.main;
            // the flag beats the environment as well
            cmd.env("CLEF_SERVER__PORT", p.main.to_string());
            cmd.arg("--port").arg(p.spare.to_string());
            Some(p.spare)
        },
    );
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
    assert!(TcpStream::connect(("127.0.0.1", file_port)).is_err(), "the file's port should not be used");
}

// ---------------------------------------------------------------------------------------------
// reloads and rollback

/// The watcher takes its first fingerprint (of the tables and of config.yaml) only after the
/// listeners are up, so a change made right after /health first answers could be taken as the
/// baseline; also file times are coarse (a few ms). Give it a moment.
fn settle_watcher() {
    std::thread::sleep(Duration::from_millis(150));
}

#[test]
fn watched_tables_reload_keep_the_old_version_on_errors_and_recover() {
    let text = config("", "", "model:\n  default_table: risk\n  watch_file: true\n");
    let srv = Server::start(&text, &[("risk.json", &table("one"))]);
    settle_watcher();
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "one");
    srv.write_table("risk.json", &table("two-two"));
    srv.eventually(3, "the rewritten table serves", |s| s.action("risk", r#"{"x": 50}"#) == "two-two");
    assert_eq!(srv.health()["status"], json!("ok"));

    srv.write_table("risk.json", BROKEN);
    srv.eventually(3, "health turns degraded", |s| s.health()["status"] == json!("degraded"));
    let h = srv.health();
    assert!(h["errors"]["risk"].is_string(), "{h}");
    assert_eq!(h["tables"]["risk"], json!(sha12(table("two-two").as_bytes())), "the old version still serves: {h}");
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "two-two");

    srv.write_table("risk.json", &table("three-three-three"));
    srv.eventually(3, "health recovers", |s| s.health()["status"] == json!("ok"));
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "three-three-three");
    assert!(srv.health().get("errors").is_none());
}

#[test]
fn post_reload_answers_each_tables_result() {
    let srv = Server::start(
        &plain(),
        &[
            ("changed.json", &table("c1")),
            ("same.json", &table("s")),
            ("breaks.json", &table("b")),
            ("gone.json", &table("g")),
        ],
    );
    srv.write_table("changed.json", &table("c2"));
    srv.write_table("breaks.json", BROKEN);
    std::fs::remove_file(srv.path().join("tables/gone.json")).unwrap();
    srv.write_table("new.json", &table("n"));
    let r = srv.admin_post("/reload");
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    let list = j["tables"].as_array().unwrap_or_else(|| panic!("{j}"));
    let of = |name: &str| {
        list.iter().find(|t| t["table"] == json!(name)).unwrap_or_else(|| panic!("no result for {name}: {j}")).clone()
    };
    assert_eq!(of("changed")["result"], json!("loaded"), "{j}");
    assert_eq!(of("changed")["version"], json!(sha12(table("c2").as_bytes())), "{j}");
    assert_eq!(of("same")["result"], json!("unchanged"), "{j}");
    assert_eq!(of("new")["result"], json!("loaded"), "{j}");
    // a file that is gone serves for a moment (an editor's save, a deploy), then the table goes
    assert_eq!(of("gone")["result"], json!("missing"), "{j}");
    assert_eq!(of("gone")["serving"], json!(sha12(table("g").as_bytes())), "{j}");
    let breaks = of("breaks");
    assert_eq!(breaks["result"], json!("failed"), "{j}");
    assert!(breaks["error"].as_str().is_some_and(|e| e.contains("bogus")), "the diagnostic is included: {j}");
    // what serves now
    assert_eq!(srv.action("changed", r#"{"x": 50}"#), "c2");
    assert_eq!(srv.action("breaks", r#"{"x": 50}"#), "b");
    assert_eq!(srv.action("new", r#"{"x": 50}"#), "n");
    srv.eventually(5, "the table whose file is gone is removed", |s| s.post("/decide/gone", "{}").status == 404);
    srv.post("/decide/gone", "{}").assert_error(404, "unknown_table");
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    assert!(h["errors"]["breaks"].is_string(), "{h}");
}

#[test]
fn sighup_reloads_tables() {
    let srv = Server::start(&plain(), &[("risk.json", &table("before"))]);
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "before");
    srv.write_table("risk.json", &table("after"));
    // watch_file is off: nothing changes until the signal
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "before");
    srv.signal(Signal::SIGHUP);
    srv.eventually(3, "SIGHUP reloads the table", |s| s.action("risk", r#"{"x": 50}"#) == "after");
    assert_eq!(srv.health()["tables"]["risk"], json!(sha12(table("after").as_bytes())));
}

#[test]
fn rollback_serves_the_previous_version_again() {
    let srv = Server::start(&plain(), &[("risk.json", &table("v1")), ("solo.json", &table("solo"))]);
    let v1 = sha12(table("v1").as_bytes());
    let v2 = sha12(table("v2").as_bytes());
    // nothing to roll back to yet
    srv.admin_post("/tables/risk/rollback").assert_error(409, "no_previous_version");
    srv.admin_post("/tables/nope/rollback").assert_error(404, "unknown_table");

    srv.write_table("risk.json", &table("v2"));
    assert_eq!(srv.admin_post("/reload").status, 200);
    assert_eq!(srv.health()["tables"]["risk"], json!(v2));
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v2");

    let r = srv.admin_post("/tables/risk/rollback");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["version"], json!(v1), "{}", r.text());
    assert_eq!(srv.health()["tables"]["risk"], json!(v1));
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v1");
    assert_eq!(srv.get("/tables/risk").json()["version"], json!(v1));
    // only one earlier version existed
    let r = srv.admin_post("/v1/tables/risk/rollback");
    r.assert_error(409, "no_previous_version");
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v1");
    // other tables are untouched
    assert_eq!(srv.action("solo", r#"{"x": 50}"#), "solo");
    srv.admin_post("/tables/solo/rollback").assert_error(409, "no_previous_version");
}

#[test]
fn no_request_fails_across_100_reloads() {
    let srv = Server::start(&plain(), &[("risk.json", &table("v1"))]);
    let stop = Arc::new(AtomicBool::new(false));
    let port = srv.port;
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = Conn::open(port);
            let mut failures = Vec::new();
            let mut seen = [0usize; 2];
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 200_000 {
                n += 1;
                match c.try_request("POST", "/decide/risk", &[], br#"{"x": 50}"#) {
                    Ok(r) if r.status == 200 => match r.json()["action"]["a"].as_str() {
                        Some("v1") => seen[0] += 1,
                        Some("v2") => seen[1] += 1,
                        _ => failures.push(r.text()),
                    },
                    Ok(r) => failures.push(format!("{} {}", r.status, r.text())),
                    Err(e) => {
                        failures.push(format!("request {n}: {e}"));
                        break;
                    }
                }
            }
            (n, seen, failures)
        })
    };
    let mut admin = Conn::open(srv.admin);
    for i in 0..100 {
        let v = if i % 2 == 0 { "v2" } else { "v1" };
        srv.write_table("risk.json", &table(v));
        let r = admin.request("POST", "/reload", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["tables"][0]["result"], json!("loaded"), "reload {i}: {}", r.text());
    }
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (n, seen, failures) = client.join().expect("client thread");
    assert!(failures.is_empty(), "{} of {n} requests failed: {:?}", failures.len(), &failures[..failures.len().min(5)]);
    assert!(n > 100, "only {n} requests");
    assert!(seen[0] > 0 && seen[1] > 0, "both versions should have served: {seen:?}");
}

// ---------------------------------------------------------------------------------------------
// connections

#[test]
fn keep_alive_serves_many_requests_on_one_socket() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    for i in 0..20 {
        let r = match i % 4 {
            0 => c.request("POST", "/decide/risk", &[], br#"{"x": 50}"#),
            1 => c.request("GET", "/health", &[], b""),
            2 => c.request("POST", "/decide/nope", &[], b"{}"),
            _ => c.request("POST", "/decide/risk", &[], b"[1]"),
        };
        let want = [200, 200, 404, 400][i % 4];
        assert_eq!(r.status, want, "request {i}: {}", r.text());
        assert!(r.header("connection").is_none_or(|v| !v.eq_ignore_ascii_case("close")), "request {i}: {r:?}");
    }
    // Connection: close is honoured
    let r = c.request("GET", "/health", &[("Connection", "close")], b"");
    assert_eq!(r.status, 200);
    assert!(c.closed_within(Duration::from_secs(2)), "the server should close after Connection: close");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    let mut all = Vec::new();
    all.extend(request_bytes("POST", "/decide/risk", &[], br#"{"x": 50}"#));
    all.extend(request_bytes("GET", "/health", &[], b""));
    all.extend(request_bytes("POST", "/decide/risk", &[], br#"{"x": 0}"#));
    all.extend(request_bytes("POST", "/decide/risk", &[], br#"{"x": 5, "tier": "vip"}"#));
    all.extend(request_bytes("GET", "/tables/risk", &[], b""));
    c.send(&all);
    let rs: Vec<Resp> = (0..5).map(|i| c.read_response().unwrap_or_else(|e| panic!("response {i}: {e}"))).collect();
    assert!(rs.iter().all(|r| r.status == 200), "{rs:?}");
    assert_eq!(rs[0].json()["action"]["a"], json!("big"));
    assert!(rs[1].json()["status"].is_string());
    assert_eq!(rs[2].json()["action"]["a"], json!("default"));
    assert_eq!(rs[3].json()["action"]["a"], json!("vip"));
    assert_eq!(rs[4].json()["name"], json!("risk"));
    // and the connection is still usable
    assert_eq!(c.request("GET", "/health", &[], b"").status, 200);
}

#[test]
fn garbage_and_truncated_requests_do_not_hurt_the_server() {
    let text = config("  read_timeout_ms: 1000\n", "", "model:\n  default_table: risk\n  watch_file: false\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // raw garbage instead of HTTP: an error or a close, never a hang beyond the read timeout
    let mut conns = Vec::new();
    for i in 0..8 {
        let mut bytes: Vec<u8> = (0..200 + i * 100).map(|_| next() as u8).collect();
        if i % 2 == 0 {
            bytes.extend_from_slice(b"\r\n\r\n");
        }
        let mut c = Conn::open(srv.port);
        let _ = c.stream.write_all(&bytes);
        conns.push(c);
    }
    for mut c in conns {
        match c.read_response() {
            Ok(r) => assert!((400..500).contains(&r.status), "garbage got {r:?}"),
            Err(e) => assert!(
                !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
                "the server neither answered nor closed: {e}"
            ),
        }
    }
    assert_eq!(srv.health()["status"], json!("ok"));
    // garbage as a JSON body
    for i in 0..10 {
        let body: Vec<u8> = (0..50 + i * 37).map(|_| next() as u8).collect();
        let r = call(srv.port, "POST", "/decide/risk", &[], &body);
        assert_eq!(r.status, 400, "{}", r.text());
    }
    // truncated JSON bodies
    let full = br#"{"x": 50, "tier": "vip", "list": [1, 2, {"k": "v"}]}"#;
    for cut in [1, 5, 10, 20, 35, full.len() - 1] {
        call(srv.port, "POST", "/decide/risk", &[], &full[..cut]).assert_error(400, "invalid_json");
    }
    // a body shorter than its Content-Length, then the client gives up
    {
        let mut c = Conn::open(srv.port);
        c.send(b"POST /decide/risk HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"x\": 1");
    }
    // a Content-Length that is not a number
    let mut c = Conn::open(srv.port);
    c.send(b"POST /decide/risk HTTP/1.1\r\nContent-Length: lots\r\n\r\n{}");
    let r = c.read_response().expect("an answer");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]["code"].is_string());
    assert_eq!(srv.health()["status"], json!("ok"));
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
}

#[test]
fn a_body_just_under_the_limit_is_decided() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    // the default max_body_bytes is 65536
    let frame = r#"{"x": 50, "pad": ""}"#.len();
    let body = format!(r#"{{"x": 50, "pad": "{}"}}"#, "z".repeat(65536 - frame));
    assert_eq!(body.len(), 65536);
    assert_eq!(srv.action("risk", &body), "big");
    let body = format!(r#"{{"x": 50, "list": [{}0]}}"#, "1,".repeat(30000));
    assert!(body.len() < 65536);
    assert_eq!(srv.action("risk", &body), "big");
    assert_eq!(srv.health()["status"], json!("ok"));
}

fn nested(levels: usize) -> String {
    // the top-level object is level 1
    format!("{{\"x\": 50, \"a\": {}{}}}", "[".repeat(levels - 1), "]".repeat(levels - 1))
}

#[test]
fn deeply_nested_json_is_rejected_without_a_crash() {
    let text = config("  max_body_bytes: 1048576\n", "", "model:\n  default_table: risk\n  watch_file: false\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    assert_eq!(srv.action("risk", &nested(128)), "big", "128 levels are accepted");
    srv.post("/decide/risk", &nested(129)).assert_error(400, "invalid_json");
    let r = srv.post("/decide/risk", &nested(100_000));
    assert_eq!(r.status, 400, "{}", r.text());
    let objects = format!("{}{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
    assert_eq!(srv.post("/decide/risk", &objects).status, 400);
    let unclosed = "[".repeat(500_000);
    assert_eq!(srv.post("/decide/risk", &unclosed).status, 400);
    assert_eq!(srv.health()["status"], json!("ok"));
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
}

#[test]
fn non_utf8_inside_a_json_string_is_invalid_json() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    for body in [&b"{\"x\": 50, \"s\": \"\xff\xfe\"}"[..], b"{\"x\": 50, \"s\": \"a\xc3\"}", b"{\"\xe2\x82\": 1}"] {
        let r = call(srv.port, "POST", "/decide/risk", &[], body);
        r.assert_error(400, "invalid_json");
    }
    assert_eq!(srv.health()["status"], json!("ok"));
}

#[test]
fn a_slow_client_times_out_while_others_are_served() {
    let text = config("  read_timeout_ms: 500\n", "", "model:\n  default_table: risk\n  watch_file: false\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    let started = Instant::now();
    let mut slow = Conn::open(srv.port);
    slow.send(b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"x\": ");
    let mut slow_head = Conn::open(srv.port);
    slow_head.send(b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nContent-Len");
    // meanwhile others are served at once
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
        assert!(t.elapsed() < Duration::from_millis(300), "a normal request took {:?}", t.elapsed());
    }
    for (what, c) in [("half a body", &mut slow), ("half a head", &mut slow_head)] {
        match c.read_response() {
            Ok(r) => assert_eq!(r.status, 408, "{what}: {}", r.text()),
            Err(e) => assert!(
                !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
                "{what}: the server neither answered nor closed: {e}"
            ),
        }
        assert!(c.closed_within(Duration::from_secs(2)), "{what}: still open");
    }
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert!(started.elapsed() >= Duration::from_millis(400), "timed out early: {:?}", started.elapsed());
    assert_eq!(srv.health()["status"], json!("ok"));
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let text = config("  idle_timeout_ms: 400\n", "", "model:\n  default_table: risk\n  watch_file: false\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    let mut idle = Conn::open(srv.port);
    assert_eq!(idle.request("GET", "/health", &[], b"").status, 200);
    let since = Instant::now();
    // a busy connection is not idle
    let mut busy = Conn::open(srv.port);
    for _ in 0..8 {
        assert_eq!(busy.request("GET", "/health", &[], b"").status, 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(idle.closed_within(Duration::from_secs(2)), "the idle connection is still open");
    assert!(since.elapsed() >= Duration::from_millis(300), "closed too early: {:?}", since.elapsed());
    assert_eq!(busy.request("GET", "/health", &[], b"").status, 200);
}

#[test]
fn connections_beyond_max_connections_are_closed_at_once() {
    let text = config("  max_connections: 2\n", "", "model:\n  default_table: risk\n  watch_file: false\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    // let the start-up health probes' connections be counted out
    std::thread::sleep(Duration::from_millis(200));
    let mut a = Conn::open(srv.port);
    assert_eq!(a.request("GET", "/health", &[], b"").status, 200);
    let mut b = Conn::open(srv.port);
    assert_eq!(b.request("GET", "/health", &[], b"").status, 200);
    let mut third = Conn::open(srv.port);
    let t = Instant::now();
    assert!(third.closed_within(Duration::from_secs(1)), "a third connection should be closed at once");
    assert!(t.elapsed() < Duration::from_millis(900));
    for c in [&mut a, &mut b] {
        let r = c.request("POST", "/decide/risk", &[], br#"{"x": 50}"#);
        assert_eq!(r.json()["action"]["a"], json!("big"));
    }
    // once one closes, a new one is served
    drop(a);
    srv.eventually(2, "a slot frees up", |s| {
        Conn::try_open(s.port)
            .and_then(|mut c| c.try_request("GET", "/health", &[], b""))
            .is_ok_and(|r| r.status == 200)
    });
    assert_eq!(b.request("GET", "/health", &[], b"").status, 200);
}

// ---------------------------------------------------------------------------------------------
// shutdown

#[test]
fn sigterm_drains_and_exits_0() {
    let mut srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    assert_eq!(c.request("GET", "/health", &[], b"").status, 200);
    srv.signal(Signal::SIGTERM);
    // While draining, /health is 503 "draining" and every answer closes its connection; a
    // decision on a new connection is 503 draining too.
    let mut observed = false;
    for _ in 0..200 {
        let h = match c.try_request("GET", "/health", &[], b"") {
            Ok(r) => r,
            Err(_) => break,
        };
        if h.status == 503 {
            assert_eq!(h.json()["status"], json!("draining"), "{}", h.text());
            assert_eq!(h.header("connection"), Some("close"), "{:?}", h.headers);
            observed = true;
            if let Ok(mut d) = Conn::try_open(srv.port) {
                if let Ok(r) = d.try_request("POST", "/decide/risk", &[], br#"{"x": 50}"#) {
                    r.assert_error(503, "draining");
                    assert_eq!(r.header("connection"), Some("close"));
                }
            }
            break;
        }
        assert_eq!(h.json()["status"], json!("ok"));
    }
    assert!(observed, "never saw draining");
    let status = srv.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}\n{}", srv.log_text());
}

// ---------------------------------------------------------------------------------------------
// more HTTP details

#[test]
fn expect_100_continue_is_answered() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    c.send(b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n");
    while find(&c.buf, b"\r\n\r\n").is_none() {
        c.fill().expect("an interim answer");
    }
    assert!(c.buf.starts_with(b"HTTP/1.1 100"), "{}", String::from_utf8_lossy(&c.buf));
    c.send(br#"{"x": 50}"#);
    let r = c.read_response().expect("the decision");
    assert_eq!(r.json()["action"]["a"], json!("big"));
}

#[test]
fn head_answers_carry_no_body_so_keep_alive_stays_in_step() {
    // A HEAD answer must not carry the GET body (RFC 9110 §9.3.2): a client would read those
    // bytes as the start of the next answer, and pipelining and keep-alive would break.
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    let mut all = request_bytes("HEAD", "/health", &[], b"");
    all.extend(request_bytes("GET", "/tables", &[], b""));
    c.send(&all);
    // the HEAD answer: a head only (its Content-Length is the GET's, but no body follows)
    let end = loop {
        if let Some(i) = find(&c.buf, b"\r\n\r\n") {
            break i;
        }
        c.fill().expect("the HEAD answer");
    };
    assert!(c.buf.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&c.buf));
    c.buf.drain(..end + 4);
    while c.buf.len() < 9 {
        c.fill().expect("the GET answer");
    }
    assert!(
        c.buf.starts_with(b"HTTP/1.1 "),
        "after the HEAD answer's head the server sent a body: {:?}",
        String::from_utf8_lossy(&c.buf[..c.buf.len().min(120)])
    );
    let next = c.read_response().expect("the GET answer");
    assert_eq!(next.status, 200);
    assert!(next.json()["tables"].is_array());
}

#[test]
fn a_trickling_client_is_cut_off_by_the_read_timeout() {
    let text = config("  read_timeout_ms: 500\n", "", "model:\n  default_table: risk\n  watch_file: false\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    let mut c = Conn::open(srv.port);
    let mut writer = c.stream.try_clone().unwrap();
    let started = Instant::now();
    let trickle = std::thread::spawn(move || {
        // one byte every 100 ms: each read succeeds, the request never completes
        for b in b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{\"x\": 50".iter().take(30) {
            if writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    match c.read_response() {
        Ok(r) => assert_eq!(r.status, 408, "{}", r.text()),
        Err(e) => assert!(
            !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
            "the server neither answered nor closed: {e}"
        ),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "the read timeout counts from the request's first byte");
    trickle.join().unwrap();
    assert_eq!(srv.health()["status"], json!("ok"));
}

#[test]
fn cors_origins_list_allows_only_those_origins() {
    let text =
        config("  cors: {enabled: true, origins: [\"https://ok.example\"]}\n", "", "model:\n  default_table: risk\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    let r = call(srv.port, "POST", "/decide/risk", &[("Origin", "https://ok.example")], br#"{"x": 50}"#);
    assert_eq!(r.header("access-control-allow-origin"), Some("https://ok.example"), "{:?}", r.headers);
    let r = call(srv.port, "POST", "/decide/risk", &[("Origin", "https://evil.example")], br#"{"x": 50}"#);
    assert!(r.header("access-control-allow-origin").is_none(), "{:?}", r.headers);
}

// ---------------------------------------------------------------------------------------------
// more reload details

#[test]
fn a_table_that_never_loaded_serves_once_fixed() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("late.json", BROKEN)]);
    srv.post("/decide/late", "{}").assert_error(503, "table_unavailable");
    srv.write_table("late.json", &table("late"));
    let r = srv.admin_post("/reload").json();
    let late = r["tables"].as_array().unwrap().iter().find(|t| t["table"] == json!("late")).cloned().unwrap();
    assert_eq!(late["result"], json!("loaded"), "{r}");
    assert_eq!(srv.action("late", r#"{"x": 50}"#), "late");
    let h = srv.health();
    assert_eq!(h["status"], json!("ok"), "{h}");
    assert!(h.get("errors").is_none(), "{h}");
}

#[test]
fn rollback_keeps_the_last_three_versions() {
    let srv = Server::start(&plain(), &[("risk.json", &table("v1"))]);
    for v in ["v2", "v3", "v4", "v5"] {
        srv.write_table("risk.json", &table(v));
        assert_eq!(srv.admin_post("/reload").status, 200);
    }
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v5");
    for v in ["v4", "v3", "v2"] {
        let r = srv.admin_post("/tables/risk/rollback");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["version"], json!(sha12(table(v).as_bytes())));
        assert_eq!(srv.action("risk", r#"{"x": 50}"#), v);
        assert_eq!(srv.health()["tables"]["risk"], json!(sha12(table(v).as_bytes())));
    }
    srv.admin_post("/tables/risk/rollback").assert_error(409, "no_previous_version");
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v2");
}

#[test]
fn a_changed_config_file_is_logged_as_needing_a_restart() {
    let text = config("", "", "model:\n  default_table: risk\n  watch_file: true\n");
    let srv = Server::start(&text, &[("risk.json", &table("big"))]);
    settle_watcher();
    let cfg = srv.path().join("config.yaml");
    let mut now = std::fs::read_to_string(&cfg).unwrap();
    now.push_str("# edited\n");
    std::fs::write(&cfg, now).unwrap();
    srv.eventually(3, "the log mentions a restart", |s| s.log_text().contains("restart"));
    // and nothing else changed
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
}

#[test]
fn a_port_in_use_makes_serve_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", table("big"));
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let text = plain().replace("@PORT@", &port.to_string());
    let (status, err) = refused(&dir, &text, &[]);
    assert!(!status.success(), "{status}\n{err}");
    assert!(err.contains(&port.to_string()), "the message should name the address:\n{err}");
}

#[test]
fn metrics_show_the_last_successful_reload_and_latency_buckets() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    srv.post("/decide/risk", r#"{"x": 50}"#);
    let text = srv.get("/metrics").text();
    let last = text
        .lines()
        .find(|l| l.starts_with("clef_last_reload_success_timestamp_seconds"))
        .unwrap_or_else(|| panic!("no last-reload metric:\n{text}"));
    let secs: f64 = last.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(secs > 1.0e9, "the start-up load was successful: {last}");
    assert!(text.lines().any(|l| l.contains("_bucket{") && l.contains("table=\"risk\"")), "no histogram:\n{text}");
}
