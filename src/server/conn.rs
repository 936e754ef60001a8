//! The per-connection loop on a may coroutine: keep-alive, pipelining, and
//! every limit of SPEC §6.
//!
//! may_minihttp's own loop stops at 16 headers (dropping the connection without
//! an answer), unwraps `Content-Length` (a bad value panics), has no body
//! limit and no timeouts, so clef runs this loop instead, in the same style:
//! read what is there, answer the complete requests in the buffer, write the
//! answers, wait for more.
//!
//! # What one client can make a connection hold
//!
//! Nothing a client sends may grow the process without bound or keep memory
//! after it is done with it (SPEC §6, "Memory per connection is bounded"):
//!
//! - **Backpressure.** Answers to pipelined requests are collected only up to
//!   [`OUT_CAP`]; then they are written before another request is answered.
//!   While they cannot be written the connection reads nothing, so a client
//!   that sends and never reads fills its own socket buffers, not our heap.
//! - **Buffers shrink.** The read buffer grows to fit one request (at most
//!   the head and body limits) and shrinks back as soon as that request is
//!   answered; the answer buffers shrink after a large answer.
//! - **Idle connections hold no buffers.** A connection idle for
//!   [`IDLE_SLICE`] frees its buffers and waits for its next request with a
//!   one-byte peek on the stack.
//!
//! # Time
//!
//! - `read_timeout`: a request must arrive whole this long after its first byte (408).
//! - `idle_timeout`: a keep-alive connection may wait this long for its next request.
//! - `write_timeout`: an answer must make progress this often. A blocked
//!   write fails after it (may's per-call write timer, so a slow but steady
//!   reader is fine); and answers the kernel accepted but the client never
//!   reads (its send queue does not shrink) close the connection after it too,
//!   rather than holding it until the idle timeout.
//! - Draining (SIGTERM): every answer from then on says `Connection: close`;
//!   an idle connection closes at its next wake-up (within [`IDLE_SLICE`]),
//!   once it has been idle for a short grace, so that a request its client
//!   sent just after the last answer is answered (503) rather than reset.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: every range lies within the connection's buffer, checked against its filled
// length just before.
#![allow(clippy::indexing_slicing)]

use std::io::{self, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::http::{Request, Response};

/// Limits applied to each connection.
#[derive(Clone, Debug)]
pub struct ConnLimits {
    /// largest accepted body
    pub max_body_bytes: usize,
    /// most headers in one request
    pub max_headers: usize,
    /// largest request head (request line and headers)
    pub max_header_bytes: usize,
    /// how long a keep-alive connection may wait for its next request
    pub idle_timeout: Duration,
    /// how long a request may take to arrive once its first byte has
    pub read_timeout: Duration,
    /// how long an answer may go without progress before the connection is dropped
    pub write_timeout: Duration,
}

/// What the connection loop reports to its owner, and asks it.
pub trait ConnObserver {
    /// a response was written
    fn responded(&self, status: u16);
    /// a request took longer than the read timeout
    fn timed_out(&self);
    /// a client stopped reading its answers for longer than the write timeout
    fn write_timed_out(&self) {}
    /// the connection closed, and why
    fn closed(&self, _why: Closed) {}
    /// whether the server is draining: idle connections close
    fn draining(&self) -> bool {
        false
    }
}

/// Why a connection closed (`clef_connections_closed_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// the client closed it
    Client,
    /// it was idle for the idle timeout
    Idle,
    /// the server is draining (SIGTERM)
    Draining,
    /// an answer said `Connection: close` (the client asked, or the request was malformed)
    Answered,
    /// a request did not arrive within the read timeout (answered 408)
    ReadTimeout,
    /// the client stopped reading its answers for the write timeout
    WriteTimeout,
    /// reading failed (a reset, say)
    ReadError,
    /// writing an answer failed
    WriteError,
}

impl Closed {
    /// Every reason, in the order of [`Closed::index`].
    pub const ALL: [Closed; 8] = [
        Closed::Client,
        Closed::Idle,
        Closed::Draining,
        Closed::Answered,
        Closed::ReadTimeout,
        Closed::WriteTimeout,
        Closed::ReadError,
        Closed::WriteError,
    ];

    /// The reason's place in [`Closed::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Closed::Client => "client",
            Closed::Idle => "idle_timeout",
            Closed::Draining => "draining",
            Closed::Answered => "connection_close",
            Closed::ReadTimeout => "read_timeout",
            Closed::WriteTimeout => "write_timeout",
            Closed::ReadError => "read_error",
            Closed::WriteError => "write_error",
        }
    }
}

/// The socket operations the loop needs beyond `Read` and `Write`.
pub trait Socket: Read + Write {
    /// Sets how long one read may block.
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
    /// Sets how long one write may block without progress.
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
    /// Blocks (up to the read timeout) until data can be read, without taking it.
    fn peek_byte(&mut self) -> io::Result<usize>;
    /// Bytes handed to the kernel that the peer has not acknowledged yet, when known.
    fn unsent_bytes(&self) -> Option<usize>;
}

/// Bytes read at a time, and the size the read buffer shrinks back to.
pub const READ_CHUNK: usize = 8192;
/// Answers collected before they are written; while they cannot be written, nothing more is read.
pub const OUT_CAP: usize = 64 * 1024;
/// Capacity kept by answer buffers between requests; anything larger is given back.
const KEEP_CAPACITY: usize = 16 * 1024;
/// How long an idle connection waits before it frees its buffers, checks for draining and
/// for answers its client does not read.
pub const IDLE_SLICE: Duration = Duration::from_secs(1);

/// During a drain, how long a connection that was just answered is kept open for the next
/// request its client may already be sending.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

enum Step {
    /// a full request was answered; it used this many bytes of the buffer
    Answered(usize),
    /// more bytes are needed: the whole request is `total` bytes when known;
    /// `continue_` when the client waits for `100 Continue`
    NeedMore { total: Option<usize>, continue_: bool },
}

/// Why answering stopped for now.
enum Pause {
    /// every buffered byte was used
    Empty,
    /// the buffer starts with an incomplete request of `total` bytes (when known)
    Incomplete(Option<usize>),
    /// [`OUT_CAP`] of answers are waiting to be written
    Full,
    /// the connection must close after the answers are written
    Close,
}

/// One connection's buffers and clocks.
struct Conn<'l> {
    limits: &'l ConnLimits,
    /// `input[..filled]` holds bytes read and not yet answered
    input: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
    rsp: Response,
    /// when the first byte of the incomplete request at the front of `input` arrived
    request_started: Option<Instant>,
    /// when the connection last finished a request (or opened)
    idle_since: Instant,
    /// whether `100 Continue` was sent for the request being read
    continued: bool,
    /// the read timeout last given to the socket, to skip needless system calls
    read_timeout: Option<Duration>,
    /// when answers were last handed to the kernel, while they may still be unread
    written_at: Option<Instant>,
    /// the kernel's send queue at the last check, and when it last shrank
    unsent: Option<(usize, Instant)>,
}

/// Serves one connection until it closes, fails, or times out; tells `observer` why it closed.
pub fn serve<S, H, O>(stream: &mut S, limits: &ConnLimits, handler: &H, observer: &O)
where
    S: Socket,
    H: Fn(&Request<'_>, &mut Response),
    O: ConnObserver,
{
    observer.closed(serve_until_closed(stream, limits, handler, observer));
}

fn serve_until_closed<S, H, O>(stream: &mut S, limits: &ConnLimits, handler: &H, observer: &O) -> Closed
where
    S: Socket,
    H: Fn(&Request<'_>, &mut Response),
    O: ConnObserver,
{
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let mut conn = Conn {
        limits,
        input: Vec::new(),
        filled: 0,
        out: Vec::new(),
        rsp: Response::new(),
        request_started: None,
        idle_since: Instant::now(),
        continued: false,
        read_timeout: None,
        written_at: None,
        unsent: None,
    };
    loop {
        let pause = conn.answer(handler, observer);
        if !conn.out.is_empty() {
            if let Err(e) = write_all(stream, &conn.out) {
                if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) {
                    observer.write_timed_out();
                    return Closed::WriteTimeout;
                }
                return Closed::WriteError;
            }
            conn.written_at = Some(Instant::now());
            conn.unsent = None;
            conn.out.clear();
        }
        conn.release_large();
        match pause {
            Pause::Close => return Closed::Answered,
            Pause::Full => continue,
            Pause::Empty => conn.ready_for(None),
            Pause::Incomplete(total) => conn.ready_for(total),
        }
        if let Err(why) = conn.wait_and_read(stream, observer) {
            return why;
        }
    }
}

impl Conn<'_> {
    /// Answers the complete requests at the front of the buffer, up to [`OUT_CAP`] of answers.
    #[inline(never)]
    fn answer<H, O>(&mut self, handler: &H, observer: &O) -> Pause
    where
        H: Fn(&Request<'_>, &mut Response),
        O: ConnObserver,
    {
        let mut consumed = 0;
        let pause = loop {
            if consumed == self.filled {
                break Pause::Empty;
            }
            if self.out.len() >= OUT_CAP {
                break Pause::Full;
            }
            let pending = &self.input[consumed..self.filled];
            match step(pending, self.limits, handler, &mut self.rsp, &mut self.continued) {
                Ok(Step::Answered(n)) => {
                    if observer.draining() {
                        // even an answer to a request that began before the drain says so,
                        // or its client would send the next request into a closing socket
                        self.rsp.close = true;
                    }
                    self.rsp.encode(&mut self.out);
                    observer.responded(self.rsp.status);
                    consumed += n;
                    self.continued = false;
                    self.request_started = None;
                    self.idle_since = Instant::now();
                    if self.rsp.close {
                        break Pause::Close;
                    }
                }
                Ok(Step::NeedMore { total, continue_ }) => {
                    if continue_ {
                        self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    break Pause::Incomplete(total);
                }
                Err(()) => {
                    self.rsp.close = true;
                    self.rsp.encode(&mut self.out);
                    observer.responded(self.rsp.status);
                    break Pause::Close;
                }
            }
        };
        if consumed > 0 {
            self.input.copy_within(consumed..self.filled, 0);
            self.filled -= consumed;
        }
        pause
    }

    /// Gives back answer buffers grown by a large answer.
    fn release_large(&mut self) {
        if self.out.capacity() > OUT_CAP + KEEP_CAPACITY {
            self.out = Vec::new();
        }
        self.rsp.release_large(KEEP_CAPACITY);
    }

    /// Sizes the read buffer for what comes next: room for a request of `total` bytes
    /// (when known), else one chunk more; a buffer grown for an earlier, larger
    /// request shrinks back.
    fn ready_for(&mut self, total: Option<usize>) {
        let need = total.unwrap_or(self.filled + READ_CHUNK / 2).max(READ_CHUNK);
        if need > self.input.len() {
            // a head that trickles in grows the buffer by doubling; a known length at once
            let size = if total.is_some() { need } else { need.max(self.input.len() * 2) };
            self.input.resize(size, 0);
        } else if self.input.len() > READ_CHUNK && need <= READ_CHUNK {
            // a fresh small buffer, so that the large one goes back to the allocator
            let mut small = vec![0; READ_CHUNK];
            small[..self.filled].copy_from_slice(&self.input[..self.filled]);
            self.input = small;
        }
    }

    /// Frees every buffer of an idle connection.
    fn release_all(&mut self) {
        if self.filled == 0 {
            self.input = Vec::new();
        }
        self.out = Vec::new();
        self.rsp.release_large(0);
    }

    /// Waits for more bytes and reads them; `Err` when the connection must close, and why.
    #[inline(never)]
    fn wait_and_read<S: Socket, O: ConnObserver>(&mut self, stream: &mut S, observer: &O) -> Result<(), Closed> {
        loop {
            let now = Instant::now();
            let slice = if self.filled > 0 {
                let started = *self.request_started.get_or_insert(now);
                let left = self.limits.read_timeout.saturating_sub(now - started);
                if left.is_zero() {
                    self.timed_out(stream, observer);
                    return Err(Closed::ReadTimeout);
                }
                left
            } else {
                let idle_for = now - self.idle_since;
                let draining = observer.draining();
                let left = if draining {
                    // A client that just got an answer may be sending its next request right
                    // now: give it a moment to arrive (it is answered 503 with `Connection:
                    // close`) rather than closing under it, which would reset that request.
                    DRAIN_GRACE.saturating_sub(idle_for)
                } else {
                    self.limits.idle_timeout.saturating_sub(idle_for)
                };
                if left.is_zero() {
                    return Err(if draining { Closed::Draining } else { Closed::Idle });
                }
                left.min(IDLE_SLICE)
            };
            let slice = match self.written_at {
                Some(_) => slice.min(self.limits.write_timeout),
                None => slice,
            };
            // may keeps socket timeouts in whole milliseconds and reads 0 as "no timeout":
            // round up, or a wait of less than a millisecond would never end.
            let slice = Duration::from_millis(u64::try_from(slice.as_micros().div_ceil(1000)).unwrap_or(u64::MAX));
            if self.read_timeout != Some(slice) && stream.set_read_timeout(Some(slice)).is_ok() {
                self.read_timeout = Some(slice);
            }
            let got = if self.input.is_empty() {
                // idle without buffers: wait on the stack, allocate once bytes are there
                match stream.peek_byte() {
                    Ok(0) => return Err(Closed::Client),
                    Ok(_) => {
                        self.input = vec![0; READ_CHUNK];
                        continue;
                    }
                    Err(e) => Err(e),
                }
            } else {
                stream.read(&mut self.input[self.filled..])
            };
            match got {
                Ok(0) => return Err(Closed::Client),
                Ok(n) => {
                    if self.filled == 0 {
                        self.request_started = Some(Instant::now());
                    }
                    self.filled += n;
                    return Ok(());
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    if !self.still_delivering(stream, observer) {
                        return Err(Closed::WriteTimeout);
                    }
                    if self.filled == 0 && self.idle_since.elapsed() >= IDLE_SLICE {
                        self.release_all();
                    }
                }
                Err(e) if spurious(&e) => {}
                Err(_) => return Err(Closed::ReadError),
            }
        }
    }
}

/// Whether a failed read or write of a client connection is to be tried again: interrupted,
/// or `EINPROGRESS`, which no accepted socket can have. may takes the error of an operation
/// from the thread's `errno` after the coroutine was woken, and another coroutine on that
/// thread may have set it in between: a forward's non-blocking connect leaves `EINPROGRESS`
/// there (seen under load on a forwarding router: a client connection closed under a request,
/// about one in a million).
fn spurious(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted || e.raw_os_error() == Some(nix::libc::EINPROGRESS)
}

/// `Write::write_all`, trying [`spurious`] failures again.
fn write_all<S: Write>(stream: &mut S, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(e) if spurious(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Conn<'_> {
    /// Answers 408 and gives up on a request that did not arrive in time.
    fn timed_out<S: Socket, O: ConnObserver>(&mut self, stream: &mut S, observer: &O) {
        observer.timed_out();
        self.rsp.reset();
        self.rsp.error(408, "request_timeout", "the request did not arrive in time; the connection is closed");
        self.rsp.close = true;
        let mut out = Vec::new();
        self.rsp.encode(&mut out);
        observer.responded(408);
        let _ = write_all(stream, &out);
    }

    /// After a wait that timed out: whether answers already written are still being read.
    /// Answers that sit in the kernel's send queue without it shrinking for the write
    /// timeout mean the client stopped reading: `false`, close.
    fn still_delivering<S: Socket, O: ConnObserver>(&mut self, stream: &S, observer: &O) -> bool {
        let Some(written) = self.written_at else { return true };
        let now = Instant::now();
        match stream.unsent_bytes() {
            None | Some(0) => {
                self.written_at = None;
                self.unsent = None;
                true
            }
            Some(n) => {
                let since = match self.unsent {
                    Some((before, at)) if n >= before => at,
                    Some(_) => now,
                    None => written,
                };
                self.unsent = Some((n, since));
                if now.duration_since(since) >= self.limits.write_timeout {
                    observer.write_timed_out();
                    return false;
                }
                true
            }
        }
    }
}

/// Parses one request at the start of `pending` and answers it if complete.
/// `Err` means an error response is in `rsp` and the connection must close.
//
// Not inlined: its header array (and the handler under it) take stack only while a request
// is parsed, not while the connection waits; stack pages touched once stay resident.
#[inline(never)]
fn step<H: Fn(&Request<'_>, &mut Response)>(
    pending: &[u8],
    limits: &ConnLimits,
    handler: &H,
    rsp: &mut Response,
    continued: &mut bool,
) -> Result<Step, ()> {
    rsp.reset();
    let mut on_stack = [httparse::EMPTY_HEADER; 64];
    let mut on_heap;
    let headers: &mut [httparse::Header<'_>] = if limits.max_headers <= on_stack.len() {
        &mut on_stack[..limits.max_headers]
    } else {
        on_heap = vec![httparse::EMPTY_HEADER; limits.max_headers];
        &mut on_heap
    };
    let mut req = httparse::Request::new(headers);
    let head_len = match req.parse(pending) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if pending.len() > limits.max_header_bytes {
                rsp.error(431, "headers_too_large", &too_large_headers(limits));
                return Err(());
            }
            return Ok(Step::NeedMore { total: None, continue_: false });
        }
        Err(httparse::Error::TooManyHeaders) => {
            rsp.error(431, "headers_too_large", &too_large_headers(limits));
            return Err(());
        }
        Err(e) => {
            rsp.error(400, "bad_request", &format!("malformed HTTP request: {e}"));
            return Err(());
        }
    };
    if head_len > limits.max_header_bytes {
        rsp.error(431, "headers_too_large", &too_large_headers(limits));
        return Err(());
    }
    let mut content_length: Option<usize> = None;
    let mut keep_alive = req.version == Some(1);
    let mut expect_continue = false;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            match (parse_content_length(h.value), content_length) {
                (Some(n), None) => content_length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => {
                    rsp.error(
                        400,
                        "invalid_body",
                        "Content-Length must be one decimal number of bytes (digits only, no sign, no leading zeros)",
                    );
                    return Err(());
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            rsp.error(411, "length_required", "chunked bodies are not accepted; send a Content-Length");
            return Err(());
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep_alive = keep_alive_after(h.value, keep_alive);
        } else if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = h.value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > limits.max_body_bytes {
        rsp.error(
            413,
            "body_too_large",
            &format!(
                "the body is {body_len} bytes; at most {} are accepted (server.max_body_bytes)",
                limits.max_body_bytes
            ),
        );
        return Err(());
    }
    if pending.len() < head_len + body_len {
        let continue_ = expect_continue && !*continued;
        *continued |= continue_;
        return Ok(Step::NeedMore { total: Some(head_len + body_len), continue_ });
    }
    let target = req.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let request = Request {
        method: req.method.unwrap_or(""),
        path,
        query,
        headers: req.headers,
        body: &pending[head_len..head_len + body_len],
    };
    rsp.head = request.method == "HEAD";
    let answered = catch_unwind(AssertUnwindSafe(|| handler(&request, rsp)));
    if answered.is_err() {
        let head = rsp.head;
        rsp.reset();
        rsp.head = head;
        rsp.error(500, "internal_error", "the request could not be handled; this is a bug in clef");
    }
    if !keep_alive {
        rsp.close = true;
    }
    Ok(Step::Answered(head_len + body_len))
}

/// `Content-Length` as RFC 9110 has it: one or more digits. A sign, spaces inside, or a
/// leading zero (`+63`, `00063`) are refused: a lenient proxy in front might read them
/// differently, which is how requests get smuggled.
/// Whether a connection stays open after a `Connection: value` header, `keep_alive` being what
/// the protocol version says without one (the router's client reads peers' answers alike).
pub(crate) fn keep_alive_after(value: &[u8], keep_alive: bool) -> bool {
    let v = String::from_utf8_lossy(value).to_ascii_lowercase();
    if v.contains("close") {
        false
    } else if v.contains("keep-alive") {
        true
    } else {
        keep_alive
    }
}

fn parse_content_length(value: &[u8]) -> Option<usize> {
    let v = value.trim_ascii();
    let digits_only = !v.is_empty() && v.iter().all(u8::is_ascii_digit);
    if !digits_only || (v.len() > 1 && v[0] == b'0') {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn too_large_headers(limits: &ConnLimits) -> String {
    format!(
        "the request head is too large: at most {} headers and {} bytes are accepted \
         (server.max_headers, server.max_header_bytes)",
        limits.max_headers, limits.max_header_bytes
    )
}

impl Socket for may::net::TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        may::net::TcpStream::set_read_timeout(self, timeout)
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        may::net::TcpStream::set_write_timeout(self, timeout)
    }

    fn peek_byte(&mut self) -> io::Result<usize> {
        let mut byte = [0u8; 1];
        self.peek(&mut byte)
    }

    fn unsent_bytes(&self) -> Option<usize> {
        super::socket::unsent_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_is_digits_only() {
        assert_eq!(parse_content_length(b"63"), Some(63));
        assert_eq!(parse_content_length(b" 0 "), Some(0));
        for bad in [&b"+63"[..], b"00063", b"-1", b"6 3", b"", b"0x10", b"99999999999999999999999"] {
            assert_eq!(parse_content_length(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
