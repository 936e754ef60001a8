//! Engine benchmarks (issue #2 targets), on the shared workload:
//! `python3 ../shared/bench/workload.py --rules N [--mix first|spread]` (or
//! `$CLEF_WORKLOAD_PY`), and `benches/chat_workload.py` for chat moderation.
//!
//! Run: `cargo bench --bench engine` (`-- flash` for the flash table only). Every decision
//! includes parsing the input bytes, except `flash/lookup/*`, which starts from the parsed input.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use bumpalo::Bump;
use clef::expr::eval::{self, Ctx};
use clef::expr::{Env, Expression};
use clef::table::{Engine, Limits, Table};
use criterion::{criterion_group, criterion_main, Criterion};

fn workload(script: &Path, args: &[&str], name: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("clef-bench-{name}"));
    let status = Command::new("python3")
        .arg(script)
        .args(args)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", script.display()));
    assert!(status.success(), "{} failed", script.display());
    out
}

fn shared_workload(rules: usize, mix: &str) -> PathBuf {
    let script = std::env::var_os("CLEF_WORKLOAD_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench/workload.py"));
    workload(&script, &["--rules", &rules.to_string(), "--mix", mix], &format!("{mix}-{rules}"))
}

fn load(dir: &Path) -> (Table, Vec<u8>) {
    let table = Table::load(&dir.join("table.json"), &Limits::default()).expect("workload table loads");
    let input = std::fs::read(dir.join("input.json")).expect("workload input");
    (table, input)
}

fn decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    for (mix, rules) in [("first", 500), ("first", 10_000), ("spread", 500), ("spread", 2_000)] {
        let dir = shared_workload(rules, mix);
        let (table, input) = load(&dir);
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        let d = table.decide(&input, false).unwrap();
        assert_eq!(
            table.outcome_id(&d).as_deref(),
            expected["matched_rule_id"].as_str(),
            "the workload's last rule must match"
        );
        group.bench_function(format!("{mix}-{rules}"), |b| b.iter(|| table.decide(black_box(&input), false)));
    }
    let chat = workload(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/chat_workload.py"),
        &["--rules", "500"],
        "chat-500",
    );
    let (table, input) = load(&chat);
    assert!(table.decide(&input, false).unwrap().rule == Some(499), "the chat workload's last rule must match");
    group.bench_function("chat-moderation-500", |b| b.iter(|| table.decide(black_box(&input), false)));
    group.finish();
}

/// The last rule's 5-term condition, once the input is in slots.
fn condition(c: &mut Criterion) {
    let dir = shared_workload(500, "first");
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let src = expected["last_condition"].as_str().unwrap();
    let expr = Expression::compile(src, &Env::default(), true).unwrap();
    let program = expr.program();
    let input = std::fs::read(dir.join("input.json")).unwrap();
    clef::input::with_parsed(&input, 128, |root| {
        let arena = Bump::new();
        let mut cx = Ctx::with_slots(program, &arena, program.fill_slots(&root));
        let node = &program.exprs[0];
        assert_eq!(eval::eval_condition(node, &mut cx), Ok(true));
        c.bench_function("condition/last-rule-5-terms", |b| b.iter(|| eval::eval_condition(black_box(node), &mut cx)));
    })
    .unwrap();
}

/// The example flash table: a decision from the parsed input (every dimension bucketed, one
/// cell read), and `decide` from the input's bytes (parsing included), on each sample.
fn flash(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = Table::load(&root.join("tables/edge_routing.flash.json"), &Limits::default()).unwrap();
    let Engine::Flash(flash) = &table.engine else { panic!("edge_routing is a flash table") };
    let mut group = c.benchmark_group("flash");
    for sample in ["mobile_medium", "desktop_low", "unknown_device"] {
        let input = std::fs::read(root.join(format!("tables/samples/edge_routing.{sample}.json"))).unwrap();
        clef::input::with_parsed(&input, 128, |parsed| {
            group.bench_function(format!("lookup/{sample}"), |b| b.iter(|| flash.decide(black_box(&parsed), false)));
        })
        .unwrap();
        group.bench_function(format!("decide/{sample}"), |b| b.iter(|| table.decide(black_box(&input), false)));
    }
    group.finish();
}

fn compile(c: &mut Criterion) {
    let dir = shared_workload(500, "first");
    let bytes = std::fs::read(dir.join("table.json")).unwrap();
    let path = dir.join("table.json");
    c.bench_function("compile/first-500", |b| {
        b.iter(|| Table::from_bytes(&path, black_box(&bytes), &Limits::default()).unwrap())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(4));
    targets = decide, condition, flash, compile
}
criterion_main!(benches);
