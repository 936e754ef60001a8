//! The review of `model:`: a tables folder to serve from, and shadow and canary entries that
//! `decide::Stages` can run (another table as the candidate, a share from 0 to 1, a key that is a
//! field path).
//!
//! The shadow and canary checks stay beside the other `model:` checks rather than in `decide`:
//! `decide` reads the `model:` section, so a review there would make the two modules import each
//! other.

use super::Findings;
use crate::config::layer::Layered;
use crate::config::paths::{base_dir_of, tables_dir_of};
use crate::config::wording::io_reason;

/// Reviews `model.tables_dir`: the folder must exist and be readable, unless the seed's form
/// (only `decision_table_path`) leaves it to its default.
pub(super) fn review_tables_dir(l: &Layered, found: &mut Findings) {
    let model = &l.config.model;
    let tables_key = ["model", "tables_dir"];
    let given = l.given(&tables_key);
    // The seed's form (only `decision_table_path`) needs no folder: the default one may be absent.
    if given || model.decision_table_path.is_none() {
        let dir = tables_dir_of(&base_dir_of(&l.path), model);
        let problem = match std::fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => Some("is not a folder".to_string()),
            Ok(_) => std::fs::read_dir(&dir).err().map(|e| format!("cannot be read: {}", io_reason(&e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".to_string()),
            Err(e) => Some(format!("cannot be read: {}", io_reason(&e))),
        };
        if let Some(problem) = problem {
            let default = if given { "" } else { " (the default: `tables` next to the config file)" };
            found.errors.push(l.at_value(
                &tables_key,
                format!(
                    "tables_dir `{}`{default} {problem}: there would be no tables to serve; \
                     create it, or set `model.tables_dir` to the folder of your tables",
                    dir.display()
                ),
            ));
        }
    }
}

/// Reviews `model.shadow` and `model.canary`: each names another table, a share is in [0, 1] and
/// a key is a dotted field path.
pub(super) fn review_stages(l: &Layered, found: &mut Findings) {
    for (served, candidate) in &l.config.model.shadow {
        if served == candidate {
            found.errors.push(l.at_value(
                &["model", "shadow", served],
                format!("`model.shadow.{served}` names the table itself: a shadow is another table (a candidate) to compare with"),
            ));
        }
    }
    for (served, canary) in &l.config.model.canary {
        let keys = ["model", "canary", served.as_str()];
        if canary.table == *served {
            found.errors.push(l.at_value(
                &keys,
                format!(
                    "`model.canary.{served}.table` names the table itself: a canary is another table (a candidate)"
                ),
            ));
        }
        if !(0.0..=1.0).contains(&canary.share) {
            found.errors.push(l.at_value(
                &keys,
                format!(
                    "`model.canary.{served}.share` is {}: write the share of traffic the candidate serves, from 0 to 1 (0.05 = 5%)",
                    canary.share
                ),
            ));
        }
        if let Some(key) = &canary.key {
            if key.is_empty() || key.split('.').any(str::is_empty) {
                found.errors.push(l.at_value(
                    &keys,
                    format!("`model.canary.{served}.key` `{key}` is not a field path: write names joined by dots, like `user.id`"),
                ));
            }
        }
    }
}
