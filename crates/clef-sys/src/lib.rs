//! The few system calls clef makes that the standard library, socket2 and nix do not wrap
//! safely, each behind a safe function.
//!
//! The `clef` crate forbids `unsafe` code (`[lints.rust] unsafe_code = "forbid"`): what needs
//! it lives here, small enough to check in one reading. Each block says why it is sound.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd};

/// may's listener over a std listener that is already bound and listening. (may's own `bind`
/// sets `SO_REUSEPORT`, which lets another process share the port; clef binds exclusively
/// with socket2 and hands the socket over here.)
pub fn may_listener(listener: std::net::TcpListener) -> may::net::TcpListener {
    let fd = listener.into_raw_fd();
    // SAFETY: `into_raw_fd` gave up the descriptor, which is open and owned by nothing else
    // now; may's listener takes it over and closes it when dropped.
    unsafe { may::net::TcpListener::from_raw_fd(fd) }
}

/// may's stream over a std stream (one whose connect may still be in progress: the router
/// opens non-blocking connections and lets the first write wait for them).
pub fn may_stream(stream: std::net::TcpStream) -> may::net::TcpStream {
    let fd = stream.into_raw_fd();
    // SAFETY: `into_raw_fd` gave up the descriptor, which is open and owned by nothing else
    // now; may's stream takes it over and closes it when dropped.
    unsafe { may::net::TcpStream::from_raw_fd(fd) }
}

/// Bytes written to a socket that its peer has not acknowledged (Linux `TIOCOUTQ`); `None`
/// when the kernel does not say.
pub fn unsent_bytes(socket: impl AsFd) -> Option<usize> {
    let fd = socket.as_fd();
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one c_int through the pointer, which points at `queued`; the
    // descriptor is borrowed, so it stays open for the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    (rc == 0).then(|| usize::try_from(queued).unwrap_or(0))
}

/// Returns memory that mimalloc holds freed back to the system (`mi_collect`): after a big
/// table is replaced, say, so the process's resident size falls again. With `force`, every
/// freed page is given back at once, which is slower (it walks all the heaps); without it,
/// only what mimalloc would release soon anyway.
pub fn release_freed_memory(force: bool) {
    // SAFETY: `mi_collect` takes a plain bool and touches only mimalloc's own bookkeeping; it
    // may be called at any time from any thread, and it frees nothing still in use.
    unsafe { libmimalloc_sys::mi_collect(force) }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    /// A listener handed over accepts; a connected socket's queue is read (empty once the
    /// peer has taken what was sent, as loopback does at once).
    #[test]
    fn a_listener_and_a_send_queue() {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std_listener.local_addr().unwrap();
        let listener = super::may_listener(std_listener);
        assert_eq!(listener.local_addr().unwrap(), addr);
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"x").unwrap();
        let queued = super::unsent_bytes(&client);
        assert!(queued.is_some_and(|q| q <= 1), "{queued:?}");
    }

    /// Collecting after mimalloc freed a large block returns, and mimalloc still serves.
    #[test]
    fn freed_memory_is_released() {
        // SAFETY: the block comes from mi_malloc, is checked for null, written within its
        // size and freed once.
        unsafe {
            let block = libmimalloc_sys::mi_malloc(8 << 20).cast::<u8>();
            assert!(!block.is_null());
            block.write_bytes(7, 8 << 20);
            libmimalloc_sys::mi_free(block.cast());
        }
        super::release_freed_memory(false);
        super::release_freed_memory(true);
        // SAFETY: as above.
        unsafe {
            let block = libmimalloc_sys::mi_malloc(4096);
            assert!(!block.is_null());
            libmimalloc_sys::mi_free(block);
        }
    }
}
