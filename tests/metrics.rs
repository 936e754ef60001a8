//! `GET /metrics` and the reload log of the real `clef serve`: the process figures against what
//! the kernel says about the server process, the build, per-table load failures, the latency
//! histogram, and the log lines of recoveries and reloads. Every test starts the binary on free
//! loopback ports with a config and tables in a temporary folder (tests/common).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use serde_json::json;

mod common;

use common::{call, Server, BROKEN};

/// A table of one rule: `x > 10` → `{"a": ACTION}`, else the default `{"a": "default"}`.
fn table(action: &str) -> String {
    format!(
        r#"{{"default": {{"a": "default"}}, "rules": [
  {{"id": "big", "condition": "x > 10", "action": {{"a": "{action}"}}}}
]}}
"#
    )
}

/// Default table `risk`, file watching off: reloads happen when a test asks for them.
fn plain() -> String {
    common::config("", "", "model:\n  default_table: risk\n  watch_file: false\n")
}

/// What these tests ask of the server beyond the shared helpers.
trait MetricsServer {
    /// `GET /metrics` in the Prometheus text format.
    fn metrics(&self) -> Metrics;
    /// Waits (at most `secs`) until the log holds `line`.
    fn wait_for_log(&self, secs: u64, line: &str);
    /// Waits (at most `secs`) until the log holds `line` `times` times.
    fn wait_for_logs(&self, secs: u64, line: &str, times: usize);
}

impl MetricsServer for Server {
    fn metrics(&self) -> Metrics {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200, "{}", r.text());
        Metrics(r.text())
    }

    fn wait_for_log(&self, secs: u64, line: &str) {
        self.wait_for_logs(secs, line, 1);
    }

    fn wait_for_logs(&self, secs: u64, line: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.log_text().lines().filter(|l| l.contains(line)).count() < times {
            assert!(Instant::now() < deadline, "not in the log within {secs} s: {line}\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
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
    let kernel = vm_rss(srv.pid().as_raw());
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
    srv.signal(Signal::SIGHUP);
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

    // A table whose file is removed drops out once its file has stayed gone for a moment.
    std::fs::remove_file(srv.path().join("tables/broken.json")).expect("remove broken.json");
    srv.admin_post("/reload");
    srv.wait_for_log(1, "reload (POST /reload): 2 tables: 0 loaded, 1 unchanged, 0 failed, 0 removed, 1 missing");
    srv.wait_for_log(5, "table broken: its file has been gone for 2 s; removed");
    let m = srv.metrics();
    assert!(!m.mentions(failing, "broken") && !m.mentions(failures, "broken"), "{}", m.0);
    assert_eq!(m.value(failures, &[("table", "risk")]), 1.0);
}

#[test]
fn a_new_good_version_after_a_broken_one_is_a_recovery_in_the_log() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    srv.write_table("risk.json", BROKEN);
    srv.signal(Signal::SIGHUP);
    srv.wait_for_log(5, "reload (SIGHUP): 1 table: 0 loaded, 0 unchanged, 1 failed, 0 removed");
    assert_eq!(srv.metrics().value("clef_table_load_failures_total", &[("table", "risk")]), 1.0);
    srv.write_table("risk.json", &table("bigger"));
    srv.signal(Signal::SIGHUP);
    srv.wait_for_log(5, "reload (SIGHUP): 1 table: 1 loaded, 0 unchanged, 0 failed, 0 removed");
    let version = srv.get("/health").json()["tables"]["risk"].as_str().expect("risk serves").to_string();
    srv.wait_for_log(1, &format!("table risk: recovered; loaded version {version} (SIGHUP)"));
    assert_eq!(srv.post("/decide/risk", r#"{"x": 50}"#).json()["action"]["a"], json!("bigger"));
    // A plain new version (no failure before) is not a recovery.
    srv.write_table("risk.json", &table("biggest"));
    srv.signal(Signal::SIGHUP);
    srv.wait_for_logs(5, "reload (SIGHUP): 1 table: 1 loaded, 0 unchanged, 0 failed, 0 removed", 2);
    let newest = srv.get("/health").json()["tables"]["risk"].as_str().expect("risk serves").to_string();
    assert_ne!(newest, version);
    srv.wait_for_log(1, &format!("table risk: loaded version {newest} (SIGHUP)"));
    assert_eq!(srv.log_text().matches("recovered").count(), 1, "{}", srv.log_text());
}

#[test]
fn closed_connections_are_counted_by_reason() {
    let srv = Server::start(&plain(), &[("risk.json", &table("big"))]);
    // scrapes over one kept connection, so that they close nothing themselves
    let mut scraper = common::Conn::open(srv.port);
    let mut closed = |reason: &str| {
        let r = scraper.request("GET", "/metrics", &[], b"");
        Metrics(r.text()).value("clef_connections_closed_total", &[("reason", reason)])
    };
    let (client, answered) = (closed("client"), closed("connection_close"));
    // the client hangs up after its answer
    let mut c = common::Conn::open(srv.port);
    assert_eq!(c.request("POST", "/decide/risk", &[], br#"{"x": 50}"#).status, 200);
    drop(c);
    // the client asks for the close; a malformed request gets one
    let mut c = common::Conn::open(srv.port);
    assert_eq!(c.request("POST", "/decide/risk", &[("Connection", "close")], br#"{"x": 50}"#).status, 200);
    let mut bad = common::Conn::open(srv.port);
    bad.send(b"NOT HTTP AT ALL\r\n\r\n");
    assert_eq!(bad.read_response().expect("an answer").status, 400);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = (closed("client") - client, closed("connection_close") - answered);
        if now == (1.0, 2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "closed (client, connection_close) went up by {now:?}, not (1, 2)");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((c, bad));
}
