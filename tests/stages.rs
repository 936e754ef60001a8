//! The stages the server adds around a decision (SPEC §8): snapshot ids and recording through
//! the real server (`snapshot_id`, `recorded`, `GET /snapshots/{id}`, `X-Clef-Snapshot`, the
//! flush at SIGTERM, `clef replay` of what was recorded), shadow tables and canary tables.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use clef::snapshot::{SnapshotId, SnapshotReader};
use common::*;
use nix::sys::signal::Signal;
use serde_json::{json, Value as Json};

/// `x > 10` → big, `tier == "vip"` → vip, default.
const RISK: &str = r#"{"default": {"a": "default"}, "rules": [
  {"id": "big", "condition": "x > 10", "action": {"a": "big"}},
  {"id": "vip", "condition": "tier == \"vip\"", "action": {"a": "vip"}}
]}"#;

/// The candidate: the threshold moved from 10 to 20.
const CANDIDATE: &str = r#"{"default": {"a": "default"}, "rules": [
  {"id": "big", "condition": "x > 20", "action": {"a": "big"}},
  {"id": "vip", "condition": "tier == \"vip\"", "action": {"a": "vip"}}
]}"#;

fn server(model: &str, snapshots: &str) -> Server {
    let rest = format!("model:\n  default_table: risk\n  watch_file: false\n{model}{snapshots}");
    Server::start(&config("", "", &rest), &[("risk.json", RISK), ("candidate.json", CANDIDATE)])
}

/// Snapshots on, plain NDJSON, written within 50 ms, in `snaps/` beside the config.
const SNAPSHOTS: &str = "snapshots:\n  enabled: true\n  dir: snaps\n  compress: none\n  flush_ms: 50\n";

fn admin_get(srv: &Server, path: &str) -> Resp {
    call(srv.admin, "GET", path, &[], b"")
}

/// Every snapshot in the segment files of `dir`.
fn recorded(dir: &Path) -> Vec<Json> {
    let mut reader = SnapshotReader::open(&[dir.to_path_buf()]).expect("snapshot folder");
    let mut out = Vec::new();
    while let Some(line) = reader.next_line() {
        out.push(serde_json::from_slice(line).expect("a snapshot is JSON"));
    }
    out
}

#[test]
fn every_decision_has_a_snapshot_id_and_recent_ones_are_looked_up_on_the_admin_listener() {
    let srv = server("", SNAPSHOTS);
    let r = call(
        srv.port,
        "POST",
        "/decide",
        &[("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")],
        br#"{"x": 50}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let d = r.json();
    let id = d["snapshot_id"].as_str().expect("a snapshot_id").to_string();
    assert!(SnapshotId::parse(&id).is_some(), "{id} is a UUID");
    assert_eq!(&id[14..15], "7", "a UUIDv7: {id}");
    assert_eq!(d.get("recorded"), None, "recorded snapshots say nothing more: {d}");

    // unique (they increase within a worker thread, which tests/snapshots.rs checks; may moves
    // a connection's coroutine between threads, so one connection's ids need not)
    let mut conn = Conn::open(srv.port);
    let ids: BTreeSet<String> = (0..20)
        .map(|x| {
            let r = conn.request("POST", "/decide", &[], format!("{{\"x\": {x}}}").as_bytes());
            r.json()["snapshot_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 20);

    // looked up on the admin listener only
    let s = admin_get(&srv, &format!("/snapshots/{id}"));
    assert_eq!(s.status, 200, "{}", s.text());
    let snap = s.json();
    assert_eq!(snap["id"], json!(id));
    assert_eq!(snap["table"], json!("risk"));
    assert_eq!(snap["rule_id"], json!("big"));
    assert_eq!(snap["input"], json!({"x": 50}));
    assert_eq!(snap["action"], json!({"a": "big"}));
    assert_eq!(snap["traceparent"], json!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    assert_eq!(snap["version"], d["version"]);
    srv.get(&format!("/snapshots/{id}")).assert_error(404, "not_found");
    admin_get(&srv, "/snapshots/not-an-id").assert_error(400, "invalid_snapshot_id");
    let unknown = SnapshotId::parse("01a230b8-dbd5-7137-bffb-a4cb18ebdb45").unwrap().text();
    admin_get(&srv, &format!("/snapshots/{}", unknown.as_str())).assert_error(404, "unknown_snapshot");

    // batch lines and /authz answers carry ids too
    let b = srv.post("/decide/risk/batch", "{\"x\": 1}\n{\"x\": 99}\n");
    let ids: BTreeSet<String> = b
        .text()
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap()["snapshot_id"].as_str().unwrap().into())
        .collect();
    assert_eq!(ids.len(), 2, "{}", b.text());
    let a = srv.get("/authz/risk/x");
    let header = a.header("x-clef-snapshot").expect("X-Clef-Snapshot").to_string();
    assert_eq!(a.json()["snapshot_id"], json!(header));

    // the metrics count them
    srv.eventually(5, "snapshots counted", |s| s.get("/metrics").text().contains("clef_snapshots_recorded_total 24"));
}

#[test]
fn sampled_out_decisions_say_recorded_false_and_sigterm_flushes_the_rest() {
    let snaps = "snapshots:\n  enabled: true\n  dir: snaps\n  sample_rate: 0.5\n  flush_ms: 60000\n";
    let mut srv = server("", snaps);
    let mut conn = Conn::open(srv.port);
    let (mut kept, mut left) = (BTreeSet::new(), 0);
    for x in 0..200 {
        let d = conn.request("POST", "/decide", &[], format!("{{\"x\": {x}}}").as_bytes()).json();
        match d.get("recorded") {
            None => {
                kept.insert(d["snapshot_id"].as_str().unwrap().to_string());
            }
            Some(v) => {
                assert_eq!(v, &json!(false), "{d}");
                assert!(d["snapshot_id"].is_string(), "a sampled-out decision still has its id: {d}");
                left += 1;
            }
        }
    }
    assert!((50..150).contains(&left), "about half sampled out at 0.5: {left} of 200");
    // a decision with a warning is an `errors` class: always kept
    let d = srv.post("/decide", r#"{"x": "ten"}"#).json();
    assert!(d["warnings"].is_array(), "{d}");
    assert_eq!(d.get("recorded"), None, "always_keep: errors: {d}");
    kept.insert(d["snapshot_id"].as_str().unwrap().to_string());

    // flush_ms is a minute: only SIGTERM's flush puts them on disk
    srv.signal(Signal::SIGTERM);
    assert!(srv.wait_exit().success());
    let on_disk: BTreeSet<String> =
        recorded(&srv.path().join("snaps")).iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(on_disk, kept, "every recorded snapshot, and only those, is on disk after SIGTERM");
}

#[test]
fn a_recorded_run_replays_at_full_correctness_and_names_the_rule_a_change_moves() {
    let mut srv = server("", SNAPSHOTS);
    let mut conn = Conn::open(srv.port);
    for x in 0..300 {
        let tier = if x % 7 == 0 { "vip" } else { "std" };
        conn.request("POST", "/decide", &[], format!("{{\"x\": {}, \"tier\": \"{tier}\"}}", x % 40).as_bytes());
    }
    srv.signal(Signal::SIGTERM);
    assert!(srv.wait_exit().success());
    let replay = |table: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_clef"))
            .args(["replay", "snaps", "--json", "--table", table])
            .current_dir(srv.path())
            .output()
            .expect("run clef replay");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Json>(&out.stdout).expect("replay --json prints JSON")
    };
    let same = replay("tables/risk.json");
    assert_eq!(same["decisions"], json!(300), "{same}");
    assert_eq!(same["correctness"], json!(1.0), "{same}");
    assert_eq!(same["audit_completeness"], json!(1.0), "{same}");

    // the edited rule: `x > 10` becomes `x > 20` in a copy named like the table
    write(srv.path(), "edited/risk.json", CANDIDATE);
    let edited = replay("edited/risk.json");
    let correctness = edited["correctness"].as_f64().unwrap();
    assert!(correctness < 1.0, "{edited}");
    // `big` lost the decisions of 10 < x <= 20, which the default (rule_id null) and `vip` gained
    let changed: BTreeMap<String, (u64, u64)> = edited["changed_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["rule_id"].to_string(), (c["lost"].as_u64().unwrap(), c["gained"].as_u64().unwrap())))
        .collect();
    let in_range = (0..300).filter(|x| (11..=20).contains(&(x % 40))).count() as u64;
    assert_eq!(changed["\"big\""], (in_range, 0), "{edited}");
    assert_eq!(changed["null"].1 + changed["\"vip\""].1, in_range, "{edited}");
    assert_eq!(changed.len(), 3, "{edited}");
}

#[test]
fn a_shadow_table_is_compared_never_served() {
    let srv = server("  shadow:\n    risk: candidate\n", SNAPSHOTS);
    let mut conn = Conn::open(srv.port);
    let mut expected = (0, 0);
    for x in [5, 15, 25, 12, 30, 1] {
        let d = conn.request("POST", "/decide", &[], format!("{{\"x\": {x}}}").as_bytes()).json();
        assert_eq!(d["table"], json!("risk"), "{d}");
        assert_eq!(
            d["action"]["a"],
            json!(if x > 10 { "big" } else { "default" }),
            "the caller's answer is risk's: {d}"
        );
        // the candidate says `big` only above 20
        let agrees = (x > 10) == (x > 20);
        if agrees {
            expected.0 += 1
        } else {
            expected.1 += 1
        }
        let snap = admin_get(&srv, &format!("/snapshots/{}", d["snapshot_id"].as_str().unwrap()));
        assert_eq!(snap.status, 200, "{}", snap.text());
        let shadow = &snap.json()["shadow"];
        assert_eq!(shadow["table"], json!("candidate"), "{shadow}");
        assert_eq!(shadow["agrees"], json!(agrees), "x = {x}: {shadow}");
    }
    // the candidate's schema-free decide never refuses, so no errors
    let metrics = srv.get("/metrics").text();
    for (outcome, n) in [("agree", expected.0), ("disagree", expected.1), ("error", 0)] {
        let line =
            format!("clef_shadow_decisions_total{{table=\"risk\",shadow=\"candidate\",outcome=\"{outcome}\"}} {n}");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    // the candidate still serves as itself
    assert_eq!(srv.action("candidate", r#"{"x": 15}"#), "default");
}

#[test]
fn a_canary_serves_a_stable_hashed_share() {
    let srv = server("  canary:\n    risk: {table: candidate, share: 0.3, key: user.id}\n", "");
    let mut conn = Conn::open(srv.port);
    let mut by_user: BTreeMap<u32, String> = BTreeMap::new();
    for round in 0..3 {
        for user in 0..200u32 {
            let body = format!("{{\"x\": 15, \"user\": {{\"id\": \"u{user}\"}}}}");
            let d = conn.request("POST", "/decide", &[], body.as_bytes()).json();
            let table = d["table"].as_str().unwrap().to_string();
            // x = 15: risk says big, the candidate default: the action follows the table
            let a = if table == "candidate" { "default" } else { "big" };
            assert_eq!(d["action"]["a"], json!(a), "{d}");
            if round == 0 {
                by_user.insert(user, table);
            } else {
                assert_eq!(by_user[&user], table, "user u{user} always gets the same table");
            }
        }
    }
    let share = by_user.values().filter(|t| *t == "candidate").count();
    assert!((30..90).contains(&share), "about 30% of 200 users on the canary: {share}");
    // without the key the table asked for answers; asking for the candidate by name still works
    assert_eq!(srv.post("/decide", r#"{"x": 15}"#).json()["table"], json!("risk"));
    assert_eq!(srv.post("/decide/candidate", r#"{"x": 15}"#).json()["table"], json!("candidate"));
}

#[test]
fn a_canary_without_a_key_is_drawn_per_decision_and_share_one_takes_everything() {
    let srv = server("  canary:\n    risk: {table: candidate, share: 1}\n", "");
    for _ in 0..20 {
        assert_eq!(srv.post("/decide", r#"{"x": 15}"#).json()["table"], json!("candidate"));
    }
}

#[test]
fn stage_settings_that_cannot_work_are_errors_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tables")).unwrap();
    let cases = [
        ("snapshots:\n  enabled: true\n  sample_rat: 1\n", "unknown key `sample_rat`", 3),
        ("snapshots:\n  sample_rate: 2\n", "snapshots.sample_rate", 2),
        ("snapshots:\n  compress: gzip\n", "gzip", 2),
        ("model:\n  canary:\n    risk: {table: c, share: 1.5}\n", "model.canary.risk.share", 3),
        ("model:\n  canary:\n    risk: {table: c, shares: 0.5}\n", "shares", 3),
        ("model:\n  shadow:\n    risk: risk\n", "names the table itself", 3),
    ];
    for (text, needle, line) in cases {
        let cfg = write(dir.path(), "config.yaml", text);
        let out = Command::new(env!("CARGO_BIN_EXE_clef")).arg("check").arg(&cfg).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}: accepted");
        assert!(err.contains(needle), "{text}: {err}");
        assert!(err.contains(&format!("config.yaml:{line}:")), "{text}: at line {line}: {err}");
    }
}

#[test]
fn a_snapshot_folder_that_cannot_be_made_stops_the_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tables")).unwrap();
    write(dir.path(), "tables/risk.json", RISK);
    write(dir.path(), "blocker", "a file where the folder should be");
    let (status, log) = refused(&dir, &config("", "", "snapshots:\n  enabled: true\n  dir: blocker/snaps\n"), &[]);
    assert!(!status.success());
    assert!(log.contains("snapshots.dir") && log.contains("blocker"), "{log}");
}
