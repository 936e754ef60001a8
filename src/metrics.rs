//! Per-core counters, merged and encoded when `GET /metrics` is read (SPEC §6, §10).
//!
//! Nothing here takes a lock or writes a cache line that another core also writes on the
//! request path: every thread gets a stable stripe ([`worker_stripe`]) and counts into its own
//! [`CachePadded`] block with relaxed `fetch_add`s. A scrape sums the blocks, takes an owned
//! copy of the totals, and encodes it with the `prometheus-client` text encoders through a [`Registry`]
//! of [`Collector`]s (one per group of metric families).
//!
//! The tables are not copied for a scrape: a [`TableSource`] is walked once per metric family,
//! so that a scrape of thousands of tables holds one table's figures at a time, and the text
//! can be written to the client as it is encoded ([`write_format`]).
//!
//! The server's own families (tables, responses, connections, reloads, its gauges) are made
//! here; each subsystem that is on makes its own collector from its figures (the snapshot
//! recorder, tuning, shadow tables, the router, state files: [`Subsystems`]) and the scrape
//! encodes them after these, so that nothing here knows a subsystem's insides.
//!
//! A scrape also reads the figures of the whole process from `/proc/self` ([`ProcessStats`]),
//! with the names and meanings of the Prometheus client libraries' process collectors
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …), and names the build
//! (`clef_build_info`).
//!
//! [`encode`] produces the OpenMetrics text format (ending with `# EOF`), to be served with
//! [`CONTENT_TYPE`]; [`encode_format`] with [`Format::Prometheus`] produces the classic
//! Prometheus text format (version 0.0.4) for clients that do not ask for OpenMetrics
//! (see [`Format::from_accept`]).
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: indexes into fixed-size counter arrays: worker stripes taken modulo `STRIPES`,
// constant offsets and bucket positions bounded by the arrays' lengths.
#![allow(clippy::indexing_slicing)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam::utils::CachePadded;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::http1::Closed;
use crate::per_core::{machine_stripes, worker_stripe, STRIPES};

/// Latency buckets, in microseconds.
pub const LATENCY_BUCKETS_US: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0, 25000.0];

/// `Content-Type` of the output of [`encode`] (OpenMetrics text format 1.0.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `Content-Type` of the classic Prometheus text format (version 0.0.4), see [`Format::Prometheus`].
pub const PROMETHEUS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

const N_BUCKETS: usize = 12;
const _: () = assert!(LATENCY_BUCKETS_US.len() == N_BUCKETS);

/// Upper bounds of the latency buckets in nanoseconds (inclusive, as Prometheus' `le`).
const BOUNDS_NS: [u64; N_BUCKETS] = {
    let mut out = [0u64; N_BUCKETS];
    let mut i = 0;
    while i < N_BUCKETS {
        out[i] = (LATENCY_BUCKETS_US[i] * 1000.0) as u64;
        i += 1;
    }
    out
};

// ---------------------------------------------------------------------------------------------
// Table statistics

/// `u64` cells in one cache-line-aligned chunk (128 bytes, the `CachePadded` size on x86_64
/// and aarch64).
const LANES: usize = 16;
type Chunk = CachePadded<[AtomicU64; LANES]>;

// Cell layout of one stripe of a table: the fixed cells fill exactly the first chunk, then one
// decision counter per rule, then one warning counter per rule.
const BUCKETS: usize = 0; // N_BUCKETS + 1 cells: the bounds, then the +Inf overflow
const SUM_NS: usize = BUCKETS + N_BUCKETS + 1;
const NO_MATCH: usize = SUM_NS + 1;
const INVALID: usize = NO_MATCH + 1;
const FIXED: usize = INVALID + 1;
const _: () = assert!(FIXED == LANES);

/// Decision counters of one table version, per worker stripe: decisions per rule, no-match
/// count, evaluation warnings per rule, latency histogram and invalid-input count.
///
/// Allocated once per table load; the request path only does a few relaxed `fetch_add`s on
/// the calling thread's cache-line-aligned block.
pub struct TableStats {
    rule_ids: Vec<String>,
    /// Power of two, at most [`STRIPES`].
    stripes: usize,
    chunks_per_stripe: usize,
    cells: Box<[Chunk]>,
}

impl fmt::Debug for TableStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableStats").field("rules", &self.rule_ids.len()).field("stripes", &self.stripes).finish()
    }
}

impl TableStats {
    /// Zeroed counters for a table whose rules (by index) have these ids.
    pub fn new(rule_ids: Vec<String>) -> TableStats {
        Self::with_stripes(rule_ids, machine_stripes())
    }

    fn with_stripes(rule_ids: Vec<String>, stripes: usize) -> TableStats {
        debug_assert!(stripes.is_power_of_two() && stripes <= STRIPES);
        let cells_per_stripe = FIXED + 2 * rule_ids.len();
        let chunks_per_stripe = cells_per_stripe.div_ceil(LANES);
        let cells =
            (0..stripes * chunks_per_stripe).map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))));
        TableStats { rule_ids, stripes, chunks_per_stripe, cells: cells.collect() }
    }

    /// The rule ids, by rule index.
    pub fn rule_ids(&self) -> &[String] {
        &self.rule_ids
    }

    #[inline]
    fn add(&self, base: usize, cell: usize) {
        self.cells[base + cell / LANES][cell % LANES].fetch_add(1, Relaxed);
    }

    #[inline]
    fn base(&self) -> usize {
        (worker_stripe() & (self.stripes - 1)) * self.chunks_per_stripe
    }

    /// Counts one decision: the matching rule's index (`None`: no rule matched, the default
    /// answered), its latency, and the indices of the rules whose evaluation warned.
    /// Out-of-range rule indices are not counted.
    #[inline]
    pub fn record(&self, rule: Option<usize>, latency_ns: u64, warning_rules: &[usize]) {
        let base = self.base();
        let n = self.rule_ids.len();
        match rule {
            None => self.add(base, NO_MATCH),
            Some(r) => {
                debug_assert!(r < n, "rule index {r} out of range ({n} rules)");
                if r < n {
                    self.add(base, FIXED + r);
                }
            }
        }
        let bucket = BOUNDS_NS.iter().position(|&ub| latency_ns <= ub).unwrap_or(N_BUCKETS);
        self.add(base, BUCKETS + bucket);
        self.cells[base + SUM_NS / LANES][SUM_NS % LANES].fetch_add(latency_ns, Relaxed);
        for &w in warning_rules {
            if w < n {
                self.add(base, FIXED + n + w);
            }
        }
    }

    /// Counts a request whose input was rejected before evaluation (outcome `invalid_input`).
    #[inline]
    pub fn record_invalid_input(&self) {
        self.add(self.base(), INVALID);
    }

    /// Every cell summed over the stripes.
    fn cell_sums(&self) -> Vec<u64> {
        let len = FIXED + 2 * self.rule_ids.len();
        let mut out = vec![0u64; len];
        for stripe in self.cells.chunks_exact(self.chunks_per_stripe) {
            for (chunk, out) in stripe.iter().zip(out.chunks_mut(LANES)) {
                for (cell, o) in chunk.iter().zip(out) {
                    *o = o.wrapping_add(cell.load(Relaxed));
                }
            }
        }
        out
    }

    /// Its figures summed over the stripes, as a scrape encodes them.
    fn totals(&self) -> TableTotals<'_> {
        let totals = self.cell_sums();
        let n = self.rule_ids.len();
        let nonzero = |counts: &[u64]| -> Vec<(&str, u64)> {
            counts.iter().zip(&self.rule_ids).filter(|(c, _)| **c != 0).map(|(c, id)| (id.as_str(), *c)).collect()
        };
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_US
            .iter()
            .zip(&totals[BUCKETS..BUCKETS + N_BUCKETS])
            .map(|(us, c)| (us / 1e6, *c))
            .collect();
        buckets.push((f64::INFINITY, totals[BUCKETS + N_BUCKETS]));
        TableTotals {
            matched: nonzero(&totals[FIXED..FIXED + n]),
            warnings: nonzero(&totals[FIXED + n..FIXED + 2 * n]),
            no_match: totals[NO_MATCH],
            invalid: totals[INVALID],
            // Derived from the buckets so that `le="+Inf"` always equals `_count`.
            count: buckets.iter().map(|(_, c)| c).sum(),
            buckets,
            sum_seconds: totals[SUM_NS] as f64 / 1e9,
        }
    }
}

/// What a table's decisions came to so far ([`TableStats::outcome_counts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutcomeCounts {
    /// decisions per rule, by rule index
    pub matched: Vec<u64>,
    /// evaluation warnings per rule, by rule index
    pub warnings: Vec<u64>,
    /// decisions no rule matched (the default answered)
    pub no_match: u64,
    /// requests refused before evaluation (`invalid_input`)
    pub invalid: u64,
}

impl TableStats {
    /// The counters summed over the stripes, read with relaxed loads: no lock, nothing written,
    /// so that the status page's figures (`GET /activity`) cost the decision path nothing.
    pub fn outcome_counts(&self) -> OutcomeCounts {
        let totals = self.cell_sums();
        let n = self.rule_ids.len();
        OutcomeCounts {
            matched: totals.get(FIXED..FIXED + n).unwrap_or_default().to_vec(),
            warnings: totals.get(FIXED + n..FIXED + 2 * n).unwrap_or_default().to_vec(),
            no_match: totals[NO_MATCH],
            invalid: totals[INVALID],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Server statistics

/// Status codes counted under their own `code` label; others are counted by class (`"4xx"`).
const CODES: [u16; 25] = [
    200, 204, 301, 302, 304, 400, 401, 403, 404, 405, 406, 408, 409, 411, 413, 414, 415, 422, 429, 431, 500, 501, 502,
    503, 504,
];
const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];
const CODE_LABELS: usize = CODES.len() + CLASSES.len();
const LISTENERS: [&str; 2] = ["main", "admin"];

fn code_index(status: u16) -> usize {
    match CODES.binary_search(&status) {
        Ok(i) => i,
        Err(_) => CODES.len() + if (100..600).contains(&status) { usize::from(status / 100) - 1 } else { 5 },
    }
}

fn code_label(index: usize) -> String {
    match CODES.get(index) {
        Some(code) => code.to_string(),
        None => CLASSES[index - CODES.len()].to_owned(),
    }
}

struct ServerStripe {
    responses: [[AtomicU64; CODE_LABELS]; 2],
    accepted: AtomicU64,
    rejected: AtomicU64,
    timeouts: AtomicU64,
    write_timeouts: AtomicU64,
    closed: [AtomicU64; Closed::ALL.len()],
}

impl ServerStripe {
    fn new() -> ServerStripe {
        let zero = || AtomicU64::new(0);
        ServerStripe {
            responses: std::array::from_fn(|_| std::array::from_fn(|_| zero())),
            accepted: zero(),
            rejected: zero(),
            timeouts: zero(),
            write_timeouts: zero(),
            closed: std::array::from_fn(|_| zero()),
        }
    }
}

struct Reloads {
    ok: AtomicU64,
    failed: AtomicU64,
    /// `f64::to_bits` of the unix time of the last successful reload; 0.0 when none.
    last_ok: AtomicU64,
}

/// Server-wide counters: HTTP responses by listener and code, connections accepted and
/// rejected, request timeouts (all per worker stripe), and reload results (global; reloads are
/// rare).
pub struct ServerStats {
    stripes: Box<[CachePadded<ServerStripe>]>,
    reloads: CachePadded<Reloads>,
}

impl fmt::Debug for ServerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerStats").field("stripes", &self.stripes.len()).finish()
    }
}

impl Default for ServerStats {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerStats {
    /// Zeroed counters.
    pub fn new() -> ServerStats {
        ServerStats {
            stripes: (0..STRIPES).map(|_| CachePadded::new(ServerStripe::new())).collect(),
            reloads: CachePadded::new(Reloads {
                ok: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                last_ok: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    #[inline]
    fn stripe(&self) -> &ServerStripe {
        &self.stripes[worker_stripe() % STRIPES]
    }

    /// Counts a response sent on the main (`admin == false`) or admin listener. Common codes
    /// are counted exactly, others by class (`"4xx"`, or `"other"` outside 100..=599).
    #[inline]
    pub fn record_response(&self, admin: bool, status: u16) {
        self.stripe().responses[usize::from(admin)][code_index(status)].fetch_add(1, Relaxed);
    }

    /// Counts an accepted connection.
    #[inline]
    pub fn connection_accepted(&self) {
        self.stripe().accepted.fetch_add(1, Relaxed);
    }

    /// Counts a connection refused because `max_connections` were open.
    #[inline]
    pub fn connection_rejected(&self) {
        self.stripe().rejected.fetch_add(1, Relaxed);
    }

    /// Counts a request that timed out.
    #[inline]
    pub fn request_timed_out(&self) {
        self.stripe().timeouts.fetch_add(1, Relaxed);
    }

    /// Counts a connection dropped because its client stopped reading its answers.
    #[inline]
    pub fn write_timed_out(&self) {
        self.stripe().write_timeouts.fetch_add(1, Relaxed);
    }

    /// Counts a closed connection by why it closed.
    #[inline]
    pub fn connection_closed(&self, why: Closed) {
        if let Some(n) = self.stripe().closed.get(why.index()) {
            n.fetch_add(1, Relaxed);
        }
    }

    /// Counts a finished reload; a successful one also sets the last-success time (unix seconds).
    pub fn reload_finished(&self, ok: bool, unix_time: f64) {
        if ok {
            self.reloads.ok.fetch_add(1, Relaxed);
            self.reloads.last_ok.store(unix_time.to_bits(), Relaxed);
        } else {
            self.reloads.failed.fetch_add(1, Relaxed);
        }
    }

    fn totals(&self) -> ServerTotals {
        let mut s = ServerTotals {
            responses: [[0; CODE_LABELS]; 2],
            accepted: 0,
            rejected: 0,
            timeouts: 0,
            write_timeouts: 0,
            closed: [0; Closed::ALL.len()],
            reloads_ok: self.reloads.ok.load(Relaxed),
            reloads_failed: self.reloads.failed.load(Relaxed),
            last_reload_ok: f64::from_bits(self.reloads.last_ok.load(Relaxed)),
        };
        for stripe in self.stripes.iter() {
            for (out, cells) in s.responses.iter_mut().zip(&stripe.responses) {
                for (o, c) in out.iter_mut().zip(cells) {
                    *o += c.load(Relaxed);
                }
            }
            s.accepted += stripe.accepted.load(Relaxed);
            s.rejected += stripe.rejected.load(Relaxed);
            s.timeouts += stripe.timeouts.load(Relaxed);
            s.write_timeouts += stripe.write_timeouts.load(Relaxed);
            for (sum, n) in s.closed.iter_mut().zip(&stripe.closed) {
                *sum += n.load(Relaxed);
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Scrape

/// The tables a scrape reports on, walked once per metric family (nothing of them is copied
/// for the scrape). The server's is the registry's published set of tables; [`TableList`] is a
/// fixed list.
pub trait TableSource: fmt::Debug + Send + Sync + 'static {
    /// Calls `f` with every table being served, in the order they are reported.
    fn each_table(&self, f: &mut dyn FnMut(TableView<'_>) -> fmt::Result) -> fmt::Result;
    /// Calls `f` with every table name and the state of its loading (`clef_table_load_…`).
    fn each_load(&self, f: &mut dyn FnMut(TableLoad<'_>) -> fmt::Result) -> fmt::Result;
}

/// A fixed list of tables to report on (tests, tools).
#[derive(Debug, Default)]
pub struct TableList {
    /// the tables served: name, version, kind and counters
    pub served: Vec<(String, String, String, Arc<TableStats>)>,
    /// every table name: name, whether its latest file fails to load, failed loads
    pub loads: Vec<(String, bool, u64)>,
}

impl TableSource for TableList {
    fn each_table(&self, f: &mut dyn FnMut(TableView<'_>) -> fmt::Result) -> fmt::Result {
        for (name, version, kind, stats) in &self.served {
            f(TableView { name, version, kind, stats })?;
        }
        Ok(())
    }

    fn each_load(&self, f: &mut dyn FnMut(TableLoad<'_>) -> fmt::Result) -> fmt::Result {
        for (name, failing, failures) in &self.loads {
            f(TableLoad { name, failing: *failing, failures: *failures })?;
        }
        Ok(())
    }
}

/// What a scrape needs about one table.
#[derive(Debug, Clone, Copy)]
pub struct TableView<'a> {
    /// Table name (label `table`).
    pub name: &'a str,
    /// Version of the table being served (label `version` of `clef_table_info`).
    pub version: &'a str,
    /// Kind of table, e.g. `"jev"` (label `kind` of `clef_table_info`).
    pub kind: &'a str,
    /// Its counters.
    pub stats: &'a TableStats,
}

/// What a scrape needs about the loading of one table name: every table file name the server
/// knows, whether a version of it serves or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLoad<'a> {
    /// Table name (label `table`).
    pub name: &'a str,
    /// Whether its latest file failed to load (`clef_table_load_failing`); an older version may
    /// still serve.
    pub failing: bool,
    /// Failed loads of its file since the server started (`clef_table_load_failures_total`).
    pub failures: u64,
}

/// The server's gauges, read at scrape time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauges {
    /// Seconds since the server started (`clef_uptime_seconds`).
    pub uptime_seconds: f64,
    /// Requests being handled now (`clef_inflight_requests`).
    pub inflight: u64,
    /// Recent share of worker time spent busy (`clef_load`).
    pub load: f64,
    /// Open client connections (`clef_open_connections`).
    pub open_connections: u64,
    /// Bytes held by requests larger than a connection's base buffer, and their answers sent
    /// whole (`clef_request_memory_bytes`).
    pub request_memory: u64,
}

/// Figures of the whole process, read from `/proc/self` when scraped (nothing is kept between
/// scrapes, so nothing goes stale), with the meanings the Prometheus client libraries give them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time of every thread, in seconds (`process_cpu_seconds_total`).
    pub cpu_seconds: f64,
    /// Resident set size in bytes (`process_resident_memory_bytes`).
    pub resident_memory_bytes: u64,
    /// Virtual memory size in bytes (`process_virtual_memory_bytes`).
    pub virtual_memory_bytes: u64,
    /// Unix time the process started, in seconds (`process_start_time_seconds`).
    pub start_time_seconds: f64,
    /// Open file descriptors (`process_open_fds`).
    pub open_fds: u64,
    /// The soft limit of open file descriptors (`process_max_fds`).
    pub max_fds: u64,
}

impl ProcessStats {
    /// Reads the figures of this process now; `None` when `/proc` cannot tell them (not Linux).
    pub fn read() -> Option<ProcessStats> {
        use nix::sys::resource::{getrlimit, getrusage, Resource, UsageWho};
        use nix::unistd::{sysconf, SysconfVar};
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) is in parentheses and may itself hold spaces and
        // parentheses: count the fields after the last ')', which is field 3.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
        let (start_ticks, vsize, rss_pages) = (field(22)?, field(23)?, field(24)?);
        let ticks_per_second = sysconf(SysconfVar::CLK_TCK).ok()??;
        let page_size = sysconf(SysconfVar::PAGE_SIZE).ok()??;
        // Boot time as the kernel tells it now: it moves when the clock is set (a Pi without a
        // real-time clock boots in the past until NTP answers), and the start time with it.
        let proc_stat = std::fs::read_to_string("/proc/stat").ok()?;
        let boot_time: u64 = proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
        // getrusage has microseconds where /proc/self/stat has clock ticks (10 ms); both count
        // every thread of the process.
        let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
        let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        // Counts the descriptor reading the folder too, as the client libraries do.
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Some(ProcessStats {
            cpu_seconds: seconds(usage.user_time()) + seconds(usage.system_time()),
            resident_memory_bytes: rss_pages * page_size.max(0) as u64,
            virtual_memory_bytes: vsize,
            start_time_seconds: boot_time as f64 + start_ticks as f64 / ticks_per_second.max(1) as f64,
            open_fds,
            max_fds: getrlimit(Resource::RLIMIT_NOFILE).ok()?.0,
        })
    }
}

/// Exposition format of the scrape output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// OpenMetrics text 1.0.0 (ends with `# EOF`); serve with [`CONTENT_TYPE`].
    #[default]
    OpenMetrics,
    /// Classic Prometheus text format 0.0.4; serve with [`PROMETHEUS_CONTENT_TYPE`].
    Prometheus,
}

impl Format {
    /// OpenMetrics when the `Accept` header asks for `application/openmetrics-text` (as
    /// Prometheus does), else the classic Prometheus text format (curl, older scrapers).
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.to_ascii_lowercase().contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// The `Content-Type` to serve this format with.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => CONTENT_TYPE,
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }
}

/// Encodes everything in the OpenMetrics text format (serve with [`CONTENT_TYPE`]).
pub fn encode(tables: Arc<dyn TableSource>, server: &ServerStats, gauges: &Gauges, subsystems: Subsystems) -> String {
    encode_format(Format::OpenMetrics, tables, server, gauges, subsystems)
}

/// The collectors of the subsystems that are on (snapshots, tuning, shadow tables, the router,
/// state files), each made by its subsystem from its own figures; a scrape encodes them after
/// the server's own families.
pub type Subsystems = Vec<Box<dyn Collector>>;

/// Encodes everything in the given format (serve with [`Format::content_type`]), with the
/// process figures read from `/proc/self` now.
pub fn encode_format(
    format: Format,
    tables: Arc<dyn TableSource>,
    server: &ServerStats,
    gauges: &Gauges,
    subsystems: Subsystems,
) -> String {
    let mut out = String::with_capacity(4096);
    let result = write_with(&mut out, format, tables, server, gauges, subsystems, ProcessStats::read());
    // Writing to a String cannot fail, and the collectors only pass errors through.
    debug_assert!(result.is_ok(), "encoding metrics failed");
    out
}

/// [`encode_format`] into `out` as it is encoded, a few KiB at a time: `/metrics` streams it to
/// the client. `Err` when `out` fails (the client is gone).
pub fn write_format(
    out: &mut dyn fmt::Write,
    format: Format,
    tables: Arc<dyn TableSource>,
    server: &ServerStats,
    gauges: &Gauges,
    subsystems: Subsystems,
) -> fmt::Result {
    write_with(out, format, tables, server, gauges, subsystems, ProcessStats::read())
}

/// [`write_format`] with these process figures (the tests give fixed ones).
fn write_with(
    mut out: &mut dyn fmt::Write,
    format: Format,
    tables: Arc<dyn TableSource>,
    server: &ServerStats,
    gauges: &Gauges,
    subsystems: Subsystems,
    process: Option<ProcessStats>,
) -> fmt::Result {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BuildCollector));
    registry.register_collector(Box::new(TablesCollector(tables.clone())));
    registry.register_collector(Box::new(TableLoadsCollector(tables)));
    registry.register_collector(Box::new(ServerCollector(server.totals())));
    registry.register_collector(Box::new(GaugesCollector {
        uptime_seconds: gauges.uptime_seconds,
        load: gauges.load,
        inflight: gauges.inflight,
        open_connections: gauges.open_connections,
        request_memory: gauges.request_memory,
    }));
    for collector in subsystems {
        registry.register_collector(collector);
    }
    if let Some(process) = process {
        registry.register_collector(Box::new(ProcessCollector(process)));
    }
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        Format::Prometheus => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
    }
}

/// One table's figures, summed over the stripes when a family is encoded.
#[derive(Debug)]
struct TableTotals<'a> {
    /// Non-zero decision counts by rule id.
    matched: Vec<(&'a str, u64)>,
    /// Non-zero warning counts by rule id.
    warnings: Vec<(&'a str, u64)>,
    no_match: u64,
    invalid: u64,
    /// Upper bound in seconds (last: +Inf), non-cumulative count.
    buckets: Vec<(f64, u64)>,
    count: u64,
    sum_seconds: f64,
}

#[derive(Debug)]
struct ServerTotals {
    responses: [[u64; CODE_LABELS]; 2],
    accepted: u64,
    rejected: u64,
    timeouts: u64,
    write_timeouts: u64,
    closed: [u64; Closed::ALL.len()],
    reloads_ok: u64,
    reloads_failed: u64,
    last_reload_ok: f64,
}

/// The families of every served table, each table's counters summed as it is encoded.
#[derive(Debug)]
struct TablesCollector(Arc<dyn TableSource>);

impl Collector for TablesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let help = "Decisions by table, rule and outcome (matched, default: no rule matched, invalid_input)";
        let mut m = encoder.encode_descriptor("clef_decisions", help, None, MetricType::Counter)?;
        self.0.each_table(&mut |view| {
            let t = view.stats.totals();
            for (rule, n) in &t.matched {
                let labels = [("table", view.name), ("rule", rule), ("outcome", "matched")];
                ConstCounter::new(*n).encode(m.encode_family(&labels)?)?;
            }
            let labels = [("table", view.name), ("rule", ""), ("outcome", "default")];
            ConstCounter::new(t.no_match).encode(m.encode_family(&labels)?)?;
            let labels = [("table", view.name), ("rule", ""), ("outcome", "invalid_input")];
            ConstCounter::new(t.invalid).encode(m.encode_family(&labels)?)
        })?;

        let help = "Time to decide, by table: parsing the request body, evaluating the rules and rendering the \
                    answer body (not reading the request or sending the answer); invalid inputs are not timed";
        let mut m = encoder.encode_descriptor("clef_decision_duration_seconds", help, None, MetricType::Histogram)?;
        self.0.each_table(&mut |view| {
            let t = view.stats.totals();
            let labels = [("table", view.name)];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(t.sum_seconds, t.count, &t.buckets, None)
        })?;

        let help = "Rule evaluation errors reported as decision warnings, by table and rule";
        let mut m = encoder.encode_descriptor("clef_evaluation_warnings", help, None, MetricType::Counter)?;
        self.0.each_table(&mut |view| {
            for (rule, n) in &view.stats.totals().warnings {
                let labels = [("table", view.name), ("rule", rule)];
                ConstCounter::new(*n).encode(m.encode_family(&labels)?)?;
            }
            Ok(())
        })?;

        let help = "Tables being served, with their version and kind";
        let mut m = encoder.encode_descriptor("clef_table", help, None, MetricType::Info)?;
        self.0.each_table(&mut |view| {
            m.encode_info(&[("table", view.name), ("version", view.version), ("kind", view.kind)])
        })
    }
}

#[derive(Debug)]
struct ServerCollector(ServerTotals);

impl Collector for ServerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        let help = "HTTP responses by listener (main, admin) and status code (or class)";
        let mut m = encoder.encode_descriptor("clef_http_responses", help, None, MetricType::Counter)?;
        for (listener, counts) in LISTENERS.iter().zip(&s.responses) {
            for (i, &n) in counts.iter().enumerate().filter(|(_, n)| **n != 0) {
                let code = code_label(i);
                let labels = [("listener", *listener), ("code", code.as_str())];
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }

        let counters = [
            ("clef_connections_accepted", "Client connections accepted", s.accepted),
            ("clef_connections_rejected", "Client connections refused because max_connections were open", s.rejected),
            ("clef_request_timeouts", "Requests that did not arrive within the read timeout", s.timeouts),
            (
                "clef_write_timeouts",
                "Connections dropped because their answers made no progress for the write timeout",
                s.write_timeouts,
            ),
        ];
        for (name, help, value) in counters {
            ConstCounter::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)?;
        }

        let help = "Client connections closed, by reason (client, idle_timeout, draining, connection_close: an \
                    answer said Connection: close, read_timeout, write_timeout, read_error, write_error)";
        let mut m = encoder.encode_descriptor("clef_connections_closed", help, None, MetricType::Counter)?;
        for (why, n) in Closed::ALL.iter().zip(s.closed) {
            ConstCounter::new(n).encode(m.encode_family(&[("reason", why.label())])?)?;
        }

        let help = "Table reloads by result (ok: every table loaded or unchanged, failed: at least one failed)";
        let mut m = encoder.encode_descriptor("clef_reloads", help, None, MetricType::Counter)?;
        ConstCounter::new(s.reloads_ok).encode(m.encode_family(&[("result", "ok")])?)?;
        ConstCounter::new(s.reloads_failed).encode(m.encode_family(&[("result", "failed")])?)?;

        let help = "Unix time of the last successful reload (0: none yet)";
        let m =
            encoder.encode_descriptor("clef_last_reload_success_timestamp_seconds", help, None, MetricType::Gauge)?;
        ConstGauge::new(s.last_reload_ok).encode(m)
    }
}

/// `clef_build_info`: which clef this is.
#[derive(Debug)]
struct BuildCollector;

impl Collector for BuildCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let help = "The clef build serving, as its version";
        let mut m = encoder.encode_descriptor("clef_build", help, None, MetricType::Info)?;
        m.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])
    }
}

/// Per table name: whether its latest file fails to load, and how often its loads failed.
#[derive(Debug)]
struct TableLoadsCollector(Arc<dyn TableSource>);

impl Collector for TableLoadsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let help = "1 while the table's latest file fails to load (an older version may still serve), else 0";
        let mut m = encoder.encode_descriptor("clef_table_load_failing", help, None, MetricType::Gauge)?;
        let mut failing = 0u64;
        self.0.each_load(&mut |t| {
            failing += u64::from(t.failing);
            ConstGauge::new(u64::from(t.failing)).encode(m.encode_family(&[("table", t.name)])?)
        })?;

        let help = "Failed loads of the table's file since the server started, at start and on reloads";
        let mut m = encoder.encode_descriptor("clef_table_load_failures", help, None, MetricType::Counter)?;
        self.0.each_load(&mut |t| ConstCounter::new(t.failures).encode(m.encode_family(&[("table", t.name)])?))?;

        let help = "Tables whose latest file failed to load (an older version may still serve)";
        let m = encoder.encode_descriptor("clef_table_load_errors", help, None, MetricType::Gauge)?;
        ConstGauge::new(failing).encode(m)
    }
}

#[derive(Debug)]
struct GaugesCollector {
    uptime_seconds: f64,
    load: f64,
    inflight: u64,
    open_connections: u64,
    request_memory: u64,
}

impl Collector for GaugesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let floats = [
            ("clef_uptime_seconds", "Seconds since the server started", self.uptime_seconds),
            ("clef_load", "Recent share of worker time spent handling requests", self.load),
        ];
        let ints = [
            ("clef_inflight_requests", "Requests being handled now", self.inflight),
            ("clef_open_connections", "Open client connections", self.open_connections),
            (
                "clef_request_memory_bytes",
                "Memory held by requests larger than a connection's base buffer, and by answers sent whole",
                self.request_memory,
            ),
        ];
        for (name, help, value) in floats {
            ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        for (name, help, value) in ints {
            ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// The process figures, under the names every Prometheus client library uses for them.
#[derive(Debug)]
struct ProcessCollector(ProcessStats);

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let p = &self.0;
        let help = "Total user and system CPU time spent in seconds";
        let m = encoder.encode_descriptor("process_cpu_seconds", help, None, MetricType::Counter)?;
        ConstCounter::new(p.cpu_seconds).encode(m)?;
        let help = "Start time of the process since unix epoch in seconds";
        let m = encoder.encode_descriptor("process_start_time_seconds", help, None, MetricType::Gauge)?;
        ConstGauge::new(p.start_time_seconds).encode(m)?;
        let ints = [
            ("process_resident_memory_bytes", "Resident memory size in bytes", p.resident_memory_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", p.virtual_memory_bytes),
            ("process_open_fds", "Number of open file descriptors", p.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", p.max_fds),
        ];
        for (name, help, value) in ints {
            ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    }

    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    /// Parses `{k="v",...}` (the text after the metric name), returning the labels and the rest.
    fn parse_labels(s: &str) -> (Vec<(String, String)>, &str) {
        let mut labels = Vec::new();
        let Some(mut rest) = s.strip_prefix('{') else { return (labels, s) };
        loop {
            let eq = rest.find('=').expect("label without =");
            let key = &rest[..eq];
            assert!(is_name(key) && !key.contains(':'), "bad label name {key:?}");
            rest = rest[eq + 1..].strip_prefix('"').expect("label value not quoted");
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next().expect("unterminated label value") {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next().expect("dangling escape").1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => panic!("bad escape \\{c}"),
                    },
                    (_, '\n') => panic!("raw newline in label value"),
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_owned(), value));
            rest = &rest[end + 1..];
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else {
                return (labels, rest.strip_prefix('}').expect("labels not closed"));
            }
        }
    }

    /// Checks every line is a `# HELP`/`# TYPE` comment, `# EOF` (last line, OpenMetrics only)
    /// or `name{labels} value`, and that every sample belongs to a family announced by `# TYPE`.
    fn parse(text: &str, format: Format) -> Vec<Sample> {
        assert!(text.ends_with('\n'));
        let lines: Vec<&str> = text.lines().collect();
        let mut samples = Vec::new();
        let mut families: Vec<(String, String)> = Vec::new();
        let mut helped: Vec<String> = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if let Some(comment) = line.strip_prefix("# ") {
                if comment == "EOF" {
                    assert_eq!(format, Format::OpenMetrics, "# EOF in the Prometheus format");
                    assert_eq!(i, lines.len() - 1, "# EOF before the end");
                    continue;
                }
                let (kind, rest) = comment.split_once(' ').expect("bare comment");
                let (name, arg) = rest.split_once(' ').expect("comment without argument");
                assert!(is_name(name), "bad name in {line:?}");
                match kind {
                    "HELP" => {
                        assert!(!arg.is_empty());
                        helped.push(name.to_owned());
                    }
                    "TYPE" => {
                        let allowed: &[&str] = match format {
                            Format::OpenMetrics => &["counter", "gauge", "histogram", "info"],
                            Format::Prometheus => &["counter", "gauge", "histogram"],
                        };
                        assert!(allowed.contains(&arg), "type {arg} in {line:?}");
                        assert_eq!(helped.last().map(String::as_str), Some(name), "TYPE without HELP");
                        assert!(families.iter().all(|(n, _)| n != name), "family {name} twice");
                        families.push((name.to_owned(), arg.to_owned()));
                    }
                    _ => panic!("unexpected comment {line:?}"),
                }
                continue;
            }
            let name_end = line.find(['{', ' ']).expect("sample without value");
            let name = &line[..name_end];
            assert!(is_name(name), "bad metric name in {line:?}");
            let (labels, rest) = parse_labels(&line[name_end..]);
            let value: f64 = rest.strip_prefix(' ').expect("no space before value").parse().expect("bad value");
            let (family, kind) = families.last().expect("sample before # TYPE");
            let suffixes: &[&str] = match (format, kind.as_str()) {
                (Format::OpenMetrics, "counter") => &["_total"],
                (Format::OpenMetrics, "info") => &["_info"],
                (_, "histogram") => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            assert!(suffixes.iter().any(|s| name == format!("{family}{s}")), "{name} outside family {family}");
            samples.push(Sample { name: name.to_owned(), labels, value });
        }
        assert_eq!(format == Format::OpenMetrics, text.ends_with("# EOF\n"));
        samples
    }

    /// The value of the series with exactly these labels (in any order).
    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<f64> = samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
            })
            .map(|s| s.value)
            .collect();
        assert!(found.len() <= 1, "duplicate series {name}{labels:?}");
        found.first().copied()
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// Every table name the server knows (`never` has never loaded), with its load state.
    fn loads() -> Vec<(String, bool, u64)> {
        vec![("risk".into(), false, 0), ("idle".into(), true, 2), ("never".into(), true, 5)]
    }

    /// Served tables as a scrape sees them (and [`loads`]).
    fn listed(served: Vec<(&str, &str, &str, TableStats)>) -> Arc<dyn TableSource> {
        let served = served.into_iter().map(|(n, v, k, s)| (n.to_owned(), v.to_owned(), k.to_owned(), Arc::new(s)));
        Arc::new(TableList { served: served.collect(), loads: loads() })
    }

    /// What [`encode_format`] writes, in one string.
    fn encoded(format: Format, tables: Arc<dyn TableSource>, server: &ServerStats, process: ProcessStats) -> String {
        let mut out = String::new();
        write_with(&mut out, format, tables, server, &gauges(), Vec::new(), Some(process)).unwrap();
        out
    }

    fn gauges() -> Gauges {
        Gauges { uptime_seconds: 12.5, inflight: 3, load: 0.25, open_connections: 7, ..Gauges::default() }
    }

    const PROCESS: ProcessStats = ProcessStats {
        cpu_seconds: 1.25,
        resident_memory_bytes: 6_815_744,
        virtual_memory_bytes: 1 << 30,
        start_time_seconds: 1_700_000_000.25,
        open_fds: 12,
        max_fds: 65_536,
    };

    #[test]
    fn bucket_bounds_are_inclusive_nanoseconds() {
        assert_eq!(
            BOUNDS_NS,
            [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 5_000_000, 25_000_000]
        );
        let stats = TableStats::with_stripes(ids(&["a"]), 1);
        for ns in [0, 1_000, 1_001, 25_000_000, 25_000_001] {
            stats.record(Some(0), ns, &[]);
        }
        let t = stats.cell_sums();
        assert_eq!(&t[BUCKETS..BUCKETS + 3], &[2, 1, 0]);
        assert_eq!(t[BUCKETS + N_BUCKETS - 1], 1);
        assert_eq!(t[BUCKETS + N_BUCKETS], 1);
        assert_eq!(t[SUM_NS], 1_000 + 1_001 + 25_000_000 + 25_000_001);
    }

    #[test]
    fn counts_from_several_threads_sum() {
        const THREADS: usize = 8;
        const N: u64 = 10_000;
        // Two stripes for eight threads: collisions must still count correctly.
        for stats in [TableStats::new(ids(&["r0", "r1", "r2"])), TableStats::with_stripes(ids(&["r0", "r1", "r2"]), 2)]
        {
            let server = ServerStats::new();
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (stats, server) = (&stats, &server);
                    s.spawn(move || {
                        for i in 0..N {
                            let rule = if i % 10 == 0 { None } else { Some(t % 3) };
                            stats.record(rule, 1_500, if i % 4 == 0 { &[2] } else { &[] });
                            if i % 100 == 0 {
                                stats.record_invalid_input();
                            }
                            server.record_response(t % 2 == 1, 200);
                            server.connection_accepted();
                        }
                    });
                }
            });
            let t = stats.cell_sums();
            let total = THREADS as u64 * N;
            let matched = total - total / 10;
            let per_rule = |r: usize| (0..THREADS).filter(|t| t % 3 == r).count() as u64 * (N - N / 10);
            assert_eq!(&t[FIXED..FIXED + 3], &[per_rule(0), per_rule(1), per_rule(2)]);
            assert_eq!(t[FIXED..FIXED + 3].iter().sum::<u64>(), matched);
            assert_eq!(t[NO_MATCH], total / 10);
            assert_eq!(t[INVALID], THREADS as u64 * N / 100);
            assert_eq!(&t[FIXED + 3..], &[0, 0, total / 4]);
            assert_eq!(t[BUCKETS + 1], total);
            assert_eq!(t[SUM_NS], total * 1_500);
            let s = server.totals();
            assert_eq!(s.responses[0][code_index(200)], total / 2);
            assert_eq!(s.responses[1][code_index(200)], total / 2);
            assert_eq!(s.accepted, total);
        }
    }

    fn sample_output(format: Format) -> String {
        let risk = TableStats::new(ids(&["r1", "r2", "r3"]));
        risk.record(Some(0), 500, &[]);
        risk.record(Some(0), 1_500, &[2]);
        risk.record(None, 30_000_000, &[]);
        risk.record_invalid_input();
        let empty = TableStats::new(Vec::new());
        let server = ServerStats::new();
        for _ in 0..3 {
            server.record_response(false, 200);
        }
        server.record_response(true, 404);
        server.record_response(false, 418);
        server.record_response(false, 42);
        server.connection_accepted();
        server.connection_accepted();
        server.connection_rejected();
        server.request_timed_out();
        server.reload_finished(true, 1_700_000_000.5);
        server.reload_finished(false, 1_700_000_100.0);
        let tables = listed(vec![("risk", "sha256:ab12", "jev", risk), ("idle", "v0", "flash", empty)]);
        encoded(format, tables, &server, PROCESS)
    }

    fn check_sample_output(format: Format) {
        let text = sample_output(format);
        let s = parse(&text, format);
        let d = "clef_decisions_total";
        assert_eq!(value(&s, d, &[("table", "risk"), ("rule", "r1"), ("outcome", "matched")]), Some(2.0));
        assert_eq!(value(&s, d, &[("table", "risk"), ("rule", "r2"), ("outcome", "matched")]), None);
        assert_eq!(value(&s, d, &[("table", "risk"), ("rule", ""), ("outcome", "default")]), Some(1.0));
        assert_eq!(value(&s, d, &[("table", "risk"), ("rule", ""), ("outcome", "invalid_input")]), Some(1.0));
        // Table-level series are always there.
        assert_eq!(value(&s, d, &[("table", "idle"), ("rule", ""), ("outcome", "default")]), Some(0.0));
        assert_eq!(value(&s, d, &[("table", "idle"), ("rule", ""), ("outcome", "invalid_input")]), Some(0.0));
        assert_eq!(s.iter().filter(|x| x.name == d).count(), 5);

        let w = "clef_evaluation_warnings_total";
        assert_eq!(value(&s, w, &[("table", "risk"), ("rule", "r3")]), Some(1.0));
        assert_eq!(s.iter().filter(|x| x.name == w).count(), 1);

        let info = "clef_table_info";
        assert_eq!(value(&s, info, &[("table", "risk"), ("version", "sha256:ab12"), ("kind", "jev")]), Some(1.0));
        assert_eq!(value(&s, info, &[("table", "idle"), ("version", "v0"), ("kind", "flash")]), Some(1.0));

        for (table, count, sum) in [("risk", 3.0, 0.030_002), ("idle", 0.0, 0.0)] {
            let h = "clef_decision_duration_seconds";
            assert_eq!(value(&s, &format!("{h}_count"), &[("table", table)]), Some(count));
            let got_sum = value(&s, &format!("{h}_sum"), &[("table", table)]).unwrap();
            assert!((got_sum - sum).abs() < 1e-12, "{got_sum} != {sum}");
            let buckets: Vec<(f64, f64)> = s
                .iter()
                .filter(|x| {
                    x.name == format!("{h}_bucket") && x.labels.iter().any(|l| l == &("table".into(), table.into()))
                })
                .map(|x| (x.labels.iter().find(|(k, _)| k == "le").unwrap().1.parse().unwrap(), x.value))
                .collect();
            assert_eq!(buckets.len(), N_BUCKETS + 1);
            for ((le, _), us) in buckets.iter().zip(LATENCY_BUCKETS_US) {
                assert_eq!(*le, us / 1e6);
            }
            assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "not cumulative: {buckets:?}");
            assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count));
            if table == "risk" {
                // 500 ns and 1500 ns in the first two buckets; 30 ms only in +Inf.
                assert_eq!(buckets[0].1, 1.0);
                assert_eq!(buckets[1].1, 2.0);
                assert_eq!(buckets[N_BUCKETS - 1].1, 2.0);
            }
        }

        let r = "clef_http_responses_total";
        assert_eq!(value(&s, r, &[("listener", "main"), ("code", "200")]), Some(3.0));
        assert_eq!(value(&s, r, &[("listener", "admin"), ("code", "404")]), Some(1.0));
        assert_eq!(value(&s, r, &[("listener", "main"), ("code", "4xx")]), Some(1.0));
        assert_eq!(value(&s, r, &[("listener", "main"), ("code", "other")]), Some(1.0));
        assert_eq!(s.iter().filter(|x| x.name == r).count(), 4);

        assert_eq!(value(&s, "clef_connections_accepted_total", &[]), Some(2.0));
        assert_eq!(value(&s, "clef_connections_rejected_total", &[]), Some(1.0));
        assert_eq!(value(&s, "clef_request_timeouts_total", &[]), Some(1.0));
        assert_eq!(value(&s, "clef_reloads_total", &[("result", "ok")]), Some(1.0));
        assert_eq!(value(&s, "clef_reloads_total", &[("result", "failed")]), Some(1.0));
        assert_eq!(value(&s, "clef_last_reload_success_timestamp_seconds", &[]), Some(1_700_000_000.5));
        assert_eq!(value(&s, "clef_uptime_seconds", &[]), Some(12.5));
        assert_eq!(value(&s, "clef_inflight_requests", &[]), Some(3.0));
        assert_eq!(value(&s, "clef_load", &[]), Some(0.25));
        assert_eq!(value(&s, "clef_open_connections", &[]), Some(7.0));
        assert_eq!(value(&s, "clef_table_load_errors", &[]), Some(2.0));
        for (table, failing, failures) in [("risk", 0.0, 0.0), ("idle", 1.0, 2.0), ("never", 1.0, 5.0)] {
            assert_eq!(value(&s, "clef_table_load_failing", &[("table", table)]), Some(failing));
            assert_eq!(value(&s, "clef_table_load_failures_total", &[("table", table)]), Some(failures));
        }
        assert_eq!(value(&s, "clef_build_info", &[("version", env!("CARGO_PKG_VERSION"))]), Some(1.0));

        assert_eq!(value(&s, "process_cpu_seconds_total", &[]), Some(1.25));
        assert_eq!(value(&s, "process_resident_memory_bytes", &[]), Some(6_815_744.0));
        assert_eq!(value(&s, "process_virtual_memory_bytes", &[]), Some(1_073_741_824.0));
        assert_eq!(value(&s, "process_start_time_seconds", &[]), Some(1_700_000_000.25));
        assert_eq!(value(&s, "process_open_fds", &[]), Some(12.0));
        assert_eq!(value(&s, "process_max_fds", &[]), Some(65_536.0));
    }

    #[test]
    fn encodes_openmetrics() {
        check_sample_output(Format::OpenMetrics);
        let text = sample_output(Format::OpenMetrics);
        assert!(text.contains("# TYPE clef_decisions counter\n"));
        assert!(text.contains("# TYPE clef_table info\n"));
        assert!(text.contains("# TYPE clef_build info\n"));
        assert!(text.contains("# TYPE process_cpu_seconds counter\n"));
        assert!(text.ends_with("\n# EOF\n"));
    }

    #[test]
    fn encodes_prometheus_text() {
        check_sample_output(Format::Prometheus);
        let text = sample_output(Format::Prometheus);
        assert!(text.contains("# TYPE clef_decisions_total counter\n"));
        assert!(text.contains("# TYPE clef_table_info gauge\n"));
        assert!(text.contains("# TYPE clef_build_info gauge\n"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
    }

    #[test]
    fn encode_is_openmetrics() {
        let server = ServerStats::default();
        let none = || -> Arc<dyn TableSource> { Arc::new(TableList::default()) };
        let out = encode(none(), &server, &Gauges::default(), Vec::new());
        // The process figures move between two scrapes; everything else must be the same.
        let steady = |text: &str| -> Vec<String> {
            text.lines().filter(|l| !l.contains("process_")).map(str::to_owned).collect()
        };
        assert_eq!(
            steady(&out),
            steady(&encode_format(Format::OpenMetrics, none(), &server, &Gauges::default(), Vec::new()))
        );
        assert!(out.contains("# HELP clef_decisions Decisions by table"));
        assert_eq!(
            value(&parse(&out, Format::OpenMetrics), "clef_last_reload_success_timestamp_seconds", &[]),
            Some(0.0)
        );
    }

    #[test]
    fn process_figures_are_read_from_proc() {
        let before = ProcessStats::read().expect("/proc/self on Linux");
        // Burn a little CPU, hold a descriptor, touch 8 MiB.
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let memory = std::hint::black_box(vec![1u8; 8 << 20]);
        let after = ProcessStats::read().unwrap();
        assert!(after.cpu_seconds > before.cpu_seconds, "{before:?} {after:?}");
        // Other tests open and close files meanwhile: only a floor holds (stdio, `file`, the
        // folder being read).
        assert!(after.open_fds >= 5 && after.open_fds <= after.max_fds, "{after:?}");
        assert!(after.resident_memory_bytes >= 8 << 20, "{after:?}");
        assert!(after.virtual_memory_bytes >= after.resident_memory_bytes, "{after:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        // The test binary started at most a few minutes ago (btime has whole seconds).
        assert!(after.start_time_seconds <= now + 1.0 && after.start_time_seconds > now - 600.0, "{after:?} {now}");
        assert_eq!(after.start_time_seconds, before.start_time_seconds);
        drop((file, memory));
    }

    #[test]
    fn label_values_are_escaped() {
        let name = "we\"ird\\name";
        let rule = "line\nbreak \"q\"";
        let stats = TableStats::new(vec![rule.to_owned()]);
        stats.record(Some(0), 10, &[0]);
        let tables = listed(vec![(name, "v\\1", "jev", stats)]);
        for format in [Format::OpenMetrics, Format::Prometheus] {
            let text = encoded(format, tables.clone(), &ServerStats::new(), PROCESS);
            assert!(text.contains(r#"table="we\"ird\\name""#), "{text}");
            assert!(text.contains(r#"rule="line\nbreak \"q\"""#), "{text}");
            let s = parse(&text, format);
            let labels = [("table", name), ("rule", rule), ("outcome", "matched")];
            assert_eq!(value(&s, "clef_decisions_total", &labels), Some(1.0));
            assert_eq!(value(&s, "clef_evaluation_warnings_total", &[("table", name), ("rule", rule)]), Some(1.0));
            let info = [("table", name), ("version", "v\\1"), ("kind", "jev")];
            assert_eq!(value(&s, "clef_table_info", &info), Some(1.0));
        }
    }

    #[test]
    fn status_codes_and_classes() {
        assert_eq!(code_label(code_index(200)), "200");
        assert_eq!(code_label(code_index(503)), "503");
        assert_eq!(code_label(code_index(101)), "1xx");
        assert_eq!(code_label(code_index(207)), "2xx");
        assert_eq!(code_label(code_index(418)), "4xx");
        assert_eq!(code_label(code_index(599)), "5xx");
        assert_eq!(code_label(code_index(600)), "other");
        assert_eq!(code_label(code_index(0)), "other");
        assert!(CODES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn format_from_accept() {
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
        assert_eq!(Format::OpenMetrics.content_type(), CONTENT_TYPE);
        assert_eq!(Format::Prometheus.content_type(), "text/plain; version=0.0.4; charset=utf-8");
    }
}
