//! Probing the machine: the open files limit, the memory and the cores that some values of
//! `config.yaml` are checked against. The review takes a [`Machine`] rather than probing, so that
//! its tests can pose as any machine.

/// What this machine allows: the ceilings some values are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// the hard limit of open files (RLIMIT_NOFILE); `clef serve` raises its soft limit up to it
    pub open_files: u64,
    /// bytes of memory clef may use: MemTotal, or the cgroup's `memory.max` when lower
    pub memory: u64,
    /// CPU cores: the worker threads of `workers: 0`
    pub cores: usize,
}

impl Machine {
    /// This machine, as the process sees it.
    pub fn current() -> Machine {
        use nix::sys::resource::{getrlimit, Resource};
        Machine {
            open_files: getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(_, hard)| hard),
            memory: memory_available(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Bytes of memory this process may use: MemTotal, or its cgroup's `memory.max` when that is
/// lower (systemd's `MemoryMax=`, a container's limit); `u64::MAX` when neither can be read.
fn memory_available() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim();
        kib.parse::<u64>().ok().map(|k| k.saturating_mul(1024))
    });
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|c| {
        let group = c.lines().find_map(|l| l.strip_prefix("0::"))?.trim_end_matches('/').to_string();
        // "max" when there is no limit: no number, no cap
        std::fs::read_to_string(format!("/sys/fs/cgroup{group}/memory.max")).ok()?.trim().parse::<u64>().ok()
    });
    total.unwrap_or(u64::MAX).min(cgroup.unwrap_or(u64::MAX))
}
