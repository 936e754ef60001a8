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

/// Sets the calling thread's nice value (0 is the default, 19 the lowest priority; Linux keeps
/// one per thread): for background work that should give the CPU to the threads serving
/// requests whenever they want it, and take it when they do not. Raising it needs no privilege.
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid takes nothing, touches no memory and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority takes plain integers and touches no memory of ours; on Linux,
    // PRIO_PROCESS with a thread id sets that one thread's nice value.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
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

    /// A thread's nice value is its own: raised on one thread, the others keep theirs.
    #[test]
    fn a_thread_lowers_its_own_priority() {
        let nice_of = |tid: i32| -> i64 {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            // the fields after the command's closing parenthesis; nice is the 19th field of stat
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            rest.split(' ').nth(16).unwrap().parse().unwrap()
        };
        // SAFETY: as in set_thread_nice.
        let main = unsafe { libc::gettid() };
        let before = nice_of(main);
        let (lowered, main_after) = std::thread::spawn(move || {
            super::set_thread_nice(before as i32 + 5).unwrap();
            // SAFETY: as above.
            (nice_of(unsafe { libc::gettid() }), nice_of(main))
        })
        .join()
        .unwrap();
        assert_eq!(lowered, before + 5);
        assert_eq!(main_after, before);
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
