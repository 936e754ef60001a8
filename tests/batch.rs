//! `POST /decide/{table}/batch` and `POST /decide/batch` (SPEC §6): NDJSON or a JSON array in,
//! NDJSON out, one line per input in input order, each what the single call answers.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use common::*;
use serde_json::{json, Value as Json};

fn lines(r: &Resp) -> Vec<Json> {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    r.text().lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The parts of a decision that do not depend on the time.
fn decision_core(d: &Json) -> Json {
    json!({"rule_id": d["rule_id"], "matched": d["matched"], "action": d["action"], "table": d["table"],
           "version": d["version"], "warnings": d["warnings"]})
}

#[test]
fn each_line_is_what_the_single_call_answers_in_input_order() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let inputs = [r#"{"x": 50}"#, r#"{"tier": "vip", "x": 2}"#, r#"{"x": 0}"#, r#"{"x": "s"}"#, r#"{}"#];
    let body = inputs.join("\n");
    let got = lines(&srv.post("/decide/risk/batch", &body));
    assert_eq!(got.len(), inputs.len());
    for (input, line) in inputs.iter().zip(&got) {
        let single = srv.post("/decide/risk", input).json();
        assert_eq!(decision_core(line), decision_core(&single), "{input}");
    }
    // a JSON array, the default table, and /v1
    let array = format!("[{}]", inputs.join(","));
    let again = lines(&srv.post("/v1/decide/batch", &array));
    assert_eq!(again.iter().map(decision_core).collect::<Vec<_>>(), got.iter().map(decision_core).collect::<Vec<_>>());
}

#[test]
fn a_bad_line_answers_its_own_error_and_the_rest_go_on() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let body = "{\"x\": 50}\n\n{\"x\":\n[1, 2]\n   \n{\"x\": 11}\r\n";
    let got = lines(&srv.post("/decide/risk/batch", body));
    assert_eq!(got.len(), 4, "blank lines are skipped: {got:?}");
    assert_eq!(got[0]["action"]["a"], json!("big"));
    assert_eq!(got[1]["error"]["code"], json!("invalid_json"));
    assert_eq!(got[1]["line"], json!(3));
    assert_eq!(got[2]["error"]["code"], json!("not_an_object"));
    assert_eq!(got[2]["line"], json!(4));
    assert_eq!(got[3]["action"]["a"], json!("big"), "a CRLF line end is fine");
    // in an array, the line is the element's position
    let got = lines(&srv.post("/decide/risk/batch", r#"[{"x": 50}, "no", {"x": 50}]"#));
    assert_eq!((got[1]["error"]["code"].clone(), got[1]["line"].clone()), (json!("not_an_object"), json!(2)));
}

#[test]
fn batch_limits_and_errors() {
    let srv = Server::start(
        &config("  max_body_bytes: 1000\n", "", "model:\n  default_table: risk\n  watch_file: false\n"),
        &[("risk.json", &table("big"))],
    );
    // max_body_bytes applies to the whole body
    let body = vec![r#"{"x": 50}"#; 200].join("\n");
    srv.post("/decide/risk/batch", &body).assert_error(413, "body_too_large");
    srv.post("/decide/nope/batch", "{}").assert_error(404, "unknown_table");
    // an array that is not JSON as a whole is one error for the whole body
    srv.post("/decide/risk/batch", r#"[{"x": 50}, "#).assert_error(400, "invalid_json");
    srv.get("/decide/risk/batch").assert_error(405, "method_not_allowed");
    // an empty body is an empty answer
    assert!(lines(&srv.post("/decide/risk/batch", "")).is_empty());
}

#[test]
fn streamed_answers_keep_pipelined_requests_in_step() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    // a batch whose answer spans many chunks, between other requests sent in one go
    let big = [r#"{"x": 50}"#; 2000].join("\n");
    let mut c = Conn::open(srv.port);
    let mut all = request_bytes("POST", "/decide/risk/batch", &[], big.as_bytes());
    all.extend(request_bytes("GET", "/health", &[], b""));
    all.extend(request_bytes("HEAD", "/metrics", &[], b""));
    all.extend(request_bytes("GET", "/metrics", &[], b""));
    all.extend(request_bytes("POST", "/decide/risk/batch?explain=true", &[], br#"{"x": 50}"#));
    all.extend(request_bytes("POST", "/decide/risk", &[("Connection", "close")], br#"{"x": 50}"#));
    c.send(&all);
    let batch = c.read_response().expect("the batch");
    assert!(batch.body.len() > 200_000, "{} bytes", batch.body.len());
    assert_eq!(lines(&batch).len(), 2000);
    assert_eq!(c.read_response().expect("/health").json()["status"], json!("ok"));
    c.head_only = true;
    let head = c.read_response().expect("HEAD /metrics");
    c.head_only = false;
    assert_eq!((head.status, head.header("transfer-encoding"), head.body.len()), (200, Some("chunked"), 0));
    assert!(c.read_response().expect("/metrics").text().contains("clef_decisions_total{"));
    let explained = lines(&c.read_response().expect("the explained batch"));
    assert!(explained[0]["trace"].is_array(), "{}", explained[0]);
    let last = c.read_response().expect("the last decision");
    assert_eq!((last.json()["action"]["a"].clone(), last.header("connection")), (json!("big"), Some("close")));
    assert!(c.closed_within(std::time::Duration::from_secs(2)));
}

#[test]
fn a_batch_forwarded_by_a_router_is_answered_by_the_peer() {
    // The router's client reads answers with a Content-Length: the peer sends a forwarded
    // batch's answer whole, however it streams the batches of its own clients.
    let peer_port = free_port();
    let peer_config = format!(
        "server:\n  host: 127.0.0.1\n  port: {peer_port}\nadmin:\n  listen: \"\"\nmodel:\n  watch_file: false\n"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "tables/remote.json", table("remote"));
    let _peer = Server::launch(dir, move |_| peer_config.clone().into_bytes(), move |_, _| Some(peer_port));
    let router = Server::start(
        &config(
            "",
            "",
            &format!(
                "model:\n  watch_file: false\nrouter:\n  forward_timeout_ms: 5000\n  health: {{interval_ms: 100, timeout_ms: 80, unhealthy_after: 2, \
                 healthy_after: 1, ejection_ms: 1000}}\n  instances:\n    - {{id: local}}\n    - {{id: p, addr: 127.0.0.1:{peer_port}}}\n"
            ),
        ),
        &[("risk.json", &table("big"))],
    );
    let body = [r#"{"x": 50}"#; 300].join("\n");
    router
        .eventually(5, "the peer answers through the router", |r| r.post("/decide/remote/batch", &body).status == 200);
    let got = lines(&router.post("/decide/remote/batch", &body));
    assert_eq!(got.len(), 300);
    assert!(got.iter().all(|d| d["action"]["a"] == json!("remote") && d["instance"] == json!("p")), "{:?}", got[0]);
}

#[test]
fn what_one_batch_may_produce_is_bounded_by_max_batch_lines() {
    let srv = Server::start(
        &config("  max_batch_lines: 50\n", "", "model:\n  default_table: risk\n  watch_file: false\n"),
        &[("risk.json", &table("big"))],
    );
    // blank lines are not inputs
    let fifty = [r#"{"x": 50}"#; 50].join("\n\n");
    assert_eq!(lines(&srv.post("/decide/risk/batch", &fifty)).len(), 50);
    let m = srv.post("/decide/risk/batch", &format!("{fifty}\n{{}}")).assert_error(413, "batch_too_large");
    assert!(m.contains("51 inputs") && m.contains("server.max_batch_lines"), "{m}");
    let array = format!("[{}]", ["{}"; 51].join(","));
    srv.post("/decide/risk/batch", &array).assert_error(413, "batch_too_large");
}

#[test]
fn batch_answers_are_chunked_and_whole_to_clients_that_cannot_read_chunks() {
    let srv = Server::start(
        &config(
            "  max_body_bytes: 1000\n  request_memory_bytes: 17384\n",
            "",
            "model:\n  default_table: risk\n  watch_file: false\n",
        ),
        &[("risk.json", &table("big"))],
    );
    let ten = [r#"{"x": 50}"#; 10].join("\n");
    let streamed = srv.post("/decide/risk/batch", &ten);
    assert_eq!((streamed.header("transfer-encoding"), streamed.header("content-length")), (Some("chunked"), None));
    let want: Vec<Json> = lines(&streamed).iter().map(decision_core).collect();
    assert_eq!(want.len(), 10);
    // a clef router forwarding a batch reads answers with a Content-Length only; HTTP/1.0 clients too
    let forwarded = call(srv.port, "POST", "/decide/risk/batch", &[("X-Clef-Forwarded", "router")], ten.as_bytes());
    let mut old = Conn::open(srv.port);
    let mut request = format!("POST /decide/risk/batch HTTP/1.0\r\nContent-Length: {}\r\n\r\n", ten.len()).into_bytes();
    request.extend_from_slice(ten.as_bytes());
    old.send(&request);
    let http10 = old.read_response().expect("an answer");
    for whole in [&forwarded, &http10] {
        assert_eq!(whole.header("transfer-encoding"), None);
        assert_eq!(whole.header("content-length"), Some(whole.body.len().to_string().as_str()));
        assert_eq!(lines(whole).iter().map(decision_core).collect::<Vec<_>>(), want);
    }
    // a whole answer counts against server.request_memory_bytes while it is held (twice, as it
    // is copied to be written, beyond the connection's own 8 KiB): 17,384 bytes here, less than
    // 90 decisions take
    let many = [r#"{"x": 50}"#; 90].join("\n");
    let r = call(srv.port, "POST", "/decide/risk/batch", &[("X-Clef-Forwarded", "router")], many.as_bytes());
    r.assert_error(503, "overloaded");
    assert_eq!(r.header("retry-after"), Some("1"));
    // streamed, it is not held: decided as it is sent
    assert_eq!(lines(&srv.post("/decide/risk/batch", &many)).len(), 90);
    // 30 fit, and what they held is given back once the answer is written
    let thirty = [r#"{"x": 50}"#; 30].join("\n");
    let r = call(srv.port, "POST", "/decide/risk/batch", &[("X-Clef-Forwarded", "router")], thirty.as_bytes());
    assert_eq!(lines(&r).len(), 30);
    srv.eventually(2, "the budget given back", |s| {
        s.get("/metrics").text().lines().any(|l| l == "clef_request_memory_bytes 0")
    });
}

#[test]
fn no_table_may_be_named_batch() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("batch.json", &table("b"))]);
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    // the decision port names the kind of failure; the admin listener says what it is
    assert!(h["errors"]["batch"].as_str().is_some_and(|e| e.contains("not a valid table")), "{h}");
    let admin = call(srv.admin, "GET", "/health", &[], b"").json();
    assert!(admin["errors"]["batch"].as_str().is_some_and(|e| e.contains("may not be named")), "{admin}");
    // /decide/batch is still the default table's batch
    assert_eq!(lines(&srv.post("/decide/batch", r#"{"x": 50}"#))[0]["table"], json!("risk"));
}
