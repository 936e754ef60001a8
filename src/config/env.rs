//! The environment layer: `CLEF_SECTION__KEY` variables as figment providers, each named after
//! its variable, so that a wrong value found when the layers are merged names the variable that
//! set it rather than the file.
// Load time only: `parts[0]` is there, as `split` yields at least one part.
#![allow(clippy::indexing_slicing)]

use figment::value::{Dict, Map, Value as FigValue};
use figment::{Metadata, Profile, Provider};

use super::file::friendly;
use super::sections::TOP_KEYS;
use crate::diagnostic::Diagnostic;
use crate::suggest::did_you_mean;

/// One `CLEF_…` variable as a figment provider, named after the variable so errors name it.
pub(super) struct EnvVar {
    pub(super) name: String,
    pub(super) key: String,
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
pub(super) fn env_layers(env: &[(String, String)], diags: &mut Vec<Diagnostic>) -> Vec<EnvVar> {
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

/// The problems figment found when it merged the layers, each naming the variable that set the value
/// (or the file).
pub(super) fn figment_diagnostics(shown: &str, err: figment::Error) -> Vec<Diagnostic> {
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
