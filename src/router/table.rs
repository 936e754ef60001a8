//! The instance table the prober publishes and each worker caches (its shard), the health
//! state it is built from, and the choice made on it.
//!
//! The table is immutable: the prober builds a new one from [`Control`] (under the router's
//! lock, off the request path) and the request path only reads it. See the module comment of
//! [`crate::router`] for why that makes the request path free of locks and shared writes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::probe::Health;
use super::{mix64, Ask, Field, Plan, Policy, Router, Target, INFLIGHT_LOAD, REGION_BONUS, STALE_AFTER};

/// Points each instance has on a table's hash ring.
const RING_POINTS: u64 = 64;
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
        Control { generation: 0, probed: vec![probed; instances], failover: BTreeMap::new() }
    }

    /// Applies a probe's result to instance `index`.
    pub fn apply_probe(&mut self, router: &Router, index: usize, result: Result<Health, String>, now: Instant) {
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
                        p.ejected_until = None;
                        InstanceState::Healthy
                    }
                    other => other,
                };
            }
            Err(error) => {
                p.probes_failed += 1;
                p.latency = None;
                p.last_error = Some(error);
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

/// What the request path reads of one instance.
#[derive(Debug, Clone, Copy)]
struct View {
    addr: Option<SocketAddr>,
    /// the load it reported
    load: f64,
    /// [`REGION_BONUS`] when in our region
    bonus: f64,
    /// 1 while probes are fresh, down to 0 at [`STALE_AFTER`]
    freshness: f64,
}

/// The instances that serve one table.
#[derive(Debug, Default)]
struct Candidates {
    /// candidate instances (healthy or kept)
    members: Vec<u32>,
    /// running sums of their published scores, for the weighted draw
    cumulative: Vec<f64>,
    /// (point, instance) sorted by point, for `policy: hash`; local's points included
    ring: Vec<(u64, u32)>,
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
}

/// One published state of every instance: immutable, read by every worker.
#[derive(Debug)]
pub struct InstanceTable {
    generation: u64,
    router_uid: u64,
    views: Box<[View]>,
    by_table: FxHashMap<Box<str>, Candidates>,
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
            views: Box::new([]),
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

    /// Builds the table from the health state at `now`.
    pub(crate) fn build(router: &Router, control: &Control, now: Instant) -> InstanceTable {
        let interval = Duration::from_millis(router.config.health.interval_ms);
        let ours = router.config.region.as_str();
        let mut views = Vec::with_capacity(router.specs.len());
        let mut by_table: FxHashMap<Box<str>, Candidates> = FxHashMap::default();
        let mut status = Vec::with_capacity(router.specs.len());
        for (i, (spec, p)) in router.specs.iter().zip(&control.probed).enumerate() {
            let local = i == router.local;
            let bonus = if !ours.is_empty() && spec.region == ours { REGION_BONUS } else { 0.0 };
            let freshness = match p.last_ok {
                _ if local => 1.0,
                None => 0.0,
                Some(at) => freshness(now.saturating_duration_since(at), interval),
            };
            let load = p.health.as_ref().map_or(1.0, |h| h.load);
            views.push(View { addr: p.addr, load, bonus, freshness });
            let candidate = !local
                && matches!(p.state, InstanceState::Healthy | InstanceState::Unhealthy)
                && p.addr.is_some()
                && freshness > 0.0;
            if let Some(health) = p.health.as_ref().filter(|_| !local) {
                for (table, _) in &health.tables {
                    let entry = by_table.entry(table.as_str().into()).or_default();
                    if candidate {
                        entry.members.push(i as u32);
                    }
                }
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
            });
        }
        let hashing = router.config.policy == Policy::Hash;
        for candidates in by_table.values_mut() {
            let mut sum = 0.0;
            candidates.cumulative = candidates
                .members
                .iter()
                .map(|&m| {
                    sum += published_score(&views[m as usize]);
                    sum
                })
                .collect();
            if hashing {
                let ring_of = |i: u32| {
                    let id_hash = router.specs[i as usize].id_hash;
                    (0..RING_POINTS).map(move |v| (mix64(id_hash ^ mix64(v.wrapping_add(1))), i))
                };
                let local = router.local as u32;
                candidates.ring = candidates.members.iter().copied().chain([local]).flat_map(ring_of).collect();
                candidates.ring.sort_unstable();
            }
        }
        InstanceTable {
            generation: control.generation,
            router_uid: router.uid,
            views: views.into(),
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
        if let (Policy::Hash, Some(key)) = (router.config.policy, ask.key) {
            return self.plan_by_hash(router, candidates, ask, key);
        }
        let members = &candidates.members;
        if members.is_empty() {
            return if ask.local_serves { Plan::Local } else { Plan::NoHealthy };
        }
        let (a, b) = draw_two(candidates);
        let score = |i: u32| self.score(router, i as usize);
        let (sa, sb) = (score(a), b.map_or(f64::MIN, score));
        let (best, best_score, other, other_score) = match b {
            Some(b) if sb > sa => (b, sb, Some(a), sa),
            _ => (a, sa, b, sb),
        };
        let local_score = if ask.local_serves {
            1.0 - ask.local_load.clamp(0.0, 1.0) + self.views[router.local].bonus
        } else {
            f64::MIN
        };
        if ask.local_serves && local_score >= best_score {
            return Plan::Local;
        }
        let retry = other.filter(|_| !(ask.local_serves && local_score >= other_score));
        Plan::Forward { first: self.target(best), retry: retry.map(|i| self.target(i)), local_serves: ask.local_serves }
    }

    /// `policy: hash`: the first eligible instance clockwise from the key's point, the next
    /// distinct one for the retry.
    fn plan_by_hash(&self, router: &Router, candidates: &Candidates, ask: &Ask<'_>, key: u64) -> Plan {
        let ring = &candidates.ring;
        let local = router.local as u32;
        let eligible = |i: u32| i != local || ask.local_serves;
        let start = ring.partition_point(|&(point, _)| point < key);
        let mut picked: [Option<u32>; 2] = [None, None];
        // with fewer than two eligible instances there is no retry to look for
        let eligible_count = candidates.members.len() + usize::from(ask.local_serves);
        for k in 0..ring.len() {
            let (_, i) = ring[(start + k) % ring.len()];
            if !eligible(i) || picked[0] == Some(i) {
                continue;
            }
            if picked[0].is_none() {
                picked[0] = Some(i);
                if i == local || eligible_count < 2 {
                    break;
                }
            } else {
                picked[1] = Some(i);
                break;
            }
        }
        match picked {
            [None, _] => Plan::NoHealthy,
            [Some(i), _] if i == local => Plan::Local,
            [Some(first), retry] => Plan::Forward {
                first: self.target(first),
                retry: retry.filter(|&r| r != local).map(|r| self.target(r)),
                local_serves: ask.local_serves,
            },
        }
    }

    fn target(&self, index: u32) -> Target {
        let addr = self.views[index as usize].addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        Target { index, addr }
    }

    /// The score now: freshness × (1 − load raised by our in-flight requests + region bonus).
    #[inline]
    fn score(&self, router: &Router, index: usize) -> f64 {
        let v = &self.views[index];
        let load = (v.load + router.our_inflight(index) * INFLIGHT_LOAD).min(1.0);
        v.freshness * (1.0 - load + v.bonus)
    }
}

/// The score as published (without our in-flight requests): the weight of the draw.
fn published_score(v: &View) -> f64 {
    (v.freshness * (1.0 - v.load.clamp(0.0, 1.0) + v.bonus)).max(0.0)
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
/// two or more (the second `None` when there is one).
fn draw_two(c: &Candidates) -> (u32, Option<u32>) {
    let n = c.members.len();
    let total = c.cumulative.last().copied().unwrap_or(0.0);
    let pick = || -> usize {
        let r = next_random();
        if total > 0.0 {
            let x = (r >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * total;
            c.cumulative.partition_point(|&s| s <= x).min(n - 1)
        } else {
            (r % n as u64) as usize
        }
    };
    let a = pick();
    if n == 1 {
        return (c.members[a], None);
    }
    let mut b = pick();
    for _ in 0..2 {
        if b != a {
            break;
        }
        b = pick();
    }
    if b == a {
        b = (a + 1) % n;
    }
    (c.members[a], Some(c.members[b]))
}

thread_local! {
    /// This worker's cached table (its shard).
    static SHARD: RefCell<Option<Arc<InstanceTable>>> = const { RefCell::new(None) };
    /// This worker's random state (wyrand).
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f` on this worker's copy of `router`'s table, fetching the published one when the
/// generation moved on (or the cached one is another router's).
#[inline]
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
            s = crate::snapshot::id::random_u64() | 1;
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
