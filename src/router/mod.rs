//! The Clef router (SPEC §7): per request, which instance decides — the in-process engine
//! (`local`) or another clef box with the same HTTP API. It never decides itself.
//!
//! # Key idea: an immutable instance table, published, cached per worker
//!
//! Everything the request path needs to choose an instance — which instances serve which
//! table, each one's reported load, region bonus and freshness, the alias table for the
//! power-of-two-choices draw, the hash ring, the hand-set failovers — is an [`InstanceTable`]
//! that is never written after it is built. The prober thread ([`probe`]) owns the mutable
//! health state; after each change it builds a new table, stores it in an `ArcSwap` and then
//! bumps a generation number. Each worker thread keeps the table it last saw in a thread-local
//! cache (its shard) and compares generations per request: that is a read of one cache line
//! that only the prober writes, and only when the generation moved does the worker touch the
//! `ArcSwap` (and the `Arc`'s count). The one thing that changes between publications, our
//! own in-flight requests to each peer, lives in per-worker counters ([`Counters`]: one block
//! of cache lines per worker stripe) that a worker writes only in its own block. So the request
//! path takes no lock and writes no line another core writes.
//!
//! # Why it is correct
//!
//! - A table is built from one consistent state under the prober's lock and published whole, so
//!   a worker sees either the old or the new table, never a mix. Its staleness is bounded by
//!   the tick of the prober (50 ms) and each probe round; freshness decay is computed at
//!   publication, which happens at least once a second.
//! - The thread-local cache is borrowed only inside [`Router::route`], which never yields: the
//!   choice is returned as a [`Target`] (an index and a socket address, both `Copy`), and the
//!   forward that follows (which yields, and may resume on another thread) holds no reference
//!   to per-thread state. The in-flight guard remembers the stripe it counted in and gives the
//!   count back there, so the sum over stripes stays exact even when the coroutine migrated.
//! - Choosing costs O(1) in the number of instances: a table-name lookup, two draws from an
//!   alias table (or one lookup in the hash ring's bucket index, see [`choice`]) and two score
//!   comparisons, reading a few cache lines of compact per-table arrays and of this worker's
//!   counters. Tables whose candidates are the same instances share these arrays. A table a
//!   worker lets go of is freed by the prober, never on the request path.
//! - Loops cannot happen: a forwarded request carries `X-Clef-Forwarded`, and a request that
//!   carries it is decided locally (or by the fallback table), never forwarded again.
//! - `policy: hash` uses a consistent-hash ring over the healthy instances of a table (64
//!   points each); removing an instance removes only its points, so only its keys move.
// Instance indexes come from the published instance table they index.
#![allow(clippy::indexing_slicing)]

mod choice;
mod client;
pub mod config;
pub mod forward;
mod instances;
mod probe;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use crossbeam::utils::CachePadded;
use parking_lot::Mutex;

pub use config::{HealthConfig, InstanceConfig, Policy, RouterConfig, LOCAL_ID};
use instances::Control;
pub use instances::{InstanceState, InstanceTable, Status};
pub use probe::Health;

/// How much each of our own requests in flight to an instance adds to its reported load when
/// scores are compared: 20 concurrent forwards make an idle instance look fully loaded.
pub const INFLIGHT_LOAD: f64 = 0.05;
/// The bonus of an instance in our region.
pub const REGION_BONUS: f64 = 0.3;
/// A score decays to zero once the last successful probe is this old.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// The router: its instances, the published table and the per-worker counters.
pub struct Router {
    /// distinguishes routers in one process (the tests and benchmarks make several)
    uid: u64,
    config: RouterConfig,
    specs: Box<[Spec]>,
    local: usize,
    /// what `X-Clef-Forwarded` says we are
    our_name: String,
    hash_path: Option<Vec<String>>,
    generation: CachePadded<AtomicU64>,
    published: ArcSwap<InstanceTable>,
    counters: Counters,
    control: Mutex<Control>,
    /// whether any table is switched by hand (`POST /router/failover`)
    any_failover: CachePadded<AtomicBool>,
    stop: AtomicBool,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("instances", &self.specs.len()).finish_non_exhaustive()
    }
}

/// What the configuration says of one instance.
#[derive(Debug, Clone)]
struct Spec {
    id: String,
    addr: Option<String>,
    region: String,
    /// 64-bit hash of the id, for the ring
    id_hash: u64,
}

/// An instance chosen to decide: its index among the instances and where it listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// index in `router.instances`
    pub index: u32,
    /// its decision listener
    pub addr: std::net::SocketAddr,
}

/// Who decides a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// the local engine
    Local,
    /// another instance, with the next best one for a retry (`None`: local is the next best,
    /// or no other instance serves the table)
    Forward {
        /// the best instance
        first: Target,
        /// the instance (its index) a failed forward is retried on; its address is looked up
        /// then, in the table the worker holds after the first attempt
        retry: Option<u32>,
        /// whether local serves the table (then it is the last resort after `retry`)
        local_serves: bool,
    },
    /// the table is switched to this one by hand (`POST /router/failover`)
    Failover(Box<str>),
    /// some instance serves the table, but none is healthy now
    NoHealthy,
    /// no instance serves the table (the local engine answers `unknown_table`)
    Unknown,
}

/// What [`Router::route`] needs to know of a request.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// the table asked for
    pub table: &'a str,
    /// whether the local engine serves it
    pub local_serves: bool,
    /// the local engine's load now (`/health`'s `load`)
    pub local_load: f64,
    /// the hash of the `hash_key` value, for `policy: hash`
    pub key: Option<u64>,
}

impl Router {
    /// A router for `config` (which [`RouterConfig::problems`] found valid); nothing is
    /// probed until [`Router::start`].
    pub fn new(config: &RouterConfig) -> Arc<Router> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let specs: Box<[Spec]> = config
            .instances
            .iter()
            .map(|i| Spec {
                id: i.id.clone(),
                addr: i.addr.clone(),
                region: if i.id == LOCAL_ID { config.region.clone() } else { i.region.clone().unwrap_or_default() },
                id_hash: hash64(i.id.as_bytes()),
            })
            .collect();
        let local = specs.iter().position(|s| s.id == LOCAL_ID).unwrap_or(0);
        let control = Control::new(specs.len());
        let our_name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_else(|| "clef".into());
        let router = Router {
            uid: NEXT.fetch_add(1, Ordering::Relaxed),
            config: config.clone(),
            local,
            our_name,
            hash_path: config.hash_key.as_ref().map(|k| k.split('.').map(str::to_string).collect()),
            generation: CachePadded::new(AtomicU64::new(0)),
            published: ArcSwap::from_pointee(InstanceTable::empty()),
            counters: Counters::new(specs.len()),
            control: Mutex::new(control),
            any_failover: CachePadded::new(AtomicBool::new(false)),
            stop: AtomicBool::new(false),
            specs,
        };
        router.publish(&mut router.control.lock());
        Arc::new(router)
    }

    /// Starts the prober thread (active health checks of every remote instance).
    pub fn start(self: &Arc<Self>) {
        probe::spawn(self.clone());
    }

    /// Stops the prober at its next tick.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// The id the configuration gives instance `index`.
    pub fn instance_id(&self, index: u32) -> &str {
        self.specs.get(index as usize).map_or("", |s| s.id.as_str())
    }

    /// What forwarded requests say in `X-Clef-Forwarded`: this host's name.
    pub fn our_name(&self) -> &str {
        &self.our_name
    }

    /// The dotted path of `router.hash_key`, for `policy: hash`.
    pub fn hash_path(&self) -> Option<&[String]> {
        match self.config.policy {
            Policy::Hash => self.hash_path.as_deref(),
            Policy::Score => None,
        }
    }

    /// The table now published (for `GET /router` and the tests).
    pub fn table(&self) -> Arc<InstanceTable> {
        self.published.load_full()
    }

    /// Chooses who decides a request (SPEC §7). Never yields, never locks; writes only this
    /// worker's counters.
    pub fn route(&self, ask: &Ask<'_>) -> Plan {
        let local_first = ask.local_serves && ask.local_load < self.config.local_max_load;
        if local_first && self.config.policy == Policy::Score {
            // A hand-set failover still wins; it is in the table, looked at only while one is set
            // (a flag only the admin endpoints write).
            if self.any_failover.load(Ordering::Relaxed) {
                if let Some(to) = self.with_table(|t| t.failover_for(ask.table)) {
                    return Plan::Failover(to);
                }
            }
            self.counters.add(self.local, Field::Routed, 1);
            return Plan::Local;
        }
        let plan = self.with_table(|t| t.plan(self, ask));
        // A remote instance's routed count is its first attempts (forwarded − retried), counted
        // by `begin_forward`: not a write of its own here.
        if plan == Plan::Local {
            self.counters.add(self.local, Field::Routed, 1);
        }
        plan
    }

    /// Runs `f` on this worker's cached table, refreshing it when the prober published a
    /// newer one. `f` must not yield (it borrows thread-local state).
    #[inline]
    fn with_table<R>(&self, f: impl FnOnce(&InstanceTable) -> R) -> R {
        instances::with_shard(self, f)
    }

    /// Our own requests in flight to `index`, as the worker of `stripe` counted them.
    #[inline]
    fn our_inflight_at(&self, stripe: usize, index: usize) -> u64 {
        (self.counters.get_at(stripe, index, Field::Inflight) as i64).max(0) as u64
    }

    /// Where instance `index` is now, from this worker's table (`None`: not known).
    pub fn target(&self, index: u32) -> Option<Target> {
        self.with_table(|t| t.target(index))
    }

    /// Counts a forward to `target` as in flight until the guard drops; `retry`: a retry.
    pub fn begin_forward(&self, target: Target, retry: bool) -> ForwardGuard<'_> {
        let index = target.index as usize;
        let stripe = self.counters.stripe_here();
        self.counters.add_at(stripe, index, Field::Forwarded, 1);
        if retry {
            self.counters.add_at(stripe, index, Field::Retried, 1);
        }
        self.counters.add_at(stripe, index, Field::Inflight, 1);
        ForwardGuard { router: self, index, stripe, done: false }
    }

    /// The table `table` is switched to by hand, if it is.
    pub fn failover_for(&self, table: &str) -> Option<String> {
        self.with_table(|t| t.failover_for(table)).map(String::from)
    }

    /// Switches `table` to `to` by hand (`POST /router/failover`) until [`Router::clear_failover`].
    pub fn set_failover(&self, table: &str, to: &str) {
        let mut control = self.control.lock();
        control.failover.insert(table.to_string(), to.to_string());
        self.publish(&mut control);
        self.any_failover.store(true, Ordering::Release);
    }

    /// Ends a hand-set failover; false when `table` had none.
    pub fn clear_failover(&self, table: &str) -> bool {
        let mut control = self.control.lock();
        let had = control.failover.remove(table).is_some();
        if had {
            self.any_failover.store(!control.failover.is_empty(), Ordering::Release);
            self.publish(&mut control);
        }
        had
    }

    /// Sets what each instance `index` at `addr` reported (as successful probes would) and
    /// publishes once: for benchmarks and tests that route without probing.
    pub fn report(&self, reports: impl IntoIterator<Item = (usize, std::net::SocketAddr, Health)>) {
        let mut control = self.control.lock();
        let now = Instant::now();
        for (index, addr, health) in reports {
            let Some(p) = control.probed.get_mut(index) else { continue };
            p.addr = Some(addr);
            control.apply_probe(self, index, Ok(health), now);
        }
        self.publish(&mut control);
    }

    /// Builds the table from `control` and publishes it.
    fn publish(&self, control: &mut Control) {
        control.generation += 1;
        let table = InstanceTable::build(self, control, &self.published.load(), Instant::now());
        let old = self.published.swap(Arc::new(table));
        self.generation.store(control.generation, Ordering::Release);
        // Out of the `ArcSwap`, a table gains no new holders: a count of 1 is ours alone.
        control.retired.push(old);
        control.retired.retain(|t| Arc::strong_count(t) > 1);
    }

    /// Every instance's figures, for `GET /metrics`.
    /// The router's families of a scrape, as they are now.
    pub fn collector(&self) -> RouterCollector {
        RouterCollector(self.figures())
    }

    /// Every instance's figures now.
    pub fn figures(&self) -> Vec<InstanceFigures> {
        let table = self.table();
        self.specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let status = &table.status[i];
                // retries first: each is counted after its forward, so this never goes negative
                let retried = self.counters.sum(i, Field::Retried);
                let forwarded = self.counters.sum(i, Field::Forwarded);
                InstanceFigures {
                    id: s.id.clone(),
                    routed: if i == self.local {
                        self.counters.sum(i, Field::Routed)
                    } else {
                        forwarded.saturating_sub(retried)
                    },
                    forwarded,
                    retried,
                    failed: self.counters.sum(i, Field::Failed),
                    ejections: status.ejections,
                    probes_ok: status.probes_ok,
                    probes_failed: status.probes_failed,
                    probe_seconds: status.probe_latency.map_or(0.0, |d| d.as_secs_f64()),
                    healthy: matches!(status.state, InstanceState::Healthy | InstanceState::Local),
                }
            })
            .collect()
    }
}

/// Keeps one forward counted in flight; says how it ended.
pub struct ForwardGuard<'r> {
    router: &'r Router,
    index: usize,
    stripe: usize,
    done: bool,
}

impl ForwardGuard<'_> {
    /// The peer answered (any status it may give: 2xx, or a 4xx passed through).
    pub fn succeeded(mut self) {
        self.router.counters.add(self.index, Field::Succeeded, 1);
        self.done = true;
    }

    /// The forward failed (connection, timeout, a 5xx, an answer beyond the limits): counts
    /// towards the instance's ejection.
    pub fn failed(mut self) {
        self.router.counters.add(self.index, Field::Failed, 1);
        self.done = true;
    }
}

impl Drop for ForwardGuard<'_> {
    fn drop(&mut self) {
        // given back in the stripe it was counted in, wherever the coroutine runs now
        self.router.counters.add_at(self.stripe, self.index, Field::Inflight, u64::MAX);
        if !self.done {
            self.router.counters.add(self.index, Field::Failed, 1);
        }
    }
}

/// One instance's figures for `GET /metrics` (`clef_router_…`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceFigures {
    /// the instance id
    pub id: String,
    /// requests the router chose it for
    pub routed: u64,
    /// forwards sent to it (retries included)
    pub forwarded: u64,
    /// retries sent to it after another instance failed
    pub retried: u64,
    /// forwards to it that failed
    pub failed: u64,
    /// times it was ejected
    pub ejections: u64,
    /// probes it answered
    pub probes_ok: u64,
    /// probes it failed
    pub probes_failed: u64,
    /// how long its last probe took
    pub probe_seconds: f64,
    /// whether it is a candidate now
    pub healthy: bool,
}

/// The per-instance counters of [`Counters`].
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
enum Field {
    Inflight,
    Routed,
    Forwarded,
    Retried,
    Failed,
    Succeeded,
}

const FIELDS: usize = 6;
const LANES: usize = 16;

/// Per-worker counters per instance: each worker stripe owns whole cache lines
/// (`CachePadded` blocks of 16 counters), so workers never write each other's lines. Within a
/// stripe, one field of every instance, then the next field.
struct Counters {
    stripes: usize,
    instances: usize,
    chunks_per_stripe: usize,
    cells: Box<[CachePadded<[AtomicU64; LANES]>]>,
}

impl Counters {
    fn new(instances: usize) -> Counters {
        let stripes = crate::per_core::machine_stripes();
        let chunks_per_stripe = (instances * FIELDS).div_ceil(LANES).max(1);
        let cells = (0..stripes * chunks_per_stripe)
            .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        Counters { stripes, instances, chunks_per_stripe, cells }
    }

    /// This worker's stripe. Never inlined, for the reason [`instances::with_shard`] gives: a forward
    /// counts before and after it yields.
    #[inline(never)]
    fn stripe_here(&self) -> usize {
        crate::per_core::worker_stripe() & (self.stripes - 1)
    }

    #[inline]
    fn cell(&self, stripe: usize, index: usize, field: Field) -> &AtomicU64 {
        // field-major: the in-flight counts a route decision reads lie together (8 KB for
        // 1,000 instances), not one per 48 bytes
        let i = field as usize * self.instances + index;
        &self.cells[stripe * self.chunks_per_stripe + i / LANES][i % LANES]
    }

    #[inline]
    fn add_at(&self, stripe: usize, index: usize, field: Field, n: u64) {
        self.cell(stripe, index, field).fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    fn add(&self, index: usize, field: Field, n: u64) {
        self.add_at(self.stripe_here(), index, field, n);
    }

    #[inline]
    fn get_at(&self, stripe: usize, index: usize, field: Field) -> u64 {
        self.cell(stripe, index, field).load(Ordering::Relaxed)
    }

    /// The sum over every stripe (wrapping: in-flight counts go down in another stripe's cell
    /// only through [`ForwardGuard`], which gives back where it took).
    fn sum(&self, index: usize, field: Field) -> u64 {
        (0..self.stripes).fold(0u64, |acc, s| acc.wrapping_add(self.cell(s, index, field).load(Ordering::Relaxed)))
    }
}

/// A stable 64-bit hash (FNV-1a folded through a SplitMix finalizer): the same in every
/// process and version, so the ring places instances alike after a restart.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// SplitMix64's finalizer: spreads every input bit over the whole word.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The router's figures for `GET /metrics`, one series per instance.
#[derive(Debug)]
pub struct RouterCollector(pub Vec<InstanceFigures>);

impl prometheus_client::collector::Collector for RouterCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;
        type Pick = fn(&InstanceFigures) -> u64;
        let counters: [(&str, &str, Pick); 5] = [
            ("clef_router_routed", "Requests the router chose the instance for", |f| f.routed),
            ("clef_router_forwarded", "Requests forwarded to the instance, retries included", |f| f.forwarded),
            ("clef_router_retried", "Retries sent to the instance after another one failed", |f| f.retried),
            ("clef_router_failed", "Forwards to the instance that failed", |f| f.failed),
            ("clef_router_ejections", "Times the instance was ejected", |f| f.ejections),
        ];
        for (name, help, pick) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for f in &self.0 {
                ConstCounter::new(pick(f)).encode(family.encode_family(&[("instance", f.id.as_str())])?)?;
            }
        }
        let help = "Health probes of the instance, by result";
        let mut family = encoder.encode_descriptor("clef_router_probes", help, None, MetricType::Counter)?;
        for f in &self.0 {
            for (result, n) in [("ok", f.probes_ok), ("failed", f.probes_failed)] {
                let labels = [("instance", f.id.as_str()), ("result", result)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        let help = "How long the instance's last successful health probe took";
        let mut family = encoder.encode_descriptor("clef_router_probe_seconds", help, None, MetricType::Gauge)?;
        for f in &self.0 {
            ConstGauge::new(f.probe_seconds).encode(family.encode_family(&[("instance", f.id.as_str())])?)?;
        }
        let help = "Whether the instance is a routing candidate (1) or not (0: ejected or never probed)";
        let mut family = encoder.encode_descriptor("clef_router_healthy", help, None, MetricType::Gauge)?;
        for f in &self.0 {
            ConstGauge::new(i64::from(f.healthy)).encode(family.encode_family(&[("instance", f.id.as_str())])?)?;
        }
        Ok(())
    }
}
