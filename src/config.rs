//! `config.yaml` for `clef serve` (SPEC §5): defaults, then the file, then `CLEF_…` environment
//! variables, then command-line flags, layered with figment.
//!
//! The file is first read on its own by [`crate::yaml`] (granit-parser's events with their
//! positions), so that every unknown key, wrong type or Windows path is reported at its line and
//! column (with a "did you mean" where a known key is close): a typo never falls back to a
//! default silently. Files written on Windows work: a UTF-8 BOM, CRLF line ends, backslashes in
//! relative paths and double-quoted paths with backslashes.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: load time only: every index is checked by the test beside it (a length, a loop
// bound, a position just found).
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use figment::providers::Serialized;
use figment::value::{Dict, Map, Value as FigValue};
use figment::{Figment, Metadata, Profile, Provider};
use rustc_hash::FxHashMap;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::diagnostic::{quote, Diagnostic};
use crate::snapshot::SnapshotsConfig;
use crate::suggest::did_you_mean;
use crate::tuning::TuningConfig;
use crate::yaml::{self, DeErrorKind};

/// Where `clef serve` looks for its configuration when no `-c` is given, in this order.
pub const DEFAULT_PATHS: [&str; 2] = ["./config.yaml", "/etc/clef/config.yaml"];

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

impl Config {
    /// Moves the seed's top-level `cors:` into `server.cors`.
    pub fn apply_aliases(&mut self) {
        if let Some(cors) = self.cors.take() {
            self.server.cors = cors;
        }
    }
}

/// Values from the command line, applied after the file and the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--port N`
    pub port: Option<u16>,
    /// `--host H`
    pub host: Option<String>,
}

/// A loaded configuration, its paths resolved against the folder of the config file.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// the layered configuration (its relative paths replaced by the resolved ones below)
    pub config: Config,
    /// the config file used
    pub path: PathBuf,
    /// the (absolute) folder of the config file: relative paths resolve against it
    pub base_dir: PathBuf,
    /// the folder whose tables are served
    pub tables_dir: PathBuf,
    /// the seed's single table file, if configured
    pub decision_table_path: Option<PathBuf>,
    /// `model.default_table`, else the name of `decision_table_path` (its file name without every extension)
    pub default_table: Option<String>,
    /// the bearer token decision calls need (`server.token_file`, trimmed)
    pub server_token: Option<String>,
    /// the bearer token admin calls need (`admin.token_file`, trimmed)
    pub admin_token: Option<String>,
    /// `state_dir`, else `$STATE_DIRECTORY`, else `<base_dir>/state`
    pub state_dir: PathBuf,
    /// settings that work but are risky (a limit lowered to fit this machine, an open admin listener)
    pub warnings: Vec<String>,
}

/// Loads the configuration for `clef serve`, with the process environment.
///
/// Without `explicit`, uses `./config.yaml`, then `/etc/clef/config.yaml`.
pub fn load(explicit: Option<&Path>, overrides: &Overrides) -> Result<Loaded, Vec<Diagnostic>> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("CLEF_") || k == "STATE_DIRECTORY" || k == "CREDENTIALS_DIRECTORY")
        .collect();
    load_with_env(explicit, overrides, &env)
}

/// [`load`] with the environment given explicitly (`CLEF_…` variables, systemd's `STATE_DIRECTORY`
/// and `CREDENTIALS_DIRECTORY`; others are ignored).
pub fn load_with_env(
    explicit: Option<&Path>,
    overrides: &Overrides,
    env: &[(String, String)],
) -> Result<Loaded, Vec<Diagnostic>> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match DEFAULT_PATHS.iter().map(PathBuf::from).find(|p| p.is_file()) {
            Some(p) => p,
            None => {
                return Err(vec![Diagnostic::whole_file(
                    "config.yaml",
                    format!(
                        "no configuration file: neither {} nor {} exists; pass one with `-c PATH`",
                        DEFAULT_PATHS[0], DEFAULT_PATHS[1]
                    ),
                )])
            }
        },
    };
    let mut layered = layer(&path, overrides, env)?;
    let (errors, warnings) = review(&mut layered, &Machine::current());
    resolve(layered, errors, warnings, env)
}

/// Every problem of a config file, for `clef check`: syntax, unknown keys (with "did you mean"),
/// wrong types, Windows paths, values that cannot work on this machine (the same checks as
/// `clef serve`), a `tables_dir` that cannot be read. Problems are errors; risky settings come as
/// [`Severity::Warning`](crate::diagnostic::Severity::Warning) diagnostics. Token files need not
/// exist yet. No errors means the file is valid.
pub fn check_file(path: &Path) -> Vec<Diagnostic> {
    let mut layered = match layer(path, &Overrides::default(), &[]) {
        Ok(l) => l,
        Err(d) => return d,
    };
    let (mut errors, warnings) = review(&mut layered, &Machine::current());
    errors.extend(warnings);
    errors
}

/// A configuration read from its file and layered, with what it takes to say where a value came
/// from.
struct Layered {
    config: Config,
    path: PathBuf,
    shown: String,
    /// the file text, without its BOM
    text: String,
    /// where its keys and values are written
    places: Places,
    /// the `CLEF_…` variables that set values, as (dotted key, variable name)
    env_keys: Vec<(String, String)>,
}

/// Reads the file and layers it: defaults, the file, the environment (figment); then the flags.
fn layer(path: &Path, overrides: &Overrides, env: &[(String, String)]) -> Result<Layered, Vec<Diagnostic>> {
    let shown = path.display().to_string();
    let text = read_config_text(path)?;
    let (mut file_config, places) = validate_text(&shown, &text)?;
    file_config.apply_aliases();
    let mut figment = Figment::from(Serialized::defaults(Config::default())).merge(Serialized::defaults(file_config));
    let mut diags = Vec::new();
    let mut env_keys = Vec::new();
    for var in env_layers(env, &mut diags) {
        env_keys.push((var.key.clone(), var.name.clone()));
        figment = figment.merge(var);
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let mut config: Config = figment.extract().map_err(|e| figment_diagnostics(&shown, e))?;
    config.apply_aliases();
    if let Some(port) = overrides.port {
        config.server.port = port;
    }
    if let Some(host) = &overrides.host {
        config.server.host = host.clone();
    }
    Ok(Layered { config, path: path.to_path_buf(), shown, text, places, env_keys })
}

impl Layered {
    /// The variable that set `key` (dotted), or a section holding it.
    fn env_var(&self, key: &str) -> Option<&str> {
        let sets = |k: &str| key == k || key.strip_prefix(k).is_some_and(|rest| rest.starts_with('.'));
        self.env_keys.iter().rev().find(|(k, _)| sets(k)).map(|(_, var)| var.as_str())
    }

    /// A diagnostic about the value of `keys`: at the value in the file, or naming the
    /// environment variable that set it.
    fn at_value(&self, keys: &[&str], message: String) -> Diagnostic {
        if let Some(var) = self.env_var(&keys.join(".")) {
            return Diagnostic::whole_file(var, format!("environment variable {var}: {message}"));
        }
        match self.places.value(keys) {
            Some(at) => Diagnostic::at_offset(&self.shown, &self.text, at.start, at.len(), message),
            None => Diagnostic::whole_file(&self.shown, message),
        }
    }

    /// Whether `keys` was written in the file or set by a variable, rather than left to its default.
    fn given(&self, keys: &[&str]) -> bool {
        self.env_var(&keys.join(".")).is_some() || self.places.key(keys).is_some()
    }
}

/// The largest configuration file read. A configuration is a few KB: the cap keeps a wrong `-c`
/// (a log, a disk image) from costing memory and time.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Only the first 4 KiB of a token file count, so a token file pointing at a large file cannot
/// exhaust memory.
const MAX_TOKEN_BYTES: u64 = 4096;

/// The text of a configuration file, without its BOM: a regular file of at most
/// [`MAX_CONFIG_BYTES`] in UTF-8, or a diagnostic saying why not.
pub(crate) fn read_config_text(path: &Path) -> Result<String, Vec<Diagnostic>> {
    use std::io::Read;
    let shown = path.display().to_string();
    let cannot = |e: std::io::Error| {
        vec![Diagnostic::whole_file(&shown, format!("cannot read the configuration file: {}", io_reason(&e)))]
    };
    let mut bytes = Vec::new();
    crate::files::open_regular(path)
        .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(vec![Diagnostic::whole_file(
            &shown,
            format!(
                "the configuration file is larger than {} ({MAX_CONFIG_BYTES} bytes), the most clef reads; \
                 a configuration is a few KB: is this the right file?",
                size(MAX_CONFIG_BYTES)
            ),
        )]);
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let good = String::from_utf8_lossy(good).into_owned();
        vec![Diagnostic::at_offset(
            &shown,
            &good,
            good.len(),
            1,
            "the file is not UTF-8 text; save it as UTF-8".to_string(),
        )]
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Resolution of paths and tokens

fn base_dir_of(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    normalize(abs.parent().unwrap_or(Path::new("/")))
}

/// Joins a relative path to `base` and removes `.` and `..` components lexically.
fn resolve_path(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        normalize(p)
    } else {
        normalize(&base.join(p))
    }
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Resolves the paths of a reviewed configuration and reads its token files: the configuration
/// `clef serve` runs with, or every error found.
fn resolve(
    layered: Layered,
    mut errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    env: &[(String, String)],
) -> Result<Loaded, Vec<Diagnostic>> {
    let mut config = layered.config.clone();
    let path = layered.path.clone();
    let base_dir = base_dir_of(&path);
    let tables_dir =
        resolve_path(&base_dir, config.model.tables_dir.as_deref().unwrap_or_else(|| Path::new("./tables")));
    let decision_table_path = config.model.decision_table_path.as_deref().map(|p| resolve_path(&base_dir, p));
    let default_table =
        config.model.default_table.clone().or_else(|| decision_table_path.as_deref().map(crate::table::table_name));
    let state_dir = match &config.state_dir {
        Some(p) => resolve_path(&base_dir, p),
        None => match env.iter().find(|(k, v)| k == "STATE_DIRECTORY" && !v.is_empty()) {
            // systemd may list several directories separated by colons: the first is ours
            Some((_, v)) => PathBuf::from(v.split(':').next().unwrap_or(v)),
            None => base_dir.join("state"),
        },
    };
    // A token file the config names wins; without one, a systemd credential of the service
    // (`LoadCredential=server-token:…`, read from `$CREDENTIALS_DIRECTORY`) closes the listener:
    // that is how the Debian package hands clef the token it generated (SPEC §10 rev 4).
    let credentials_dir = env.iter().find(|(k, v)| k == "CREDENTIALS_DIRECTORY" && !v.is_empty()).map(|(_, v)| v);
    let mut token = |keys: [&str; 2], file: &mut Option<PathBuf>| -> Option<String> {
        let p = match file.as_deref() {
            Some(f) => resolve_path(&base_dir, f),
            None => {
                let credential = Path::new(credentials_dir?).join(credential_name(keys[0]));
                // systemd creates the folder with exactly the credentials the unit loads
                if !credential.exists() {
                    return None;
                }
                credential
            }
        };
        *file = Some(p.clone());
        let problem = match read_token_file(&p) {
            Ok(t) if !t.trim().is_empty() => return Some(t.trim().to_string()),
            Ok(_) => format!("the token file `{}` ({}.{}) is empty", p.display(), keys[0], keys[1]),
            Err(e) => {
                format!("cannot read the token file `{}` ({}.{}): {}", p.display(), keys[0], keys[1], io_reason(&e))
            }
        };
        errors.push(layered.at_value(&keys, problem));
        None
    };
    let server_token = token(["server", "token_file"], &mut config.server.token_file);
    let admin_token = token(["admin", "token_file"], &mut config.admin.token_file);
    if !errors.is_empty() {
        return Err(errors);
    }
    let warnings = warnings.into_iter().map(|d| d.message).collect();
    config.model.tables_dir = Some(tables_dir.clone());
    config.model.decision_table_path = decision_table_path.clone();
    config.snapshots.dir = if config.snapshots.dir.as_os_str().is_empty() {
        state_dir.join("snapshots")
    } else {
        resolve_path(&base_dir, &config.snapshots.dir)
    };
    config.state_dir = Some(state_dir.clone());
    Ok(Loaded {
        config,
        path,
        base_dir,
        tables_dir,
        decision_table_path,
        default_table,
        server_token,
        admin_token,
        state_dir,
        warnings,
    })
}

// ---------------------------------------------------------------------------------------------
// Values that cannot work (SPEC §5): one review for `clef serve` and `clef check`

/// The most worker threads. may runs one per core, pinned, and each runs any number of
/// coroutines: threads beyond the cores only add switching, and each holds open files.
pub const MAX_WORKERS: usize = 1024;

/// Open files each may worker holds: its epoll instance and the eventfd that wakes it (read in
/// may's source, and measured: `/proc/self/fd` grows by exactly 2 per worker once
/// `may::config().set_workers(n)` has run a first coroutine).
pub const FDS_PER_WORKER: u64 = 2;

/// Open files kept for what is neither a connection nor a worker: stdio, the two listeners, table
/// files being read, the watcher's reads.
pub const FDS_RESERVED: u64 = 64;

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

/// The memory all connections together may hold for large requests when
/// `server.request_memory_bytes` is not set (and 4 of the largest requests fit in it).
pub const DEFAULT_REQUEST_MEMORY: usize = 16 << 20;

/// The most inputs `server.max_batch_lines` may allow in one batch.
pub const MAX_BATCH_LINES: usize = 10_000_000;

/// `max_body_bytes` may be at most this fraction (1/N) of the memory clef may use: every
/// connection may be reading a body at once.
pub const BODY_MEMORY_SHARE: u64 = 16;

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
    fn largest_request(&self) -> usize {
        self.max_body_bytes.saturating_add(self.max_header_bytes)
    }

    /// The open files `clef serve` needs at most: one per connection, [`FDS_PER_WORKER`] per
    /// worker and [`FDS_RESERVED`]. The soft limit should be raised to this.
    pub fn open_files_needed(&self, cores: usize) -> u64 {
        self.max_connections as u64 + self.worker_threads(cores) as u64 * FDS_PER_WORKER + FDS_RESERVED
    }
}

/// `bytes` for people: `64 MiB`, `95.4 MiB`, `512 KiB`, `100 bytes`.
fn size(bytes: u64) -> String {
    let (value, unit) = match bytes {
        b if b >= 1 << 30 => (b as f64 / (1u64 << 30) as f64, "GiB"),
        b if b >= 1 << 20 => (b as f64 / (1u64 << 20) as f64, "MiB"),
        b if b >= 1 << 10 => (b as f64 / 1024.0, "KiB"),
        b => return format!("{b} bytes"),
    };
    let text = format!("{value:.1}");
    format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
}

/// Checks the values of a layered configuration against what can work on `machine`: errors, and
/// warnings for settings that work but are risky. A default that does not fit this machine
/// (`max_connections` beyond the open files limit) is lowered to what fits, with a warning;
/// the same value written in the file or the environment is an error.
fn review(l: &mut Layered, machine: &Machine) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
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
            errors.push(l.at_value(&keys, format!("`server.{key}` is 0: {zero}; the default is {default}")));
        } else if value > MAX_TIMEOUT_MS {
            errors.push(l.at_value(
                &keys,
                format!(
                    "`server.{key}` is {value} ms, more than a day ({MAX_TIMEOUT_MS}); a timeout that long \
                     protects nothing: is a zero too many? The default is {default}"
                ),
            ));
        }
    }

    let workers = s.worker_threads(machine.cores) as u64;
    let for_workers = workers * FDS_PER_WORKER + FDS_RESERVED;
    let limit_hint = "raise the open files limit (LimitNOFILE= in the systemd unit, `ulimit -Hn`)";
    let workers_fit = if s.workers > MAX_WORKERS {
        errors.push(l.at_value(
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
        errors.push(l.at_value(
            &["server", "workers"],
            format!(
                "`server.workers` is {what}: {workers} workers hold {} open files and clef {FDS_RESERVED} more, \
                 but the open files limit here is {}, with no room left for connections; write fewer workers \
                 or {limit_hint}",
                workers * FDS_PER_WORKER,
                machine.open_files
            ),
        ));
        false
    } else {
        true
    };

    let room = machine.open_files.saturating_sub(for_workers);
    let connections = ["server", "max_connections"];
    if s.max_connections == 0 {
        errors.push(l.at_value(
            &connections,
            format!(
                "`server.max_connections` is 0: no connection would ever be accepted; the default is {}",
                defaults.max_connections
            ),
        ));
    } else if workers_fit && s.max_connections as u64 > room {
        let given = s.max_connections as u64;
        if l.given(&connections) {
            errors.push(l.at_value(
                &connections,
                format!(
                    "`server.max_connections` is {given}, but each connection is an open file and the open files \
                     limit here is {}: with {workers} workers at most {room} connections fit; write at most {room} \
                     or {limit_hint}",
                    machine.open_files
                ),
            ));
        } else {
            l.config.server.max_connections = room as usize;
            warnings.push(
                Diagnostic::whole_file(
                    &l.shown,
                    format!(
                        "the open files limit here is {}: `server.max_connections` is lowered from its default \
                         {given} to {room}; to accept more, {limit_hint}",
                        machine.open_files
                    ),
                )
                .warning(),
            );
        }
    }
    let s = &l.config.server;

    let headers = ["server", "max_headers"];
    if s.max_headers == 0 {
        errors.push(l.at_value(
            &headers,
            "`server.max_headers` is 0: every request has headers, so every request would be answered 431".into(),
        ));
    } else if s.max_headers > MAX_HEADERS {
        errors.push(l.at_value(
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
        errors.push(
            l.at_value(&header_bytes, "`server.max_header_bytes` is 0: every request would be answered 431".into()),
        );
    } else if s.max_header_bytes > MAX_HEADER_BYTES {
        errors.push(l.at_value(
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

    let body = ["server", "max_body_bytes"];
    let share = machine.memory / BODY_MEMORY_SHARE;
    let held = "a body is held in memory whole while it is decided, and every connection may be sending one";
    if s.max_body_bytes == 0 {
        errors.push(
            l.at_value(&body, "`server.max_body_bytes` is 0: every decision request would be answered 413".into()),
        );
    } else if s.max_body_bytes > MAX_BODY_BYTES {
        errors.push(l.at_value(
            &body,
            format!(
                "`server.max_body_bytes` is {} ({}), more than {} ({MAX_BODY_BYTES}), the most clef accepts: {held}",
                s.max_body_bytes,
                size(s.max_body_bytes as u64),
                size(MAX_BODY_BYTES as u64)
            ),
        ));
    } else if s.max_body_bytes as u64 > share {
        errors.push(l.at_value(
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

    let request_memory = ["server", "request_memory_bytes"];
    if let Some(given) = s.request_memory_bytes {
        let largest = s.largest_request();
        if given < largest {
            errors.push(l.at_value(
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
            errors.push(l.at_value(
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
    let batch_lines = ["server", "max_batch_lines"];
    if s.max_batch_lines == 0 {
        errors.push(
            l.at_value(&batch_lines, "`server.max_batch_lines` is 0: every batch request would be answered 413".into()),
        );
    } else if s.max_batch_lines > MAX_BATCH_LINES {
        errors.push(l.at_value(
            &batch_lines,
            format!(
                "`server.max_batch_lines` is {}, more than {MAX_BATCH_LINES}: one request could keep a worker \
                 deciding for minutes; the default is {}",
                s.max_batch_lines, defaults.max_batch_lines
            ),
        ));
    }

    let admin = &l.config.admin;
    match listen_is_loopback(&admin.listen) {
        None => errors.push(l.at_value(
            &["admin", "listen"],
            format!(
                "`admin.listen` is `{}`, which is not host:port; write an address and a port like \
                 127.0.0.1:9901 or [::1]:9901, or \"\" for no admin listener",
                quote(&admin.listen)
            ),
        )),
        Some(false) if admin.token_file.is_none() => warnings.push(
            l.at_value(
                &["admin", "listen"],
                format!(
                    "SECURITY: `admin.listen` is {}, which is not a loopback address, and `admin.token_file` is \
                     not set: anyone who can reach that address can reload tables and roll them back. Set \
                     `admin.token_file` to a file holding a token, or listen on 127.0.0.1",
                    quote(&admin.listen)
                ),
            )
            .warning(),
        ),
        Some(_) => {}
    }

    let model = &l.config.model;
    let tables_key = ["model", "tables_dir"];
    let given = l.given(&tables_key);
    // The seed's form (only `decision_table_path`) needs no folder: the default one may be absent.
    if given || model.decision_table_path.is_none() {
        let dir =
            resolve_path(&base_dir_of(&l.path), model.tables_dir.as_deref().unwrap_or_else(|| Path::new("./tables")));
        let problem = match std::fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => Some("is not a folder".to_string()),
            Ok(_) => std::fs::read_dir(&dir).err().map(|e| format!("cannot be read: {}", io_reason(&e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".to_string()),
            Err(e) => Some(format!("cannot be read: {}", io_reason(&e))),
        };
        if let Some(problem) = problem {
            let default = if given { "" } else { " (the default: `tables` next to the config file)" };
            errors.push(l.at_value(
                &tables_key,
                format!(
                    "tables_dir `{}`{default} {problem}: there would be no tables to serve; \
                     create it, or set `model.tables_dir` to the folder of your tables",
                    dir.display()
                ),
            ));
        }
    }

    for (key, message) in l.config.router.problems(l.given(&["router"])) {
        let mut keys = vec!["router"];
        keys.extend(key.split('.'));
        errors.push(l.at_value(&keys, format!("`router.{key}`: {message}")));
    }
    for (key, message) in l.config.snapshots.problems() {
        let mut keys = vec!["snapshots"];
        keys.extend(key.split('.'));
        errors.push(l.at_value(&keys, format!("`snapshots.{key}`: {message}")));
    }
    for (key, message) in l.config.tuning.problems() {
        errors.push(l.at_value(&["tuning", key], format!("`tuning.{key}`: {message}")));
    }
    for (served, candidate) in &l.config.model.shadow {
        if served == candidate {
            errors.push(l.at_value(
                &["model", "shadow", served],
                format!("`model.shadow.{served}` names the table itself: a shadow is another table (a candidate) to compare with"),
            ));
        }
    }
    for (served, canary) in &l.config.model.canary {
        let keys = ["model", "canary", served.as_str()];
        if canary.table == *served {
            errors.push(l.at_value(
                &keys,
                format!(
                    "`model.canary.{served}.table` names the table itself: a canary is another table (a candidate)"
                ),
            ));
        }
        if !(0.0..=1.0).contains(&canary.share) {
            errors.push(l.at_value(
                &keys,
                format!(
                    "`model.canary.{served}.share` is {}: write the share of traffic the candidate serves, from 0 to 1 (0.05 = 5%)",
                    canary.share
                ),
            ));
        }
        if let Some(key) = &canary.key {
            if key.is_empty() || key.split('.').any(str::is_empty) {
                errors.push(l.at_value(
                    &keys,
                    format!("`model.canary.{served}.key` `{key}` is not a field path: write names joined by dots, like `user.id`"),
                ));
            }
        }
    }

    // in the order of the file; those naming a variable after
    errors.sort_by_key(|d| (d.path != l.shown, d.line, d.column));
    (errors, warnings)
}

/// Whether `listen` (host:port) is on a loopback address (127.0.0.0/8, ::1, localhost); `None`
/// when it is not host:port. Empty (no admin listener) counts as loopback.
fn listen_is_loopback(listen: &str) -> Option<bool> {
    use std::net::{IpAddr, SocketAddr};
    if listen.is_empty() {
        return Some(true);
    }
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Some(match addr.ip() {
            IpAddr::V4(ip) => ip.is_loopback(),
            IpAddr::V6(ip) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        });
    }
    let (host, port) = listen.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let label = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    (host.len() <= 253 && host.split('.').all(label)).then(|| host.eq_ignore_ascii_case("localhost"))
}

// ---------------------------------------------------------------------------------------------
// Deserialization helpers: lenient text, paths (Windows-tolerant), null sections

/// A string that also accepts numbers and booleans (`default_table: 2024`, `CLEF_MODEL__DEFAULT_TABLE=7`).
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a text value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Text::deserialize(d).map(|t| t.0)
}

fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<Text>::deserialize(d).map(|t| t.map(|t| t.0))
}

/// A path: Windows absolute paths are refused with what to write instead; backslashes in
/// relative paths become slashes.
fn opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let Some(Text(s)) = Option::<Text>::deserialize(d)? else { return Ok(None) };
    if s.trim().is_empty() {
        return Err(de::Error::custom("an empty path; remove the key to use the default"));
    }
    if let Some(problem) = windows_path_problem(&s) {
        return Err(de::Error::custom(problem));
    }
    Ok(Some(PathBuf::from(if s.starts_with('/') { s } else { s.replace('\\', "/") })))
}

/// Says what is wrong with a Windows absolute path (`C:\…`, `C:/…`, `\\server\share`), if `s` is one.
fn windows_path_problem(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let drive =
        b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b.len() == 2 || matches!(b[2], b'\\' | b'/'));
    let unc = s.starts_with("\\\\");
    if !drive && !unc {
        return None;
    }
    let last = quote(s.rsplit(['\\', '/']).find(|c| !c.is_empty() && !c.ends_with(':')).unwrap_or("tables"));
    let s = quote(s);
    Some(format!(
        "`{s}` is a Windows path, which does not exist on this Linux box; write a path relative to the folder \
         of this config file (like `./{last}`) or a Linux absolute path (like `/etc/clef/{last}`)"
    ))
}

/// A section that may be written empty (`server:` with every key commented out) = its defaults.
fn section<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

fn opt_section<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<Option<T>, D::Error> {
    Option::<Option<T>>::deserialize(d).map(|o| o.map(Option::unwrap_or_default))
}

// ---------------------------------------------------------------------------------------------
// Windows tolerance: double-quoted scalars with backslashes

/// Rewrites double-quoted scalars that must be read raw as single-quoted scalars of the same
/// length (so positions stay right): the value of a path key (`tables_dir: "tables\risk"`, where
/// YAML would read `\r` as a carriage return), or any scalar with an escape YAML does not know
/// (`"\d"`). Elsewhere valid escapes keep their YAML meaning.
fn prepare(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' if i == 0 || b[i - 1].is_ascii_whitespace() => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\'' if scalar_start(b, i) => {
                i += 1;
                while i < b.len() {
                    if b[i] == b'\'' {
                        if b.get(i + 1) == Some(&b'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'"' if scalar_start(b, i) => {
                let raw_end = b[i + 1..].iter().position(|&c| c == b'"' || c == b'\n').map(|p| p + i + 1);
                if let Some(end) = raw_end.filter(|&e| b[e] == b'"') {
                    let content = &text[i + 1..end];
                    if content.contains('\\')
                        && !content.contains('\'')
                        && terminator_follows(b, end + 1)
                        && (is_path_key(key_before(b, i)) || has_unknown_escape(content))
                    {
                        out[i] = b'\'';
                        out[end] = b'\'';
                        i = end + 1;
                        continue;
                    }
                }
                // a YAML double-quoted scalar: skip it, escapes included
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// Whether a quote at `i` starts a scalar (rather than sitting inside a plain one).
fn scalar_start(b: &[u8], i: usize) -> bool {
    let before = b[..i].iter().rposition(|&c| c != b' ' && c != b'\t');
    match before {
        None => true,
        Some(p) => match b[p] {
            b'\n' | b'[' | b'{' | b',' | b'?' => true,
            b':' | b'-' => p + 1 < i,
            _ => false,
        },
    }
}

fn terminator_follows(b: &[u8], mut i: usize) -> bool {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i >= b.len() || matches!(b[i], b'\r' | b'\n' | b'#' | b',' | b'}' | b']')
}

/// The key of a `key: "value"` pair, when the quote at `i` is such a value.
fn key_before(b: &[u8], i: usize) -> &str {
    let mut j = i;
    while j > 0 && (b[j - 1] == b' ' || b[j - 1] == b'\t') {
        j -= 1;
    }
    if j == 0 || b[j - 1] != b':' {
        return "";
    }
    let end = j - 1;
    let mut start = end;
    while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b'-') {
        start -= 1;
    }
    std::str::from_utf8(&b[start..end]).unwrap_or("")
}

fn is_path_key(key: &str) -> bool {
    key.ends_with("dir") || key.ends_with("path") || key.ends_with("file")
}

fn has_unknown_escape(content: &str) -> bool {
    let mut chars = content.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(
                    '0' | 'a' | 'b' | 't' | '\t' | 'n' | 'v' | 'f' | 'r' | 'e' | ' ' | '"' | '/' | '\\' | 'N' | '_',
                )
                | Some('L' | 'P' | 'x' | 'u' | 'U') => {}
                _ => return true,
            }
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Validation of the file text with positions

/// At most this many errors are reported for one file: more would bury the first ones.
const MAX_ERRORS: usize = 10;

/// How deep lists and mappings may nest below the top level. A configuration needs three or
/// four levels; the parse stops at the first bracket deeper than this, so a file of 200,000 `[`
/// costs no more than one of 33.
const MAX_DEPTH: usize = 32;

const YAML: yaml::Options =
    yaml::Options { max_depth: MAX_DEPTH, depth_hint: "a configuration needs a few", what: "a configuration" };

/// Where the keys of a configuration file and their values are written: dotted key → (the key,
/// the value), as byte ranges of the file.
#[derive(Debug, Default)]
struct Places(FxHashMap<String, (Range<usize>, Range<usize>)>);

impl Places {
    fn of(root: &yaml::Node<'_>) -> Places {
        fn walk(node: &yaml::Node<'_>, prefix: &str, depth: usize, out: &mut Places) {
            for (k, v) in node.entries().unwrap_or_default() {
                let Some(key) = k.key_text() else { continue };
                let path = if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") };
                if depth < 3 {
                    walk(v, &path, depth + 1, out);
                    // list items as `key.N` (`router.instances.1.addr`)
                    for (i, item) in v.items().iter().enumerate() {
                        let item_path = format!("{path}.{i}");
                        walk(item, &item_path, depth + 2, out);
                        out.0.entry(item_path).or_insert((item.span.clone(), item.span.clone()));
                    }
                }
                out.0.entry(path).or_insert((k.span.clone(), v.span.clone()));
            }
        }
        let mut places = Places::default();
        walk(root, "", 0, &mut places);
        places
    }

    /// Where the key `keys` (dotted) is written.
    fn key(&self, keys: &[&str]) -> Option<Range<usize>> {
        self.0.get(&keys.join(".")).map(|(k, _)| k.clone())
    }

    /// Where the value of `keys` is written (the key, when the value is left empty).
    fn value(&self, keys: &[&str]) -> Option<Range<usize>> {
        self.0.get(&keys.join(".")).map(|(k, v)| if v.is_empty() { k.clone() } else { v.clone() })
    }
}

/// Reads the text of a configuration file (without its BOM) into a [`Config`], as the file
/// layer of `clef serve` does, with the problems it has (at most 10): syntax, unknown keys,
/// values of the wrong type, Windows paths, each at its line and column.
pub fn parse_text(shown: &str, text: &str) -> Result<Config, Vec<Diagnostic>> {
    validate_text(shown, text).map(|(config, _)| config)
}

/// Reads the file text into a [`Config`], reporting its problems (up to [`MAX_ERRORS`]) with their
/// positions. The text is parsed after [`prepare`], which keeps every position, so diagnostics
/// show the text as written.
///
/// serde stops at the first problem; to find the next one, the offending entry is taken out of the
/// parsed tree and the tree deserialized again (no new parse). The other unknown keys of a
/// mapping are all taken at the first one, so a file of many unknown keys costs two passes rather
/// than one per key.
fn validate_text(shown: &str, text: &str) -> Result<(Config, Places), Vec<Diagnostic>> {
    let prepared = prepare(text);
    let at = |span: &Range<usize>, message: String| Diagnostic::at_offset(shown, text, span.start, span.len(), message);
    let document = yaml::parse(&prepared, &YAML).map_err(|p| vec![at(&(p.at..p.at + p.width), p.message)])?;
    let mut diags: Vec<Diagnostic> =
        document.problems.into_iter().take(MAX_ERRORS).map(|p| at(&(p.at..p.at + p.width), p.message)).collect();
    let mut root = match document.root {
        Some(root) if !root.is_null() => root,
        _ if diags.is_empty() => return Ok((Config::default(), Places::default())),
        _ => return Err(diags),
    };
    let places = Places::of(&root);
    let mut more = false;
    'passes: loop {
        let err = match Config::deserialize(yaml::NodeDe(&root)) {
            Ok(config) if diags.is_empty() => return Ok((config, places)),
            Ok(_) => break,
            Err(e) => e,
        };
        if diags.len() >= MAX_ERRORS {
            more = true;
            break;
        }
        let span = err.span.clone().unwrap_or(0..0);
        diags.push(at(&span, describe(&err)));
        let (Some((&entry, parent)), DeErrorKind::UnknownField { expected, .. }) =
            (err.indices.split_last(), &err.kind)
        else {
            if yaml::remove_at(&mut root, &err.indices) {
                continue;
            }
            break;
        };
        // the other unknown keys of this mapping, in the order written
        let mapping_path = &err.path[..err.path.len().saturating_sub(1)];
        let mut remove = vec![entry];
        let entries = yaml::node_at(&root, parent).and_then(yaml::Node::entries).unwrap_or_default();
        for (i, (k, _)) in entries.iter().enumerate().skip(entry + 1) {
            let Some(key) = k.key_text().filter(|key| !expected.contains(key)) else { continue };
            if diags.len() >= MAX_ERRORS {
                more = true;
                break 'passes;
            }
            let known: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            diags.push(at(&k.span, unknown_key_message(key, &yaml::path_text(mapping_path), &known)));
            remove.push(i);
        }
        let mut path = parent.to_vec();
        for i in remove.into_iter().rev() {
            path.push(i);
            yaml::remove_at(&mut root, &path);
            path.pop();
        }
    }
    diags.sort_by_key(|d| (d.line, d.column));
    if more {
        diags.push(Diagnostic::whole_file(
            shown,
            format!("stopping after {MAX_ERRORS} errors; fix these and check again for more"),
        ));
    }
    Err(diags)
}

/// What a deserialization error says, naming the key and how to fix it.
fn describe(e: &yaml::DeError) -> String {
    let path = yaml::path_text(&e.path);
    let key = if path.is_empty() { "the file".to_string() } else { format!("`{}`", quote(&path)) };
    match &e.kind {
        DeErrorKind::UnknownField { field, expected } => {
            let mapping = yaml::path_text(&e.path[..e.path.len().saturating_sub(1)]);
            let known: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            unknown_key_message(field, &mapping, &known)
        }
        DeErrorKind::Invalid { found, .. } if e.in_key => {
            let mapping = yaml::path_text(&e.path[..e.path.len().saturating_sub(1)]);
            let place = if mapping.is_empty() { "at the top level".to_string() } else { format!("in `{mapping}`") };
            format!("a key {place} is {}, not a name; write keys like `port:`", quote(found))
        }
        DeErrorKind::UnknownVariant { variant, expected } => match suggestion(variant, expected.iter().copied()) {
            Some(s) => format!("{key} cannot be `{}`, did you mean `{s}`?", quote(variant)),
            None => format!("{key} cannot be `{}`; it is one of {}", quote(variant), expected.join(", ")),
        },
        DeErrorKind::Invalid { found, expected } => {
            format!("{key} must be {}, not {}", friendly(expected), quote(found))
        }
        DeErrorKind::Custom(message) => format!("{key}: {message}"),
    }
}

fn unknown_key_message(key: &str, path: &str, known: &[String]) -> String {
    let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{path}`") };
    let key = quote(key);
    match suggestion(&key, known.iter().map(String::as_str)) {
        Some(s) => format!("unknown key `{key}` {place}, did you mean `{s}`?"),
        None if known.is_empty() => format!("unknown key `{key}` {place}"),
        None => format!("unknown key `{key}` {place}; the known keys are {}", known.join(", ")),
    }
}

/// [`did_you_mean`] for words short enough to be a misspelt name: the similarity of a long pasted
/// value to each name would cost time for nothing.
fn suggestion<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    (word.chars().count() <= 40).then(|| did_you_mean(word, candidates)).flatten()
}

fn friendly(expected: &str) -> String {
    match expected {
        "u16" => "a port number (0 to 65535)".into(),
        "u8" | "u32" | "u64" | "usize" => "a whole number (0 or more)".into(),
        "i32" | "i64" | "isize" => "a whole number".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "a list".into(),
        "a string" | "a text value" => "a text value".into(),
        e if e.starts_with("struct ") => "a mapping of keys (like `key: value` lines)".into(),
        e => e.to_string(),
    }
}

/// The systemd credential that stands in for `server.token_file` / `admin.token_file` when the
/// config names no file: `server-token` / `admin-token`.
pub fn credential_name(section: &str) -> String {
    format!("{section}-token")
}

/// Reads a token file: a regular file, of which only the first [`MAX_TOKEN_BYTES`] count.
fn read_token_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::files::open_regular(path)?.take(MAX_TOKEN_BYTES).read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

// ---------------------------------------------------------------------------------------------
// The environment layer

/// One `CLEF_…` variable as a figment provider, named after the variable so errors name it.
struct EnvVar {
    name: String,
    key: String,
    value: String,
}

impl Provider for EnvVar {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let value: FigValue = self.value.parse().unwrap_or_else(|_| FigValue::from(self.value.clone()));
        let dict = match figment::util::nest(&self.key, value) {
            FigValue::Dict(_, d) => d,
            _ => Dict::new(),
        };
        Ok(Profile::Default.collect(dict))
    }
}

/// The `CLEF_…` variables that configure clef (`CLEF_SERVER__PORT` → `server.port`). Variables
/// whose first part is no config key are someone else's (`CLEF_WORKLOAD_PY`) unless they look
/// like a misspelt key.
fn env_layers(env: &[(String, String)], diags: &mut Vec<Diagnostic>) -> Vec<EnvVar> {
    let mut layers = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("CLEF_") else { continue };
        let lower = rest.to_ascii_lowercase();
        let parts: Vec<&str> = lower.split("__").collect();
        if TOP_KEYS.contains(&parts[0]) {
            if parts.iter().any(|p| p.is_empty()) {
                diags.push(Diagnostic::whole_file(
                    name,
                    format!("environment variable {name}: empty key part; write CLEF_SECTION__KEY"),
                ));
                continue;
            }
            layers.push(EnvVar { name: name.clone(), key: parts.join("."), value: value.clone() });
        } else if let Some(s) = did_you_mean(parts[0], TOP_KEYS) {
            diags.push(Diagnostic::whole_file(
                name,
                format!(
                    "environment variable {name}: unknown config key `{}`, did you mean `{s}` (CLEF_{}…)?",
                    parts[0],
                    s.to_ascii_uppercase()
                ),
            ));
        } else if parts.len() > 1 {
            diags.push(Diagnostic::whole_file(
                name,
                format!(
                    "environment variable {name}: unknown config key `{}`; the known keys are {}",
                    parts[0],
                    TOP_KEYS.join(", ")
                ),
            ));
        }
    }
    layers
}

fn figment_diagnostics(shown: &str, err: figment::Error) -> Vec<Diagnostic> {
    use figment::error::Kind;
    err.into_iter()
        .map(|e| {
            let source = e.metadata.as_ref().map(|m| m.name.to_string());
            let path = e.path.join(".");
            let key = if path.is_empty() { "the configuration".to_string() } else { format!("`{path}`") };
            let message = match &e.kind {
                Kind::UnknownField(field, known) => {
                    let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{path}`") };
                    match did_you_mean(field, known.iter().copied()) {
                        Some(s) => format!("unknown key `{field}` {place}, did you mean `{s}`?"),
                        None => format!("unknown key `{field}` {place}; the known keys are {}", known.join(", ")),
                    }
                }
                Kind::UnknownVariant(v, known) => match did_you_mean(v, known.iter().copied()) {
                    Some(s) => format!("{key} cannot be `{v}`, did you mean `{s}`?"),
                    None => format!("{key} cannot be `{v}`; it is one of {}", known.join(", ")),
                },
                Kind::InvalidType(found, expected) | Kind::InvalidValue(found, expected) => {
                    format!("{key} must be {}, not {found}", friendly(expected))
                }
                other => format!("{key}: {other}"),
            };
            match source.filter(|s| s.starts_with("CLEF_")) {
                Some(var) => Diagnostic::whole_file(&var, format!("environment variable {var}: {message}")),
                None => Diagnostic::whole_file(shown, message),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_rewrites_path_values_only() {
        let t = "model:\n  tables_dir: \"tables\\risk\"\n  x: \"a\\tb\"\n  y: \"\\d+\"\n";
        let p = prepare(t);
        assert_eq!(p.len(), t.len());
        assert!(p.contains("tables_dir: 'tables\\risk'"), "{p}");
        assert!(p.contains("x: \"a\\tb\""), "{p}");
        assert!(p.contains("y: '\\d+'"), "{p}");
    }

    #[test]
    fn windows_paths_are_recognised() {
        assert!(windows_path_problem("C:\\clef\\tables").unwrap().contains("/etc/clef/tables"));
        assert!(windows_path_problem("d:/x").is_some());
        assert!(windows_path_problem("\\\\server\\share").is_some());
        assert!(windows_path_problem(".\\tables").is_none());
        assert!(windows_path_problem("/etc/clef").is_none());
    }

    #[test]
    fn stems_drop_every_extension() {
        assert_eq!(crate::table::table_name(Path::new("/a/net.flash.json")).as_str(), "net");
        assert_eq!(crate::table::table_name(Path::new("decision_table.json")).as_str(), "decision_table");
        assert_eq!(crate::table::table_name(Path::new("été.json")).as_str(), "été");
    }

    /// A machine like a small Pi: 4 cores, 1 GiB, the usual open files limit.
    const PI: Machine = Machine { open_files: 524_288, memory: 1 << 30, cores: 4 };

    /// Reviews `text` as `config.yaml` (next to a `tables/` folder) with `env`: the errors and the
    /// warnings, and the configuration as reviewed.
    fn review_with(text: &str, env: &[(&str, &str)], machine: &Machine) -> (Vec<Diagnostic>, Vec<Diagnostic>, Config) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tables")).unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut layered = match layer(&path, &Overrides::default(), &env) {
            Ok(l) => l,
            Err(d) => panic!("{text}: {d:?}"),
        };
        let (errors, warnings) = review(&mut layered, machine);
        (errors, warnings, layered.config)
    }

    /// The one error of `server:\n  KEY: VALUE\n` on `machine`: it is at the value and names the key.
    fn value_error(key: &str, value: &str, machine: &Machine) -> String {
        let (errors, _, _) = review_with(&format!("server:\n  {key}: {value}\n"), &[], machine);
        assert_eq!(errors.len(), 1, "{key}: {value}: {errors:?}");
        let d = &errors[0];
        assert_eq!((d.line, d.column, d.width), (2, key.len() + 5, value.len()), "{d}");
        assert!(d.message.contains(&format!("`server.{key}` is")), "{d}");
        d.message.clone()
    }

    fn no_errors(text: &str, machine: &Machine) {
        let (errors, _, _) = review_with(text, &[], machine);
        assert!(errors.is_empty(), "{text}: {errors:?}");
    }

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

    #[test]
    fn values_set_in_the_environment_are_reported_with_the_variable() {
        let (errors, _, _) = review_with("server:\n  workers: 2\n", &[("CLEF_SERVER__WORKERS", "12000")], &PI);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "CLEF_SERVER__WORKERS");
        assert!(errors[0].message.starts_with("environment variable CLEF_SERVER__WORKERS: `server.workers` is 12000"));
        // a value given in the environment is given: not lowered silently
        let (errors, _, _) =
            review_with("", &[("CLEF_SERVER__MAX_CONNECTIONS", "4096")], &Machine { open_files: 1024, ..PI });
        assert!(errors[0].message.contains("at most 952 connections fit"), "{errors:?}");
    }

    #[test]
    fn an_admin_listener_off_loopback_without_a_token_is_a_loud_warning() {
        for listen in ["0.0.0.0:9901", "192.168.1.10:9901", "'[::]:9901'", "pi.local:9901"] {
            let (errors, warnings, _) = review_with(&format!("admin:\n  listen: {listen}\n"), &[], &PI);
            assert!(errors.is_empty(), "{listen}: {errors:?}");
            assert_eq!(warnings.len(), 1, "{listen}: {warnings:?}");
            let w = &warnings[0];
            assert_eq!((w.line, w.column, w.severity), (2, 11, crate::diagnostic::Severity::Warning), "{w}");
            assert!(w.message.contains("anyone who can reach that address can reload tables"), "{w}");
            assert!(w.message.contains("admin.token_file") && w.message.contains("127.0.0.1"), "{w}");
            // with a token it is fine
            let text = format!("admin:\n  listen: {listen}\n  token_file: t\n");
            assert!(review_with(&text, &[], &PI).1.is_empty(), "{listen}");
        }
        for listen in ["127.0.0.1:9901", "127.8.0.1:1", "'[::1]:9901'", "localhost:9901", "LOCALHOST:1", "''"] {
            let (errors, warnings, _) = review_with(&format!("admin:\n  listen: {listen}\n"), &[], &PI);
            assert!(errors.is_empty() && warnings.is_empty(), "{listen}: {errors:?} {warnings:?}");
        }
        for listen in ["9901", "127.0.0.1", "127.0.0.1:99999", "::1:9901", "a b:1", ":9901", "host:"] {
            let (errors, _, _) = review_with(&format!("admin:\n  listen: \"{listen}\"\n"), &[], &PI);
            assert_eq!(errors.len(), 1, "{listen}: {errors:?}");
            assert_eq!((errors[0].line, errors[0].column), (2, 11), "{}", errors[0]);
            assert!(errors[0].message.contains("which is not host:port"), "{}", errors[0]);
        }
    }

    /// The first error of `text` as a config file: (line, column, message).
    fn first_error(text: &str) -> Option<(usize, usize, String)> {
        validate_text("c.yaml", text).err().map(|d| (d[0].line, d[0].column, d[0].message.clone()))
    }

    #[test]
    fn nesting_deeper_than_a_config_needs_is_refused_at_the_bracket_too_deep() {
        let deep = |n: usize| format!("server: {}{}\n", "[".repeat(n), "]".repeat(n));
        // 32 levels below the top level are read (and are then a wrong type for `server`)
        assert!(!first_error(&deep(MAX_DEPTH)).unwrap().2.contains("nested"));
        let too_deep = |text: &str| first_error(text).filter(|e| e.2.contains("nested more than 32 levels deep"));
        assert_eq!(too_deep(&deep(MAX_DEPTH + 1)).map(|e| e.1), Some(9 + MAX_DEPTH));
        assert_eq!(too_deep(&format!("a: {}", "{a: ".repeat(40))).map(|e| e.1), Some(4 + 4 * MAX_DEPTH));
        // block nesting counts as well as brackets
        let block: String = (0..40).map(|i| format!("{}k{i}:\n", "  ".repeat(i))).collect();
        assert_eq!(too_deep(&block).map(|e| e.0), Some(34));
        for text in [format!("x: !!seq {}", "[ !!seq ".repeat(40)), format!("x: &a {}", "[ &a ".repeat(40))] {
            assert!(first_error(&text).is_some(), "{text}");
        }
        // brackets that are text are not nesting
        for text in [
            format!("a: '{}'\nb: \"{}\"\n", "[".repeat(40), "{".repeat(40)),
            format!("a: 1 # {}\n", "[".repeat(40)),
            format!("a: |\n  {}\n  more\n", "[".repeat(40)),
        ] {
            let e = first_error(&text).unwrap();
            assert!(e.2.starts_with("unknown key `a`"), "{text}: {e:?}");
        }
        // 200 KB of `[` is refused at once, as the only error
        let d = validate_text("c.yaml", &format!("server: {}", "[".repeat(200_000))).unwrap_err();
        assert_eq!((d.len(), d[0].line, d[0].column), (1, 1, 9 + MAX_DEPTH), "{d:?}");
        assert!(d[0].message.contains("nested more than 32 levels deep"), "{}", d[0]);
    }

    #[test]
    fn values_are_found_where_the_parser_saw_them() {
        let text = "# server: {port: 2}\nserver: {host: x, port: \"x\"}\n";
        let (line, column, message) = first_error(text).unwrap();
        assert_eq!((line, column), (2, 25), "{message}");
        assert!(message.starts_with("`server.port` must be a port number"), "{message}");
        // one line of 100,000 unknown keys and a wrong value at its end: ten errors, at once
        let line = format!("server: {{{} port: x}}\n", (0..100_000).map(|i| format!("k{i}: 1, ")).collect::<String>());
        let started = std::time::Instant::now();
        let d = validate_text("c.yaml", &line).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(d.len(), MAX_ERRORS + 1, "{d:?}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(100), "100 bytes");
        assert_eq!(size(16384), "16 KiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(100_000_000), "95.4 MiB");
        assert_eq!(size(3 << 30), "3 GiB");
    }
}
