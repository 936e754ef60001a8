//! What tuning keeps in `state_dir/tuning/`, so that it survives a restart: the tagging key,
//! each tuned table's rewards per arm, and the feedback already counted.
//!
//! Every file is written whole, atomically (a temporary file, synced, renamed over the old
//! one): a crash leaves the old file or the new one, never half of one. A file that cannot be
//! read back (corrupt, from another version) is logged and tuning starts that table afresh.
// Arm indexes come from the arms this state was built with (same length, checked on load).
#![allow(clippy::indexing_slicing)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use super::bandit::{ArmStats, RewardModel};
use crate::snapshot::SnapshotId;

/// The largest state file read back.
pub const MAX_STATE_BYTES: u64 = 16 << 20;

/// Reads a state file back: `Ok(None)` when there is none.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, String> {
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
/// feedback for one of them is not counted again. Kept in buckets of one minute of the ids'
/// own time, so that expired ones are dropped a bucket at a time.
#[derive(Debug, Default)]
pub struct Counted {
    buckets: VecDeque<(u64, FxHashSet<u128>)>,
    len: usize,
}

/// The most ids [`Counted`] holds (about 20 bytes each).
pub const MAX_COUNTED: usize = 500_000;

/// [`Counted`] holds [`MAX_COUNTED`] ids already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

const BUCKET_MS: u64 = 60_000;

impl Counted {
    /// Marks `id` counted: `Ok(true)` the first time, `Ok(false)` if it already was, [`Full`]
    /// when [`MAX_COUNTED`] ids are held.
    pub fn insert(&mut self, id: SnapshotId) -> Result<bool, Full> {
        let minute = id.unix_ms() / BUCKET_MS;
        let pos = self.buckets.iter().position(|(m, _)| *m == minute);
        if let Some(p) = pos {
            if self.buckets[p].1.contains(&id.as_u128()) {
                return Ok(false);
            }
        }
        if self.len >= MAX_COUNTED {
            return Err(Full);
        }
        let p = match pos {
            Some(p) => p,
            None => {
                // buckets are kept in minute order
                let at = self.buckets.iter().position(|(m, _)| *m > minute).unwrap_or(self.buckets.len());
                self.buckets.insert(at, (minute, FxHashSet::default()));
                at
            }
        };
        self.buckets[p].1.insert(id.as_u128());
        self.len += 1;
        Ok(true)
    }

    /// Forgets ids older than `oldest_ms` (feedback for them is refused anyway).
    pub fn expire(&mut self, oldest_ms: u64) {
        while let Some((m, set)) = self.buckets.front() {
            if (m + 1) * BUCKET_MS > oldest_ms {
                break;
            }
            self.len -= set.len();
            self.buckets.pop_front();
        }
    }

    /// How many ids are held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every id held, for saving at shutdown.
    pub fn ids(&self) -> Vec<String> {
        self.buckets.iter().flat_map(|(_, s)| s.iter()).map(|v| SnapshotId::from_u128(*v).to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_at(ms: u64, low: u128) -> SnapshotId {
        SnapshotId::from_u128((u128::from(ms) << 80) | (0x7 << 76) | low)
    }

    #[test]
    fn counted_once_and_expired_by_the_minute() {
        let mut c = Counted::default();
        assert_eq!(c.insert(id_at(120_000, 1)), Ok(true));
        assert_eq!(c.insert(id_at(120_000, 1)), Ok(false));
        assert_eq!(c.insert(id_at(60_500, 2)), Ok(true));
        assert_eq!(c.insert(id_at(200_000, 3)), Ok(true));
        assert_eq!(c.len(), 3);
        c.expire(121_000);
        // the bucket of minute 1 (60–120 s) is gone, minute 2 (120–180 s) stays
        assert_eq!(c.len(), 2);
        assert_eq!(c.insert(id_at(120_000, 1)), Ok(false));
        c.expire(10_000_000);
        assert!(c.is_empty());
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
        assert_eq!(read_json::<serde_json::Value>(&dir.path().join("none.json")), Ok(None));
        std::fs::write(&p, b"{not json").unwrap();
        assert!(read_json::<serde_json::Value>(&p).is_err());
    }
}
