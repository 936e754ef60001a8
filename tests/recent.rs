//! `GET /snapshots` on the admin listener, against the real server: the recent decisions in
//! memory, newest first, narrowed by `table`, `rule`, `outcome`, `action`, `since` and `before`,
//! at most `limit` of them; bad queries answered 400 with what is accepted; the admin listener's
//! token; snapshots off.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::*;
use serde_json::{json, Value as Json};

/// `x > 10` → big, `tier == "vip" && x > 1` → vip, a disabled rule, default `{"a": "default"}`.
fn risk() -> String {
    table("big")
}

/// A second table, whose actions say `decision`.
const GATE: &str = r#"{"default": {"decision": "ask"}, "rules": [
  {"id": "deny_admin", "condition": "path == \"/admin\"", "action": {"decision": "deny", "status": 403}},
  {"id": "allow_get", "condition": "method == \"GET\"", "action": {"decision": "allow"}}
]}"#;

/// Snapshots on (zstd frames, written within 50 ms), in `snaps/`; `admin` extra admin lines.
fn server(admin: &str, snapshots: &str) -> Server {
    let rest = format!("model:\n  default_table: risk\n  watch_file: false\n{snapshots}");
    Server::start(&config("", admin, &rest), &[("risk.json", &risk()), ("gate.json", GATE)])
}

const SNAPSHOTS: &str = "snapshots:\n  enabled: true\n  dir: snaps\n  flush_ms: 50\n";

/// One decision made: its table, id, rule, action and time.
#[derive(Clone, Debug)]
struct Made {
    table: &'static str,
    id: String,
    rule: Json,
    action: Json,
    timestamp: String,
}

fn decide(srv: &Server, table: &'static str, input: &str) -> Made {
    let r = srv.post(&format!("/decide/{table}"), input);
    assert_eq!(r.status, 200, "{}", r.text());
    let d = r.json();
    Made {
        table,
        id: d["snapshot_id"].as_str().expect("a snapshot_id").to_string(),
        rule: d["rule_id"].clone(),
        action: d["action"].clone(),
        timestamp: d["timestamp"].as_str().unwrap().to_string(),
    }
}

fn list(srv: &Server, query: &str) -> Json {
    let r = call(srv.admin, "GET", &format!("/snapshots{query}"), &[], b"");
    assert_eq!(r.status, 200, "GET /snapshots{query}: {}", r.text());
    assert!(r.header("content-type").unwrap_or("").starts_with("application/json"), "{r:?}");
    r.json()
}

/// The ids a listing gives, in its order; checks `count` says how many.
fn ids(listing: &Json) -> Vec<String> {
    let items = listing["snapshots"].as_array().unwrap_or_else(|| panic!("no snapshots array: {listing}"));
    assert_eq!(listing["count"], json!(items.len()), "{listing}");
    items.iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

/// The ids of `made` that `keep` keeps, newest first.
fn expected(made: &[Made], keep: impl Fn(&Made) -> bool) -> Vec<String> {
    made.iter().rev().filter(|m| keep(m)).map(|m| m.id.clone()).collect()
}

/// Twelve decisions over both tables, at least 3 ms apart (so that newest first is request
/// order: ids of one millisecond from different worker threads sort by their random bits).
fn twelve(srv: &Server) -> Vec<Made> {
    let inputs: [(&'static str, &str); 12] = [
        ("risk", r#"{"x": 50}"#),
        ("gate", r#"{"path": "/admin", "method": "GET"}"#),
        ("risk", r#"{"x": 1}"#),
        ("gate", r#"{"path": "/", "method": "GET"}"#),
        ("risk", r#"{"x": 5, "tier": "vip"}"#),
        ("gate", r#"{"path": "/", "method": "POST"}"#),
        ("risk", r#"{"x": 99}"#),
        ("gate", r#"{"path": "/admin", "method": "POST"}"#),
        ("risk", r#"{"x": 0}"#),
        ("gate", r#"{"path": "/x", "method": "GET"}"#),
        ("risk", r#"{"x": 11}"#),
        ("gate", r#"{"path": "/y", "method": "DELETE"}"#),
    ];
    inputs
        .iter()
        .map(|(table, input)| {
            std::thread::sleep(Duration::from_millis(3));
            decide(srv, table, input)
        })
        .collect()
}

#[test]
fn recent_decisions_are_listed_newest_first_and_each_filter_narrows_them() {
    let srv = server("", SNAPSHOTS);
    let made = twelve(&srv);
    let rules: Vec<Json> = made.iter().map(|m| m.rule.clone()).collect();
    assert_eq!(
        rules,
        [
            json!("big"),
            json!("deny_admin"),
            Json::Null,
            json!("allow_get"),
            json!("vip"),
            Json::Null,
            json!("big"),
            json!("deny_admin"),
            Json::Null,
            json!("allow_get"),
            json!("big"),
            Json::Null
        ],
        "the decisions the test expects"
    );

    // Right away: some are still queued, not written. Then once written to the window (zstd
    // frames): the same listing either way.
    let early = list(&srv, "");
    assert_eq!(ids(&early), expected(&made, |_| true));
    std::thread::sleep(Duration::from_millis(300));
    let all = list(&srv, "");
    assert_eq!(ids(&all), expected(&made, |_| true), "newest first: {all}");
    assert_eq!(all["truncated"], json!(false), "{all}");
    let window = &all["window"];
    assert!(window["snapshots"].as_u64().unwrap() >= 12, "{window}");
    assert_eq!(window["oldest"], json!(made[0].timestamp), "{window}");
    assert_eq!(window["newest"], json!(made[11].timestamp), "{window}");
    // each snapshot is the record, as GET /snapshots/{id} answers it
    for s in all["snapshots"].as_array().unwrap() {
        let one = call(srv.admin, "GET", &format!("/snapshots/{}", s["id"].as_str().unwrap()), &[], b"");
        assert_eq!(one.status, 200, "{}", one.text());
        assert_eq!(&one.json(), s);
    }
    let first = &all["snapshots"][11];
    assert_eq!(first["input"], json!({"x": 50}));
    assert_eq!(first["action"], json!({"a": "big"}));

    // table
    assert_eq!(ids(&list(&srv, "?table=gate")), expected(&made, |m| m.table == "gate"));
    assert_eq!(ids(&list(&srv, "?table=risk")), expected(&made, |m| m.table == "risk"));
    assert!(ids(&list(&srv, "?table=ris")).is_empty());
    // rule
    assert_eq!(ids(&list(&srv, "?rule=big")), expected(&made, |m| m.rule == json!("big")));
    let denied = expected(&made, |m| m.rule == json!("deny_admin"));
    assert_eq!(denied.len(), 2);
    assert_eq!(ids(&list(&srv, "?rule=deny_admin")), denied);
    assert!(ids(&list(&srv, "?rule=off")).is_empty());
    // outcome: default (no rule matched) and matched
    let defaults = expected(&made, |m| m.rule.is_null());
    assert_eq!(defaults.len(), 4);
    assert_eq!(ids(&list(&srv, "?outcome=default")), defaults);
    assert_eq!(ids(&list(&srv, "?outcome=matched")), expected(&made, |m| !m.rule.is_null()));
    // action: a member, any member, a number
    assert_eq!(ids(&list(&srv, "?action=decision:deny")), denied);
    assert_eq!(ids(&list(&srv, "?action=deny")), denied);
    assert_eq!(ids(&list(&srv, "?action=status:403")), denied);
    assert_eq!(ids(&list(&srv, "?action=decision%3Aask")), expected(&made, |m| m.action == json!({"decision": "ask"})));
    assert_eq!(ids(&list(&srv, "?action=a:default")), expected(&made, |m| m.action == json!({"a": "default"})));
    assert!(ids(&list(&srv, "?action=decision:maybe")).is_empty());
    // combined
    assert_eq!(
        ids(&list(&srv, "?table=risk&outcome=default")),
        expected(&made, |m| m.table == "risk" && m.rule.is_null())
    );
    assert_eq!(ids(&list(&srv, "?table=gate&outcome=matched&action=decision:allow&limit=1")), vec![made[9].id.clone()]);

    // since: an RFC 3339 time (inclusive, to the millisecond), also with an offset
    let since = &made[7].timestamp;
    assert_eq!(ids(&list(&srv, &format!("?since={since}"))), expected(&made[7..], |_| true));
    let t = humantime::parse_rfc3339(since).unwrap() + Duration::from_secs(2 * 3600);
    let local = humantime::format_rfc3339_millis(t).to_string().replace('Z', "%2B02:00");
    assert_eq!(ids(&list(&srv, &format!("?since={local}"))), expected(&made[7..], |_| true), "{local}");
    assert_eq!(ids(&list(&srv, &format!("?since={since}&table=risk"))), expected(&made[7..], |m| m.table == "risk"));
    assert_eq!(ids(&list(&srv, "?since=10m")), expected(&made, |_| true));
    let later = humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(60)).to_string();
    assert!(ids(&list(&srv, &format!("?since={later}"))).is_empty());

    // limit and truncated
    let three = list(&srv, "?limit=3");
    assert_eq!(ids(&three), expected(&made[9..], |_| true));
    assert_eq!(three["truncated"], json!(true), "{three}");
    let twelve_of_them = list(&srv, "?limit=12");
    assert_eq!(twelve_of_them["truncated"], json!(false), "{twelve_of_them}");
    assert_eq!(list(&srv, "?table=gate&limit=6")["truncated"], json!(false));
    assert_eq!(list(&srv, "?table=gate&limit=5")["truncated"], json!(true));
    let none = list(&srv, "?limit=0");
    assert_eq!((none["count"].clone(), none["truncated"].clone()), (json!(0), json!(true)), "{none}");
    let no_match = list(&srv, "?limit=0&rule=nope");
    assert_eq!(no_match["truncated"], json!(false), "{no_match}");

    // paging with before: pages of 5 give every decision once, in order
    let mut paged = Vec::new();
    let mut query = "?limit=5".to_string();
    loop {
        let page = list(&srv, &query);
        let page_ids = ids(&page);
        paged.extend(page_ids.iter().cloned());
        if page["truncated"] == json!(false) {
            break;
        }
        assert_eq!(page_ids.len(), 5, "{page}");
        query = format!("?limit=5&before={}", page_ids.last().unwrap());
    }
    assert_eq!(paged, expected(&made, |_| true));

    // since as a duration back from now: only what was decided in the last 2 s
    std::thread::sleep(Duration::from_millis(2500));
    let first_fresh = decide(&srv, "gate", r#"{"path": "/admin"}"#);
    // a millisecond apart at least: newest first is then the order they were made in
    std::thread::sleep(Duration::from_millis(3));
    let fresh = [first_fresh, decide(&srv, "risk", r#"{"x": 12}"#)];
    let asked = Instant::now();
    let recent = ids(&list(&srv, "?since=2s"));
    let fresh_ids: Vec<String> = fresh.iter().rev().map(|m| m.id.clone()).collect();
    if asked.elapsed() < Duration::from_millis(1500) {
        assert_eq!(recent, fresh_ids);
    } else {
        // a very slow machine: at least none of the older ones
        assert!(recent.iter().all(|id| fresh_ids.contains(id)), "{recent:?}");
    }
}

#[test]
fn limit_defaults_to_100_and_is_capped_at_1000() {
    // flush_ms long: what the writer has not taken is listed as well as what it wrote
    let srv = server("", "snapshots:\n  enabled: true\n  dir: snaps\n  flush_ms: 60000\n");
    let mut body = String::new();
    for i in 0..1100 {
        body.push_str(&format!("{{\"x\": {}}}\n", i % 20));
    }
    let r = srv.post("/decide/risk/batch", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    // (id, x) of each decision, newest first: ids sort by time, and as text as they do as numbers
    let mut made: Vec<(String, usize)> = r
        .text()
        .lines()
        .enumerate()
        .map(|(i, l)| (serde_json::from_str::<Json>(l).unwrap()["snapshot_id"].as_str().unwrap().to_string(), i % 20))
        .collect();
    assert_eq!(made.len(), 1100);
    made.sort_by(|a, b| b.0.cmp(&a.0));
    let newest_first: Vec<String> = made.iter().map(|(id, _)| id.clone()).collect();

    let default = list(&srv, "");
    assert_eq!(ids(&default), newest_first[..100]);
    assert_eq!(default["truncated"], json!(true));
    assert!(default["window"]["snapshots"].as_u64().unwrap() >= 1100, "{}", default["window"]);
    let most = list(&srv, "?limit=1000");
    assert_eq!(ids(&most), newest_first[..1000]);
    assert_eq!(most["truncated"], json!(true));
    // the oldest hundred are there too, a page further
    let rest = list(&srv, &format!("?limit=1000&before={}", newest_first[999]));
    assert_eq!(ids(&rest), newest_first[1000..]);
    assert_eq!(rest["truncated"], json!(false));
    // a filter over the whole window: x % 20 > 10 is `big` (x = 11..19: 9 in 20)
    let big = list(&srv, "?rule=big&limit=1000");
    let expect_big: Vec<String> = made.iter().filter(|(_, x)| *x > 10).map(|(id, _)| id.clone()).collect();
    assert_eq!(expect_big.len(), 495);
    assert_eq!(ids(&big), expect_big);
    assert_eq!(big["truncated"], json!(false));

    let m = call(srv.admin, "GET", "/snapshots?limit=1001", &[], b"").assert_error(400, "invalid_query");
    assert!(m.contains("limit=1001") && m.contains("from 0 to 1000") && m.contains("before="), "{m}");
}

#[test]
fn bad_queries_are_refused_with_what_is_accepted() {
    let srv = server("", SNAPSHOTS);
    decide(&srv, "risk", r#"{"x": 50}"#);
    let bad = |query: &str| {
        call(srv.admin, "GET", &format!("/snapshots?{query}"), &[], b"").assert_error(400, "invalid_query")
    };
    let m = bad("tabel=risk");
    assert!(m.contains("\"tabel\"") && m.contains("table, rule, outcome, action, since, before, limit"), "{m}");
    for query in ["limit=abc", "limit=-1", "limit=2000", "limit=1.5"] {
        let m = bad(query);
        assert!(m.contains("from 0 to 1000"), "{query}: {m}");
    }
    for query in ["since=yesterday", "since=60", "since=2026-13-01T00:00:00Z", "since=2026-12-01"] {
        let m = bad(query);
        assert!(m.contains("RFC 3339") && m.contains("5m"), "{query}: {m}");
    }
    let m = bad("outcome=deny");
    assert!(m.contains("matched") && m.contains("default") && m.contains("action="), "{m}");
    let m = bad("action=%7B%22a%22%3A1%7D");
    assert!(m.contains("KEY:VALUE"), "{m}");
    let m = bad("before=12");
    assert!(m.contains("not a snapshot id"), "{m}");
    let m = bad("table=risk&table=gate");
    assert!(m.contains("twice"), "{m}");
    let m = bad("rule=");
    assert!(m.contains("needs a value"), "{m}");
    // a good query on the same server answers
    assert_eq!(ids(&list(&srv, "?table=risk&limit=5")).len(), 1);
}

#[test]
fn the_listing_is_an_admin_endpoint_with_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tables/risk.json", risk());
    write(dir.path(), "admin.token", "list-token\n");
    let text = config(
        "",
        "  token_file: ./admin.token\n",
        &format!("model:\n  default_table: risk\n  watch_file: false\n{SNAPSHOTS}"),
    );
    let srv = Server::launch(dir, |p| p.fill(&text).into_bytes(), |_, _| None);
    let made = decide(&srv, "risk", r#"{"x": 50}"#);
    let a = srv.admin;
    let no_token = call(a, "GET", "/snapshots", &[], b"");
    no_token.assert_error(401, "unauthorized");
    assert_eq!(no_token.header("www-authenticate"), Some("Bearer"));
    call(a, "GET", "/snapshots?limit=1", &[("Authorization", "Bearer wrong")], b"").assert_error(401, "unauthorized");
    // the same as the id lookup
    call(a, "GET", &format!("/snapshots/{}", made.id), &[], b"").assert_error(401, "unauthorized");
    let r = call(a, "GET", "/snapshots", &[("Authorization", "Bearer list-token")], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(ids(&r.json()), std::slice::from_ref(&made.id));
    let r = call(a, "GET", "/v1/snapshots/", &[("Authorization", "Bearer list-token")], b"");
    assert_eq!(ids(&r.json()), std::slice::from_ref(&made.id));
    // never on the decision listener, token or not
    srv.get("/snapshots").assert_error(404, "not_found");
    call(srv.port, "GET", "/snapshots", &[("Authorization", "Bearer list-token")], b"").assert_error(404, "not_found");
    // GET and HEAD only
    let post = call(a, "POST", "/snapshots", &[("Authorization", "Bearer list-token")], b"");
    post.assert_error(405, "method_not_allowed");
    assert_eq!(post.header("allow"), Some("GET"));
}

#[test]
fn with_snapshots_off_the_listing_says_so() {
    let srv = server("", "");
    let made = srv.post("/decide/risk", r#"{"x": 50}"#);
    assert_eq!(made.status, 200);
    let m = call(srv.admin, "GET", "/snapshots", &[], b"").assert_error(404, "snapshots_off");
    assert!(m.contains("snapshots.enabled"), "{m}");
    // a bad query is still a bad query
    call(srv.admin, "GET", "/snapshots?limit=x", &[], b"").assert_error(400, "invalid_query");
}
