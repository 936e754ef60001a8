//! What tuning keeps in `state_dir/tuning/`, so that it survives a restart: the tagging key,
//! each tuned table's rewards per arm, and the feedback already counted.
//!
//! Every file is written whole, atomically (a temporary file, synced, renamed over the old
//! one): a crash leaves the old file or the new one, never half of one. A table's rewards are
//! kept with their last good copy and checked when read back ([`TableState::check`]); a file
//! that fails gives way to that copy, and is reported in `GET /health` (see
//! [`crate::state_file`]). With neither, tuning starts that table afresh.
// Arm indexes come from the arms this state was built with (same length, checked on load).
#![allow(clippy::indexing_slicing)]

use crate::state_file::CheckFailed;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::bandit::{ArmStats, RewardModel};
use crate::snapshot::SnapshotId;
use crate::table::params::Tunable;

/// The largest state file read back.
pub const MAX_STATE_BYTES: u64 = 16 << 20;

/// Reads a state file back: `Ok(None)` when there is none.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, crate::files::ReadJsonError> {
    crate::files::read_json(path, MAX_STATE_BYTES)
}

/// The folder of tuning's files.
pub fn folder(state_dir: &Path) -> PathBuf {
    state_dir.join("tuning")
}

/// One tuned table's rewards, as saved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableState {
    /// the table
    pub table: String,
    /// the version of the table the arms were made from (its file's, with promoted values)
    pub basis: String,
    /// the generation ids were tagged under
    pub generation: u32,
    /// what the rewards are
    pub model: RewardModel,
    /// each arm, baseline first
    pub arms: Vec<ArmState>,
}

impl TableState {
    /// Whether these rewards can be what tuning saved for `table` (declaring `params`, when
    /// known): the baseline first and arm ids unique, each arm's values passing the table's
    /// declarations as its loader checks them, and sums that rewards can add up to.
    pub fn check(&self, table: &str, params: Option<&serde_json::Value>) -> Result<(), CheckFailed> {
        if self.table != table {
            return Err(CheckFailed(format!("they are the rewards of table \"{}\", not \"{table}\"", self.table)));
        }
        if self.arms.first().is_none_or(|a| a.id != "baseline") {
            return Err(CheckFailed("the first arm is not the baseline".into()));
        }
        let mut ids = BTreeSet::new();
        for arm in &self.arms {
            if !ids.insert(arm.id.as_str()) {
                return Err(CheckFailed(format!("arm \"{}\" is listed twice", arm.id)));
            }
            for (name, value) in &arm.params {
                let Some(decl) = params.and_then(|p| p.get(name)) else { continue };
                let mut with_value = decl.clone();
                if let Some(d) = with_value.as_object_mut() {
                    d.insert("value".into(), value.clone());
                }
                Tunable::read(name, &with_value).map_err(|e| CheckFailed(format!("arm \"{}\": {e}", arm.id)))?;
            }
            arm.stats.check(self.model).map_err(|e| CheckFailed(format!("arm \"{}\": {e}", arm.id)))?;
        }
        Ok(())
    }
}

/// One arm's rewards, as saved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmState {
    /// `baseline`, `v1`, …
    pub id: String,
    /// its parameter values
    pub params: serde_json::Map<String, serde_json::Value>,
    /// its rewards
    pub stats: ArmStats,
    /// the last look at which the variant was judged (0: not yet; see `bandit::look`)
    #[serde(default)]
    pub judged_at: u32,
    /// whether it was ready at that look
    #[serde(default)]
    pub ready: bool,
}

/// The ids whose feedback was counted, for as long as feedback for them is accepted: a second
/// feedback for one of them is not counted again. At most `cap` are held: beyond it the oldest
/// (by the time in the id) is forgotten, so that a flood of feedback can neither grow memory
/// nor lock feedback out. A repeat of a forgotten one counts again.
///
/// An ordered set, because ids are UUIDv7: ordered by value is ordered by time, so the oldest
/// is the first and the expired ones are a prefix.
#[derive(Debug)]
pub struct Counted {
    ids: BTreeSet<u128>,
    cap: usize,
    evicted: u64,
}

/// The most ids [`Counted`] holds unless `tuning.max_feedback_ids` says otherwise.
pub const MAX_COUNTED: usize = 500_000;

impl Default for Counted {
    fn default() -> Self {
        Counted::new(MAX_COUNTED)
    }
}

impl Counted {
    /// A set holding at most `cap` ids (at least one).
    pub fn new(cap: usize) -> Counted {
        Counted { ids: BTreeSet::new(), cap: cap.max(1), evicted: 0 }
    }

    /// Marks `id` counted: true the first time, false if it already was. When `cap` ids are
    /// held, the oldest is forgotten first.
    pub fn insert(&mut self, id: SnapshotId) -> bool {
        let id = id.as_u128();
        if self.ids.contains(&id) {
            return false;
        }
        while self.ids.len() >= self.cap {
            self.ids.pop_first();
            self.evicted += 1;
        }
        self.ids.insert(id)
    }

    /// Forgets ids older than `oldest_ms` (feedback for them is refused anyway).
    pub fn expire(&mut self, oldest_ms: u64) {
        let first_kept = u128::from(oldest_ms) << 80;
        if self.ids.first().is_some_and(|&oldest| oldest < first_kept) {
            self.ids = self.ids.split_off(&first_kept);
        }
    }

    /// How many ids are held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// How many ids were forgotten to stay within the cap (not counting expired ones).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_at(ms: u64, low: u128) -> SnapshotId {
        SnapshotId::from_u128((u128::from(ms) << 80) | (0x7 << 76) | low)
    }

    #[test]
    fn counted_once_and_expired_by_their_time() {
        let mut c = Counted::default();
        assert!(c.insert(id_at(120_000, 1)));
        assert!(!c.insert(id_at(120_000, 1)));
        assert!(c.insert(id_at(60_500, 2)));
        assert!(c.insert(id_at(200_000, 3)));
        assert_eq!(c.len(), 3);
        c.expire(120_000);
        // the id of 60.5 s is gone, those of 120 s and 200 s stay
        assert_eq!(c.len(), 2);
        assert!(!c.insert(id_at(120_000, 1)));
        c.expire(10_000_000);
        assert!(c.is_empty());
        assert_eq!(c.evicted(), 0);
    }

    #[test]
    fn at_the_cap_the_oldest_is_forgotten_and_feedback_goes_on() {
        let mut c = Counted::new(3);
        for (ms, low) in [(1_000, 1), (3_000, 3), (2_000, 2)] {
            assert!(c.insert(id_at(ms, low)));
        }
        // full: a new id is taken, the oldest (1 s) forgotten
        assert!(c.insert(id_at(4_000, 4)));
        assert_eq!((c.len(), c.evicted()), (3, 1));
        assert!(!c.insert(id_at(2_000, 2)), "2 s is still known");
        assert!(c.insert(id_at(1_000, 1)), "1 s was forgotten: it counts again");
        assert_eq!((c.len(), c.evicted()), (3, 2));
        assert!(!c.insert(id_at(4_000, 4)));
    }

    #[test]
    fn atomic_writes_replace_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tuning/t.json");
        crate::files::write_atomically(&p, b"{\"a\":1}").unwrap();
        crate::files::write_atomically(&p, b"{\"a\":2}").unwrap();
        let v: Option<serde_json::Value> = read_json(&p).unwrap();
        assert_eq!(v, Some(serde_json::json!({"a": 2})));
        let leftovers: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left");
        assert!(matches!(read_json::<serde_json::Value>(&dir.path().join("none.json")), Ok(None)));
        std::fs::write(&p, b"{not json").unwrap();
        assert!(read_json::<serde_json::Value>(&p).is_err());
    }
}
