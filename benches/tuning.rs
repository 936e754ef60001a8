//! What tuning costs a decision (SPEC §9: at most 5% more), tuned table against the same table
//! untuned, in one run, at two depths:
//! - `served/TABLE/on|off`: the decision as the server answers it, `POST /decide/TABLE` through
//!   the connection loop of an `App` opened from a config with and without `tuning:` (see
//!   [`served`]); what the kernel adds to a request is left out (`benches/tuning_load.sh`
//!   measures the real binary with wrk).
//! - `tuning/TABLE/…`: the decision pipeline alone (`decide_staged`, the response rendered).
//!   With tuning, every decision of the table draws for the traffic share, gets a tagged
//!   `snapshot_id` and names its variant (5% of them are made by a variant); without, none of
//!   that happens. Each pair runs twice: snapshots off (an untuned decision then gets no id at
//!   all, so tuning pays for making and rendering one) and snapshots on but sampled out (every
//!   decision gets an id either way; nothing is written, so the writer's cost stays out).
//!
//! Tables: the example rule set `search_rewrite` (a tunable threshold) and a 200-rule Jev table
//! whose last rule reads a tunable parameter.
//!
//! Run: `cargo bench --bench tuning`. The machine may be noisy; instruction counts are not:
//! `TUNING_BENCH_COUNT=pay/snapshots/on:100000` makes the binary skip criterion and decide that
//! case that many times, so that under `valgrind --tool=callgrind` the difference between a
//! count of N and of 0, divided by N, is the instructions of one decision (for `served/…`
//! cases, N connections of 64 requests each: divide by 64 N):
//!
//! ```sh
//! B=$(ls -t target/release/deps/tuning-* | grep -v '\.d$' | head -1)
//! for n in 0 100000; do TUNING_BENCH_COUNT=pay/off:$n valgrind --tool=callgrind \
//!   --callgrind-out-file=/dev/null $B 2>&1 | grep 'refs'; done
//! ```
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::hint::black_box;
use std::path::Path;

use clef::config::Model;
use clef::decide::{self as pipeline, Options, Stages};
use clef::registry::{Registry, Sources};
use clef::server::conn::Socket;
use clef::server::routes::Listener;
use clef::server::App;
use clef::snapshot::{Recorder, Settings, SnapshotsConfig};
use clef::table::Limits;
use clef::tuning::{Tuner, TuningConfig};
use criterion::measurement::WallTime;
use criterion::{criterion_group, BenchmarkGroup, Criterion};

/// 200 rules, every one on the input's fields; the last reads the tunable `params.limit`.
fn jev_table() -> String {
    let mut rules: Vec<serde_json::Value> = (0..199)
        .map(|i| {
            serde_json::json!({"id": format!("r{i}"),
                "condition": format!("tier == \"t{}\" && amount > {}", i % 20, 1000 + i), "action": {"n": i}})
        })
        .collect();
    rules.push(serde_json::json!({"id": "last", "condition": "amount < params.limit", "action": {"allow": true}}));
    serde_json::json!({"params": {"limit": {"value": 50, "min": 0, "max": 100, "step": 5, "tunable": true}},
        "rules": rules})
    .to_string()
}

fn bench(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("temp dir");
    let tables = dir.path().join("tables");
    std::fs::create_dir(&tables).expect("tables/");
    std::fs::copy(root.join("tables/search_rewrite.yaml"), tables.join("search_rewrite.yaml")).expect("copy");
    std::fs::write(tables.join("pay.json"), jev_table()).expect("write pay.json");
    let sources = Sources { tables_dir: tables, extra: None, limits: Limits::default(), overlays: None };
    let (registry, _) = Registry::open(sources);
    let config = TuningConfig { tables: vec!["search_rewrite".into(), "pay".into()], ..TuningConfig::default() };
    let snapshot = registry.served();
    let tuner = |state: &str| {
        let tuner = Tuner::new(&config, &dir.path().join(state)).expect("tuner");
        tuner.tick(|name| snapshot.get(name).and_then(|s| s.current.clone()), &mut clef::tuning::thread_rng());
        Some(tuner)
    };
    let recorder = || {
        let cfg = SnapshotsConfig {
            enabled: true,
            dir: dir.path().join("snapshots"),
            sample_rate: 0.0,
            ..SnapshotsConfig::default()
        };
        Some(Recorder::start_with(&cfg, Settings::default()).expect("recorder"))
    };
    let tuned_ids = Stages::new(&Model::default(), recorder(), tuner("state-a"));
    let plain_ids = Stages::new(&Model::default(), recorder(), None);
    let tuned = Stages::new(&Model::default(), None, tuner("state-b"));
    let plain = Stages::new(&Model::default(), None, None);
    let inputs = [
        ("search_rewrite", std::fs::read(root.join("tables/samples/search_rewrite.mobile_high_errors.json")).unwrap()),
        ("pay", br#"{"tier": "t3", "amount": 20}"#.to_vec()),
    ];
    let options = Options::default();
    let count = std::env::var("TUNING_BENCH_COUNT").ok();
    let mut group = c.benchmark_group("tuning");
    for (name, input) in &inputs {
        let resolved = pipeline::resolve(&snapshot, Some(name), None).expect("the table");
        let mut out = String::new();
        let d =
            pipeline::decide_staged(&tuned, &snapshot, resolved, &pipeline::Prepared::bytes(input), &options, &mut out);
        assert!(d.result.is_ok() && out.contains("\"variant\""), "{name} is tuned: {out}");
        let pairs = [("off", &plain), ("on", &tuned), ("snapshots/off", &plain_ids), ("snapshots/on", &tuned_ids)];
        for (label, stages) in pairs {
            let case = format!("{name}/{label}");
            let decide_once = || {
                out.clear();
                black_box(pipeline::decide_staged(
                    stages,
                    &snapshot,
                    resolved,
                    &pipeline::Prepared::bytes(black_box(input)),
                    &options,
                    &mut out,
                ));
            };
            run_case(&mut group, count.as_deref(), &case, &case, decide_once);
        }
    }
    group.finish();
    served(c, &dir, &inputs, count.as_deref());
}

/// The same decisions as the server answers them (`served/…`): `POST /decide/{table}`
/// requests through the connection loop (HTTP parsed, routed, decided, counted, the answer
/// encoded and written), 64 on one keep-alive connection over a socket in memory that hands
/// over one request per read, as a client that waits for each answer does; for an `App`
/// opened from a config with tuning on and one without. What the kernel adds is left out.
fn served(c: &mut Criterion, dir: &tempfile::TempDir, inputs: &[(&str, Vec<u8>)], count: Option<&str>) {
    let open = |name: &str, tuning: &str| {
        let config = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!("model: {{tables_dir: tables, watch_file: false}}\nstate_dir: state-{name}\n{tuning}"),
        )
        .expect("config");
        let loaded = clef::config::load(Some(&config), &Default::default()).expect("the config loads");
        let (app, _) = App::open(&loaded).expect("the app opens");
        if let Some(tuner) = &app.stages.tuner {
            let tables = app.registry.served();
            tuner.tick(|name| tables.get(name).and_then(|s| s.current.clone()), &mut clef::tuning::thread_rng());
        }
        app
    };
    let apps = [
        ("off", open("untuned", "")),
        ("on", open("tuned", "tuning: {enabled: true, tables: [search_rewrite, pay]}\n")),
    ];
    let mut group = c.benchmark_group("served");
    group.throughput(criterion::Throughput::Elements(PIPELINED as u64));
    for (name, input) in inputs {
        let request = [
            format!("POST /decide/{name} HTTP/1.1\r\nHost: clef\r\nContent-Type: application/json\r\n").as_bytes(),
            format!("Content-Length: {}\r\n\r\n", input.len()).as_bytes(),
            input,
        ]
        .concat();
        let requests = request.repeat(PIPELINED);
        for (label, app) in &apps {
            let mut socket = MemorySocket { input: &requests, request: request.len(), read: 0, written: Vec::new() };
            app.serve_connection(Listener::Main, &mut socket);
            let answers = String::from_utf8_lossy(&socket.written);
            assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), PIPELINED, "{name}/{label}: {answers:.300}");
            assert_eq!(answers.contains("\"variant\""), *label == "on", "{name}/{label}: {answers:.300}");
            let case = format!("{name}/{label}");
            let serve_once = || {
                socket.read = 0;
                socket.written.clear();
                app.serve_connection(Listener::Main, black_box(&mut socket));
            };
            run_case(&mut group, count, &case, &format!("served/{case}"), serve_once);
        }
    }
    group.finish();
}

/// Times `once` as the bench `case` of `group`; or, with `TUNING_BENCH_COUNT=COUNTED_AS:N`
/// (see the module doc), runs it N times without criterion if this is that case, else not at all.
fn run_case(
    group: &mut BenchmarkGroup<'_, WallTime>,
    count: Option<&str>,
    case: &str,
    counted_as: &str,
    mut once: impl FnMut(),
) {
    match count {
        None => {
            group.bench_function(case, |b| b.iter(&mut once));
        }
        Some(spec) => {
            let (wanted, n) = spec.rsplit_once(':').expect("TUNING_BENCH_COUNT=pay/off:100000");
            if wanted == counted_as {
                (0..n.parse::<u64>().expect("a count")).for_each(|_| once());
            }
        }
    }
}

/// Requests per connection in the `served` benches.
const PIPELINED: usize = 64;

/// A client connection in memory: its requests are read one at a time, its answers kept.
struct MemorySocket<'a> {
    input: &'a [u8],
    /// the length of each request
    request: usize,
    read: usize,
    written: Vec<u8>,
}

impl std::io::Read for MemorySocket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = &self.input[self.read..];
        let n = rest.len().min(buf.len()).min(self.request - self.read % self.request);
        buf[..n].copy_from_slice(&rest[..n]);
        self.read += n;
        Ok(n)
    }
}

impl std::io::Write for MemorySocket<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Socket for MemorySocket<'_> {
    fn set_read_timeout(&mut self, _: Option<std::time::Duration>) -> std::io::Result<()> {
        Ok(())
    }
    fn set_write_timeout(&mut self, _: Option<std::time::Duration>) -> std::io::Result<()> {
        Ok(())
    }
    fn peek_byte(&mut self) -> std::io::Result<usize> {
        Ok(usize::from(self.read < self.input.len()))
    }
    fn unsent_bytes(&self) -> Option<usize> {
        Some(0)
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(4));
    targets = bench
}
fn main() {
    benches();
    if std::env::var_os("TUNING_BENCH_COUNT").is_none() {
        Criterion::default().configure_from_args().final_summary();
    }
}
