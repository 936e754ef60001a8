//! The router's route decision (SPEC §7): how long choosing an instance takes with 2 and with
//! 1,000 instances (score policy, local over its max load so the score decides; and the hash
//! ring), on the published per-worker table, as the request path calls it.
//!
//! Run: `cargo bench --bench router`. The machine may be noisy; instruction counts are not:
//! `ROUTER_BENCH_COUNT=score/1000:200000` makes the binary skip criterion and route that case
//! that many times, so that under `valgrind --tool=callgrind` the difference between a count of
//! N and of 0 divided by N is the instructions of one route decision:
//!
//! ```sh
//! B=$(ls -t target/release/deps/router-* | grep -v '\.d$' | head -1)
//! for n in 0 200000; do ROUTER_BENCH_COUNT=score/1000:$n valgrind --tool=callgrind \
//!   --callgrind-out-file=/dev/null $B 2>&1 | grep 'refs'; done
//! ```
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::Duration;

use clef::router::{Ask, Health, InstanceConfig, Policy, Router, RouterConfig};
use criterion::{black_box, criterion_group, BenchmarkId, Criterion};

/// A router with `n` instances (local and n − 1 peers), every peer serving `t` with its own
/// load, half of them in our region.
fn router(n: usize, policy: Policy) -> std::sync::Arc<Router> {
    let mut instances = vec![InstanceConfig { id: "local".into(), addr: None, region: None }];
    for i in 1..n {
        instances.push(InstanceConfig {
            id: format!("peer-{i}"),
            addr: Some(format!("127.0.0.1:{}", 10_000 + i)),
            region: Some(if i % 2 == 0 { "JP" } else { "US" }.into()),
        });
    }
    let config = RouterConfig {
        region: "JP".into(),
        policy,
        hash_key: Some("user".into()),
        local_max_load: 0.5,
        instances,
        ..RouterConfig::default()
    };
    let router = Router::new(&config);
    router.report((1..n).map(|i| {
        let health = Health {
            load: (i % 10) as f64 / 10.0,
            inflight: 0,
            tables: vec![("t".into(), "v1".into())],
            latency: Duration::from_micros(300),
        };
        (i, format!("127.0.0.1:{}", 10_000 + i).parse().unwrap(), health)
    }));
    router
}

/// local serves `t` but is over local_max_load: the score chooses among every instance
const SCORED: Ask<'static> = Ask { table: "t", local_serves: true, local_load: 0.9, key: None };
/// local serves `t` and is idle: it decides
const LOCAL: Ask<'static> = Ask { table: "t", local_serves: true, local_load: 0.1, key: None };

/// The hash case's next ask: keys spread over the whole ring.
fn hashed(key: &mut u64) -> Ask<'static> {
    *key = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    Ask { table: "t", local_serves: false, local_load: 0.0, key: Some(*key) }
}

fn route(c: &mut Criterion) {
    let mut group = c.benchmark_group("route");
    for n in [2usize, 1000] {
        let r = router(n, Policy::Score);
        group.bench_with_input(BenchmarkId::new("score", n), &SCORED, |b, ask| {
            b.iter(|| black_box(r.route(black_box(ask))))
        });
        let r = router(n, Policy::Hash);
        let mut key = 0u64;
        group.bench_function(BenchmarkId::new("hash", n), |b| {
            b.iter(|| black_box(r.route(black_box(&hashed(&mut key)))))
        });
    }
    let r = router(2, Policy::Score);
    group.bench_function("local_first", |b| b.iter(|| black_box(r.route(black_box(&LOCAL)))));
    group.finish();
}

/// `ROUTER_BENCH_COUNT=CASE/N:COUNT` (CASE: score, hash or local_first): routes COUNT times.
fn count(spec: &str) {
    let usage = "ROUTER_BENCH_COUNT=score/1000:200000 (score|hash|local_first, instances, count)";
    let (case, count) = spec.split_once(':').expect(usage);
    let (policy, n) = case.split_once('/').unwrap_or((case, "2"));
    let (n, count): (usize, u64) = (n.parse().expect(usage), count.parse().expect(usage));
    let r = router(n, if policy == "hash" { Policy::Hash } else { Policy::Score });
    let mut key = 0u64;
    match policy {
        "score" => (0..count).for_each(|_| drop(black_box(r.route(black_box(&SCORED))))),
        "hash" => (0..count).for_each(|_| drop(black_box(r.route(black_box(&hashed(&mut key)))))),
        "local_first" => (0..count).for_each(|_| drop(black_box(r.route(black_box(&LOCAL))))),
        _ => panic!("{usage}"),
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = route
}

fn main() {
    if let Ok(spec) = std::env::var("ROUTER_BENCH_COUNT") {
        return count(&spec);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
