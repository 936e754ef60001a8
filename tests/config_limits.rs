//! `clef serve` and `clef check` on configurations that cannot work (SPEC §5), run as the real
//! binary: each is refused with `config.yaml:line:col` naming the key, at once, never a panic, a
//! hang or a silent trap.
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run of `clef` left.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    /// The `error:` lines of stderr, without the path of the file (it differs between runs).
    fn errors(&self) -> Vec<String> {
        self.stderr
            .lines()
            .filter(|l| l.contains(": error: "))
            .map(|l| l.split_once("config.yaml").map_or(l, |(_, rest)| rest).to_string())
            .collect()
    }
}

/// Runs `clef ARGS` in `dir`, with the open files limit lowered to `open_files` if given; fails
/// the test if it runs for more than 10 s (a FIFO read, a quadratic loop, a server that started).
fn clef(dir: &Path, args: &[&str], open_files: Option<u64>) -> Run {
    // the limit is lowered by a shell's `ulimit` before it runs clef (no `unsafe` pre_exec)
    let mut cmd = match open_files {
        Some(limit) => {
            let mut sh = Command::new("sh");
            sh.args(["-c", "ulimit -n \"$0\" && exec \"$@\"", &limit.to_string(), env!("CARGO_BIN_EXE_clef")]);
            sh
        }
        None => Command::new(env!("CARGO_BIN_EXE_clef")),
    };
    cmd.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("start clef");
    let deadline = started + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("clef {args:?} still ran after 10 s\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = started.elapsed();
    let out = child.wait_with_output().expect("wait");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    }
}

/// A folder with `tables/` and `config.yaml` holding `text`.
fn folder(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tables")).unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn serve(dir: &Path, config: &Path, open_files: Option<u64>) -> Run {
    clef(dir, &["serve", "-c", config.to_str().unwrap()], open_files)
}

fn check(dir: &Path, config: &Path, open_files: Option<u64>) -> Run {
    clef(dir, &["check", config.to_str().unwrap()], open_files)
}

#[test]
fn a_config_that_is_not_a_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(made.success());
    // `-c /dev/zero` read until memory ran out; a FIFO blocked forever
    for (path, what) in [(fifo.as_path(), "a FIFO (named pipe)"), (Path::new("/dev/zero"), "a character device")] {
        let run = serve(dir.path(), path, None);
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        assert!(run.stderr.contains(&format!("cannot read the configuration file: it is {what}")), "{}", run.stderr);
        assert!(run.stderr.contains("not starting"), "{}", run.stderr);
    }
    let run = check(dir.path(), &fifo, None);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("it is a FIFO (named pipe), not a regular file"), "{}", run.stderr);
}

#[test]
fn twelve_thousand_workers_are_refused_with_the_key_not_a_panic() {
    // may panicked with "Too many open files" (exit 101) once it had opened 2 files per worker
    let (dir, config) = folder("server:\n  host: 127.0.0.1\n  workers: 12000\n");
    let run = serve(dir.path(), &config, None);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert_eq!(run.errors().len(), 1, "{}", run.stderr);
    assert!(run.errors()[0].starts_with(":3:12: error: `server.workers` is 12000"), "{}", run.stderr);
}

#[test]
fn workers_and_connections_must_fit_the_open_files_limit() {
    // 512 open files: 64 for clef, 2 per worker, 1 per connection
    let (dir, config) = folder("server:\n  workers: 300\n");
    let run = check(dir.path(), &config, Some(512));
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.errors()[0].starts_with(":2:12: error: `server.workers` is 300"), "{}", run.stderr);
    assert!(run.stderr.contains("the open files limit here is 512"), "{}", run.stderr);

    std::fs::write(&config, "server:\n  workers: 4\n  max_connections: 1000\n").unwrap();
    let run = check(dir.path(), &config, Some(512));
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.errors()[0].starts_with(":3:20: error: `server.max_connections` is 1000"), "{}", run.stderr);
    assert!(run.stderr.contains("at most 440 connections fit"), "{}", run.stderr);
    let served = serve(dir.path(), &config, Some(512));
    assert_eq!((served.code, served.errors()), (Some(2), run.errors()), "{}", served.stderr);

    // the default max_connections is lowered to what fits, with a warning
    std::fs::write(&config, "server:\n  workers: 4\n").unwrap();
    let run = check(dir.path(), &config, Some(512));
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("warning: the open files limit here is 512"), "{}", run.stderr);
    assert!(run.stderr.contains("lowered from its default 4096 to 440"), "{}", run.stderr);
}

#[test]
fn check_and_serve_report_the_same_value_errors() {
    let (dir, config) = folder(
        "server:\n  host: 127.0.0.1\n  read_timeout_ms: 0\n  idle_timeout_ms: 0\n  max_headers: 100000000\n  \
         max_body_bytes: 1000000000000\n  max_connections: 0\nmodel:\n  tables_dir: ./missing\n",
    );
    let checked = check(dir.path(), &config, None);
    let served = serve(dir.path(), &config, None);
    assert_eq!((checked.code, served.code), (Some(1), Some(2)), "{}\n{}", checked.stderr, served.stderr);
    assert_eq!(checked.errors().len(), 6, "{}", checked.stderr);
    assert_eq!(checked.errors(), served.errors());
    assert!(checked.errors()[5].starts_with(":9:15: error: tables_dir"), "{}", checked.stderr);
}

#[test]
fn the_slow_configs_are_answered_at_once() {
    // 200 KB of nested `[` took 34 s of CPU; 1,000,000 unknown keys ran for minutes
    let (dir, config) = folder(&format!("server: {}", "[".repeat(200_000)));
    let run = check(dir.path(), &config, None);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("nested more than 32 levels deep"), "{}", run.stderr);
    assert!(run.took < Duration::from_secs(5), "{:?}", run.took);

    let keys: String = (0..1_000_000).map(|i| format!("k{i}: 1\n")).collect();
    std::fs::write(&config, keys).unwrap();
    let run = check(dir.path(), &config, None);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("larger than 1 MiB"), "{}", run.stderr);
    assert!(run.took < Duration::from_secs(5), "{:?}", run.took);
    assert!(!run.stdout.contains(": ok"), "{}", run.stdout);
}
