//! The review: values that parse but cannot work (SPEC §5), one review for `clef serve` (which
//! refuses them) and `clef check` (which reports them), each diagnostic at the value that is wrong
//! or naming the variable that set it.
//!
//! Each section of clef's own has a file here. The router's, the snapshots' and the tuning's
//! checks live with their subsystem (`problems()` on the section's type), since each subsystem
//! knows what it can run; here they are only placed at their key.

mod admin;
mod model;
mod server;

pub use server::{
    BODY_MEMORY_SHARE, MAX_BATCH_LINES, MAX_BODY_BYTES, MAX_HEADERS, MAX_HEADER_BYTES, MAX_TIMEOUT_MS, MAX_WORKERS,
};

use crate::config::layer::Layered;
use crate::config::machine::Machine;
use crate::diagnostic::Diagnostic;

/// What the review of a section found, for the sections to add to.
#[derive(Default)]
struct Findings {
    /// values that cannot work
    errors: Vec<Diagnostic>,
    /// settings that work but are risky
    warnings: Vec<Diagnostic>,
}

/// Checks the values of a layered configuration against what can work on `machine`: errors, and
/// warnings for settings that work but are risky. A default that does not fit this machine
/// (`max_connections` beyond the open files limit) is lowered to what fits, with a warning;
/// the same value written in the file or the environment is an error.
pub(super) fn review(l: &mut Layered, machine: &Machine) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
    let mut found = Findings::default();
    server::review(l, machine, &mut found);
    admin::review(l, &mut found);
    model::review_tables_dir(l, &mut found);
    review_subsystems(l, &mut found);
    // after the subsystems, where they have always been: the sort is stable, and diagnostics that
    // name a variable (no line) keep the order they were found in
    model::review_stages(l, &mut found);
    let Findings { mut errors, warnings } = found;
    // in the order of the file; those naming a variable after
    errors.sort_by_key(|d| (d.path != l.shown, d.line, d.column));
    (errors, warnings)
}

/// Places the problems the router, the snapshots and the tuning find in their sections at the
/// key each names (dotted below its section: `instances.1.addr`).
fn review_subsystems(l: &Layered, found: &mut Findings) {
    // `at_value` reads the keys joined by dots, so a dotted key needs no splitting
    let mut place = |section: &str, key: &str, message: &str| {
        found.errors.push(l.at_value(&[section, key], format!("`{section}.{key}`: {message}")));
    };
    for (key, message) in l.config.router.problems(l.given(&["router"])) {
        place("router", &key, &message);
    }
    for (key, message) in l.config.snapshots.problems() {
        place("snapshots", key, &message);
    }
    for (key, message) in l.config.tuning.problems() {
        place("tuning", key, &message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::layer::{layer, Overrides};
    use crate::config::sections::Config;

    /// A machine like a small Pi: 4 cores, 1 GiB, the usual open files limit.
    pub(super) const PI: Machine = Machine { open_files: 524_288, memory: 1 << 30, cores: 4 };

    /// Reviews `text` as `config.yaml` (next to a `tables/` folder) with `env`: the errors and the
    /// warnings, and the configuration as reviewed.
    pub(super) fn review_with(
        text: &str,
        env: &[(&str, &str)],
        machine: &Machine,
    ) -> (Vec<Diagnostic>, Vec<Diagnostic>, Config) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tables")).unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut layered = match layer(&path, &Overrides::default(), &env) {
            Ok(l) => l,
            Err(d) => panic!("{text}: {d:?}"),
        };
        let (errors, warnings) = review(&mut layered, machine);
        (errors, warnings, layered.config)
    }

    /// The one error of `server:\n  KEY: VALUE\n` on `machine`: it is at the value and names the key.
    pub(super) fn value_error(key: &str, value: &str, machine: &Machine) -> String {
        let (errors, _, _) = review_with(&format!("server:\n  {key}: {value}\n"), &[], machine);
        assert_eq!(errors.len(), 1, "{key}: {value}: {errors:?}");
        let d = &errors[0];
        assert_eq!((d.line, d.column, d.width), (2, key.len() + 5, value.len()), "{d}");
        assert!(d.message.contains(&format!("`server.{key}` is")), "{d}");
        d.message.clone()
    }

    /// Asserts that `text` has no errors on `machine`.
    pub(super) fn no_errors(text: &str, machine: &Machine) {
        let (errors, _, _) = review_with(text, &[], machine);
        assert!(errors.is_empty(), "{text}: {errors:?}");
    }

    #[test]
    fn values_set_in_the_environment_are_reported_with_the_variable() {
        let (errors, _, _) = review_with("server:\n  workers: 2\n", &[("CLEF_SERVER__WORKERS", "12000")], &PI);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "CLEF_SERVER__WORKERS");
        assert!(errors[0].message.starts_with("environment variable CLEF_SERVER__WORKERS: `server.workers` is 12000"));
        // a value given in the environment is given: not lowered silently
        let (errors, _, _) =
            review_with("", &[("CLEF_SERVER__MAX_CONNECTIONS", "4096")], &Machine { open_files: 1024, ..PI });
        assert!(errors[0].message.contains("at most 952 connections fit"), "{errors:?}");
    }
}
