//! HTTP/1.1 requests and responses as the connection loop sees them.
//!
//! A response's body is either whole ([`Response::body`], sent with `Content-Length`) or
//! produced while it is sent ([`Response::stream`]): the connection loop hands the producer a
//! [`BodySink`] that writes what it is given to the socket in chunks of at most the
//! connection's answer cap, so an answer of any size holds no more memory than a small one,
//! and a client that does not read stops its producer (SPEC §6, memory per connection).

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use crate::expr::json::write_json_string;

/// A parsed request whose body has fully arrived.
pub struct Request<'b> {
    /// `GET`, `POST`, ...
    pub method: &'b str,
    /// the path, without the query
    pub path: &'b str,
    /// the query string, without `?`
    pub query: &'b str,
    /// the headers
    pub headers: &'b [httparse::Header<'b>],
    /// the body
    pub body: &'b [u8],
}

impl Request<'_> {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
    }

    /// Whether the query holds `key=true` (or `key=1`, or a bare `key`).
    pub fn query_flag(&self, key: &str) -> bool {
        self.query.split('&').any(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
            k == key && matches!(v, "true" | "1" | "yes")
        })
    }

    /// The bearer token of the `Authorization` header.
    pub fn bearer_token(&self) -> Option<&[u8]> {
        let v = self.header("authorization")?;
        let v = std::str::from_utf8(v).ok()?.trim();
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().as_bytes())
    }
}

/// Where a streamed body goes. Writing to it may block the coroutine until the client has
/// read enough; after a failed write (the client is gone, or stopped reading for the write
/// timeout, or the body cannot be held) every write fails at once.
pub trait BodySink: fmt::Write {
    /// Whether a write failed: the rest of the body would be thrown away, so a producer stops.
    fn gone(&self) -> bool;
}

/// Produces a streamed body: given the request's body (still in the connection's buffer) and
/// the sink to write to.
pub type BodyProducer<'h> = Box<dyn FnOnce(&[u8], &mut dyn BodySink) + 'h>;

/// A response being built: status, extra headers, body. `'h`: what a streamed body's producer
/// may borrow (the handler's state).
pub struct Response<'h> {
    /// status code
    pub status: u16,
    /// extra header lines, each `Name: value` (a name a table chose is owned)
    pub headers: Vec<(Cow<'static, str>, String)>,
    /// the body
    pub body: String,
    /// content type
    pub content_type: &'static str,
    /// close the connection after this response
    pub close: bool,
    /// answering `HEAD`: headers only, no body
    pub head: bool,
    /// the client reads chunked bodies (HTTP/1.1, and not a clef router, whose client reads
    /// answers with a `Content-Length` only): a streamed body is sent in chunks, else whole
    pub chunked: bool,
    /// the body, produced while it is sent (instead of [`Response::body`])
    stream: Option<BodyProducer<'h>>,
}

impl Default for Response<'_> {
    fn default() -> Self {
        Response::new()
    }
}

impl<'h> Response<'h> {
    /// An empty 200 JSON response.
    pub fn new() -> Self {
        Response {
            status: 200,
            headers: Vec::new(),
            body: String::new(),
            content_type: "application/json",
            close: false,
            head: false,
            chunked: true,
            stream: None,
        }
    }

    /// Sends the body as `produce` writes it, in chunks, once the handler has returned (for
    /// answers whose size grows with the request or the server's state: batches, metrics).
    /// Not called for `HEAD`.
    pub fn stream(&mut self, produce: impl FnOnce(&[u8], &mut dyn BodySink) + 'h) {
        self.body.clear();
        self.stream = Some(Box::new(produce));
    }

    /// Whether the body is streamed ([`Response::stream`]).
    pub fn is_streamed(&self) -> bool {
        self.stream.is_some()
    }

    /// The producer of a streamed body, taken out to be run; `None` for a whole body.
    pub fn take_stream(&mut self) -> Option<BodyProducer<'h>> {
        self.stream.take()
    }

    /// Resets for the next request, keeping allocations.
    pub fn reset(&mut self) {
        self.status = 200;
        self.headers.clear();
        self.body.clear();
        self.content_type = "application/json";
        self.close = false;
        self.head = false;
        self.chunked = true;
        self.stream = None;
    }

    /// Gives back the body's and headers' memory when it grew beyond `keep` bytes
    /// (a large answer), so one large answer does not stay with the connection.
    pub fn release_large(&mut self, keep: usize) {
        if self.body.capacity() > keep {
            self.body = String::new();
        }
        if self.headers.capacity() > 16 || keep == 0 {
            self.headers = Vec::new();
        }
    }

    /// Adds a header line.
    pub fn add_header(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) {
        self.headers.push((name.into(), value.into()));
    }

    /// A JSON error body: `{"error": {"code": ..., "message": ...}}`.
    pub fn error(&mut self, status: u16, code: &str, message: &str) {
        self.stream = None;
        self.status = status;
        self.content_type = "application/json";
        self.body.clear();
        self.body.push_str("{\"error\":{\"code\":");
        write_json_string(code, &mut self.body);
        self.body.push_str(",\"message\":");
        write_json_string(message, &mut self.body);
        self.body.push_str("}}");
    }

    /// Appends the encoded response to `out`: its head and its whole body, or only the head of
    /// a streamed one (`Transfer-Encoding: chunked`, or nothing of its length for `HEAD` to a
    /// client that reads no chunks).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut head = String::with_capacity(160);
        let _ =
            write!(head, "HTTP/1.1 {} {}\r\nContent-Type: {}\r\n", self.status, reason(self.status), self.content_type);
        if self.stream.is_none() {
            let _ = write!(head, "Content-Length: {}\r\n", self.body.len());
        } else if self.chunked {
            head.push_str("Transfer-Encoding: chunked\r\n");
        }
        for (name, value) in &self.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        if self.close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        out.extend_from_slice(head.as_bytes());
        if !self.head && self.stream.is_none() {
            out.extend_from_slice(self.body.as_bytes());
        }
    }
}

/// The reason phrase of a status code: the IANA registry's (RFC 9110 and later), or for a code
/// it lacks (a peer's answer passed through may carry any), the name of its class.
pub fn reason(status: u16) -> &'static str {
    match http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()) {
        Some(phrase) => phrase,
        None => match status / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            _ => "Server Error",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_reason_phrase() {
        let cases = [
            (200, "OK"),
            (401, "Unauthorized"),
            (413, "Payload Too Large"),
            (422, "Unprocessable Entity"),
            (429, "Too Many Requests"),
            (431, "Request Header Fields Too Large"),
            (451, "Unavailable For Legal Reasons"),
            (502, "Bad Gateway"),
            (499, "Client Error"),
            (299, "Success"),
        ];
        for (status, phrase) in cases {
            assert_eq!(reason(status), phrase, "{status}");
        }
        for status in 100..600 {
            assert!(!reason(status).is_empty(), "{status}");
        }
    }
}
