//! The cost of recording a decision snapshot (SPEC §8.1), which every decision pays with
//! snapshots on: `Recorder::record` = the UUIDv7 id, the sampling draw, the NDJSON line encoded
//! into the core's buffer (the input copied as received), the lock and the counters. The writer
//! thread's work (compression, the write) is not on the decision's path and is left out: each
//! timed run records at most 4096 snapshots, then the queue is flushed untimed, so that none is
//! dropped (a dropped snapshot would be cheaper and flatter the figure).
//!
//! Run: `cargo bench --bench snapshots`.
// Benchmark code: a failed unwrap, expect or index is the benchmark's setup failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use clef::snapshot::{Compress, Event, Recorder, Settings, SnapshotsConfig, Status};
use clef::table::{Limits, Table};
use criterion::{criterion_group, criterion_main, Criterion};

const INPUT: &[u8] = br#"{"user_tier": "vip", "order_amount_usd": 1500, "country_code": "CN", "ip_country": "CN", "is_vpn": false, "failed_logins_24h": 0, "account_age_days": 400, "payment_method": "card"}"#;

fn recorder(dir: &Path, sample_rate: f64, redact: Vec<String>) -> Recorder {
    let cfg = SnapshotsConfig {
        enabled: true,
        dir: dir.to_path_buf(),
        sample_rate,
        redact,
        compress: Compress::Zstd,
        ..SnapshotsConfig::default()
    };
    Recorder::start_with(&cfg, Settings { queue_bytes: 256 << 20, ..Settings::default() }).expect("recorder")
}

fn timed(rec: &Recorder, ev: &Event<'_>, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(4096);
        let t = Instant::now();
        for _ in 0..n {
            let out = rec.record(black_box(ev));
            debug_assert_ne!(out.status, Status::Dropped);
            black_box(out);
        }
        total += t.elapsed();
        left -= n;
        rec.flush(Duration::from_secs(10));
    }
    total
}

fn record(c: &mut Criterion) {
    let table = Table::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tables/risk.json"), &Limits::default())
        .expect("risk loads");
    let d = table.decide(INPUT, false).expect("a decision");
    let mut ev = Event::new(&table, &d, INPUT);
    ev.latency_ns = 812;
    ev.traceparent = Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("snapshot");

    let rec = recorder(&dir.path().join("all"), 1.0, Vec::new());
    group.bench_function("record", |b| b.iter_custom(|iters| timed(&rec, &ev, iters)));
    let stats = rec.stats();
    assert_eq!(stats.dropped, 0, "no snapshot may be dropped while timing: {stats:?}");
    rec.shutdown();

    // a field to redact is present: the input is parsed and written again
    let rec = recorder(&dir.path().join("redact"), 1.0, vec!["payment_method".into(), "user.email".into()]);
    group.bench_function("record_redact_present", |b| b.iter_custom(|iters| timed(&rec, &ev, iters)));
    rec.shutdown();

    // none is: the input is recorded as received
    let rec = recorder(&dir.path().join("redact_absent"), 1.0, vec!["card_number".into(), "user.email".into()]);
    group.bench_function("record_redact_absent", |b| b.iter_custom(|iters| timed(&rec, &ev, iters)));
    rec.shutdown();

    let rec = recorder(&dir.path().join("sampled"), 0.0, Vec::new());
    group.bench_function("record_sampled_out", |b| b.iter(|| rec.record(black_box(&ev))));
    rec.shutdown();

    group.bench_function("id", |b| b.iter(clef::snapshot::next_id));
    group.bench_function("decide", |b| b.iter(|| table.decide(black_box(INPUT), false)));
    group.finish();
}

/// `clef replay` throughput: 200,000 snapshots of the risk table (recorded by the recorder,
/// zstd) replayed through the same table, reading and parsing included. With
/// `CLEF_SNAPSHOT_BENCH_DIR=DIR` the snapshots are written there and kept, for
/// `clef replay DIR --table tables/risk.json`.
fn replay(c: &mut Criterion) {
    let table_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tables/risk.json");
    let table = Table::load(&table_path, &Limits::default()).expect("risk loads");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = std::env::var_os("CLEF_SNAPSHOT_BENCH_DIR").map_or_else(|| tmp.path().join("replay"), Into::into);
    let n = 200_000u64;
    let rec = recorder(&dir, 1.0, Vec::new());
    let tiers = ["vip", "premium", "basic", "standard"];
    let countries = ["CN", "US", "JP", "RU", "DE", "FR", "KP"];
    for i in 0..n {
        let input = format!(
            r#"{{"user_tier": "{}", "order_amount_usd": {}, "country_code": "{}", "ip_country": "{}", "is_vpn": {}, "failed_logins_24h": {}, "account_age_days": {}, "payment_method": "card"}}"#,
            tiers[(i % 4) as usize],
            (i * 7919) % 8000,
            countries[(i % 7) as usize],
            countries[(i / 7 % 7) as usize],
            i % 5 == 0,
            i % 9,
            (i * 31) % 800,
        );
        let d = table.decide(input.as_bytes(), false).expect("a decision");
        let mut ev = Event::new(&table, &d, input.as_bytes());
        ev.latency_ns = 700;
        while rec.record(&ev).status == Status::Dropped {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    rec.shutdown();
    let options = clef::replay::Options { table: table_path, ..Default::default() };
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(n));
    group.bench_function("risk_200k_zstd", |b| {
        b.iter(|| {
            let report = clef::replay::run(std::slice::from_ref(&dir), &options).expect("replay");
            assert_eq!(report.table.correct, n);
            report
        })
    });
    group.finish();
}

criterion_group!(benches, record, replay);
criterion_main!(benches);
