//! The per-connection loop on a may coroutine: keep-alive, pipelining, and
//! every limit of SPEC §6.
//!
//! may_minihttp's own loop stops at 16 headers (dropping the connection without
//! an answer), unwraps `Content-Length` (a bad value panics), has no body
//! limit and no timeouts, so clef runs this loop instead, in the same style:
//! read what is there, answer every complete request in the buffer, write all
//! answers at once, wait for more.

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
}

/// What the connection loop reports to its owner.
pub trait ConnObserver {
    /// a response was written
    fn responded(&self, status: u16);
    /// a request took longer than the read timeout
    fn timed_out(&self);
}

const READ_CHUNK: usize = 8192;

enum Step {
    /// a full request was answered; it used this many bytes of the buffer
    Answered(usize),
    /// more bytes are needed; `true` when the client waits for `100 Continue`
    NeedMore(bool),
}

/// Serves one connection until it closes, fails, or times out.
pub fn serve<S, H, O>(stream: &mut S, limits: &ConnLimits, handler: &H, observer: &O)
where
    S: Read + Write + SetTimeout,
    H: Fn(&Request<'_>, &mut Response),
    O: ConnObserver,
{
    // `space[..filled]` holds unread bytes; `space` is zeroed once and reused, so reads never re-zero it.
    let mut space: Vec<u8> = vec![0; READ_CHUNK];
    let mut filled = 0usize;
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut rsp = Response::new();
    let mut started: Option<Instant> = None;
    let mut continued = false;
    loop {
        let mut consumed = 0;
        let mut close = false;
        while consumed < filled {
            match step(&space[consumed..filled], limits, handler, &mut rsp, &mut continued) {
                Ok(Step::Answered(n)) => {
                    rsp.encode(&mut out);
                    observer.responded(rsp.status);
                    consumed += n;
                    continued = false;
                    if rsp.close {
                        close = true;
                        break;
                    }
                }
                Ok(Step::NeedMore(send_continue)) => {
                    if send_continue {
                        out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    break;
                }
                Err(()) => {
                    rsp.close = true;
                    rsp.encode(&mut out);
                    observer.responded(rsp.status);
                    close = true;
                    break;
                }
            }
        }
        space.copy_within(consumed..filled, 0);
        filled -= consumed;
        if filled == 0 {
            started = None;
        } else if consumed > 0 || started.is_none() {
            started = Some(Instant::now());
        }
        if !out.is_empty() {
            if stream.write_all(&out).is_err() {
                return;
            }
            out.clear();
        }
        if close {
            return;
        }
        let timeout = match started {
            None => limits.idle_timeout,
            Some(t) => limits.read_timeout.saturating_sub(t.elapsed()),
        };
        if timeout.is_zero() {
            timed_out(stream, &mut rsp, observer);
            return;
        }
        let _ = stream.set_timeout(Some(timeout));
        if space.len() - filled < READ_CHUNK / 2 {
            space.resize(space.len() * 2, 0);
        }
        match stream.read(&mut space[filled..]) {
            Ok(0) => return,
            Ok(n) => {
                filled += n;
                if started.is_none() {
                    started = Some(Instant::now());
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if started.is_some() {
                    timed_out(stream, &mut rsp, observer);
                }
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn timed_out<S: Write, O: ConnObserver>(stream: &mut S, rsp: &mut Response, observer: &O) {
    observer.timed_out();
    rsp.reset();
    rsp.error(408, "request_timeout", "the request did not arrive in time; the connection is closed");
    rsp.close = true;
    let mut out = Vec::new();
    rsp.encode(&mut out);
    observer.responded(408);
    let _ = stream.write_all(&out);
}

/// Parses one request at the start of `pending` and answers it if complete.
/// `Err` means an error response is in `rsp` and the connection must close.
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
            return Ok(Step::NeedMore(false));
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
            let parsed = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<usize>().ok());
            match (parsed, content_length) {
                (Some(n), None) => content_length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => {
                    rsp.error(400, "invalid_body", "Content-Length is not a single non-negative number");
                    return Err(());
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            rsp.error(411, "length_required", "chunked bodies are not accepted; send a Content-Length");
            return Err(());
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if v.contains("close") {
                keep_alive = false;
            } else if v.contains("keep-alive") {
                keep_alive = true;
            }
        } else if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = h.value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > limits.max_body_bytes {
        rsp.error(
            413,
            "body_too_large",
            &format!("the body is {body_len} bytes; at most {} are accepted", limits.max_body_bytes),
        );
        return Err(());
    }
    if pending.len() < head_len + body_len {
        let send_continue = expect_continue && !*continued;
        *continued |= send_continue;
        return Ok(Step::NeedMore(send_continue));
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

fn too_large_headers(limits: &ConnLimits) -> String {
    format!(
        "the request head is too large: at most {} headers and {} bytes are accepted",
        limits.max_headers, limits.max_header_bytes
    )
}

/// Streams whose reads can time out.
pub trait SetTimeout {
    /// Sets the read timeout.
    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

impl SetTimeout for may::net::TcpStream {
    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}
