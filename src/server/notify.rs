//! systemd's readiness protocol (`Type=notify`, `WatchdogSec=`): one datagram per state
//! change to the unix socket named by `$NOTIFY_SOCKET` (a path, or `@name` for the abstract
//! namespace). Without that variable every call does nothing; a socket that cannot be
//! reached is logged once and never stops the server.
//!
//! - [`ready`]: every table is loaded and both listeners are bound;
//! - [`stopping`]: SIGTERM, the drain begins;
//! - [`watchdog`]: a keep-alive, sent only when systemd asked for one (`$WATCHDOG_USEC`, and
//!   `$WATCHDOG_PID` unset or ours). Called once a second by the load sampler, so
//!   `WatchdogSec=` must be at least 2 s.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    watchdog: bool,
}

static NOTIFIER: OnceLock<Option<Notifier>> = OnceLock::new();
static FAILED: AtomicBool = AtomicBool::new(false);

fn notifier() -> Option<&'static Notifier> {
    NOTIFIER.get_or_init(|| from_env().map_err(|e| log::warn!("sd_notify: {e}")).ok().flatten()).as_ref()
}

/// Why readiness cannot be told to systemd.
#[derive(Debug)]
enum NotifyError {
    /// `NOTIFY_SOCKET` names no socket address this process can use
    Address(String, std::io::Error),
    /// no datagram socket to send from
    Socket(std::io::Error),
}

impl std::fmt::Display for NotifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotifyError::Address(path, e) => write!(f, "NOTIFY_SOCKET {path}: {e}"),
            NotifyError::Socket(e) => write!(f, "cannot open a unix datagram socket: {e}"),
        }
    }
}

fn from_env() -> Result<Option<Notifier>, NotifyError> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else { return Ok(None) };
    let to = socket_addr(&path).map_err(|e| NotifyError::Address(path.to_string_lossy().into_owned(), e))?;
    let socket = UnixDatagram::unbound().map_err(NotifyError::Socket)?;
    let ours = |pid: String| pid.trim().parse::<u32>().is_ok_and(|p| p == std::process::id());
    let watchdog = std::env::var("WATCHDOG_USEC").is_ok_and(|us| us.trim().parse::<u64>().is_ok_and(|us| us > 0))
        && std::env::var("WATCHDOG_PID").map_or(true, ours);
    Ok(Some(Notifier { socket, to, watchdog }))
}

fn socket_addr(path: &std::ffi::OsStr) -> std::io::Result<SocketAddr> {
    use std::os::unix::ffi::OsStrExt;
    match path.as_bytes().strip_prefix(b"@") {
        Some(name) => abstract_addr(name),
        None => SocketAddr::from_pathname(path),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn abstract_addr(name: &[u8]) -> std::io::Result<SocketAddr> {
    #[cfg(target_os = "android")]
    use std::os::android::net::SocketAddrExt;
    #[cfg(target_os = "linux")]
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn abstract_addr(_: &[u8]) -> std::io::Result<SocketAddr> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "abstract unix sockets need Linux"))
}

fn send(state: &str) {
    let Some(n) = notifier() else { return };
    if let Err(e) = n.socket.send_to_addr(state.as_bytes(), &n.to) {
        if !FAILED.swap(true, Ordering::Relaxed) {
            log::warn!("sd_notify: cannot send {:?}: {e}", state.lines().next().unwrap_or(""));
        }
    }
}

/// Tells systemd that clef serves: every table is loaded, the listeners are bound.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}\nMAINPID={}", std::process::id()));
}

/// Tells systemd that the drain has begun.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=draining");
}

/// A watchdog keep-alive, when systemd asked for them.
pub fn watchdog() {
    if notifier().is_some_and(|n| n.watchdog) {
        send("WATCHDOG=1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let a = socket_addr(std::ffi::OsStr::new("/run/systemd/notify")).unwrap();
        assert_eq!(a.as_pathname(), Some(std::path::Path::new("/run/systemd/notify")));
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let a = socket_addr(std::ffi::OsStr::new("@clef/notify")).unwrap();
            assert_eq!(a.as_abstract_name(), Some(&b"clef/notify"[..]));
        }
        assert!(socket_addr(std::ffi::OsStr::new(&"x".repeat(200))).is_err());
    }
}
