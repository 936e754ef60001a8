//! Decision snapshots (SPEC §8.1): ids, the recorder, segment files, the reader, crash safety,
//! retention, sampling, redaction and the recent window.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

mod common;

use clef::per_core::Rng;
use clef::render::ArmName;
use clef::snapshot::id::IdGen;
use clef::snapshot::segment;
use clef::snapshot::{
    Compress, Event, KeepClass, KeepDays, RawRecord, Recorder, Settings, Shadow, SnapshotId, SnapshotReader,
    SnapshotsConfig, Status,
};
use clef::table::{Limits, Table};
use serde_json::Value as Json;

const GATE: &str = r#"{
  "params": {"limit": {"value": 100}},
  "default": {"allow": false},
  "rules": [
    {"id": "blocked", "condition": "country == \"KP\"", "action": {"allow": false, "reason": "blocked"}},
    {"id": "scored", "condition": "(score ?? 0) + 1 > 3", "action": {"allow": false, "reason": "score"}},
    {"id": "big", "condition": "amount > params.limit", "action": {"allow": false, "review": true}},
    {"id": "vip", "condition": "tier == \"vip\"", "action": {"allow": true, "vip": true}},
    {"id": "small", "condition": "amount > 5", "action": {"allow": true}}
  ]
}"#;

fn gate() -> Table {
    Table::from_bytes(Path::new("gate.json"), GATE.as_bytes(), &Limits::default()).expect("gate loads")
}

fn config(dir: &Path, compress: Compress) -> SnapshotsConfig {
    SnapshotsConfig { enabled: true, dir: dir.to_path_buf(), flush_ms: 20, compress, ..SnapshotsConfig::default() }
}

/// Records `input` decided by `table`; the outcome.
fn record(rec: &Recorder, table: &Table, input: &str) -> clef::snapshot::RecordOutcome {
    let d = table.decide(input.as_bytes(), false).expect("a decision");
    let mut ev = Event::new(table, &d, input.as_bytes());
    ev.latency_ns = 1234;
    rec.record(&ev)
}

/// Every complete line of the files in `dir`, parsed as JSON.
fn read_all(paths: &[PathBuf]) -> (Vec<Json>, clef::snapshot::ReadStats) {
    let mut r = SnapshotReader::open(paths).expect("open");
    let mut out = Vec::new();
    while let Some(line) = r.next_line() {
        out.push(serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line))));
    }
    (out, r.stats().clone())
}

fn segments(dir: &Path) -> Vec<segment::Segment> {
    segment::list(dir).expect("list")
}

#[test]
fn ids_strictly_increase_per_thread_when_the_clock_steps_back() {
    // the generator with a simulated clock
    let mut g = IdGen::new(Rng::new(42));
    let clock = [1_000_000u64, 1_000_000, 1_000_001, 999_000, 5, 1_000_001, 1_000_002, 1_000_500, 1_000_400];
    let mut last = None;
    for &ms in clock.iter().cycle().take(10_000) {
        let id = g.next(ms);
        if let Some(prev) = last {
            assert!(id > prev, "{id} after {prev} at {ms}");
        }
        last = Some(id);
    }
    // the recorder, given decisions whose timestamps step back
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::start(&config(dir.path(), Compress::None)).unwrap();
    let table = gate();
    let d = table.decide(br#"{"amount": 50}"#, false).unwrap();
    let base = SystemTime::now();
    let mut prev: Option<SnapshotId> = None;
    for i in 0..2000u64 {
        let mut ev = Event::new(&table, &d, br#"{"amount": 50}"#);
        // forward, then an hour back (NTP), then forward again
        ev.timestamp = if i % 500 < 250 { base + Duration::from_millis(i) } else { base - Duration::from_secs(3600) };
        let id = rec.record(&ev).id;
        if let Some(p) = prev {
            assert!(id > p, "record {i}: {id} after {p}");
            assert!(id.text().as_str() > p.text().as_str(), "the text sorts like the id");
        }
        prev = Some(id);
    }
    // unique across threads
    let all: Vec<SnapshotId> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let ids: Vec<SnapshotId> = (0..20_000).map(|_| clef::snapshot::next_id()).collect();
                    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing within the thread");
                    ids
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len(), "unique across threads");
}

fn round_trip(compress: Compress) {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::start(&config(dir.path(), compress)).unwrap();
    let table = gate();
    // a tuning variant of the table: its values are recorded as those in force
    let variant = table.with_params(&BTreeMap::from([("limit".to_string(), serde_json::json!(120))])).unwrap();
    let inputs = [
        r#"{"amount": 500, "country": "FR"}"#,
        "{\n  \"amount\": 50,\r\n  \"tier\": \"vip\",\n  \"note\": \"line\\nbreak\"\n}\n",
        r#"{"amount": 1}"#,
        r#"{"score": "high", "amount": 7}"#,
        "\u{feff}{\"country\": \"KP\", \"big\": 123456789012345678901234567890}",
    ];
    let mut ids = Vec::new();
    for i in 0..300 {
        let input = inputs[i % inputs.len()];
        let d = table.decide(input.as_bytes(), false).unwrap();
        let mut ev = Event::new(&table, &d, input.as_bytes());
        ev.latency_ns = i as u64;
        let disabled = vec!["vip".to_string()];
        if i % 7 == 0 {
            ev.disabled_rules = &disabled;
            ev.traceparent = Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
            ev.decider = &variant;
            ev.variant = Some(ArmName::Variant("\"v2\""));
            ev.pinned = true;
            ev.canary_for = Some("gate_main");
        }
        let out = rec.record(&ev);
        assert_eq!(out.status, Status::Recorded);
        ids.push(out.id);
    }
    assert!(rec.flush(Duration::from_secs(5)));
    let stats = rec.stats();
    assert_eq!(stats.recorded, 300);
    let (lines, read) = read_all(&[dir.path().to_path_buf()]);
    assert_eq!(lines.len(), 300, "{read:?}");
    assert_eq!(read.torn_tails, 0);
    let ext = if compress == Compress::Zstd { ".ndjson.zst" } else { ".ndjson" };
    assert!(segments(dir.path()).iter().all(|s| s.path.to_str().unwrap().ends_with(ext)));
    let by_id: BTreeMap<String, &Json> = lines.iter().map(|l| (l["id"].as_str().unwrap().to_string(), l)).collect();
    for (i, id) in ids.iter().enumerate() {
        let line = by_id[id.text().as_str()];
        let input = inputs[i % inputs.len()];
        let want: Json = serde_json::from_str(input.trim_start_matches('\u{feff}')).unwrap();
        assert_eq!(line["input"], want, "the input as received");
        let d = table.decide(input.as_bytes(), false).unwrap();
        assert_eq!(line["rule_id"].as_str().map(str::to_string), table.outcome_id(&d));
        assert_eq!(line["action"], serde_json::from_str::<Json>(table.action_json(&d)).unwrap());
        assert_eq!(line["tried"], d.evaluated);
        assert_eq!(line["table"], "gate");
        assert_eq!(line["version"], table.version.as_str());
        assert_eq!(line["file_version"], table.file_version.as_str());
        assert_eq!(line["kind"], "jev");
        assert_eq!(line["instance"], "local");
        assert_eq!(line["confidence"], 1.0);
        assert_eq!(line["latency_ns"], i as u64);
        assert_eq!(line["warnings"].as_array().unwrap().len(), d.warnings.len());
        if i % 7 == 0 {
            assert_eq!(line["disabled_rules"], serde_json::json!(["vip"]));
            assert_eq!(line["variant"], "v2");
            assert_eq!(line["params"], serde_json::json!({"limit": 120}), "the variant's values");
            assert_eq!((line["pinned"].clone(), line["canary_for"].clone()), (Json::Bool(true), "gate_main".into()));
            assert_eq!(line["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        } else {
            assert_eq!(line["disabled_rules"], serde_json::json!([]));
            assert_eq!(line["variant"], Json::Null);
            assert_eq!(line["params"], serde_json::json!({"limit": 100}), "the file's values");
            assert_eq!((line["pinned"].clone(), line["canary_for"].clone()), (Json::Bool(false), Json::Null));
            assert_eq!(line["traceparent"], Json::Null);
        }
        let text = serde_json::to_vec(line).unwrap();
        assert!(RawRecord::parse(&text).unwrap().is_complete(), "every field of §8.1");
    }
    // the warning's message is the response's
    let warned = lines.iter().find(|l| l["input"]["score"] == "high").unwrap();
    assert_eq!(warned["warnings"][0]["rule_id"], "scored");
    assert!(warned["warnings"][0]["message"].as_str().unwrap().contains("cannot be applied"), "{warned}");
    rec.shutdown();
}

#[test]
fn records_round_trip_plain() {
    round_trip(Compress::None);
}

#[test]
fn records_round_trip_zstd() {
    round_trip(Compress::Zstd);
}

/// Records `batches` flushes of `per` snapshots each; the recorder is shut down.
fn batches(dir: &Path, compress: Compress, batches: usize, per: usize) {
    let rec = Recorder::start(&config(dir, compress)).unwrap();
    let table = gate();
    for b in 0..batches {
        for i in 0..per {
            record(&rec, &table, &format!(r#"{{"amount": {}, "batch": {b}}}"#, i));
        }
        assert!(rec.flush(Duration::from_secs(5)));
    }
    rec.shutdown();
}

fn only_segment(dir: &Path) -> PathBuf {
    let segs = segments(dir);
    assert_eq!(segs.len(), 1, "{segs:?}");
    segs[0].path.clone()
}

#[test]
fn a_torn_last_line_is_skipped_and_everything_before_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    batches(dir.path(), Compress::None, 3, 10);
    let path = only_segment(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let line_ends: Vec<usize> = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
    assert_eq!(line_ends.len(), 30);
    for (cut_at, whole) in [(line_ends[29] - 1, 29), (line_ends[14] + 20, 15), (line_ends[0] - 3, 0), (bytes.len(), 30)]
    {
        let torn = dir.path().join("torn.ndjson");
        std::fs::write(&torn, &bytes[..cut_at]).unwrap();
        let (lines, stats) = read_all(std::slice::from_ref(&torn));
        assert_eq!(lines.len(), whole, "cut at {cut_at}");
        assert_eq!(stats.torn_tails, u64::from(whole < 30), "cut at {cut_at}");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["input"]["amount"], i % 10, "in order, none lost before the tear");
        }
    }
}

/// The byte offsets where each zstd frame of `bytes` ends.
fn frame_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let size = zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]).expect("a whole frame");
        at += size;
        ends.push(at);
    }
    ends
}

#[test]
fn a_torn_last_frame_is_skipped_and_every_frame_before_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    batches(dir.path(), Compress::Zstd, 3, 10);
    let path = only_segment(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let ends = frame_ends(&bytes);
    assert_eq!(ends.len(), 3, "one frame per flushed batch");
    // the standard tool reads the segment too
    let plain = zstd::stream::decode_all(&bytes[..]).unwrap();
    assert_eq!(plain.iter().filter(|b| **b == b'\n').count(), 30);
    for (cut_at, whole) in [
        (bytes.len() - 1, 20),         // the checksum of the last frame cut
        (ends[1] + 7, 20),             // the last frame's header only
        ((ends[0] + ends[1]) / 2, 10), // the middle frame torn
        (5, 0),                        // the first frame torn
        (bytes.len(), 30),
    ] {
        let torn = dir.path().join("torn.ndjson.zst");
        std::fs::write(&torn, &bytes[..cut_at]).unwrap();
        let (lines, stats) = read_all(std::slice::from_ref(&torn));
        assert_eq!(lines.len(), whole, "cut at {cut_at} of {}", bytes.len());
        assert_eq!(stats.torn_tails, u64::from(whole < 30), "cut at {cut_at}");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["input"]["batch"], i / 10);
        }
    }
    // a damaged frame in the middle is skipped, the frames after it read
    let mut damaged = bytes.clone();
    for b in &mut damaged[ends[0] + 8..ends[1] - 8] {
        *b ^= 0x5a;
    }
    let file = dir.path().join("damaged.ndjson.zst");
    std::fs::write(&file, &damaged).unwrap();
    let (lines, stats) = read_all(&[file]);
    assert_eq!(lines.len(), 20, "{stats:?}");
    assert!(stats.damaged >= 1);
}

// ---------------------------------------------------------------------------------------------
// kill -9 while writing

const CHILD_DIR: &str = "CLEF_SNAPSHOT_CRASH_DIR";

/// Not a test on its own: the writer process of `kill_9_while_writing_loses_only_the_torn_tail`.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
    let compress = if std::env::var("CLEF_SNAPSHOT_CRASH_ZSTD").is_ok() { Compress::Zstd } else { Compress::None };
    let settings = Settings { chunk_bytes: 16 << 10, segment_bytes: Some(256 << 10), ..Settings::default() };
    let rec =
        Recorder::start_with(&SnapshotsConfig { flush_ms: 2, ..config(Path::new(&dir), compress) }, settings).unwrap();
    let table = gate();
    let acked: Vec<std::sync::atomic::AtomicU64> = (0..2).map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (rec, table, acked) = (&rec, &table, &acked);
            s.spawn(move || {
                let pad = "x".repeat(200);
                let mut n = 0u64;
                loop {
                    let input = format!(r#"{{"amount": {n}, "t": {t}, "n": {n}, "pad": "{pad}"}}"#);
                    let d = table.decide(input.as_bytes(), false).unwrap();
                    match rec.record(&Event::new(table, &d, input.as_bytes())).status {
                        Status::Recorded => {
                            n += 1;
                            acked[t as usize].store(n, std::sync::atomic::Ordering::SeqCst);
                        }
                        // the queue is full: the same snapshot again, so that each thread's
                        // numbers on disk have no gaps
                        _ => std::thread::sleep(Duration::from_micros(200)),
                    }
                }
            });
        }
        loop {
            let before: Vec<u64> = acked.iter().map(|a| a.load(std::sync::atomic::Ordering::SeqCst)).collect();
            assert!(rec.flush(Duration::from_secs(10)));
            println!("acked {} {}", before[0], before[1]);
        }
    });
}

fn kill_9_while_writing(compress: Compress) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if compress == Compress::Zstd {
        cmd.env("CLEF_SNAPSHOT_CRASH_ZSTD", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut acked = [0u64; 2];
    let mut flushes = 0;
    let mut line = String::new();
    let started = Instant::now();
    // wait for several flushes and some segments (rotation included), then kill it mid-write
    while flushes < 40 || segments(dir.path()).len() < 3 {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child stopped");
        if let Some(rest) = line.strip_prefix("acked ") {
            let v: Vec<u64> = rest.split_whitespace().map(|n| n.parse().unwrap()).collect();
            acked = [v[0], v[1]];
            flushes += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the child is too slow");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();

    let (lines, stats) = read_all(&[dir.path().to_path_buf()]);
    eprintln!("after kill -9: {} records, {stats:?}", lines.len());
    assert!(stats.torn_tails <= 1, "only the segment being written can be torn: {stats:?}");
    assert_eq!(stats.damaged, 0);
    // per thread: numbers 0..k with no gap and no repeat, k at least what a flush acknowledged
    let mut seen: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    for l in &lines {
        seen[l["input"]["t"].as_u64().unwrap() as usize].push(l["input"]["n"].as_u64().unwrap());
    }
    for t in 0..2 {
        let mut ns = seen[t].clone();
        ns.sort_unstable();
        assert_eq!(ns, (0..ns.len() as u64).collect::<Vec<_>>(), "thread {t}: every complete record, no gap");
        assert!(ns.len() as u64 >= acked[t], "thread {t}: {} on disk, {} acknowledged by a flush", ns.len(), acked[t]);
    }
    // a new writer on the same folder starts a new segment and writes cleanly
    let before = segments(dir.path()).len();
    let rec = Recorder::start(&config(dir.path(), compress)).unwrap();
    let table = gate();
    let ids: Vec<String> =
        (0..5).map(|i| record(&rec, &table, &format!(r#"{{"amount": {i}}}"#)).id.to_string()).collect();
    rec.shutdown();
    assert_eq!(segments(dir.path()).len(), before + 1);
    let (after, stats2) = read_all(&[dir.path().to_path_buf()]);
    assert_eq!(after.len(), lines.len() + 5);
    assert_eq!(stats2.torn_tails, stats.torn_tails);
    let tail: Vec<&str> = after[after.len() - 5..].iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(tail, ids, "the new records read last, whole");
}

#[test]
fn kill_9_while_writing_loses_only_the_torn_tail_plain() {
    kill_9_while_writing(Compress::None);
}

#[test]
fn kill_9_while_writing_loses_only_the_torn_tail_zstd() {
    kill_9_while_writing(Compress::Zstd);
}

// ---------------------------------------------------------------------------------------------
// retention

fn fake_segment(dir: &Path, seq: u64, keep: bool, bytes: usize, age_days: f64) -> PathBuf {
    let stream = if keep { segment::Stream::Keep } else { segment::Stream::Ordinary };
    let path = dir.join(segment::file_name(seq, SystemTime::now(), stream, false));
    std::fs::write(&path, vec![b'\n'; bytes]).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs_f64(age_days * 86_400.0)).unwrap();
    path
}

#[test]
fn retention_deletes_by_age_tiers_then_the_oldest_beyond_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let other = d.join("notes.txt");
    std::fs::write(&other, "not a segment").unwrap();
    let old_ordinary = fake_segment(d, 1, false, 1000, 10.0);
    let old_keep = fake_segment(d, 2, true, 1000, 10.0);
    let ancient_keep = fake_segment(d, 3, true, 1000, 40.0);
    let fresh: Vec<PathBuf> = (4..10).map(|seq| fake_segment(d, seq, seq % 3 == 0, 300 << 10, 1.0)).collect();
    // 6 × 300 KiB = 1.76 MiB, the budget 1 MiB: the oldest ordinary segments go first
    let cfg = SnapshotsConfig {
        keep_days: KeepDays { all: 7.0, always_keep: 30.0 },
        max_disk_mb: 1,
        ..config(d, Compress::None)
    };
    let rec = Recorder::start(&cfg).unwrap();
    let exists = |p: &Path| p.exists();
    assert!(!exists(&old_ordinary), "older than keep_days.all");
    assert!(exists(&old_keep), "an always_keep segment younger than keep_days.always_keep stays");
    assert!(!exists(&ancient_keep), "older than keep_days.always_keep");
    assert!(exists(&other), "other files are never touched");
    let kept: Vec<bool> = fresh.iter().map(|p| exists(p)).collect();
    // seqs 4..10: keep segments are 6 and 9; ordinary 4, 5, 7, 8 are deleted oldest first
    assert_eq!(kept, [false, false, true, false, true, true], "{:?}", segments(d));
    let left: u64 = segments(d).iter().map(|s| s.bytes).sum();
    assert!(left <= 1 << 20);
    let stats = rec.stats();
    assert_eq!(stats.segments_deleted, 5, "2 by age, 3 by size");
    assert_eq!(stats.disk_bytes, left);
    rec.shutdown();
}

#[test]
fn segments_rotate_by_size_and_retention_keeps_the_folder_within_max_disk() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { segment_bytes: Some(64 << 10), ..Settings::default() };
    let cfg = SnapshotsConfig { max_disk_mb: 1, ..config(dir.path(), Compress::None) };
    let rec = Recorder::start_with(&cfg, settings).unwrap();
    let table = gate();
    let pad = "y".repeat(1000);
    for i in 0..3000 {
        while record(&rec, &table, &format!(r#"{{"amount": {i}, "pad": "{pad}"}}"#)).status == Status::Dropped {
            std::thread::sleep(Duration::from_millis(1));
        }
        if i % 40 == 0 {
            rec.flush(Duration::from_secs(5));
        }
    }
    rec.shutdown();
    let segs = segments(dir.path());
    assert!(segs.len() >= 8, "rotated by size: {}", segs.len());
    assert!(segs.iter().all(|s| s.bytes < (64 << 10) + (64 << 10)), "{segs:?}");
    let total: u64 = segs.iter().map(|s| s.bytes).sum();
    assert!(total <= (1 << 20) + (64 << 10) * 2, "{total} bytes");
    let (lines, _) = read_all(&[dir.path().to_path_buf()]);
    let last = lines.last().unwrap();
    assert_eq!(last["input"]["amount"], 2999, "the newest survive");
}

// ---------------------------------------------------------------------------------------------
// the queue, sampling, redaction, the recent window

#[test]
fn a_full_queue_drops_and_counts_and_never_waits() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { queue_bytes: 64 << 10, ..Settings::default() };
    let rec =
        Recorder::start_with(&SnapshotsConfig { flush_ms: 60_000, ..config(dir.path(), Compress::Zstd) }, settings)
            .unwrap();
    let table = gate();
    let input = format!(r#"{{"amount": 3, "pad": "{}"}}"#, "z".repeat(10_000));
    let d = table.decide(input.as_bytes(), false).unwrap();
    let ev = Event::new(&table, &d, input.as_bytes());
    let mut statuses = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for _ in 0..2000 {
        let t = Instant::now();
        *statuses.entry(format!("{:?}", rec.record(&ev).status)).or_insert(0u64) += 1;
        slowest = slowest.max(t.elapsed());
    }
    let stats = rec.stats();
    assert!(statuses.get("Dropped").copied().unwrap_or(0) > 0, "{statuses:?}");
    assert_eq!(stats.dropped, statuses["Dropped"]);
    assert_eq!(stats.recorded, statuses["Recorded"]);
    assert!(slowest < Duration::from_millis(50), "a record waited {slowest:?}");
    assert!(rec.flush(Duration::from_secs(5)));
    let (lines, _) = read_all(&[dir.path().to_path_buf()]);
    assert_eq!(lines.len() as u64, stats.recorded, "what was not dropped is on disk");
}

#[test]
fn sampling_keeps_the_always_keep_classes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SnapshotsConfig {
        sample_rate: 0.0,
        always_keep: vec![KeepClass::Errors],
        ..config(dir.path(), Compress::None)
    };
    let rec = Recorder::start(&cfg).unwrap();
    let table = gate();
    for _ in 0..100 {
        assert_eq!(record(&rec, &table, r#"{"amount": 7}"#).status, Status::SampledOut);
        assert_eq!(record(&rec, &table, r#"{"score": "x"}"#).status, Status::Recorded, "a warning: errors class");
    }
    // a shadow that disagrees is not kept unless listed
    let d = table.decide(br#"{"amount": 7}"#, false).unwrap();
    let mut ev = Event::new(&table, &d, br#"{"amount": 7}"#);
    ev.shadow = Some(Shadow { table: &table, decision: &d, agrees: false });
    assert_eq!(rec.record(&ev).status, Status::SampledOut);
    assert!(rec.flush(Duration::from_secs(5)));
    let s = rec.stats();
    assert_eq!((s.recorded, s.sampled_out), (100, 101));
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].stream, segment::Stream::Keep, "always_keep classes have their own segments");
    rec.shutdown();

    // half the ordinary decisions
    let dir = tempfile::tempdir().unwrap();
    let cfg = SnapshotsConfig {
        sample_rate: 0.5,
        always_keep: vec![KeepClass::ShadowDisagreement],
        ..config(dir.path(), Compress::None)
    };
    let rec = Recorder::start(&cfg).unwrap();
    // (kept by the sampling; a tight loop may outrun the writer, and a full queue drops)
    let kept = (0..10_000).filter(|_| record(&rec, &table, r#"{"amount": 7}"#).status != Status::SampledOut).count();
    assert!((4500..5500).contains(&kept), "{kept}");
    // the loop may have filled the queue, which drops whatever comes (never waits): let the
    // writer catch up, so that the record below meets room
    assert!(rec.flush(Duration::from_secs(5)));
    assert!(rec.record(&ev).recorded(), "a disagreeing shadow is always kept");
    rec.shutdown();
}

#[test]
fn redaction_replaces_nested_fields_before_anything_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SnapshotsConfig {
        redact: vec!["card_number".into(), "user.email".into(), "items.token".into()],
        ..config(dir.path(), Compress::Zstd)
    };
    let rec = Recorder::start(&cfg).unwrap();
    let table = gate();
    let secret = r#"{"amount": 7, "card_number": "4111111111111111", "user": {"email": "ann@example.com", "name": "Ann"},
        "items": [{"token": "t1"}, {"sku": "a"}]}"#;
    let out = record(&rec, &table, secret);
    let plain = record(&rec, &table, r#"{"amount": 7}"#);
    assert!(rec.flush(Duration::from_secs(5)));
    let line = rec.lookup(out.id).unwrap();
    for s in ["4111111111111111", "ann@example.com", "t1"] {
        assert!(!line.contains(s), "{s} in {line}");
    }
    let v: Json = serde_json::from_str(&line).unwrap();
    assert_eq!(v["input"]["card_number"], "<redacted>");
    assert_eq!(v["input"]["user"], serde_json::json!({"email": "<redacted>", "name": "Ann"}));
    assert_eq!(v["input"]["items"], serde_json::json!([{"token": "<redacted>"}, {"sku": "a"}]));
    assert_eq!(v["redacted"], true);
    let v: Json = serde_json::from_str(&rec.lookup(plain.id).unwrap()).unwrap();
    assert_eq!(v.get("redacted"), None, "nothing was redacted");
    rec.shutdown();
    // nor on disk
    for seg in segments(dir.path()) {
        let text = zstd::stream::decode_all(&std::fs::read(&seg.path).unwrap()[..]).unwrap();
        assert!(!String::from_utf8_lossy(&text).contains("4111111111111111"));
    }
}

#[test]
fn lookup_finds_recent_snapshots_queued_or_written() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { recent_bytes: 64 << 10, ..Settings::default() };
    let rec =
        Recorder::start_with(&SnapshotsConfig { flush_ms: 60_000, ..config(dir.path(), Compress::Zstd) }, settings)
            .unwrap();
    let table = gate();
    // still queued: the writer waits up to 30 s
    let first = record(&rec, &table, r#"{"amount": 1}"#);
    let line = rec.lookup(first.id).expect("found while queued");
    assert_eq!(serde_json::from_str::<Json>(&line).unwrap()["id"], first.id.to_string());
    assert!(rec.flush(Duration::from_secs(5)));
    assert!(rec.lookup(first.id).is_some(), "found once written");
    // an id inside an input is not a snapshot
    let echo = record(&rec, &table, &format!(r#"{{"amount": 2, "ref": "{{\"id\":\"{}\""}}"#, first.id));
    assert!(rec.lookup(echo.id).is_some());
    assert_eq!(rec.lookup(SnapshotId::parse("0193b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b").unwrap()), None);
    // pushed out of the window by newer batches (of lines that do not compress: the window
    // holds the frames as written)
    let mut rng = Rng::new(7);
    for _ in 0..50 {
        for i in 0..20 {
            let noise: String = (0..25).map(|_| format!("{:016x}", rng.next_u64())).collect();
            record(&rec, &table, &format!(r#"{{"amount": {i}, "pad": "{noise}"}}"#));
        }
        rec.flush(Duration::from_secs(5));
    }
    assert_eq!(rec.lookup(first.id), None, "too old for the window");
    assert!(rec.stats().recent_bytes <= 64 << 10);
    // a burst grows the buffers; the small batches after it do not keep that memory each
    for i in 0..2000 {
        record(&rec, &table, &format!(r#"{{"amount": {i}, "pad": "{}"}}"#, "q".repeat(200)));
    }
    rec.flush(Duration::from_secs(5));
    for i in 0..100 {
        let last = record(&rec, &table, &format!(r#"{{"amount": {i}}}"#));
        rec.flush(Duration::from_secs(5));
        assert!(rec.lookup(last.id).is_some());
    }
    assert!(rec.stats().recent_bytes <= 64 << 10, "{:?}", rec.stats());
    rec.shutdown();
    assert_eq!(record(&rec, &table, r#"{"amount": 1}"#).status, Status::Dropped, "stopped");
}

// ---------------------------------------------------------------------------------------------
// memory: what a burst takes comes back

#[test]
fn the_queue_gives_its_memory_back_when_the_recorder_goes_idle() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { trim_interval: Duration::from_millis(100), ..Settings::default() };
    let queue_bytes = settings.queue_bytes as u64;
    let recent_bytes = settings.recent_bytes as u64;
    let rec = Recorder::start_with(&config(dir.path(), Compress::Zstd), settings).unwrap();
    let table = gate();
    // two threads, 40 MB of lines between them: ten times what the queue may hold
    let per_thread = 20_000;
    let peak = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..2 {
            let (rec, table, peak) = (&rec, &table, &peak);
            scope.spawn(move || {
                for i in 0..per_thread {
                    let input = format!(r#"{{"amount": {i}, "thread": {t}, "pad": "{}"}}"#, "m".repeat(900));
                    record(rec, table, &input);
                    if i % 500 == 0 {
                        peak.fetch_max(rec.stats().queue_memory_bytes, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let busy = rec.stats();
    let peak = peak.into_inner().max(busy.queue_memory_bytes);
    assert_eq!(busy.recorded + busy.dropped, 2 * per_thread, "{busy:?}");
    // at least the queue's whole size went through it (a loop this tight may outrun the writer:
    // then the queue is full, and drops)
    assert!(busy.recorded >= 4_000, "{busy:?}");
    assert!(peak > 0 && peak <= queue_bytes, "the queue took {peak} bytes (its bound: {queue_bytes})");
    // idle: the writer takes what is being filled, and the next trims unmap the spare chunks
    let deadline = Instant::now() + Duration::from_secs(5);
    let idle = loop {
        let s = rec.stats();
        if s.queue_memory_bytes == 0 || Instant::now() >= deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(idle.queue_memory_bytes, 0, "the queue kept its chunks when idle: {idle:?}");
    assert!(idle.recent_bytes > 0 && idle.recent_bytes <= recent_bytes, "{idle:?}");
    // and a recorder that gave its chunks back records on
    let later = record(&rec, &table, r#"{"amount": 7}"#);
    assert_eq!(later.status, Status::Recorded);
    assert!(rec.lookup(later.id).is_some());
    assert!(rec.flush(Duration::from_secs(5)));
    let (lines, stats) = read_all(&[dir.path().to_path_buf()]);
    assert_eq!(lines.len() as u64, busy.recorded + 1, "every recorded snapshot is on disk: {stats:?}");
}

/// The value of an unlabelled metric of `clef serve` (Prometheus text format).
fn metric(srv: &common::Server, name: &str) -> f64 {
    let text = srv.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

#[test]
fn a_burst_of_recorded_decisions_gives_its_memory_back() {
    // Before the chunked queue, a server recording every decision went from 10.5 MB idle to
    // 41 MB under load and kept 47 MB after it (benches/snapshot_load.sh).
    let cfg = common::config(
        "",
        "",
        "model:\n  default_table: risk\n  watch_file: false\n\
         snapshots:\n  enabled: true\n  dir: snaps\n  sample_rate: 1.0\n",
    );
    let srv = common::Server::start(&cfg, &[("risk.json", &common::table("big"))]);
    let body = format!(r#"{{"x": 50, "tier": "gold", "pad": "{}"}}"#, "p".repeat(1500));
    // warm: the workers' buffers and the writer's first frames exist before `before`
    let mut warm = common::Conn::open(srv.port);
    for _ in 0..200 {
        assert_eq!(warm.request("POST", "/decide/risk", &[], body.as_bytes()).status, 200);
    }
    drop(warm);
    std::thread::sleep(Duration::from_millis(1500));
    let before = srv.rss_kib();
    let warm_recorded = metric(&srv, "clef_snapshots_recorded_total");
    // 30,000 decisions of about 2 KB each (60 MB of lines: five times the old queue and window
    // together), from 16 keep-alive clients, for at most 40 s
    let (clients, total) = (16, 30_000u64);
    let sent = std::sync::atomic::AtomicU64::new(0);
    let started = Instant::now();
    let mut peak = before;
    let answered: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let (sent, body, port) = (&sent, body.as_bytes(), srv.port);
                scope.spawn(move || {
                    let mut conn = common::Conn::open(port);
                    let mut n = 0u64;
                    while sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total
                        && started.elapsed() < Duration::from_secs(40)
                    {
                        assert_eq!(conn.request("POST", "/decide/risk", &[], body).status, 200);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        while !workers.iter().all(|w| w.is_finished()) {
            peak = peak.max(srv.rss_kib());
            std::thread::sleep(Duration::from_millis(50));
        }
        workers.into_iter().map(|w| w.join().expect("a client")).sum()
    });
    let burst = started.elapsed();
    let recorded = metric(&srv, "clef_snapshots_recorded_total") - warm_recorded;
    // back within 5 s: the queue's chunks unmapped (the recent window of 1 MiB stays), and
    // what the allocator took for the burst returned
    let window = (1u64 << 20) as f64;
    let deadline = Instant::now() + Duration::from_secs(5);
    let (after, memory) = loop {
        let (now, memory) = (srv.rss_kib(), metric(&srv, "clef_snapshots_memory_bytes"));
        if (now <= before + 6 * 1024 && memory <= window) || Instant::now() >= deadline {
            break (now, memory);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "{answered} decisions ({recorded} recorded, {} MB of lines) from {clients} clients in {burst:?}: \
         RSS before {before} KiB, peak {peak} KiB, after {after} KiB; recorder memory after {memory} bytes",
        answered * (body.len() as u64 + 400) / 1_000_000
    );
    assert!(recorded >= 15_000.0, "the burst recorded only {recorded} snapshots of {answered}");
    assert!(peak <= before + 32 * 1024, "RSS went from {before} to {peak} KiB under load");
    assert!(after <= before + 6 * 1024, "RSS stayed at {after} KiB after the burst (from {before} KiB)");
    assert!(memory <= window, "the recorder kept {memory} bytes when idle");
}

// ---------------------------------------------------------------------------------------------
// When the disk refuses: a full file system, a deleted folder

/// A 2 MiB tmpfs mounted on a folder (`None` where mounting is not allowed: not root),
/// unmounted when dropped: a disk that fills up
/// for real. Declared before the server, so that the server stops before the unmount.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A few kilobytes that zstd cannot shrink much: the disk fills after a few hundred snapshots.
fn noisy_input(seed: u64) -> String {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    let noise: String = (0..256)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            format!("{:016x}", x)
        })
        .collect();
    format!(r#"{{"x": 50, "tier": "gold", "noise": "{noise}"}}"#)
}

/// The files in `dir` (none when it is gone).
fn files_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn snapshot_server(dir: tempfile::TempDir) -> common::Server {
    let cfg = common::config(
        "",
        "",
        "model:\n  default_table: risk\n  watch_file: false\n\
         snapshots:\n  enabled: true\n  dir: snaps\n  sample_rate: 1.0\n  flush_ms: 100\n",
    );
    common::write(dir.path(), "tables/risk.json", common::table("big"));
    common::Server::launch(dir, move |p| p.fill(&cfg).into_bytes(), |_, _| None)
}

#[test]
fn a_full_disk_gets_no_file_per_failed_flush_shows_in_health_and_recovers() {
    // Before: on a 1 MB tmpfs, every failed flush started a new segment, which stayed empty:
    // 1,392 files in 10 s, never deleted, until the inodes ran out; /health said ok.
    let dir = tempfile::tempdir().unwrap();
    let snaps = dir.path().join("snaps");
    let tmpfs = Tmpfs::mount(&snaps);
    // The fault: a filler leaving 64 KiB on the tmpfs (removing it leaves room for the 1 MiB
    // the writer keeps to retry), else (not root) a file where the folder must be, put there
    // once the server runs.
    if tmpfs.is_some() {
        std::fs::write(snaps.join("filler"), vec![0u8; (2 << 20) - (64 << 10)]).unwrap();
    }
    eprintln!("fault: {}", if tmpfs.is_some() { "a full tmpfs" } else { "a file in place of the folder" });
    let srv = snapshot_server(dir);
    if tmpfs.is_none() {
        std::fs::rename(&snaps, srv.path().join("snaps.moved")).unwrap();
        std::fs::write(&snaps, b"not a folder").unwrap();
    }
    let files_before = files_in(&snaps).len();
    // three seconds of decisions of 4 KB each: 60 flushes that all fail
    let mut conn = common::Conn::open(srv.port);
    let started = Instant::now();
    let mut seed = 0;
    let mut most_files = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let body = noisy_input(seed);
        seed += 1;
        assert_eq!(conn.request("POST", "/decide/risk", &[], body.as_bytes()).status, 200, "decisions go on");
        most_files = most_files.max(files_in(&snaps).len());
    }
    let health = srv.health();
    eprintln!("after {seed} decisions: {health}; files {:?}", files_in(&snaps));
    assert!(most_files <= files_before + 2, "failed flushes made files: {:?}", files_in(&snaps));
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["degraded"], serde_json::json!(["snapshots"]), "{health}");
    let s = &health["snapshots"];
    assert_eq!(s["failing"], true, "{health}");
    assert!(s["since"].is_string() && s["write_errors"].as_u64().unwrap() > 0, "{health}");
    let error = s["last_error"].as_str().unwrap();
    let expected = if tmpfs.is_some() { "No space left on device" } else { "not a directory" };
    assert!(error.to_lowercase().contains(&expected.to_lowercase()), "{error}");
    assert!(!error.contains(&*srv.path().to_string_lossy()), "a path in /health: {error}");
    assert_eq!(metric(&srv, "clef_snapshots_failing"), 1.0);
    // what is kept to retry is bounded (1 MiB); beyond it the oldest is counted as lost
    assert!(s["retry_bytes"].as_u64().unwrap() <= 1 << 20, "{health}");
    assert!(s["lost"].as_u64().unwrap() > 0, "3 s of 4 KB decisions are more than 1 MiB: {health}");

    // the disk has room again: what was kept is written, and /health is ok
    if tmpfs.is_some() {
        std::fs::remove_file(snaps.join("filler")).unwrap();
    } else {
        std::fs::remove_file(&snaps).unwrap();
    }
    srv.eventually(5, "the writer to store again", |s| {
        let h = s.health();
        h["status"] == "ok" && h["snapshots"]["failing"] == false && h["snapshots"]["retry_bytes"] == 0
    });
    assert_eq!(metric(&srv, "clef_snapshots_failing"), 0.0);
    let recorded = metric(&srv, "clef_snapshots_recorded_total");
    let lost = metric(&srv, "clef_snapshots_lost_total");
    let mut srv = srv;
    srv.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(srv.wait_exit().success());
    // every snapshot recorded is on disk but those counted as lost (the not-root fault moved
    // the first segment away with what it held)
    let mut paths = vec![snaps.clone()];
    if tmpfs.is_none() {
        paths.push(srv.path().join("snaps.moved"));
    }
    let (lines, stats) = read_all(&paths);
    eprintln!("recorded {recorded}, lost {lost}, read back {} ({stats:?})", lines.len());
    assert!(lost < recorded, "something was kept and written again: lost {lost} of {recorded}");
    assert_eq!(lines.len() as f64, recorded - lost, "{stats:?}");
    assert_eq!((stats.torn_tails, stats.damaged), (0, 0), "no torn write stayed in a segment");
    drop(srv);
    drop(tmpfs);
}

#[test]
fn a_snapshot_folder_deleted_while_serving_is_made_again_and_its_loss_counted() {
    // Before: the writer went on appending to the deleted segment (write_errors 0, lost 0,
    // /health ok), and nothing reached the folder again.
    let dir = tempfile::tempdir().unwrap();
    let srv = snapshot_server(dir);
    let snaps = srv.path().join("snaps");
    for i in 0..20 {
        assert_eq!(srv.post("/decide/risk", &format!(r#"{{"x": {i}}}"#)).status, 200);
    }
    srv.eventually(5, "the first 20 snapshots on disk", |_| read_all(std::slice::from_ref(&snaps)).0.len() == 20);
    std::fs::remove_dir_all(&snaps).unwrap();
    for i in 0..10 {
        assert_eq!(srv.post("/decide/risk", &format!(r#"{{"x": {}}}"#, 100 + i)).status, 200);
    }
    srv.eventually(5, "the folder made again, with the next 10 snapshots", |_| {
        snaps.is_dir() && read_all(std::slice::from_ref(&snaps)).0.len() == 10
    });
    let health = srv.health();
    assert_eq!(health["status"], "ok", "recovered: {health}");
    let s = &health["snapshots"];
    assert_eq!(s["failing"], false, "{health}");
    assert!(s["last_error"].as_str().unwrap().contains("deleted"), "{health}");
    assert!(s["write_errors"].as_u64().unwrap() >= 1, "{health}");
    assert_eq!(s["lost"], 20, "the 20 snapshots deleted with their segment: {health}");
    assert_eq!(metric(&srv, "clef_snapshots_folder_recreated_total"), 1.0);
    assert_eq!(metric(&srv, "clef_snapshots_lost_total"), 20.0);
}
