//! A small HTTP/1.1 client on may's coroutine-aware sockets, for probes and forwards.
//!
//! It sends one request and reads one answer (httparse for the head) within a deadline that
//! covers connect, send and the whole answer, and with strict limits on what a peer may send
//! back: at most [`MAX_HEAD_BYTES`] of head and [`MAX_HEADERS`] headers, a `Content-Length`
//! body (no chunked encoding; clef never sends one) of at most the caller's limit. Anything
//! else is an error, and the connection is not kept.
//!
//! Forwards reuse keep-alive connections from a small per-worker-thread pool keyed by instance.
//! A connection is taken out of the thread-local pool before any I/O and put back afterwards
//! (into the pool of whichever thread the coroutine then runs on), so no borrow of per-thread
//! state is held across a yield. Coroutines tend to resume on one worker more than the other,
//! so connections pile up in one thread's pool while the other's runs dry: what a full pool
//! cannot keep goes to a small pool that all threads share ([`SPARE`], behind a lock taken only
//! when a thread's own pool has none or no room), instead of being closed while another thread
//! opens a new one (one forward in a hundred did, under load from two workers). A pooled connection the peer closed while idle fails before
//! any byte of an answer arrives; the request is then sent once more on a fresh connection.
//!
//! Connections are opened with a non-blocking `connect` of our own and boxed, and a connection
//! given up is dropped only half a second later ([`retire`]): may's scheduler reads an I/O
//! operation's state for a moment after it made the coroutine runnable elsewhere, so that
//! state must outlive the operation (see [`connect`]).
// Slices of the response buffer are bounded by the lengths httparse and the reads returned.
#![allow(clippy::indexing_slicing)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use may::net::TcpStream;

/// The largest answer head accepted from a peer.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The most answer headers accepted from a peer.
pub const MAX_HEADERS: usize = 32;
/// Bytes read at a time.
const READ_CHUNK: usize = 4096;
/// Idle connections kept per instance per worker thread: as many as the forwards a worker has
/// in flight to one peer under load (with 8, 32 concurrent forwards from two workers opened a
/// fresh connection for half of them, and a forward cost three local decisions of CPU).
const IDLE_PER_INSTANCE: usize = 64;
/// Idle connections kept per worker thread in all.
const IDLE_PER_THREAD: usize = 256;
/// Idle connections kept in the pool shared by all threads.
const IDLE_SHARED: usize = 256;

/// Idle connections a thread's own pool had no room for: (pool key, address, connection).
static SPARE: parking_lot::Mutex<Vec<(u64, SocketAddr, Stream)>> = parking_lot::Mutex::new(Vec::new());

/// One answer from a peer, owned (what a probe keeps).
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// its status code
    pub status: u16,
    /// its body
    pub body: Vec<u8>,
    /// whether the connection may carry another request
    pub keep_alive: bool,
}

/// One answer from a peer, its body still in the connection's read buffer (a forward reads
/// it there, before the connection goes back to the pool).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reply<'a> {
    /// its status code
    pub status: u16,
    /// its body
    pub body: &'a [u8],
}

/// Where an answer is in the read buffer, once complete.
#[derive(Debug, Clone, PartialEq)]
struct Head {
    status: u16,
    body: std::ops::Range<usize>,
    keep_alive: bool,
}

/// Why an exchange failed.
#[derive(Debug)]
pub enum ClientError {
    /// the connection could not be made
    Connect(io::Error),
    /// the deadline passed
    Timeout,
    /// the connection broke; `answered`: after some of the answer arrived
    Broken {
        /// what broke
        error: io::Error,
        /// whether any byte of the answer had arrived
        answered: bool,
    },
    /// the answer was not one this client accepts
    Invalid(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Connect(e) => write!(f, "cannot connect: {e}"),
            ClientError::Timeout => f.write_str("no answer within the timeout"),
            ClientError::Broken { error, .. } => write!(f, "the connection broke: {error}"),
            ClientError::Invalid(why) => write!(f, "an invalid answer: {why}"),
        }
    }
}

impl ClientError {
    /// Whether the request may be sent again on a fresh connection: it broke before any byte of
    /// an answer (a pooled connection the peer had closed).
    fn stale(&self) -> bool {
        matches!(self, ClientError::Broken { answered: false, .. })
    }
}

/// Sends `request` on a new connection to `addr` and reads the answer by `deadline`.
pub fn exchange_fresh(
    addr: SocketAddr,
    request: &[u8],
    deadline: Instant,
    max_body: usize,
) -> Result<Exchange, ClientError> {
    let mut conn = connect(addr, deadline)?;
    let result = conn.exchange(request, deadline, max_body, true).map(|head| Exchange {
        status: head.status,
        body: conn.buf[head.body].to_vec(),
        keep_alive: head.keep_alive,
    });
    retire(conn);
    result
}

/// Sends `request` to `addr` on a pooled keep-alive connection (or a new one), reads the
/// answer by `deadline` and gives it to `read`, whose result is returned; `key` names the pool
/// (the router and the instance).
pub fn exchange_pooled<R>(
    key: u64,
    addr: SocketAddr,
    request: &[u8],
    deadline: Instant,
    max_body: usize,
    read: impl FnOnce(Reply<'_>) -> R,
) -> Result<R, ClientError> {
    if let Some(mut conn) = take(key, addr) {
        match conn.exchange(request, deadline, max_body, false) {
            Ok(head) => return Ok(hand_over(key, addr, conn, head, read)),
            Err(e) if e.stale() && Instant::now() < deadline => retire(conn),
            Err(e) => {
                retire(conn);
                return Err(e);
            }
        }
    }
    let mut conn = connect(addr, deadline)?;
    match conn.exchange(request, deadline, max_body, true) {
        Ok(head) => Ok(hand_over(key, addr, conn, head, read)),
        Err(e) => {
            retire(conn);
            Err(e)
        }
    }
}

/// Gives the answer `head` locates in `conn`'s buffer to `read`, then keeps or gives up `conn`.
fn hand_over<R>(key: u64, addr: SocketAddr, mut conn: Stream, head: Head, read: impl FnOnce(Reply<'_>) -> R) -> R {
    let result = read(Reply { status: head.status, body: conn.buf.get(head.body).unwrap_or_default() });
    if conn.buf.len() > KEPT_BUFFER {
        // an idle connection does not hold on to a large answer's memory
        conn.buf = Vec::new();
    }
    keep_or_retire(key, addr, conn, head.keep_alive);
    result
}

fn remaining(deadline: Instant) -> Result<Duration, ClientError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(ClientError::Timeout)
    } else {
        Ok(left)
    }
}

/// The timeout for the next read or write of an exchange due by `deadline`: the time left,
/// rounded down to a power-of-two number of milliseconds no more than a 32nd of it. Setting a
/// socket's timeout is a system call; rounded so, the timeout stays the same from one exchange
/// to the next on a kept connection (each gets the same forward timeout) and within most
/// exchanges, so it is set again only when it changes. No operation outlasts the deadline; an
/// exchange may time out up to a 32nd of its timeout plus a millisecond early.
fn op_timeout(deadline: Instant) -> Result<Duration, ClientError> {
    let left = remaining(deadline)?;
    let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    let grain = (ms / 32).max(1).checked_ilog2().map_or(1, |log| 1u64 << log);
    let whole = ms / grain * grain;
    Ok(if whole == 0 { left } else { Duration::from_millis(whole) })
}

/// How much the read buffer grows at most at a time for a body.
const BODY_STEP: usize = 64 * 1024;
/// The largest read buffer a kept connection holds on to between exchanges.
const KEPT_BUFFER: usize = 16 * 1024;

/// A client connection, boxed so that the I/O state may's scheduler points at never moves;
/// given up through [`retire`], never dropped where its last operation ended.
type Stream = Box<Conn>;

/// A client connection and what it keeps from one exchange to the next.
#[derive(Debug)]
struct Conn {
    io: Io,
    /// the read buffer; all of it initialized, so it is zeroed only when it grows
    buf: Vec<u8>,
}

/// A socket and the timeouts last set on it (setting one is a system call).
#[derive(Debug)]
struct Io {
    stream: TcpStream,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl Io {
    fn set_write_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        set_unless_set(&mut self.write_timeout, timeout, |t| self.stream.set_write_timeout(t))
    }
}

/// Gives the socket `timeout` through `set` unless `last` says it has it already; `last` is
/// unknown (`None`) while a setting fails.
fn set_unless_set(
    last: &mut Option<Duration>,
    timeout: Duration,
    set: impl FnOnce(Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    if *last != Some(timeout) {
        *last = None;
        set(Some(timeout))?;
        *last = Some(timeout);
    }
    Ok(())
}

impl Read for Io {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
}

impl Timed for Io {
    fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        set_unless_set(&mut self.read_timeout, timeout, |t| self.stream.set_read_timeout(t))
    }
}

/// Opens a connection to `addr`, without waiting for it: the first write waits (within its
/// timeout) until it is established, and fails if it cannot be.
///
/// Not may's `TcpStream::connect_timeout`: its connect operation lives on the coroutine's
/// stack, and may's scheduler still reads it after handing the coroutine to the event loop,
/// which on another worker may already have resumed the coroutine, seen the refusal, returned
/// and reused that stack (a peer that refuses at once crashed the router so, SIGSEGV in
/// `tcp_stream_connect::subscribe`). Waiting in a write on the boxed stream makes the
/// scheduler read the stream's own state instead, which [`retire`] keeps alive.
fn connect(addr: SocketAddr, deadline: Instant) -> Result<Stream, ClientError> {
    use socket2::{Domain, Protocol, Socket, Type};
    remaining(deadline)?;
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(ClientError::Connect)?;
    socket.set_nonblocking(true).map_err(ClientError::Connect)?;
    let _ = socket.set_nodelay(true);
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(nix::libc::EINPROGRESS) => {}
        Err(e) => return Err(ClientError::Connect(e)),
    }
    let stream = clef_sys::may_stream(std::net::TcpStream::from(socket));
    Ok(Box::new(Conn { io: Io { stream, read_timeout: None, write_timeout: None }, buf: Vec::new() }))
}

fn broken(error: io::Error, answered: bool, deadline: Instant) -> ClientError {
    let timed_out = matches!(error.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock);
    if timed_out || Instant::now() >= deadline {
        ClientError::Timeout
    } else {
        ClientError::Broken { error, answered }
    }
}

/// Whether a read or write that failed with `e` is to be tried again (the deadline still holds,
/// as every try sets the timeout from it).
///
/// `EINPROGRESS` is our own non-blocking connect still under way: may's I/O on a just-opened
/// stream reported it under load (32 concurrent forwards to one peer failed their first
/// exchanges with it, enough to eject the peer). The connect is then waited for with a short
/// sleep rather than a spin.
fn again(e: &io::Error) -> bool {
    if e.raw_os_error() == Some(nix::libc::EINPROGRESS) {
        may::coroutine::sleep(CONNECT_POLL);
        return true;
    }
    e.kind() == io::ErrorKind::Interrupted
}

/// How long a read or write waits before it tries again on a connection still being opened.
const CONNECT_POLL: Duration = Duration::from_micros(200);

impl Conn {
    /// Sends `request` and reads the answer into the buffer; `fresh`: the connection was just
    /// opened, so an error before the first byte is written is one of connecting.
    fn exchange(
        &mut self,
        request: &[u8],
        deadline: Instant,
        max_body: usize,
        fresh: bool,
    ) -> Result<Head, ClientError> {
        let mut sent = 0;
        while sent < request.len() {
            let failed = |e: io::Error| match broken(e, false, deadline) {
                ClientError::Broken { error, .. } if fresh && sent == 0 => ClientError::Connect(error),
                other => other,
            };
            self.io.set_write_timeout(op_timeout(deadline)?).map_err(failed)?;
            match self.io.stream.write(&request[sent..]) {
                Ok(0) => return Err(failed(io::ErrorKind::WriteZero.into())),
                Ok(n) => sent += n,
                Err(e) if again(&e) => {}
                Err(e) => return Err(failed(e)),
            }
        }
        read_answer(&mut self.io, &mut self.buf, deadline, max_body)
    }
}

/// Reads one answer into `buf`: the head (httparse), then `Content-Length` bytes of body.
/// `buf`'s bytes are all initialized (its length is its usable size); it grows as needed.
fn read_answer<S: Read + Timed>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    deadline: Instant,
    max_body: usize,
) -> Result<Head, ClientError> {
    let mut filled = 0;
    let mut head: Option<(usize, u16, usize, bool)> = None;
    loop {
        let mut wanted = filled + READ_CHUNK;
        if let Some((head_len, status, length, keep_alive)) = head {
            let total = head_len + length;
            if filled >= total {
                // a peer that sends more than its answer is not talking HTTP/1.1 to us
                return Ok(Head { status, body: head_len..total, keep_alive: keep_alive && filled == total });
            }
            // room for the rest of the body (in steps: a length is only what the peer claims)
            wanted = total.min(filled + BODY_STEP);
        } else if filled > 0 {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&buf[..filled]) {
                Ok(httparse::Status::Complete(head_len)) => {
                    head = Some(parse_head(&response, head_len, max_body)?);
                    continue;
                }
                Ok(httparse::Status::Partial) if filled > MAX_HEAD_BYTES => {
                    return Err(ClientError::Invalid(format!("an answer head longer than {MAX_HEAD_BYTES} bytes")));
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(ClientError::Invalid(format!("not HTTP/1.1: {e}"))),
            }
        }
        stream.set_timeout(op_timeout(deadline)?).map_err(|e| broken(e, filled > 0, deadline))?;
        if buf.len() < wanted {
            buf.resize(wanted, 0);
        }
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the connection");
                return Err(broken(e, filled > 0, deadline));
            }
            Ok(n) => filled += n,
            Err(e) if again(&e) => {}
            Err(e) => return Err(broken(e, filled > 0, deadline)),
        }
    }
}

/// (head length, status, body length, keep-alive) of a complete head.
fn parse_head(
    response: &httparse::Response<'_, '_>,
    head_len: usize,
    max_body: usize,
) -> Result<(usize, u16, usize, bool), ClientError> {
    let status = response.code.unwrap_or(0);
    if !(200..=599).contains(&status) {
        return Err(ClientError::Invalid(format!("status {status}")));
    }
    let mut length = None;
    let mut keep_alive = response.version == Some(1);
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = crate::http1::parse_content_length(h.value).ok_or_else(|| {
                ClientError::Invalid(format!("Content-Length `{}`", String::from_utf8_lossy(h.value).escape_debug()))
            })?;
            if length.is_some_and(|l| l != n) {
                return Err(ClientError::Invalid("two different Content-Length headers".into()));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ClientError::Invalid("a Transfer-Encoding body (clef answers with Content-Length)".into()));
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep_alive = crate::http1::keep_alive_after(h.value, keep_alive);
        }
    }
    let length = length.ok_or_else(|| ClientError::Invalid("no Content-Length".into()))?;
    if length > max_body {
        return Err(ClientError::Invalid(format!("a body of {length} bytes, more than the {max_body} accepted")));
    }
    Ok((head_len, status, length, keep_alive))
}

/// A stream whose reads can be given a timeout.
trait Timed {
    fn set_timeout(&mut self, timeout: Duration) -> io::Result<()>;
}

/// How long a given-up connection is kept before it is dropped (see [`retire`]).
const RETIRE_AFTER: Duration = Duration::from_millis(500);
/// Given-up connections kept per worker thread at most; beyond, the oldest go at once.
const RETIRED_PER_THREAD: usize = 512;

thread_local! {
    /// This worker thread's idle connections: (pool key, address, connection).
    static POOL: RefCell<Vec<(u64, SocketAddr, Stream)>> = const { RefCell::new(Vec::new()) };
    /// Connections given up on this thread, with when, waiting to be dropped.
    static RETIRED: RefCell<VecDeque<(Instant, Stream)>> = const { RefCell::new(VecDeque::new()) };
}

// The thread-local helpers below are never inlined: their callers yield (and may resume on
// another thread) between calls, and an inlined access could reuse the thread-local address
// computed before the yield, on the wrong thread.

/// An idle connection for `key` to `addr` from this thread's pool, else from the shared one.
#[inline(never)]
fn take(key: u64, addr: SocketAddr) -> Option<Stream> {
    let own = POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let at = pool.iter().rposition(|(k, a, _)| *k == key && *a == addr)?;
        Some(pool.swap_remove(at).2)
    });
    own.or_else(|| {
        let mut spare = SPARE.lock();
        let at = spare.iter().rposition(|(k, a, _)| *k == key && *a == addr)?;
        Some(spare.swap_remove(at).2)
    })
}

/// Keeps `stream` for the next forward on this thread when the answer allows and the
/// pool's caps do; gives it up otherwise.
#[inline(never)]
fn keep_or_retire(key: u64, addr: SocketAddr, stream: Stream, keep_alive: bool) {
    let refused = POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let same = pool.iter().filter(|(k, _, _)| *k == key).count();
        if keep_alive && same < IDLE_PER_INSTANCE && pool.len() < IDLE_PER_THREAD {
            pool.push((key, addr, stream));
            None
        } else {
            Some(stream)
        }
    });
    let Some(stream) = refused else { return };
    if !keep_alive {
        return retire(stream);
    }
    let unkept = {
        let mut spare = SPARE.lock();
        if spare.len() < IDLE_SHARED {
            spare.push((key, addr, stream));
            None
        } else {
            Some(stream)
        }
    };
    // retired outside the lock: dropping old connections deregisters them from the event loop
    if let Some(stream) = unkept {
        retire(stream);
    }
}

/// Gives a connection up. It is dropped (closed, and its I/O state freed) only after
/// [`RETIRE_AFTER`]: may's scheduler may still be reading that state on another worker for a
/// moment after the operation that ended here was completed (it registers the coroutine,
/// then looks at the state once more, while the event loop elsewhere may already run the
/// coroutine on). At most [`RETIRED_PER_THREAD`] wait.
#[inline(never)]
fn retire(stream: Stream) {
    let now = Instant::now();
    let expired = RETIRED.with(|retired| {
        let mut retired = retired.borrow_mut();
        retired.push_back((now, stream));
        let mut expired = Vec::new();
        while let Some((at, _)) = retired.front() {
            if now.duration_since(*at) < RETIRE_AFTER && retired.len() <= RETIRED_PER_THREAD {
                break;
            }
            expired.extend(retired.pop_front().map(|(_, s)| s));
        }
        expired
    });
    // dropped outside the borrow: dropping deregisters from the event loop
    drop(expired);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(Vec<u8>, usize);
    impl Read for Bytes {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // a few bytes at a time, to go through the partial paths
            let n = buf.len().min(7).min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }
    impl Timed for Bytes {
        fn set_timeout(&mut self, _: Duration) -> io::Result<()> {
            Ok(())
        }
    }

    fn read(text: &str, max: usize) -> Result<Exchange, ClientError> {
        let mut buf = Vec::new();
        let head = read_answer(
            &mut Bytes(text.as_bytes().to_vec(), 0),
            &mut buf,
            Instant::now() + Duration::from_secs(5),
            max,
        )?;
        Ok(Exchange { status: head.status, body: buf[head.body].to_vec(), keep_alive: head.keep_alive })
    }

    #[test]
    fn reads_content_length_answers() {
        let a = read("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 100).unwrap();
        assert_eq!((a.status, &a.body[..], a.keep_alive), (200, &b"{}"[..], true));
        let a = read("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 100).unwrap();
        assert_eq!((a.status, a.keep_alive), (404, false));
        // bytes beyond the answer: answered, but the connection is not reused
        let a = read("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy", 100).unwrap();
        assert!(!a.keep_alive);
    }

    #[test]
    fn operation_timeouts_never_outlast_the_deadline_and_repeat_across_exchanges() {
        for timeout_ms in [1u64, 5, 80, 100, 1000, 2500, 30_000] {
            let timeout = Duration::from_millis(timeout_ms);
            let first = op_timeout(Instant::now() + timeout).unwrap();
            assert!(first <= timeout, "{first:?} for {timeout:?}");
            let least = timeout.saturating_sub(timeout / 32 + Duration::from_millis(1));
            assert!(first >= least, "{first:?} for {timeout:?}");
            if timeout_ms >= 32 {
                // the next exchange on the connection, a moment later: the same timeout, so
                // the socket is not told again
                assert_eq!(op_timeout(Instant::now() + timeout).unwrap(), first, "{timeout:?}");
            }
        }
        assert!(matches!(op_timeout(Instant::now()), Err(ClientError::Timeout)));
    }

    #[test]
    fn a_kept_buffer_is_reused_without_old_bytes_showing() {
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let long = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
        let head = read_answer(&mut Bytes(long.as_bytes().to_vec(), 0), &mut buf, deadline, 100).unwrap();
        assert_eq!(&buf[head.body], b"0123456789");
        let short = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab";
        let head = read_answer(&mut Bytes(short.as_bytes().to_vec(), 0), &mut buf, deadline, 100).unwrap();
        assert_eq!((&buf[head.body], head.keep_alive), (&b"ab"[..], true));
    }

    #[test]
    fn refuses_what_clef_never_sends() {
        let bad = [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "HTTP/1.1 200 OK\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            "SMTP ready\r\n\r\n",
            "HTTP/1.1 100 Continue\r\n\r\n",
        ];
        for text in bad {
            assert!(matches!(read(text, 100), Err(ClientError::Invalid(_))), "{text:?}");
        }
        let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert!(matches!(read(&long, 100), Err(ClientError::Invalid(_))));
        // cut short: broken after some bytes (not resent)
        assert!(matches!(
            read("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 100),
            Err(ClientError::Broken { answered: true, .. })
        ));
        assert!(matches!(read("", 100), Err(ClientError::Broken { answered: false, .. })));
    }
}
