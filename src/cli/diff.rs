//! `clef diff OLD NEW [--json]`: what changed between two versions of a table.

use std::path::Path;

use crate::diff;

/// Prints the changes from `old` to `new`, one line each (or one JSON object with `json`).
/// Exit codes, as `diff(1)`'s: 0 when nothing that decides changed, 1 when something did, 2 when
/// a file does not load or the two are tables of different kinds (the diagnostic on stderr).
pub fn run(old: &Path, new: &Path, json: bool) -> i32 {
    let d = match diff::diff_files(old, new) {
        Ok(d) => d,
        // a load error prints the loader's diagnostics (`path:line:col: error: …`)
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    if json {
        outln!("{}", d.to_json());
    } else {
        out!("{}", d.to_text());
    }
    i32::from(!d.is_empty())
}
