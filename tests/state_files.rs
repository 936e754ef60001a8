//! What clef keeps in `state_dir`, damaged on the card while it was off (a flipped bit, a
//! garbled file): tuning's promoted values and rewards, the kill switches. Nothing that fails the
//! checks the tables themselves pass is served: the last good copy kept beside the file is, and
//! `GET /health` says which file and why (no path), on the real `clef serve`.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::path::PathBuf;

use common::*;
use nix::sys::signal::Signal;
use serde_json::{json, Value as Json};

/// `error_rate > params.rate` alerts; the threshold is tunable within [0, 0.2] by 0.01.
const RATE: &str = r#"{"params": {"rate": {"value": 0.05, "min": 0, "max": 0.2, "step": 0.01, "tunable": true}},
  "default": {"alert": false},
  "rules": [{"id": "high", "condition": "error_rate > params.rate", "action": {"alert": true}}]}
"#;

fn state_config() -> String {
    config(
        "",
        "",
        "model:\n  default_table: r\n  watch_file: false\nstate_dir: state\n\
         tuning:\n  tables: [r]\n  traffic: 0.0\n  variants: 2\n",
    )
}

/// Stops `srv` (SIGTERM: state saved), lets `damage` change its folder, and starts it again.
fn restart_after(mut srv: Server, damage: impl FnOnce(&std::path::Path)) -> Server {
    srv.signal(Signal::SIGTERM);
    assert!(srv.wait_exit().success(), "{}", srv.log_text());
    damage(srv.path());
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    let text = state_config();
    Server::launch(dir, move |p| p.fill(&text).into_bytes(), |_, _| None)
}

/// The tuning report once its arms are built.
fn tuned(srv: &Server) -> Json {
    let mut report = Json::Null;
    srv.eventually(5, "the arms to be built", |s| {
        report = s.get("/tuning/r").json();
        report["status"] == "tuning"
    });
    report
}

fn promote(srv: &Server, variant: &str) -> Json {
    let r = call(srv.admin, "POST", "/tuning/r/promote", &[], json!({"variant": variant}).to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Flips one bit of the first `from` in the file at `path`, making it `to`.
fn flip(path: &PathBuf, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let (a, b) = (from.as_bytes(), to.as_bytes());
    let differing: Vec<u8> = a.iter().zip(b).map(|(x, y)| x ^ y).filter(|d| *d != 0).collect();
    assert!(a.len() == b.len() && differing.len() == 1 && differing[0].count_ones() == 1, "{from} → {to}");
    assert!(text.contains(from), "{from} not in {text}");
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// `/health` reports `part` (under `key`) as degraded, with no path of the server's folder and
/// nothing of `content` (what the damaged file holds: the log says it, `/health` is open).
fn reported(srv: &Server, part: &str, key: &str, content: &str) -> String {
    let h = srv.health();
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(h["degraded"].as_array().unwrap().contains(&part.into()), "{h}");
    let message = h[part][key].as_str().unwrap_or_else(|| panic!("no {part}.{key} in {h}")).to_string();
    assert!(!message.contains(&*srv.path().to_string_lossy()), "a path in /health: {message}");
    assert!(!message.contains(content), "file content in /health: {message}");
    assert!(srv.log_text().contains(content), "the log says what failed: {}", srv.log_text());
    message
}

#[test]
fn a_flipped_bit_in_promoted_values_is_not_served_the_last_good_copy_is() {
    // Before: 0.07 → 8.07 (one bit) was served although the table says at most 0.2, and
    // tuning stopped with "declares no tunable parameter"; /health said ok.
    let srv = Server::start(&state_config(), &[("r.json", RATE)]);
    tuned(&srv);
    assert_eq!(promote(&srv, "v1")["params"], json!({"rate": 0.06}));
    srv.eventually(5, "arms around 0.06", |s| s.get("/tuning/r").json()["variants"][0]["params"]["rate"] == 0.07);
    assert_eq!(promote(&srv, "v1")["params"], json!({"rate": 0.07}));
    let overlay = srv.path().join("state/tuning/overlays/r.json");
    assert!(overlay.with_file_name("r.json.last-good").exists(), "the overlay it replaced is kept");

    let srv = restart_after(srv, |_| flip(&overlay, "0.07", "8.07"));
    let served = srv.get("/tables/r").json();
    assert_eq!(served["params"]["rate"]["value"], json!(0.06), "the last good promotion serves: {served}");
    let alert = |s: &Server| s.post("/decide", r#"{"error_rate": 0.065}"#).json()["action"]["alert"].clone();
    assert_eq!(alert(&srv), json!(true), "0.065 is above 0.06 (not above 8.07)");
    let why = reported(&srv, "tuning", "r", "\"value\" 8.07 is outside [min, max] = [0, 0.2]");
    assert!(why.contains("promoted values fails its checks; the last good copy (saved"), "{why}");
    // tuning goes on, around the value that serves
    assert_eq!(tuned(&srv)["baseline"]["params"], json!({"rate": 0.06}));
    assert!(!srv.log_text().contains("declares no tunable parameter"), "{}", srv.log_text());

    // without a good copy either, the file's values serve, and that is said
    let srv = restart_after(srv, |dir| {
        std::fs::remove_file(dir.join("state/tuning/overlays/r.json.last-good")).unwrap();
    });
    assert_eq!(srv.get("/tables/r").json()["params"]["rate"]["value"], json!(0.05));
    let why = reported(&srv, "tuning", "r", "8.07");
    assert!(why.contains("no last good copy; the file's values serve"), "{why}");
    // a new promotion writes a good file: once read again, /health is ok
    tuned(&srv);
    promote(&srv, "v1");
    srv.eventually(5, "the promotion to serve", |s| s.get("/tables/r").json()["params"]["rate"]["value"] == 0.06);
    assert_eq!(srv.health()["status"], "ok");
}

#[test]
fn garbled_rewards_give_way_to_their_last_good_copy() {
    let srv = Server::start(&state_config(), &[("r.json", RATE)]);
    tuned(&srv);
    // the first save (no rewards yet), then a reward, saved at shutdown over it
    let rewards = srv.path().join("state/tuning/r.json");
    srv.eventually(5, "the first save", |_| rewards.exists());
    let id = srv.post("/decide", r#"{"error_rate": 0.01}"#).json()["snapshot_id"].as_str().unwrap().to_string();
    let fed = srv.post("/feedback", &json!({"snapshot_id": id, "reward": 1}).to_string());
    assert_eq!(fed.json()["counted"], true, "{}", fed.text());
    // one reward of 1: a sum of 1 for 1 sample; flipped, a sum of 9 that 0/1 rewards cannot make
    let srv = restart_after(srv, |_| flip(&rewards, "\"sum\": 1.0", "\"sum\": 9.0"));
    let why = reported(&srv, "tuning", "r", "cannot add up to a sum of 9");
    assert!(why.contains("rewards fails its checks; the last good copy"), "{why}");
    assert_eq!(tuned(&srv)["baseline"]["samples"], 0, "the copy before the reward");
}

#[test]
fn a_garbled_kill_switch_file_gives_way_to_its_last_good_copy() {
    let srv = Server::start(&state_config(), &[("r.json", RATE), ("g.json", &table("big"))]);
    let off = |s: &Server, rule: &str| {
        let r = call(s.admin, "PUT", &format!("/tables/g/rules/{rule}/enabled"), &[], b"false");
        assert_eq!(r.status, 200, "{}", r.text());
    };
    off(&srv, "big");
    off(&srv, "vip");
    let state = srv.path().join("state/registry.json");
    assert!(state.with_file_name("registry.json.last-good").exists());
    // a bit flipped in the file's first key: `"format"` becomes `"fosmat"` is harmless (unknown
    // keys are ignored); `[` becoming `{` is not JSON any more
    let srv = restart_after(srv, |_| flip(&state, "\"g\": [", "\"g\": {"));
    let why = reported(&srv, "registry", "state", "registry.json is not valid: ");
    assert!(why.contains("is not valid; the last good copy"), "{why}");
    // the copy from before the second switch: `big` is off, `vip` is on again
    let t = srv.get("/tables/g").json();
    let enabled: Vec<(String, bool)> = t["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r["enabled"].as_bool().unwrap()))
        .collect();
    assert!(enabled.contains(&("big".into(), false)) && enabled.contains(&("vip".into(), true)), "{t}");
}
