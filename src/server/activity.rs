//! `GET /activity` (admin listener): what each table decided over the last minutes — decisions
//! per second, outcomes, the rules that matched most and the rules that warned — for the status
//! page (`GET /`) and for scripts.
//!
//! The figures are differences of the tables' own counters ([`TableStats`]), which the workers
//! count into with relaxed atomic adds on their own cache lines: a sample reads them with
//! relaxed loads, so taking one costs the decision path nothing and shares no lock with it. The
//! load thread ([`Activity::tick`], once a second) keeps a sample every [`SAMPLE_EVERY`] for
//! [`WINDOW`]; a request compares the counters now with the oldest sample of the window. The
//! samples' lock is taken by that thread and by admin requests only.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::App;
use crate::expr::json::{write_json_float, write_json_string};
use crate::http1::Response;
use crate::metrics::{OutcomeCounts, TableStats};
use crate::registry::Tables;

/// How often a sample of the counters is kept.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// How far back `GET /activity` looks: the figures are over the last five minutes (less just
/// after the server started or a table's rules changed).
pub const WINDOW: Duration = Duration::from_secs(300);
/// The most rules listed under `top_rules` and `warning_rules`.
pub const TOP_RULES: usize = 10;

/// One table's counters at a sample.
struct TableSample {
    name: String,
    /// the counters read: a reload that changes the rule ids starts new ones
    stats: Arc<TableStats>,
    counts: OutcomeCounts,
}

/// The counters of every table at one moment.
struct Sample {
    at: Instant,
    tables: Vec<TableSample>,
}

impl Sample {
    fn take(tables: &Tables) -> Sample {
        let tables = tables
            .entries
            .iter()
            .filter(|(_, entry)| entry.current.is_some())
            .map(|(name, entry)| TableSample {
                name: name.clone(),
                stats: entry.stats.clone(),
                counts: entry.stats.outcome_counts(),
            })
            .collect();
        Sample { at: Instant::now(), tables }
    }

    fn find(&self, name: &str, stats: &Arc<TableStats>) -> Option<&TableSample> {
        self.tables.iter().find(|t| t.name == name && Arc::ptr_eq(&t.stats, stats))
    }
}

/// The samples of the last [`WINDOW`], oldest first.
pub struct Activity {
    samples: Mutex<VecDeque<Sample>>,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity").field("samples", &self.samples.lock().len()).finish()
    }
}

impl Activity {
    /// Starts with a sample of `tables` as they are loaded (every counter zero).
    pub fn new(tables: &Tables) -> Activity {
        Activity { samples: Mutex::new(VecDeque::from([Sample::take(tables)])) }
    }

    /// Keeps a sample when the newest is [`SAMPLE_EVERY`] old, and forgets those no longer
    /// needed: the window's oldest sample is kept as the base of its differences.
    pub fn tick(&self, tables: &Tables) {
        let mut samples = self.samples.lock();
        if samples.back().is_some_and(|s| s.at.elapsed() < SAMPLE_EVERY) {
            return;
        }
        samples.push_back(Sample::take(tables));
        while samples.get(1).is_some_and(|s| s.at.elapsed() >= WINDOW) {
            samples.pop_front();
        }
    }

    /// What each table of `tables` decided since the oldest sample that counted it.
    fn report(&self, tables: &Tables) -> (f64, Vec<TableActivity>) {
        let now = Sample::take(tables);
        let samples = self.samples.lock();
        let window = samples.front().map_or(0.0, |s| now.at.duration_since(s.at).as_secs_f64());
        let report = now
            .tables
            .into_iter()
            .map(|t| {
                // The oldest sample with these counters; when none has them (the rules changed
                // since the last sample), they started at zero after the newest sample without them.
                let base = samples.iter().find_map(|s| s.find(&t.name, &t.stats).map(|b| (s.at, Some(&b.counts))));
                let (since, base) = base.unwrap_or_else(|| {
                    let newest_without = samples.iter().rev().find(|s| s.find(&t.name, &t.stats).is_none());
                    (newest_without.map_or(now.at, |s| s.at), None)
                });
                TableActivity::between(t, base, now.at.duration_since(since).as_secs_f64())
            })
            .collect();
        (window, report)
    }
}

/// One table's figures over its window.
struct TableActivity {
    name: String,
    seconds: f64,
    matched: u64,
    no_match: u64,
    invalid: u64,
    /// rule id and count, most first
    top_rules: Vec<(String, u64)>,
    warning_rules: Vec<(String, u64)>,
    warnings: u64,
}

impl TableActivity {
    fn between(now: TableSample, base: Option<&OutcomeCounts>, seconds: f64) -> TableActivity {
        let zero = OutcomeCounts::default();
        let base = base.unwrap_or(&zero);
        let diff = |now: &[u64], base: &[u64]| -> Vec<u64> {
            now.iter().enumerate().map(|(i, n)| n.saturating_sub(base.get(i).copied().unwrap_or(0))).collect()
        };
        let matched = diff(&now.counts.matched, &base.matched);
        let warned = diff(&now.counts.warnings, &base.warnings);
        let top = |counts: &[u64]| -> Vec<(String, u64)> {
            let mut ranked: Vec<(String, u64)> = counts
                .iter()
                .zip(now.stats.rule_ids())
                .filter(|(n, _)| **n > 0)
                .map(|(n, id)| (id.clone(), *n))
                .collect();
            ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            ranked.truncate(TOP_RULES);
            ranked
        };
        TableActivity {
            seconds,
            matched: matched.iter().sum(),
            no_match: now.counts.no_match.saturating_sub(base.no_match),
            invalid: now.counts.invalid.saturating_sub(base.invalid),
            top_rules: top(&matched),
            warning_rules: top(&warned),
            warnings: warned.iter().sum(),
            name: now.name,
        }
    }

    fn write(&self, tuned: bool, b: &mut String) {
        let decisions = self.matched + self.no_match + self.invalid;
        b.push_str("{\"name\":");
        write_json_string(&self.name, b);
        let _ = write!(b, ",\"tuned\":{tuned},\"seconds\":");
        write_json_float(self.seconds, b);
        let _ = write!(b, ",\"decisions\":{decisions},\"decisions_per_second\":");
        let rate = if self.seconds > 0.0 { decisions as f64 / self.seconds } else { 0.0 };
        write_json_float((rate * 1000.0).round() / 1000.0, b);
        let _ = write!(
            b,
            ",\"matched\":{},\"default\":{},\"invalid_input\":{},\"warnings\":{}",
            self.matched, self.no_match, self.invalid, self.warnings
        );
        write_ranked("top_rules", "hits", &self.top_rules, b);
        write_ranked("warning_rules", "warnings", &self.warning_rules, b);
        b.push('}');
    }
}

fn write_ranked(key: &str, count: &str, ranked: &[(String, u64)], b: &mut String) {
    let _ = write!(b, ",\"{key}\":[");
    for (i, (id, n)) in ranked.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        b.push_str("{\"rule_id\":");
        write_json_string(id, b);
        let _ = write!(b, ",\"{count}\":{n}}}");
    }
    b.push(']');
}

/// `GET /activity`: every served table's decisions over the last minutes.
pub fn report(app: &App, rsp: &mut Response) {
    let tables = app.registry.served();
    let (window, report) = app.activity.report(&tables);
    drop(tables);
    let tuned: Vec<&str> = app.stages.tuner.as_ref().map(|t| t.table_names().collect()).unwrap_or_default();
    let b = &mut rsp.body;
    b.push_str("{\"window_seconds\":");
    write_json_float(window.round(), b);
    let _ = write!(b, ",\"sample_seconds\":{},\"tables\":[", SAMPLE_EVERY.as_secs());
    for (i, t) in report.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        t.write(tuned.contains(&t.name.as_str()), b);
    }
    b.push_str("]}");
}
