//! `clef check PATH...`: every problem of every file, as `path:line:col: error: message`:
//! tables, the tests stored with them (in the table or in `NAME.tests.json`,
//! read as `clef test` reads them) and configs; then one summary line. A YAML file is a rule set
//! when its top level has a `rules` key (whatever its name), and a configuration otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::test::{self, tests_file_for};
use crate::diagnostic::{Diagnostic, Severity};
use crate::table::{table_name, Limits, Table};

pub fn run(paths: &[PathBuf]) -> i32 {
    let mut failed = false;
    let mut tally = Tally::default();
    let mut seen = BTreeSet::new();
    for entry in super::expand(paths) {
        let path = match entry {
            Ok(p) => p,
            Err(msg) => {
                eprintln!("{msg}");
                failed = true;
                continue;
            }
        };
        if !seen.insert(path.clone()) {
            continue;
        }
        let shown = path.display().to_string();
        let is_yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
        if is_yaml && !is_rule_set(&path) {
            tally.count(check_config(&path, &shown));
            continue;
        }
        if shown.ends_with(".tests.json") {
            // A tests file named on its own: checked against its table when that loads.
            let table = table_of_tests(&path).and_then(|t| Table::load(&t, &Limits::default()).ok());
            tally.count(check_tests_file(&path, table.as_ref()));
            continue;
        }
        let table = match Table::load(&path, &Limits::default()) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                tally.count(false);
                // Its tests file is still read; rule ids cannot be checked without the table.
                let sibling = tests_file_for(&path);
                if sibling.is_file() && seen.insert(sibling.clone()) {
                    tally.count(check_tests_file(&sibling, None));
                }
                continue;
            }
        };
        if let Some(declared) = table.declared_name.as_deref().filter(|n| *n != table.name) {
            let d = Diagnostic::whole_file(
                &shown,
                format!(
                    "the file says \"name\": \"{declared}\" but the table is named after its file: \"{}\"",
                    table_name(&path)
                ),
            );
            eprintln!("{}", d.warning());
        }
        // Tests written inside the table file are part of it.
        let inline = match table.tests.is_some().then(|| test::load_tests_in_table(&table)) {
            Some(Err(problems)) => {
                problems.iter().for_each(|d| eprintln!("{d}"));
                tally.count(false);
                None
            }
            Some(Ok(t)) => Some(t.len()),
            None => None,
        };
        if inline.is_some() || table.tests.is_none() {
            let tests = inline.map(|n| format!(", {n} tests")).unwrap_or_default();
            outln!(
                "{shown}: ok ({} table \"{}\", {} {}{tests}, version {})",
                table.kind.name(),
                table.name,
                table.engine.outcome_count(),
                table.engine.outcome_noun(),
                table.version
            );
            tally.count(true);
        }
        let sibling = tests_file_for(&path);
        if sibling.is_file() && seen.insert(sibling.clone()) {
            tally.count(check_tests_file(&sibling, Some(&table)));
        }
    }
    // Files that are one table name and cannot be one table (a `.cfb` beside a source it was
    // not compiled from, `risk.json` beside `risk.yaml`): the error the server would give.
    for files in super::table_groups(paths).into_iter().flatten().filter(|files| files.len() > 1) {
        if let Err(problem) = super::served_file(&files) {
            let shown = files.first().map(|f| f.display().to_string()).unwrap_or_default();
            eprintln!("{}", Diagnostic::whole_file(&shown, problem.summary));
            tally.conflicts += 1;
        }
    }
    outln!("{}", tally.summary());
    i32::from(failed || tally.errors > 0 || tally.conflicts > 0)
}

/// Files checked, and how many had errors.
#[derive(Default)]
struct Tally {
    files: usize,
    errors: usize,
    /// table names whose files cannot make one table
    conflicts: usize,
}

impl Tally {
    fn count(&mut self, ok: bool) {
        self.files += 1;
        self.errors += usize::from(!ok);
    }

    /// `checked 9 files: 8 ok, 1 with errors`
    fn summary(&self) -> String {
        let plural = if self.files == 1 { "" } else { "s" };
        let summary = format!(
            "checked {} file{plural}: {} ok, {} with errors",
            self.files,
            self.files - self.errors,
            self.errors
        );
        match self.conflicts {
            0 => summary,
            1 => format!("{summary}; 1 table name has two files that cannot be one table"),
            n => format!("{summary}; {n} table names have two files that cannot be one table"),
        }
    }
}

/// A `NAME.tests.json`, read by the loader `clef test` uses.
fn check_tests_file(path: &Path, table: Option<&Table>) -> bool {
    let shown = path.display().to_string();
    match test::load_tests_file(path, table) {
        Ok(list) => {
            let against = table.map(|t| format!(" for table \"{}\"", t.name)).unwrap_or_default();
            outln!("{shown}: ok ({} tests{against})", list.len());
            true
        }
        Err(problems) => {
            problems.iter().for_each(|d| eprintln!("{d}"));
            false
        }
    }
}

/// Whether a YAML file is a rule set: its top level has a `rules` key (read by the YAML parser, as
/// far as the file is valid YAML). A file that cannot be read is checked as a config, which says why.
fn is_rule_set(path: &Path) -> bool {
    let Ok(bytes) = crate::table::read_table_file(path) else { return false };
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    std::str::from_utf8(bytes).is_ok_and(crate::table::ruleset::is_rule_set)
}

/// The table a `NAME.tests.json` belongs to: `NAME.json`, `NAME.yaml` or `NAME.yml` beside it.
fn table_of_tests(path: &Path) -> Option<PathBuf> {
    let name = table_name(path);
    ["json", "yaml", "yml", "flash.json", "cfb"]
        .iter()
        .map(|ext| path.with_file_name(format!("{name}.{ext}")))
        .find(|p| p.is_file())
}

/// A YAML file that is not a rule set: a config.
fn check_config(path: &Path, shown: &str) -> bool {
    let diagnostics = crate::config::check_file(path);
    let errors = diagnostics.iter().filter(|d| d.severity == Severity::Error).count();
    for d in &diagnostics {
        eprintln!("{d}");
    }
    if errors == 0 {
        outln!("{shown}: ok (config)");
    }
    errors == 0
}
