//! The decision pipeline: resolve the table → parse the input once → evaluate → render.
//!
//! `POST /decide`, `/authz` and `clef decide` all go through here, so that what is added to
//! a decision later (routing to another box, snapshots, shadow and canary tables, tuning) is
//! a stage of this pipeline rather than code repeated in each handler.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: indexes into fixed-size counter arrays (a worker stripe modulo `STRIPES`, constant
// positions) and positions checked just before.
#![allow(clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crossbeam::utils::CachePadded;

use crate::expr::json::write_value;
use crate::expr::value::Value;
use crate::input::InputError;
use crate::per_core::{share_threshold, worker_stripe, STRIPES};
use crate::registry::{Entry, Tables};
use crate::render::{self, ResponseMeta, Timestamp};
use crate::snapshot::id::next_id_at_ms;
use crate::snapshot::{Event, Recorder, Shadow, SnapshotId};
use crate::suggest::did_you_mean;
use crate::table::{Decision, Table};
use crate::tuning::Tuner;

/// Why a request got no decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// no table was named and none is the default
    NoDefaultTable,
    /// no table has this name
    UnknownTable {
        /// the name asked for
        name: String,
        /// the loaded name closest to it
        close: Option<String>,
        /// some loaded names, to list when none is close
        known: Vec<String>,
    },
    /// the table's file has never loaded
    Unavailable {
        /// the table
        name: String,
        /// why
        why: String,
    },
    /// the body is not an input this table takes
    Input(InputError),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoDefaultTable => f.write_str("no default table is configured; use POST /decide/{table}"),
            Refusal::UnknownTable { name, close: Some(close), .. } => {
                write!(f, "no table named \"{name}\"; did you mean \"{close}\"?")
            }
            Refusal::UnknownTable { name, known, .. } if known.is_empty() => {
                write!(f, "no table named \"{name}\"; no tables are loaded")
            }
            Refusal::UnknownTable { name, known, .. } => {
                write!(f, "no table named \"{name}\"; the tables are {}", known.join(", "))
            }
            Refusal::Unavailable { name, why } => write!(f, "table \"{name}\" is not available: {why}"),
            Refusal::Input(e) => write!(f, "{e}"),
        }
    }
}

/// The table that serves `name` (or the default table when `name` is `None`), with its entry.
pub fn resolve<'t>(
    tables: &'t Tables,
    name: Option<&str>,
    default: Option<&str>,
) -> Result<(&'t Entry, &'t Arc<Table>), Refusal> {
    let name = name.or(default).ok_or(Refusal::NoDefaultTable)?;
    let Some(entry) = tables.get(name) else { return Err(unknown_table(tables, name)) };
    match &entry.current {
        Some(table) => Ok((entry, table)),
        None => Err(Refusal::Unavailable {
            name: name.to_string(),
            // the decision port's words: no path, nothing quoted from the file
            why: entry.error.as_ref().map_or_else(|| "it has never loaded".into(), |e| e.public(false)),
        }),
    }
}

/// The refusal for a name no table has, naming the closest loaded table.
pub fn unknown_table(tables: &Tables, name: &str) -> Refusal {
    let names = || tables.entries.keys().map(String::as_str);
    Refusal::UnknownTable {
        name: name.to_string(),
        close: did_you_mean(name, names()).map(str::to_string),
        known: names().take(20).map(str::to_string).collect(),
    }
}

/// How to answer one decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// add the trace of the rules tried
    pub explain: bool,
    /// the caller's W3C `traceparent` header, recorded in the snapshot
    pub traceparent: Option<&'a [u8]>,
    /// why the answer is degraded whatever the table says (`router_fallback`)
    pub degraded_reason: Option<&'static str>,
}

/// Decides `body` with `table` alone (no canary, shadow or snapshot: what `clef decide` does)
/// and appends the response body (SPEC §6) to `out`; returns the decision.
pub fn decide(table: &Table, body: &[u8], options: &Options<'_>, out: &mut String) -> Result<Decision, InputError> {
    let decision = table.decide(body, options.explain)?;
    let meta = ResponseMeta { timestamp: SystemTime::now().into(), snapshot_id: None, recorded: true, variant: None };
    render::write_decision(table, &decision, &meta, out);
    Ok(decision)
}

/// A decision made by the server's pipeline, with the table that made it (a canary may have
/// answered instead of the table asked for).
#[derive(Debug)]
pub struct Decided<'t> {
    /// the entry of the table that decided, for its counters
    pub entry: &'t Entry,
    /// the table that decided
    pub table: &'t Arc<Table>,
    /// its decision, or why the input got none (the response then is the error)
    pub result: Result<Decision, InputError>,
    /// the decision's latency, the one every decision endpoint counts
    /// (`clef_decision_duration_seconds`): from the pipeline's start to the answer rendered —
    /// canary choice, tuning draw, parsing, evaluating, the shadow table, recording the
    /// snapshot and writing the answer — in nanoseconds. Not reading the request, routing, or
    /// sending the answer.
    pub latency_ns: u64,
    /// the snapshot id the answer carries, when snapshots are on
    pub snapshot: Option<SnapshotId>,
}

/// Decides one input with the table resolved for it, through every stage the server has
/// configured: the canary choice, evaluation, the shadow table, the snapshot; then renders the
/// answer into `out` (nothing when the input got no decision). `tables` resolves candidates.
///
/// The body is parsed once for every stage that reads it: alone, the table reads it with its
/// own scan (only the fields it needs); with a canary key or a shadow table to read it too, it
/// is parsed once and each of them reads that.
pub fn decide_staged<'t>(
    stages: &Stages,
    tables: &'t Tables,
    (entry, table): (&'t Entry, &'t Arc<Table>),
    input: &Prepared<'_, '_, '_>,
    options: &Options<'_>,
    out: &mut String,
) -> Decided<'t> {
    let body = input.body;
    if input.parsed_for(table) {
        return decide_prepared(stages, tables, (entry, table), input, options, out);
    }
    if !stages.read_body_besides(&table.name) {
        return decide_prepared(stages, tables, (entry, table), &Prepared::bytes(body), options, out);
    }
    let pipeline_started = Instant::now();
    let depth = table.limits.max_input_depth;
    let parsed = crate::input::with_parsed(body, depth, |root| {
        let parse_ns = pipeline_started.elapsed().as_nanos() as u64;
        decide_prepared(stages, tables, (entry, table), &Prepared::parsed(body, &root, depth, parse_ns), options, out)
    });
    parsed.unwrap_or_else(|e| {
        // what the table alone answers for a body that does not parse: no canary draws on it
        let latency_ns = pipeline_started.elapsed().as_nanos() as u64;
        Decided { entry, table, result: Err(e), latency_ns, snapshot: None }
    })
}

/// A request body as the pipeline's stages read it: the bytes (what snapshots record and the
/// router forwards), and the parsed input when more than one stage reads it (the router's
/// hash key, a canary key, a shadow table, besides the table).
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'b, 'r, 'v> {
    body: &'b [u8],
    root: Option<&'r Value<'v>>,
    /// the nesting limit it was parsed under: a table with another limit parses it again
    depth: usize,
    /// how long parsing took, when it was parsed for the stages: part of the decision's
    /// evaluation time, as a table's own scan is
    parse_ns: u64,
}

impl<'b, 'r, 'v> Prepared<'b, 'r, 'v> {
    /// A body not parsed yet: each stage that reads it parses it (the table with its own scan).
    pub fn bytes(body: &'b [u8]) -> Self {
        Prepared { body, root: None, depth: 0, parse_ns: 0 }
    }

    /// A body parsed once (by [`crate::input::with_parsed`] under `depth`, in `parse_ns`) for
    /// every stage that reads it.
    pub fn parsed(body: &'b [u8], root: &'r Value<'v>, depth: usize, parse_ns: u64) -> Self {
        Prepared { body, root: Some(root), depth, parse_ns }
    }

    /// The body as received.
    pub fn body(&self) -> &'b [u8] {
        self.body
    }

    /// Whether it was parsed as `table` parses its inputs.
    fn parsed_for(&self, table: &Table) -> bool {
        self.root.is_some() && self.depth == table.limits.max_input_depth
    }

    /// `table`'s decision of this input.
    fn decide(&self, table: &Table, explain: bool) -> Result<Decision, InputError> {
        match self.root {
            Some(root) if self.parsed_for(table) => table.decide_parsed(root, explain),
            _ => table.decide(self.body, explain),
        }
    }

    /// [`key_hash`] of this input.
    fn key_hash(&self, path: &[String]) -> Option<u64> {
        match self.root {
            Some(root) => hash_value(&root.at_path(path)),
            None => key_hash(self.body, path),
        }
    }
}

fn decide_prepared<'t>(
    stages: &Stages,
    tables: &'t Tables,
    (entry, table): (&'t Entry, &'t Arc<Table>),
    input: &Prepared<'_, '_, '_>,
    options: &Options<'_>,
    out: &mut String,
) -> Decided<'t> {
    let pipeline_started = Instant::now();
    let asked = table;
    let (entry, table) = stages.canary_for(tables, &table.name, input).unwrap_or((entry, table));
    // tuning: a share of the table's decisions is made by a variant of it (SPEC §9); a tuned
    // decision always gets an id, which says which arm decided (for /feedback), and whose
    // random bits are the traffic coin
    let timestamp = SystemTime::now();
    // converted once, for the response and the id
    let time = Timestamp::from(timestamp);
    // the tuning found, the id made and the arm drawn in one go: what is read of the tuning
    // stays in registers until the id is tagged
    let drawn = stages.tuner.as_ref().and_then(|t| {
        let base = t.baseline_of(table)?;
        Some(t.draw(table, base, next_id_at_ms(time.unix_ms())))
    });
    let decider: &Table = drawn.as_ref().map_or(&**table, |d| d.table(table));
    let started = Instant::now();
    let mut result = input.decide(decider, options.explain);
    // what the snapshot records (SPEC §8.1 `latency_ns`): parsing and evaluating by the table
    // that decided
    let evaluation_ns = started.elapsed().as_nanos() as u64 + input.parse_ns;
    if let (Ok(decision), Some(reason)) = (&mut result, options.degraded_reason) {
        decision.degraded_reason = Some(reason);
    }
    let Ok(decision) = &result else {
        let latency_ns = pipeline_started.elapsed().as_nanos() as u64 + input.parse_ns;
        return Decided { entry, table, result, latency_ns, snapshot: None };
    };
    let shadow = stages.shadow_for(tables, table, decision, input);
    let snapshot = match &drawn {
        Some(d) => Some(d.id()),
        None => stages.recorder.is_some().then(|| next_id_at_ms(time.unix_ms())),
    };
    let mut recorded = stages.recorder.is_some() || snapshot.is_none();
    if let (Some(recorder), Some(id)) = (&stages.recorder, snapshot) {
        // what decided, whole (SPEC §8.1): the served table with its switches, the arm's
        // table with the parameter values in force, the arm as the response names it
        let mut event = Event::new(table, decision, input.body);
        event.decider = decider;
        event.variant = drawn.as_ref().map(|d| d.arm_name());
        event.pinned = entry.pin.is_some();
        event.canary_for = (!Arc::ptr_eq(table, asked)).then_some(asked.name.as_str());
        event.timestamp = timestamp;
        event.latency_ns = evaluation_ns;
        event.traceparent = options.traceparent;
        event.shadow = shadow.as_ref().map(|(t, d, agrees)| Shadow { table: t, decision: d, agrees: *agrees });
        recorded = recorder.record_as(id, &event) == crate::snapshot::Status::Recorded;
    }
    let meta = ResponseMeta {
        timestamp: time,
        snapshot_id: snapshot,
        recorded,
        variant: drawn.as_ref().map(|d| d.arm_name()),
    };
    render::write_decision(table, decision, &meta, out);
    let latency_ns = pipeline_started.elapsed().as_nanos() as u64 + input.parse_ns;
    Decided { entry, table, result, latency_ns, snapshot }
}

/// What the server adds around a table's decision (SPEC §8): canary tables answering a share
/// of a table's traffic, shadow tables deciding beside it, and the snapshot recorder. Made once
/// at start from `config.yaml`; [`Stages::default`] has none of them.
#[derive(Debug, Default)]
pub struct Stages {
    /// records a snapshot of every decision, when snapshots are on
    pub recorder: Option<Recorder>,
    /// tunes the parameters of `tuning.tables`, when tuning is on
    pub tuner: Option<Tuner>,
    shadows: Vec<ShadowPair>,
    canaries: Vec<CanaryRoute>,
}

/// `model.shadow`: a candidate that decides every input of a table, for comparison only.
#[derive(Debug)]
struct ShadowPair {
    served: String,
    candidate: String,
    /// agree, disagree, error (the candidate could not decide), per worker stripe
    counts: Vec<CachePadded<[AtomicU64; 3]>>,
}

/// `model.canary`: a candidate that answers a stable share of a table's traffic.
#[derive(Debug)]
struct CanaryRoute {
    served: String,
    candidate: String,
    /// the share as a threshold on a 64-bit hash (`share × 2^64`)
    threshold: u64,
    /// the key's path; `None`: every decision is drawn at random
    key: Option<Vec<String>>,
}

impl Stages {
    /// The stages `config.yaml` asks for; `recorder` is the started snapshot recorder, if on.
    pub fn new(model: &crate::config::Model, recorder: Option<Recorder>, tuner: Option<Tuner>) -> Stages {
        let shadows = model
            .shadow
            .iter()
            .map(|(served, candidate)| ShadowPair {
                served: served.clone(),
                candidate: candidate.clone(),
                counts: (0..STRIPES).map(|_| CachePadded::new(Default::default())).collect(),
            })
            .collect();
        let canaries = model
            .canary
            .iter()
            .map(|(served, c)| CanaryRoute {
                served: served.clone(),
                candidate: c.table.clone(),
                threshold: share_threshold(c.share),
                key: c.key.as_ref().map(|k| k.split('.').map(str::to_string).collect()),
            })
            .collect();
        Stages { recorder, tuner, shadows, canaries }
    }

    /// The candidate that answers this input instead of `served`, when `served` has a canary
    /// whose share this input falls in and the candidate is loaded.
    fn canary_for<'t>(
        &self,
        tables: &'t Tables,
        served: &str,
        input: &Prepared<'_, '_, '_>,
    ) -> Option<(&'t Entry, &'t Arc<Table>)> {
        let canary = self.canaries.iter().find(|c| c.served == served)?;
        if canary.threshold == 0 {
            return None;
        }
        let draw = match &canary.key {
            Some(path) => input.key_hash(path)?,
            None => crate::per_core::random_u64(),
        };
        if draw >= canary.threshold && canary.threshold != u64::MAX {
            return None;
        }
        let entry = tables.get(&canary.candidate)?;
        Some((entry, entry.current.as_ref()?))
    }

    /// What the shadow of `table` decides for the same input, and whether it agrees with
    /// `decision` (same action); counted in the shadow's figures.
    fn shadow_for<'t>(
        &self,
        tables: &'t Tables,
        table: &Table,
        decision: &Decision,
        input: &Prepared<'_, '_, '_>,
    ) -> Option<(&'t Table, Decision, bool)> {
        let pair = self.shadows.iter().find(|p| p.served == *table.name)?;
        let candidate = tables.get(&pair.candidate)?.current.as_deref()?;
        let counts = &pair.counts[worker_stripe() % STRIPES];
        match input.decide(candidate, false) {
            Ok(theirs) => {
                let agrees = crate::expr::same_json_text(table.action_json(decision), candidate.action_json(&theirs));
                counts[usize::from(!agrees)].fetch_add(1, Relaxed);
                Some((candidate, theirs, agrees))
            }
            Err(_) => {
                counts[2].fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Whether a stage other than `served`'s own decision reads the body of its decisions: a
    /// canary keyed by a field, or a shadow table.
    fn read_body_besides(&self, served: &str) -> bool {
        self.canaries.iter().any(|c| c.served == served && c.key.is_some() && c.threshold != 0)
            || self.shadows.iter().any(|p| p.served == served)
            || self.canaries.iter().any(|c| c.served == served && self.shadows.iter().any(|p| p.served == c.candidate))
    }

    /// The shadow tables' family of a scrape, when there are shadow tables.
    pub fn shadow_collector(&self) -> Option<ShadowCollector> {
        (!self.shadows.is_empty()).then(|| ShadowCollector(self.shadow_counts()))
    }

    /// Every shadow pair's figures, for `GET /metrics`.
    pub fn shadow_counts(&self) -> Vec<ShadowCount> {
        self.shadows
            .iter()
            .map(|p| {
                let sum = |i: usize| p.counts.iter().map(|c| c[i].load(Relaxed)).sum();
                ShadowCount {
                    table: p.served.clone(),
                    shadow: p.candidate.clone(),
                    agree: sum(0),
                    disagree: sum(1),
                    error: sum(2),
                }
            })
            .collect()
    }

    /// The tables named as shadows or canaries that are not loaded, as (role, served, candidate):
    /// the served table then answers alone, which the log should say.
    pub fn missing_candidates(&self, tables: &Tables) -> Vec<(&'static str, &str, &str)> {
        let loaded = |name: &str| tables.get(name).is_some_and(|s| s.current.is_some());
        let shadows = self.shadows.iter().map(|p| ("shadow", p.served.as_str(), p.candidate.as_str()));
        let canaries = self.canaries.iter().map(|c| ("canary", c.served.as_str(), c.candidate.as_str()));
        shadows.chain(canaries).filter(|(_, _, candidate)| !loaded(candidate)).collect()
    }
}

/// How often a shadow table agreed with the table it shadows (`clef_shadow_decisions_total`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowCount {
    /// the table that answers
    pub table: String,
    /// its shadow
    pub shadow: String,
    /// decisions where both gave the same action
    pub agree: u64,
    /// decisions where the actions differed
    pub disagree: u64,
    /// decisions the shadow could not make (it refused the input)
    pub error: u64,
}

/// `clef_shadow_decisions_total`, one series per shadow pair and outcome.
#[derive(Debug)]
pub struct ShadowCollector(pub Vec<ShadowCount>);

impl prometheus_client::collector::Collector for ShadowCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::MetricType;
        let help = "Decisions a shadow table also made, by whether it gave the same action";
        let mut family = encoder.encode_descriptor("clef_shadow_decisions", help, None, MetricType::Counter)?;
        for c in &self.0 {
            for (outcome, value) in [("agree", c.agree), ("disagree", c.disagree), ("error", c.error)] {
                let labels = [("table", c.table.as_str()), ("shadow", c.shadow.as_str()), ("outcome", outcome)];
                ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// A stable 64-bit hash of the value at `path` in the input (strings by their text, anything
/// else by its JSON), the same in every process and version; `None` when the input has no
/// such value (it then goes to the table asked for).
pub(crate) fn key_hash(body: &[u8], path: &[String]) -> Option<u64> {
    crate::input::with_parsed(body, crate::input::DEFAULT_MAX_DEPTH, |root| hash_value(&root.at_path(path))).ok()?
}

/// [`key_hash`] of a value read from an input: `None` for nil and the empty string.
fn hash_value(value: &Value<'_>) -> Option<u64> {
    use sha2::{Digest, Sha256};
    let mut text = String::new();
    match value {
        Value::Nil => {}
        Value::Str(s) => text.push_str(s),
        other => write_value(other, &mut text),
    }
    if text.is_empty() {
        return None;
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Some(u64::from_be_bytes(first))
}

/// Where the router sends a request (SPEC §7).
#[derive(Debug)]
pub enum Routed {
    /// decide here, with the table asked for
    Local,
    /// decide here with this table, marked `degraded_reason: router_fallback` (no instance
    /// could answer, or the table is switched to it by hand)
    Fallback(String),
    /// another instance answered
    Forwarded(crate::router::forward::Answer),
    /// 503 `no_healthy_instance`: no healthy instance serves the table, and no fallback table
    NoHealthy(String),
    /// 502 `upstream_failed`: the chosen instances failed, and no fallback table
    UpstreamFailed(String),
}

/// The route step: which instance decides `table` (the name asked for, else the default
/// table's). Without a router, or for a table no instance serves, that is the local pipeline; a
/// request that carries `X-Clef-Forwarded` (`forwarded`) is never forwarded again. Forwards
/// (which yield) happen here, with the body as received.
pub fn route(
    router: Option<&crate::router::Router>,
    tables: &Tables,
    table: Option<&str>,
    local_load: f64,
    forwarded: bool,
    input: &Prepared<'_, '_, '_>,
    out: crate::router::forward::Outgoing<'_>,
) -> Routed {
    use crate::router::{forward, Ask, Plan};
    let Some(router) = router else { return Routed::Local };
    let Some(table) = table else { return Routed::Local };
    let loaded = |t: &str| tables.get(t).is_some_and(|s| s.current.is_some());
    let local_serves = loaded(table);
    let fallback = || router.config().fallback_table.clone().filter(|t| loaded(t));
    if forwarded {
        return match router.failover_for(table) {
            Some(to) => Routed::Fallback(to),
            None if !local_serves => fallback().map_or(Routed::Local, Routed::Fallback),
            None => Routed::Local,
        };
    }
    let key = router.hash_path().and_then(|path| input.key_hash(path));
    let plan = router.route(&Ask { table, local_serves, local_load, key });
    match plan {
        Plan::Local | Plan::Unknown => Routed::Local,
        Plan::Failover(to) => Routed::Fallback(to.into()),
        Plan::NoHealthy => fallback().map_or_else(
            || {
                Routed::NoHealthy(format!(
                    "no healthy instance serves table \"{table}\" and there is no fallback table"
                ))
            },
            Routed::Fallback,
        ),
        Plan::Forward { .. } => match forward::run(router, &plan, &Routed::outgoing_for(table, out)) {
            Ok(answer) => Routed::Forwarded(answer),
            Err(forward::Unanswered::Local) => Routed::Local,
            Err(forward::Unanswered::Failed(why)) => fallback().map_or_else(
                || {
                    Routed::UpstreamFailed(format!(
                        "forwarding table \"{table}\" failed ({why}) and there is no fallback table"
                    ))
                },
                Routed::Fallback,
            ),
        },
    }
}

impl Routed {
    /// `out` naming the table resolved (the default table's name when none was asked for).
    fn outgoing_for<'a>(
        table: &'a str,
        out: crate::router::forward::Outgoing<'a>,
    ) -> crate::router::forward::Outgoing<'a> {
        crate::router::forward::Outgoing { table, ..out }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Limits;

    /// What a table decides and what a canary key hashes to are the same whether the body is
    /// read by the table's own scan or parsed once for several stages.
    #[test]
    fn a_body_parsed_once_reads_as_the_bytes_do() {
        let file = br#"{"rules": [
            {"id": "big", "condition": "amount > 100 && user.tier != \"gold\"", "action": {"a": 1}},
            {"id": "tag", "condition": "\"x\" in tags", "action": {"a": 2}}
        ], "default": {"a": 0}}"#;
        let table = Table::from_bytes(std::path::Path::new("t.json"), file, &Limits::default()).expect("loads");
        let path = vec!["user".to_string(), "id".to_string()];
        for body in [
            r#"{"amount": 150, "user": {"tier": "silver", "id": "u1"}}"#,
            r#"{"amount": 150, "user": {"tier": "gold", "id": 7}, "tags": ["x"]}"#,
            r#"{"amount": "many", "tags": "x"}"#,
            r#"{"user": {"id": ""}}"#,
        ] {
            let bytes = body.as_bytes();
            let alone = Prepared::bytes(bytes);
            crate::input::with_parsed(bytes, table.limits.max_input_depth, |root| {
                let shared = Prepared::parsed(bytes, &root, table.limits.max_input_depth, 0);
                for explain in [false, true] {
                    assert_eq!(shared.decide(&table, explain), alone.decide(&table, explain), "{body}");
                }
                assert_eq!(shared.key_hash(&path), alone.key_hash(&path), "{body}");
            })
            .expect("parses");
        }
    }
}
