//! `clef tune export TABLE [-c config.yaml] [--state-dir DIR]`: the table file with the values
//! tuning promoted written in place of the file's (SPEC §9), to commit back to the rules'
//! repository. Everything else in the file (comments, order, spacing) stays as written.

use std::path::Path;

use crate::config::{self, Overrides};

/// Prints the exported table on stdout. Exit 0; 2 when the table or the state cannot be read.
pub fn export(table: &Path, config_path: Option<&Path>, state_dir: Option<&Path>) -> i32 {
    let state_dir = match state_dir {
        Some(d) => d.to_path_buf(),
        None => match config::load(config_path, &Overrides::default()) {
            Ok(loaded) => loaded.state_dir,
            Err(diagnostics) => {
                for d in diagnostics {
                    eprintln!("{d}");
                }
                eprintln!("clef: cannot read the configuration to find state_dir; give it with --state-dir DIR");
                return 2;
            }
        },
    };
    match crate::registry::overlay::export(table, &crate::tuning::Tuner::overlay_folder(&state_dir)) {
        Ok(text) => {
            out!("{text}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}
