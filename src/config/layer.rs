//! Layering: defaults, then the file, then `CLEF_…` variables (merged by figment), then the
//! command line's flags. What comes out remembers where each value was written or which variable
//! set it, so that a check of any layer can point at its source.

use std::path::{Path, PathBuf};

use figment::providers::Serialized;
use figment::Figment;

use super::env::{env_layers, figment_diagnostics};
use super::file::{read_config_text, validate_text, Places};
use super::sections::Config;
use crate::diagnostic::Diagnostic;

/// Values from the command line, applied after the file and the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--port N`
    pub port: Option<u16>,
    /// `--host H`
    pub host: Option<String>,
}

/// A configuration read from its file and layered, with what it takes to say where a value came
/// from.
pub(super) struct Layered {
    /// the layered values; the review may lower a default that does not fit the machine
    pub(super) config: Config,
    /// the config file
    pub(super) path: PathBuf,
    /// the config file as diagnostics name it
    pub(super) shown: String,
    /// the file text, without its BOM
    text: String,
    /// where its keys and values are written
    places: Places,
    /// the `CLEF_…` variables that set values, as (dotted key, variable name)
    env_keys: Vec<(String, String)>,
}

/// Reads the file and layers it: defaults, the file, the environment (figment); then the flags.
pub(super) fn layer(path: &Path, overrides: &Overrides, env: &[(String, String)]) -> Result<Layered, Vec<Diagnostic>> {
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
    pub(super) fn at_value(&self, keys: &[&str], message: String) -> Diagnostic {
        if let Some(var) = self.env_var(&keys.join(".")) {
            return Diagnostic::whole_file(var, format!("environment variable {var}: {message}"));
        }
        match self.places.value(keys) {
            Some(at) => Diagnostic::at_offset(&self.shown, &self.text, at.start, at.len(), message),
            None => Diagnostic::whole_file(&self.shown, message),
        }
    }

    /// Whether `keys` was written in the file or set by a variable, rather than left to its default.
    pub(super) fn given(&self, keys: &[&str]) -> bool {
        self.env_var(&keys.join(".")).is_some() || self.places.key(keys).is_some()
    }
}
