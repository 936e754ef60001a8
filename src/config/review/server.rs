//! The review of `server:`, the decision listener: values that parse but cannot work, on any
//! machine (a timeout of 0) or on this one (more connections than open files). `clef serve`
//! refuses them and `clef check` reports them, each at the value that is wrong.

use super::Findings;
use crate::config::layer::Layered;
use crate::config::machine::Machine;
use crate::config::sections::{Server, FDS_PER_WORKER, FDS_RESERVED};
use crate::config::wording::size;
use crate::diagnostic::Diagnostic;

/// The most worker threads. may runs one per core, pinned, and each runs any number of
/// coroutines: threads beyond the cores only add switching, and each holds open files.
pub const MAX_WORKERS: usize = 1024;

/// The longest timeout: a day. Longer is a typo (a zero too many) that would switch the protection
/// off without a word, and may adds a timeout to a u64 nanosecond clock, which wraps around for
/// the largest values and then times out at once.
pub const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// The most request headers: each request gets an array of this many header slots, so 100,000,000
/// made one GET take 10 s and 3.1 GB.
pub const MAX_HEADERS: usize = 1024;

/// The most bytes of request headers: they are buffered per connection.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// The largest request body: a body is held in memory whole while it is decided.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// The most inputs `server.max_batch_lines` may allow in one batch.
pub const MAX_BATCH_LINES: usize = 10_000_000;

/// `max_body_bytes` may be at most this fraction (1/N) of the memory clef may use: every
/// connection may be reading a body at once.
pub const BODY_MEMORY_SHARE: u64 = 16;

/// What to do when the open files limit is too low: the workers' check and the connections' say it.
const LIMIT_HINT: &str = "raise the open files limit (LimitNOFILE= in the systemd unit, `ulimit -Hn`)";

/// Reviews `server:` on `machine`. A `max_connections` left to its default that does not fit the
/// open files limit is lowered in `l` to what fits, with a warning.
pub(super) fn review(l: &mut Layered, machine: &Machine, found: &mut Findings) {
    review_timeouts(l, found);
    let workers_fit = review_workers(l, machine, found);
    review_connections(l, machine, workers_fit, found);
    review_headers(l, found);
    review_body(l, machine, found);
    review_request_memory(l, machine, found);
    review_batch_lines(l, found);
}

/// The three timeouts: neither 0 nor longer than a day.
fn review_timeouts(l: &Layered, found: &mut Findings) {
    let defaults = Server::default();
    let s = &l.config.server;

    let timeouts = [
        ("read_timeout_ms", s.read_timeout_ms, defaults.read_timeout_ms, "every request would be answered 408 at once"),
        (
            "idle_timeout_ms",
            s.idle_timeout_ms,
            defaults.idle_timeout_ms,
            "every connection would time out (408) before its first request",
        ),
        ("write_timeout_ms", s.write_timeout_ms, defaults.write_timeout_ms, "no answer could ever be sent"),
    ];
    for (key, value, default, zero) in timeouts {
        let keys = ["server", key];
        if value == 0 {
            found.errors.push(l.at_value(&keys, format!("`server.{key}` is 0: {zero}; the default is {default}")));
        } else if value > MAX_TIMEOUT_MS {
            found.errors.push(l.at_value(
                &keys,
                format!(
                    "`server.{key}` is {value} ms, more than a day ({MAX_TIMEOUT_MS}); a timeout that long \
                     protects nothing: is a zero too many? The default is {default}"
                ),
            ));
        }
    }
}

/// The worker threads `s` runs on `machine`, and the open files they and clef itself hold.
fn workers_and_their_files(s: &Server, machine: &Machine) -> (u64, u64) {
    let workers = s.worker_threads(machine.cores) as u64;
    (workers, workers * FDS_PER_WORKER + FDS_RESERVED)
}

/// `server.workers`: at most [`MAX_WORKERS`], and leaving open files for connections. Whether
/// they leave any, so that `max_connections` can be held to that room.
fn review_workers(l: &Layered, machine: &Machine, found: &mut Findings) -> bool {
    let s = &l.config.server;
    let (workers, for_workers) = workers_and_their_files(s, machine);
    if s.workers > MAX_WORKERS {
        found.errors.push(l.at_value(
            &["server", "workers"],
            format!(
                "`server.workers` is {}, more than {MAX_WORKERS} worker threads; each runs any number of \
                 connections and threads beyond the cores only add switching: write 0 (one per core, {} here)",
                s.workers, machine.cores
            ),
        ));
        false
    } else if for_workers >= machine.open_files {
        let what = if s.workers == 0 { format!("0 (one per core: {workers} here)") } else { workers.to_string() };
        found.errors.push(l.at_value(
            &["server", "workers"],
            format!(
                "`server.workers` is {what}: {workers} workers hold {} open files and clef {FDS_RESERVED} more, \
                 but the open files limit here is {}, with no room left for connections; write fewer workers \
                 or {LIMIT_HINT}",
                workers * FDS_PER_WORKER,
                machine.open_files
            ),
        ));
        false
    } else {
        true
    }
}

/// `server.max_connections`: not 0, and each an open file within the limit that the workers
/// leave (checked only when they leave room: `workers_fit`).
fn review_connections(l: &mut Layered, machine: &Machine, workers_fit: bool, found: &mut Findings) {
    let defaults = Server::default();
    let s = &l.config.server;
    let (workers, for_workers) = workers_and_their_files(s, machine);
    let room = machine.open_files.saturating_sub(for_workers);
    let connections = ["server", "max_connections"];
    if s.max_connections == 0 {
        found.errors.push(l.at_value(
            &connections,
            format!(
                "`server.max_connections` is 0: no connection would ever be accepted; the default is {}",
                defaults.max_connections
            ),
        ));
    } else if workers_fit && s.max_connections as u64 > room {
        let given = s.max_connections as u64;
        if l.given(&connections) {
            found.errors.push(l.at_value(
                &connections,
                format!(
                    "`server.max_connections` is {given}, but each connection is an open file and the open files \
                     limit here is {}: with {workers} workers at most {room} connections fit; write at most {room} \
                     or {LIMIT_HINT}",
                    machine.open_files
                ),
            ));
        } else {
            l.config.server.max_connections = room as usize;
            found.warnings.push(
                Diagnostic::whole_file(
                    &l.shown,
                    format!(
                        "the open files limit here is {}: `server.max_connections` is lowered from its default \
                         {given} to {room}; to accept more, {LIMIT_HINT}",
                        machine.open_files
                    ),
                )
                .warning(),
            );
        }
    }
}

/// `server.max_headers` and `server.max_header_bytes`: not 0, and within their ceilings.
fn review_headers(l: &Layered, found: &mut Findings) {
    let defaults = Server::default();
    let s = &l.config.server;
    let headers = ["server", "max_headers"];
    if s.max_headers == 0 {
        found.errors.push(l.at_value(
            &headers,
            "`server.max_headers` is 0: every request has headers, so every request would be answered 431".into(),
        ));
    } else if s.max_headers > MAX_HEADERS {
        found.errors.push(l.at_value(
            &headers,
            format!(
                "`server.max_headers` is {}, more than {MAX_HEADERS}: every request gets room for that many headers, \
                 which costs memory and time on each one; the default is {}",
                s.max_headers, defaults.max_headers
            ),
        ));
    }
    let header_bytes = ["server", "max_header_bytes"];
    if s.max_header_bytes == 0 {
        found.errors.push(
            l.at_value(&header_bytes, "`server.max_header_bytes` is 0: every request would be answered 431".into()),
        );
    } else if s.max_header_bytes > MAX_HEADER_BYTES {
        found.errors.push(l.at_value(
            &header_bytes,
            format!(
                "`server.max_header_bytes` is {} ({}), more than {} ({MAX_HEADER_BYTES}): headers are held in memory \
                 for each connection; the default is {}",
                s.max_header_bytes,
                size(s.max_header_bytes as u64),
                size(MAX_HEADER_BYTES as u64),
                defaults.max_header_bytes
            ),
        ));
    }
}

/// `server.max_body_bytes`: not 0, within [`MAX_BODY_BYTES`] and within
/// 1/[`BODY_MEMORY_SHARE`] of the machine's memory.
fn review_body(l: &Layered, machine: &Machine, found: &mut Findings) {
    let s = &l.config.server;
    let body = ["server", "max_body_bytes"];
    let share = machine.memory / BODY_MEMORY_SHARE;
    let held = "a body is held in memory whole while it is decided, and every connection may be sending one";
    if s.max_body_bytes == 0 {
        found.errors.push(
            l.at_value(&body, "`server.max_body_bytes` is 0: every decision request would be answered 413".into()),
        );
    } else if s.max_body_bytes > MAX_BODY_BYTES {
        found.errors.push(l.at_value(
            &body,
            format!(
                "`server.max_body_bytes` is {} ({}), more than {} ({MAX_BODY_BYTES}), the most clef accepts: {held}",
                s.max_body_bytes,
                size(s.max_body_bytes as u64),
                size(MAX_BODY_BYTES as u64)
            ),
        ));
    } else if s.max_body_bytes as u64 > share {
        found.errors.push(l.at_value(
            &body,
            format!(
                "`server.max_body_bytes` is {} ({}), more than 1/{BODY_MEMORY_SHARE} of the memory clef may use \
                 here ({} of {}; MemTotal, or the cgroup's memory.max): {held}",
                s.max_body_bytes,
                size(s.max_body_bytes as u64),
                size(share),
                size(machine.memory)
            ),
        ));
    }
}

/// `server.request_memory_bytes`, when set: room for one largest request, within the memory.
fn review_request_memory(l: &Layered, machine: &Machine, found: &mut Findings) {
    let s = &l.config.server;
    let request_memory = ["server", "request_memory_bytes"];
    if let Some(given) = s.request_memory_bytes {
        let largest = s.largest_request();
        if given < largest {
            found.errors.push(l.at_value(
                &request_memory,
                format!(
                    "`server.request_memory_bytes` is {given} ({}), less than one request of the largest size \
                     (max_body_bytes + max_header_bytes: {largest}, {}): such a request could never be read; \
                     write at least {largest}, or null for the default",
                    size(given as u64),
                    size(largest as u64)
                ),
            ));
        } else if given as u64 > machine.memory {
            found.errors.push(l.at_value(
                &request_memory,
                format!(
                    "`server.request_memory_bytes` is {given} ({}), more than the memory clef may use here ({}; \
                     MemTotal, or the cgroup's memory.max): it would bound nothing",
                    size(given as u64),
                    size(machine.memory)
                ),
            ));
        }
    }
}

/// `server.max_batch_lines`: not 0, at most [`MAX_BATCH_LINES`].
fn review_batch_lines(l: &Layered, found: &mut Findings) {
    let defaults = Server::default();
    let s = &l.config.server;
    let batch_lines = ["server", "max_batch_lines"];
    if s.max_batch_lines == 0 {
        found.errors.push(
            l.at_value(&batch_lines, "`server.max_batch_lines` is 0: every batch request would be answered 413".into()),
        );
    } else if s.max_batch_lines > MAX_BATCH_LINES {
        found.errors.push(l.at_value(
            &batch_lines,
            format!(
                "`server.max_batch_lines` is {}, more than {MAX_BATCH_LINES}: one request could keep a worker \
                 deciding for minutes; the default is {}",
                s.max_batch_lines, defaults.max_batch_lines
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{no_errors, review_with, value_error, PI};
    use super::*;

    #[test]
    fn zero_and_absurd_timeouts_are_errors() {
        for key in ["read_timeout_ms", "idle_timeout_ms", "write_timeout_ms"] {
            assert!(value_error(key, "0", &PI).contains("is 0:"));
            assert!(value_error(key, "86400001", &PI).contains("more than a day"));
            assert!(value_error(key, "18446744073709551615", &PI).contains("more than a day"));
            no_errors(&format!("server:\n  {key}: 86400000\n"), &PI);
            no_errors(&format!("server:\n  {key}: 1\n"), &PI);
        }
    }

    #[test]
    fn workers_are_capped_and_must_fit_the_open_files_limit() {
        let m = value_error("workers", "12000", &PI);
        assert!(m.contains("more than 1024 worker threads") && m.contains("write 0"), "{m}");
        // 2 open files a worker and 64 for clef: 2016 workers need 4096
        let m = value_error("workers", "1016", &Machine { open_files: 2096, ..PI });
        assert!(m.contains("the open files limit here is 2096"), "{m}");
        no_errors("server:\n  workers: 1015\n  max_connections: 1\n", &Machine { open_files: 2096, ..PI });
        // one per core on a machine with many cores and a low limit
        let (errors, _, _) =
            review_with("server:\n  workers: 0\n", &[], &Machine { open_files: 256, cores: 128, ..PI });
        assert!(errors[0].message.contains("is 0 (one per core: 128 here)"), "{errors:?}");
    }

    #[test]
    fn max_connections_must_be_positive_and_fit_the_open_files_limit() {
        assert!(value_error("max_connections", "0", &PI).contains("no connection would ever be accepted"));
        // 4096 - 64 - 4 workers × 2 = 4024 connections fit
        let low = Machine { open_files: 4096, ..PI };
        let m = value_error("max_connections", "4025", &low);
        assert!(m.contains("at most 4024 connections fit"), "{m}");
        no_errors("server:\n  max_connections: 4024\n", &low);
        // the default is lowered to what fits, with a warning
        let (errors, warnings, config) = review_with("", &[], &Machine { open_files: 1024, ..PI });
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(config.server.max_connections, 1024 - 64 - 8);
        assert!(warnings[0].message.contains("lowered from its default 4096 to 952"), "{warnings:?}");
    }

    #[test]
    fn header_limits_are_bounded() {
        assert!(value_error("max_headers", "0", &PI).contains("431"));
        assert!(value_error("max_headers", "100000000", &PI).contains("more than 1024"));
        no_errors("server:\n  max_headers: 1024\n", &PI);
        assert!(value_error("max_header_bytes", "0", &PI).contains("431"));
        assert!(value_error("max_header_bytes", "1048577", &PI).contains("more than 1 MiB"));
        no_errors("server:\n  max_header_bytes: 1048576\n", &PI);
    }

    #[test]
    fn request_memory_holds_one_largest_request_and_fits_the_machine() {
        // 64 KiB of body and 16 KiB of head by default: 81920 bytes is the least
        let m = value_error("request_memory_bytes", "81919", &PI);
        assert!(m.contains("less than one request of the largest size") && m.contains("81920"), "{m}");
        no_errors("server:\n  request_memory_bytes: 81920\n", &PI);
        let m = value_error("request_memory_bytes", "1073741825", &PI);
        assert!(m.contains("more than the memory clef may use here (1 GiB"), "{m}");
        // the default: 16 MiB, or room for 4 of the largest requests
        assert_eq!(Server::default().request_memory(), 16 << 20);
        let large = Server { max_body_bytes: 8 << 20, ..Server::default() };
        assert_eq!(large.request_memory(), 4 * ((8 << 20) + 16384));
        let given = Server { request_memory_bytes: Some(100_000), ..Server::default() };
        assert_eq!(given.request_memory(), 100_000);
    }

    #[test]
    fn max_batch_lines_is_bounded() {
        assert!(value_error("max_batch_lines", "0", &PI).contains("413"));
        assert!(value_error("max_batch_lines", "10000001", &PI).contains("more than 10000000"));
        no_errors("server:\n  max_batch_lines: 10000000\n", &PI);
    }

    #[test]
    fn max_body_bytes_is_bounded_by_a_cap_and_by_memory() {
        assert!(value_error("max_body_bytes", "0", &PI).contains("413"));
        let big = Machine { memory: 64 << 30, ..PI };
        let m = value_error("max_body_bytes", "67108865", &big);
        assert!(m.contains("more than 64 MiB (67108864), the most clef accepts"), "{m}");
        no_errors("server:\n  max_body_bytes: 67108864\n", &big);
        // 1/16 of 1 GiB is 64 MiB; of 256 MiB (systemd's MemoryMax=256M), 16 MiB
        no_errors("server:\n  max_body_bytes: 67108864\n", &PI);
        let small = Machine { memory: 256 << 20, ..PI };
        let m = value_error("max_body_bytes", "16777217", &small);
        assert!(m.contains("more than 1/16 of the memory clef may use here (16 MiB of 256 MiB"), "{m}");
    }
}
