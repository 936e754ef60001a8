//! Engine benchmarks (issue #2 targets), on the shared workload:
//! `python3 ../shared/bench/workload.py --rules N [--mix first|spread]` (or
//! `$CLEF_WORKLOAD_PY`), and `benches/chat_workload.py` for chat moderation.
//!
//! Run: `cargo bench --bench engine` (`-- ruleset` for the YAML rule set against its Jev twin,
//! `-- flash` for the flash table). Every decision includes parsing the input bytes, except
//! `flash/lookup/*`, which starts from the parsed input.

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

/// The same `n` rules as a YAML rule set (`conditions:` entries) and as a Jev table (conditions
/// written by hand), and an input only the last rule matches.
fn twin_tables(n: usize) -> (String, String, String) {
    let mut yaml = String::from("default: {route: default}\nrules:\n");
    let mut jev = Vec::new();
    for i in 0..n {
        yaml.push_str(&format!(
            "  - id: r{i}\n    conditions:\n      - {{field: user.tier, operator: eq, value: t{t}}}\n      \
             - {{field: amount, operator: gt, value: {i}}}\n      \
             - {{field: headers.user-agent, operator: contains, value: Mobile}}\n      \
             - {{field: country, operator: in, value: [CN, HK, c{i}]}}\n    action: {{route: r{i}, ttl: 15}}\n",
            t = i % 50
        ));
        jev.push(serde_json::json!({
            "id": format!("r{i}"),
            "condition": format!(
                "user.tier == \"t{}\" && amount > {i} && headers[\"user-agent\"] contains \"Mobile\" && country in [\"CN\", \"HK\", \"c{i}\"]",
                i % 50
            ),
            "action": {"route": format!("r{i}"), "ttl": 15},
        }));
    }
    let jev = serde_json::json!({"default": {"route": "default"}, "rules": jev}).to_string();
    let input = serde_json::json!({
        "user": {"tier": format!("t{}", (n - 1) % 50)},
        "amount": n,
        "headers": {"user-agent": "Mozilla/5.0 (iPhone) Mobile/15E148"},
        "country": format!("c{}", n - 1),
    })
    .to_string();
    (yaml, jev, input)
}

/// A rule set against the equivalent Jev table, same rules, same input, in one run.
fn ruleset(c: &mut Criterion) {
    let mut group = c.benchmark_group("ruleset");
    for n in [20, 500] {
        let (yaml, jev, input) = twin_tables(n);
        let rule_set = Table::from_bytes(Path::new("twin.yaml"), yaml.as_bytes(), &Limits::default()).unwrap();
        let table = Table::from_bytes(Path::new("twin.json"), jev.as_bytes(), &Limits::default()).unwrap();
        let (a, b) =
            (rule_set.decide(input.as_bytes(), false).unwrap(), table.decide(input.as_bytes(), false).unwrap());
        assert_eq!((a.rule, b.rule), (Some(n - 1), Some(n - 1)), "the last rule of both must match");
        let input = input.into_bytes();
        group.bench_function(format!("jev-{n}"), |b| b.iter(|| table.decide(black_box(&input), false)));
        group.bench_function(format!("yaml-{n}"), |b| b.iter(|| rule_set.decide(black_box(&input), false)));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(4));
    targets = decide, condition, ruleset, flash, compile
}
criterion_main!(benches);
