//! HTTP/1 on the wire, the part both ends of clef speak: the request and response the server
//! handles and the router writes forwarded answers into ([`message`]), and the rules the
//! server and the router's client share: whether a connection stays open after a message
//! ([`keep_alive_after`]), what a `Content-Length` is ([`parse_content_length`]), and why a
//! connection closed ([`Closed`]). It sits below the server and the router and imports neither.

pub mod message;

pub use message::{reason, BodyProducer, BodySink, Request, Response};

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
    /// the memory all connections share for large requests was taken (answered 503)
    RequestMemory,
}

impl Closed {
    /// Every reason, in the order of [`Closed::index`].
    pub const ALL: [Closed; 9] = [
        Closed::Client,
        Closed::Idle,
        Closed::Draining,
        Closed::Answered,
        Closed::ReadTimeout,
        Closed::WriteTimeout,
        Closed::ReadError,
        Closed::WriteError,
        Closed::RequestMemory,
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
            Closed::RequestMemory => "request_memory",
        }
    }
}

/// Whether a connection stays open after a `Connection: value` header, `keep_alive` being what
/// the protocol version says without one.
pub fn keep_alive_after(value: &[u8], keep_alive: bool) -> bool {
    let v = String::from_utf8_lossy(value).to_ascii_lowercase();
    if v.contains("close") {
        false
    } else if v.contains("keep-alive") {
        true
    } else {
        keep_alive
    }
}

/// `Content-Length` as RFC 9110 has it: one or more digits. A sign, spaces inside, or a
/// leading zero (`+63`, `00063`) are refused: a lenient proxy in front might read them
/// differently, which is how requests get smuggled. Requests and peers' answers are held to
/// the same rule.
pub fn parse_content_length(value: &[u8]) -> Option<usize> {
    let v = value.trim_ascii();
    let digits_only = !v.is_empty() && v.iter().all(u8::is_ascii_digit);
    if !digits_only || (v.len() > 1 && v.first() == Some(&b'0')) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
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

    #[test]
    fn connection_headers_close_or_keep() {
        assert!(!keep_alive_after(b"Close", true));
        assert!(keep_alive_after(b"keep-alive", false));
        assert!(keep_alive_after(b"upgrade", true));
        assert!(!keep_alive_after(b"upgrade", false));
    }
}
