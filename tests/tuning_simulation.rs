//! Tuning against a seeded synthetic environment (SPEC §9): decisions are served by the arms
//! the tuner picks, each decision's reward is drawn from the environment's success rate for the
//! arm's parameter value, and fed back by its `snapshot_id`, as `POST /feedback` would.
//!
//! - One variant truly better: it is found and marked ready within a bounded number of feedbacks.
//! - No variant better: over many seeded runs, how often one is marked ready anyway (a false
//!   promotion) is measured and bounded.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;

use clef::server::errors::ApiError as _;
use clef::snapshot::{next_id, SnapshotId};
use clef::table::{Limits, Table};
use clef::tuning::{Tuner, TuningConfig};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value as Json;

const TABLE: &str = r#"{"params": {"limit": {"value": 50, "min": 0, "max": 100, "step": 10, "tunable": true}},
  "default": {"allow": false},
  "rules": [{"id": "under", "condition": "amount < params.limit", "action": {"allow": true}}]}"#;

fn table() -> Arc<Table> {
    Arc::new(Table::from_bytes(Path::new("pay.json"), TABLE.as_bytes(), &Limits::default()).unwrap())
}

fn config() -> TuningConfig {
    TuningConfig {
        tables: vec!["pay".into()],
        traffic: 0.5,
        variants: 4,
        min_samples: 300,
        confidence: 0.95,
        ..TuningConfig::default()
    }
}

/// `id` with `bits` as its 32 random bits (the traffic coin of a tuned decision).
fn with_random_bits(id: SnapshotId, bits: u32) -> SnapshotId {
    SnapshotId::from_u128((id.as_u128() & !0xffff_ffff) | u128::from(bits))
}

/// `id` tagged as the request path tags a decision of `served` with it: by the arm its
/// random bits draw.
fn tagged(tuner: &Tuner, served: &Arc<Table>, id: SnapshotId) -> SnapshotId {
    let base = tuner.baseline_of(served).expect("tuned");
    tuner.draw(served, base, id).id()
}

/// `id` tagged as a decision of the baseline of `served` (random bits that no traffic share
/// below 100% sends to a variant).
fn tagged_baseline(tuner: &Tuner, served: &Arc<Table>, id: SnapshotId) -> SnapshotId {
    let id = with_random_bits(id, u32::MAX);
    let base = tuner.baseline_of(served).expect("tuned");
    let drawn = tuner.draw(served, base, id);
    assert!(drawn.variant().is_none(), "{drawn:?}");
    drawn.id()
}

/// What one run saw.
struct Run {
    /// feedbacks sent when a variant was first marked ready, and which
    first_ready: Option<(usize, String)>,
}

/// Serves `decisions` decisions, rewarding each with probability `success(limit)` of the arm
/// that decided, ticking the tuner every 250 decisions.
fn run(seed: u64, decisions: usize, success: impl Fn(i64) -> f64) -> Run {
    let state = tempfile::tempdir().unwrap();
    let tuner = Tuner::new(&config(), state.path()).unwrap();
    let served = table();
    let serving = |name: &str| (name == "pay").then(|| served.clone());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tick_rng = SmallRng::seed_from_u64(seed ^ 0xabcdef);
    tuner.tick(serving, &mut tick_rng);
    let mut first_ready = None;
    for n in 1..=decisions {
        // the request path's draw, seeded: the coin is the id's random bits (the top half of
        // a seeded number, so that against the 50% threshold it decides as the whole number
        // would), then the variant's pick
        let base = tuner.baseline_of(&served).expect("tuned, with its arms built");
        let coin: u64 = rng.random();
        let pick: u64 = rng.random();
        let id = with_random_bits(next_id(), (coin >> 32) as u32);
        let drawn = tuner.draw_with(&served, base, id, || pick);
        let decider = drawn.table(&served);
        // the arm's table is the one that decides: its limit is the arm's
        let limit = decider.params.as_ref().unwrap()["limit"]["value"].as_i64().unwrap();
        match drawn.variant() {
            Some((arm_id, params)) => {
                assert_eq!(serde_json::from_str::<Json>(params).unwrap()["limit"], limit, "{arm_id}");
                assert_eq!(coin >> 63, 0, "{arm_id} decided on a coin outside the traffic share");
            }
            None => {
                assert!(std::ptr::eq(decider, &*served), "the baseline is the table as served");
                assert_eq!(coin >> 63, 1, "the baseline decided on a coin within the traffic share");
            }
        }
        let id = drawn.id();
        drop(drawn);
        let reward = u8::from(rng.random::<f64>() < success(limit));
        let body = format!(r#"{{"snapshot_id": "{id}", "reward": {reward}}}"#);
        let answer: Json = serde_json::from_str(&tuner.feedback(body.as_bytes()).unwrap()).unwrap();
        assert_eq!(answer["counted"], true);
        if n % 250 == 0 {
            tuner.tick(serving, &mut tick_rng);
            if first_ready.is_none() {
                let report: Json = serde_json::from_str(&tuner.report("pay").unwrap()).unwrap();
                let ready = report["variants"].as_array().unwrap().iter().find(|v| v["ready"] == true);
                if let Some(v) = ready {
                    first_ready = Some((n, v["id"].as_str().unwrap().to_string()));
                }
            }
        }
    }
    Run { first_ready }
}

#[test]
fn a_truly_better_variant_is_found_and_marked_ready() {
    // limit 60 converts at 14%, everything else at 10%
    let success = |limit: i64| if limit == 60 { 0.14 } else { 0.10 };
    for seed in 1..=5 {
        let r = run(seed, 40_000, success);
        let (at, id) = r.first_ready.unwrap_or_else(|| panic!("seed {seed}: no variant ready after 40,000 feedbacks"));
        // v1 is limit + 10 = 60
        assert_eq!(id, "v1", "seed {seed}: the wrong variant was marked ready");
        eprintln!("seed {seed}: v1 ready after {at} feedbacks");
    }
}

#[test]
fn where_no_variant_is_better_none_is_promoted() {
    let runs = 40;
    let false_promotions = (1..=runs).filter(|seed| run(1000 + seed, 20_000, |_| 0.10).first_ready.is_some()).count();
    let rate = false_promotions as f64 / runs as f64;
    eprintln!("false promotions: {false_promotions} of {runs} runs ({:.1}%)", rate * 100.0);
    assert!(rate <= 0.10, "{false_promotions} of {runs} runs marked an equal variant ready");
}

#[test]
fn feedback_is_validated_and_counted_once() {
    let state = tempfile::tempdir().unwrap();
    let tuner = Tuner::new(&config(), state.path()).unwrap();
    let served = table();
    tuner.tick(|name: &str| (name == "pay").then(|| served.clone()), &mut SmallRng::seed_from_u64(1));
    let id = tagged(&tuner, &served, next_id());
    let send = |body: String| tuner.feedback(body.as_bytes());
    let ok: Json = serde_json::from_str(&send(format!(r#"{{"snapshot_id": "{id}", "reward": 1}}"#)).unwrap()).unwrap();
    assert_eq!(ok["counted"], true);
    let again: Json =
        serde_json::from_str(&send(format!(r#"{{"snapshot_id": "{id}", "reward": 1}}"#)).unwrap()).unwrap();
    assert_eq!((again["counted"].clone(), again["duplicate"].clone()), (Json::Bool(false), Json::Bool(true)));
    let untagged = next_id();
    let e = send(format!(r#"{{"snapshot_id": "{untagged}", "reward": 1}}"#)).unwrap_err();
    assert_eq!((e.error_code().status(), e.error_code().as_str()), (404, "unknown_snapshot"));
    let e = send(r#"{"snapshot_id": "nope", "reward": 1}"#.into()).unwrap_err();
    assert_eq!((e.error_code().status(), e.error_code().as_str()), (400, "invalid_snapshot_id"));
    let e = send(format!(r#"{{"snapshot_id": "{id}", "reward": "good"}}"#)).unwrap_err();
    assert_eq!((e.error_code().status(), e.error_code().as_str()), (400, "invalid_reward"));
    let e = send(format!(r#"{{"snapshot_id": "{id}"}}"#)).unwrap_err();
    assert_eq!((e.error_code().status(), e.error_code().as_str()), (400, "invalid_body"));
    let e = send("not json".into()).unwrap_err();
    assert_eq!((e.error_code().status(), e.error_code().as_str()), (400, "invalid_json"));
    assert!(e.to_string().contains("at byte 1"), "{e}");
    // an id older than feedback_ttl_s
    let now_ms = clef::snapshot::id::unix_ms(std::time::SystemTime::now());
    let old_ms = u128::from(now_ms - 90_000_000);
    let old = clef::snapshot::SnapshotId::from_u128((old_ms << 80) | (0x7 << 76) | (0b10 << 62) | (12_345 << 32));
    let old = tagged(&tuner, &served, old);
    let e = send(format!(r#"{{"snapshot_id": "{old}", "reward": 0}}"#)).unwrap_err();
    assert_eq!((e.error_code().status(), e.error_code().as_str()), (404, "unknown_snapshot"));
    assert!(e.to_string().contains("older"), "{e}");
}

#[test]
fn rewards_survive_a_restart_and_reset_when_the_rules_change() {
    let state = tempfile::tempdir().unwrap();
    let served = table();
    let samples = |tuner: &Tuner| {
        let r: Json = serde_json::from_str(&tuner.report("pay").unwrap()).unwrap();
        r["baseline"]["samples"].as_u64().unwrap()
    };
    let id = {
        let tuner = Tuner::new(&config(), state.path()).unwrap();
        tuner.tick(|n: &str| (n == "pay").then(|| served.clone()), &mut SmallRng::seed_from_u64(1));
        for _ in 0..10 {
            let id = tagged_baseline(&tuner, &served, next_id());
            tuner.feedback(format!(r#"{{"snapshot_id": "{id}", "reward": 1}}"#).as_bytes()).unwrap();
        }
        let id = tagged_baseline(&tuner, &served, next_id());
        tuner.save();
        id
    };
    // a new process on the same state_dir: the rewards are back, and ids made before still count
    let tuner = Tuner::new(&config(), state.path()).unwrap();
    tuner.tick(|n: &str| (n == "pay").then(|| served.clone()), &mut SmallRng::seed_from_u64(2));
    tuner.tick(|n: &str| (n == "pay").then(|| served.clone()), &mut SmallRng::seed_from_u64(2));
    assert_eq!(samples(&tuner), 10);
    tuner.feedback(format!(r#"{{"snapshot_id": "{id}", "reward": 1}}"#).as_bytes()).unwrap();
    tuner.tick(|n: &str| (n == "pay").then(|| served.clone()), &mut SmallRng::seed_from_u64(2));
    assert_eq!(samples(&tuner), 11);
    // the table's rules change: tuning starts over, and old ids are refused
    let changed = TABLE.replace("amount < params.limit", "amount <= params.limit");
    let changed = Arc::new(Table::from_bytes(Path::new("pay.json"), changed.as_bytes(), &Limits::default()).unwrap());
    tuner.tick(|n: &str| (n == "pay").then(|| changed.clone()), &mut SmallRng::seed_from_u64(3));
    assert_eq!(samples(&tuner), 0);
    let e = tuner.feedback(format!(r#"{{"snapshot_id": "{id}", "reward": 1}}"#).as_bytes()).unwrap_err();
    assert_eq!(e.error_code().as_str(), "unknown_snapshot");
}
