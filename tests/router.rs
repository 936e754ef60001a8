//! The Clef router (SPEC §7) between real `clef serve` processes on loopback ports, and tiny
//! fake peers (std threads) where a test needs a peer that lies about its load, hangs or fails.
//!
//! To keep `local` from deciding, the routers here either do not serve the table or set
//! `router.local_max_load: 0` (then `local` competes on score like any instance).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value as Json};

/// A table whose every answer names `who`.
fn named_table(who: &str) -> String {
    format!(
        r#"{{"default": {{"who": "{who}"}}, "rules": [{{"id": "big", "condition": "x > 10", "action": {{"who": "{who}", "big": true}}}}]}}"#
    )
}

/// Health timing for tests: probes every 100 ms, ejection after 2 failures for 1 s.
const HEALTH: &str = "{interval_ms: 100, timeout_ms: 80, unhealthy_after: 2, healthy_after: 1, ejection_ms: 1000}";

/// A `router:` section with `local` and `peers` (id, port, region), plus `extra` keys.
fn router_section(extra: &str, peers: &[(&str, u16, &str)]) -> String {
    let mut s =
        format!("router:\n  forward_timeout_ms: 1000\n  health: {HEALTH}\n{extra}  instances:\n    - {{id: local}}\n");
    for (id, port, region) in peers {
        s.push_str(&format!("    - {{id: {id}, addr: 127.0.0.1:{port}, region: {region}}}\n"));
    }
    s
}

fn router_config(extra: &str, peers: &[(&str, u16, &str)]) -> String {
    config("", "", &format!("model:\n  watch_file: false\n{}", router_section(extra, peers)))
}

/// A `clef serve` on `port` (no admin listener) serving `tables`, with `rest` as more config.
fn peer_at(port: u16, tables: &[(&str, String)], rest: &str) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in tables {
        write(dir.path(), &format!("tables/{name}"), text);
    }
    let text = format!(
        "server:\n  host: 127.0.0.1\n  port: {port}\nadmin:\n  listen: \"\"\nmodel:\n  watch_file: false\n{rest}"
    );
    Server::launch(dir, move |_| text.clone().into_bytes(), move |_, _| Some(port))
}

fn peer(port: u16, who: &str) -> Server {
    peer_at(port, &[("t.json", named_table(who))], "")
}

/// `GET /router` (admin) as id → instance.
fn instances(router: &Server) -> serde_json::Map<String, Json> {
    let r = call(router.admin, "GET", "/router", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    body["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| (i["id"].as_str().unwrap().to_string(), i.clone()))
        .collect()
}

fn state(router: &Server, id: &str) -> String {
    instances(router)[id]["state"].as_str().unwrap_or("").to_string()
}

fn wait_state(router: &Server, secs: u64, id: &str, want: &str) {
    router.eventually(secs, &format!("{id} is {want}"), |r| state(r, id) == want);
}

/// Decides `body` with table `t` through the router; returns (status, answer).
fn decide(router: &Server, table: &str, body: &str) -> (u16, Json) {
    let r = router.post(&format!("/decide/{table}"), body);
    let j = serde_json::from_slice(&r.body).unwrap_or(Json::Null);
    (r.status, j)
}

// ---------------------------------------------------------------------------------------------
// A fake peer

/// How a fake peer answers.
#[derive(Clone)]
enum Fake {
    /// `/health` reports `load` and table `t`; `/decide/t` answers `status` naming `who`
    Peer { load: f64, status: u16, who: &'static str },
    /// accepts, reads, and answers nothing for this long, then closes
    Hang(Duration),
}

struct FakePeer {
    port: u16,
    decides: Arc<AtomicUsize>,
    healths: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Drop for FakePeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn fake_peer(behaviour: Fake) -> FakePeer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let (decides, healths, stop) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let (d, h, s) = (decides.clone(), healths.clone(), stop.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if s.load(Ordering::Relaxed) {
                return;
            }
            let Ok(stream) = stream else { continue };
            let (b, d, h) = (behaviour.clone(), d.clone(), h.clone());
            std::thread::spawn(move || serve_fake(stream, &b, &d, &h));
        }
    });
    FakePeer { port, decides, healths, stop }
}

fn serve_fake(mut stream: TcpStream, behaviour: &Fake, decides: &AtomicUsize, healths: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    loop {
        // one request: head, then Content-Length bytes
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + length);
        let (status, body) = match behaviour {
            Fake::Hang(d) => {
                healths.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(*d);
                return;
            }
            Fake::Peer { load, status, who } => {
                if head.starts_with("GET /health") {
                    healths.fetch_add(1, Ordering::Relaxed);
                    (
                        200,
                        format!(
                            r#"{{"status":"ok","uptime_seconds":1,"version":"x","tables":{{"t":"v1"}},"inflight":0,"load":{load}}}"#
                        ),
                    )
                } else {
                    decides.fetch_add(1, Ordering::Relaxed);
                    if *status == 200 {
                        (
                            200,
                            format!(
                                r#"{{"rule_id":null,"matched":false,"action":{{"who":"{who}"}},"timestamp":"2026-01-01T00:00:00.000Z","table":"t","version":"v1","instance":"local"}}"#
                            ),
                        )
                    } else {
                        (*status, r#"{"error":{"code":"boom","message":"fake failure"}}"#.to_string())
                    }
                }
            }
        };
        let answer = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn routes_to_the_best_instance_and_names_it() {
    let busy = fake_peer(Fake::Peer { load: 0.9, status: 200, who: "busy" });
    let idle = fake_peer(Fake::Peer { load: 0.1, status: 200, who: "idle" });
    // local does not serve `t`
    let router = Server::start(
        &router_config("", &[("busy", busy.port, "EU"), ("idle", idle.port, "EU")]),
        &[("other.json", &table("other"))],
    );
    wait_state(&router, 5, "busy", "healthy");
    wait_state(&router, 5, "idle", "healthy");
    let mut to = std::collections::BTreeMap::new();
    for _ in 0..60 {
        let (status, d) = decide(&router, "t", r#"{"x": 1}"#);
        assert_eq!(status, 200, "{d}");
        assert_eq!(d["action"]["who"], d["instance"], "the instance is the id our config gives the peer: {d}");
        *to.entry(d["instance"].as_str().unwrap().to_string()).or_insert(0) += 1;
    }
    assert!(to.get("idle").copied().unwrap_or(0) >= 50, "mostly the less loaded instance: {to:?}");
    let i = instances(&router);
    assert_eq!(i["idle"]["forwarded"].as_u64().unwrap() + i["busy"]["forwarded"].as_u64().unwrap(), 60, "{i:?}");
    assert!(i["idle"]["probes_ok"].as_u64().unwrap() >= 1 && i["idle"]["load"] == json!(0.1), "{i:?}");
    let metrics = router.get("/metrics").text();
    // every per-instance series, with the figures GET /router shows
    let value = |series: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series}: {metrics}"));
        line[series.len()..].trim().parse().unwrap()
    };
    for id in ["idle", "busy"] {
        let forwarded = i[id]["forwarded"].as_u64().unwrap() as f64;
        assert_eq!(value(&format!("clef_router_forwarded_total{{instance=\"{id}\"}}")), forwarded, "{metrics}");
        // nothing failed, so every forward was a first attempt: routed to it
        assert_eq!(value(&format!("clef_router_routed_total{{instance=\"{id}\"}}")), forwarded, "{metrics}");
        assert_eq!(value(&format!("clef_router_retried_total{{instance=\"{id}\"}}")), 0.0, "{metrics}");
        assert_eq!(value(&format!("clef_router_failed_total{{instance=\"{id}\"}}")), 0.0, "{metrics}");
        assert_eq!(value(&format!("clef_router_ejections_total{{instance=\"{id}\"}}")), 0.0, "{metrics}");
        assert_eq!(value(&format!("clef_router_healthy{{instance=\"{id}\"}}")), 1.0, "{metrics}");
        let probes_ok = i[id]["probes_ok"].as_u64().unwrap() as f64;
        assert!(
            value(&format!("clef_router_probes_total{{instance=\"{id}\",result=\"ok\"}}")) >= probes_ok,
            "{metrics}"
        );
        let probe = value(&format!("clef_router_probe_seconds{{instance=\"{id}\"}}"));
        assert!(probe > 0.0 && probe < 1.0, "{metrics}");
    }
}

#[test]
fn prefers_instances_in_our_region() {
    let (jp, us) = (free_port(), free_port());
    let _jp = peer(jp, "jp");
    let _us = peer(us, "us");
    let router = Server::start(
        &router_config("  region: JP\n", &[("us-1", us, "US"), ("jp-1", jp, "JP")]),
        &[("other.json", &table("other"))],
    );
    wait_state(&router, 5, "us-1", "healthy");
    wait_state(&router, 5, "jp-1", "healthy");
    let mut jp_count = 0;
    for _ in 0..40 {
        let (status, d) = decide(&router, "t", r#"{"x": 1}"#);
        assert_eq!(status, 200, "{d}");
        if d["instance"] == "jp-1" {
            assert_eq!(d["action"]["who"], "jp", "{d}");
            jp_count += 1;
        }
    }
    assert!(jp_count >= 36, "the instance in our region (score +0.3) wins: {jp_count} of 40");
}

#[test]
fn a_table_only_one_peer_serves_reaches_it_and_failover_switches_by_hand() {
    let (p1, p2) = (free_port(), free_port());
    let _p1 = peer(p1, "p1");
    let _p2 = peer_at(p2, &[("only2.json", named_table("p2"))], "");
    let tables = [("t.json", named_table("local")), ("backup.json", named_table("backup"))];
    let text = router_config("", &[("p1", p1, "JP"), ("p2", p2, "JP")]);
    let tables: Vec<(&str, &str)> = tables.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let router = Server::start(&text, &tables);
    wait_state(&router, 5, "p2", "healthy");
    let (status, d) = decide(&router, "only2", "{}");
    assert_eq!((status, &d["instance"], &d["action"]["who"]), (200, &json!("p2"), &json!("p2")), "{d}");
    // local serves `t` and is not busy: it decides (default local_max_load 0.8)
    let (status, d) = decide(&router, "t", "{}");
    assert_eq!((status, &d["instance"]), (200, &json!("local")), "{d}");
    // a table nobody serves
    router.post("/decide/nowhere", "{}").assert_error(404, "unknown_table");
    // a peer's 4xx is passed through, not retried
    let r = router.post("/decide/only2", "[1]");
    r.assert_error(400, "not_an_object");

    // by hand: `t` answered by `backup`, degraded
    let r = call(router.admin, "POST", "/router/failover", &[], br#"{"table": "t", "to": "backup"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let (status, d) = decide(&router, "t", "{}");
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        (&d["table"], &d["degraded"], &d["degraded_reason"]),
        (&json!("backup"), &json!(true), &json!("router_fallback")),
        "{d}"
    );
    let r = call(router.admin, "GET", "/router", &[], b"");
    assert_eq!(r.json()["failovers"], json!({"t": "backup"}), "{}", r.text());
    assert_eq!(call(router.admin, "DELETE", "/router/failover/t", &[], b"").status, 200);
    let (_, d) = decide(&router, "t", "{}");
    assert_eq!((&d["table"], d.get("degraded")), (&json!("t"), None), "{d}");
    call(router.admin, "DELETE", "/router/failover/t", &[], b"").assert_error(404, "unknown_failover");
    call(router.admin, "POST", "/router/failover", &[], br#"{"table": "t", "to": "nope"}"#)
        .assert_error(404, "unknown_table");
    // admin only
    router.get("/router").assert_error(404, "not_found");
}

#[test]
fn a_killed_peer_fails_no_request_is_ejected_in_time_and_returns() {
    let (p1, p2) = (free_port(), free_port());
    let first = peer(p1, "p1");
    let _p2 = peer(p2, "p2");
    let router =
        Server::start(&router_config("", &[("p1", p1, "JP"), ("p2", p2, "JP")]), &[("other.json", &table("other"))]);
    wait_state(&router, 5, "p1", "healthy");
    wait_state(&router, 5, "p2", "healthy");
    let port = router.port;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let client = {
        let (stop, failures, sent) = (stop.clone(), failures.clone(), sent.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let r = call(port, "POST", "/decide/t", &[], br#"{"x": 1}"#);
                sent.fetch_add(1, Ordering::Relaxed);
                if r.status != 200 || r.json().get("degraded").is_some() {
                    failures.fetch_add(1, Ordering::Relaxed);
                    eprintln!("failed: {} {}", r.status, r.text());
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    drop(first);
    let killed = Instant::now();
    wait_state(&router, 5, "p1", "ejected");
    // interval × unhealthy_after = 200 ms, plus slack for a loaded test machine
    assert!(killed.elapsed() < Duration::from_millis(1500), "ejected after {:?}", killed.elapsed());
    std::thread::sleep(Duration::from_millis(300));
    let _again = peer(p1, "p1");
    // the ejection lasts 1 s (ejection_ms), then one probe brings it back
    wait_state(&router, 5, "p1", "healthy");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    assert!(sent.load(Ordering::Relaxed) > 20, "the client kept sending");
    assert_eq!(failures.load(Ordering::Relaxed), 0, "no client request failed (retried on p2)");
    let i = instances(&router);
    assert_eq!(i["p1"]["ejections"], json!(1), "{i:?}");
    assert!(i["p2"]["retried"].as_u64().unwrap() + i["p1"]["failed"].as_u64().unwrap() >= 1, "{i:?}");
    // the log says when the ejection ended, as it said when it began
    let log = router.log_text();
    let ejected = log.find("router: instance p1 ejected").unwrap_or_else(|| panic!("no ejection logged: {log}"));
    let back = log.find("router: instance p1 is healthy again").unwrap_or_else(|| panic!("no return logged: {log}"));
    assert!(ejected < back, "{log}");
    let metrics = router.get("/metrics").text();
    assert!(metrics.contains("clef_router_ejections_total{instance=\"p1\"} 1\n"), "{metrics}");
    let failed = format!("clef_router_failed_total{{instance=\"p1\"}} {}\n", i["p1"]["failed"]);
    let retried = format!("clef_router_retried_total{{instance=\"p2\"}} {}\n", i["p2"]["retried"]);
    assert!(metrics.contains(&failed) && metrics.contains(&retried), "{metrics}");
}

#[test]
fn a_hanging_health_check_delays_neither_routing_nor_other_probes() {
    let hang = fake_peer(Fake::Hang(Duration::from_secs(2)));
    let p2 = free_port();
    let _p2 = peer(p2, "p2");
    let router = Server::start(
        &router_config("", &[("hangs", hang.port, "JP"), ("p2", p2, "JP")]),
        &[("other.json", &table("other"))],
    );
    wait_state(&router, 5, "p2", "healthy");
    // the hung instance is probed (and times out) while we route
    let probes_before = instances(&router)["p2"]["probes_ok"].as_u64().unwrap();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut n = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        let t = Instant::now();
        let (status, d) = decide(&router, "t", "{}");
        slowest = slowest.max(t.elapsed());
        assert_eq!((status, &d["instance"]), (200, &json!("p2")), "{d}");
        n += 1;
    }
    assert!(n > 20 && slowest < Duration::from_millis(250), "{n} decisions, slowest {slowest:?}");
    let i = instances(&router);
    let probes = i["p2"]["probes_ok"].as_u64().unwrap() - probes_before;
    // 100 ms interval: about 15 probes in 1.5 s; a probe waiting on the hung one would make 1
    assert!(probes >= 8, "p2 was probed {probes} times meanwhile");
    assert!(i["p2"]["last_probe_ms_ago"].as_u64().unwrap() < 500, "{i:?}");
    assert_ne!(i["hangs"]["state"], json!("healthy"), "{i:?}");
    assert!(hang.healths.load(Ordering::Relaxed) >= 1);
}

#[test]
fn a_peer_answering_500_is_ejected_passively() {
    let bad = fake_peer(Fake::Peer { load: 0.0, status: 500, who: "bad" });
    let p2 = free_port();
    let _p2 = peer(p2, "p2");
    // a long interval: the ejection comes from forwards, not probes (whose /health is fine)
    let extra =
        "  health: {interval_ms: 1000, timeout_ms: 200, unhealthy_after: 3, healthy_after: 1, ejection_ms: 30000}\n";
    let text = router_config("", &[("bad", bad.port, "JP"), ("p2", p2, "JP")])
        .replace(&format!("  health: {HEALTH}\n"), extra);
    let router = Server::start(&text, &[("other.json", &table("other"))]);
    wait_state(&router, 5, "bad", "healthy");
    wait_state(&router, 5, "p2", "healthy");
    for _ in 0..40 {
        let (status, d) = decide(&router, "t", "{}");
        assert_eq!((status, &d["instance"]), (200, &json!("p2")), "retried on p2: {d}");
        if state(&router, "bad") == "ejected" {
            break;
        }
    }
    wait_state(&router, 2, "bad", "ejected");
    let hits = bad.decides.load(Ordering::Relaxed);
    assert!(hits >= 3, "{hits}");
    for _ in 0..20 {
        assert_eq!(decide(&router, "t", "{}").1["instance"], json!("p2"));
    }
    assert_eq!(bad.decides.load(Ordering::Relaxed), hits, "an ejected instance gets no requests");
    assert!(bad.healths.load(Ordering::Relaxed) >= 1);
}

#[test]
fn all_peers_down_answers_from_the_fallback_table_degraded() {
    let (p1, p2) = (free_port(), free_port());
    let first = peer(p1, "p1");
    let second = peer(p2, "p2");
    let backup = named_table("backup");
    let router = Server::start(
        &router_config("  fallback_table: backup\n", &[("p1", p1, "JP"), ("p2", p2, "JP")]),
        &[("backup.json", &backup)],
    );
    wait_state(&router, 5, "p1", "healthy");
    wait_state(&router, 5, "p2", "healthy");
    assert_eq!(decide(&router, "t", "{}").0, 200);
    drop((first, second));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        let (status, d) = decide(&router, "t", "{}");
        assert_eq!(status, 200, "{d}");
        assert_eq!((&d["table"], &d["instance"]), (&json!("backup"), &json!("local")), "{d}");
        assert_eq!((&d["degraded"], &d["degraded_reason"]), (&json!(true), &json!("router_fallback")), "{d}");
    }
    // at most half of the remote instances are ejected: one ejected, one kept though failing
    let i = instances(&router);
    let states: std::collections::BTreeSet<&str> =
        ["p1", "p2"].iter().map(|id| i[*id]["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["ejected", "unhealthy"].into_iter().collect(), "{i:?}");
}

#[test]
fn no_fallback_table_answers_503_no_healthy_instance() {
    let p1 = free_port();
    let first = peer(p1, "p1");
    let router = Server::start(&router_config("", &[("p1", p1, "JP")]), &[("other.json", &table("other"))]);
    wait_state(&router, 5, "p1", "healthy");
    drop(first);
    // before the ejection a forward fails (502); once ejected, no instance is left (503)
    router.eventually(5, "503 no_healthy_instance", |r| {
        let resp = r.post("/decide/t", "{}");
        let code = resp.json()["error"]["code"].as_str().unwrap_or("").to_string();
        assert!(resp.status == 502 && code == "upstream_failed" || resp.status == 503, "{}", resp.text());
        resp.status == 503 && code == "no_healthy_instance"
    });
}

#[test]
fn two_routers_forwarding_to_each_other_never_loop() {
    let (a_port, b_port) = (free_port(), free_port());
    let section = |peer: &str, port: u16| router_section("  policy: hash\n  hash_key: user\n", &[(peer, port, "JP")]);
    let a = peer_at(a_port, &[("t.json", named_table("a"))], &section("b", b_port));
    let b = peer_at(b_port, &[("t.json", named_table("b"))], &section("a", a_port));
    // both probed each other: wait until each answers some keys through the other
    let through = |server: &Server, other: &str| {
        (0..40).filter(|k| decide(server, "t", &format!(r#"{{"user": "u{k}"}}"#)).1["instance"] == json!(other)).count()
    };
    a.eventually(5, "a forwards to b", |_| through(&a, "b") > 0);
    b.eventually(5, "b forwards to a", |_| through(&b, "a") > 0);
    // Keys a sends to b, some of which b's own ring would send back to a: b decides them itself.
    for k in 0..200 {
        let r = a.post("/decide/t", &format!(r#"{{"user": "u{k}"}}"#));
        assert_eq!(r.status, 200, "{}", r.text());
        let d = r.json();
        let who = d["action"]["who"].as_str().unwrap();
        assert_eq!(d["instance"], if who == "a" { json!("local") } else { json!("b") }, "{d}");
    }
    // a request marked as forwarded is decided here
    let r = call(a_port, "POST", "/decide/t", &[("X-Clef-Forwarded", "elsewhere")], br#"{"user": "u1"}"#);
    assert_eq!(r.json()["instance"], json!("local"), "{}", r.text());
}

#[test]
fn hash_keys_stay_put_when_an_instance_leaves() {
    let ports = [free_port(), free_port(), free_port()];
    let mut peers: Vec<Option<Server>> =
        ports.iter().enumerate().map(|(i, p)| Some(peer(*p, &format!("h{i}")))).collect();
    let list: Vec<(String, u16)> = ports.iter().enumerate().map(|(i, p)| (format!("h{i}"), *p)).collect();
    let refs: Vec<(&str, u16, &str)> = list.iter().map(|(id, p)| (id.as_str(), *p, "JP")).collect();
    let router = Server::start(
        &router_config("  policy: hash\n  hash_key: user.id\n", &refs),
        &[("other.json", &table("other"))],
    );
    for (id, _) in &list {
        wait_state(&router, 5, id, "healthy");
    }
    let place = |k: usize| {
        let (status, d) = decide(&router, "t", &format!(r#"{{"user": {{"id": "k{k}"}}}}"#));
        assert_eq!(status, 200, "{d}");
        d["instance"].as_str().unwrap().to_string()
    };
    let before: Vec<String> = (0..120).map(place).collect();
    assert_eq!((0..120).map(place).collect::<Vec<_>>(), before, "the same key lands on the same instance");
    let used: std::collections::BTreeSet<&String> = before.iter().collect();
    assert_eq!(used.len(), 3, "keys spread over every instance: {used:?}");
    peers[2] = None;
    wait_state(&router, 5, "h2", "ejected");
    let after: Vec<String> = (0..120).map(place).collect();
    for (k, (b, a)) in before.iter().zip(&after).enumerate() {
        if b == "h2" {
            assert_ne!(a, "h2", "key {k}");
        } else {
            assert_eq!(a, b, "key {k} moved though its instance stayed");
        }
    }
}

#[test]
fn router_config_errors_point_at_the_value() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tables")).unwrap();
    let cases = [
        ("router:\n  instances:\n    - {id: b, addr: 127.0.0.1:1}\n", 3, "no `{id: local}`"),
        (
            "router:\n  instances:\n    - {id: local}\n    - {id: b, addr: \"h:1\"}\n    - {id: b, addr: \"h:2\"}\n",
            5,
            "also the id of instance 1",
        ),
        ("router:\n  instances:\n    - {id: local}\n    - {id: b, addr: nowhere}\n", 4, "is not host:port"),
        ("router:\n  regoin: JP\n  instances:\n    - {id: local}\n", 2, "did you mean `region`"),
        ("router:\n  health: {interval_ms: fast}\n  instances:\n    - {id: local}\n", 2, "interval_ms"),
        ("router:\n  instances:\n    - {id: local, port: 1}\n", 3, "port"),
        ("router:\n  policy: hash\n  instances:\n    - {id: local}\n", 2, "needs `router.hash_key`"),
    ];
    for (text, line, message) in cases {
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        let errors: Vec<_> = clef::config::check_file(&path)
            .into_iter()
            .filter(|d| d.severity == clef::diagnostic::Severity::Error)
            .collect();
        assert!(
            errors.iter().any(|d| d.line == line && d.message.contains(message)),
            "{text}: want line {line} `{message}`, got {errors:?}"
        );
    }
    // no router: section is fine and changes nothing
    std::fs::write(dir.path().join("config.yaml"), "server: {port: 8080}\n").unwrap();
    assert!(clef::config::check_file(&dir.path().join("config.yaml")).is_empty());
}

/// `POST /decide/{table}/batch` through the router: the answer's lines.
fn batch_lines(router: &Server, table: &str, body: &str) -> (u16, Vec<Json>) {
    let r = router.post(&format!("/decide/{table}/batch"), body);
    let lines = r.text().lines().map(|l| serde_json::from_str(l).unwrap_or(Json::Null)).collect();
    (r.status, lines)
}

#[test]
fn a_batch_is_answered_one_line_per_input_whatever_the_peer_answers() {
    // three inputs on NDJSON lines 1, 2 and 4
    let body = "{\"x\": 1}\n{\"x\": 20}\n\n{\"x\": 3}\n";

    // a clef peer: its lines, each naming it
    let good = free_port();
    let _good = peer(good, "good");
    let router = Server::start(&router_config("", &[("good", good, "JP")]), &[("other.json", &table("other"))]);
    wait_state(&router, 5, "good", "healthy");
    let (status, lines) = batch_lines(&router, "t", body);
    assert_eq!(status, 200, "{lines:?}");
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, big) in lines.iter().zip([None, Some(true), None]) {
        assert_eq!((&line["instance"], &line["action"]["who"]), (&json!("good"), &json!("good")), "{line}");
        assert_eq!(line["action"].get("big"), big.map(Json::Bool).as_ref(), "{line}");
    }
    drop(router);

    // a peer that answers one object to a batch (an older or foreign server): not an answer
    // clef sends, so the forward failed and the fallback table decides every line
    let single = fake_peer(Fake::Peer { load: 0.0, status: 200, who: "single" });
    let router = Server::start(
        &router_config("  fallback_table: backup\n", &[("single", single.port, "JP")]),
        &[("backup.json", &named_table("backup"))],
    );
    wait_state(&router, 5, "single", "healthy");
    let (status, lines) = batch_lines(&router, "t", body);
    assert_eq!(status, 200, "{lines:?}");
    assert_eq!(lines.len(), 3, "one line per input: {lines:?}");
    for line in &lines {
        assert_eq!((&line["table"], &line["instance"]), (&json!("backup"), &json!("local")), "{line}");
        assert_eq!(line["degraded_reason"], json!("router_fallback"), "{line}");
    }
    assert!(single.decides.load(Ordering::Relaxed) >= 1, "the batch went to the peer first");
    drop(router);

    // a peer that refuses the whole batch (4xx): passed through, not retried, as the error of
    // each line, with its line number
    let refuses = fake_peer(Fake::Peer { load: 0.0, status: 401, who: "refuses" });
    let router = Server::start(
        &router_config("  fallback_table: backup\n", &[("refuses", refuses.port, "JP")]),
        &[("backup.json", &named_table("backup"))],
    );
    wait_state(&router, 5, "refuses", "healthy");
    let r = router.post("/decide/t/batch", body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"), "{}", r.text());
    let lines: Vec<Json> = r.text().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines,
        [1, 2, 4].map(|n| json!({"error": {"code": "boom", "message": "fake failure"}, "line": n})),
        "{}",
        r.text()
    );
    let decides = refuses.decides.load(Ordering::Relaxed);
    assert_eq!(decides, 1, "a 4xx is not retried");
}

#[test]
fn a_forwarded_status_keeps_its_reason_phrase() {
    let strict = fake_peer(Fake::Peer { load: 0.0, status: 422, who: "strict" });
    let router =
        Server::start(&router_config("", &[("strict", strict.port, "JP")]), &[("other.json", &table("other"))]);
    wait_state(&router, 5, "strict", "healthy");
    let mut conn = TcpStream::connect(("127.0.0.1", router.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(&request_bytes("POST", "/decide/t", &[], b"{}")).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") && conn.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    assert_eq!(String::from_utf8_lossy(&head), "HTTP/1.1 422 Unprocessable Entity\r\n");
}

#[test]
fn authz_decided_by_a_peer_answers_the_status_and_headers_its_action_asks_for() {
    let gate = r#"{"default": {"allow": false},
      "rules": [
        {"id": "slow_down", "condition": "headers[\"x-rate\"] == \"high\"", "action": {"allow": false, "status": 429, "headers": {"Retry-After": "30"}}},
        {"id": "open", "condition": "true", "action": {"allow": true, "headers": {"X-User": "guest"}}}
      ]}"#;
    let p = free_port();
    let _peer = peer_at(p, &[("gate.json", gate.to_string())], "");
    let router = Server::start(&router_config("", &[("p", p, "JP")]), &[("other.json", &table("other"))]);
    wait_state(&router, 5, "p", "healthy");
    let ask = |headers: &[(&str, &str)]| call(router.port, "GET", "/authz/gate/x", headers, b"");
    let r = ask(&[("X-Rate", "high")]);
    assert_eq!((r.status, r.header("retry-after"), r.header("x-clef-status")), (429, Some("30"), Some("429")));
    assert_eq!((r.header("x-clef-rule"), &r.json()["instance"]), (Some("slow_down"), &json!("p")), "{}", r.text());
    let r = ask(&[("X-Rate", "high"), ("X-Clef-Proxy", "nginx")]);
    assert_eq!((r.status, r.header("x-clef-status")), (403, Some("429")), "{}", r.text());
    let r = ask(&[]);
    assert_eq!((r.status, r.header("x-user"), r.header("x-clef-rule")), (200, Some("guest"), Some("open")));
}
