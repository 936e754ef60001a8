//! `GET /metrics` and the reload log of the real `clef serve`: the process figures against what
//! the kernel says about the server process, the build, per-table load failures, the latency
//! histogram, and the log lines of recoveries and reloads. Every test starts the binary on free
//! loopback ports with a config and tables in a temporary folder (the helpers are a small copy
//! of those in `tests/server.rs`).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value as Json};

// ---------------------------------------------------------------------------------------------
// helpers: tables, config, the server process, HTTP

/// How long any single read or write may block before the test fails.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().expect("local addr").port()
}

/// A small table: `x > 10` → `{"a": ACTION}`, else the default `{"a": "default"}`.
fn table(action: &str) -> String {
    format!(
        r#"{{"default": {{"a": "default"}}, "rules": [
  {{"id": "big", "condition": "x > 10", "action": {{"a": "{action}"}}}}
]}}
"#
    )
}

/// A table file that fails to load (unknown function).
const BROKEN: &str = r#"[{"id": "r", "condition": "bogus(x) >", "action": {}}]"#;

/// Default table `risk`, file watching off: reloads happen when a test asks for them.
fn plain() -> String {
    "server:\n  host: 127.0.0.1\n  port: @PORT@\nadmin:\n  listen: 127.0.0.1:@ADMIN@\nmodel:\n  default_table: risk\n  \
     watch_file: false\n"
        .to_string()
}

/// A running `clef serve`, killed on drop (also when the test panics; then its log is printed).
struct Server {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    admin: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("----- server log ({}) -----\n{}", self.log.display(), self.log_text());
        }
    }
}

impl Server {
    /// Starts a server with `config` (`@PORT@` and `@ADMIN@` filled in) and `tables/NAME` files,
    /// and waits until `GET /health` answers.
    fn start(config: &str, tables: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in tables {
            let p = dir.path().join("tables").join(name);
            std::fs::create_dir_all(p.parent().expect("tables folder")).expect("create tables folder");
            std::fs::write(&p, text).expect("write table");
        }
        let (port, admin) = (free_port(), free_port());
        let cfg = dir.path().join("config.yaml");
        let text = config.replace("@PORT@", &port.to_string()).replace("@ADMIN@", &admin.to_string());
        std::fs::write(&cfg, text).expect("write config");
        let log = dir.path().join("server.log");
        let mut srv = Server {
            child: Command::new(env!("CARGO_BIN_EXE_clef"))
                .arg("serve")
                .arg("-c")
                .arg(&cfg)
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(&log).expect("create log file"))
                .spawn()
                .expect("start clef serve"),
            dir,
            port,
            admin,
            log,
        };
        srv.wait_ready();
        srv
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("clef serve exited before it was ready ({status})\n{}", self.log_text());
            }
            if let Ok(mut c) = Conn::try_open(self.port) {
                if let Ok(r) = c.try_request("GET", "/health", &[], b"") {
                    if r.status == 200 || r.status == 503 {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "clef serve did not answer /health within 5 s\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn table_path(&self, name: &str) -> PathBuf {
        self.dir.path().join("tables").join(name)
    }

    fn write_table(&self, name: &str, text: &str) {
        std::fs::write(self.table_path(name), text).expect("write table");
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn get(&self, path: &str) -> Resp {
        call(self.port, "GET", path, &[], b"")
    }

    fn post(&self, path: &str, body: &str) -> Resp {
        call(self.port, "POST", path, &[], body.as_bytes())
    }

    fn admin_post(&self, path: &str) -> Resp {
        call(self.admin, "POST", path, &[], b"")
    }

    /// `GET /metrics` in the Prometheus text format.
    fn metrics(&self) -> Metrics {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200, "{}", r.text());
        Metrics(r.text())
    }

    /// Waits (at most `secs`) until the log holds `line`.
    fn wait_for_log(&self, secs: u64, line: &str) {
        self.wait_for_logs(secs, line, 1);
    }

    /// Waits (at most `secs`) until the log holds `line` `times` times.
    fn wait_for_logs(&self, secs: u64, line: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.log_text().lines().filter(|l| l.contains(line)).count() < times {
            assert!(Instant::now() < deadline, "not in the log within {secs} s: {line}\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[derive(Debug)]
struct Resp {
    status: u16,
    body: Vec<u8>,
}

impl Resp {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Json {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Conn {
    fn try_open(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(Conn { stream, buf: Vec::new() })
    }

    fn try_request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> io::Result<Resp> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n", body.len());
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.stream.write_all(head.as_bytes())?;
        self.stream.write_all(body)?;
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let status: u16 = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        let len: usize = head
            .split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.trim().parse().expect("numeric Content-Length"))
            .unwrap_or(0);
        while self.buf.len() < head_end + 4 + len {
            self.fill()?;
        }
        let body = self.buf[head_end + 4..head_end + 4 + len].to_vec();
        self.buf.drain(..head_end + 4 + len);
        Ok(Resp { status, body })
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 65536];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// One request on a fresh connection.
fn call(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut c = Conn::try_open(port).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    c.try_request(method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// A scrape in the Prometheus text format.
struct Metrics(String);

impl Metrics {
    /// The value of the series `name` with exactly these labels (label values without `,` or
    /// escapes), or `None`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        want.sort();
        let found: Vec<f64> = self
            .0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (n, labels) = match series.split_once('{') {
                    Some((n, rest)) => (n, rest.strip_suffix('}')?),
                    None => (series, ""),
                };
                let mut have: Vec<String> = labels.split(',').filter(|p| !p.is_empty()).map(str::to_owned).collect();
                have.sort();
                (n == name && have == want).then(|| value.parse().expect("a numeric value"))
            })
            .collect();
        assert!(found.len() <= 1, "{name}{labels:?} appears {} times", found.len());
        found.first().copied()
    }

    /// Like [`Metrics::get`], failing the test (with the scrape) when the series is absent.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.0))
    }

    /// Whether any series of `name` has the label `table="TABLE"`.
    fn mentions(&self, name: &str, table: &str) -> bool {
        let label = format!("table=\"{table}\"");
        self.0.lines().any(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
    }
}

/// `VmRSS` of `/proc/PID/status`, in bytes.
fn vm_rss(pid: i32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024.0
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// process metrics and the build

#[test]
fn process_metrics_describe_the_server_process() {
    let before_start = unix_now();
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let first = srv.metrics();

    let rss = first.value("process_resident_memory_bytes", &[]);
    let kernel = vm_rss(srv.pid());
    assert!(rss > 1_000_000.0, "a running server holds more than 1 MB: {rss}");
    // Read a moment apart, so not equal; but the same figure (within a few MiB).
    assert!((rss - kernel).abs() < 4.0 * 1024.0 * 1024.0, "RSS {rss} vs VmRSS {kernel}");
    assert!(first.value("process_virtual_memory_bytes", &[]) >= rss);

    // btime has whole seconds, and clock ticks are 10 ms: the start time is within a second.
    let start = first.value("process_start_time_seconds", &[]);
    assert!(start >= before_start - 1.5 && start <= unix_now() + 0.5, "start {start}, launched at {before_start}");

    let fds = first.value("process_open_fds", &[]);
    // stdin, stdout, stderr, two listeners, the scrape's own connection at least.
    assert!(fds >= 5.0, "open fds {fds}");
    assert!(first.value("process_max_fds", &[]) >= fds);

    let cpu = first.value("process_cpu_seconds_total", &[]);
    assert!(cpu > 0.0, "starting took some CPU: {cpu}");
    for _ in 0..300 {
        srv.post("/decide/risk", r#"{"x": 50}"#);
    }
    let second = srv.metrics();
    let later = second.value("process_cpu_seconds_total", &[]);
    assert!(later > cpu, "300 decisions took no CPU: {cpu} then {later}");
    // A process does not restart between two scrapes: the start time holds still.
    assert_eq!(second.value("process_start_time_seconds", &[]), start);
}

#[test]
fn build_info_names_the_version_in_both_formats() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    let version = env!("CARGO_PKG_VERSION");
    let m = srv.metrics();
    assert_eq!(m.value("clef_build_info", &[("version", version)]), 1.0);
    assert!(m.0.contains("# TYPE clef_build_info gauge\n"), "{}", m.0);
    let r = call(srv.port, "GET", "/metrics", &[("Accept", "application/openmetrics-text; version=1.0.0")], b"");
    let open = r.text();
    assert!(open.contains("# TYPE clef_build info\n"), "{open}");
    assert!(open.contains(&format!("clef_build_info{{version=\"{version}\"}} 1\n")), "{open}");
    assert!(open.contains("# TYPE process_cpu_seconds counter\n"), "{open}");
    assert!(open.lines().any(|l| l.starts_with("process_cpu_seconds_total ")), "{open}");
}

// ---------------------------------------------------------------------------------------------
// the latency histogram

#[test]
fn the_histogram_counts_every_answered_decision() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    for i in 0..7 {
        assert_eq!(srv.post("/decide/risk", &format!(r#"{{"x": {}}}"#, i * 5)).status, 200);
    }
    // Refused before any rule ran: counted as invalid_input, not timed.
    assert_eq!(srv.post("/decide/risk", "{not json").status, 400);
    let m = srv.metrics();
    let matched = m.value("clef_decisions_total", &[("table", "risk"), ("rule", "big"), ("outcome", "matched")]);
    let default = m.value("clef_decisions_total", &[("table", "risk"), ("rule", ""), ("outcome", "default")]);
    assert_eq!((matched, default), (4.0, 3.0));
    assert_eq!(m.value("clef_decisions_total", &[("table", "risk"), ("rule", ""), ("outcome", "invalid_input")]), 1.0);
    let h = "clef_decision_duration_seconds";
    assert_eq!(m.value(&format!("{h}_count"), &[("table", "risk")]), 7.0);
    assert_eq!(m.value(&format!("{h}_bucket"), &[("table", "risk"), ("le", "+Inf")]), 7.0);
    assert!(m.value(&format!("{h}_sum"), &[("table", "risk")]) > 0.0);
    let help = m.0.lines().find(|l| l.starts_with(&format!("# HELP {h} "))).expect("a HELP line");
    assert!(help.contains("rendering the answer"), "the help says what is timed: {help}");
}

#[test]
fn the_histogram_includes_rendering_the_answer() {
    // An action of 4 MiB: parsing `{"x": 50}` and evaluating `x > 10` take microseconds, copying
    // the action into the answer hundreds of them (about 900 µs here, 15 µs without it). Only a
    // measurement taken after rendering sees that.
    let big = "y".repeat(4 << 20);
    let srv = Server::start(&plain(), &[("risk.json", &table(&big))]);
    let n = 5;
    for _ in 0..n {
        let r = srv.post("/decide/risk", r#"{"x": 50}"#);
        assert_eq!(r.status, 200);
        assert!(r.body.len() > 4 << 20);
    }
    let m = srv.metrics();
    let h = "clef_decision_duration_seconds";
    assert_eq!(m.value(&format!("{h}_count"), &[("table", "risk")]), n as f64);
    let mean = m.value(&format!("{h}_sum"), &[("table", "risk")]) / n as f64;
    assert!(mean > 200e-6, "a 4 MiB answer rendered in {mean} s on average: rendering is not timed");
}

// ---------------------------------------------------------------------------------------------
// load failures per table, recoveries and reload summaries in the log

#[test]
fn load_failures_are_counted_per_table_and_recoveries_logged() {
    let good = table("big");
    let srv = Server::start(&plain(), &[("risk.json", &good), ("broken.json", BROKEN)]);
    srv.wait_for_log(1, "reload (start): 2 tables: 1 loaded, 0 unchanged, 1 failed, 0 removed");
    let serving = srv.get("/health").json()["tables"]["risk"].as_str().expect("risk serves").to_string();

    let failing = "clef_table_load_failing";
    let failures = "clef_table_load_failures_total";
    let m = srv.metrics();
    assert_eq!(m.value(failing, &[("table", "risk")]), 0.0);
    assert_eq!(m.value(failing, &[("table", "broken")]), 1.0, "a table that never loaded is listed too");
    assert_eq!(m.value(failures, &[("table", "risk")]), 0.0);
    assert_eq!(m.value(failures, &[("table", "broken")]), 1.0, "the load at start counts");
    assert_eq!(m.value("clef_table_load_errors", &[]), 1.0);

    // risk's file breaks: the old version keeps serving, the failure is counted for risk.
    srv.write_table("risk.json", BROKEN);
    let r = srv.admin_post("/reload");
    assert_eq!(r.status, 200);
    // The answer of POST /reload keeps its documented fields.
    for entry in r.json()["tables"].as_array().expect("tables") {
        let keys: Vec<&str> = entry.as_object().expect("an object").keys().map(String::as_str).collect();
        assert!(keys == ["table", "result", "error", "serving"] || keys == ["table", "result", "version"], "{entry}");
    }
    srv.wait_for_log(1, "reload (POST /reload): 2 tables: 0 loaded, 0 unchanged, 2 failed, 0 removed");
    let m = srv.metrics();
    assert_eq!(m.value(failing, &[("table", "risk")]), 1.0);
    assert_eq!(m.value(failures, &[("table", "risk")]), 1.0);
    assert_eq!(m.value(failures, &[("table", "broken")]), 2.0, "every failed load of the file counts");
    assert_eq!(m.value("clef_table_load_errors", &[]), 2.0);
    assert_eq!(m.value("clef_reloads_total", &[("result", "failed")]), 2.0);

    // The file goes back to the bytes that kept serving: the reload says unchanged, the log
    // says the table recovered, and the count stays.
    srv.write_table("risk.json", &good);
    kill(Pid::from_raw(srv.pid()), Signal::SIGHUP).expect("SIGHUP");
    srv.wait_for_log(5, "reload (SIGHUP): 2 tables: 0 loaded, 1 unchanged, 1 failed, 0 removed");
    srv.wait_for_log(
        1,
        &format!("table risk: recovered; its file is back to version {serving}, which kept serving (SIGHUP)"),
    );
    let m = srv.metrics();
    assert_eq!(m.value(failing, &[("table", "risk")]), 0.0);
    assert_eq!(m.value(failures, &[("table", "risk")]), 1.0, "kept across reloads");
    assert_eq!(m.value("clef_table_load_errors", &[]), 1.0);

    // A good file for the table that never loaded: it recovers with a new version.
    srv.write_table("broken.json", &table("fixed"));
    let r = srv.admin_post("/reload").json();
    let fixed = r["tables"].as_array().expect("tables").iter().find(|t| t["table"] == json!("broken")).cloned();
    let fixed = fixed.expect("broken in the answer");
    assert_eq!(fixed["result"], json!("loaded"), "{r}");
    let version = fixed["version"].as_str().expect("a version");
    srv.wait_for_log(1, &format!("table broken: recovered; loaded version {version} (POST /reload)"));
    srv.wait_for_log(1, "reload (POST /reload): 2 tables: 1 loaded, 1 unchanged, 0 failed, 0 removed");
    let m = srv.metrics();
    assert_eq!(m.value(failing, &[("table", "broken")]), 0.0);
    // At start, on POST /reload and on SIGHUP; a good load does not reset the count.
    assert_eq!(m.value(failures, &[("table", "broken")]), 3.0);
    assert_eq!(m.value("clef_table_load_errors", &[]), 0.0);
    // A second reload with nothing changed recovers nothing: one recovery line per table.
    srv.admin_post("/reload");
    srv.wait_for_log(1, "reload (POST /reload): 2 tables: 0 loaded, 2 unchanged, 0 failed, 0 removed");
    assert_eq!(srv.log_text().matches("table broken: recovered").count(), 1, "{}", srv.log_text());
    assert_eq!(srv.log_text().matches("table risk: recovered").count(), 1, "{}", srv.log_text());

    // A table whose file is removed drops out.
    std::fs::remove_file(srv.table_path("broken.json")).expect("remove broken.json");
    srv.admin_post("/reload");
    srv.wait_for_log(1, "reload (POST /reload): 2 tables: 0 loaded, 1 unchanged, 0 failed, 1 removed");
    let m = srv.metrics();
    assert!(!m.mentions(failing, "broken") && !m.mentions(failures, "broken"), "{}", m.0);
    assert_eq!(m.value(failures, &[("table", "risk")]), 1.0);
}

#[test]
fn a_new_good_version_after_a_broken_one_is_a_recovery_in_the_log() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    srv.write_table("risk.json", BROKEN);
    kill(Pid::from_raw(srv.pid()), Signal::SIGHUP).expect("SIGHUP");
    srv.wait_for_log(5, "reload (SIGHUP): 1 table: 0 loaded, 0 unchanged, 1 failed, 0 removed");
    assert_eq!(srv.metrics().value("clef_table_load_failures_total", &[("table", "risk")]), 1.0);
    srv.write_table("risk.json", &table("bigger"));
    kill(Pid::from_raw(srv.pid()), Signal::SIGHUP).expect("SIGHUP");
    srv.wait_for_log(5, "reload (SIGHUP): 1 table: 1 loaded, 0 unchanged, 0 failed, 0 removed");
    let version = srv.get("/health").json()["tables"]["risk"].as_str().expect("risk serves").to_string();
    srv.wait_for_log(1, &format!("table risk: recovered; loaded version {version} (SIGHUP)"));
    assert_eq!(srv.post("/decide/risk", r#"{"x": 50}"#).json()["action"]["a"], json!("bigger"));
    // A plain new version (no failure before) is not a recovery.
    srv.write_table("risk.json", &table("biggest"));
    kill(Pid::from_raw(srv.pid()), Signal::SIGHUP).expect("SIGHUP");
    srv.wait_for_logs(5, "reload (SIGHUP): 1 table: 1 loaded, 0 unchanged, 0 failed, 0 removed", 2);
    let newest = srv.get("/health").json()["tables"]["risk"].as_str().expect("risk serves").to_string();
    assert_ne!(newest, version);
    srv.wait_for_log(1, &format!("table risk: loaded version {newest} (SIGHUP)"));
    assert_eq!(srv.log_text().matches("recovered").count(), 1, "{}", srv.log_text());
}
