//! `clef bench TABLE INPUT [-n N] [--json] [--explain]`: how fast is this table on this box?
//!
//! Each decision is timed on its own (input parsing included) after a
//! warm-up; the cost of reading the clock is measured and subtracted.

use crate::server::errors::ApiError as _;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use crate::table::{Limits, Table};

pub fn run(table_path: &Path, input_path: &Path, n: usize, json: bool, explain: bool) -> i32 {
    let table = match Table::load(table_path, &Limits::default()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let body = match std::fs::read(input_path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", input_path.display());
            return 2;
        }
    };
    if let Err(e) = table.decide(&body, explain) {
        eprintln!("error: {}: {}: {e}", e.error_code().as_str(), input_path.display());
        return 2;
    }
    let n = n.max(1);
    for _ in 0..(n / 10).clamp(100, 100_000) {
        let _ = black_box(table.decide(black_box(&body), explain));
    }
    let clock = clock_overhead_ns();
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        let _ = black_box(table.decide(black_box(&body), explain));
        samples.push((t0.elapsed().as_nanos() as f64 - clock).max(0.0));
    }
    let total = started.elapsed();
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples.get((samples.len() as f64 * q) as usize).or(samples.last()).copied().unwrap_or(0.0);
    let (median, p99) = (at(0.5), at(0.99));
    let per_second = n as f64 / total.as_secs_f64();
    let compile_ms = table.compile_time.as_secs_f64() * 1e3;
    if json {
        outln!(
            "{{\"median_ns\":{:.0},\"p99_ns\":{:.0},\"per_second\":{:.0},\"compile_ms\":{:.3},\"decisions\":{n},\"rules\":{}}}",
            median,
            p99,
            per_second,
            compile_ms,
            table.engine.outcome_count()
        );
    } else {
        outln!("table:      {} ({})", table.name, table.engine.summary());
        outln!("compile:    {compile_ms:.2} ms");
        let traced = if explain { ", with a trace" } else { "" };
        outln!("decisions:  {n} (input parsing included{traced}, one core)");
        outln!("median:     {}", human_ns(median));
        outln!("p99:        {}", human_ns(p99));
        outln!("per second: {per_second:.0} decisions per core");
    }
    0
}

fn clock_overhead_ns() -> f64 {
    let mut v: Vec<f64> = (0..1001)
        .map(|_| {
            let t = Instant::now();
            black_box(t.elapsed().as_nanos() as f64)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}
