//! Tuning through the real server (SPEC §9): tuned decisions carry a `snapshot_id` and their
//! variant, `POST /feedback` counts once and refuses what it cannot count, `GET /tuning/{table}`
//! shows the arms, `POST /tuning/{table}/promote` stores an overlay the table serves with (also
//! after a restart, never rewriting the file), and `clef tune export` prints a table `clef
//! check` accepts.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use nix::sys::signal::Signal;
use serde_json::{json, Value as Json};

/// `amount < params.limit` allows; the limit is tunable by steps of 10.
const PAY: &str = r#"{"params": {"limit": {"value": 50, "min": 0, "max": 100, "step": 10, "tunable": true}},
  "default": {"allow": false},
  "rules": [{"id": "under", "condition": "amount < params.limit", "action": {"allow": true}}]}
"#;

/// The same as a YAML rule set, its threshold read as `{param: limit}`.
const PAY_YAML: &str = "# payments\nparams:\n  limit: {value: 50, min: 0, max: 100, step: 10, tunable: true}\n\
default: {allow: false}\nrules:\n  - id: under\n    conditions:\n      - {field: amount, operator: lt, value: {param: limit}}\n    action: {allow: true}\n";

fn tuning_config(traffic: f64, extra: &str) -> String {
    config(
        "",
        "",
        &format!(
            "model:\n  default_table: pay\n  watch_file: false\nstate_dir: state\ntuning:\n  tables: [pay, rules]\n  traffic: {traffic}\n  variants: 2\n  min_samples: 5\n{extra}"
        ),
    )
}

fn start(traffic: f64) -> Server {
    Server::start(&tuning_config(traffic, ""), &[("pay.json", PAY), ("rules.yaml", PAY_YAML)])
}

/// Waits until the tuning thread has built the arms of `table`.
fn wait_tuned(srv: &Server, table: &str) -> Json {
    let mut report = Json::Null;
    srv.eventually(5, "the arms to be built", |s| {
        report = s.get(&format!("/tuning/{table}")).json();
        report["status"] == "tuning"
    });
    report
}

fn feedback(srv: &Server, id: &str, reward: Json) -> Resp {
    srv.post("/feedback", &json!({"snapshot_id": id, "reward": reward}).to_string())
}

#[test]
fn tuned_decisions_carry_their_variant_and_feedback_counts_once() {
    let srv = start(1.0);
    let report = wait_tuned(&srv, "pay");
    let variants: Vec<(String, i64)> = report["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["id"].as_str().unwrap().into(), v["params"]["limit"].as_i64().unwrap()))
        .collect();
    assert_eq!(variants, [("v1".to_string(), 60), ("v2".to_string(), 40)]);
    assert_eq!(report["baseline"]["params"], json!({"limit": 50}));

    // traffic 1.0: every decision is a variant's, and it decides with the variant's limit
    let mut seen = BTreeMap::new();
    for _ in 0..200 {
        let d = srv.post("/decide", r#"{"amount": 55}"#).json();
        let variant = d["variant"].as_str().expect("a tuned decision names its variant").to_string();
        let allowed = d["action"]["allow"].as_bool().unwrap();
        assert_eq!(allowed, variant == "v1", "55 < 60 only for v1: {d}");
        assert!(d["snapshot_id"].is_string(), "{d}");
        assert_eq!(d["recorded"], false, "snapshots are off: {d}");
        *seen.entry(variant).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "Thompson sampling tries both variants: {seen:?}");

    let d = srv.post("/decide", r#"{"amount": 1}"#).json();
    let id = d["snapshot_id"].as_str().unwrap();
    let r = feedback(&srv, id, json!(1));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["counted"], true);
    assert_eq!(r.json()["variant"], d["variant"]);
    let again = feedback(&srv, id, json!(1)).json();
    assert_eq!((again["counted"].clone(), again["duplicate"].clone()), (json!(false), json!(true)));
    srv.eventually(3, "the reward to show", |s| {
        let r = s.get("/tuning/pay").json();
        let arm = r["variants"].as_array().unwrap().iter().find(|v| v["id"] == d["variant"]).cloned().unwrap();
        arm["samples"] == 1 && arm["mean_reward"] == 1.0
    });

    // what cannot be counted is a JSON error
    let plain = srv.post("/decide/other", r#"{"amount": 1}"#);
    assert_eq!(plain.status, 404);
    feedback(&srv, "01a230b8-dbd5-7137-bffb-a4cb18ebdb45", json!(1)).assert_error(404, "unknown_snapshot");
    feedback(&srv, "not-an-id", json!(1)).assert_error(400, "invalid_snapshot_id");
    feedback(&srv, id, json!("yes")).assert_error(400, "invalid_reward");
    // promotion is an admin endpoint
    srv.post("/tuning/pay/promote", "").assert_error(404, "not_found");
}

#[test]
fn feedback_and_tuning_errors_have_the_codes_of_the_api() {
    let text = tuning_config(1.0, "");
    let srv = Server::start(&text, &[("pay.json", PAY), ("fixed.json", &table("x"))]);
    wait_tuned(&srv, "pay");
    // not JSON: invalid_json, with the byte offset; JSON of another shape: invalid_body
    let m = srv.post("/feedback", "{\"snapshot_id\": \"x\",\n \"reward\": }").assert_error(400, "invalid_json");
    assert!(m.contains("at byte 32"), "{m}");
    for shape in [
        r#"{"snapshot_id": 5, "reward": 1}"#,
        r#"{"reward": 1}"#,
        "[1]",
        r#"{"snapshot_id": "x", "reward": 1, "extra": 0}"#,
    ] {
        srv.post("/feedback", shape).assert_error(400, "invalid_body");
    }
    // a table that exists but is not tuned, and a name no table has
    srv.get("/tuning/fixed").assert_error(404, "not_tuned");
    let m = srv.get("/tuning/no_such_table").assert_error(404, "unknown_table");
    assert!(m.contains("no_such_table"), "{m}");
    call(srv.admin, "POST", "/tuning/no_such_table/promote", &[], b"").assert_error(404, "unknown_table");
    call(srv.admin, "POST", "/tuning/fixed/promote", &[], b"").assert_error(404, "not_tuned");
    call(srv.admin, "POST", "/tuning/pay/promote", &[], b"{").assert_error(400, "invalid_json");
    call(srv.admin, "POST", "/tuning/pay/promote", &[], br#"{"variant": 2}"#).assert_error(400, "invalid_body");
    // a tuned table not loaded (listed, no file) still has its report
    assert_eq!(srv.get("/tuning/rules").json()["status"], "waiting");
}

/// The value of an unlabelled metric.
fn metric(srv: &Server, name: &str) -> f64 {
    let text = srv.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

#[test]
fn feedback_beyond_the_cap_forgets_the_oldest_and_is_never_refused() {
    // Before: ids minted through /decide/{t}/batch filled the 500,000 cap in ~9 s, after which
    // every /feedback answered 503 feedback_backlog until feedback_ttl_s (24 h) passed.
    let text = tuning_config(0.5, "  max_feedback_ids: 100\n");
    let srv = Server::start(&text, &[("pay.json", PAY)]);
    wait_tuned(&srv, "pay");
    let batch: String = (0..300).map(|i| format!("{{\"amount\": {i}}}\n")).collect();
    let r = srv.post("/decide/pay/batch", &batch);
    assert_eq!(r.status, 200, "{}", r.text());
    let ids: Vec<String> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap()["snapshot_id"].as_str().unwrap().into())
        .collect();
    assert_eq!(ids.len(), 300);
    let mut conn = Conn::open(srv.port);
    let mut send = |id: &str| {
        let body = json!({"snapshot_id": id, "reward": 1}).to_string();
        let r = conn.request("POST", "/feedback", &[], body.as_bytes());
        assert_eq!(r.status, 200, "feedback is never refused for being too much: {}", r.text());
        r.json()["counted"].as_bool().unwrap()
    };
    for id in &ids {
        assert!(send(id), "a first feedback counts");
    }
    // the newest 100 are held: a repeat of one is not counted again; the oldest were forgotten
    assert!(!send(&ids[299]) && !send(&ids[200]));
    assert!(send(&ids[0]), "a repeat of a forgotten id counts again");
    assert_eq!(metric(&srv, "clef_tuning_feedback_ids"), 100.0);
    assert_eq!(metric(&srv, "clef_tuning_feedback_ids_forgotten_total"), 201.0);
}

#[test]
fn a_yaml_rule_set_is_tuned_through_its_param_values() {
    let srv = start(1.0);
    wait_tuned(&srv, "rules");
    let mut allowed = 0;
    for _ in 0..100 {
        let d = srv.post("/decide/rules", r#"{"amount": 55}"#).json();
        if d["action"]["allow"] == true {
            assert_eq!(d["variant"], "v1", "{d}");
            allowed += 1;
        }
    }
    assert!(allowed > 0, "v1 (limit 60) allows 55");
}

#[test]
fn with_no_traffic_the_baseline_decides_and_feedback_still_counts() {
    let srv = start(0.0);
    wait_tuned(&srv, "pay");
    let d = srv.post("/decide", r#"{"amount": 55}"#).json();
    assert_eq!((d["variant"].clone(), d["action"]["allow"].clone()), (json!("baseline"), json!(false)));
    let r = feedback(&srv, d["snapshot_id"].as_str().unwrap(), json!(0.25));
    assert_eq!(r.status, 200, "{}", r.text());
    srv.eventually(3, "a real-valued reward to switch the model", |s| {
        let r = s.get("/tuning/pay").json();
        r["reward"] == "real" && r["baseline"]["samples"] == 1
    });
}

#[test]
fn a_promotion_serves_at_once_survives_a_restart_and_exports_a_table_check_accepts() {
    let mut srv = start(0.0);
    wait_tuned(&srv, "pay");
    // nothing is ready yet: promoting needs a variant named
    let r = call(srv.admin, "POST", "/tuning/pay/promote", &[], b"");
    r.assert_error(409, "not_ready");
    let r = call(srv.admin, "POST", "/tuning/pay/promote", &[], br#"{"variant": "v7"}"#);
    r.assert_error(404, "unknown_variant");
    let r = call(srv.admin, "POST", "/tuning/pay/promote", &[], br#"{"variant": "v1"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["params"], json!({"limit": 60}));

    let allow55 = |s: &Server| s.post("/decide", r#"{"amount": 55}"#).json()["action"]["allow"] == true;
    assert!(allow55(&srv), "the promoted limit 60 serves at once");
    let table = srv.get("/tables/pay").json();
    assert_eq!(table["params"]["limit"]["value"], 60, "{table}");
    // one version names one behaviour: the served version is the file's with the values in force
    let file_version = sha12(PAY.as_bytes());
    let served = {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(Sha256::digest(PAY.as_bytes()));
        h.update([0u8]);
        h.update(br#"{"limit":60}"#);
        h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect::<String>()
    };
    assert_eq!((table["file_version"].as_str(), table["version"].as_str()), (Some(&*file_version), Some(&*served)));
    let d = srv.post("/decide", r#"{"amount": 55}"#).json();
    assert_eq!(d["version"], served.as_str(), "{d}");
    assert_eq!(srv.health()["tables"]["pay"], served.as_str());
    // the file is never rewritten
    let file = srv.path().join("tables/pay.json");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PAY);
    // variants start again around the new value
    srv.eventually(5, "new variants around 60", |s| {
        let r = s.get("/tuning/pay").json();
        r["baseline"]["params"]["limit"] == 60 && r["variants"][0]["params"]["limit"] == 70
    });

    // a restart serves the promoted value
    srv.signal(Signal::SIGTERM);
    assert!(srv.wait_exit().success());
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    let text = tuning_config(0.0, "");
    let srv = Server::launch(dir, move |p| p.fill(&text).into_bytes(), |_, _| None);
    assert!(allow55(&srv), "the promotion survives a restart");

    // the export has 60 in place of 50, and clef check accepts it
    let out = Command::new(env!("CARGO_BIN_EXE_clef"))
        .args(["tune", "export", "tables/pay.json", "-c", "config.yaml"])
        .current_dir(srv.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exported = String::from_utf8(out.stdout).unwrap();
    assert_eq!(exported, PAY.replacen("\"value\": 50", "\"value\": 60", 1));
    let path = srv.path().join("exported.json");
    std::fs::write(&path, &exported).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_clef")).arg("check").arg(&path).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
}

#[test]
fn tuning_settings_that_cannot_work_are_errors_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let text = config("", "", "tuning:\n  tables: [pay]\n  traffic: 2\n  confidnce: 0.9\n");
    let (status, log) = refused(&dir, &text, &[]);
    assert!(!status.success());
    assert!(log.contains("confidnce") && log.contains("confidence"), "{log}");
}

#[test]
fn a_table_that_cannot_be_tuned_is_said_once_not_every_round() {
    let fixed = r#"{"params": {"limit": {"value": 50}}, "rules": [{"id": "under", "condition": "amount < params.limit", "action": {"allow": true}}]}"#;
    let text = config(
        "",
        "",
        "model:\n  default_table: fixed\n  watch_file: false\nstate_dir: state\ntuning:\n  tables: [fixed, absent]\n",
    );
    let srv = Server::start(&text, &[("fixed.json", fixed)]);
    // ten rounds of the tuning thread
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let log = srv.log_text();
    assert_eq!(log.matches("declares no tunable parameter").count(), 1, "{log}");
    assert_eq!(log.matches("\"absent\", which is not among the loaded tables").count(), 1, "{log}");
    for table in ["fixed", "absent"] {
        let report = srv.get(&format!("/tuning/{table}")).json();
        assert_eq!(report["status"], "waiting", "{report}");
    }
    let d = srv.post("/decide", r#"{"amount": 5}"#).json();
    assert!(d.get("variant").is_none() && d.get("snapshot_id").is_none(), "{d}");
}
