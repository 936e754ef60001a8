//! `config.yaml` for `clef serve` (SPEC §5): defaults, then the file, then `CLEF_…` environment
//! variables, then command-line flags, layered with figment.
//!
//! The file is first read on its own by [`crate::yaml`] (granit-parser's events with their
//! positions), so that every unknown key, wrong type or Windows path is reported at its line and
//! column (with a "did you mean" where a known key is close): a typo never falls back to a
//! default silently. Files written on Windows work: a UTF-8 BOM, CRLF line ends, backslashes in
//! relative paths and double-quoted paths with backslashes.
//!
//! One job a file, and this one only says in what order they run: `layer` merges the layers
//! (the file read by `file`, with Windows tolerance from `windows` and lenient values from `de`;
//! the variables by `env`); `review` checks each section against what can work on this machine,
//! which `machine` probes; `paths` and `tokens` resolve what the reviewed configuration names.
//! The keys and defaults are in `sections`, except the router's, the snapshots' and the
//! tuning's, which live with their subsystem and its checks; `wording` says sizes and I/O errors
//! in a person's words.

mod de;
mod env;
mod file;
mod layer;
mod machine;
mod paths;
mod review;
mod sections;
mod tokens;
mod windows;
mod wording;

use std::path::{Path, PathBuf};

pub use file::{parse_text, MAX_CONFIG_BYTES};
pub use layer::Overrides;
pub use machine::Machine;
pub use paths::Loaded;
pub use review::{
    BODY_MEMORY_SHARE, MAX_BATCH_LINES, MAX_BODY_BYTES, MAX_HEADERS, MAX_HEADER_BYTES, MAX_TIMEOUT_MS, MAX_WORKERS,
};
pub use sections::{
    Admin, Canary, Config, Cors, Limits, LogFormat, LogLevel, Logging, Model, Server, DEFAULT_REQUEST_MEMORY,
    FDS_PER_WORKER, FDS_RESERVED, TOP_KEYS,
};
pub use tokens::credential_name;

use crate::diagnostic::Diagnostic;
use layer::layer;
use review::review;

/// Where `clef serve` looks for its configuration when no `-c` is given, in this order.
pub const DEFAULT_PATHS: [&str; 2] = ["./config.yaml", "/etc/clef/config.yaml"];

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
    paths::resolve(layered, errors, warnings, env)
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
