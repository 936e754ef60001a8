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
//! - **Streamed answers.** An answer whose size grows with the request or the
//!   server's state (a batch, `/metrics`) is produced while it is written, in
//!   chunks of at most [`OUT_CAP`] (`Transfer-Encoding: chunked`), under the same
//!   backpressure: its producer waits while the client does not read.
//! - **A shared budget for large requests.** The read buffer grows to fit one
//!   request (at most the head and body limits); beyond its first
//!   [`READ_CHUNK`] bytes it takes from a budget all connections share
//!   ([`RequestMemory`], `server.request_memory_bytes`), and a request that
//!   does not fit is answered 503 `overloaded` at once. Memory beyond the base
//!   goes back to the system as soon as the request is answered.
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

use crate::server::errors::{ErrorAnswer as _, ErrorCode};
use std::fmt;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::buffer::{Held, InputBuffer, RequestMemory};
use crate::http1::{keep_alive_after, parse_content_length, BodyProducer, BodySink, Closed, Request, Response};

/// Limits applied to each connection.
#[derive(Debug)]
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
    /// the memory all connections share for requests larger than [`READ_CHUNK`]
    pub request_memory: RequestMemory,
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

/// Bytes read at a time, and the size the read buffer shrinks back to: what a connection may
/// hold without taking from the shared [`RequestMemory`].
pub const READ_CHUNK: usize = super::buffer::BASE;
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
    /// a full request was answered; it used `used` bytes of the buffer, of which `body` are
    /// its body
    Answered { used: usize, body: Range<usize> },
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
    /// a streamed answer could not be written: the connection closes now
    Failed(Closed),
}

/// One connection's buffers and clocks; `'h`: what the handler's streamed answers borrow.
struct Conn<'l, 'h> {
    limits: &'l ConnLimits,
    /// `input[..filled]` holds bytes read and not yet answered
    input: InputBuffer<'l>,
    filled: usize,
    out: Vec<u8>,
    rsp: Response<'h>,
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
    /// what a streamed answer sent whole holds of the shared budget until it is written
    whole_held: Held<'l>,
}

/// Serves one connection until it closes, fails, or times out; tells `observer` why it closed.
pub fn serve<'h, S, H, O>(stream: &mut S, limits: &ConnLimits, handler: &H, observer: &O)
where
    S: Socket,
    H: Fn(&Request<'_>, &mut Response<'h>),
    O: ConnObserver,
{
    observer.closed(serve_until_closed(stream, limits, handler, observer));
}

fn serve_until_closed<'h, S, H, O>(stream: &mut S, limits: &ConnLimits, handler: &H, observer: &O) -> Closed
where
    S: Socket,
    H: Fn(&Request<'_>, &mut Response<'h>),
    O: ConnObserver,
{
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let mut conn = Conn {
        limits,
        input: InputBuffer::new(&limits.request_memory),
        filled: 0,
        out: Vec::new(),
        rsp: Response::new(),
        request_started: None,
        idle_since: Instant::now(),
        continued: false,
        read_timeout: None,
        written_at: None,
        unsent: None,
        whole_held: Held::new(&limits.request_memory),
    };
    loop {
        let pause = conn.answer(stream, handler, observer);
        if let Pause::Failed(why) = pause {
            return why;
        }
        if !conn.out.is_empty() {
            if let Err(e) = write_all(stream, &conn.out) {
                return write_failed(&e, observer);
            }
            conn.written_at = Some(Instant::now());
            conn.unsent = None;
            conn.out.clear();
        }
        conn.release_large();
        let ready = match pause {
            Pause::Close | Pause::Failed(_) => return Closed::Answered,
            Pause::Full => continue,
            Pause::Empty => conn.ready_for(None),
            Pause::Incomplete(total) => conn.ready_for(total),
        };
        if ready.is_err() {
            conn.overloaded(stream, observer);
            return Closed::RequestMemory;
        }
        if let Err(why) = conn.wait_and_read(stream, observer) {
            return why;
        }
    }
}

/// The reason a connection closes after a failed write, counted.
fn write_failed<O: ConnObserver>(e: &io::Error, observer: &O) -> Closed {
    if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) {
        observer.write_timed_out();
        return Closed::WriteTimeout;
    }
    Closed::WriteError
}

impl<'h> Conn<'_, 'h> {
    /// Answers the complete requests at the front of the buffer, up to [`OUT_CAP`] of answers
    /// (a streamed answer is written as it is produced).
    #[inline(never)]
    fn answer<S, H, O>(&mut self, stream: &mut S, handler: &H, observer: &O) -> Pause
    where
        S: Write,
        H: Fn(&Request<'_>, &mut Response<'h>),
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
                Ok(Step::Answered { used, body }) => {
                    if observer.draining() {
                        // even an answer to a request that began before the drain says so,
                        // or its client would send the next request into a closing socket
                        self.rsp.close = true;
                    }
                    let body = &self.input[consumed + body.start..consumed + body.end];
                    if self.rsp.is_streamed() && !self.rsp.chunked && !self.rsp.head {
                        produce_whole(&mut self.rsp, body, &mut self.whole_held);
                    }
                    self.rsp.encode(&mut self.out);
                    observer.responded(self.rsp.status);
                    if let Some(produce) = self.rsp.take_stream().filter(|_| !self.rsp.head) {
                        if let Err(why) = send_streamed(stream, &mut self.out, body, produce) {
                            break Pause::Failed(match why {
                                Streamed::WriteFailed(e) => write_failed(&e, observer),
                                Streamed::Panicked => Closed::Answered,
                            });
                        }
                    }
                    consumed += used;
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

    /// Gives back answer buffers grown by a large answer (once it is written).
    fn release_large(&mut self) {
        if self.out.capacity() > OUT_CAP + KEEP_CAPACITY {
            self.out = Vec::new();
        }
        self.rsp.release_large(KEEP_CAPACITY);
        // the body it held is given back above (larger than what is kept)
        let _ = self.whole_held.set(0);
    }

    /// Sizes the read buffer for what comes next: room for a request of `total` bytes
    /// (when known), else one chunk more; a buffer grown for an earlier, larger
    /// request shrinks back.
    /// `Err` when the shared budget cannot hold the request.
    fn ready_for(&mut self, total: Option<usize>) -> Result<(), super::buffer::Exhausted> {
        let need = total.unwrap_or(self.filled + READ_CHUNK / 2).max(READ_CHUNK);
        if need > self.input.len() {
            // a known length at once; a head that trickles in by doubling, up to what the head
            // limit needs (one byte more tells that a head is too long)
            let size = match total {
                Some(_) => need,
                None => need.max(self.input.len() * 2).min(self.limits.max_header_bytes + 1).max(need),
            };
            self.input.resize(size, self.filled)
        } else if self.input.len() > READ_CHUNK && need <= READ_CHUNK {
            // back to the base: the large buffer goes back to the system
            self.input.resize(READ_CHUNK, self.filled)
        } else {
            Ok(())
        }
    }

    /// Frees every buffer of an idle connection.
    fn release_all(&mut self) {
        if self.filled == 0 {
            self.input.free();
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
                        // the base takes nothing from the shared budget: this cannot fail
                        let _ = self.input.resize(READ_CHUNK, 0);
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

impl Conn<'_, '_> {
    /// Answers 408 and gives up on a request that did not arrive in time.
    fn timed_out<S: Socket, O: ConnObserver>(&mut self, stream: &mut S, observer: &O) {
        observer.timed_out();
        self.give_up(stream, observer, |rsp| {
            rsp.fail(ErrorCode::RequestTimeout, "the request did not arrive in time; the connection is closed");
        });
    }

    /// Answers 503 to a request the shared budget for large requests has no room for now.
    fn overloaded<S: Socket, O: ConnObserver>(&mut self, stream: &mut S, observer: &O) {
        let limit = self.limits.request_memory.limit();
        self.give_up(stream, observer, |rsp| overloaded(rsp, limit));
    }

    /// Answers what `fill` says to the request being read, which is given up on: the
    /// connection closes.
    fn give_up<S: Socket, O: ConnObserver>(
        &mut self,
        stream: &mut S,
        observer: &O,
        fill: impl FnOnce(&mut Response<'_>),
    ) {
        self.rsp.reset();
        fill(&mut self.rsp);
        self.rsp.close = true;
        let mut out = Vec::new();
        self.rsp.encode(&mut out);
        observer.responded(self.rsp.status);
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
fn step<'h, H: Fn(&Request<'_>, &mut Response<'h>)>(
    pending: &[u8],
    limits: &ConnLimits,
    handler: &H,
    rsp: &mut Response<'h>,
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
                rsp.fail(ErrorCode::HeadersTooLarge, &too_large_headers(limits));
                return Err(());
            }
            return Ok(Step::NeedMore { total: None, continue_: false });
        }
        Err(httparse::Error::TooManyHeaders) => {
            rsp.fail(ErrorCode::HeadersTooLarge, &too_large_headers(limits));
            return Err(());
        }
        Err(e) => {
            rsp.fail(ErrorCode::BadRequest, &format!("malformed HTTP request: {e}"));
            return Err(());
        }
    };
    if head_len > limits.max_header_bytes {
        rsp.fail(ErrorCode::HeadersTooLarge, &too_large_headers(limits));
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
                    rsp.fail(
                        ErrorCode::InvalidBody,
                        "Content-Length must be one decimal number of bytes (digits only, no sign, no leading zeros)",
                    );
                    return Err(());
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            rsp.fail(ErrorCode::LengthRequired, "chunked bodies are not accepted; send a Content-Length");
            return Err(());
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep_alive = keep_alive_after(h.value, keep_alive);
        } else if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = h.value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > limits.max_body_bytes {
        rsp.fail(
            ErrorCode::BodyTooLarge,
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
    rsp.chunked = req.version == Some(1);
    let answered = catch_unwind(AssertUnwindSafe(|| handler(&request, rsp)));
    if answered.is_err() {
        let head = rsp.head;
        rsp.reset();
        rsp.head = head;
        rsp.fail(ErrorCode::InternalError, "the request could not be handled; this is a bug in clef");
    }
    if !keep_alive {
        rsp.close = true;
    }
    Ok(Step::Answered { used: head_len + body_len, body: head_len..head_len + body_len })
}

/// The answer to a request the shared budget for large requests has no room for now.
fn overloaded(rsp: &mut Response<'_>, limit: usize) {
    rsp.fail(
        ErrorCode::Overloaded,
        &format!(
            "the server holds all the memory it may for large requests and their answers \
             (server.request_memory_bytes: {limit} bytes); retry in a moment"
        ),
    );
    rsp.add_header("Retry-After", "1");
}

/// Runs a streamed answer's producer into [`Response::body`], for a client that reads no
/// chunked answers (HTTP/1.0, or a clef router forwarding a request): the answer then goes
/// whole, with a `Content-Length`. The body holds twice its size in the shared budget (it is
/// copied into the answers to write) until it is written; when the budget has no room, the
/// answer is 503 `overloaded` instead.
fn produce_whole<'m>(rsp: &mut Response<'_>, body: &[u8], held: &mut Held<'m>) {
    let Some(produce) = rsp.take_stream() else { return };
    rsp.body.clear();
    let mut sink = WholeSink { body: &mut rsp.body, held, exhausted: false };
    let produced = catch_unwind(AssertUnwindSafe(|| produce(body, &mut sink)));
    let exhausted = sink.exhausted;
    if produced.is_err() {
        let head = rsp.head;
        rsp.reset();
        rsp.head = head;
        rsp.fail(ErrorCode::InternalError, "the request could not be handled; this is a bug in clef");
    } else if exhausted {
        let limit = held.limit();
        rsp.body = String::new();
        let _ = held.set(0);
        overloaded(rsp, limit);
    }
}

/// The [`BodySink`] of [`produce_whole`].
struct WholeSink<'b, 'm> {
    body: &'b mut String,
    held: &'b mut Held<'m>,
    exhausted: bool,
}

/// The shared budget is taken in steps of this many bytes by a body sent whole.
const WHOLE_STEP: usize = 4096;

impl fmt::Write for WholeSink<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // twice the body: it is copied into the answers to write; the first READ_CHUNK bytes
        // are the connection's own, as for requests
        let need = (2 * (self.body.len() + s.len())).saturating_sub(READ_CHUNK);
        if self.exhausted || (need > self.held.bytes() && self.held.set(need.next_multiple_of(WHOLE_STEP)).is_err()) {
            self.exhausted = true;
            return Err(fmt::Error);
        }
        self.body.push_str(s);
        Ok(())
    }
}

impl BodySink for WholeSink<'_, '_> {
    fn gone(&self) -> bool {
        self.exhausted
    }
}

/// Why a streamed answer stopped before its end.
enum Streamed {
    /// writing to the client failed (it is gone, or stopped reading for the write timeout)
    WriteFailed(io::Error),
    /// the producer panicked (a bug): the answer is cut off
    Panicked,
}

/// Room kept below [`OUT_CAP`] for a chunk's framing.
const CHUNK_FRAMING: usize = 32;

/// Runs a streamed answer's producer over the request's `body`, writing what it produces to
/// `stream` in chunks whenever about [`OUT_CAP`] bytes are waiting (after the answers and the
/// head already in `out`). Leaves the end of the answer in `out`.
fn send_streamed<S: Write>(
    stream: &mut S,
    out: &mut Vec<u8>,
    body: &[u8],
    produce: BodyProducer<'_>,
) -> Result<(), Streamed> {
    let start = out.len();
    let mut sink = ChunkSink { stream, out, start, failed: None };
    let produced = catch_unwind(AssertUnwindSafe(|| produce(body, &mut sink)));
    if let Some(e) = sink.failed {
        return Err(Streamed::WriteFailed(e));
    }
    if produced.is_err() {
        log::error!("a streamed answer failed midway; its connection is closed (this is a bug in clef)");
        return Err(Streamed::Panicked);
    }
    sink.frame();
    sink.out.extend_from_slice(b"0\r\n\r\n");
    Ok(())
}

/// The [`BodySink`] of a streamed answer: collects up to [`OUT_CAP`] bytes, then writes them.
struct ChunkSink<'s, S> {
    stream: &'s mut S,
    out: &'s mut Vec<u8>,
    /// where the body bytes not yet framed begin in `out`
    start: usize,
    failed: Option<io::Error>,
}

impl<S: Write> ChunkSink<'_, S> {
    /// Frames the body bytes collected since `start` as one chunk (none when there are none:
    /// an empty chunk would end the body).
    fn frame(&mut self) {
        let len = self.out.len() - self.start;
        if len > 0 {
            let size = format!("{len:x}\r\n");
            self.out.splice(self.start..self.start, size.bytes());
            self.out.extend_from_slice(b"\r\n");
        }
        self.start = self.out.len();
    }

    fn flush(&mut self) -> fmt::Result {
        self.frame();
        match write_all(self.stream, self.out) {
            Ok(()) => {
                self.out.clear();
                self.start = 0;
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e);
                Err(fmt::Error)
            }
        }
    }
}

impl<S: Write> fmt::Write for ChunkSink<'_, S> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.failed.is_some() {
            return Err(fmt::Error);
        }
        if !self.out.is_empty() && self.out.len() + s.len() > OUT_CAP - CHUNK_FRAMING {
            self.flush()?;
        }
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl<S: Write> BodySink for ChunkSink<'_, S> {
    fn gone(&self) -> bool {
        self.failed.is_some()
    }
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

    /// A socket that takes every write whole (or fails them all), and records them.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<usize>,
        bytes: Vec<u8>,
        broken: bool,
    }

    impl Write for Recorder {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if self.broken {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.writes.push(bytes.len());
            self.bytes.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The body of a chunked message, and what follows it.
    fn dechunk(mut bytes: &[u8]) -> (Vec<u8>, &[u8]) {
        let mut body = Vec::new();
        loop {
            let eol = bytes.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
            let size = usize::from_str_radix(std::str::from_utf8(&bytes[..eol]).unwrap(), 16).unwrap();
            assert_eq!(&bytes[eol + 2 + size..eol + 4 + size], b"\r\n");
            body.extend_from_slice(&bytes[eol + 2..eol + 2 + size]);
            bytes = &bytes[eol + 4 + size..];
            if size == 0 {
                return (body, bytes);
            }
        }
    }

    #[test]
    fn a_streamed_answer_goes_out_in_chunks_of_at_most_the_cap() {
        let line = format!("{}\n", "x".repeat(999));
        let mut socket = Recorder::default();
        let mut out = b"earlier answer|head|".to_vec();
        let producer_line = line.clone();
        let produce: BodyProducer<'_> = Box::new(move |body, sink| {
            assert_eq!(body, b"the request body");
            for _ in 0..300 {
                sink.write_str(&producer_line).unwrap();
            }
            assert!(!sink.gone());
        });
        assert!(send_streamed(&mut socket, &mut out, b"the request body", produce).is_ok());
        assert!(socket.writes.len() >= 4, "{:?}", socket.writes);
        assert!(socket.writes.iter().all(|&n| n <= OUT_CAP), "{:?}", socket.writes);
        assert!(out.len() < OUT_CAP, "the tail left to write is {} bytes", out.len());
        socket.bytes.extend_from_slice(&out);
        let sent = socket.bytes.strip_prefix(b"earlier answer|head|").expect("what was waiting goes first");
        let (body, rest) = dechunk(sent);
        assert_eq!(body, line.repeat(300).as_bytes());
        assert!(rest.is_empty());
    }

    #[test]
    fn a_streamed_answer_stops_when_the_client_is_gone() {
        let mut socket = Recorder { broken: true, ..Recorder::default() };
        let mut out = Vec::new();
        let produced = std::rc::Rc::new(std::cell::Cell::new(0));
        let count = produced.clone();
        let produce: BodyProducer<'_> = Box::new(move |_, sink| {
            while !sink.gone() {
                let _ = sink.write_str(&"y".repeat(1000));
                count.set(count.get() + 1000);
            }
        });
        match send_streamed(&mut socket, &mut out, b"", produce) {
            Err(Streamed::WriteFailed(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
            _ => panic!("the failed write is not reported"),
        }
        assert!(produced.get() <= OUT_CAP + 1000, "{} bytes produced for a client that is gone", produced.get());
    }
}
