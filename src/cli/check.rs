//! `clef check PATH...`: every problem of every file, as `path:line:col: error: message`.

use std::path::PathBuf;

use crate::diagnostic::Diagnostic;
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
            eprintln!("{shown}: error: YAML rule sets and config files are not supported by this version of clef yet");
            failed = true;
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
