//! Sockets as the appliance needs them: listeners that own their port, accepted
//! connections whose kernel buffers are bounded, and a look at a connection's
//! send queue for the write timeout.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use socket2::{Domain, Socket, Type};

/// Kernel send buffer of an accepted connection. Linux's autotuning lets it grow to
/// megabytes for a client that does not read; decision answers are a few hundred bytes,
/// and socket memory counts against the service's memory limit on the box.
const SEND_BUFFER_BYTES: usize = 64 * 1024;

/// Connections waiting to be accepted.
const BACKLOG: i32 = 1024;

/// The address `text` (`host:port`) names, resolved to its first socket address.
pub fn resolve(text: &str) -> io::Result<SocketAddr> {
    text.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{text} resolves to no address")))
}

/// Whether two listeners would share a port: the same port on the same address, or on
/// a wildcard address (`0.0.0.0`, `::`) that covers the other.
pub fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// Binds a listener that owns its port. may's own `bind` sets `SO_REUSEPORT`, which lets
/// a second `clef serve` (or the admin listener) bind the same port and quietly take part
/// of the traffic; here a busy port is an error. `SO_REUSEADDR` stays, so a restart does
/// not wait for old connections in `TIME_WAIT`; on Linux it never lets two listeners share.
pub fn bind_exclusive(addr: SocketAddr) -> io::Result<may::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(clef_sys::may_listener(socket.into()))
}

/// Bounds the kernel memory an accepted connection can pin.
pub fn tune_accepted(stream: &may::net::TcpStream) {
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(stream.inner()).set_send_buffer_size(SEND_BUFFER_BYTES);
}

/// Bytes written to `stream` that its peer has not acknowledged (Linux `TIOCOUTQ`).
pub fn unsent_bytes(stream: &may::net::TcpStream) -> Option<usize> {
    clef_sys::unsent_bytes(stream.inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_addresses() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(overlap(a("127.0.0.1:8080"), a("127.0.0.1:8080")));
        assert!(overlap(a("0.0.0.0:8080"), a("127.0.0.1:8080")));
        assert!(overlap(a("127.0.0.1:8080"), a("0.0.0.0:8080")));
        assert!(overlap(a("[::]:8080"), a("127.0.0.1:8080")));
        assert!(!overlap(a("127.0.0.1:8080"), a("127.0.0.1:9901")));
        assert!(!overlap(a("127.0.0.1:8080"), a("127.0.0.2:8080")));
    }
}
