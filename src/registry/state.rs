//! What the registry keeps across restarts, in `state_dir`: kill switches and rollback pins (and
//! later tuning overlays), so that what an operator changed on a running server is still in
//! force after a restart.
//!
//! ```text
//! state_dir/registry.json          {"format":1,"switches":{"risk":["rule_7"]},"pins":{"risk":{…}}}
//! state_dir/pins/VERSION-FILE      the source of each pinned version, byte for byte
//! ```
//!
//! Every file is written atomically: to `.NAME.tmp`, flushed to the disk (fsync), renamed over
//! `NAME`, then the folder is synced. A crash at any moment leaves the old file or the new one,
//! never half of one (a leftover `.tmp` is ignored and overwritten by the next write). A pin's
//! source is written before the state that names it and removed after the state that no longer
//! does, and its name carries its version, so the state never names a source that is missing or
//! holds another version; at worst a crash leaves an unused source behind, which the next save
//! removes.
//!
//! The file is read leniently (unknown fields are ignored, so a newer clef's file still loads)
//! but checked ([`State::check`]); the file it replaced is kept as `registry.json.last-good`
//! when it passed (see [`crate::state_file`]). A file that cannot be read or fails its check
//! is reported (log and `GET /health`), not obeyed: its last good copy is, and without one the
//! tables serve as their files say.

use crate::state_file::CheckFailed;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The state file's name in `state_dir`.
pub const STATE_FILE: &str = "registry.json";
/// The folder of pinned sources in `state_dir`.
pub const PINS_DIR: &str = "pins";
/// The largest state file read (it holds ids and a few paths per table).
const MAX_STATE_BYTES: u64 = 16 << 20;
/// The format written; files of a later format are read for the fields this version knows.
const FORMAT: u32 = 1;

/// Everything the registry persists.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// the format of the file
    #[serde(default)]
    pub format: u32,
    /// kill switches: table name → ids of the rules switched off
    #[serde(default)]
    pub switches: BTreeMap<String, BTreeSet<String>>,
    /// rollback pins: table name → the version it serves until its file changes
    #[serde(default)]
    pub pins: BTreeMap<String, Pin>,
}

impl State {
    /// Whether the state can be what clef saved: names that are not empty, and pins whose
    /// version, file hash, source name and time have the forms clef writes (the source itself
    /// is checked against the version when it is read).
    pub fn check(&self) -> Result<(), CheckFailed> {
        let hex =
            |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        for (table, ids) in &self.switches {
            if table.is_empty() || ids.iter().any(String::is_empty) {
                return Err(CheckFailed(format!("the kill switches of table \"{table}\" name an empty table or rule")));
            }
        }
        for (table, pin) in &self.pins {
            let what = |why: &str| CheckFailed(format!("the rollback pin of table \"{table}\": {why}"));
            if table.is_empty() {
                return Err(what("no table name"));
            }
            if !hex(&pin.version, 12) {
                return Err(what(&format!("\"{}\" is not a version (12 hex digits)", pin.version)));
            }
            if !hex(&pin.file_sha256, 64) {
                return Err(what("its file hash is not a SHA-256 (64 hex digits)"));
            }
            if !pin.source.starts_with(&format!("{}-", pin.version)) || pin.source.contains(['/', '\\']) {
                return Err(what(&format!("its source {:?} is not the file clef names after the version", pin.source)));
            }
            if humantime::parse_rfc3339(&pin.since).is_err() {
                return Err(what(&format!("{:?} is not a time", pin.since)));
            }
        }
        Ok(())
    }
}

/// A table pinned to an earlier version by a rollback (SPEC §6): it serves that version across
/// reloads and restarts until its own file holds other bytes than `file_sha256`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    /// the version served
    pub version: String,
    /// the file that version was loaded from (its name gives the kind of table)
    pub path: PathBuf,
    /// the SHA-256 (hex) of what the table's file held when the pin was made
    pub file_sha256: String,
    /// the file in `pins/` holding the pinned version's source
    pub source: String,
    /// when the pin was made (RFC 3339)
    pub since: String,
}

/// The `state_dir` folder.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// The file of kill switches and rollback pins and its last good copy both fail (what the
/// state-file check said, after the path).
#[derive(Debug)]
pub struct StateUnreadable {
    /// the state file
    pub path: PathBuf,
    /// what is wrong with it and its copy
    pub detail: String,
}

impl std::fmt::Display for StateUnreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.path.display(), self.detail)
    }
}

impl std::error::Error for StateUnreadable {}

/// Why the version a rollback pin names cannot serve again.
#[derive(Debug)]
pub enum PinSourceError {
    /// the pin names something that is not a file name in `pins/`
    NotAFileName(String),
    /// its kept source cannot be read
    Read {
        /// the kept source
        path: PathBuf,
        /// what the system said
        error: io::Error,
    },
    /// its kept source is another version
    OtherVersion {
        /// the kept source
        path: PathBuf,
        /// the version it holds
        holds: String,
        /// the version pinned
        pinned: String,
    },
    /// there is no state folder: the source was kept in memory only
    NotKept,
    /// the kept source does not load (the load error's summary)
    DoesNotLoad(String),
}

impl std::fmt::Display for PinSourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PinSourceError::NotAFileName(source) => {
                write!(f, "the pin names {source:?}, which is not a file name in {PINS_DIR}/")
            }
            PinSourceError::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            PinSourceError::OtherVersion { path, holds, pinned } => {
                write!(f, "{} holds version {holds}, not the pinned {pinned}", path.display())
            }
            PinSourceError::NotKept => f.write_str("its source was kept in memory only"),
            PinSourceError::DoesNotLoad(summary) => f.write_str(summary),
        }
    }
}

impl std::error::Error for PinSourceError {}

impl Store {
    /// The store in `dir` (created on the first write).
    pub fn new(dir: PathBuf) -> Store {
        Store { dir }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state file's path.
    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The saved state: empty when there is no file yet; `Err` (saying what is wrong) when
    /// neither the file nor its last good copy can be read and pass [`State::check`]. A file
    /// that fails while its last good copy passes gives that copy; either failure is logged
    /// and reported for `GET /health` (see [`crate::state_file`]).
    pub fn load(&self) -> Result<State, StateUnreadable> {
        let path = self.state_path();
        let loaded = crate::state_file::load(&path, MAX_STATE_BYTES, State::check);
        let Some(why) = loaded.problem else {
            crate::state_file::resolve("registry", "state", "registry");
            let state = loaded.value.unwrap_or_default();
            if state.format > FORMAT {
                log::warn!(
                    "{} was written by a newer clef (format {}); reading what this version knows of it",
                    path.display(),
                    state.format
                );
            }
            return Ok(state);
        };
        let outcome = if loaded.value.is_some() { "" } else { "; no kill switch or rollback pin is in force" };
        crate::state_file::report(
            "registry",
            "state",
            "registry",
            format!("the file of kill switches and rollback pins {}{outcome}", why.summary),
        );
        match loaded.value {
            Some(state) => {
                log::error!("{} {}", path.display(), why.detail);
                Ok(state)
            }
            None => Err(StateUnreadable { path, detail: why.detail }),
        }
    }

    /// Moves an unreadable state file aside (`registry.json.corrupt`), so that the next save does
    /// not destroy what an operator may want to look at; returns where it went.
    pub fn set_aside(&self) -> Option<PathBuf> {
        let from = self.state_path();
        let to = self.dir.join(format!("{STATE_FILE}.corrupt"));
        std::fs::rename(&from, &to).ok().map(|_| to)
    }

    /// Saves `state` atomically, then removes pinned sources it no longer names.
    pub fn save(&self, state: &State) -> io::Result<()> {
        let mut text =
            serde_json::to_vec_pretty(&State { format: FORMAT, ..state.clone() }).map_err(io::Error::other)?;
        text.push(b'\n');
        let good = |old: &[u8]| serde_json::from_slice::<State>(old).is_ok_and(|o| o.check().is_ok());
        crate::state_file::save(&self.state_path(), &text, MAX_STATE_BYTES, good)?;
        self.remove_unused_sources(state);
        Ok(())
    }

    /// Writes the source of a version about to be pinned; returns its name in `pins/`.
    pub fn write_pin_source(&self, version: &str, path: &Path, bytes: &[u8]) -> io::Result<String> {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("table");
        let name = format!("{version}-{file}");
        crate::files::write_atomically(&self.dir.join(PINS_DIR).join(&name), bytes)?;
        Ok(name)
    }

    /// The source of a pinned version, checked to be that version.
    pub fn read_pin_source(&self, pin: &Pin) -> Result<Vec<u8>, PinSourceError> {
        let plain = !pin.source.is_empty()
            && !pin.source.starts_with('.')
            && !pin.source.contains(['/', '\\'])
            && Path::new(&pin.source).file_name().is_some();
        if !plain {
            return Err(PinSourceError::NotAFileName(pin.source.clone()));
        }
        let path = self.dir.join(PINS_DIR).join(&pin.source);
        let bytes = crate::files::read_limited(&path, crate::table::MAX_TABLE_BYTES)
            .map_err(|error| PinSourceError::Read { path: path.clone(), error })?;
        let version = crate::table::version_of(&bytes);
        if version != pin.version {
            return Err(PinSourceError::OtherVersion { path, holds: version, pinned: pin.version.clone() });
        }
        Ok(bytes)
    }

    fn remove_unused_sources(&self, state: &State) {
        let Ok(entries) = std::fs::read_dir(self.dir.join(PINS_DIR)) else { return };
        let named: BTreeSet<&str> = state.pins.values().map(|p| p.source.as_str()).collect();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let used = name.to_str().is_some_and(|n| named.contains(n));
            if !used {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(version: &str, source: &str) -> Pin {
        Pin {
            version: version.into(),
            path: PathBuf::from("/t/risk.json"),
            file_sha256: "ab".repeat(32),
            source: source.into(),
            since: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_state_round_trips_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("state"));
        assert_eq!(store.load().unwrap(), State::default());
        let mut state = State::default();
        state.switches.entry("risk".into()).or_default().insert("r1".into());
        let bytes = b"{\"rules\": []}";
        let source = store.write_pin_source(&crate::table::version_of(bytes), Path::new("/t/risk.json"), bytes);
        let source = source.unwrap();
        state.pins.insert("risk".into(), pin(&crate::table::version_of(bytes), &source));
        store.save(&state).unwrap();
        let back = store.load().unwrap();
        assert_eq!(back.switches, state.switches);
        assert_eq!(back.pins, state.pins);
        assert_eq!(store.read_pin_source(&back.pins["risk"]).unwrap(), bytes);
        // no temporary file is left behind
        let names: Vec<String> =
            std::fs::read_dir(store.dir()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.iter().filter(|n| n.ends_with(".tmp")).count(), 0, "{names:?}");
    }

    #[test]
    fn unknown_fields_are_ignored_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        std::fs::write(store.state_path(), r#"{"format": 9, "switches": {"t": ["a"]}, "params": {"t": {}}}"#).unwrap();
        assert_eq!(store.load().unwrap().switches["t"].len(), 1);
        std::fs::write(store.state_path(), b"{\"switches\": {\"t\": [").unwrap();
        let e = store.load().unwrap_err().to_string();
        assert!(e.contains("registry.json") && e.contains("is not valid"), "{e}");
        assert_eq!(store.set_aside(), Some(dir.path().join("registry.json.corrupt")));
        assert_eq!(store.load().unwrap(), State::default());
    }

    #[test]
    fn a_leftover_temporary_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        let mut state = State::default();
        state.switches.entry("t".into()).or_default().insert("a".into());
        store.save(&state).unwrap();
        // a crash in the middle of the next write leaves a half temporary file
        std::fs::write(dir.path().join(".registry.json.tmp"), b"{\"swi").unwrap();
        assert_eq!(store.load().unwrap().switches, state.switches);
        state.switches.clear();
        store.save(&state).unwrap();
        assert!(store.load().unwrap().switches.is_empty());
        assert!(!dir.path().join(".registry.json.tmp").exists());
    }

    #[test]
    fn pinned_sources_are_checked_and_unused_ones_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        let version = crate::table::version_of(b"v1");
        let name = store.write_pin_source(&version, Path::new("/t/risk.json"), b"v1").unwrap();
        let mut p = pin(&version, &name);
        assert_eq!(store.read_pin_source(&p).unwrap(), b"v1");
        std::fs::write(dir.path().join(PINS_DIR).join(&name), b"v2").unwrap();
        assert!(store.read_pin_source(&p).unwrap_err().to_string().contains("not the pinned"));
        p.source = "../registry.json".into();
        assert!(store.read_pin_source(&p).unwrap_err().to_string().contains("not a file name"));
        store.save(&State::default()).unwrap();
        assert!(!dir.path().join(PINS_DIR).join(&name).exists(), "an unused source is removed");
    }
}
