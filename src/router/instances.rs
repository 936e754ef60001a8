//! The instance table the prober publishes and each worker caches (its shard), the health
//! state it is built from, and the choice made on it.
//!
//! The table is immutable: the prober builds a new one from [`Control`] (under the router's
//! lock, off the request path) and the request path only reads it. See the module comment of
//! [`crate::router`] for why that makes the request path free of locks and shared writes.
// Instance indexes come from the table they index (built once per probe round).
#![allow(clippy::indexing_slicing)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::choice::{select, AliasTable, Member, Ring};
use super::probe::Health;
use super::{mix64, Ask, Field, Plan, Policy, Router, Spec, Target, INFLIGHT_LOAD, REGION_BONUS, STALE_AFTER};

/// Points each instance has on a table's hash ring, as long as the ring stays within
/// [`RING_BUDGET`] points.
const RING_POINTS: u64 = 64;
/// The most points a ring has before each instance gets fewer of them (never below
/// [`RING_POINTS_MIN`]): 16,384 points are 128 KB, which stays in a core's L2 cache, so a hash
/// lookup among 1,000 instances costs about what it costs among 2 (64 points each would be
/// 512 KB, and every lookup a miss to L3). The price is balance: an instance's share of keys
/// varies by about `1/√points` (12% at 64 points, 25% at 16).
const RING_BUDGET: u64 = 16_384;
/// The fewest points an instance has, however many instances there are.
const RING_POINTS_MIN: u64 = 16;

/// Points per instance on every ring of a router with `configured` instances. It depends on
/// the configuration only, never on which instances are healthy, so an instance leaving moves
/// only its own keys; and an instance's points are the first ones of one sequence, so a
/// configuration with a few more instances moves few keys besides the newcomers'.
fn ring_points(configured: usize) -> u64 {
    (RING_BUDGET / configured.max(1) as u64).clamp(RING_POINTS_MIN, RING_POINTS)
}
/// Ejections after which the ejection time stops growing (`ejection_ms × 10`: 300 s by default).
const MAX_EJECTION_FACTOR: u64 = 10;

/// Where an instance stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    /// this process
    Local,
    /// never answered a probe yet: not a candidate
    Unknown,
    /// answering: a candidate
    Healthy,
    /// failed `unhealthy_after` times in a row but kept, since at most half of the remote
    /// instances may be ejected at once: still a candidate
    Unhealthy,
    /// ejected: not a candidate until its ejection time is over and probes bring it back
    Ejected,
}

impl InstanceState {
    /// The name `GET /router` shows.
    pub fn name(self) -> &'static str {
        match self {
            InstanceState::Local => "local",
            InstanceState::Unknown => "unknown",
            InstanceState::Healthy => "healthy",
            InstanceState::Unhealthy => "unhealthy",
            InstanceState::Ejected => "ejected",
        }
    }
}

/// The prober's state of one instance.
#[derive(Debug, Clone)]
pub(crate) struct Probed {
    pub state: InstanceState,
    pub fails_in_row: u32,
    pub oks_in_row: u32,
    pub ejections: u64,
    pub ejected_until: Option<Instant>,
    pub last_ok: Option<Instant>,
    pub last_probe: Option<Instant>,
    pub latency: Option<Duration>,
    pub last_error: Option<String>,
    pub health: Option<Health>,
    pub addr: Option<SocketAddr>,
    pub probes_ok: u64,
    pub probes_failed: u64,
    /// a probe of it is under way
    pub outstanding: bool,
    /// forwards failed and succeeded, as last summed
    pub passive_seen: (u64, u64),
}

/// The health state of every instance and the hand-set failovers: the prober's and the admin
/// endpoints', behind the router's lock; published as [`InstanceTable`]s.
#[derive(Debug)]
pub(crate) struct Control {
    pub generation: u64,
    pub probed: Vec<Probed>,
    pub failover: BTreeMap<String, String>,
    /// Tables published before, kept until no worker holds them any more, so that the last
    /// reference (and the freeing of a table of 1,000 instances) is dropped here, off the
    /// request path. At most one per worker thread is held (each keeps the one it last saw).
    pub retired: Vec<Arc<InstanceTable>>,
}

impl Control {
    pub fn new(instances: usize) -> Control {
        let probed = Probed {
            state: InstanceState::Unknown,
            fails_in_row: 0,
            oks_in_row: 0,
            ejections: 0,
            ejected_until: None,
            last_ok: None,
            last_probe: None,
            latency: None,
            last_error: None,
            health: None,
            addr: None,
            probes_ok: 0,
            probes_failed: 0,
            outstanding: false,
            passive_seen: (0, 0),
        };
        Control { generation: 0, probed: vec![probed; instances], failover: BTreeMap::new(), retired: Vec::new() }
    }

    /// Applies a probe's result to instance `index`.
    pub fn apply_probe(
        &mut self,
        router: &Router,
        index: usize,
        result: Result<Health, super::probe::ProbeError>,
        now: Instant,
    ) {
        if index == router.local {
            return;
        }
        let healthy_after = router.config.health.healthy_after;
        let p = &mut self.probed[index];
        p.last_probe = Some(now);
        match result {
            Ok(health) => {
                p.probes_ok += 1;
                p.last_ok = Some(now);
                p.latency = Some(health.latency);
                p.health = Some(health);
                p.last_error = None;
                p.fails_in_row = 0;
                let serving_time = p.ejected_until.is_none_or(|until| now >= until);
                // successes count towards a return only once the ejection time is over
                p.oks_in_row = if serving_time { p.oks_in_row.saturating_add(1) } else { 0 };
                p.state = match p.state {
                    InstanceState::Unknown | InstanceState::Healthy => InstanceState::Healthy,
                    InstanceState::Unhealthy | InstanceState::Ejected if p.oks_in_row >= healthy_after => {
                        // said as loudly as the ejection was, so that the log shows when it ended
                        log::warn!(
                            "router: instance {} is healthy again after {} successful probes in a row ({}); it takes requests",
                            router.specs[index].id,
                            p.oks_in_row,
                            if p.state == InstanceState::Ejected { "was ejected" } else { "was failing" },
                        );
                        p.ejected_until = None;
                        InstanceState::Healthy
                    }
                    other => other,
                };
            }
            Err(error) => {
                p.probes_failed += 1;
                p.latency = None;
                p.last_error = Some(error.to_string());
                p.oks_in_row = 0;
                self.failed(router, index, 1, now);
            }
        }
    }

    /// Counts `n` failures in a row of instance `index` (probes or forwards) and ejects it when
    /// they reach `unhealthy_after`, unless half of the remote instances are ejected already.
    pub fn failed(&mut self, router: &Router, index: usize, n: u32, now: Instant) {
        let health = &router.config.health;
        let remotes = self.probed.len().saturating_sub(1);
        let ejected = self.probed.iter().filter(|p| p.state == InstanceState::Ejected).count();
        // Envoy's panic rule: at most half of them, but one always may be
        let may_eject = ejected < (remotes / 2).max(1);
        let p = &mut self.probed[index];
        p.fails_in_row = p.fails_in_row.saturating_add(n);
        p.oks_in_row = 0;
        if p.fails_in_row < health.unhealthy_after {
            return;
        }
        match p.state {
            InstanceState::Healthy | InstanceState::Unhealthy if may_eject => {
                p.ejections += 1;
                let factor = p.ejections.min(MAX_EJECTION_FACTOR);
                p.ejected_until = Some(now + Duration::from_millis(health.ejection_ms.saturating_mul(factor)));
                p.state = InstanceState::Ejected;
                log::warn!(
                    "router: instance {} ejected for {} s after {} failures in a row ({})",
                    router.specs[index].id,
                    health.ejection_ms.saturating_mul(factor) / 1000,
                    p.fails_in_row,
                    p.last_error.as_deref().unwrap_or("failed forwards")
                );
            }
            InstanceState::Healthy => {
                p.state = InstanceState::Unhealthy;
                log::warn!(
                    "router: instance {} is failing but kept: at most half of the remote instances are ejected at once",
                    router.specs[index].id
                );
            }
            _ => {}
        }
    }

    /// Applies the forwards that failed and succeeded since the last look (passive outlier
    /// detection): failures with no success among them continue the streak; a success ends it.
    pub fn apply_passive(&mut self, router: &Router, index: usize, failed: u64, succeeded: u64, now: Instant) {
        let p = &mut self.probed[index];
        let (df, ds) = (failed.wrapping_sub(p.passive_seen.0), succeeded.wrapping_sub(p.passive_seen.1));
        p.passive_seen = (failed, succeeded);
        if ds > 0 {
            p.fails_in_row = 0;
        }
        if df > 0 {
            if p.last_error.is_none() {
                p.last_error = Some("forwards failed".into());
            }
            self.failed(router, index, df.min(u64::from(u32::MAX)) as u32, now);
        }
    }
}

/// The instances that serve one table, as the request path reads them: shared by every table
/// whose candidates are the same instances.
#[derive(Debug, Default)]
struct Candidates {
    /// the candidate instances (healthy or kept), for the weighted draw
    alias: AliasTable,
    /// for `policy: hash`: the rings over them
    rings: Option<Arc<Rings>>,
}

/// What `GET /router` shows of one instance.
#[derive(Debug, Clone)]
pub struct Status {
    /// where it stands
    pub state: InstanceState,
    /// the load it last reported
    pub load: Option<f64>,
    /// the requests in flight it last reported
    pub inflight: Option<u64>,
    /// the tables it serves, with their versions
    pub tables: Vec<(String, String)>,
    /// when it was last probed
    pub last_probe: Option<Instant>,
    /// when it last answered a probe
    pub last_ok: Option<Instant>,
    /// how long the last successful probe took
    pub probe_latency: Option<Duration>,
    /// why the last probe or forward failed
    pub last_error: Option<String>,
    /// times it was ejected
    pub ejections: u64,
    /// when its ejection ends
    pub ejected_until: Option<Instant>,
    /// probes answered
    pub probes_ok: u64,
    /// probes failed
    pub probes_failed: u64,
    /// the address probes and forwards use
    pub addr: Option<SocketAddr>,
    /// its score as published, its weight when the router chooses (`freshness × (1 − load +
    /// region bonus)`): `None` for `local` and for an instance that is not a candidate now
    pub score: Option<f64>,
}

/// One published state of every instance: immutable, read by every worker.
#[derive(Debug)]
pub struct InstanceTable {
    generation: u64,
    router_uid: u64,
    /// per instance, where forwards go
    addrs: Box<[Option<SocketAddr>]>,
    /// `local`'s region bonus
    local_bonus: f32,
    by_table: FxHashMap<Box<str>, Arc<Candidates>>,
    failover: FxHashMap<Box<str>, Box<str>>,
    /// per instance, for `GET /router`
    pub status: Box<[Status]>,
    /// the hand-set failovers, for `GET /router`
    pub failovers: Vec<(String, String)>,
    /// when it was built
    pub built: Instant,
}

impl InstanceTable {
    /// A table that knows nothing yet (before the first publication).
    pub(crate) fn empty() -> InstanceTable {
        InstanceTable {
            generation: 0,
            router_uid: 0,
            addrs: Box::new([]),
            local_bonus: 0.0,
            by_table: FxHashMap::default(),
            failover: FxHashMap::default(),
            status: Box::new([]),
            failovers: Vec::new(),
            built: Instant::now(),
        }
    }

    /// The generation it was published as.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The tables some remote instance reported serving.
    pub fn remote_tables(&self) -> impl Iterator<Item = &str> {
        self.by_table.keys().map(|k| &**k)
    }

    /// Builds the table from the health state at `now`; `previous` (the table published last)
    /// lends the hash rings whose instances did not change.
    pub(crate) fn build(router: &Router, control: &Control, previous: &InstanceTable, now: Instant) -> InstanceTable {
        let interval = Duration::from_millis(router.config.health.interval_ms);
        let ours = router.config.region.as_str();
        let in_region = |spec: &Spec| !ours.is_empty() && spec.region == ours;
        let mut addrs = Vec::with_capacity(router.specs.len());
        // per table, its candidates in instance order
        let mut members_of: BTreeMap<&str, Vec<Member>> = BTreeMap::new();
        let mut status = Vec::with_capacity(router.specs.len());
        for (i, (spec, p)) in router.specs.iter().zip(&control.probed).enumerate() {
            let local = i == router.local;
            let freshness = match p.last_ok {
                _ if local => 1.0,
                None => 0.0,
                Some(at) => freshness(now.saturating_duration_since(at), interval),
            };
            addrs.push(p.addr);
            let candidate = !local
                && matches!(p.state, InstanceState::Healthy | InstanceState::Unhealthy)
                && p.addr.is_some()
                && freshness > 0.0;
            let mut score = None;
            if let Some(health) = p.health.as_ref().filter(|_| !local) {
                let member = Member {
                    instance: i as u32,
                    load: health.load.clamp(0.0, 1.0) as f32,
                    freshness: freshness as f32,
                    in_region: in_region(spec),
                };
                for (table, _) in &health.tables {
                    let entry = members_of.entry(table.as_str()).or_default();
                    if candidate {
                        entry.push(member);
                    }
                }
                score = candidate.then(|| member.weight());
            }
            status.push(Status {
                state: if local { InstanceState::Local } else { p.state },
                load: p.health.as_ref().map(|h| h.load),
                inflight: p.health.as_ref().map(|h| h.inflight),
                tables: p.health.as_ref().map(|h| h.tables.clone()).unwrap_or_default(),
                last_probe: p.last_probe,
                last_ok: p.last_ok,
                probe_latency: p.latency,
                last_error: p.last_error.clone(),
                ejections: p.ejections,
                ejected_until: p.ejected_until.filter(|_| p.state == InstanceState::Ejected),
                probes_ok: p.probes_ok,
                probes_failed: p.probes_failed,
                addr: p.addr,
                score,
            });
        }
        // Tables served by the same instances share their candidates; rings (which depend on
        // the instances only, not on their load) are kept from the previous table.
        let hashing = router.config.policy == Policy::Hash;
        let mut rings: FxHashMap<Vec<u32>, Arc<Rings>> = FxHashMap::default();
        for c in previous.by_table.values() {
            if let Some(r) = &c.rings {
                rings.entry(c.alias.instances().collect()).or_insert_with(|| r.clone());
            }
        }
        let mut shared: FxHashMap<Vec<[u32; 4]>, Arc<Candidates>> = FxHashMap::default();
        let mut by_table = FxHashMap::default();
        for (table, members) in members_of {
            let candidates = shared
                .entry(members.iter().map(Member::bits).collect())
                .or_insert_with(|| {
                    let rings = hashing.then(|| {
                        let instances = members.iter().map(|m| m.instance).collect();
                        rings.entry(instances).or_insert_with_key(|instances| Rings::of(router, instances)).clone()
                    });
                    Arc::new(Candidates { alias: AliasTable::new(&members), rings })
                })
                .clone();
            by_table.insert(table.into(), candidates);
        }
        InstanceTable {
            generation: control.generation,
            router_uid: router.uid,
            addrs: addrs.into(),
            local_bonus: if in_region(&router.specs[router.local]) { REGION_BONUS as f32 } else { 0.0 },
            by_table,
            failover: control.failover.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect(),
            status: status.into(),
            failovers: control.failover.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            built: now,
        }
    }

    /// The table `table` is switched to by hand, if it is.
    pub(crate) fn failover_for(&self, table: &str) -> Option<Box<str>> {
        if self.failover.is_empty() {
            return None;
        }
        self.failover.get(table).cloned()
    }

    /// Who decides `ask` (see [`Router::route`]).
    pub(crate) fn plan(&self, router: &Router, ask: &Ask<'_>) -> Plan {
        if let Some(to) = self.failover_for(ask.table) {
            return Plan::Failover(to);
        }
        let Some(candidates) = self.by_table.get(ask.table) else {
            return if ask.local_serves { Plan::Local } else { Plan::Unknown };
        };
        if let (Some(rings), Some(key)) = (&candidates.rings, ask.key) {
            return self.plan_by_hash(router, rings, ask, key);
        }
        let alias = &candidates.alias;
        if alias.len() == 0 {
            return if ask.local_serves { Plan::Local } else { Plan::NoHealthy };
        }
        let stripe = router.counters.stripe_here();
        let score = |i: usize| {
            let ours = router.our_inflight_at(stripe, alias.instance(i) as usize);
            alias.score(i, ours as f32 * INFLIGHT_LOAD as f32)
        };
        let (a, b) = draw_two(alias);
        let sa = score(a);
        // the better of the two (`a` on a tie), and the other with its score
        let (best, best_score, other) = match b {
            None => (a, sa, None),
            Some(b) => {
                let sb = score(b);
                let best = select(sb > sa, b, a);
                (best, sa.max(sb), Some((best ^ a ^ b, sa.min(sb))))
            }
        };
        let local_score =
            if ask.local_serves { 1.0 - (ask.local_load.clamp(0.0, 1.0) as f32) + self.local_bonus } else { f32::MIN };
        // ties prefer local
        if ask.local_serves && local_score >= best_score {
            return Plan::Local;
        }
        let retry = other.filter(|&(_, other_score)| !(ask.local_serves && local_score >= other_score));
        self.forward(alias.instance(best), retry.map(|(i, _)| alias.instance(i)), ask.local_serves)
    }

    /// Forward to `first`, retry on `retry`, then local when it serves the table. (Every
    /// candidate has an address; were one missing, the next choice stands in.)
    fn forward(&self, first: u32, retry: Option<u32>, local_serves: bool) -> Plan {
        if let Some(first) = self.target(first) {
            return Plan::Forward { first, retry, local_serves };
        }
        match retry.and_then(|r| self.target(r)) {
            Some(first) => Plan::Forward { first, retry: None, local_serves },
            None if local_serves => Plan::Local,
            None => Plan::NoHealthy,
        }
    }

    /// `policy: hash`: the instance that owns the key on the ring of the instances that may
    /// decide (`local` among them when it serves the table), and the next other one clockwise
    /// for the retry.
    fn plan_by_hash(&self, router: &Router, rings: &Rings, ask: &Ask<'_>, key: u64) -> Plan {
        let local = router.local as u32;
        let ring = if ask.local_serves { &rings.with_local } else { &rings.remotes };
        match ring.owner(key) {
            None => Plan::NoHealthy,
            Some((first, _)) if first == local => Plan::Local,
            Some((first, retry)) => self.forward(first, retry.filter(|&r| r != local), ask.local_serves),
        }
    }

    /// Where instance `index` is (`None`: no address known).
    pub(crate) fn target(&self, index: u32) -> Option<Target> {
        Some(Target { index, addr: (*self.addrs.get(index as usize)?)? })
    }
}

/// A table's hash rings over its candidate instances, [`ring_points`] points each: one with
/// `local`'s points too, for when it serves the table, one without. Leaving `local`'s points
/// out is walking past them, so a key goes to the same remote instance either way.
#[derive(Debug)]
struct Rings {
    with_local: Ring,
    remotes: Ring,
}

impl Rings {
    fn of(router: &Router, instances: &[u32]) -> Arc<Rings> {
        let per_instance = ring_points(router.specs.len());
        let points_of = |i: u32| {
            let id_hash = router.specs[i as usize].id_hash;
            (0..per_instance).map(move |v| (Ring::point_of(mix64(id_hash ^ mix64(v.wrapping_add(1)))), i))
        };
        let remotes: Vec<(u32, u32)> = instances.iter().copied().flat_map(points_of).collect();
        let mut with_local = remotes.clone();
        with_local.extend(points_of(router.local as u32));
        Arc::new(Rings { with_local: Ring::new(with_local), remotes: Ring::new(remotes) })
    }
}

/// 1 until the last successful probe is older than the interval, then down linearly to 0 at
/// [`STALE_AFTER`].
fn freshness(age: Duration, interval: Duration) -> f64 {
    if age <= interval {
        return 1.0;
    }
    if interval >= STALE_AFTER {
        return 0.0;
    }
    let span = (STALE_AFTER - interval).as_secs_f64();
    (1.0 - (age - interval).as_secs_f64() / span).max(0.0)
}

/// Two members drawn at random weighted by their published score, distinct when there are
/// two or more (the second `None` when there is one): positions in `alias`.
fn draw_two(alias: &AliasTable) -> (usize, Option<usize>) {
    let n = alias.len();
    let a = alias.draw(next_random());
    if n == 1 {
        return (a, None);
    }
    let mut b = alias.draw(next_random());
    for _ in 0..2 {
        if b != a {
            break;
        }
        b = alias.draw(next_random());
    }
    if b == a {
        b = (a + 1) % n;
    }
    (a, Some(b))
}

thread_local! {
    /// This worker's cached table (its shard).
    static SHARD: RefCell<Option<Arc<InstanceTable>>> = const { RefCell::new(None) };
    /// This worker's random state (wyrand).
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f` on this worker's copy of `router`'s table, fetching the published one when the
/// generation moved on (or the cached one is another router's).
///
/// Never inlined: a forward yields (and may resume on another worker) between two calls, and
/// an inlined thread-local access could reuse the address computed before the yield, on the
/// wrong thread.
#[inline(never)]
pub(crate) fn with_shard<R>(router: &Router, f: impl FnOnce(&InstanceTable) -> R) -> R {
    SHARD.with(|shard| {
        let mut shard = shard.borrow_mut();
        let current = router.generation.load(Ordering::Acquire);
        let stale = shard.as_ref().is_none_or(|t| t.router_uid != router.uid || t.generation < current);
        if stale {
            *shard = Some(router.published.load_full());
        }
        match shard.as_deref() {
            Some(table) => f(table),
            None => f(&InstanceTable::empty()),
        }
    })
}

/// A fast thread-local random number (wyrand), seeded per thread.
#[inline]
fn next_random() -> u64 {
    RANDOM.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = crate::per_core::random_u64() | 1;
        }
        s = s.wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        (t as u64) ^ ((t >> 64) as u64)
    })
}

impl Router {
    /// Sums the forward outcomes of every instance and applies them to the health state
    /// (the prober calls this each tick).
    pub(crate) fn apply_passive(&self, control: &mut Control, now: Instant) {
        for i in 0..self.specs.len() {
            if i == self.local {
                continue;
            }
            let failed = self.counters.sum(i, Field::Failed);
            let succeeded = self.counters.sum(i, Field::Succeeded);
            control.apply_passive(self, i, failed, succeeded, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::{Ask, Health, InstanceConfig, Plan, RouterConfig};

    /// A router in region JP with `local` and peers `p1..=peers`, each in JP and serving `t`
    /// at `load` (local-first off: local's load is always above `local_max_load`).
    fn router_of(peers: usize, load: f64) -> Arc<Router> {
        let mut instances = vec![InstanceConfig { id: "local".into(), addr: None, region: None }];
        for i in 1..=peers {
            instances.push(InstanceConfig {
                id: format!("p{i}"),
                addr: Some(format!("127.0.0.1:{}", 20_000 + i)),
                region: Some("JP".into()),
            });
        }
        let config = RouterConfig { region: "JP".into(), local_max_load: 0.0, instances, ..RouterConfig::default() };
        let router = Router::new(&config);
        router.report((1..=peers).map(|i| {
            let health = Health {
                load,
                inflight: 0,
                tables: vec![("t".into(), "v1".into())],
                latency: Duration::from_micros(100),
            };
            (i, format!("127.0.0.1:{}", 20_000 + i).parse().unwrap(), health)
        }));
        router
    }

    fn ask(local_load: f64) -> Ask<'static> {
        Ask { table: "t", local_serves: true, local_load, key: None }
    }

    #[test]
    fn ties_prefer_local() {
        // local and every peer score 1 − 0.5 + 0.3 (same region, same load)
        let router = router_of(3, 0.5);
        for _ in 0..1000 {
            assert_eq!(router.route(&ask(0.5)), Plan::Local);
        }
        // a peer a little less loaded than local wins
        for _ in 0..1000 {
            assert!(matches!(router.route(&ask(0.6)), Plan::Forward { .. }));
        }
    }

    #[test]
    fn the_nth_ejection_lasts_n_times_the_ejection_time_up_to_ten() {
        let router = router_of(1, 0.5);
        let health = &router.config.health;
        let mut control = Control::new(2);
        control.probed[1].state = InstanceState::Healthy;
        let mut now = Instant::now();
        for n in 1..=12u64 {
            control.failed(&router, 1, health.unhealthy_after, now);
            let p = &control.probed[1];
            assert_eq!((p.state, p.ejections), (InstanceState::Ejected, n));
            let lasts = p.ejected_until.unwrap() - now;
            assert_eq!(lasts, Duration::from_millis(health.ejection_ms * n.min(10)), "ejection {n}");
            // a success before the ejection is over does not bring it back
            control.apply_probe(&router, 1, Ok(healthy()), now + lasts / 2);
            assert_eq!(control.probed[1].state, InstanceState::Ejected);
            // after it, `healthy_after` successes do
            now += lasts;
            for _ in 0..health.healthy_after {
                control.apply_probe(&router, 1, Ok(healthy()), now);
            }
            assert_eq!(control.probed[1].state, InstanceState::Healthy, "after ejection {n}");
        }
        assert_eq!(health.ejection_ms * 10, 300_000, "300 s at most by default");
    }

    #[test]
    fn never_more_than_half_of_the_remote_instances_are_ejected() {
        let router = router_of(5, 0.5);
        let unhealthy_after = router.config.health.unhealthy_after;
        let mut control = Control::new(6);
        for p in &mut control.probed[1..] {
            p.state = InstanceState::Healthy;
        }
        let now = Instant::now();
        for i in 1..=5 {
            control.failed(&router, i, unhealthy_after, now);
        }
        let states: Vec<InstanceState> = control.probed[1..].iter().map(|p| p.state).collect();
        use InstanceState::{Ejected, Unhealthy};
        assert_eq!(states, [Ejected, Ejected, Unhealthy, Unhealthy, Unhealthy]);
    }

    fn healthy() -> Health {
        Health { load: 0.1, inflight: 0, tables: vec![("t".into(), "v1".into())], latency: Duration::from_micros(100) }
    }

    #[test]
    fn rings_of_many_instances_share_a_budget_of_points() {
        assert_eq!(ring_points(2), 64);
        assert_eq!(ring_points(256), 64);
        assert_eq!(ring_points(257), 63);
        assert_eq!(ring_points(1000), 16);
        assert_eq!(ring_points(10_000), 16);
    }

    /// A `policy: hash` router with `local` and peers `p1..=peers`, of which `serving` are
    /// healthy and serve `t`.
    fn hash_router(peers: usize, serving: impl Iterator<Item = usize>) -> Arc<Router> {
        let mut instances = vec![InstanceConfig { id: "local".into(), addr: None, region: None }];
        instances.extend((1..=peers).map(|i| InstanceConfig {
            id: format!("p{i}"),
            addr: Some(format!("127.0.0.1:{}", 20_000 + i)),
            region: None,
        }));
        let config = RouterConfig {
            local_max_load: 0.0,
            policy: Policy::Hash,
            hash_key: Some("user".into()),
            instances,
            ..RouterConfig::default()
        };
        let router = Router::new(&config);
        router.report(serving.map(|i| (i, format!("127.0.0.1:{}", 20_000 + i).parse().unwrap(), healthy())));
        router
    }

    /// With fewer points per instance (400 configured), an instance leaving still moves its
    /// own keys only: the count comes from the configuration, not from who is healthy.
    #[test]
    fn a_large_ring_moves_only_the_keys_of_the_instance_that_left() {
        let peers = 399;
        let all = hash_router(peers, 1..=peers);
        let without = hash_router(peers, (1..=peers).filter(|&i| i != 7));
        let first = |router: &Router, key: u64| match router.route(&Ask {
            table: "t",
            local_serves: false,
            local_load: 1.0,
            key: Some(key),
        }) {
            Plan::Forward { first, .. } => first.index,
            other => panic!("key {key}: {other:?}"),
        };
        let (mut moved, mut owned) = (0, 0);
        for k in 0..20_000u64 {
            let key = mix64(k);
            let before = first(&all, key);
            owned += usize::from(before == 7);
            if before != 7 {
                assert_eq!(first(&without, key), before, "key {key} moved though its instance stayed");
            } else {
                moved += 1;
            }
        }
        assert!(owned > 0 && moved == owned, "instance 7 had keys: {owned}");
    }

    /// Whether `local` serves the table picks the ring with or without its points: a key that
    /// a peer owns goes to that peer either way, with the same retry unless the retry was
    /// `local`; only `local`'s own keys go elsewhere when it does not serve.
    #[test]
    fn local_not_serving_moves_only_its_own_keys() {
        let router = hash_router(5, 1..=5);
        let plan = |key: u64, local_serves: bool| {
            router.route(&Ask { table: "t", local_serves, local_load: 1.0, key: Some(key) })
        };
        let (mut local_keys, mut retries) = (0, 0);
        for k in 0..20_000u64 {
            let key = mix64(k);
            match (plan(key, true), plan(key, false)) {
                (Plan::Local, Plan::Forward { first, retry, .. }) => {
                    local_keys += 1;
                    assert!(retry.is_some_and(|r| r != first.index), "key {key}: a retry on another peer");
                }
                (Plan::Forward { first: a, retry: ra, .. }, Plan::Forward { first: b, retry: rb, .. }) => {
                    assert_eq!(a.index, b.index, "key {key} moved though its peer serves");
                    assert!(ra.is_none() || ra == rb, "key {key}: retry {ra:?} then {rb:?}");
                    retries += usize::from(ra.is_some());
                }
                other => panic!("key {key}: {other:?}"),
            }
        }
        assert!(local_keys > 0 && retries > 0, "local owned {local_keys} keys, {retries} retries");
    }

    #[test]
    fn freshness_decays_linearly_after_the_interval() {
        let i = Duration::from_secs(5);
        assert_eq!(freshness(Duration::from_secs(3), i), 1.0);
        assert_eq!(freshness(Duration::from_secs(5), i), 1.0);
        assert!((freshness(Duration::from_millis(17_500), i) - 0.5).abs() < 1e-9);
        assert_eq!(freshness(Duration::from_secs(30), i), 0.0);
        assert_eq!(freshness(Duration::from_secs(300), i), 0.0);
    }
}
