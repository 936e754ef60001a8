//! The keys of `config.yaml` and their defaults: the whole [`Config`], and the sections that
//! belong to no subsystem (`server`, `model`, `admin`, `logging`, `limits`). The subsystems' own
//! sections are typed where they are used: `router::RouterConfig`, `snapshot::SnapshotsConfig`,
//! `tuning::TuningConfig`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::de::{opt_path, opt_section, opt_text, section, text};
use crate::snapshot::SnapshotsConfig;
use crate::tuning::TuningConfig;

/// The top-level keys of `config.yaml` (also what a `CLEF_…` variable may start with).
pub const TOP_KEYS: [&str; 10] =
    ["server", "model", "admin", "logging", "limits", "state_dir", "cors", "router", "snapshots", "tuning"];

/// The whole configuration, every field defaulted (SPEC §5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// the decision listener
    #[serde(deserialize_with = "section")]
    pub server: Server,
    /// which tables are served
    #[serde(deserialize_with = "section")]
    pub model: Model,
    /// the admin listener
    #[serde(deserialize_with = "section")]
    pub admin: Admin,
    /// log level and format
    #[serde(deserialize_with = "section")]
    pub logging: Logging,
    /// load-time caps
    #[serde(deserialize_with = "section")]
    pub limits: Limits,
    /// kill switches and tuning state; default `$STATE_DIRECTORY`, else `state/` next to the config file
    #[serde(deserialize_with = "opt_path")]
    pub state_dir: Option<PathBuf>,
    /// the seed's top-level `cors:`, an alias of `server.cors` (moved there by [`Config::apply_aliases`])
    #[serde(deserialize_with = "opt_section", skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
    /// the Clef router (SPEC §7); no instances: off
    #[serde(deserialize_with = "section")]
    pub router: crate::router::RouterConfig,
    /// decision snapshots (SPEC §8.1)
    #[serde(deserialize_with = "section")]
    pub snapshots: SnapshotsConfig,
    /// online tuning of table parameters (SPEC §9)
    #[serde(deserialize_with = "section")]
    pub tuning: TuningConfig,
}

impl Config {
    /// Moves the seed's top-level `cors:` into `server.cors`.
    pub fn apply_aliases(&mut self) {
        if let Some(cors) = self.cors.take() {
            self.server.cors = cors;
        }
    }
}

/// `server:` — the decision listener and its limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// address to bind (default `0.0.0.0`)
    #[serde(deserialize_with = "text")]
    pub host: String,
    /// port to bind (default 8080)
    pub port: u16,
    /// worker threads; 0 = one per CPU core
    pub workers: usize,
    /// largest accepted request body (413 beyond)
    pub max_body_bytes: usize,
    /// open connections beyond this are closed at once
    pub max_connections: usize,
    /// keep-alive idle timeout
    pub idle_timeout_ms: u64,
    /// time allowed to read a request once started
    pub read_timeout_ms: u64,
    /// a connection whose answer makes no progress this long is closed
    pub write_timeout_ms: u64,
    /// most request headers (431 beyond)
    pub max_headers: usize,
    /// most bytes of request headers (431 beyond)
    pub max_header_bytes: usize,
    /// the memory all connections together may hold for requests larger than their first
    /// 8 KiB; `None`: [`Server::request_memory`]'s default
    pub request_memory_bytes: Option<usize>,
    /// most inputs in one batch request (413 beyond)
    pub max_batch_lines: usize,
    /// bearer token for decision/authz/feedback calls; absent = open
    #[serde(deserialize_with = "opt_path")]
    pub token_file: Option<PathBuf>,
    /// cross-origin requests
    #[serde(deserialize_with = "section")]
    pub cors: Cors,
}

/// `cors:` — cross-origin resource sharing for browser callers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cors {
    /// answer preflights and add `Access-Control-Allow-*` headers
    pub enabled: bool,
    /// allowed origins (`*` = any)
    pub origins: Vec<String>,
}

/// `model:` — the tables that are served.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Model {
    /// every table in this folder is served (default `./tables`)
    #[serde(deserialize_with = "opt_path")]
    pub tables_dir: Option<PathBuf>,
    /// one more table file (the seed's key); the default table when `default_table` is unset
    #[serde(deserialize_with = "opt_path")]
    pub decision_table_path: Option<PathBuf>,
    /// the table `POST /decide` uses
    #[serde(deserialize_with = "opt_text")]
    pub default_table: Option<String>,
    /// reload changed tables without a restart
    pub watch_file: bool,
    /// shadow tables (SPEC §8.3): `{served table: candidate}`; the candidate decides every
    /// decision of the served table too, and only its agreement is counted and recorded
    #[serde(deserialize_with = "section")]
    pub shadow: BTreeMap<String, String>,
    /// canary tables (SPEC §8.3): `{served table: {table, share, key}}`
    #[serde(deserialize_with = "section")]
    pub canary: BTreeMap<String, Canary>,
}

/// One entry of `model.canary`: a stable, hashed share of a table's traffic served by a candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    /// the candidate table that serves the share
    #[serde(deserialize_with = "text")]
    pub table: String,
    /// the share of decisions (by hashed key) the candidate serves, in [0, 1]
    pub share: f64,
    /// the input field (dotted path) whose value picks the table: the same value always gets
    /// the same table. Without it, each decision is drawn at random
    #[serde(default, deserialize_with = "opt_text")]
    pub key: Option<String>,
}

/// `admin:` — the admin listener.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Admin {
    /// address:port of the admin listener (default loopback `127.0.0.1:9901`)
    #[serde(deserialize_with = "text")]
    pub listen: String,
    /// bearer token for admin calls; absent = no token asked
    #[serde(deserialize_with = "opt_path")]
    pub token_file: Option<PathBuf>,
}

/// `logging:` — what goes to stderr.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Logging {
    /// the most detailed level logged
    pub level: LogLevel,
    /// `text` or `json` lines
    pub format: LogFormat,
}

/// A log level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// errors only
    Error,
    /// errors and warnings
    #[serde(alias = "warning")]
    Warn,
    /// the default
    #[default]
    Info,
    /// more detail
    Debug,
    /// everything
    Trace,
}

impl LogLevel {
    /// The `log` crate's filter for this level.
    pub fn to_level_filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Trace => log::LevelFilter::Trace,
        }
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// human-readable lines
    #[default]
    Text,
    /// one JSON object per line
    Json,
}

/// `limits:` — load-time caps (SPEC §10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// most rules per table
    pub max_rules: usize,
    /// deepest expression nesting
    pub max_expression_depth: usize,
    /// deepest JSON input nesting (the top-level object is level 1)
    pub max_input_depth: usize,
    /// largest compiled regex, in bytes
    pub max_regex_bytes: usize,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            host: "0.0.0.0".into(),
            port: 8080,
            workers: 0,
            max_body_bytes: 65536,
            max_connections: 4096,
            idle_timeout_ms: 60_000,
            read_timeout_ms: 5000,
            write_timeout_ms: 5000,
            max_headers: 64,
            max_header_bytes: 16384,
            request_memory_bytes: None,
            max_batch_lines: 10_000,
            token_file: None,
            cors: Cors::default(),
        }
    }
}

impl Default for Cors {
    fn default() -> Self {
        Cors { enabled: false, origins: vec!["*".into()] }
    }
}

impl Default for Model {
    fn default() -> Self {
        Model {
            tables_dir: Some(PathBuf::from("./tables")),
            decision_table_path: None,
            default_table: None,
            watch_file: true,
            shadow: BTreeMap::new(),
            canary: BTreeMap::new(),
        }
    }
}

impl Default for Admin {
    fn default() -> Self {
        Admin { listen: "127.0.0.1:9901".into(), token_file: None }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_rules: 100_000, max_expression_depth: 64, max_input_depth: 128, max_regex_bytes: 1 << 20 }
    }
}

/// Open files each may worker holds: its epoll instance and the eventfd that wakes it (read in
/// may's source, and measured: `/proc/self/fd` grows by exactly 2 per worker once
/// `may::config().set_workers(n)` has run a first coroutine).
pub const FDS_PER_WORKER: u64 = 2;

/// Open files kept for what is neither a connection nor a worker: stdio, the two listeners, table
/// files being read, the watcher's reads.
pub const FDS_RESERVED: u64 = 64;

/// The memory all connections together may hold for large requests when
/// `server.request_memory_bytes` is not set (and 4 of the largest requests fit in it).
pub const DEFAULT_REQUEST_MEMORY: usize = 16 << 20;

impl Server {
    /// The worker threads `clef serve` runs: `workers`, or one per core for 0.
    pub fn worker_threads(&self, cores: usize) -> usize {
        if self.workers == 0 {
            cores.max(1)
        } else {
            self.workers
        }
    }

    /// The memory all connections together may hold for requests larger than their first
    /// 8 KiB: `request_memory_bytes`, else [`DEFAULT_REQUEST_MEMORY`] or room for 4 requests of
    /// the largest size, whichever is more.
    pub fn request_memory(&self) -> usize {
        self.request_memory_bytes.unwrap_or_else(|| DEFAULT_REQUEST_MEMORY.max(4 * self.largest_request()))
    }

    /// The bytes of the largest request accepted: its head and its body.
    pub(super) fn largest_request(&self) -> usize {
        self.max_body_bytes.saturating_add(self.max_header_bytes)
    }

    /// The open files `clef serve` needs at most: one per connection, [`FDS_PER_WORKER`] per
    /// worker and [`FDS_RESERVED`]. The soft limit should be raised to this.
    pub fn open_files_needed(&self, cores: usize) -> u64 {
        self.max_connections as u64 + self.worker_threads(cores) as u64 * FDS_PER_WORKER + FDS_RESERVED
    }
}
