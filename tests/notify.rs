//! systemd's readiness protocol against the real binary: `clef serve` with `$NOTIFY_SOCKET`
//! pointing at a unix datagram socket of the test's own says READY=1 once it answers, sends
//! watchdog keep-alives only when asked to, STOPPING=1 when the drain begins, and starts
//! all the same when the socket cannot be reached.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{call, plain, table, write, Server};
use nix::sys::signal::Signal;
use nix::sys::socket::MsgFlags;

/// Starts `clef serve` with `env` (the notify variables of the test's own only) and waits
/// until it sends its first message to `socket` (without one: until it answers).
fn spawn(env: &[(&str, &str)], socket: Option<&UnixDatagram>) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "tables/risk.json", table("big"));
    let first_message = |child: &mut Child, port: u16| {
        let Some(socket) = socket else { return common::until_ready(child, port) };
        socket.set_read_timeout(Some(Duration::from_millis(20))).expect("set a read timeout");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let peeked = nix::sys::socket::recv(socket.as_raw_fd(), &mut [0u8; 1], MsgFlags::MSG_PEEK);
            if peeked.is_ok() {
                return Ok(());
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                return Err(format!("clef serve exited before it said anything ({status})"));
            }
        }
        Err("nothing on the notify socket within 10 s".into())
    };
    Server::launch_until(
        dir,
        |ports| ports.fill(&plain()).into_bytes(),
        |cmd, _| {
            cmd.env_remove("NOTIFY_SOCKET")
                .env_remove("WATCHDOG_USEC")
                .env_remove("WATCHDOG_PID")
                .envs(env.iter().copied());
            None
        },
        first_message,
    )
}

/// The next datagram, as text, or `None` after `within`.
fn next(socket: &UnixDatagram, within: Duration) -> Option<String> {
    socket.set_read_timeout(Some(within)).expect("set a read timeout");
    let mut buf = [0u8; 4096];
    match socket.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => None,
        Err(e) => panic!("recv on the notify socket: {e}"),
    }
}

/// Datagrams until one contains `what` (at most `secs` seconds); all of them.
fn until(socket: &UnixDatagram, what: &str, secs: u64, server: &Server) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if let Some(d) = next(socket, left.max(Duration::from_millis(1))) {
            let done = d.lines().any(|l| l == what);
            seen.push(d);
            if done {
                return seen;
            }
        }
    }
    panic!("no {what} within {secs} s; got {seen:?}\n{}", server.log_text());
}

#[test]
fn ready_once_serving_watchdog_when_asked_stopping_on_drain() {
    let sockdir = tempfile::tempdir().expect("temp dir");
    let path = sockdir.path().join("notify");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    let mut server = spawn(&[("NOTIFY_SOCKET", path.to_str().unwrap()), ("WATCHDOG_USEC", "2000000")], Some(&socket));

    let first = until(&socket, "READY=1", 10, &server);
    assert_eq!(first.len(), 1, "READY=1 is the first message: {first:?}");
    assert!(first[0].lines().any(|l| l == format!("MAINPID={}", server.child.id())), "{first:?}");
    assert!(first[0].lines().any(|l| l.starts_with("STATUS=")), "{first:?}");
    // Ready means answering: the listeners were bound before READY=1 was sent.
    let health = call(server.port, "GET", "/health", &[], b"");
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(call(server.admin, "GET", "/health", &[], b"").status, 200);

    // The load sampler sends a keep-alive each second.
    until(&socket, "WATCHDOG=1", 5, &server);

    server.signal(Signal::SIGTERM);
    let rest = until(&socket, "STOPPING=1", 5, &server);
    assert!(rest.iter().all(|d| d == "WATCHDOG=1" || d.starts_with("STOPPING=1")), "{rest:?}");
    assert!(server.wait_exit().success(), "{}", server.log_text());
}

#[test]
fn abstract_socket_and_no_watchdog_for_another_pid() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("clef-notify-test-{}-{:?}", std::process::id(), Instant::now());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let socket = UnixDatagram::bind_addr(&addr).expect("bind the abstract notify socket");
    let at = format!("@{name}");
    // systemd names the process that must send keep-alives: here, not this one.
    let mut server =
        spawn(&[("NOTIFY_SOCKET", at.as_str()), ("WATCHDOG_USEC", "1000000"), ("WATCHDOG_PID", "1")], Some(&socket));
    until(&socket, "READY=1", 10, &server);
    assert_eq!(next(&socket, Duration::from_millis(2500)), None, "no keep-alives for another WATCHDOG_PID");
    server.signal(Signal::SIGTERM);
    until(&socket, "STOPPING=1", 5, &server);
    assert!(server.wait_exit().success(), "{}", server.log_text());
}

#[test]
fn an_unreachable_socket_does_not_stop_the_start() {
    let mut server = spawn(&[("NOTIFY_SOCKET", "/nonexistent/clef/notify"), ("WATCHDOG_USEC", "1000000")], None);
    server.wait_ready();
    server.eventually(5, "a warning about the notify socket", |s| s.log_text().contains("sd_notify: cannot send"));
    // Logged once, not once a second.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(server.log_text().matches("sd_notify").count(), 1, "{}", server.log_text());
    assert_eq!(server.health()["status"], "ok");
    server.signal(Signal::SIGTERM);
    assert!(server.wait_exit().success(), "{}", server.log_text());
}

#[test]
fn without_notify_socket_nothing_changes() {
    let mut server = spawn(&[], None);
    server.wait_ready();
    assert_eq!(server.health()["status"], "ok");
    assert!(!server.log_text().contains("sd_notify"), "{}", server.log_text());
    server.signal(Signal::SIGTERM);
    assert!(server.wait_exit().success(), "{}", server.log_text());
}
