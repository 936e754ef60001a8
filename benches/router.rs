//! The router's route decision (SPEC §7): how long choosing an instance takes with 2 and with
//! 1,000 instances (score policy, local over its max load so the score decides; and the hash
//! ring), on the published per-worker table, as the request path calls it.

use std::time::Duration;

use clef::router::{Ask, Health, InstanceConfig, Policy, Router, RouterConfig};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

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
    for i in 1..n {
        let health = Health {
            load: (i % 10) as f64 / 10.0,
            inflight: 0,
            tables: vec![("t".into(), "v1".into())],
            latency: Duration::from_micros(300),
        };
        router.report_at(i, format!("127.0.0.1:{}", 10_000 + i).parse().unwrap(), health);
    }
    router
}

fn route(c: &mut Criterion) {
    let mut group = c.benchmark_group("route");
    for n in [2usize, 1000] {
        let r = router(n, Policy::Score);
        // local serves `t` but is over local_max_load: the score chooses among every instance
        let ask = Ask { table: "t", local_serves: true, local_load: 0.9, key: None };
        group.bench_with_input(BenchmarkId::new("score", n), &ask, |b, ask| {
            b.iter(|| black_box(r.route(black_box(ask))))
        });
        let r = router(n, Policy::Hash);
        let mut key = 0u64;
        group.bench_function(BenchmarkId::new("hash", n), |b| {
            b.iter(|| {
                key = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let ask = Ask { table: "t", local_serves: false, local_load: 0.0, key: Some(key) };
                black_box(r.route(black_box(&ask)))
            })
        });
    }
    let r = router(2, Policy::Score);
    let local = Ask { table: "t", local_serves: true, local_load: 0.1, key: None };
    group.bench_function("local_first", |b| b.iter(|| black_box(r.route(black_box(&local)))));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = route
}
criterion_main!(benches);
