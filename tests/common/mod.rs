//! Shared by the tests that start the real `clef serve`: free loopback ports, a config and
//! tables in a temporary folder, the process (killed on drop, its log printed when a test
//! fails), and HTTP over raw sockets (keep-alive, pipelining and the limits need them).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]
#![allow(dead_code)] // each test binary uses its own share of these

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------------------
// helpers: ports, tables, config

/// How long any single read or write may block before the test fails.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().expect("local addr").port()
}

pub fn sha12(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// A small Jev table: `x > 10` → `{"a": ACTION}`, a `tier == "vip"` rule, a disabled rule, a default.
pub fn table(action: &str) -> String {
    format!(
        r#"{{"default": {{"a": "default"}}, "rules": [
  {{"id": "big", "condition": "x > 10", "action": {{"a": "{action}"}}}},
  {{"id": "vip", "condition": "tier == \"vip\" && x > 1", "action": {{"a": "vip"}}, "description": "VIPs"}},
  {{"id": "off", "condition": "x == 0", "action": {{"a": "off"}}, "enabled": false}}
]}}
"#
    )
}

/// A table file that fails to load (unknown function).
pub const BROKEN: &str = r#"[{"id": "r", "condition": "bogus(x) >", "action": {}}]"#;

/// A config with the main port `@PORT@` and admin port `@ADMIN@`; `server` and `admin` are
/// extra indented lines for those sections, `rest` more top-level sections.
pub fn config(server: &str, admin: &str, rest: &str) -> String {
    format!("server:\n  host: 127.0.0.1\n  port: @PORT@\n{server}admin:\n  listen: 127.0.0.1:@ADMIN@\n{admin}{rest}")
}

/// The most common config: default table `risk`, no file watching unless asked.
pub fn plain() -> String {
    config("", "", "model:\n  default_table: risk\n  watch_file: false\n")
}

pub fn write(dir: &Path, rel: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("create folder");
    }
    std::fs::write(&p, bytes).expect("write file");
    p
}

/// The first of `paths` that is a file. When none is, the test is skipped (`None`, said on
/// stderr) unless the environment variable `require` is set: then it fails. `install` says how
/// to get the tool.
pub fn required_tool(paths: &[&str], require: &str, install: &str) -> Option<PathBuf> {
    let found = paths.iter().map(PathBuf::from).find(|p| p.is_file());
    if found.is_none() {
        assert!(std::env::var_os(require).is_none(), "{require} is set but none of {paths:?} is installed ({install})");
        eprintln!("SKIPPED: none of {paths:?} is installed here ({install}); .ci/run installs it");
    }
    found
}

// ---------------------------------------------------------------------------------------------
// helpers: the server process

pub struct Ports {
    pub main: u16,
    pub admin: u16,
    pub spare: u16,
}

impl Ports {
    pub fn new() -> Ports {
        Ports { main: free_port(), admin: free_port(), spare: free_port() }
    }

    pub fn fill(&self, text: &str) -> String {
        text.replace("@PORT@", &self.main.to_string()).replace("@ADMIN@", &self.admin.to_string())
    }
}

/// A running `clef serve`, killed on drop (also when the test panics; then its log is printed).
pub struct Server {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub admin: u16,
    pub log: PathBuf,
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

/// Waits (5 s at most) until the server answers `GET /health` on `port`; why not otherwise.
pub fn until_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Err(format!("clef serve exited before it was ready ({status})"));
        }
        if let Ok(mut c) = Conn::try_open(port) {
            if let Ok(r) = c.try_request("GET", "/health", &[], b"") {
                if r.status == 200 || r.status == 503 {
                    return Ok(());
                }
            }
        }
        if Instant::now() >= deadline {
            return Err("clef serve did not answer /health within 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `child` exited because a port it was to listen on was taken.
fn lost_a_port_race(child: &mut Child, log: &Path) -> bool {
    child.try_wait().ok().flatten().is_some()
        && std::fs::read_to_string(log).is_ok_and(|text| text.contains("Address already in use"))
}

impl Server {
    /// Starts a server with `config` (placeholders filled in) and `tables/NAME` files.
    pub fn start(config: &str, tables: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in tables {
            write(dir.path(), &format!("tables/{name}"), text);
        }
        let config = config.to_string();
        Server::launch(dir, move |p| p.fill(&config).into_bytes(), |_, _| None)
    }

    /// Writes `config.yaml` as `config` makes it, runs `clef serve -c DIR/config.yaml` (after
    /// `tweak` adjusted the command; it returns the main port when that is not the file's) and
    /// waits until `GET /health` answers. A port picked by [`free_port`] is free when picked,
    /// but any connection of the tests running alongside may take it as its local port before
    /// clef binds it: a start that loses that race is tried again with new ports.
    pub fn launch(
        dir: tempfile::TempDir,
        config: impl FnMut(&Ports) -> Vec<u8>,
        tweak: impl FnMut(&mut Command, &Ports) -> Option<u16>,
    ) -> Server {
        let mut server = Server::launch_until(dir, config, tweak, until_ready);
        server.wait_ready();
        server
    }

    /// [`Server::launch`], waiting with `ready` (given the process and its main port) instead
    /// of for `GET /health`; `ready` fails when the process exits first.
    pub fn launch_until(
        dir: tempfile::TempDir,
        mut config: impl FnMut(&Ports) -> Vec<u8>,
        mut tweak: impl FnMut(&mut Command, &Ports) -> Option<u16>,
        mut ready: impl FnMut(&mut Child, u16) -> Result<(), String>,
    ) -> Server {
        let cfg = dir.path().join("config.yaml");
        let log = dir.path().join("server.log");
        for attempt in 1.. {
            let ports = Ports::new();
            std::fs::write(&cfg, config(&ports)).expect("write config");
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_clef"));
            cmd.arg("serve").arg("-c").arg(&cfg).current_dir(dir.path());
            cmd.stdin(Stdio::null());
            cmd.stdout(File::create(dir.path().join("server.out")).expect("create stdout file"));
            cmd.stderr(File::create(&log).expect("create log file"));
            let port = tweak(&mut cmd, &ports).unwrap_or(ports.main);
            let mut child = cmd.spawn().expect("start clef serve");
            let outcome = ready(&mut child, port);
            if outcome.is_err() && attempt < 4 && lost_a_port_race(&mut child, &log) {
                continue;
            }
            let server = Server { child, dir, port, admin: ports.admin, log };
            if let Err(why) = outcome {
                panic!("{why}\n{}", server.log_text());
            }
            return server;
        }
        unreachable!("the loop returns")
    }

    pub fn wait_ready(&mut self) {
        if let Err(why) = until_ready(&mut self.child, self.port) {
            panic!("{why}\n{}", self.log_text());
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write_table(&self, name: &str, text: &str) -> PathBuf {
        write(self.path(), &format!("tables/{name}"), text)
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// The server's resident memory now, in KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS")
    }

    /// The most resident memory the server has had since it started, or since
    /// [`Server::reset_peak_rss`], in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM")
    }

    /// Starts [`Server::peak_rss_kib`] again from the resident memory now (Linux's
    /// `clear_refs`), so that it tells the peak of what follows, not of loading the tables.
    pub fn reset_peak_rss(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").expect("reset VmHWM");
    }

    fn status_kib(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("read /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{key} in /proc status"))
    }

    /// Sends a signal to the server.
    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).expect("send a signal to clef");
    }

    pub fn get(&self, path: &str) -> Resp {
        call(self.port, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &str) -> Resp {
        call(self.port, "POST", path, &[], body.as_bytes())
    }

    pub fn admin_post(&self, path: &str) -> Resp {
        call(self.admin, "POST", path, &[], b"")
    }

    pub fn health(&self) -> Json {
        let r = self.get("/health");
        assert_eq!(r.status, 200, "{r:?}");
        r.json()
    }

    /// The action's `a` of a decision with `table`.
    pub fn action(&self, table: &str, input: &str) -> String {
        let r = self.post(&format!("/decide/{table}"), input);
        assert_eq!(r.status, 200, "{r:?}");
        r.json()["action"]["a"].as_str().unwrap_or("<none>").to_string()
    }

    /// Waits (at most `secs`) until `f` holds.
    pub fn eventually(&self, secs: u64, what: &str, mut f: impl FnMut(&Server) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f(self) {
            assert!(Instant::now() < deadline, "not within {secs} s: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most 5 s) for the process to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(Instant::now() < deadline, "clef serve did not exit within 5 s\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `clef serve` with a config that must be refused: returns its exit status and stderr.
pub fn refused(dir: &tempfile::TempDir, config_text: &str, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let ports = Ports::new();
    let cfg = write(dir.path(), "config.yaml", ports.fill(config_text));
    let log = dir.path().join("server.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_clef"))
        .arg("serve")
        .arg("-c")
        .arg(&cfg)
        .current_dir(dir.path())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("create log"))
        .spawn()
        .expect("start clef serve");
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clef serve started with an invalid config\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------
// helpers: HTTP over raw sockets

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Json {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// Checks an error answer: status, JSON `{"error": {"code", "message"}}`; returns the message.
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{} {}", self.status, self.text());
        let ct = self.header("content-type").unwrap_or("");
        assert!(ct.starts_with("application/json"), "content type {ct}");
        let j = self.json();
        assert_eq!(j["error"]["code"], json!(code), "{j}");
        let message = j["error"]["message"].as_str().unwrap_or_else(|| panic!("no error.message in {j}"));
        assert!(!message.is_empty(), "{j}");
        message.to_string()
    }
}

/// One client connection with a buffer, so pipelined answers can be read one by one.
pub struct Conn {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    /// the next answer read is to a `HEAD` request: it has no body, whatever its head says
    pub head_only: bool,
}

pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-length")) {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Conn {
    pub fn try_open(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn { stream, buf: Vec::new(), head_only: false })
    }

    pub fn open(port: u16) -> Conn {
        Conn::try_open(port).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to the server");
    }

    pub fn try_request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> io::Result<Resp> {
        self.stream.write_all(&request_bytes(method, path, headers, body))?;
        self.head_only = method == "HEAD";
        let answer = self.read_response();
        self.head_only = false;
        answer
    }

    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        self.try_request(method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16384];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// Reads one response (skipping `100 Continue`): status line, headers, and a body of
    /// `Content-Length` bytes or in chunks (`Transfer-Encoding: chunked`, checked strictly).
    pub fn read_response(&mut self) -> io::Result<Resp> {
        loop {
            let head_end = loop {
                if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                    break i;
                }
                self.fill()?;
            };
            let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
            let mut lines = head.split("\r\n");
            let status_line = lines.next().unwrap_or("");
            let status: u16 = status_line
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
            assert!(status_line.starts_with("HTTP/1."), "bad status line {status_line:?}");
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .collect();
            let header = |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v);
            let chunked = header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
            let length = header("content-length").map(|v| v.parse::<usize>().expect("numeric Content-Length"));
            assert!(!(chunked && length.is_some()), "both Content-Length and chunked: {head}");
            self.buf.drain(..head_end + 4);
            let body = if chunked && !self.head_only {
                self.read_chunks()?
            } else {
                let len = if self.head_only { 0 } else { length.unwrap_or(0) };
                while self.buf.len() < len {
                    self.fill()?;
                }
                self.buf.drain(..len).collect()
            };
            if status == 100 {
                continue;
            }
            return Ok(Resp { status, headers, body });
        }
    }

    /// A chunked body (RFC 9112 §7.1): hexadecimal sizes, each chunk followed by CRLF, a last
    /// chunk of size 0 and no trailers. Anything else fails the test.
    fn read_chunks(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(&self.buf, b"\r\n") {
                    break i;
                }
                self.fill()?;
            };
            let size_text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            assert!(
                !size_text.is_empty() && size_text.bytes().all(|b| b.is_ascii_hexdigit()),
                "bad chunk size line {size_text:?}"
            );
            let size = usize::from_str_radix(&size_text, 16).expect("chunk size");
            while self.buf.len() < line_end + 2 + size + 2 {
                self.fill()?;
            }
            assert_eq!(&self.buf[line_end + 2 + size..line_end + 4 + size], b"\r\n", "a chunk not ended by CRLF");
            body.extend_from_slice(&self.buf[line_end + 2..line_end + 2 + size]);
            self.buf.drain(..line_end + 4 + size);
            if size == 0 {
                return Ok(body);
            }
        }
    }

    /// Whether the server closes this connection (EOF or reset) within `within`, reading and
    /// discarding anything it still sends.
    pub fn closed_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut chunk = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream.set_read_timeout(Some(left)).expect("set timeout");
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return false,
                Err(_) => return true,
            }
        }
    }
}

/// One request on a fresh connection.
pub fn call(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    Conn::open(port).request(method, path, headers, body)
}

/// A decision answer with every key of SPEC §6, for `table` served from `file`.
pub fn assert_decision(r: &Resp, table: &str, file: &Path) -> Json {
    assert_eq!(r.status, 200, "{}", r.text());
    let ct = r.header("content-type").unwrap_or("");
    assert!(ct.starts_with("application/json"), "content type {ct}");
    let d = r.json();
    for key in ["rule_id", "matched", "action", "timestamp", "table", "version", "instance"] {
        assert!(d.get(key).is_some(), "missing {key} in {d}");
    }
    assert_eq!(d["table"], json!(table), "{d}");
    assert_eq!(d["instance"], json!("local"), "{d}");
    assert_eq!(d["version"], json!(sha12(&std::fs::read(file).expect("read table"))), "{d}");
    let ts = d["timestamp"].as_str().expect("timestamp string");
    assert!(humantime::parse_rfc3339(ts).is_ok() && ts.ends_with('Z'), "timestamp {ts}");
    d
}
