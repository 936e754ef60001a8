//! `clef serve` under abuse (SPEC §5, §6): memory a client can make the server hold, clients
//! that stop reading, two processes or two listeners on one port, config values that cannot
//! work, draining under load, tables swapped for folders. Every test starts the real binary on
//! loopback ports and bounds its own time.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use serde_json::json;

const MODEL: &str = "model:\n  default_table: risk\n  watch_file: false\n";

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A client socket whose receive buffer is small, so that answers it does not read stay
/// in the server's send queue instead of the client's.
fn small_window_client(port: u16) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.connect_timeout(&addr(port).into(), Duration::from_secs(5)).expect("connect");
    socket.into()
}

/// Sends as much of `bytes` to every socket as the server takes within `within`, without
/// ever reading; returns how many bytes each took.
fn push_without_reading(socks: &mut [TcpStream], bytes: &[u8], within: Duration) -> Vec<usize> {
    let mut sent = vec![0usize; socks.len()];
    for s in socks.iter() {
        s.set_nonblocking(true).expect("nonblocking");
    }
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && sent.iter().any(|&n| n < bytes.len()) {
        let mut progress = false;
        for (s, n) in socks.iter_mut().zip(sent.iter_mut()) {
            if *n < bytes.len() {
                match s.write(&bytes[*n..]) {
                    Ok(k) => {
                        *n += k;
                        progress |= k > 0;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => *n = bytes.len(),
                }
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    sent
}

/// The value of an unlabelled metric (Prometheus text format).
fn metric(srv: &Server, name: &str) -> f64 {
    let text = srv.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

/// Waits at most `within` for the server's RSS to come back to `limit_kib`; returns the last reading.
fn rss_settles(srv: &Server, limit_kib: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let now = srv.rss_kib();
        if now <= limit_kib || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------------
// memory one client can take

#[test]
fn pipelined_answers_to_clients_that_never_read_cannot_grow_the_server() {
    // Each attacker sends a 65 KB body (growing its read buffer), then 128 KB of pipelined
    // GET /metrics (thousands of answers of a few KB) and never reads. Before the backpressure,
    // 10 of them took the server from 12 to 354 MB, and 1.5 GB stayed after they left.
    let cfg = config("  write_timeout_ms: 1000\n  read_timeout_ms: 3000\n  idle_timeout_ms: 20000\n", "", MODEL);
    let srv = Server::start(&cfg, &[("risk.json", &table("big"))]);
    let before = srv.rss_kib();
    let body = format!("{{\"x\": 1, \"pad\": \"{}\"}}", "a".repeat(65_000));
    let mut attack = request_bytes("POST", "/decide/risk", &[], body.as_bytes());
    let metrics = request_bytes("GET", "/metrics", &[], b"");
    while attack.len() < 65_000 + 128 * 1024 {
        attack.extend_from_slice(&metrics);
    }
    let attackers = 32;
    let mut socks: Vec<TcpStream> = (0..attackers).map(|_| small_window_client(srv.port)).collect();
    let sent = push_without_reading(&mut socks, &attack, Duration::from_secs(2));
    assert!(sent.iter().all(|&n| n > 70_000), "the attack did not get going: {sent:?}");
    let mut peak = 0;
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(1500) {
        peak = peak.max(srv.rss_kib());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(socks);
    let after = rss_settles(&srv, before + 16 * 1024, Duration::from_secs(5));
    eprintln!("RSS: before {before} KiB, peak {peak} KiB with {attackers} attackers, after {after} KiB");
    // the goal is at most 128 MB for 64 attackers; 32 here
    assert!(peak < before + 64 * 1024, "RSS grew from {before} to {peak} KiB");
    assert!(after <= before + 16 * 1024, "RSS stayed at {after} KiB (from {before} KiB)");
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
}

#[test]
fn idle_connections_give_their_buffers_back() {
    // Before: 2,000 idle keep-alive connections that each sent one 64 KB body held 311 MB.
    // The client below sends every request before it reads any answer; on a loaded machine that
    // can take longer than the default write timeout, which rightly drops a client whose
    // answers sit unread that long. This test is about memory, not that timeout.
    let srv = Server::start(&config("  write_timeout_ms: 120000\n", "", MODEL), &[("risk.json", &table("big"))]);
    let before = srv.rss_kib();
    let body = format!("{{\"x\": 50, \"pad\": \"{}\"}}", "a".repeat(64_000));
    let n = 500;
    let mut conns: Vec<Conn> = (0..n).map(|_| Conn::open(srv.port)).collect();
    for c in &mut conns {
        c.send(&request_bytes("POST", "/decide/risk", &[], body.as_bytes()));
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let answer = c.read_response().unwrap_or_else(|e| {
            let dropped = metric(&srv, "clef_write_timeouts_total");
            panic!("connection {i} got no answer: {e} (clients dropped by the write timeout: {dropped})")
        });
        assert_eq!(answer.status, 200);
    }
    // a connection idle for a second frees its buffers
    std::thread::sleep(Duration::from_millis(2500));
    let idle = srv.rss_kib();
    let per_connection = (idle.saturating_sub(before)) / n;
    eprintln!("RSS: before {before} KiB, {n} idle connections {idle} KiB ({per_connection} KiB each)");
    // A connection that kept its 64 KB body's buffers would hold 64 KiB or more. What an idle
    // one holds is its coroutine's stack as far as the decision touched it (several times
    // deeper in this unoptimised build) and its small buffers: 36-41 KiB on the build box on
    // 2026-12-06, where the same commit had measured under 32 KiB before.
    assert!(per_connection <= 48, "{per_connection} KiB per idle connection (RSS {before} → {idle} KiB)");
    // and they still work
    assert_eq!(conns[0].request("POST", "/decide/risk", &[], br#"{"x": 50}"#).status, 200);
    drop(conns);
    let after = rss_settles(&srv, before + 8 * 1024, Duration::from_secs(5));
    assert!(after <= before + 8 * 1024, "RSS stayed at {after} KiB after the connections closed (from {before})");
}

/// The value of a labelled series (Prometheus text format), 0 when absent.
fn labelled_metric(srv: &Server, series: &str) -> f64 {
    let text = srv.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// Lets this test process open `n` more sockets (CI's soft limit is often 1,024).
fn room_for_sockets(n: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let wanted = (soft + n).min(hard);
    if wanted > soft {
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).expect("setrlimit");
    }
}

#[test]
fn batch_answers_are_streamed_under_the_connection_cap_and_their_memory_comes_back() {
    // Issue 23: 64 KiB of `{}` lines answered 4.45 MB, built whole; 200 clients that sent one
    // batch and did not read held 1.8 GB, still held 20 s later. Here 48 such clients, each
    // with 16 KiB of lines (1.1 MB of answer), while 8 others read theirs.
    let cfg = config("  write_timeout_ms: 1000\n  idle_timeout_ms: 20000\n", "", MODEL);
    let srv = Server::start(&cfg, &[("risk.json", &table("big"))]);
    let before = srv.rss_kib();
    srv.reset_peak_rss();
    let lines = 16 * 1024 / 3;
    let body = "{}\n".repeat(lines);
    let request = request_bytes("POST", "/decide/risk/batch", &[], body.as_bytes());
    let mut parked: Vec<TcpStream> = (0..48).map(|_| small_window_client(srv.port)).collect();
    let sent = push_without_reading(&mut parked, &request, Duration::from_secs(3));
    assert!(sent.iter().all(|&n| n == request.len()), "the batches were not all sent: {sent:?}");
    let port = srv.port;
    let body = Arc::new(body);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                for _ in 0..2 {
                    let r = c.request("POST", "/decide/risk/batch", &[], body.as_bytes());
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
                    let text = r.text();
                    assert_eq!(text.lines().count(), lines);
                    assert!(text.lines().all(|l| l.starts_with("{\"rule_id\":null,\"matched\":false")), "{text:.300}");
                }
            })
        })
        .collect();
    for r in readers {
        r.join().expect("a reading client");
    }
    // the clients that do not read are dropped by the write timeout
    srv.eventually(10, "48 write timeouts", |s| metric(s, "clef_write_timeouts_total") >= 48.0);
    let peak = srv.peak_rss_kib();
    drop(parked);
    let after = rss_settles(&srv, before + 16 * 1024, Duration::from_secs(10));
    eprintln!("RSS: before {before} KiB, peak {peak} KiB, after {after} KiB");
    assert!(peak <= before + 48 * 1024, "RSS grew from {before} to {peak} KiB");
    assert!(after <= before + 16 * 1024, "RSS stayed at {after} KiB (from {before} KiB)");
}

#[test]
fn half_sent_requests_share_one_budget_and_give_it_back() {
    // Issue 23: 4,000 connections each sending 64 KiB of a 65,536-byte body held 312 MB, and
    // 286 MB 60 s after they closed; 16 KiB of unfinished heads, 169 MB and 136 MB. Here 800
    // of each, with 4 MiB for all the requests larger than a connection's first 8 KiB.
    room_for_sockets(2000);
    let cfg = config("  request_memory_bytes: 4194304\n  read_timeout_ms: 30000\n", "", MODEL);
    let srv = Server::start(&cfg, &[("risk.json", &table("big"))]);
    let before = srv.rss_kib();
    let n = 800;
    let mut body_part = b"POST /decide/risk HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n".to_vec();
    body_part.resize(body_part.len() + 65535, b' ');
    let mut head_part = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
    head_part.resize(16 * 1024 - 100, b'a');
    let refused = "clef_connections_closed_total{reason=\"request_memory\"}";
    let mut refused_before = 0.0;
    for (what, part) in [("bodies", &body_part), ("heads", &head_part)] {
        srv.reset_peak_rss();
        let mut socks: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr(srv.port)).expect("connect")).collect();
        push_without_reading(&mut socks, part, Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(300));
        let held = metric(&srv, "clef_request_memory_bytes");
        let refused_now = labelled_metric(&srv, refused);
        let peak = srv.peak_rss_kib();
        eprintln!(
            "{n} half-sent {what}: {held} bytes held, {} refused 503; RSS before {before} KiB, peak {peak} KiB",
            refused_now - refused_before
        );
        assert!(held > 0.0 && held <= 4194304.0, "{held} bytes held");
        // each holds what is beyond its 8 KiB: the budget takes 4 MiB of them, the rest were refused
        assert!(refused_now - refused_before >= (n / 2) as f64, "{} refused", refused_now - refused_before);
        refused_before = refused_now;
        assert!(peak <= before + 40 * 1024, "RSS grew from {before} to {peak} KiB");
        drop(socks);
        srv.eventually(5, "the budget given back", |s| metric(s, "clef_request_memory_bytes") == 0.0);
        let after = rss_settles(&srv, before + 8 * 1024, Duration::from_secs(10));
        eprintln!("RSS after the {what}' connections closed: {after} KiB");
        assert!(after <= before + 8 * 1024, "RSS stayed at {after} KiB (from {before} KiB)");
    }
    // a refused request is told why, and when to come back
    // Holders of a whole body less a byte, until the server refuses one: then what is left of
    // the budget is less than such a body needs (a probe of a few KiB might still fit).
    let mut budget = Vec::new();
    let refused_at_start = labelled_metric(&srv, refused);
    while labelled_metric(&srv, refused) == refused_at_start {
        assert!(budget.len() < 200, "200 half-sent bodies and none refused");
        let mut s = TcpStream::connect(addr(srv.port)).expect("connect");
        s.write_all(&body_part[..body_part.len() - 1]).expect("send");
        budget.push(s);
        if budget.len() >= 60 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut c = Conn::open(srv.port);
    c.send(&body_part[..body_part.len() - 1]);
    let r = c.read_response().expect("an answer");
    r.assert_error(503, "overloaded");
    assert_eq!((r.header("retry-after"), r.header("connection")), (Some("1"), Some("close")));
    drop(budget);
    // and once the budget is back, a body of the largest size is decided
    srv.eventually(5, "the budget given back", |s| metric(s, "clef_request_memory_bytes") == 0.0);
    let large = format!("{{\"x\": 50, \"pad\": \"{}\"}}", "a".repeat(65_000));
    assert_eq!(srv.post("/decide/risk", &large).status, 200);
}

#[test]
fn metrics_of_thousands_of_tables_are_streamed_under_the_connection_cap() {
    // Issue 23: with 5,000 tables /metrics answered 6.4 MB, built whole; 64 pipelined scrapers
    // that did not read held 931 MB, and 93 MB stayed. Here 2,000 tables and 16 such scrapers.
    let dir = tempfile::tempdir().expect("temp dir");
    for name in (0..2000).map(|i| format!("t{i:04}.json")).chain(["risk.json".to_string()]) {
        write(dir.path(), &format!("tables/{name}"), table("big"));
    }
    let cfg = config("  write_timeout_ms: 1000\n  idle_timeout_ms: 20000\n", "", MODEL);
    // loading 2,001 tables takes seconds in a debug build
    let ready = |child: &mut std::process::Child, port: u16| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(why) = until_ready(child, port) {
            if Instant::now() > deadline || child.try_wait().expect("try_wait").is_some() {
                return Err(why);
            }
        }
        Ok(())
    };
    let srv = Server::launch_until(dir, move |p| p.fill(&cfg).into_bytes(), |_, _| None, ready);
    let before = srv.rss_kib();
    srv.reset_peak_rss();
    let scrape = srv.get("/metrics");
    assert_eq!(scrape.header("transfer-encoding"), Some("chunked"));
    let text = scrape.text();
    assert!(text.len() > 1_000_000, "{} bytes", text.len());
    assert_eq!(text.lines().filter(|l| l.starts_with("clef_table_info{")).count(), 2001);
    assert_eq!(text.lines().filter(|l| l.starts_with("clef_table_load_failing{")).count(), 2001);
    // HEAD: the head alone, and the connection goes on
    let mut c = Conn::open(srv.port);
    let head = c.request("HEAD", "/metrics", &[], b"");
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(c.request("GET", "/health", &[], b"").status, 200);

    let pipelined: Vec<u8> = (0..4).flat_map(|_| request_bytes("GET", "/metrics", &[], b"")).collect();
    let mut parked: Vec<TcpStream> = (0..16).map(|_| small_window_client(srv.port)).collect();
    push_without_reading(&mut parked, &pipelined, Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(1500));
    let peak = srv.peak_rss_kib();
    drop(parked);
    let after = rss_settles(&srv, before + 12 * 1024, Duration::from_secs(10));
    eprintln!("RSS with 2,000 tables: before {before} KiB, peak {peak} KiB, after {after} KiB");
    assert!(peak <= before + 32 * 1024, "RSS grew from {before} to {peak} KiB");
    assert!(after <= before + 12 * 1024, "RSS stayed at {after} KiB (from {before} KiB)");
}

// ---------------------------------------------------------------------------------------------
// the write timeout

#[test]
fn clients_that_stop_reading_are_dropped_after_the_write_timeout() {
    let cfg = config("  write_timeout_ms: 500\n  read_timeout_ms: 3000\n  idle_timeout_ms: 20000\n", "", MODEL);
    let srv = Server::start(&cfg, &[("risk.json", &table("big"))]);
    // answers that fit in the server's socket buffer but are never read by the client
    let mut parked = small_window_client(srv.port);
    let few: Vec<u8> = (0..8).flat_map(|_| request_bytes("GET", "/metrics", &[], b"")).collect();
    parked.write_all(&few).expect("send");
    // answers that block the server's writes
    let mut flood = vec![small_window_client(srv.port)];
    let many: Vec<u8> = (0..3000).flat_map(|_| request_bytes("GET", "/metrics", &[], b"")).collect();
    push_without_reading(&mut flood, &many, Duration::from_millis(500));
    let started = Instant::now();
    let closed = loop {
        let open = metric(&srv, "clef_open_connections");
        if open <= 1.0 {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{open} connections still open after 5 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("both non-reading clients were dropped {closed:?} after the last write");
    let timeouts = metric(&srv, "clef_write_timeouts_total");
    let closed_by: Vec<String> = srv
        .get("/metrics")
        .text()
        .lines()
        .filter(|l| l.starts_with("clef_connections_closed_total{"))
        .map(str::to_string)
        .collect();
    assert!(timeouts >= 2.0, "{timeouts} write timeouts; connections closed: {closed_by:#?}");
    drop((parked, flood));
}

// ---------------------------------------------------------------------------------------------
// one port, one owner

#[test]
fn a_second_server_on_a_busy_port_is_refused() {
    let first = Server::start(&plain(), &[("risk.json", &table("first"))]);
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "tables/risk.json", table("second"));
    let text = plain().replace("@PORT@", &first.port.to_string());
    let (status, err) = refused(&dir, &text, &[]);
    assert!(!status.success(), "{status}");
    assert!(err.contains(&format!("127.0.0.1:{}", first.port)) && err.contains("in use"), "{err}");
    // every decision is still the first server's
    for _ in 0..12 {
        assert_eq!(first.action("risk", r#"{"x": 50}"#), "first");
    }
}

#[test]
fn an_admin_listener_on_the_decision_port_is_refused() {
    for admin in ["127.0.0.1:@PORT@", "0.0.0.0:@PORT@"] {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), "tables/risk.json", table("big"));
        let text = format!("server:\n  host: 127.0.0.1\n  port: @PORT@\nadmin:\n  listen: \"{admin}\"\n{MODEL}");
        let (status, err) = refused(&dir, &text, &[]);
        assert!(!status.success(), "{status}");
        assert!(err.contains("overlaps the decision listener"), "{admin}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// draining

/// What happened to one request sent during the drain test.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    Answered {
        status: u16,
        close: bool,
    },
    /// reset or EOF: sent, and no answer
    Lost,
    /// a refused connection: the listener had closed, nothing was sent
    Refused,
}

#[test]
fn sigterm_under_load_answers_every_request_it_reads() {
    let mut srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let port = srv.port;
    let log: Arc<Mutex<Vec<(Instant, Fate)>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut conn: Option<Conn> = None;
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) && sent < 50_000 {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match Conn::try_open(port) {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                log.lock().unwrap().push((Instant::now(), Fate::Refused));
                                return;
                            }
                        },
                    };
                    let at = Instant::now();
                    sent += 1;
                    let fate = match c.try_request("POST", "/decide/risk", &[], br#"{"x": 50}"#) {
                        Ok(r) => {
                            let close = r.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
                            Fate::Answered { status: r.status, close }
                        }
                        Err(_) => Fate::Lost,
                    };
                    log.lock().unwrap().push((at, fate));
                    match fate {
                        Fate::Answered { close: false, .. } => {}
                        _ => conn = None,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    srv.signal(Signal::SIGTERM);
    let status = srv.wait_exit();
    let exited = Instant::now();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client thread");
    }
    assert_eq!(status.code(), Some(0), "{status}\n{}", srv.log_text());
    let log = log.lock().unwrap();
    let answered = log.iter().filter(|(_, f)| matches!(f, Fate::Answered { status: 200, .. })).count();
    let draining: Vec<_> = log.iter().filter(|(_, f)| matches!(f, Fate::Answered { status: 503, .. })).collect();
    assert!(answered > 100, "too little load: {answered} decisions");
    assert!(!draining.is_empty(), "no request saw the drain");
    assert!(
        draining.iter().all(|(_, f)| matches!(f, Fate::Answered { close: true, .. })),
        "a 503 draining without Connection: close"
    );
    // a request sent more than a few milliseconds before the exit was answered
    let lost_early: Vec<Duration> = log
        .iter()
        .filter(|(at, f)| *f == Fate::Lost && *at + Duration::from_millis(25) < exited)
        .map(|(at, _)| exited.duration_since(*at))
        .collect();
    eprintln!("{answered} decisions, {} answered 503 draining, lost early: {lost_early:?}", draining.len());
    assert!(lost_early.is_empty(), "requests sent this long before the exit got no answer: {lost_early:?}");
    // a connection is refused only once the drain is over: after the first 503 of each client
    let first_draining = draining.iter().map(|(at, _)| *at).min().expect("a 503");
    let refused_early = log.iter().filter(|(at, f)| *f == Fate::Refused && *at < first_draining).count();
    assert_eq!(refused_early, 0, "connections were refused before the drain answered any request");
}

#[test]
fn draining_closes_idle_keep_alive_connections() {
    let mut srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let mut idle = Conn::open(srv.port);
    assert_eq!(idle.request("GET", "/health", &[], b"").status, 200);
    std::thread::sleep(Duration::from_millis(300));
    srv.signal(Signal::SIGTERM);
    assert!(idle.closed_within(Duration::from_secs(3)), "an idle connection stayed open during the drain");
    assert_eq!(srv.wait_exit().code(), Some(0));
}

/// What became of one connection opened during the drain.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Late {
    /// answered 503 `draining` with `Connection: close`
    Draining,
    /// decided: the request came before the server saw the signal
    Decided,
    /// refused at connect: the listener had closed
    Refused,
    /// connected, sent its request, and got no answer (EOF or reset)
    Dropped,
    /// anything else
    Other(u16),
}

#[test]
fn connections_opened_during_the_drain_are_answered_503_until_the_listeners_close() {
    // Connections opened after SIGTERM got EOF: the drain waited only for the connections open
    // before it, and the process exited under the later ones.
    let mut srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    // an idle keep-alive connection keeps the drain going until it wakes up and closes
    let mut idle = Conn::open(srv.port);
    assert_eq!(idle.request("GET", "/health", &[], b"").status, 200);
    let port = srv.port;
    srv.signal(Signal::SIGTERM);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut fates = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(12);
                while Instant::now() < deadline {
                    let fate = match TcpStream::connect_timeout(&addr(port), Duration::from_secs(2)) {
                        Err(_) => Late::Refused,
                        Ok(stream) => {
                            stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                            let mut c = Conn { stream, buf: Vec::new(), head_only: false };
                            match c.try_request("POST", "/decide/risk", &[], br#"{"x": 50}"#) {
                                Ok(r) if r.status == 503 && r.header("connection") == Some("close") => {
                                    assert_eq!(r.json()["error"]["code"], json!("draining"), "{}", r.text());
                                    Late::Draining
                                }
                                Ok(r) if r.status == 200 => Late::Decided,
                                Ok(r) => Late::Other(r.status),
                                Err(_) => Late::Dropped,
                            }
                        }
                    };
                    fates.push(fate);
                    if fate == Late::Refused {
                        break;
                    }
                }
                fates
            })
        })
        .collect();
    let per_client: Vec<Vec<Late>> = clients.into_iter().map(|c| c.join().expect("client")).collect();
    assert_eq!(srv.wait_exit().code(), Some(0), "{}", srv.log_text());
    let fates: Vec<Late> = per_client.iter().flatten().copied().collect();
    let count = |f: Late| fates.iter().filter(|x| **x == f).count();
    let others: Vec<&Late> = fates.iter().filter(|f| matches!(f, Late::Other(_))).collect();
    let summary = format!(
        "during the drain: {} answered 503, {} decided, {} dropped, {} refused, others {others:?}",
        count(Late::Draining),
        count(Late::Decided),
        count(Late::Dropped),
        count(Late::Refused),
    );
    eprintln!("{summary}");
    assert!(count(Late::Draining) > 10, "{summary}");
    assert_eq!(count(Late::Refused), 4, "every client ends refused once the listener closed: {summary}");
    assert!(others.is_empty(), "{summary}");
    // A connection the kernel completed into the listen backlog after the listener's last accept
    // is reset when the listener closes: each client can meet that once, on its last connection
    // before it is refused. Every other connection is answered.
    for (client, fates) in per_client.iter().enumerate() {
        let drops: Vec<usize> = (0..fates.len()).filter(|&i| fates[i] == Late::Dropped).collect();
        assert!(
            drops.is_empty() || drops == [fates.len() - 2],
            "client {client} was dropped other than just before the listener closed: {:?}; {summary}",
            &fates[fates.len().saturating_sub(4)..]
        );
    }
    assert!(idle.closed_within(Duration::from_secs(1)));
}

// ---------------------------------------------------------------------------------------------
// signals

/// The signals each thread of process `pid` blocks (`SigBlk` of `/proc/PID/task/TID/status`),
/// by thread id.
fn blocked_signals(pid: u32) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("list the threads") {
        let task = task.expect("a thread");
        let tid: u32 = task.file_name().to_str().and_then(|t| t.parse().ok()).expect("a thread id");
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue }; // it ended
        let mask = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).expect("SigBlk in status");
        out.push((tid, u64::from_str_radix(mask.trim(), 16).expect("a hex mask")));
    }
    out
}

#[test]
fn a_storm_of_sighups_never_ends_the_server() {
    // A thread started before the signal mask was set (the registry's writer) took the second
    // SIGHUP that came during a reload with its default action: the process ended, and systemd
    // counted that as a clean stop. Now every thread but the one waiting for signals blocks
    // them, and SIGHUPs that come during a reload coalesce into one more reload.
    let big: Vec<String> = (0..5_000)
        .map(|i| format!(r#"{{"id": "r{i}", "condition": "x == {i}", "action": {{"a": "r{i}"}}}}"#))
        .collect();
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("big.json", &format!("[{}]", big.join(",\n")))]);
    let pid = srv.child.id();
    let hup = 1u64 << (Signal::SIGHUP as u64 - 1);
    let term = 1u64 << (Signal::SIGTERM as u64 - 1);
    // A busy server has its worker threads too.
    for _ in 0..20 {
        assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big");
    }
    let threads = blocked_signals(pid);
    assert!(threads.len() >= 4, "{threads:?}");
    for (tid, mask) in &threads {
        // the thread in sigwait shows the signals it waits for unblocked while it waits
        if *tid != pid {
            assert!(mask & hup != 0 && mask & term != 0, "thread {tid} does not block SIGHUP/SIGTERM: {mask:x}");
        }
    }

    let port = srv.port;
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut answered, mut failed) = (0u32, Vec::new());
            let mut c = Conn::open(port);
            while !stop.load(Ordering::Relaxed) {
                match c.try_request("POST", "/decide/risk", &[], br#"{"x": 50}"#) {
                    Ok(r) if r.status == 200 => answered += 1,
                    Ok(r) => failed.push(format!("{} {}", r.status, r.text())),
                    Err(e) => {
                        failed.push(e.to_string());
                        match Conn::try_open(port) {
                            Ok(fresh) => c = fresh,
                            Err(e) => failed.push(format!("connect: {e}")),
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            (answered, failed)
        })
    };
    let started = Instant::now();
    for n in 0..1000 {
        if n == 990 {
            // a change just before the last signals: the reload they coalesce into reads it
            srv.write_table("risk.json", &table("after the storm"));
        }
        srv.signal(Signal::SIGHUP);
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (answered, failed) = client.join().expect("client thread");
    let mut srv = srv;
    assert!(srv.child.try_wait().expect("try_wait").is_none(), "the server ended during the storm\n{}", srv.log_text());
    assert!(
        failed.is_empty(),
        "{} requests failed during the storm: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(answered > 500, "only {answered} decisions in {took:?}");
    srv.eventually(10, "the last SIGHUP's reload serves the changed file", |s| {
        s.action("risk", r#"{"x": 50}"#) == "after the storm"
    });
    let reloads = srv.log_text().matches("reload (SIGHUP)").count();
    eprintln!("1000 SIGHUPs in {took:?}: {reloads} reloads, {answered} decisions answered meanwhile");
    assert!((1..=1000).contains(&reloads), "{reloads} reloads for 1000 SIGHUPs");
    srv.signal(Signal::SIGTERM);
    assert_eq!(srv.wait_exit().code(), Some(0));
}

// ---------------------------------------------------------------------------------------------
// tables swapped under the server

#[test]
fn a_table_replaced_by_a_folder_keeps_serving_and_health_says_why() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("other.json", &table("other"))]);
    let path = srv.path().join("tables/risk.json");
    std::fs::remove_file(&path).expect("remove");
    std::fs::create_dir(&path).expect("a folder in its place");
    let r = srv.admin_post("/reload");
    let outcome = r.json()["tables"].as_array().expect("tables").iter().find(|t| t["table"] == json!("risk")).cloned();
    assert_eq!(outcome.as_ref().map(|o| o["result"].clone()), Some(json!("failed")), "{}", r.text());
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "big", "the last good version still serves");
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    assert!(h["errors"]["risk"].as_str().is_some_and(|e| e.contains("cannot be read")), "{h}");
    let full = call(srv.admin, "GET", "/health", &[], b"").json();
    assert!(full["errors"]["risk"].as_str().is_some_and(|e| e.contains("folder")), "{full}");
}

#[test]
fn deleting_the_default_table_makes_health_degraded() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big")), ("other.json", &table("other"))]);
    std::fs::remove_file(srv.path().join("tables/risk.json")).expect("remove");
    let r = srv.admin_post("/reload");
    assert!(r.text().contains("\"missing\""), "{}", r.text());
    srv.eventually(5, "the table whose file is gone is removed", |s| s.post("/decide/risk", "{}").status == 404);
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    assert!(h["errors"]["risk"].as_str().is_some_and(|e| e.contains("default table")), "{h}");
    assert!(h["removed"]["risk"].is_string(), "{h}");
    assert_eq!(srv.action("other", r#"{"x": 50}"#), "other");
}

#[test]
fn the_decision_port_names_load_failures_without_paths_or_file_content() {
    // A table that is a link to a file it should not be (here a stand-in for /etc/shadow) put the
    // file's first line into /health's error text, with absolute paths, on the decision port.
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "tables/risk.json", table("big"));
    let secret =
        write(dir.path(), "secret.txt", "root:$6$SECRETHASH$x:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n");
    std::os::unix::fs::symlink(&secret, dir.path().join("tables/shadow.yaml")).expect("a link");
    write(dir.path(), "tables/also.json", BROKEN);
    let text = plain();
    let srv = Server::launch(dir, move |p| p.fill(&text).into_bytes(), |_, _| None);
    let root = srv.path().to_str().unwrap().to_string();
    let leaks = |what: &str, body: &str| {
        for secret in ["SECRETHASH", "root", "daemon", "bogus", root.as_str(), ".yaml", ".json"] {
            assert!(!body.contains(secret), "{what} on the decision port shows `{secret}`: {body}");
        }
    };
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    assert!(h["errors"]["shadow"].as_str().is_some_and(|e| e.contains("not a valid table")), "{h}");
    assert!(h["errors"]["also"].as_str().is_some_and(|e| e.contains("not a valid table")), "{h}");
    leaks("GET /health", &h.to_string());
    leaks("GET /tables", &srv.get("/tables").text());
    leaks("GET /tables/shadow", &srv.get("/tables/shadow").text());
    let refused = srv.post("/decide/shadow", "{}");
    refused.assert_error(503, "table_unavailable");
    leaks("POST /decide/shadow", &refused.text());
    // The admin listener has the full messages: where the file is and what is wrong in it.
    let full = call(srv.admin, "GET", "/health", &[], b"").json();
    assert_eq!(full["status"], json!("degraded"), "{full}");
    let shadow = full["errors"]["shadow"].as_str().unwrap_or_else(|| panic!("{full}"));
    assert!(shadow.contains(&root) && shadow.contains("shadow.yaml"), "{full}");
    assert!(full["errors"]["also"].as_str().is_some_and(|e| e.contains("bogus")), "{full}");
    let listed = call(srv.admin, "GET", "/tables", &[], b"").text();
    assert!(listed.contains("shadow.yaml"), "{listed}");
}

#[test]
fn a_table_deleted_and_written_again_serves_throughout_then_goes_after_a_grace() {
    // Deleting a table's file and writing it again (a deploy, an editor that renames the old
    // file away before it writes the new one) answered 404 in the gap when a reload came then.
    let srv = Server::start(&plain(), &[("risk.json", &table("v0")), ("other.json", &table("o"))]);
    let port = srv.port;
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut answered, mut refused) = (0u32, Vec::new());
            let mut c = Conn::open(port);
            while !stop.load(Ordering::Relaxed) {
                let r = c.request("POST", "/decide/risk", &[], br#"{"x": 50}"#);
                match r.status {
                    200 => answered += 1,
                    _ => refused.push(r.text()),
                }
            }
            (answered, refused)
        })
    };
    let path = srv.path().join("tables/risk.json");
    for n in 1..=10 {
        if n % 2 == 0 {
            std::fs::remove_file(&path).expect("delete");
        } else {
            // vim's way: the old file is renamed to a backup, the new one written
            std::fs::rename(&path, srv.path().join("tables/risk.json~")).expect("rename away");
        }
        let r = srv.admin_post("/reload").text();
        assert!(r.contains(r#""table":"risk","result":"missing""#), "{r}");
        std::thread::sleep(Duration::from_millis(50));
        srv.write_table("risk.json", &table(&format!("v{n}")));
        let r = srv.admin_post("/reload").text();
        assert!(r.contains(r#""table":"risk","result":"loaded""#), "{r}");
        let _ = std::fs::remove_file(srv.path().join("tables/risk.json~"));
    }
    stop.store(true, Ordering::Relaxed);
    let (answered, refused) = client.join().expect("client");
    assert!(refused.is_empty(), "{} of {} decisions refused: {:?}", refused.len(), answered, refused.first());
    assert!(answered > 20, "only {answered} decisions");
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v10");

    // Gone for good: it serves for the grace, /health says the file is missing, then it goes.
    std::fs::remove_file(&path).expect("delete");
    let gone = Instant::now();
    let r = srv.admin_post("/reload").json();
    assert_eq!(r["tables"][1]["result"], json!("missing"), "{r}");
    assert_eq!(srv.action("risk", r#"{"x": 50}"#), "v10");
    let h = srv.health();
    assert_eq!(h["status"], json!("degraded"), "{h}");
    assert!(h["errors"]["risk"].as_str().is_some_and(|e| e.contains("gone")), "{h}");
    srv.eventually(5, "the table is removed", |s| s.post("/decide/risk", "{}").status == 404);
    let after = gone.elapsed();
    assert!(after >= Duration::from_millis(1900), "removed after {after:?}, before the grace ended");
    let h = srv.health();
    assert!(h["removed"]["risk"].is_string(), "{h}");
    assert!(h["errors"]["risk"].as_str().is_some_and(|e| e.contains("default table")), "{h}");
    assert!(srv.log_text().contains("table risk: its file has been gone for 2 s; removed"));
    // and it comes back when its file does
    srv.write_table("risk.json", &table("back"));
    let r = srv.admin_post("/reload").text();
    assert!(r.contains(r#""table":"risk","result":"loaded""#), "{r}");
    let h = srv.health();
    assert_eq!(h["status"], json!("ok"), "{h}");
    assert!(h.get("removed").is_none(), "{h}");
}

// ---------------------------------------------------------------------------------------------
// smaller points

#[test]
fn content_length_must_be_plain_digits() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    for bad in ["+9", "009", "-9", "9 9", "0x9"] {
        let mut c = Conn::open(srv.port);
        let r = c.request("POST", "/decide/risk", &[("Content-Length", bad)], br#"{"x": 50}"#);
        r.assert_error(400, "invalid_body");
        assert_eq!(r.header("connection"), Some("close"), "{bad}");
    }
    let mut c = Conn::open(srv.port);
    assert_eq!(c.request("POST", "/decide/risk", &[("Content-Length", "9")], br#"{"x": 50}"#).status, 200);
}

#[test]
fn table_names_in_paths_are_percent_decoded() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let r = srv.post("/decide/ris%6b", r#"{"x": 50}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["table"], json!("risk"));
    srv.post("/decide/ris%2Fk", r#"{"x": 50}"#).assert_error(404, "unknown_table");
}

#[test]
fn table_listings_need_the_decision_token_and_show_files_only_to_admins() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "tables/risk.json", table("big"));
    write(dir.path(), "decide.token", "s3cret\n");
    let text = config("  token_file: decide.token\n", "", MODEL);
    let srv = Server::launch(dir, move |p| p.fill(&text).into_bytes(), |_, _| None);
    for path in ["/tables", "/tables/risk", "/v1/tables/risk"] {
        srv.get(path).assert_error(401, "unauthorized");
        let r = call(srv.port, "GET", path, &[("Authorization", "Bearer s3cret")], b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(!r.text().contains(srv.path().to_str().unwrap()), "{path} shows a file path: {}", r.text());
    }
    let admin = call(srv.admin, "GET", "/tables/risk", &[], b"");
    assert_eq!(admin.status, 200);
    assert!(admin.json()["files"][0].as_str().is_some_and(|f| f.ends_with("tables/risk.json")), "{}", admin.text());
}
