//! `config.yaml` for `clef serve` (SPEC §5): defaults, then the file, then `CLEF_…` environment
//! variables, then command-line flags, layered with figment.
//!
//! The file is first read on its own with serde_yaml, so that every unknown key, wrong type or
//! Windows path is reported at its line and column (with a "did you mean" where a known key is
//! close): a typo never falls back to a default silently. Files written on Windows work: a UTF-8
//! BOM, CRLF line ends, backslashes in relative paths and double-quoted paths with backslashes.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use figment::providers::Serialized;
use figment::value::{Dict, Map, Value as FigValue};
use figment::{Figment, Metadata, Profile, Provider};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::diagnostic::Diagnostic;
use crate::suggest::did_you_mean;

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
    /// the Clef router (SPEC §7): accepted, not implemented by this version yet
    pub router: Option<serde_yaml::Value>,
    /// decision snapshots (SPEC §8): accepted, not implemented by this version yet
    pub snapshots: Option<serde_yaml::Value>,
    /// online tuning (SPEC §9): accepted, not implemented by this version yet
    pub tuning: Option<serde_yaml::Value>,
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
    /// most request headers (431 beyond)
    pub max_headers: usize,
    /// most bytes of request headers (431 beyond)
    pub max_header_bytes: usize,
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
    /// shadow tables (SPEC §8.3): accepted, not implemented by this version yet
    pub shadow: Option<serde_yaml::Value>,
    /// canary tables: accepted, not implemented by this version yet
    pub canary: Option<serde_yaml::Value>,
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
            max_headers: 64,
            max_header_bytes: 16384,
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
            shadow: None,
            canary: None,
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

    /// Warnings about keys this version accepts but does not act on yet.
    pub fn warnings(&self) -> Vec<String> {
        let later = [
            ("router", self.router.is_some()),
            ("snapshots", self.snapshots.is_some()),
            ("tuning", self.tuning.is_some()),
            ("model.shadow", self.model.shadow.is_some()),
            ("model.canary", self.model.canary.is_some()),
        ];
        later
            .iter()
            .filter(|(_, given)| *given)
            .map(|(key, _)| format!("`{key}` is not implemented by this version yet; ignored"))
            .collect()
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
    /// keys accepted but ignored by this version, and the like
    pub warnings: Vec<String>,
}

/// Loads the configuration for `clef serve`, with the process environment.
///
/// Without `explicit`, uses `./config.yaml`, then `/etc/clef/config.yaml`.
pub fn load(explicit: Option<&Path>, overrides: &Overrides) -> Result<Loaded, Vec<Diagnostic>> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("CLEF_") || k == "STATE_DIRECTORY")
        .collect();
    load_with_env(explicit, overrides, &env)
}

/// [`load`] with the environment given explicitly (`CLEF_…` variables and `STATE_DIRECTORY`; others are ignored).
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
    let shown = path.display().to_string();
    let raw = read_config_text(&path)?;
    let mut file_config = validate_text(&shown, &raw)?;
    file_config.apply_aliases();

    // Layering: defaults, the file, the environment (figment); then the flags.
    let mut figment = Figment::from(Serialized::defaults(Config::default())).merge(Serialized::defaults(file_config));
    let mut diags = Vec::new();
    for var in env_layers(env, &mut diags) {
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
    resolve(config, path, &raw, env)
}

/// Every problem of a config file, for `clef check`: syntax, unknown keys (with "did you mean"),
/// wrong types, Windows paths, a `tables_dir` that does not exist. Problems are errors; keys this
/// version accepts but ignores (`router:` …) come as [`Severity::Warning`](crate::diagnostic::Severity::Warning) diagnostics. Files the
/// config refers to need not exist (except `tables_dir`). No errors means the file is valid.
pub fn check_file(path: &Path) -> Vec<Diagnostic> {
    let shown = path.display().to_string();
    let raw = match read_config_text(path) {
        Ok(t) => t,
        Err(d) => return d,
    };
    let text = raw;
    let mut config = match validate_text(&shown, &text) {
        Ok(c) => c,
        Err(d) => return d,
    };
    config.apply_aliases();
    let mut diags = Vec::new();
    let base_dir = base_dir_of(path);
    let explicit_dir = config.model.tables_dir.is_some() && locate(&text, &["model", "tables_dir"]).is_some();
    let dir = config.model.tables_dir.clone().unwrap_or_else(|| PathBuf::from("./tables"));
    let dir = resolve_path(&base_dir, &dir);
    if !dir.is_dir() && (explicit_dir || config.model.decision_table_path.is_none()) {
        let message = format!("tables_dir `{}` does not exist (or is not a folder)", dir.display());
        diags.push(match locate(&text, &["model", "tables_dir"]) {
            Some((at, width)) => Diagnostic::at_offset(&shown, &text, at, width, message),
            None => Diagnostic::whole_file(&shown, message),
        });
    }
    for w in config.warnings() {
        let key = w.split('`').nth(1).unwrap_or("");
        let keys: Vec<&str> = key.split('.').collect();
        let d = match locate_key(&text, &keys) {
            Some(at) => Diagnostic::at_offset(&shown, &text, at, keys.last().map_or(1, |k| k.len()), w),
            None => Diagnostic::whole_file(&shown, w),
        };
        diags.push(d.warning());
    }
    diags
}

fn read_config_text(path: &Path) -> Result<String, Vec<Diagnostic>> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        vec![Diagnostic::whole_file(&shown, format!("cannot read the configuration file: {}", io_reason(&e)))]
    })?;
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
    Ok(text.strip_prefix('\u{feff}').unwrap_or(&text).to_string())
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

fn resolve(mut config: Config, path: PathBuf, text: &str, env: &[(String, String)]) -> Result<Loaded, Vec<Diagnostic>> {
    let shown = path.display().to_string();
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
    let mut diags = Vec::new();
    let mut token = |keys: [&str; 2], file: &mut Option<PathBuf>| -> Option<String> {
        let p = resolve_path(&base_dir, file.as_deref()?);
        *file = Some(p.clone());
        let problem = match read_token_file(&p) {
            Ok(t) if !t.trim().is_empty() => return Some(t.trim().to_string()),
            Ok(_) => format!("the token file `{}` ({}.{}) is empty", p.display(), keys[0], keys[1]),
            Err(e) => {
                format!("cannot read the token file `{}` ({}.{}): {}", p.display(), keys[0], keys[1], io_reason(&e))
            }
        };
        diags.push(match locate(text, &keys) {
            Some((at, width)) => Diagnostic::at_offset(&shown, text, at, width, problem),
            None => Diagnostic::whole_file(&shown, problem),
        });
        None
    };
    let server_token = token(["server", "token_file"], &mut config.server.token_file);
    let admin_token = token(["admin", "token_file"], &mut config.admin.token_file);
    if !diags.is_empty() {
        return Err(diags);
    }
    let mut warnings = config.warnings();
    if !tables_dir.is_dir() && decision_table_path.is_none() {
        warnings.push(format!("tables_dir `{}` does not exist: no tables to serve", tables_dir.display()));
    }
    config.model.tables_dir = Some(tables_dir.clone());
    config.model.decision_table_path = decision_table_path.clone();
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
    let last = s.rsplit(['\\', '/']).find(|c| !c.is_empty() && !c.ends_with(':')).unwrap_or("tables");
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

/// Reads the file text into a [`Config`], reporting every problem with its position. The text is
/// parsed after [`prepare`], which keeps every position, so diagnostics show the text as written.
fn validate_text(shown: &str, text: &str) -> Result<Config, Vec<Diagnostic>> {
    let prepared = prepare(text);
    if let Err(e) = serde_yaml::from_str::<serde_yaml::Value>(&prepared) {
        return Err(vec![syntax_diagnostic(shown, text, &e)]);
    }
    let mut work = prepared;
    let mut diags: Vec<Diagnostic> = Vec::new();
    for _ in 0..100 {
        let err = match serde_yaml::from_str::<Config>(&work) {
            Ok(config) if diags.is_empty() => return Ok(config),
            Ok(_) => break,
            Err(e) => e,
        };
        let problem = describe(&work, &err);
        let d = Diagnostic::at_offset(shown, text, problem.at, problem.width, problem.message);
        if diags.iter().any(|x| x.line == d.line && x.column == d.column && x.message == d.message) {
            break;
        }
        diags.push(d);
        // blank the offending entry (same length, so positions stay right) and look for more
        match problem.entry_start.and_then(|s| blank_entry(&work, s)) {
            Some(next) if serde_yaml::from_str::<serde_yaml::Value>(&next).is_ok() => work = next,
            _ => break,
        }
    }
    Err(diags)
}

fn syntax_diagnostic(shown: &str, text: &str, e: &serde_yaml::Error) -> Diagnostic {
    let msg = strip_location(&e.to_string());
    let Some(l) = e.location() else {
        return Diagnostic::whole_file(shown, format!("this is not valid YAML: {msg}"));
    };
    let mut at = offset_of(text, l.line(), l.column());
    let mut width = 1;
    let message = match msg.split_once("duplicate entry with key \"") {
        Some((path, rest)) => {
            let key = rest.trim_end_matches('"');
            let path = path.trim_end_matches(": ");
            let column = at - line_start(text, at);
            // serde_yaml points at the first one: show the second
            let next_char = |i: usize| i + text[i..].chars().next().map_or(1, char::len_utf8);
            let mut from = next_char(at);
            while let Some(p) = find_key(text, key, from, false) {
                if p - line_start(text, p) == column {
                    at = p;
                    break;
                }
                from = next_char(p);
            }
            width = key.len();
            let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{path}`") };
            format!("`{key}` is given twice {place}; keep one")
        }
        None => format!("this is not valid YAML: {msg}"),
    };
    Diagnostic::at_offset(shown, text, at, width, message)
}

struct Problem {
    at: usize,
    width: usize,
    message: String,
    /// where the offending `key: value` entry starts in the text, when it can be blanked
    entry_start: Option<usize>,
}

/// Turns a serde_yaml error into a message that names the key and how to fix it.
fn describe(work: &str, e: &serde_yaml::Error) -> Problem {
    let full = strip_location(&e.to_string());
    let (path, msg) = match full.split_once(": ") {
        Some((p, m)) if !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || "_.[]-".contains(c)) => {
            (p.to_string(), m.to_string())
        }
        _ => (String::new(), full.clone()),
    };
    let mut at = e.location().map(|l| offset_of(work, l.line(), l.column())).unwrap_or(0);
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or("");
        let known = backticked(rest.split_once("expected").map(|x| x.1).unwrap_or(""));
        // serde_yaml points at the mapping for top-level keys: find the key itself
        if !work[at..].starts_with(key) {
            if let Some(p) = find_key(work, key, at, path.is_empty()) {
                at = p;
            }
        }
        let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{path}`") };
        let message = match did_you_mean(key, known.iter().map(String::as_str)) {
            Some(s) => format!("unknown key `{key}` {place}, did you mean `{s}`?"),
            None if known.is_empty() => format!("unknown key `{key}` {place}"),
            None => format!("unknown key `{key}` {place}; the known keys are {}", known.join(", ")),
        };
        return Problem { at, width: key.len(), message, entry_start: Some(at) };
    }
    let mut path = path;
    let mut entry_start = key_start_before(work, at);
    // errors raised after a value was read (a Windows path …) point at its key: move to the value
    if let Some(k) = key_at(work, at) {
        if path.rsplit('.').next() != Some(k) {
            path = if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
        }
        entry_start = Some(at);
        at = value_after_key(work, at + k.len()).unwrap_or(at);
    }
    let width = token_width(work, at);
    let key = if path.is_empty() { "the file".to_string() } else { format!("`{path}`") };
    let message = if let Some(rest) = msg.strip_prefix("unknown variant `") {
        let value = rest.split('`').next().unwrap_or("");
        let known = backticked(rest.split_once("expected").map(|x| x.1).unwrap_or(""));
        match did_you_mean(value, known.iter().map(String::as_str)) {
            Some(s) => format!("{key} cannot be `{value}`, did you mean `{s}`?"),
            None => format!("{key} cannot be `{value}`; it is one of {}", known.join(", ")),
        }
    } else if let Some((found, expected)) = msg
        .strip_prefix("invalid type: ")
        .or_else(|| msg.strip_prefix("invalid value: "))
        .and_then(|m| m.rsplit_once(", expected "))
    {
        format!("{key} must be {}, not {found}", friendly(expected))
    } else if let Some(rest) = msg.strip_prefix("duplicate field `") {
        let dup = rest.split('`').next().unwrap_or("");
        let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{path}`") };
        format!("`{dup}` is given twice {place}; keep one")
    } else {
        format!("{key}: {msg}")
    };
    Problem { at, width, message, entry_start }
}

fn strip_location(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) if s[i + 9..].split(" column ").count() == 2 => s[..i].to_string(),
        _ => s.to_string(),
    }
}

fn backticked(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_string).collect()
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

/// The byte offset of a 1-based line and a 1-based column counted in characters.
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut start = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return start + l.char_indices().nth(column.saturating_sub(1)).map(|(b, _)| b).unwrap_or(l.len());
        }
        start += l.len();
    }
    text.len()
}

/// Reads a token file; only its first 4 KiB count, so a config pointing at `/dev/zero`
/// cannot exhaust memory.
fn read_token_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(4096).read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0)
}

/// Finds `key:` as a mapping key at or after `from` (at column 0 when `top`).
fn find_key(text: &str, key: &str, from: usize, top: bool) -> Option<usize> {
    let mut search = from;
    // `from` may fall inside a multi-byte character: `get` then yields None instead of panicking.
    while let Some(p) = text.get(search..).and_then(|rest| rest.find(key)).map(|p| p + search) {
        search = p + key.len();
        let ls = line_start(text, p);
        let before_ok =
            if top { p == ls } else { p == 0 || matches!(text.as_bytes()[p - 1], b' ' | b'\t' | b'{' | b',' | b'\n') };
        let after = text[p + key.len()..].trim_start_matches([' ', '\t']);
        let in_comment = text[ls..p].contains(" #") || text[ls..p].starts_with('#');
        if before_ok && !in_comment && after.starts_with(':') {
            return Some(p);
        }
    }
    None
}

/// The key written at `at` (`key:` followed by a space or the line end), if any.
fn key_at(text: &str, at: usize) -> Option<&str> {
    let rest = &text[at..];
    let len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).unwrap_or(rest.len());
    let after = rest[len..].trim_start_matches([' ', '\t']);
    (len > 0 && after.starts_with(':') && (after.len() == 1 || after[1..].starts_with([' ', '\t', '\r', '\n'])))
        .then(|| &rest[..len])
}

/// The start of the value after a key ending at `key_end`, when it is on the same line.
fn value_after_key(text: &str, key_end: usize) -> Option<usize> {
    let colon = key_end + text[key_end..].find(':')? + 1;
    let rest = &text[colon..];
    let value = colon + rest.len() - rest.trim_start_matches([' ', '\t']).len();
    (value < text.len() && !text[value..].starts_with(['\r', '\n', '#'])).then_some(value)
}

/// The start of the `key:` in front of a value at `at` on the same line.
fn key_start_before(text: &str, at: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut j = at;
    while j > 0 && (b[j - 1] == b' ' || b[j - 1] == b'\t') {
        j -= 1;
    }
    if j == 0 || b[j - 1] != b':' {
        return None;
    }
    let mut s = j - 1;
    while s > 0 && !matches!(b[s - 1], b' ' | b'\t' | b'\n' | b'{' | b',') {
        s -= 1;
    }
    (s < j - 1).then_some(s)
}

/// The width of the scalar token at `at`.
fn token_width(text: &str, at: usize) -> usize {
    let rest = &text[at.min(text.len())..];
    let line = rest.split('\n').next().unwrap_or("").trim_end_matches('\r');
    if let Some(q @ ('"' | '\'')) = line.chars().next() {
        return line[1..].find(q).map(|e| e + 2).unwrap_or(line.len()).max(1);
    }
    let end = line.find([',', '}', ']']).unwrap_or(line.len());
    let end = line[..end].find(" #").unwrap_or(end);
    line[..end].trim_end().len().max(1)
}

/// Replaces the `key: value` entry starting at `start` with spaces (newlines kept).
fn blank_entry(text: &str, start: usize) -> Option<String> {
    let b = text.as_bytes();
    let ls = line_start(text, start);
    let mut out = b.to_vec();
    let mut blank = |from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    if text[ls..start].trim().is_empty() {
        // block style: the line, then every following line indented deeper (or blank/comment)
        let indent = start - ls;
        let mut end = text[start..].find('\n').map(|p| p + start).unwrap_or(text.len());
        let mut last = end;
        while end < text.len() {
            let next_start = end + 1;
            let next_end = text[next_start..].find('\n').map(|p| p + next_start).unwrap_or(text.len());
            let line = text[next_start..next_end].trim_end_matches('\r');
            let content = line.trim_start();
            let deeper = line.len() - content.len() > indent;
            if content.is_empty() || content.starts_with('#') {
                end = next_end;
                continue;
            }
            if !deeper {
                break;
            }
            end = next_end;
            last = end;
        }
        blank(start, last);
    } else {
        // flow style: up to the next `,` or closing bracket at depth 0
        let mut depth = 0i32;
        let mut i = start;
        let mut quote = None;
        while i < b.len() {
            let c = b[i];
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    b'"' | b'\'' => quote = Some(c),
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth == 0 => break,
                    b'}' | b']' => depth -= 1,
                    b',' if depth == 0 => {
                        i += 1;
                        break;
                    }
                    b'\n' if depth == 0 => return None,
                    _ => {}
                },
            }
            i += 1;
        }
        blank(start, i);
    }
    String::from_utf8(out).ok()
}

/// Where the value of `keys` (a section and a key, or one top-level key) is written, and its width.
fn locate(text: &str, keys: &[&str]) -> Option<(usize, usize)> {
    let k = locate_key(text, keys)?;
    let last = keys.last()?;
    match value_after_key(text, k + last.len()) {
        Some(value) => Some((value, token_width(text, value))),
        None => Some((k, last.len())),
    }
}

/// Where the key `keys` (a section and a key, or one top-level key) is written, as a byte offset.
fn locate_key(text: &str, keys: &[&str]) -> Option<usize> {
    let top = find_key(text, keys.first()?, 0, true)?;
    let Some(key) = keys.get(1) else { return Some(top) };
    // the section ends at the next line that starts at column 0
    let after = text[top..].find('\n').map(|p| p + top + 1).unwrap_or(text.len());
    let mut end = text.len();
    let mut pos = after;
    while pos < text.len() {
        let line_end = text[pos..].find('\n').map(|p| p + pos).unwrap_or(text.len());
        let c = text.as_bytes()[pos];
        if !matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b'#') {
            end = pos;
            break;
        }
        pos = line_end + 1;
    }
    find_key(&text[..end], key, top + keys[0].len(), false)
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
}
