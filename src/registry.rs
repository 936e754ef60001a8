//! The set of tables a server serves, and the one thread that changes it.
//!
//! Requests read an immutable snapshot ([`Tables`] behind an `ArcSwap`: no lock, one load per
//! request). Every change — a reload (the file watcher, SIGHUP, `POST /reload`), a rollback, a
//! kill switch — is a request to one writer thread (see `writer`), which builds the next
//! snapshot off the request workers and publishes it in one store. Being the only writer, it
//! needs no lock, and changes apply one after the other in the order they were asked: a kill
//! switch set while a reload compiles applies to what that reload publishes, never to a
//! snapshot the reload then overwrites. What must survive a restart — kill switches and
//! rollback pins — it persists in `state_dir` (see `state`) before answering.
//!
//! A caller waits for the answer on a may channel: on a coroutine (an admin request) that parks
//! the coroutine, not its worker thread, so the worker's other connections are served while
//! the writer compiles; on a thread (SIGHUP, the watcher) it parks the thread.
//!
//! A table whose new file fails to load keeps serving its last good version; the failure is
//! kept for `/health` until a good file replaces it, and the same bytes are not compiled again
//! by later reloads. A table whose file disappears keeps serving for [`MISSING_GRACE`] (an
//! editor's save, a deploy that deletes and writes again), then is removed. A rollback pins the
//! table to the version it rolled back to until the table's own file holds new bytes. A kill
//! switch changes no compiled code: the writer publishes a copy of the table (sharing its
//! engine) whose enabled-rules bitset lacks the rule, which every core picks up with its next
//! snapshot.
//!
//! Compiling is the one slow change (seconds for 100,000 rules on a Pi): a reload reads and
//! compiles the files on a thread of its own, and meanwhile the writer goes on with kill
//! switches and rollbacks. Each takes effect before the reload, which then builds on what is
//! published when it ends, so it keeps them; reloads wait for the one under way.

pub mod overlay;
pub mod state;
mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;

use crate::metrics::TableStats;
use crate::table::flash::cfb;
use crate::table::{table_name, Limits, Table, TableKind};
pub use state::Pin;
use writer::{Reply, Request};

/// How many earlier good versions are kept for rollback.
pub const KEPT_VERSIONS: usize = 3;

/// How long a table whose file disappeared keeps serving its last version before it is
/// removed: an editor that saves by renaming the old file away and writing a new one, or a
/// deploy that deletes and copies, leaves the name without a file for a moment.
pub const MISSING_GRACE: Duration = Duration::from_secs(2);

/// What kind of failure keeps a table's latest file from serving: what the decision port may
/// say of it, where paths and the file's content are not shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// the file cannot be read: permissions, a folder in its place, too large
    Unreadable,
    /// the file was read but is not a valid table
    Invalid,
    /// two files map to the table's name
    NameClash,
    /// the file is gone: the last version serves until [`MISSING_GRACE`] ends
    Missing,
}

impl FailureKind {
    /// The failure in words that name no path and quote nothing of the file.
    pub fn describe(self) -> &'static str {
        match self {
            FailureKind::Unreadable => "its file cannot be read",
            FailureKind::Invalid => "its file is not a valid table",
            FailureKind::NameClash => "two files map to its name",
            FailureKind::Missing => "its file is gone; the table is removed unless the file comes back",
        }
    }
}

/// Why a table's latest file does not serve.
#[derive(Debug, Clone)]
pub struct TableError {
    /// what kind of failure
    pub kind: FailureKind,
    /// the first problem on one line, with the file's path and what it quotes of the file: for
    /// the admin listener and the log
    pub summary: String,
    /// every problem listed (what `POST /reload` answers and the log shows)
    pub full: Arc<str>,
    /// the file and the SHA-256 (hex) of the bytes that failed, when it could be read: the same
    /// bytes are not compiled again
    failed_bytes: Option<(PathBuf, String)>,
}

impl TableError {
    /// A failure whose message is one line.
    fn new(kind: FailureKind, message: String) -> TableError {
        TableError { kind, full: message.as_str().into(), summary: message, failed_bytes: None }
    }

    /// What the decision port says of the failure: its kind, and whether an older version serves.
    pub fn public(&self, serving: bool) -> String {
        let then = match (self.kind, serving) {
            (FailureKind::Missing, _) => "",
            (_, true) => "; the last good version serves",
            (_, false) => "; the table is not served",
        };
        format!("{}{then} (the admin listener's /health says more)", self.kind.describe())
    }
}

/// One table name: what serves now, what served before, and the latest failure.
#[derive(Debug, Clone)]
pub struct Entry {
    /// the version being served (None when the file never loaded), with the kill switches in force
    pub current: Option<Arc<Table>>,
    /// earlier good versions, newest last
    pub previous: Vec<Arc<Table>>,
    /// the latest load failure of this name's file, until a good file loads
    pub error: Option<TableError>,
    /// decision counters, kept across reloads while the rule ids stay the same
    pub stats: Arc<TableStats>,
    /// the file(s) the name comes from
    pub files: Vec<PathBuf>,
    /// failed loads of this name's file since the server started (at start and on reloads),
    /// kept across reloads for `clef_table_load_failures_total`
    pub load_failures: u64,
    /// the SHA-256 (hex) of what the table's file held at the last reload (`None` when it could
    /// not be read): what a rollback pin compares the file with
    pub file_sha256: Option<String>,
    /// the rollback pin in force, if any
    pub pin: Option<Pin>,
    /// kill switches for this table that name rules it does not have (a reload removed them):
    /// kept, in case the rule comes back, and reported
    pub switches_without_rule: Vec<String>,
    /// since when the name has had no file (it serves until [`MISSING_GRACE`] has passed)
    pub missing_since: Option<Instant>,
}

impl Entry {
    fn new(files: &[PathBuf]) -> Entry {
        Entry {
            current: None,
            previous: Vec::new(),
            error: None,
            stats: Arc::new(TableStats::new(Vec::new())),
            files: files.to_vec(),
            load_failures: 0,
            file_sha256: None,
            pin: None,
            switches_without_rule: Vec::new(),
            missing_since: None,
        }
    }

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
#[derive(Debug, Default, Clone)]
pub struct Tables {
    /// by name
    pub entries: BTreeMap<String, Entry>,
    /// tables removed since the server started because their file was gone, and when; a name
    /// leaves this list when it loads again
    pub removed: BTreeMap<String, SystemTime>,
}

impl Tables {
    /// The table serving `name` now.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// Names whose latest file failed to load, with the failure.
    pub fn errors(&self) -> impl Iterator<Item = (&str, &Entry, &TableError)> {
        self.entries.iter().filter_map(|(n, s)| s.error.as_ref().map(|e| (n.as_str(), s, e)))
    }
}

/// What a reload did to one table.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// a new version is serving
    Loaded {
        /// its served version (the file's, unless promoted parameter values serve)
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
    /// the table is pinned by a rollback and its file holds what it held then: the pinned
    /// version keeps serving
    Pinned {
        /// the version serving (pinned)
        version: String,
        /// the version the file holds
        file_version: String,
    },
    /// the file failed to load; the previous version (if any) keeps serving
    Failed {
        /// the diagnostic
        error: Arc<str>,
        /// the version still serving
        serving: Option<String>,
        /// the file holds the bytes that failed at the last reload: they were not compiled again
        again: bool,
    },
    /// the file is gone, for less than [`MISSING_GRACE`]: its last version keeps serving
    Missing {
        /// the version still serving
        serving: String,
    },
    /// the file is gone; the table is no longer served
    Removed,
}

/// What a reload did.
#[derive(Debug, Clone, Default)]
pub struct Reloaded {
    /// what happened to each table
    pub outcomes: Vec<(String, Outcome)>,
    /// tables whose rollback pin ended (their file changed, or is gone), with the version they
    /// were pinned to
    pub unpinned: Vec<(String, String)>,
    /// tables with kill switches for rules they do not have, with those rule ids
    pub switches_without_rule: Vec<(String, Vec<String>)>,
    /// why the changed state could not be saved in `state_dir`, if it could not
    pub persist_error: Option<PersistError>,
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
    /// where promoted parameter values are kept (see [`overlay`]): applied to every
    /// table loaded; `None`: the files' values serve
    pub overlays: Option<PathBuf>,
}

/// The served tables, and the handle to the thread that changes them.
#[derive(Debug)]
pub struct Registry {
    published: Arc<ArcSwap<Tables>>,
    sources: Sources,
    state_dir: Option<PathBuf>,
    requests: crossbeam::channel::Sender<Request>,
}

/// Why the registry's writer could not answer a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterError {
    /// its queue is full
    Busy,
    /// it failed while handling the request (a bug: the log says more), or has stopped
    Failed,
}

impl std::fmt::Display for WriterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriterError::Busy => "the table registry has too many changes queued; retry",
            WriterError::Failed => "the table registry failed while handling this change; see the log",
        })
    }
}

/// A rollback done: the version now serving, pinned.
#[derive(Debug, Clone)]
pub struct RolledBack {
    /// the version serving now
    pub table: Arc<Table>,
    /// why the pin could not be saved in `state_dir` (it holds until a restart), if it could not
    pub persist_error: Option<PersistError>,
}

/// Why a change that took effect (a reload's pins, a kill switch, a rollback) could not be saved
/// in `state_dir`: it holds until the server restarts.
#[derive(Debug, Clone)]
pub enum PersistError {
    /// the file of kill switches and rollback pins could not be written
    SaveState {
        /// the state file
        path: PathBuf,
        /// what the file system said
        cause: Arc<std::io::Error>,
    },
    /// the source of the version a rollback pinned could not be kept in `pins/`
    KeepPinSource {
        /// the pinned version
        version: String,
        /// the state folder
        dir: PathBuf,
        /// why not
        cause: PinSourceProblem,
    },
}

/// Why a pinned version's source could not be kept.
#[derive(Debug, Clone)]
pub enum PinSourceProblem {
    /// the registry did not keep that version's bytes
    NotKept,
    /// writing it failed
    Write(Arc<std::io::Error>),
}

impl std::fmt::Display for PersistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PersistError::SaveState { path, cause } => write!(f, "cannot save {}: {cause}", path.display()),
            PersistError::KeepPinSource { version, dir, cause } => {
                write!(f, "cannot keep the source of version {version} in {}: ", dir.display())?;
                match cause {
                    PinSourceProblem::NotKept => f.write_str("its source was not kept"),
                    PinSourceProblem::Write(e) => write!(f, "{e}"),
                }
            }
        }
    }
}

impl std::error::Error for PersistError {}

/// Why a rollback did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackError {
    /// no such table
    UnknownTable,
    /// nothing older is kept
    NoPreviousVersion,
    /// the writer did not answer
    Writer(WriterError),
}

/// A kill switch set (SPEC §8.3).
#[derive(Debug, Clone)]
pub struct Switched {
    /// whether the rule takes part in decisions now
    pub enabled: bool,
    /// whether the table file itself disables the rule (`"enabled": false`)
    pub disabled_in_file: bool,
    /// whether the request changed anything
    pub changed: bool,
    /// the ids of the table's rules switched off now, in rule order
    pub switched_off: Vec<String>,
    /// why the switch could not be saved in `state_dir` (it holds until a restart), if it could not
    pub persist_error: Option<PersistError>,
}

/// Why a kill switch was not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchError {
    /// no such table
    UnknownTable,
    /// the table's file has never loaded: its rules are not known
    Unavailable,
    /// a flash table: it has cells, not rules
    NoRules,
    /// the table has no rule with this id (and no switch for one)
    UnknownRule,
    /// switching on a rule the table file disables, which a kill switch cannot do
    DisabledInFile,
    /// the writer did not answer
    Writer(WriterError),
}

impl Registry {
    /// Loads every table once, keeping kill switches and rollback pins in memory only (tools
    /// and tests; the server uses [`Registry::open_in`]).
    pub fn open(sources: Sources) -> (Registry, Reloaded) {
        Registry::open_in(sources, None)
    }

    /// Starts the writer with the state saved in `state_dir` (kill switches, pins; a state
    /// file that cannot be read is logged and set aside, and the tables serve as their files
    /// say), and loads every table once.
    pub fn open_in(sources: Sources, state_dir: Option<PathBuf>) -> (Registry, Reloaded) {
        let published = Arc::new(ArcSwap::from_pointee(Tables::default()));
        let requests = writer::start(published.clone(), sources.clone(), state_dir.clone());
        let registry = Registry { published, sources, state_dir, requests };
        let loaded = registry.reload().unwrap_or_else(|e| {
            log::error!("loading the tables: {e}");
            Reloaded::default()
        });
        (registry, loaded)
    }

    /// Where the tables come from.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// Where kill switches and pins are saved, if anywhere.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// The tables served now, as a request reads them (a published set; a reload publishes
    /// another and leaves this one to the requests that hold it).
    pub fn served(&self) -> arc_swap::Guard<Arc<Tables>> {
        self.published.load()
    }

    /// Re-reads every table file; returns what happened to each name.
    pub fn reload(&self) -> Result<Reloaded, WriterError> {
        self.ask(Request::Reload)
    }

    /// Serves the previous good version of `name` again and pins the table to it (until its
    /// file changes); returns it, or why not.
    pub fn rollback(&self, name: &str) -> Result<RolledBack, RollbackError> {
        let table = name.to_string();
        self.ask(|reply| Request::Rollback { table, reply }).map_err(RollbackError::Writer)?
    }

    /// Switches rule `rule` of table `name` off (`enabled: false`) or back on, at once on every
    /// core and saved for restarts.
    pub fn set_enabled(&self, name: &str, rule: &str, enabled: bool) -> Result<Switched, SwitchError> {
        let (table, rule) = (name.to_string(), rule.to_string());
        self.ask(|reply| Request::SetEnabled { table, rule, enabled, reply }).map_err(SwitchError::Writer)?
    }

    /// Builds table `name` again from its file with the promoted values now kept for it (after
    /// a promotion: the file has not changed, its values have), and serves it.
    pub fn reapply(&self, name: &str) -> Result<Reloaded, WriterError> {
        let table = name.to_string();
        self.ask(|reply| Request::Reapply { table, reply })
    }

    /// Sends a request to the writer and waits for its answer (parking the coroutine or thread).
    fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, WriterError> {
        let (reply, answer) = may::sync::mpsc::channel();
        self.requests.try_send(request(reply)).map_err(|e| match e {
            crossbeam::channel::TrySendError::Full(_) => WriterError::Busy,
            crossbeam::channel::TrySendError::Disconnected(_) => WriterError::Failed,
        })?;
        answer.recv().map_err(|_| WriterError::Failed)
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

/// The file a table name is served from, with its bytes: its only file; or, for a `.cfb` beside
/// the `.flash.json` it was compiled from (the SHA-256 the `.cfb` records is the source's), the
/// `.cfb`. Any other two files with one name are an error naming both (SPEC §11), a `.cfb`
/// beside a source it was not compiled from (or that records none) too: serving either would
/// hide that the other is not what it looks like. `clef test` and `clef check` pair files
/// with it, as the server does.
pub fn pick(name: &str, paths: &[PathBuf]) -> Result<(PathBuf, Vec<u8>), TableError> {
    let read =
        |p: &Path| crate::table::read_table_file(p).map_err(|e| format!("{}: cannot read the file: {e}", p.display()));
    let unreadable = |e| TableError::new(FailureKind::Unreadable, e);
    if let [one] = paths {
        return Ok((one.clone(), read(one).map_err(unreadable)?));
    }
    let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let both = format!("two files map to the table name \"{name}\": {}", list.join(" and "));
    let Some((compiled, source)) = flash_pair(paths) else {
        return Err(TableError::new(FailureKind::NameClash, format!("{both}; rename one")));
    };
    let source_bytes = read(source).map_err(unreadable)?;
    let bytes = read(compiled).map_err(unreadable)?;
    let why = match cfb::recorded_source(&bytes) {
        Some(recorded) if recorded == crate::table::file_digest(&source_bytes) => {
            return Ok((compiled.clone(), bytes));
        }
        Some(recorded) if recorded != [0; 32] => {
            "was compiled from another version of the source (the SHA-256 it records differs)"
        }
        _ => "does not record the source it was compiled from",
    };
    let message = format!(
        "{both}, and {} {why}; compile it again (clef flash compile {} -o {}) or remove one",
        compiled.display(),
        source.display(),
        compiled.display()
    );
    Err(TableError::new(FailureKind::NameClash, message))
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
