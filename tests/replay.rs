//! `clef replay` (SPEC §8.2) on snapshots the recorder wrote: the same table scores
//! correctness 1.0, an edited one less, naming the rules whose outcomes changed; switched-off
//! rules and tuning params are applied; the JSON report; streaming in bounded memory.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use clef::render::ArmName;
use clef::replay::{self, Options};
use clef::snapshot::{Compress, Event, Recorder, SnapshotsConfig, Status};
use clef::table::{Limits, Table};
use serde_json::Value as Json;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn risk_source() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("tables/risk.json")).unwrap()
}

/// Writes `source` as `dir/NAME.json`; its path.
fn write_table(dir: &Path, name: &str, source: &str) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, source).unwrap();
    path
}

/// A reproducible stream of risk inputs that reach most rules.
fn inputs(n: usize) -> Vec<String> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let tiers = ["vip", "premium", "basic", "standard"];
    let countries = ["CN", "US", "JP", "RU", "DE", "FR", "KP"];
    let methods = ["card", "wallet", "crypto", "Gift_Card"];
    (0..n)
        .map(|_| {
            format!(
                r#"{{"user_tier": "{}", "order_amount_usd": {}, "country_code": "{}", "ip_country": "{}", "is_vpn": {}, "failed_logins_24h": {}, "account_age_days": {}, "payment_method": "{}"}}"#,
                tiers[next(4) as usize],
                next(8000),
                countries[next(7) as usize],
                countries[next(7) as usize],
                next(4) == 0,
                next(8),
                next(800),
                methods[next(4) as usize],
            )
        })
        .collect()
}

/// Records `n` decisions of `table_path` into `dir`; every 10th with `rule_001` switched off
/// (decided by the table without it), every 15th by a tuning variant with another
/// `max_amount_usd`.
fn record(dir: &Path, table_path: &Path, n: usize, compress: Compress) {
    let limits = Limits::default();
    let table = Table::load(table_path, &limits).unwrap();
    // as the server makes them: the kill switch overlay, and a variant's values compiled in
    let (switched_off, _) = table.with_switched_off(&["rule_001".to_string()].into_iter().collect());
    let values = [("max_amount_usd".to_string(), serde_json::json!(2500))].into_iter().collect();
    let tuned = table.with_params(&values).unwrap();
    let cfg = SnapshotsConfig { enabled: true, dir: dir.to_path_buf(), flush_ms: 20, compress, ..Default::default() };
    let rec = Recorder::start(&cfg).unwrap();
    let off = vec!["rule_001".to_string()];
    for (i, input) in inputs(n).iter().enumerate() {
        let decider = if i % 10 == 0 {
            &switched_off
        } else if i % 15 == 0 {
            &tuned
        } else {
            &table
        };
        let d = decider.decide(input.as_bytes(), false).unwrap();
        // the served table's name, version and rules; the decision as the kill switch or the
        // variant made it
        let mut ev = Event::new(&table, &d, input.as_bytes());
        ev.latency_ns = 1000 + i as u64;
        if i % 10 == 0 {
            ev.disabled_rules = &off;
        } else if i % 15 == 0 {
            ev.decider = &tuned;
            ev.variant = Some(ArmName::Variant("\"v1\""));
        }
        while rec.record(&ev).status == Status::Dropped {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    rec.shutdown();
}

fn options(table: &Path) -> Options {
    Options { table: table.to_path_buf(), ..Options::default() }
}

#[test]
fn the_same_table_reproduces_every_recorded_decision() {
    let dir = tempfile::tempdir().unwrap();
    let table = write_table(dir.path(), "risk", &risk_source());
    let snaps = dir.path().join("snapshots");
    record(&snaps, &table, 3000, Compress::Zstd);
    let report = replay::run(&[snaps], &options(&table)).unwrap();
    let t = &report.table;
    assert_eq!(t.decisions, 3000);
    assert_eq!(t.judged, 3000);
    assert_eq!(t.correct, 3000, "{:#?}", t.changed_rules);
    assert_eq!(t.changed, 0);
    assert!(t.changed_rules.is_empty());
    assert_eq!(t.unapplied, 0);
    assert_eq!(t.audit_completeness(), 1.0);
    assert_eq!(t.within_sla_share(), 1.0);
    assert!(t.score(1000.0) > 99.99, "{}", t.score(1000.0));
    assert!(t.latency.quantile(0.5) > 0);
    assert_eq!(report.recorded_latency.len(), 3000);
    assert_eq!(report.read.torn_tails, 0);
}

#[test]
fn switched_off_rules_and_params_must_be_applied_to_reproduce() {
    // without the kill switch applied the switched-off decisions would differ: check that the
    // test data really depends on it
    let dir = tempfile::tempdir().unwrap();
    let table = write_table(dir.path(), "risk", &risk_source());
    let snaps = dir.path().join("snapshots");
    record(&snaps, &table, 3000, Compress::None);
    let mut edited = String::new();
    let mut n = 0;
    // strip the recorded disabled_rules, variants and values: replay then uses the table as is
    for line in std::fs::read_dir(&snaps).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()) {
        for l in line.lines() {
            let mut v: Json = serde_json::from_str(l).unwrap();
            v["disabled_rules"] = Json::Array(vec![]);
            v["variant"] = Json::Null;
            v["params"] = Json::Null;
            edited.push_str(&v.to_string());
            edited.push('\n');
            n += 1;
        }
    }
    assert_eq!(n, 3000);
    let stripped = dir.path().join("stripped.ndjson");
    std::fs::write(&stripped, edited).unwrap();
    let report = replay::run(&[stripped], &options(&table)).unwrap();
    let changed: Vec<Option<&str>> = report.table.changed_rules.keys().map(|k| k.as_deref()).collect();
    assert!(report.table.correct < 3000, "the data depends on the switch and the params");
    assert!(changed.contains(&Some("rule_001")), "{changed:?}");
    assert!(changed.contains(&Some("amount_over_limit")), "{changed:?}");
}

#[test]
fn an_edited_table_scores_less_and_names_the_changed_rules() {
    let dir = tempfile::tempdir().unwrap();
    let table = write_table(dir.path(), "risk", &risk_source());
    let snaps = dir.path().join("snapshots");
    record(&snaps, &table, 2000, Compress::Zstd);
    // A': rule_001 now needs orders above 3000 (was 1000)
    let edited = risk_source().replace(
        "order_amount_usd > 1000 && country_code == \\\"CN\\\"",
        "order_amount_usd > 3000 && country_code == \\\"CN\\\"",
    );
    assert_ne!(edited, risk_source());
    let candidate_dir = dir.path().join("candidate");
    std::fs::create_dir(&candidate_dir).unwrap();
    let candidate = write_table(&candidate_dir, "risk", &edited);
    let report =
        replay::run(std::slice::from_ref(&snaps), &Options { against: Some(candidate.clone()), ..options(&table) })
            .unwrap();
    assert_eq!(report.table.correct, 2000);
    let a = report.against.as_ref().unwrap();
    assert_eq!(a.decisions, 2000);
    assert!(a.correctness() < 1.0 && a.correctness() > 0.8, "{}", a.correctness());
    let lost = &a.changed_rules[&Some("rule_001".to_string())];
    assert!(lost.lost > 0 && lost.gained == 0, "{lost:?}");
    assert_eq!(lost.examples.len(), 3);
    for e in &lost.examples {
        let input: Json = serde_json::from_str(&e.input).unwrap();
        let amount = input["order_amount_usd"].as_u64().unwrap();
        assert!((1001..=3000).contains(&amount), "an example in the changed range: {input}");
        assert_eq!(e.recorded_rule.as_deref(), Some("rule_001"));
        assert_ne!(e.replayed_rule.as_deref(), Some("rule_001"));
    }
    // the rules that took those decisions over are named as gaining them
    let gained: u64 =
        a.changed_rules.iter().filter(|(k, _)| k.as_deref() != Some("rule_001")).map(|(_, c)| c.gained).sum();
    assert_eq!(gained + a.changed_rules.get(&None).map_or(0, |c| c.lost), lost.lost);
    assert!(a.score(1000.0) < report.table.score(1000.0));

    // the command line: text side by side, and JSON
    let out = Command::new(env!("CARGO_BIN_EXE_clef"))
        .arg("replay")
        .arg(&snaps)
        .arg("--table")
        .arg(&table)
        .arg("--against")
        .arg(&candidate)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("correctness") && text.contains("score") && text.contains("rule_001"), "{text}");
    assert!(text.contains("rules whose outcomes changed with risk"), "{text}");
}

fn replay_json(args: &[&std::ffi::OsStr]) -> Json {
    let out = Command::new(env!("CARGO_BIN_EXE_clef")).arg("replay").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_json_report_has_the_spec_fields_and_other_tables_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let table = write_table(dir.path(), "risk", &risk_source());
    let snaps = dir.path().join("snapshots");
    record(&snaps, &table, 500, Compress::Zstd);
    // snapshots of another table in the same folder
    let other_path = Path::new(ROOT).join("tables/decision_table.json");
    let other = Table::load(&other_path, &Limits::default()).unwrap();
    let cfg = SnapshotsConfig { enabled: true, dir: snaps.clone(), compress: Compress::None, ..Default::default() };
    let rec = Recorder::start(&cfg).unwrap();
    for _ in 0..40 {
        let input = br#"{"user_tier": "premium", "country_code": "JP"}"#;
        let d = other.decide(input, false).unwrap();
        rec.record(&Event::new(&other, &d, input));
    }
    rec.shutdown();
    let v =
        replay_json(&[snaps.as_os_str(), "--table".as_ref(), table.as_os_str(), "--sla-us".as_ref(), "100".as_ref()]);
    for key in [
        "decisions",
        "correctness",
        "latency_p50_ns",
        "latency_p99_ns",
        "within_sla",
        "cpu_s_per_million",
        "peak_rss_mb",
        "audit_completeness",
        "score",
        "changed_rules",
    ] {
        assert!(v.get(key).is_some(), "{key} missing: {v}");
    }
    assert_eq!(v["decisions"], 500);
    assert_eq!(v["correctness"], 1.0);
    assert_eq!(v["audit_completeness"], 1.0);
    assert_eq!(v["changed_rules"], serde_json::json!([]));
    assert_eq!(v["read"]["other_tables"], 40);
    assert_eq!(v["sla_us"], 100.0);
    let score = v["score"].as_f64().unwrap();
    let parts = 50.0 * v["correctness"].as_f64().unwrap()
        + 25.0 * v["within_sla"].as_f64().unwrap()
        + 15.0 * v["cost"].as_f64().unwrap()
        + 10.0 * v["audit_completeness"].as_f64().unwrap();
    assert!((score - parts).abs() < 1e-4, "{score} vs {parts}");
    assert!(v["latency_p99_ns"].as_u64().unwrap() >= v["latency_p50_ns"].as_u64().unwrap());

    // --any-table replays the other table's snapshots too (through risk: they differ)
    let v = replay_json(&[snaps.as_os_str(), "--table".as_ref(), table.as_os_str(), "--any-table".as_ref()]);
    assert_eq!(v["decisions"], 540);
    assert!(v["correctness"].as_f64().unwrap() < 1.0);

    // an `expected` label wins over the recorded action
    let labelled = dir.path().join("labelled.ndjson");
    let first = std::fs::read_dir(&snaps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "ndjson"))
        .unwrap();
    let line = std::fs::read_to_string(first).unwrap().lines().next().unwrap().to_string();
    let mut rec: Json = serde_json::from_str(&line).unwrap();
    rec["table"] = "risk".into();
    rec["expected"] = serde_json::json!({"risk_level": "surely not"});
    std::fs::write(&labelled, format!("{rec}\n")).unwrap();
    let v = replay_json(&[labelled.as_os_str(), "--table".as_ref(), table.as_os_str()]);
    assert_eq!((v["decisions"].as_u64(), v["correctness"].as_f64()), (Some(1), Some(0.0)));

    // no snapshot of the table: exit 1, said on stderr
    let out = Command::new(env!("CARGO_BIN_EXE_clef"))
        .args(["replay", "--table"])
        .arg(Path::new(ROOT).join("tables/stock_quotes.json"))
        .arg(&snaps)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no snapshot of table \"stock_quotes\""));
    // an unreadable table: exit 2
    let out = Command::new(env!("CARGO_BIN_EXE_clef"))
        .args(["replay", "--table", "/nonexistent.json"])
        .arg(&snaps)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn replay_streams_a_large_file_in_small_memory() {
    // ~120 MB of snapshots (plain, so that their size on disk is their size in memory),
    // one torn line at the end
    let dir = tempfile::tempdir().unwrap();
    let table_path = write_table(dir.path(), "risk", &risk_source());
    let table = Table::load(&table_path, &Limits::default()).unwrap();
    let rec_dir = dir.path().join("one");
    let cfg = SnapshotsConfig { enabled: true, dir: rec_dir.clone(), compress: Compress::None, ..Default::default() };
    let pad = "n".repeat(2000);
    let rec = Recorder::start(&cfg).unwrap();
    for input in inputs(1000) {
        let input = input.replacen('{', &format!(r#"{{"note": "{pad}", "#), 1);
        let d = table.decide(input.as_bytes(), false).unwrap();
        let mut ev = Event::new(&table, &d, input.as_bytes());
        ev.timestamp = SystemTime::now();
        while rec.record(&ev).status == Status::Dropped {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    rec.shutdown();
    let one: Vec<u8> =
        std::fs::read_dir(&rec_dir).unwrap().flat_map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    let big = dir.path().join("big.ndjson");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
    let copies = 120_000_000 / one.len() + 1;
    for _ in 0..copies {
        f.write_all(&one).unwrap();
    }
    f.write_all(&one[..one.len() / 3]).unwrap();
    f.flush().unwrap();
    drop(f);
    let size = std::fs::metadata(&big).unwrap().len();
    let v = replay_json(&[big.as_os_str(), "--table".as_ref(), table_path.as_os_str()]);
    assert_eq!(v["decisions"].as_u64().unwrap(), copies as u64 * 1000 + 333, "{v}");
    assert_eq!(v["read"]["torn_tails"], 1);
    assert_eq!(v["correctness"], 1.0);
    let rss = v["peak_rss_mb"].as_f64().unwrap();
    eprintln!("replayed {} MB: peak RSS {rss:.1} MiB, {} snapshots/s", size >> 20, v["read"]["per_second"]);
    assert!(rss < 64.0, "peak RSS {rss} MiB for a {} MiB file", size >> 20);
}

#[test]
fn a_yaml_rule_set_replays_with_the_rules_switched_off_when_it_decided() {
    // A rule set has no Jev source to rebuild: the kill switches apply to the compiled table,
    // as the server applies them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.yaml");
    std::fs::write(
        &path,
        "rules:\n  - id: big\n    conditions:\n      - {field: x, operator: gt, value: 10}\n    action: {a: big}\n  \
         - id: any\n    action: {a: any}\n",
    )
    .unwrap();
    let limits = Limits::default();
    let table = Table::load(&path, &limits).unwrap();
    let (switched, missing) = table.with_switched_off(&["big".to_string()].into_iter().collect());
    assert!(missing.is_empty());
    assert_eq!(switched.switched_off_ids(), ["big"]);
    let snaps = dir.path().join("snapshots");
    let cfg = SnapshotsConfig { enabled: true, dir: snaps.clone(), flush_ms: 20, ..Default::default() };
    let rec = Recorder::start(&cfg).unwrap();
    let mut differ = 0;
    for i in 0..200 {
        let input = format!(r#"{{"x": {}}}"#, i % 30);
        let decider = if i % 2 == 0 { &switched } else { &table };
        let d = decider.decide(input.as_bytes(), false).unwrap();
        differ += usize::from(d.rule != table.decide(input.as_bytes(), false).unwrap().rule);
        // Event::new takes the switches from the table that decided
        let ev = Event::new(decider, &d, input.as_bytes());
        while rec.record(&ev).status == Status::Dropped {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    rec.shutdown();
    assert!(differ > 20, "the data must depend on the switch: {differ}");
    let report = replay::run(&[snaps], &options(&path)).unwrap();
    let t = &report.table;
    assert_eq!((t.decisions, t.correct, t.unapplied), (200, 200, 0), "{:#?}", t.changed_rules);
}

/// A zstd frame of `blocks` RLE blocks of 128 KiB of `byte` each: a few bytes per block, so
/// 8,192 blocks (1 GiB decoded) take 32 KB — the bomb of the issue. `window_log` is what its
/// header asks the decoder for; `declared` writes the decoded size in the header.
fn zstd_bomb(blocks: u32, byte: u8, window_log: u8, declared: bool) -> Vec<u8> {
    const BLOCK: u32 = 128 << 10;
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD];
    // Frame_Header_Descriptor: an 8-byte content size (flag 3) or none (flag 0), not a single
    // segment (so a Window_Descriptor follows), no checksum, no dictionary
    out.push(if declared { 0b1100_0000 } else { 0 });
    out.push((window_log - 10) << 3);
    if declared {
        out.extend_from_slice(&(u64::from(blocks) * u64::from(BLOCK)).to_le_bytes());
    }
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = last | (1 << 1) | (BLOCK << 3); // Block_Type 1: RLE
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(byte);
    }
    out
}

#[test]
fn hostile_snapshot_files_are_skipped_and_counted_in_bounded_memory() {
    // Before: a 33 KB zstd bomb cost `clef replay` 276 MB (the decoder's default window of
    // 128 MiB, and the decoded frame grown to twice 64 MiB), counted as "damaged".
    let dir = tempfile::tempdir().unwrap();
    let table_path = write_table(dir.path(), "risk", &risk_source());
    let good = dir.path().join("good");
    record(&good, &table_path, 200, Compress::Zstd);
    let cases: [(&str, Vec<u8>); 4] = [
        // a window of 128 MiB asked for (as `zstd --ultra -22` or `--long` make): refused
        ("window.ndjson.zst", zstd_bomb(8192, b'x', 27, false)),
        // 1 GiB in one line, its size not declared: decoded up to the cap, then skipped
        ("undeclared.ndjson.zst", zstd_bomb(8192, b'x', 20, false)),
        // 1 GiB declared in the header: skipped unread
        ("declared.ndjson.zst", zstd_bomb(8192, b'x', 20, true)),
        // a plain file whose first line is 80 MiB long
        ("long-line.ndjson", {
            let mut f = vec![b'x'; 80 << 20];
            f.push(b'\n');
            f
        }),
    ];
    for (name, bytes) in &cases {
        let case = dir.path().join(name.split('.').next().unwrap());
        std::fs::create_dir(&case).unwrap();
        for seg in std::fs::read_dir(&good).unwrap() {
            let seg = seg.unwrap().path();
            std::fs::copy(&seg, case.join(seg.file_name().unwrap())).unwrap();
        }
        // named to be read first
        std::fs::write(case.join(format!("a-{name}")), bytes).unwrap();
        let started = std::time::Instant::now();
        let v = replay_json(&[case.as_os_str(), "--table".as_ref(), table_path.as_os_str()]);
        let took = started.elapsed();
        let rss = v["peak_rss_mb"].as_f64().unwrap();
        eprintln!("{name} ({} bytes): peak RSS {rss:.1} MiB in {took:?}; read {}", bytes.len(), v["read"]);
        assert_eq!(v["decisions"], 200, "the good snapshots after it are replayed: {v}");
        assert_eq!((v["read"]["oversized"].as_u64(), v["read"]["damaged"].as_u64()), (Some(1), Some(0)), "{name}: {v}");
        assert!(rss < 100.0, "{name}: peak RSS {rss} MiB");
        assert!(took < Duration::from_secs(60), "{name}: {took:?}");
    }
    // the text report says what was skipped and why
    let out = Command::new(env!("CARGO_BIN_EXE_clef"))
        .arg("replay")
        .arg(dir.path().join("window"))
        .arg("--table")
        .arg(&table_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("1 line or frame too large to hold"), "{text}");
}
