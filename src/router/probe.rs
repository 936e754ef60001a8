//! Active health probing, off the request path.
//!
//! One thread ("clef-router") owns the health state. Every `health.interval_ms` it starts one
//! may coroutine per remote instance; each asks `GET /health` with a hard deadline of
//! `health.timeout_ms` covering connect, send and the whole answer, and sends its result back
//! over a channel. A hung instance therefore holds one parked coroutine until its deadline and
//! nothing else: other probes run beside it, and the request path never waits for a probe.
//! Every tick (50 ms) the thread also sums the forwards that failed since the last tick
//! (passive outlier detection), and publishes a new instance table when anything changed (and
//! at least once a second, so that freshness decays).
// Indexes are instance numbers of the configured list the prober was built from.
#![allow(clippy::indexing_slicing)]

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{self, ClientError, Exchange};
use super::Router;

/// How often the prober looks at forward failures and probe results.
const TICK: Duration = Duration::from_millis(50);
/// The table is published at least this often, for freshness decay.
const REPUBLISH: Duration = Duration::from_secs(1);
/// The largest `/health` answer read (1,000 tables with their versions fit).
const MAX_HEALTH_BYTES: usize = 1 << 20;

/// What an instance's `/health` said.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// its `load`, in [0, 1]
    pub load: f64,
    /// its `inflight`
    pub inflight: u64,
    /// the tables it serves, with their versions
    pub tables: Vec<(String, String)>,
    /// how long the probe took
    pub latency: Duration,
}

/// Starts the prober thread.
pub(crate) fn spawn(router: Arc<Router>) {
    let spawned = std::thread::Builder::new().name("clef-router".into()).spawn(move || run(&router));
    if let Err(e) = spawned {
        log::error!("router: cannot start the prober thread: {e}; instances are never probed");
    }
}

fn run(router: &Router) {
    let (tx, rx) = crossbeam::channel::unbounded::<(usize, Result<Health, ProbeError>)>();
    let interval = Duration::from_millis(router.config.health.interval_ms);
    let timeout = Duration::from_millis(router.config.health.timeout_ms);
    let mut next_round = Instant::now();
    let mut published = Instant::now();
    while !router.stop.load(std::sync::atomic::Ordering::Relaxed) {
        let now = Instant::now();
        let mut changed = false;
        if now >= next_round {
            next_round = (next_round + interval).max(now);
            let mut control = router.control.lock();
            let mut unresolved = Vec::new();
            for (i, spec) in router.specs.iter().enumerate() {
                let p = &mut control.probed[i];
                if i == router.local || p.outstanding {
                    continue;
                }
                let Some(text) = &spec.addr else { continue };
                // Re-resolved each round, so a name that moves is followed; an IP costs nothing.
                let addr = match resolve(text) {
                    Ok(a) => a,
                    Err(e) => {
                        unresolved.push((i, Err(ProbeError::Unresolved { name: text.clone(), error: e })));
                        continue;
                    }
                };
                p.addr = Some(addr);
                p.outstanding = true;
                let tx = tx.clone();
                let host = text.clone();
                may::go!(move || {
                    let _ = tx.send((i, probe(addr, &host, timeout)));
                });
            }
            for (i, result) in unresolved {
                control.apply_probe(router, i, result, now);
                changed = true;
            }
        }
        let wait = TICK.min(next_round.saturating_duration_since(Instant::now()));
        let mut results = Vec::new();
        if let Ok(first) = rx.recv_timeout(wait) {
            results.push(first);
            results.extend(rx.try_iter());
        }
        let now = Instant::now();
        let mut control = router.control.lock();
        for (i, result) in results {
            control.probed[i].outstanding = false;
            control.apply_probe(router, i, result, now);
            changed = true;
        }
        let before: Vec<_> = control.probed.iter().map(|p| (p.state, p.fails_in_row)).collect();
        router.apply_passive(&mut control, now);
        changed |= control.probed.iter().map(|p| (p.state, p.fails_in_row)).ne(before.iter().copied());
        if changed || now.duration_since(published) >= REPUBLISH {
            router.publish(&mut control);
            published = now;
        }
    }
}

fn resolve(text: &str) -> std::io::Result<SocketAddr> {
    text.to_socket_addrs()?.next().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))
}

/// Why a probe found an instance not ready for requests.
#[derive(Debug)]
pub enum ProbeError {
    /// the instance's address names no address now
    Unresolved {
        /// the address as configured
        name: String,
        /// why it did not resolve
        error: std::io::Error,
    },
    /// the exchange failed: no connection, no answer in time, a broken or invalid answer
    Exchange(ClientError),
    /// `/health` answered with this status, not 200
    Status(u16),
    /// `/health` answered something that is not clef's health (serde's reason)
    NotClef(String),
    /// `/health` says this status, not `ok` or `degraded` (`draining`)
    Says(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Unresolved { name, error } => write!(f, "cannot resolve {name}: {error}"),
            ProbeError::Exchange(e) => e.fmt(f),
            ProbeError::Status(status) => write!(f, "/health answered {status}"),
            ProbeError::NotClef(why) => write!(f, "/health answered something else than clef's: {why}"),
            ProbeError::Says(status) => write!(f, "/health says {status}"),
        }
    }
}

/// Asks `addr` for `/health` within `timeout` (connect and answer together).
pub(crate) fn probe(addr: SocketAddr, host: &str, timeout: Duration) -> Result<Health, ProbeError> {
    let started = Instant::now();
    let deadline = started + timeout;
    let request = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let answer =
        client::exchange_fresh(addr, request.as_bytes(), deadline, MAX_HEALTH_BYTES).map_err(ProbeError::Exchange)?;
    let latency = started.elapsed();
    parse_health(&answer, latency)
}

/// Reads a `/health` answer: status `ok` or `degraded` is healthy; `draining` (503) is not.
fn parse_health(answer: &Exchange, latency: Duration) -> Result<Health, ProbeError> {
    if answer.status != 200 {
        return Err(ProbeError::Status(answer.status));
    }
    #[derive(serde::Deserialize)]
    struct Body {
        status: String,
        #[serde(default)]
        tables: serde_json::Map<String, serde_json::Value>,
        #[serde(default)]
        inflight: u64,
        #[serde(default)]
        load: f64,
    }
    let body: Body = serde_json::from_slice(&answer.body).map_err(|e| ProbeError::NotClef(e.to_string()))?;
    if body.status != "ok" && body.status != "degraded" {
        return Err(ProbeError::Says(body.status));
    }
    let tables = body.tables.into_iter().map(|(name, v)| (name, v.as_str().unwrap_or_default().to_string())).collect();
    Ok(Health { load: body.load.clamp(0.0, 1.0), inflight: body.inflight, tables, latency })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Exchange {
        Exchange { status, body: body.as_bytes().to_vec(), keep_alive: false }
    }

    #[test]
    fn health_answers() {
        let ok = parse_health(
            &answer(200, r#"{"status":"ok","tables":{"risk":"abc"},"inflight":3,"load":0.25}"#),
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!((ok.load, ok.inflight, ok.tables), (0.25, 3, vec![("risk".into(), "abc".into())]));
        assert!(parse_health(&answer(503, r#"{"status":"draining"}"#), Duration::ZERO).is_err());
        assert!(parse_health(&answer(200, r#"{"status":"draining"}"#), Duration::ZERO).is_err());
        assert!(parse_health(&answer(200, "hello"), Duration::ZERO).is_err());
    }
}
