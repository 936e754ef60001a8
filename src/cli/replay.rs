//! `clef replay SNAPSHOTS... --table T [--against T2] [--any-table] [--json] [--sla-us N]
//! [--cost-budget-us N] [--examples N]`: recorded decisions through a table, scored (SPEC §8.2).

use std::path::PathBuf;

use crate::replay::{self, Options};

/// Exit codes: 0 with a report, 1 when no snapshot of the table was found, 2 when the table or
/// the snapshots cannot be read.
pub fn run(paths: &[PathBuf], options: &Options, json: bool) -> i32 {
    let report = match replay::run(paths, options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    if json {
        outln!("{}", report.to_json());
    } else {
        out!("{}", report.to_text());
    }
    for (path, e) in &report.read.unreadable {
        if json {
            eprintln!("warning: {}: {e}", path.display());
        }
    }
    if report.table.decisions == 0 {
        eprintln!(
            "error: no snapshot of table \"{}\" in {} file{} ({} snapshots of other tables; --any-table replays every snapshot)",
            report.table.table,
            report.read.files,
            if report.read.files == 1 { "" } else { "s" },
            report.other_tables
        );
        return 1;
    }
    0
}
