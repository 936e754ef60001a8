//! The set of tables a server serves, swapped atomically on reload.
//!
//! Requests read an immutable snapshot (`ArcSwap`, no lock); a reload builds
//! the next snapshot off the request path — compiling only files whose bytes
//! changed — and publishes it in one store. A table whose new file fails to
//! load keeps serving its last good version; the failure is kept for
//! `/health` until a good file replaces it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::flash::cfb;
use super::{table_name, version_of, Limits, Table, TableKind};
use crate::metrics::TableStats;

/// How many earlier good versions are kept for rollback.
pub const KEPT_VERSIONS: usize = 3;

/// One table name: what serves now, what served before, and the latest failure.
#[derive(Debug, Clone)]
pub struct Slot {
    /// the version being served (None when the file never loaded)
    pub current: Option<Arc<Table>>,
    /// earlier good versions, newest last
    pub previous: Vec<Arc<Table>>,
    /// the latest load failure of this name's file, until a good file loads
    pub error: Option<String>,
    /// decision counters, kept across reloads while the rule ids stay the same
    pub stats: Arc<TableStats>,
    /// the file(s) the name comes from
    pub files: Vec<PathBuf>,
    /// failed loads of this name's file since the server started (at start and on reloads),
    /// kept across reloads for `clef_table_load_failures_total`
    pub load_failures: u64,
}

impl Slot {
    /// Makes `table` the serving version; the counters carry over while the rule ids stay the same.
    fn serve(&mut self, table: Arc<Table>) {
        let rule_ids = table.engine.outcome_ids();
        if self.stats.rule_ids() != rule_ids.as_slice() {
            self.stats = Arc::new(TableStats::new(rule_ids));
        }
        self.current = Some(table);
    }
}

/// All tables, as one immutable snapshot.
#[derive(Debug, Default)]
pub struct Tables {
    /// by name
    pub slots: BTreeMap<String, Slot>,
}

impl Tables {
    /// The table serving `name` now.
    pub fn get(&self, name: &str) -> Option<&Slot> {
        self.slots.get(name)
    }

    /// Names whose latest file failed to load, with the message.
    pub fn errors(&self) -> impl Iterator<Item = (&str, &str)> {
        self.slots.iter().filter_map(|(n, s)| s.error.as_deref().map(|e| (n.as_str(), e)))
    }
}

/// What a reload did to one table.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// a new version is serving
    Loaded {
        /// its version
        version: String,
        /// the name's file had failed to load before (its error is cleared now)
        recovered: bool,
    },
    /// the file's bytes are those of the version serving
    Unchanged {
        /// the version still serving
        version: String,
        /// the name's file had failed to load before and is back to the serving version's
        /// bytes (its error is cleared now)
        recovered: bool,
    },
    /// the file failed to load; the previous version (if any) keeps serving
    Failed {
        /// the diagnostic
        error: String,
        /// the version still serving
        serving: Option<String>,
    },
    /// the file is gone; the table is no longer served
    Removed,
}

/// Where tables come from and how they are built.
#[derive(Debug, Clone)]
pub struct Sources {
    /// every table file directly in this folder is served
    pub tables_dir: PathBuf,
    /// one more table file (the seeds' `decision_table_path`)
    pub extra: Option<PathBuf>,
    /// load-time caps
    pub limits: Limits,
}

/// The served tables and how to reload them.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwap<Tables>,
    sources: Sources,
    reload_lock: Mutex<()>,
}

impl Registry {
    /// Loads every table once.
    pub fn open(sources: Sources) -> (Registry, Vec<(String, Outcome)>) {
        let registry =
            Registry { current: ArcSwap::from_pointee(Tables::default()), sources, reload_lock: Mutex::new(()) };
        let outcomes = registry.reload();
        (registry, outcomes)
    }

    /// Where the tables come from.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The snapshot requests read.
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Tables>> {
        self.current.load()
    }

    /// Re-reads every table file; returns what happened to each name.
    pub fn reload(&self) -> Vec<(String, Outcome)> {
        let _serialized = self.reload_lock.lock();
        let old = self.current.load_full();
        let (files, problems) = self.sources.discover();
        for p in problems {
            log::error!("{p}");
        }
        let mut next = Tables::default();
        let mut outcomes = Vec::new();
        for (name, paths) in &files {
            let prior = old.slots.get(name);
            let (mut slot, outcome) = self.load_slot(name, paths, prior);
            if matches!(outcome, Outcome::Failed { .. }) {
                slot.load_failures += 1;
            }
            outcomes.push((name.clone(), outcome));
            next.slots.insert(name.clone(), slot);
        }
        for name in old.slots.keys() {
            if !files.contains_key(name) {
                outcomes.push((name.clone(), Outcome::Removed));
            }
        }
        self.current.store(Arc::new(next));
        outcomes
    }

    fn load_slot(&self, name: &str, paths: &[PathBuf], prior: Option<&Slot>) -> (Slot, Outcome) {
        let mut slot = prior.cloned().unwrap_or_else(|| Slot {
            current: None,
            previous: Vec::new(),
            error: None,
            stats: Arc::new(TableStats::new(Vec::new())),
            files: paths.to_vec(),
            load_failures: 0,
        });
        slot.files = paths.to_vec();
        // A good load after this clears the error: the outcome says the table recovered.
        let had_error = slot.error.is_some();
        let serving = slot.current.as_ref().map(|t| t.version.clone());
        let (path, bytes) = match pick(name, paths) {
            Ok(chosen) => chosen,
            Err(error) => {
                slot.error = Some(error.clone());
                return (slot, Outcome::Failed { error, serving });
            }
        };
        let path = &path;
        let version = version_of(&bytes);
        if let Some(current) = &slot.current {
            if current.version == version && current.path == *path {
                slot.error = None;
                return (slot, Outcome::Unchanged { version, recovered: had_error });
            }
        }
        match Table::from_bytes(path, &bytes, &self.sources.limits) {
            Ok(table) => {
                if let Some(old) = slot.current.take() {
                    slot.previous.push(old);
                    if slot.previous.len() > KEPT_VERSIONS {
                        slot.previous.remove(0);
                    }
                }
                slot.serve(Arc::new(table));
                slot.error = None;
                (slot, Outcome::Loaded { version, recovered: had_error })
            }
            Err(e) => {
                let error = e.to_string();
                slot.error = Some(e.summary());
                (slot, Outcome::Failed { error, serving })
            }
        }
    }

    /// Serves the previous good version of `name` again; returns it, or why not.
    pub fn rollback(&self, name: &str) -> Result<Arc<Table>, RollbackError> {
        let _serialized = self.reload_lock.lock();
        let old = self.current.load_full();
        let Some(slot) = old.slots.get(name) else { return Err(RollbackError::UnknownTable) };
        let mut slot = slot.clone();
        let Some(previous) = slot.previous.pop() else { return Err(RollbackError::NoPreviousVersion) };
        slot.serve(previous.clone());
        let mut next = Tables { slots: old.slots.clone() };
        next.slots.insert(name.to_string(), slot);
        self.current.store(Arc::new(next));
        Ok(previous)
    }
}

impl Sources {
    /// The files that make up the tables: name → paths (two paths is an error, except a `.cfb`
    /// beside its `.flash.json`).
    pub fn discover(&self) -> (BTreeMap<String, Vec<PathBuf>>, Vec<String>) {
        let mut by_name: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let mut problems = Vec::new();
        match std::fs::read_dir(&self.tables_dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let path = entry.path();
                    // Anything named like a table is one, even when it is not a readable file
                    // (a folder put in its place, a file without read permission): loading it
                    // fails, so the last good version keeps serving and /health says why.
                    if TableKind::of_path(&path).is_some() {
                        by_name.entry(table_name(&path)).or_default().push(path);
                    }
                }
            }
            Err(e) => problems.push(format!("cannot read tables_dir {}: {e}", self.tables_dir.display())),
        }
        if let Some(extra) = &self.extra {
            let same = by_name.values().flatten().any(|p| same_file(p, extra));
            if !same {
                by_name.entry(table_name(extra)).or_default().push(extra.clone());
            }
        }
        for paths in by_name.values_mut() {
            paths.sort();
        }
        (by_name, problems)
    }

    /// A cheap fingerprint of the table files (names, sizes, modification
    /// times), to notice changes without reading them.
    pub fn fingerprint(&self) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
        let (files, _) = self.discover();
        let mut out = Vec::new();
        for path in files.into_values().flatten() {
            let meta = std::fs::metadata(&path).ok();
            out.push((path, meta.as_ref().map(|m| m.len()).unwrap_or(0), meta.and_then(|m| m.modified().ok())));
        }
        out
    }
}

/// Why a rollback did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackError {
    /// no such table
    UnknownTable,
    /// nothing older is kept
    NoPreviousVersion,
}

/// The file a table name is served from, with its bytes: its only file; or, for a `.cfb` beside
/// the `.flash.json` it was compiled from (the SHA-256 the `.cfb` records is the source's), the
/// `.cfb`. A `.cfb` that is stale (compiled from another version of the source) or does not load
/// leaves the source to be served, with a warning in the log. Any other two files with one name
/// are an error naming both.
fn pick(name: &str, paths: &[PathBuf]) -> Result<(PathBuf, Vec<u8>), String> {
    let read = |p: &Path| super::read_table_file(p).map_err(|e| format!("{}: cannot read the file: {e}", p.display()));
    if let [one] = paths {
        return Ok((one.clone(), read(one)?));
    }
    let Some((compiled, source)) = flash_pair(paths) else {
        let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(format!("two files map to the table name \"{name}\": {}; rename one", list.join(" and ")));
    };
    let source_bytes = read(source)?;
    let why = match read(compiled) {
        Ok(bytes) if cfb::recorded_source(&bytes) == Some(Sha256::digest(&source_bytes).into()) => {
            match cfb::read(&bytes) {
                Ok(_) => return Ok((compiled.clone(), bytes)),
                Err(e) => format!("it does not load ({e})"),
            }
        }
        Ok(_) => "it was compiled from another version of the source (the SHA-256 it records differs)".to_string(),
        Err(e) => e,
    };
    log::warn!(
        "table \"{name}\": not serving {}: {why}; serving {} instead. Compile it again: clef flash compile {} -o {}",
        compiled.display(),
        source.display(),
        source.display(),
        compiled.display()
    );
    Ok((source.clone(), source_bytes))
}

/// `(the .cfb, the .flash.json)` when `paths` are exactly those two, side by side.
fn flash_pair(paths: &[PathBuf]) -> Option<(&PathBuf, &PathBuf)> {
    let [a, b] = paths else { return None };
    let kinds = (TableKind::of_path(a)?, TableKind::of_path(b)?);
    let (compiled, source) = match kinds {
        (TableKind::FlashCompiled, TableKind::Flash) => (a, b),
        (TableKind::Flash, TableKind::FlashCompiled) => (b, a),
        _ => return None,
    };
    (compiled.parent() == source.parent()).then_some((compiled, source))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}
