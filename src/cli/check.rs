//! `clef check PATH...`: every problem of every file, as `path:line:col: error: message`.

use std::path::PathBuf;

use crate::diagnostic::{Diagnostic, Severity};
use crate::table::{table_name, Limits, Table};

pub fn run(paths: &[PathBuf]) -> i32 {
    let mut failed = false;
    for entry in super::expand(paths) {
        let path = match entry {
            Ok(p) => p,
            Err(msg) => {
                eprintln!("{msg}");
                failed = true;
                continue;
            }
        };
        let shown = path.display().to_string();
        let is_yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
        if is_yaml {
            failed |= !check_yaml(&path, &shown);
            continue;
        }
        match Table::load(&path, &Limits::default()) {
            Ok(t) => {
                if let Some(declared) = t.declared_name.as_deref().filter(|n| *n != t.name) {
                    let d = Diagnostic::whole_file(
                        &shown,
                        format!(
                            "the file says \"name\": \"{declared}\" but the table is named after its file: \"{}\"",
                            table_name(&path)
                        ),
                    );
                    eprintln!("{}", d.warning());
                }
                println!(
                    "{shown}: ok ({} table \"{}\", {} rules, version {})",
                    t.kind.name(),
                    t.name,
                    t.engine.rules.len(),
                    t.version
                );
            }
            Err(e) => {
                eprintln!("{e}");
                failed = true;
            }
        }
    }
    i32::from(failed)
}

/// A YAML file with a top-level `rules` key is a rule set; any other YAML is a config.
fn check_yaml(path: &std::path::Path, shown: &str) -> bool {
    // Read as a config is: a FIFO or a device named `x.yaml` is refused, not waited on.
    let text = match crate::config::read_config_text(path) {
        Ok(text) => text,
        Err(diagnostics) => {
            for d in diagnostics {
                eprintln!("{d}");
            }
            return false;
        }
    };
    let is_ruleset = text.trim_start_matches('\u{feff}').lines().any(|l| l.starts_with("rules:"));
    if is_ruleset {
        eprintln!("{shown}:1:1: error: YAML rule sets are not supported by this version of clef yet");
        return false;
    }
    let diagnostics = crate::config::check_file(path);
    let errors = diagnostics.iter().filter(|d| d.severity == Severity::Error).count();
    for d in &diagnostics {
        eprintln!("{d}");
    }
    if errors == 0 {
        println!("{shown}: ok (config)");
    }
    errors == 0
}
