//! `clef replay` (SPEC §8.2): recorded decisions through a table (and optionally a second one),
//! scored.
//!
//! Snapshots stream from the [`SnapshotReader`] in chunks (at most [`CHUNK_RECORDS`] records or
//! [`CHUNK_BYTES`] bytes): a chunk is parsed, then decided by each table in one timed run (the
//! thread's CPU clock around the run, the wall clock around each decision), then judged. Memory
//! stays that of one chunk, one zstd frame and the tables, however large the snapshots are.
//!
//! **Deciding as the server did.** A snapshot records what decided it (see [`super::record`]):
//! the parameter values in force and the rules switched off at that moment. Replay builds the
//! table the server decided with the way the server builds it: the file loaded, the values that
//! differ from the file's applied with [`Table::with_params`] (what a promotion's overlay and a
//! tuning variant do), the rules switched off with [`Table::with_switched_off`] (the kill switch
//! overlay). Every kind of table (Jev, rule set, flash, `.cfb`) then decides through its own
//! engine, templates rendered as when served; no source text is rewritten. The tables built
//! are kept per combination of values and switches (at most [`MAX_VARIANTS`]). Snapshots replayed
//! against the files that served them therefore decide exactly as recorded.
//!
//! A second table (`--against`) is judged as if it had been deployed in the first one's place:
//! with the same switches, and the same promoted or variant values for each parameter whose
//! value its file leaves as the first table's file has it — a parameter the candidate's file
//! changes serves the file's new value, as a promotion gives way to an edited file.
//!
//! The action is compared with the snapshot's `expected` label when it has one, else with the
//! recorded action.
//!
//! **Cost** is the CPU time per decision, measured so that two replays of the same files agree:
//! a sample of the snapshots (up to [`COST_SAMPLE_ITEMS`], drawn evenly over the whole replay
//! with a fixed seed, so every replay of the same files draws the same) is decided round after
//! round, each reading at least [`COST_READING_NS`] of the thread's CPU clock (nanosecond
//! resolution), until [`MIN_COST_CPU_NS`] in all and at least [`MIN_COST_READINGS`] readings;
//! the cost is the least reading per decision among those the thread ran through without being
//! switched out (its wall time no longer than its CPU time): other work on the machine only
//! ever adds to a reading, and most of what it adds comes with a switch. The default budget is what the recorded decisions cost when served, the mean of
//! their recorded `latency_ns`, so that a candidate is judged against what is deployed and the
//! table that recorded the snapshots scores cost 1 on the machine that served them.
//!
//! score = 50·correctness + 25·latency + 15·cost + 10·audit, each in [0, 1]: latency is the
//! share of decisions within the SLA, cost is min(1, budget / CPU time per decision), audit the
//! share of snapshots with every field of SPEC §8.1.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: offline (`clef replay`): every index is checked by the test beside it or into a
// non-empty list; the `expect` is on a value built as an object just above.
#![allow(clippy::indexing_slicing, clippy::expect_used)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value as Json};

use crate::diff::attribute::Attribution;
use crate::diff::TableDiff;
use crate::expr::json::write_json_string;
use crate::expr::{same_json_text, same_value};
use crate::input::InputError;
use crate::server::errors::ApiError as _;
use crate::snapshot::reader::{ReadStats, SnapshotReader};
use crate::snapshot::record::{json_str, RawRecord};
use crate::table::{Decision, Limits, Table};

/// Records per chunk.
pub const CHUNK_RECORDS: usize = 2048;
/// Bytes of snapshot lines per chunk.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Tables built with recorded parameter values and switches, kept per table replayed.
pub const MAX_VARIANTS: usize = 256;
/// The least CPU time spent measuring the cost (see the module doc).
pub const MIN_COST_CPU_NS: u64 = 50_000_000;
/// The least CPU time of one cost reading: short, so that many readings run without the
/// thread being switched out (after which the caches are another program's).
pub const COST_READING_NS: u64 = 250_000;
/// The fewest cost readings.
pub const MIN_COST_READINGS: usize = 20;
/// The most snapshots in the cost sample.
pub const COST_SAMPLE_ITEMS: usize = 4096;
/// Inputs longer than this are left out of the cost sample (its memory stays under 64 MiB).
const COST_SAMPLE_MAX_INPUT: usize = 16 << 10;
/// The longest the cost is measured (a very slow table stops early).
const MAX_COST_WALL: Duration = Duration::from_secs(10);
/// Inputs longer than this are cut in the text report's examples.
const TEXT_INPUT_CHARS: usize = 160;

/// What to replay and how to score it.
#[derive(Clone, Debug)]
pub struct Options {
    /// the table file to replay through
    pub table: PathBuf,
    /// a second table, scored side by side
    pub against: Option<PathBuf>,
    /// replay every snapshot, not only those of the table's name
    pub any_table: bool,
    /// the latency budget per decision, in microseconds
    pub sla_us: f64,
    /// the CPU budget per decision, in microseconds; 0 (the default): what the recorded
    /// decisions cost when served (see [`BudgetBasis`]). The report's options hold the budget
    /// the score used.
    pub cost_budget_us: f64,
    /// example inputs kept per changed rule
    pub examples: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            table: PathBuf::new(),
            against: None,
            any_table: false,
            sla_us: 50_000.0,
            cost_budget_us: 0.0,
            examples: 3,
        }
    }
}

/// A decision whose outcome changed, as an example.
#[derive(Clone, Debug)]
pub struct Example {
    /// the snapshot's id
    pub snapshot_id: String,
    /// its input (raw JSON)
    pub input: String,
    /// the recorded rule (`None`: no rule matched)
    pub recorded_rule: Option<String>,
    /// the recorded action (raw JSON)
    pub recorded_action: String,
    /// the rule now (`None`: no rule matched)
    pub replayed_rule: Option<String>,
    /// the action now (raw JSON), or the error code when the table refused the input
    pub replayed_action: Result<String, &'static str>,
    /// with `--against`, on the second table: the table changes that explain it (empty: none does)
    pub causes: Option<Vec<String>>,
}

/// A rule whose outcomes changed.
#[derive(Clone, Debug, Default)]
pub struct ChangedRule {
    /// decisions this rule took part in that changed (lost + gained, or its action changed)
    pub count: u64,
    /// decisions the rule made when recorded and no longer makes
    pub lost: u64,
    /// decisions the rule makes now and did not make when recorded
    pub gained: u64,
    /// the first few
    pub examples: Vec<Example>,
    /// with `--against`, on the second table: decisions by each table change that explains them
    pub causes: BTreeMap<String, u64>,
    /// with `--against`, on the second table: decisions no table change explains
    pub unexplained: u64,
}

impl ChangedRule {
    /// Counts the causes of one changed decision (`None`: no attribution on this table).
    fn count_causes(&mut self, causes: Option<&[String]>) {
        match causes {
            Some([]) => self.unexplained += 1,
            Some(causes) => causes.iter().for_each(|c| *self.causes.entry(c.clone()).or_default() += 1),
            None => {}
        }
    }
}

/// The figures of one table.
#[derive(Clone, Debug)]
pub struct Scored {
    /// the table's name
    pub table: String,
    /// its version
    pub version: String,
    /// snapshots replayed
    pub decisions: u64,
    /// snapshots with a recorded action or an `expected` label
    pub judged: u64,
    /// of those, decided with the same action
    pub correct: u64,
    /// snapshots whose rule or action changed
    pub changed: u64,
    /// inputs the table refused now (schema, …)
    pub refused: u64,
    /// snapshots whose switched-off rules or params could not be applied
    pub unapplied: u64,
    /// evaluation time per decision (parsing included)
    pub latency: Histogram,
    /// decisions within the SLA
    pub within_sla: u64,
    /// CPU time of the decisions, in nanoseconds: the cost per decision measured on a sample
    /// (see the module doc), times the decisions
    pub cpu_ns: u64,
    /// how many decisions the cost was measured on (the sample, decided round after round)
    pub cost_decisions: u64,
    /// snapshots carrying every field of SPEC §8.1
    pub complete: u64,
    /// by rule id (`None`: no rule matched)
    pub changed_rules: BTreeMap<Option<String>, ChangedRule>,
    /// with `--against`, on the second table: what attributes its changed decisions to the
    /// changes from the first table (the recorded decision stands for the first table's)
    pub attribution: Option<Arc<Attribution>>,
}

/// What `clef replay` found.
#[derive(Clone, Debug)]
pub struct Report {
    /// the table
    pub table: Scored,
    /// the second table, with `--against`
    pub against: Option<Scored>,
    /// what reading met
    pub read: ReadStats,
    /// lines that were not snapshots
    pub unparsable: u64,
    /// snapshots of other tables, not replayed
    pub other_tables: u64,
    /// evaluation latencies as recorded
    pub recorded_latency: Histogram,
    /// the table versions the snapshots were recorded with (the 16 most common … at most)
    pub recorded_versions: BTreeMap<String, u64>,
    /// wall time of the whole replay
    pub wall: Duration,
    /// the process's peak resident memory, in bytes
    pub peak_rss_bytes: u64,
    /// the options, with the cost budget the score used
    pub options: Options,
    /// where the cost budget comes from
    pub cost_budget_basis: BudgetBasis,
    /// with `--against`: what changed from the table to the second one (`None`: tables of
    /// different kinds, which `clef diff` does not compare)
    pub diff: Option<TableDiff>,
}

/// Where the cost budget of a replay comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetBasis {
    /// `--cost-budget-us`
    Given,
    /// what the recorded decisions cost when served: the mean of their `latency_ns`
    Recorded,
    /// no snapshot recorded its latency: what the first table costs now
    Measured,
}

impl BudgetBasis {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            BudgetBasis::Given => "given",
            BudgetBasis::Recorded => "recorded",
            BudgetBasis::Measured => "measured",
        }
    }
}

/// Why a replay could not run.
#[derive(Debug)]
pub enum ReplayError {
    /// a cost budget that is not a number of microseconds above 0
    CostBudget(f64),
    /// a table to replay with does not load
    Table(crate::table::LoadError),
    /// the snapshots cannot be read
    Snapshots(std::io::Error),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::CostBudget(budget) => write!(
                f,
                "the cost budget must be a number of microseconds above 0, not {budget}; leave it out to judge by \
                 what the recorded decisions cost"
            ),
            ReplayError::Table(e) => e.fmt(f),
            ReplayError::Snapshots(e) => write!(f, "cannot read the snapshots: {e}"),
        }
    }
}

impl std::error::Error for ReplayError {}

/// Replays the snapshots in `paths` as `options` say.
pub fn run(paths: &[PathBuf], options: &Options) -> Result<Report, ReplayError> {
    if options.cost_budget_us.is_nan() || options.cost_budget_us < 0.0 {
        return Err(ReplayError::CostBudget(options.cost_budget_us));
    }
    let started = Instant::now();
    let limits = Limits::default();
    let first = Lane::load(&options.table, &limits, None)?;
    let mut lanes = vec![first];
    if let Some(t2) = &options.against {
        let reference = lanes[0].file_values.clone();
        lanes.push(Lane::load(t2, &limits, Some(reference))?);
    }
    let diff = attribute_changes(&mut lanes);
    let mut reader = SnapshotReader::open(paths).map_err(ReplayError::Snapshots)?;
    let name_json = {
        let mut s = String::new();
        write_json_string(&lanes[0].base.name, &mut s);
        s
    };
    let clock = clock_overhead_ns();
    let sla_ns = (options.sla_us * 1000.0).max(0.0) as u64;
    let mut report_extra = Extra::default();
    let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK_BYTES + (64 << 10));
    let mut ends: Vec<usize> = Vec::with_capacity(CHUNK_RECORDS);
    let mut outcomes: Vec<(Result<Decision, InputError>, u64)> = Vec::with_capacity(CHUNK_RECORDS);
    loop {
        chunk.clear();
        ends.clear();
        while ends.len() < CHUNK_RECORDS && chunk.len() < CHUNK_BYTES {
            let Some(line) = reader.next_line() else { break };
            chunk.extend_from_slice(line);
            ends.push(chunk.len());
        }
        if ends.is_empty() {
            break;
        }
        // parse and select
        let mut items: Vec<RawRecord<'_>> = Vec::with_capacity(ends.len());
        let mut start = 0;
        for &end in &ends {
            let line = &chunk[start..end];
            start = end;
            let Ok(rec) = RawRecord::parse(line) else {
                report_extra.unparsable += 1;
                continue;
            };
            if !options.any_table && !same_table(&rec, &name_json, &lanes[0].base.name) {
                report_extra.other_tables += 1;
                continue;
            }
            if rec.input.is_none() {
                report_extra.unparsable += 1;
                continue;
            }
            if let Some(ns) = rec.latency_ns() {
                report_extra.recorded_latency.add(ns);
            }
            if let Some(v) = rec.table_version() {
                report_extra.count_version(&v);
            }
            items.push(rec);
        }
        for lane in lanes.iter_mut() {
            lane.replay_chunk(&items, &mut outcomes, clock, sla_ns, options.examples);
        }
    }
    for lane in lanes.iter_mut() {
        lane.measure_cost();
    }
    let (budget_us, basis) = if options.cost_budget_us > 0.0 {
        (options.cost_budget_us, BudgetBasis::Given)
    } else if !report_extra.recorded_latency.is_empty() {
        (report_extra.recorded_latency.mean() / 1000.0, BudgetBasis::Recorded)
    } else {
        (lanes[0].scored.cpu_s_per_million(), BudgetBasis::Measured)
    };
    let [table, against @ ..] = &mut lanes[..] else { unreachable!("one lane at least") };
    let against = against.first_mut().map(|l| std::mem::replace(&mut l.scored, Scored::new(&l.base)));
    Ok(Report {
        table: std::mem::replace(&mut table.scored, Scored::new(&table.base)),
        against,
        read: reader.stats().clone(),
        unparsable: report_extra.unparsable,
        other_tables: report_extra.other_tables,
        recorded_latency: report_extra.recorded_latency,
        recorded_versions: report_extra.versions,
        wall: started.elapsed(),
        peak_rss_bytes: peak_rss_bytes(),
        options: Options { cost_budget_us: budget_us, ..options.clone() },
        cost_budget_basis: basis,
        diff,
    })
}

/// With a second table: the diff from the first, and the second lane set to attribute its
/// changed decisions to it.
fn attribute_changes(lanes: &mut [Lane]) -> Option<TableDiff> {
    let [table, against] = lanes else { return None };
    let diff = crate::diff::diff(&table.base, &against.base).ok()?;
    against.scored.attribution = Some(Arc::new(Attribution::new(&table.base, &against.base, &diff)));
    Some(diff)
}

#[derive(Default)]
struct Extra {
    unparsable: u64,
    other_tables: u64,
    recorded_latency: Histogram,
    versions: BTreeMap<String, u64>,
}

impl Extra {
    fn count_version(&mut self, v: &str) {
        if let Some(n) = self.versions.get_mut(v) {
            *n += 1;
        } else if self.versions.len() < 16 {
            self.versions.insert(v.to_string(), 1);
        } else {
            *self.versions.entry("other".into()).or_default() += 1;
        }
    }
}

fn same_table(rec: &RawRecord<'_>, name_json: &str, name: &str) -> bool {
    match rec.table {
        Some(raw) if raw.get() == name_json => true,
        Some(raw) if raw.get().contains('\\') => json_str(raw).is_some_and(|n| n == name),
        _ => false,
    }
}

/// A table a snapshot is replayed with, and whether everything it recorded could be applied.
#[derive(Clone)]
struct Built {
    table: Arc<Table>,
    applied: bool,
}

/// One table being replayed.
struct Lane {
    /// the table as its file has it
    base: Arc<Table>,
    /// the parameter values its file declares, by name
    file_values: BTreeMap<String, Json>,
    /// the values of the first table's file (for the first table, its own): recorded values
    /// that differ from them were promoted, or a tuning variant's
    reference_values: BTreeMap<String, Json>,
    /// the first table (the snapshots' own): what cannot be applied to it counts as unapplied
    first: bool,
    /// the tables snapshots were decided with, by their recorded parameter values, then their
    /// switched-off rules (both as the raw JSON recorded)
    built: HashMap<Box<str>, HashMap<Box<str>, Built>>,
    built_count: usize,
    /// the cost sample: inputs with the tables that decided them, drawn evenly (reservoir
    /// sampling with a fixed seed)
    sample: Vec<(Box<[u8]>, Arc<Table>)>,
    /// the snapshots offered to the sample so far
    offered: u64,
    /// the state of the sample's random draws
    draw: u64,
    scored: Scored,
}

/// The parameter values `table` declares (its `params` as written), by name.
fn declared_values(table: &Table) -> BTreeMap<String, Json> {
    match &table.params {
        Some(Json::Object(decls)) => {
            decls.iter().filter_map(|(name, decl)| Some((name.clone(), decl.get("value")?.clone()))).collect()
        }
        _ => BTreeMap::new(),
    }
}

impl Lane {
    /// The lane of the table file at `path`; `reference`: the first table's values, for a
    /// second table.
    fn load(path: &Path, limits: &Limits, reference: Option<BTreeMap<String, Json>>) -> Result<Lane, ReplayError> {
        let table = Table::load(path, limits).map_err(ReplayError::Table)?;
        let file_values = declared_values(&table);
        let scored = Scored::new(&table);
        Ok(Lane {
            first: reference.is_none(),
            reference_values: reference.unwrap_or_else(|| file_values.clone()),
            file_values,
            base: Arc::new(table),
            built: HashMap::new(),
            built_count: 0,
            sample: Vec::new(),
            offered: 0,
            draw: 0x9e37_79b9_7f4a_7c15,
            scored,
        })
    }

    /// The table a snapshot is replayed with: the file's table with the parameter values and
    /// switched-off rules it recorded, built as the server builds it (see the module doc).
    fn table_for(&mut self, rec: &RawRecord<'_>) -> Built {
        let params = rec.params_in_force().map_or("null", RawValue::get);
        let params = if self.base.params_json() == Some(params) { "null" } else { params };
        let disabled = rec.disabled_rules.map_or("[]", RawValue::get);
        let disabled = if disabled == "null" { "[]" } else { disabled };
        if params == "null" && disabled == "[]" {
            return Built { table: self.base.clone(), applied: true };
        }
        if let Some(built) = self.built.get(params).and_then(|by_switches| by_switches.get(disabled)) {
            return built.clone();
        }
        if self.built_count >= MAX_VARIANTS {
            self.built.clear();
            self.built_count = 0;
        }
        let built = self.build(params, rec);
        self.built.entry(params.into()).or_default().insert(disabled.into(), built.clone());
        self.built_count += 1;
        built
    }

    /// The base table with the recorded values `params` (raw JSON) and `rec`'s switches.
    fn build(&self, params: &str, rec: &RawRecord<'_>) -> Built {
        let mut applied = true;
        let mut table = self.base.clone();
        if params != "null" {
            match serde_json::from_str::<BTreeMap<String, Json>>(params) {
                Ok(recorded) => {
                    let mut overrides = BTreeMap::new();
                    for (name, value) in recorded {
                        let Some(reference) = self.reference_values.get(&name) else {
                            // the first table's file does not declare it: not the file that served
                            applied &= !self.first;
                            continue;
                        };
                        let own = self.file_values.get(&name);
                        if !same_value(&value, reference) && own.is_some_and(|own| same_value(own, reference)) {
                            overrides.insert(name, value);
                        }
                    }
                    if !overrides.is_empty() {
                        match self.base.with_params(&overrides) {
                            Ok(t) => table = Arc::new(t),
                            Err(_) => applied = false,
                        }
                    }
                }
                Err(_) => applied = false,
            }
        }
        let disabled = rec.disabled();
        if !disabled.is_empty() {
            let (switched, missing) = table.with_switched_off(&disabled.into_iter().collect());
            // a switch for a rule this table does not have switches nothing off, as in the
            // server; for the snapshots' own table it means another file decided them
            applied &= !self.first || missing.is_empty();
            table = Arc::new(switched);
        }
        Built { table, applied }
    }

    fn replay_chunk(
        &mut self,
        items: &[RawRecord<'_>],
        outcomes: &mut Vec<(Result<Decision, InputError>, u64)>,
        clock_ns: u64,
        sla_ns: u64,
        examples: usize,
    ) {
        // the tables first: building one is not the decisions' time
        let mut tables = Vec::with_capacity(items.len());
        for rec in items {
            let built = self.table_for(rec);
            if !built.applied {
                self.scored.unapplied += 1;
            }
            tables.push(built.table);
        }
        outcomes.clear();
        for (rec, table) in items.iter().zip(&tables) {
            let input = rec.input.map_or(&b"null"[..], |i| i.get().as_bytes());
            let t0 = Instant::now();
            let d = table.decide(input, false);
            let ns = (t0.elapsed().as_nanos() as u64).saturating_sub(clock_ns);
            outcomes.push((d, ns));
        }
        let s = &mut self.scored;
        for ((rec, table), (outcome, ns)) in items.iter().zip(&tables).zip(outcomes.iter()) {
            s.decisions += 1;
            s.latency.add(*ns);
            if *ns <= sla_ns {
                s.within_sla += 1;
            }
            if rec.is_complete() {
                s.complete += 1;
            }
            s.judge(rec, table, outcome, examples);
        }
        for (rec, table) in items.iter().zip(tables) {
            let Some(input) = rec.input.map(|i| i.get().as_bytes()) else { continue };
            self.offer_sample(input, table);
        }
    }

    /// Offers one snapshot to the cost sample: the first [`COST_SAMPLE_ITEMS`] are taken, then
    /// each of the `n` offered so far replaces one with probability `COST_SAMPLE_ITEMS / n`
    /// (reservoir sampling), so the sample is spread evenly over the whole replay.
    fn offer_sample(&mut self, input: &[u8], table: Arc<Table>) {
        if input.len() > COST_SAMPLE_MAX_INPUT {
            return;
        }
        self.offered += 1;
        if self.sample.len() < COST_SAMPLE_ITEMS {
            self.sample.push((input.into(), table));
            return;
        }
        // splitmix64: the same draws in every replay
        self.draw = self.draw.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.draw;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let at = (z % self.offered) as usize;
        if let Some(slot) = self.sample.get_mut(at) {
            *slot = (input.into(), table);
        }
    }

    /// Measures the cost per decision on the sample (see the module doc) and sets the CPU
    /// figures from it.
    fn measure_cost(&mut self) {
        let sample = std::mem::take(&mut self.sample);
        if sample.is_empty() {
            return;
        }
        let round = || {
            for (input, table) in &sample {
                let _ = std::hint::black_box(table.decide(std::hint::black_box(input), false));
            }
        };
        let cpu0 = thread_cpu_ns();
        round();
        let first = thread_cpu_ns().saturating_sub(cpu0).max(1);
        let rounds = COST_READING_NS.div_ceil(first).clamp(1, 1 << 20);
        let per_reading = rounds * sample.len() as u64;
        let started = Instant::now();
        let (mut spent, mut readings) = (0u64, 0usize);
        // the least of the readings run through without a switch, and of all of them
        let (mut least_whole, mut least) = (f64::INFINITY, f64::INFINITY);
        while (spent < MIN_COST_CPU_NS || readings < MIN_COST_READINGS) && started.elapsed() < MAX_COST_WALL {
            let (wall0, cpu0) = (Instant::now(), thread_cpu_ns());
            for _ in 0..rounds {
                round();
            }
            let cpu = thread_cpu_ns().saturating_sub(cpu0);
            let wall = wall0.elapsed().as_nanos() as u64;
            spent += cpu;
            readings += 1;
            let per_decision = cpu as f64 / per_reading as f64;
            least = least.min(per_decision);
            // a switch shows as wall time the thread did not run (a few µs of slack for the clocks)
            if wall <= cpu + cpu / 50 + 5_000 {
                least_whole = least_whole.min(per_decision);
            }
        }
        let least = if least_whole.is_finite() { least_whole } else { least };
        let s = &mut self.scored;
        s.cost_decisions = readings as u64 * per_reading;
        if least.is_finite() {
            s.cpu_ns = (least * s.decisions as f64).round() as u64;
        }
    }
}

impl Scored {
    fn new(table: &Table) -> Scored {
        Scored {
            table: table.name.clone(),
            version: table.version.clone(),
            decisions: 0,
            judged: 0,
            correct: 0,
            changed: 0,
            refused: 0,
            unapplied: 0,
            latency: Histogram::default(),
            within_sla: 0,
            cpu_ns: 0,
            cost_decisions: 0,
            complete: 0,
            changed_rules: BTreeMap::new(),
            attribution: None,
        }
    }

    fn judge(&mut self, rec: &RawRecord<'_>, table: &Table, outcome: &Result<Decision, InputError>, examples: usize) {
        let (now_rule_json, now_action) = match outcome {
            Ok(d) => (Some(d.rule.map_or("null", |r| table.engine.outcome_id_json(r))), Ok(table.action_json(d))),
            Err(e) => (None, Err(e.error_code().as_str())),
        };
        if outcome.is_err() {
            self.refused += 1;
        }
        let recorded_action = rec.action.map(RawValue::get);
        let target = rec.expected.map(RawValue::get).filter(|e| *e != "null").or(recorded_action);
        if let Some(target) = target {
            self.judged += 1;
            if now_action.as_ref().is_ok_and(|a| same_json_text(target, a)) {
                self.correct += 1;
            }
        }
        let recorded_rule_json = rec.rule_id.map_or("null", RawValue::get);
        let rule_changed = now_rule_json.is_none_or(|now| !same_id(recorded_rule_json, now));
        let action_changed = match (recorded_action, &now_action) {
            (Some(was), Ok(now)) => !same_json_text(was, now),
            (None, Ok(_)) => false,
            (_, Err(_)) => true,
        };
        if !rule_changed && !action_changed {
            return;
        }
        self.changed += 1;
        let was = rec.rule().map(Cow::into_owned);
        let now = match outcome {
            Ok(d) => table.outcome_id(d),
            Err(_) => None,
        };
        let causes = self.attribution.as_ref().map(|a| a.causes(was.as_deref(), now.as_deref(), outcome.is_err()));
        let example = || Example {
            snapshot_id: rec.id.and_then(json_str).map(Cow::into_owned).unwrap_or_default(),
            input: rec.input.map_or("null", RawValue::get).to_string(),
            recorded_rule: was.clone(),
            recorded_action: recorded_action.unwrap_or("null").to_string(),
            replayed_rule: now.clone(),
            replayed_action: now_action.map(str::to_string),
            causes: causes.clone(),
        };
        let mut note = |rule: Option<String>, lost: bool, gained: bool| {
            let entry = self.changed_rules.entry(rule).or_default();
            entry.count += 1;
            entry.lost += u64::from(lost);
            entry.gained += u64::from(gained);
            entry.count_causes(causes.as_deref());
            if entry.examples.len() < examples {
                entry.examples.push(example());
            }
        };
        if rule_changed {
            note(was.clone(), true, false);
            if outcome.is_ok() {
                note(now.clone(), false, true);
            }
        } else {
            note(was.clone(), false, false);
        }
    }

    /// Share of judged decisions with the expected action.
    pub fn correctness(&self) -> f64 {
        ratio(self.correct, self.judged)
    }

    /// Share of decisions within the SLA.
    pub fn within_sla_share(&self) -> f64 {
        ratio(self.within_sla, self.decisions)
    }

    /// CPU seconds per million decisions.
    pub fn cpu_s_per_million(&self) -> f64 {
        if self.decisions == 0 {
            return 0.0;
        }
        self.cpu_ns as f64 / self.decisions as f64 * 1e6 / 1e9
    }

    /// min(1, budget / CPU time per decision).
    pub fn cost(&self, budget_us: f64) -> f64 {
        let per_decision_us = self.cpu_s_per_million(); // s per million = µs per decision
        if per_decision_us <= 0.0 {
            return 1.0;
        }
        (budget_us / per_decision_us).min(1.0)
    }

    /// Share of snapshots with every field of SPEC §8.1.
    pub fn audit_completeness(&self) -> f64 {
        ratio(self.complete, self.decisions)
    }

    /// 50·correctness + 25·latency + 15·cost + 10·audit.
    pub fn score(&self, budget_us: f64) -> f64 {
        50.0 * self.correctness()
            + 25.0 * self.within_sla_share()
            + 15.0 * self.cost(budget_us)
            + 10.0 * self.audit_completeness()
    }

    fn to_json(&self, options: &Options, peak_rss_mb: f64) -> Json {
        let changed: Vec<Json> = self
            .changed_rules
            .iter()
            .map(|(rule, c)| {
                let mut entry = json!({
                    "rule_id": rule,
                    "count": c.count,
                    "lost": c.lost,
                    "gained": c.gained,
                    "examples": c.examples.iter().map(Example::to_json).collect::<Vec<_>>(),
                });
                if self.attribution.is_some() {
                    let causes = c.causes_by_count().into_iter().map(|(cause, n)| json!({"cause": cause, "count": n}));
                    entry["causes"] = Json::Array(causes.collect());
                    entry["unexplained"] = json!(c.unexplained);
                }
                entry
            })
            .collect();
        json!({
            "table": self.table,
            "version": self.version,
            "decisions": self.decisions,
            "correctness": round6(self.correctness()),
            "correct": self.correct,
            "judged": self.judged,
            "changed": self.changed,
            "refused": self.refused,
            "unapplied": self.unapplied,
            "latency_p50_ns": self.latency.quantile(0.5),
            "latency_p99_ns": self.latency.quantile(0.99),
            "within_sla": round6(self.within_sla_share()),
            "cpu_s_per_million": round6(self.cpu_s_per_million()),
            "cost": round6(self.cost(options.cost_budget_us)),
            "peak_rss_mb": round6(peak_rss_mb),
            "audit_completeness": round6(self.audit_completeness()),
            "score": round6(self.score(options.cost_budget_us)),
            "changed_rules": changed,
        })
    }
}

impl Example {
    fn to_json(&self) -> Json {
        let raw = |s: &str| serde_json::from_str::<Json>(s).unwrap_or(Json::Null);
        let mut example = json!({
            "snapshot_id": self.snapshot_id,
            "input": raw(&self.input),
            "recorded": {"rule_id": self.recorded_rule, "action": raw(&self.recorded_action)},
            "replayed": match &self.replayed_action {
                Ok(a) => json!({"rule_id": self.replayed_rule, "action": raw(a)}),
                Err(code) => json!({"error": code}),
            },
        });
        if let Some(causes) = &self.causes {
            example["causes"] = json!(causes);
        }
        example
    }
}

impl Report {
    /// The process's peak resident memory in MiB.
    pub fn peak_rss_mb(&self) -> f64 {
        self.peak_rss_bytes as f64 / (1 << 20) as f64
    }

    /// Snapshots read per second (all of them, replayed or not).
    pub fn per_second(&self) -> f64 {
        let n = self.read.lines as f64;
        n / self.wall.as_secs_f64().max(1e-9)
    }

    /// The report as one JSON object: the table's figures at the top level, the second
    /// table's under `against`.
    pub fn to_json(&self) -> Json {
        let mut out = self.table.to_json(&self.options, self.peak_rss_mb());
        let obj = out.as_object_mut().expect("an object");
        if let Some(a) = &self.against {
            obj.insert("against".into(), a.to_json(&self.options, self.peak_rss_mb()));
        }
        if let Some(diff) = &self.diff {
            obj.insert("diff".into(), diff.to_json());
        }
        obj.insert("sla_us".into(), json!(self.options.sla_us));
        obj.insert("cost_budget_us".into(), json!(self.options.cost_budget_us));
        obj.insert("cost_budget_basis".into(), json!(self.cost_budget_basis.name()));
        obj.insert("recorded_latency_p50_ns".into(), json!(self.recorded_latency.quantile(0.5)));
        obj.insert("recorded_latency_p99_ns".into(), json!(self.recorded_latency.quantile(0.99)));
        obj.insert("recorded_versions".into(), json!(self.recorded_versions));
        obj.insert(
            "read".into(),
            json!({
                "files": self.read.files,
                "lines": self.read.lines,
                "unparsable": self.unparsable,
                "other_tables": self.other_tables,
                "torn_tails": self.read.torn_tails,
                "torn_bytes": self.read.torn_bytes,
                "damaged": self.read.damaged,
                "oversized": self.read.oversized,
                "unreadable": self.read.unreadable.iter().map(|(p, e)| format!("{}: {e}", p.display())).collect::<Vec<_>>(),
                "seconds": round6(self.wall.as_secs_f64()),
                "per_second": self.per_second().round(),
            }),
        );
        out
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let t = &self.table;
        let r = &self.read;
        let _ = writeln!(
            o,
            "replayed {} snapshots of \"{}\" from {} file{} in {:.2} s ({:.0} snapshots/s)",
            t.decisions,
            t.table,
            r.files,
            if r.files == 1 { "" } else { "s" },
            self.wall.as_secs_f64(),
            self.per_second()
        );
        let mut skipped = Vec::new();
        if self.other_tables > 0 {
            skipped.push(format!("{} of other tables (--any-table replays them)", self.other_tables));
        }
        if self.unparsable > 0 {
            skipped.push(format!("{} lines that are not snapshots", self.unparsable));
        }
        if r.torn_tails > 0 {
            skipped.push(format!("{} torn tail{} ({} bytes)", r.torn_tails, plural(r.torn_tails), r.torn_bytes));
        }
        if r.damaged > 0 {
            skipped.push(format!("{} damaged frame{}", r.damaged, plural(r.damaged)));
        }
        if r.oversized > 0 {
            skipped.push(format!(
                "{} line{} or frame{} too large to hold (over {} MiB, or a zstd window over {} MiB)",
                r.oversized,
                plural(r.oversized),
                plural(r.oversized),
                crate::snapshot::reader::MAX_LINE >> 20,
                (1usize << crate::snapshot::reader::MAX_WINDOW_LOG) >> 20
            ));
        }
        if !skipped.is_empty() {
            let _ = writeln!(o, "skipped: {}", skipped.join(", "));
        }
        for (path, e) in &r.unreadable {
            let _ = writeln!(o, "unreadable: {}: {e}", path.display());
        }
        if !self.recorded_versions.is_empty() {
            let v: Vec<String> = self.recorded_versions.iter().map(|(v, n)| format!("{v} ({n})")).collect();
            let _ = writeln!(o, "recorded with versions: {}", v.join(", "));
        }
        o.push('\n');
        let lanes: Vec<&Scored> = std::iter::once(t).chain(self.against.as_ref()).collect();
        let budget = self.options.cost_budget_us;
        let rows: Vec<(String, Vec<String>)> = vec![
            ("".into(), lanes.iter().map(|l| format!("{} {}", l.table, l.version)).collect()),
            (
                "correctness".into(),
                lanes.iter().map(|l| format!("{} ({}/{})", pct(l.correctness()), l.correct, l.judged)).collect(),
            ),
            ("changed decisions".into(), lanes.iter().map(|l| l.changed.to_string()).collect()),
            (
                "latency p50 / p99".into(),
                lanes
                    .iter()
                    .map(|l| format!("{} / {}", human_ns(l.latency.quantile(0.5)), human_ns(l.latency.quantile(0.99))))
                    .collect(),
            ),
            (
                format!("within SLA ({} µs)", self.options.sla_us),
                lanes.iter().map(|l| pct(l.within_sla_share())).collect(),
            ),
            ("CPU per million".into(), lanes.iter().map(|l| format!("{:.3} s", l.cpu_s_per_million())).collect()),
            (
                format!("cost (budget {budget:.3} µs, {})", self.cost_budget_basis.name()),
                lanes.iter().map(|l| format!("{:.3}", l.cost(budget))).collect(),
            ),
            ("peak memory".into(), lanes.iter().map(|_| format!("{:.1} MiB", self.peak_rss_mb())).collect()),
            ("audit completeness".into(), lanes.iter().map(|l| pct(l.audit_completeness())).collect()),
            ("score".into(), lanes.iter().map(|l| format!("{:.2} / 100", l.score(budget))).collect()),
        ];
        let label_w = rows.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0) + 2;
        let col_w = rows.iter().flat_map(|(_, c)| c.first()).map(|c| c.chars().count()).max().unwrap_or(0) + 3;
        for (label, cells) in &rows {
            let _ = write!(o, "{label:<label_w$}");
            for (i, c) in cells.iter().enumerate() {
                if i + 1 < cells.len() {
                    let _ = write!(o, "{c:<col_w$}");
                } else {
                    o.push_str(c);
                }
            }
            o.push('\n');
        }
        o.push_str(&format!(
            "\nscore = 50·correctness + 25·within SLA + 15·cost + 10·audit; recorded latency p50 {} / p99 {}\n",
            human_ns(self.recorded_latency.quantile(0.5)),
            human_ns(self.recorded_latency.quantile(0.99))
        ));
        write_diff(&mut o, self);
        for l in &lanes {
            if l.unapplied > 0 {
                let _ = writeln!(
                    o,
                    "{}: {} snapshots recorded with switched-off rules or tuning params that could not be applied \
                     (replayed with the table as it is)",
                    l.table, l.unapplied
                );
            }
            if l.refused > 0 {
                let _ = writeln!(o, "{}: refused {} inputs (see the examples)", l.table, l.refused);
            }
            if l.changed_rules.is_empty() {
                continue;
            }
            let _ = writeln!(o, "\nrules whose outcomes changed with {} {}:", l.table, l.version);
            let mut by_count: Vec<_> = l.changed_rules.iter().collect();
            by_count.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
            for (rule, c) in by_count {
                let _ = writeln!(
                    o,
                    "  {}  {} decision{} (lost {}, gained {})",
                    rule.as_deref().unwrap_or("(no rule: default)"),
                    c.count,
                    plural(c.count),
                    c.lost,
                    c.gained
                );
                if l.attribution.is_some() {
                    write_causes(&mut o, c);
                }
                for e in &c.examples {
                    let now = match &e.replayed_action {
                        Ok(a) => format!("{} → {a}", e.replayed_rule.as_deref().unwrap_or("(no rule)")),
                        Err(code) => format!("refused: {code}"),
                    };
                    let _ = writeln!(
                        o,
                        "    {}: was {} → {}; now {}\n      input {}",
                        e.snapshot_id,
                        e.recorded_rule.as_deref().unwrap_or("(no rule)"),
                        e.recorded_action,
                        now,
                        cut(&e.input, TEXT_INPUT_CHARS)
                    );
                    if let Some(causes) = &e.causes {
                        let _ = writeln!(o, "      because: {}", because(causes));
                    }
                }
            }
        }
        o
    }
}

/// With `--against`: what changed from the table to the second one, one line each.
fn write_diff(o: &mut String, report: &Report) {
    let (Some(against), Some(path)) = (&report.against, &report.options.against) else { return };
    let t = &report.table;
    let _ = write!(
        o,
        "\nchanges from {} {} ({}) to {} {} ({}):\n",
        t.table,
        t.version,
        report.options.table.display(),
        against.table,
        against.version,
        path.display()
    );
    match &report.diff {
        None => o.push_str("  (tables of different kinds: not compared)\n"),
        Some(d) if d.is_empty() => o.push_str("  none in what decides\n"),
        Some(d) => d.lines().iter().for_each(|l| {
            let _ = writeln!(o, "  {l}");
        }),
    }
}

/// The causes of a changed rule's decisions: one `because:` line per cause, most decisions first.
fn write_causes(o: &mut String, c: &ChangedRule) {
    for (cause, n) in c.causes_by_count() {
        let _ = writeln!(o, "    because: {cause} ({n} decision{})", plural(n));
    }
    if c.unexplained > 0 {
        let _ = writeln!(o, "    because: {} ({} decision{})", because(&[]), c.unexplained, plural(c.unexplained));
    }
}

/// A changed decision's causes on one line.
fn because(causes: &[String]) -> String {
    if causes.is_empty() {
        "no change between the tables explains it (decided by another version when recorded?)".into()
    } else {
        causes.join("; ")
    }
}

impl ChangedRule {
    /// The causes with their counts, most decisions first (then by text).
    pub fn causes_by_count(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self.causes.iter().map(|(c, &n)| (c.as_str(), n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n).collect::<String>() + "…"
    }
}

fn human_ns(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Whether two rule ids written as JSON (or `null`) are the same.
fn same_id(a: &str, b: &str) -> bool {
    a == b || serde_json::from_str::<Option<String>>(a).ok() == serde_json::from_str::<Option<String>>(b).ok()
}

/// The calling thread's CPU time (user + system), in nanoseconds, from its CPU clock (whose
/// resolution is a nanosecond, where `getrusage` counts in scheduler ticks of 4 ms).
fn thread_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    match clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID) {
        Ok(t) => (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64),
        Err(_) => 0,
    }
}

/// The process's peak resident memory, in bytes: `VmHWM` of `/proc/self/status`. (Not
/// `getrusage`'s `ru_maxrss`: Linux carries it across `exec`, so a replay started by a large
/// process reported that process's peak as its own.)
pub fn peak_rss_bytes() -> u64 {
    let hwm = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
        kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
    });
    match hwm {
        Some(kib) => kib * 1024,
        None => {
            use nix::sys::resource::{getrusage, UsageWho};
            getrusage(UsageWho::RUSAGE_SELF).map_or(0, |u| u.max_rss().max(0) as u64 * 1024)
        }
    }
}

/// The cost of reading the clock twice, subtracted from each timed decision.
fn clock_overhead_ns() -> u64 {
    let mut v: Vec<u64> = (0..1001)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(t.elapsed().as_nanos() as u64)
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// A latency histogram in bounded memory: exact below 32 ns, then 32 buckets per power of two
/// (within about 3 %).
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    /// the sum of the values (exact, for the mean)
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; 64 * 32], n: 0, sum: 0 }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < 32 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize; // ≥ 5
        let sub = ((v >> (e - 5)) & 31) as usize;
        (e - 4) * 32 + sub
    }

    fn value(idx: usize) -> u64 {
        if idx < 32 {
            return idx as u64;
        }
        let (e, sub) = (idx / 32 + 4, (idx % 32) as u64);
        let lower = (32 + sub) << (e - 5);
        lower + ((1u64 << (e - 5)) >> 1) // the bucket's middle
    }

    /// Counts one value.
    pub fn add(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.n += 1;
        self.sum += u128::from(v);
    }

    /// The mean of the values, exact (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }

    /// How many values.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether no value was counted.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The `q` quantile (0 when empty).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i);
            }
        }
        Self::value(self.counts.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.add(v);
        }
        for (q, want) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.01, 1000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.04, "q{q}: {got} vs {want}");
        }
        assert_eq!(Histogram::default().quantile(0.5), 0);
        for v in [0, 1, 31, 32, 33, 1000, u64::MAX / 2, u64::MAX] {
            let i = Histogram::index(v);
            assert!(i < 64 * 32, "{v}");
        }
    }
}
