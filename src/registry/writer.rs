//! The registry's one writer: a thread that performs every change to what serves, in the order
//! asked, and publishes each result as a new immutable [`Tables`].
//!
//! A change is a [`Request`] carrying the channel its answer goes back on; adding a kind of
//! change (a tuning promotion: a params overlay for a table, persisted like a pin) is one more
//! variant and one more method here. The thread owns the persisted [`State`]: a change updates
//! it, publishes, then saves it (atomically, see `state`) before answering, so an answer that
//! says `persisted` is on the disk. Old snapshots are dropped on this thread too, once no
//! request holds them (dropping a large table is not free, and a worker should not pay it).
//!
//! A reload goes in two steps. A thread of its own reads the files, sees which changed and
//! compiles those ([`Plan`]): the slow part, seconds for a large table on a Pi. Then the writer
//! builds the next snapshot from the one published at that moment, and publishes it. Meanwhile
//! the writer goes on with kill switches and rollbacks: a change asked while a reload is under
//! way takes effect before it, and the reload, built on what is published when it ends, keeps
//! it (a switch is in `State`, a rollback's pin holds while the file holds what it held). Other
//! reloads wait in `deferred` and run, in order, once this one is published.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};

use super::state::{Pin, PinSourceError, State, Store};
use super::{
    pick, Entry, FailureKind, Outcome, PersistError, PinSourceProblem, Reloaded, RollbackError, RolledBack, Sources,
    SwitchError, Switched, TableError, Tables, KEPT_VERSIONS, MISSING_GRACE,
};
use crate::table::{Engine, LoadError, Table};

/// Requests the writer holds at most: more than the admin listener's connections (each waits
/// for its answer before sending another) plus the SIGHUP and watcher threads.
const QUEUE: usize = 256;
/// How often retired snapshots are looked at when no request comes.
const TICK: Duration = Duration::from_secs(1);
/// The zstd level of the sources kept in memory for pins: fast, and JSON shrinks several-fold.
const PACK_LEVEL: i32 = 1;

/// Where an answer goes: a may channel, so that waiting parks a coroutine, not its thread.
pub(super) type Reply<T> = may::sync::mpsc::Sender<T>;

/// One change to the registry, with where its answer goes.
pub(super) enum Request {
    /// re-read every table file
    Reload(Reply<Reloaded>),
    /// serve a table's previous version and pin it there
    Rollback { table: String, reply: Reply<Result<RolledBack, RollbackError>> },
    /// set a kill switch
    SetEnabled { table: String, rule: String, enabled: bool, reply: Reply<Result<Switched, SwitchError>> },
    /// build a table again with its promoted parameter values (a tuning promotion)
    Reapply { table: String, reply: Reply<Reloaded> },
}

impl Request {
    /// Whether the request reads the table files again (a reload waits for the one under way).
    fn is_reload(&self) -> bool {
        matches!(self, Request::Reload(_) | Request::Reapply { .. })
    }
}

/// Starts the writer thread; it runs until every sender is dropped.
// without its one writer the registry cannot change; a process that cannot start a thread at
// start-up cannot serve either
#[allow(clippy::expect_used)]
pub(super) fn start(published: Arc<ArcSwap<Tables>>, sources: Sources, state_dir: Option<PathBuf>) -> Sender<Request> {
    let (sender, requests) = crossbeam::channel::bounded(QUEUE);
    let mut writer = Writer {
        published,
        sources,
        store: state_dir.map(Store::new),
        state: State::default(),
        retired: Vec::new(),
        deferred: VecDeque::new(),
        reloading: None,
    };
    std::thread::Builder::new()
        .name("clef-registry".into())
        .spawn(move || {
            writer.load_state();
            writer.run(requests);
        })
        .expect("start the registry writer thread");
    sender
}

struct Writer {
    published: Arc<ArcSwap<Tables>>,
    sources: Sources,
    store: Option<Store>,
    state: State,
    /// snapshots replaced but maybe still read by a request
    retired: Vec<Arc<Tables>>,
    /// reloads asked while another was under way, in the order they came
    deferred: VecDeque<Request>,
    /// the reload under way, if one is
    reloading: Option<Reloading>,
}

/// What a reload read of the table files, and the tables it compiled from them.
struct Plan {
    /// every table name with a file, and its files
    files: BTreeMap<String, Vec<PathBuf>>,
    /// what was read for each name in `files`
    read: BTreeMap<String, Result<FileRead, TableError>>,
    /// the name built again whatever its file holds (its promoted values changed)
    forced: Option<String>,
    /// the tables built from files that changed
    built: BTreeMap<String, Built>,
}

/// The file a table name serves from, as a reload read it.
struct FileRead {
    path: PathBuf,
    bytes: Vec<u8>,
    /// the file's SHA-256, computed once per read and handed to the build
    digest: [u8; 32],
    sha256: String,
    version: String,
}

/// A table built from its file, or why not.
type Built = Result<Table, LoadError>;

/// A reload whose files are being read and compiled on another thread.
struct Reloading {
    /// where the plan comes back (nothing, should the thread fail: a bug)
    plan: Receiver<Plan>,
    /// who asked for the reload
    reply: Reply<Reloaded>,
}

impl Writer {
    fn run(&mut self, requests: Receiver<Request>) {
        loop {
            let retired = self.retired.len();
            let changed = match self.next_event(&requests) {
                Event::Request(request) => {
                    self.guarded(|w| w.take(request));
                    true
                }
                Event::Planned(plan) => {
                    self.guarded(|w| w.finish_reload(plan));
                    true
                }
                Event::Timeout => {
                    if self.reloading.is_none() {
                        self.guarded(Writer::remove_missing);
                    }
                    false
                }
                Event::Stop => return,
            };
            // Arc::strong_count is exact here: publishing paid every reader's debt on the old
            // snapshot, so a count of 1 means no request holds it any more.
            self.retired.retain(|t| Arc::strong_count(t) > 1);
            if changed || self.retired.len() < retired {
                // compiling and retired tables freed memory on this thread: give it back now
                crate::memory::release(true);
            }
        }
    }

    /// Runs one step; a bug in it must not stop every later change: a request whose handling
    /// panicked gets no answer (its reply channel drops: the caller sees `WriterError::Failed`),
    /// the thread goes on.
    fn guarded(&mut self, step: impl FnOnce(&mut Writer)) {
        if std::panic::catch_unwind(AssertUnwindSafe(|| step(self))).is_err() {
            log::error!("the table registry failed while handling a change (a bug); it goes on");
        }
    }

    /// What to do next: a deferred reload once none is under way, else whatever comes first of
    /// a new request, the plan of the reload under way, and the end of a missing file's grace.
    fn next_event(&mut self, requests: &Receiver<Request>) -> Event {
        if self.reloading.is_none() {
            if let Some(request) = self.deferred.pop_front() {
                return Event::Request(request);
            }
        }
        let wait =
            self.next_missing_deadline().map_or(TICK, |at| at.saturating_duration_since(Instant::now()).min(TICK));
        let Some(reloading) = &self.reloading else {
            return match requests.recv_timeout(wait) {
                Ok(request) => Event::Request(request),
                Err(RecvTimeoutError::Timeout) => Event::Timeout,
                Err(RecvTimeoutError::Disconnected) => Event::Stop,
            };
        };
        crossbeam::channel::select! {
            recv(requests) -> request => request.map_or(Event::Stop, Event::Request),
            recv(reloading.plan) -> plan => match plan {
                Ok(plan) => Event::Planned(plan),
                Err(_) => {
                    // the thread failed (a bug): its caller's reply drops, and it sees the failure
                    log::error!("the table registry failed while reloading (a bug); it goes on");
                    self.reloading = None;
                    Event::Timeout
                }
            },
            default(wait) => Event::Timeout,
        }
    }

    /// Handles a request now, or, for a reload while another is under way, once that one is
    /// published.
    fn take(&mut self, request: Request) {
        if self.reloading.is_some() && request.is_reload() {
            self.deferred.push_back(request);
            return;
        }
        self.handle(request);
    }

    fn handle(&mut self, request: Request) {
        // A caller that stopped waiting is no error: the change is made all the same.
        match request {
            Request::Reload(reply) => self.start_reload(None, reply),
            Request::Rollback { table, reply } => {
                let _ = reply.send(self.rollback(&table));
            }
            Request::SetEnabled { table, rule, enabled, reply } => {
                let _ = reply.send(self.set_enabled(&table, &rule, enabled));
            }
            Request::Reapply { table, reply } => self.start_reload(Some(table), reply),
        }
    }

    /// Reads the saved state; one that cannot be read is reported and set aside.
    fn load_state(&mut self) {
        let Some(store) = &self.store else { return };
        match store.load() {
            Ok(state) => {
                let switches: usize = state.switches.values().map(BTreeSet::len).sum();
                if switches > 0 || !state.pins.is_empty() {
                    log::info!(
                        "state from {}: {switches} kill switches, {} rollback pins",
                        store.state_path().display(),
                        state.pins.len()
                    );
                }
                self.state = state;
            }
            Err(e) => {
                let aside = store.set_aside();
                log::error!(
                    "{e}; ignoring it: no kill switch or rollback pin is in force, the tables serve as their files say{}",
                    aside.map(|p| format!(" (the file is kept as {})", p.display())).unwrap_or_default()
                );
            }
        }
    }

    /// Saves the state; the error, if it could not be.
    fn persist(&self) -> Option<PersistError> {
        let store = self.store.as_ref()?;
        match store.save(&self.state) {
            Ok(()) => None,
            Err(e) => {
                let e = PersistError::SaveState { path: store.state_path(), cause: Arc::new(e) };
                log::error!("{e}; the change holds until the server restarts");
                Some(e)
            }
        }
    }

    fn publish(&mut self, next: Tables) {
        let old = self.published.swap(Arc::new(next));
        self.retired.push(old);
    }

    // -----------------------------------------------------------------------------------------
    // reload

    /// Starts reading every table file and compiling those that changed (`forced` in any case:
    /// its promoted values changed) on a thread of their own; `reply` gets the answer once the
    /// result is published.
    fn start_reload(&mut self, forced: Option<String>, reply: Reply<Reloaded>) {
        let published = self.published.load_full();
        let pins = self.state.pins.clone();
        let sources = self.sources.clone();
        let (send, plan) = crossbeam::channel::bounded(1);
        let job = move || {
            let _ = send.send(plan_reload(&sources, &published, &pins, forced));
        };
        match std::thread::Builder::new().name("clef-reload".into()).spawn(job.clone()) {
            Ok(_) => self.reloading = Some(Reloading { plan, reply }),
            Err(e) => {
                log::warn!("cannot start a thread to reload the tables ({e}); the registry reloads them itself");
                job();
                if let Ok(plan) = plan.try_recv() {
                    let _ = reply.send(self.apply(plan));
                }
            }
        }
    }

    /// Publishes the reload whose plan came back.
    fn finish_reload(&mut self, plan: Plan) {
        let Some(reloading) = self.reloading.take() else { return };
        let reloaded = self.apply(plan);
        let _ = reloading.reply.send(reloaded);
    }

    /// Builds the next snapshot from what `plan` read and built, on the snapshot published now
    /// (with the kill switches and rollbacks made while it was read), and publishes it.
    fn apply(&mut self, plan: Plan) -> Reloaded {
        let old = self.published.load_full();
        let before = self.state.clone();
        let mut report = Reloaded::default();
        let mut next = Tables { entries: BTreeMap::new(), removed: old.removed.clone() };
        let Plan { files, mut read, forced, mut built } = plan;
        for (name, paths) in &files {
            let force = forced.as_deref() == Some(name.as_str());
            let Some(read) = read.remove(name) else { continue };
            let prior = old.entries.get(name);
            let (mut entry, outcome) =
                self.load_entry(name, paths, prior, read, built.remove(name), force, &mut report);
            if matches!(outcome, Outcome::Failed { .. }) {
                entry.load_failures += 1;
            }
            self.apply_switches(name, &mut entry);
            if !entry.switches_without_rule.is_empty() {
                report.switches_without_rule.push((name.clone(), entry.switches_without_rule.clone()));
            }
            report.outcomes.push((name.clone(), outcome));
            next.removed.remove(name);
            next.entries.insert(name.clone(), entry);
        }
        let now = Instant::now();
        for (name, entry) in old.entries.iter().filter(|(n, _)| !files.contains_key(*n)) {
            let since = entry.missing_since.unwrap_or(now);
            match &entry.current {
                Some(current) if now.duration_since(since) < MISSING_GRACE => {
                    let mut entry = entry.clone();
                    if entry.missing_since.is_none() {
                        log::warn!(
                            "table {name}: its file is gone; version {} serves for {} s more, then the table is \
                             removed unless the file comes back",
                            current.version,
                            MISSING_GRACE.as_secs()
                        );
                    }
                    entry.missing_since = Some(since);
                    entry.error = Some(missing_error(name, &entry));
                    report.outcomes.push((name.clone(), Outcome::Missing { serving: current.version.clone() }));
                    next.entries.insert(name.clone(), entry);
                }
                _ => {
                    report.outcomes.push((name.clone(), Outcome::Removed));
                    self.end_pin_of_removed(name, &mut report);
                    next.removed.insert(name.clone(), SystemTime::now());
                }
            }
        }
        self.publish(next);
        if self.state != before {
            report.persist_error = self.persist();
        }
        report
    }

    /// When the first table whose file is gone ends its grace.
    fn next_missing_deadline(&self) -> Option<Instant> {
        let tables = self.published.load();
        tables.entries.values().filter_map(|e| e.missing_since).min().map(|since| since + MISSING_GRACE)
    }

    /// Removes the tables whose file has been gone for [`MISSING_GRACE`] and still is; one whose
    /// file is back keeps serving what it served (the next reload reads the file).
    fn remove_missing(&mut self) {
        let old = self.published.load_full();
        let expired: Vec<&String> = old
            .entries
            .iter()
            .filter(|(_, e)| e.missing_since.is_some_and(|since| since.elapsed() >= MISSING_GRACE))
            .map(|(name, _)| name)
            .collect();
        if expired.is_empty() {
            return;
        }
        let (files, _) = self.sources.discover();
        let before = self.state.clone();
        let mut next = Tables::clone(&old);
        let mut report = Reloaded::default();
        for name in expired {
            if files.contains_key(name) {
                if let Some(entry) = next.entries.get_mut(name) {
                    log::info!("table {name}: its file is back; it keeps serving until the next reload reads it");
                    entry.missing_since = None;
                    entry.error = None;
                }
                continue;
            }
            log::warn!("table {name}: its file has been gone for {} s; removed", MISSING_GRACE.as_secs());
            next.entries.remove(name);
            next.removed.insert(name.clone(), SystemTime::now());
            self.end_pin_of_removed(name, &mut report);
        }
        self.publish(next);
        if self.state != before {
            self.persist();
        }
    }

    /// A removed table's rollback pin ends.
    fn end_pin_of_removed(&mut self, name: &str, report: &mut Reloaded) {
        if let Some(pin) = self.state.pins.remove(name) {
            log::info!("table {name}: its file is gone; the rollback pin to {} ends", pin.version);
            report.unpinned.push((name.to_string(), pin.version));
        }
    }

    /// The entry of `name` after a reload read `read` for it, and what happened; `built` is the
    /// table compiled from it, if the compiler had it (anything else needed is built here).
    #[allow(clippy::too_many_arguments)]
    fn load_entry(
        &mut self,
        name: &str,
        paths: &[PathBuf],
        prior: Option<&Entry>,
        read: Result<FileRead, TableError>,
        built: Option<Built>,
        force: bool,
        report: &mut Reloaded,
    ) -> (Entry, Outcome) {
        let mut entry = prior.cloned().unwrap_or_else(|| Entry::new(paths));
        entry.files = paths.to_vec();
        // A good load after this clears the error: the outcome says the table recovered.
        let had_error = entry.error.is_some();
        if entry.missing_since.take().is_some() {
            // the file is back
            entry.error = None;
        }
        let serving = entry.current.as_ref().map(|t| t.version.clone());
        let read = match read {
            Ok(read) => read,
            Err(error) => {
                // An unreadable file holds no new content: a pin stays.
                let full = error.full.clone();
                entry.error = Some(error);
                return (entry, Outcome::Failed { error: full, serving, again: false });
            }
        };
        let failed_before = entry.error.as_ref().is_some_and(|e| e.failed(&read));
        let FileRead { path, bytes, digest: file_digest, sha256: digest, version } = read;
        entry.file_sha256 = Some(digest.clone());
        if let Some(pin) = self.state.pins.get(name).cloned() {
            if pin.file_sha256 == digest {
                match self.pinned_table(&pin, entry.current.as_ref().filter(|_| !force)) {
                    Ok(table) => {
                        let serving = table.version.clone();
                        if !entry.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &table)) {
                            log::info!(
                                "table {name}: serving version {}, which a rollback pinned it to at {}; its file holds \
                                 {version}",
                                pin.version,
                                pin.since
                            );
                            entry.serve(table);
                        }
                        entry.pin = Some(pin.clone());
                        return (entry, Outcome::Pinned { version: serving, file_version: version });
                    }
                    Err(e) => log::error!(
                        "table {name}: cannot serve version {}, which a rollback pinned it to: {e}; the pin ends and \
                         the file serves",
                        pin.version
                    ),
                }
            } else {
                log::info!(
                    "table {name}: its file changed (now version {version}); the rollback pin to {} ends",
                    pin.version
                );
            }
            self.state.pins.remove(name);
            report.unpinned.push((name.to_string(), pin.version));
            entry.pin = None;
        }
        if let Some(current) = entry.current.as_ref().filter(|_| !force) {
            if current.file_version == version && current.path == path {
                entry.error = None;
                let version = current.version.clone();
                return (entry, Outcome::Unchanged { version, recovered: had_error });
            }
        }
        if failed_before && !force && built.is_none() {
            // the bytes that failed last time fail again: they are not compiled twice
            let error = entry.error.as_ref().map(|e| e.full.clone()).unwrap_or_default();
            return (entry, Outcome::Failed { error, serving, again: true });
        }
        match built.unwrap_or_else(|| build(&path, &bytes, file_digest, &self.sources)) {
            Ok(table) => {
                if let Some(old) = entry.current.take() {
                    entry.previous.push(old);
                    if entry.previous.len() > KEPT_VERSIONS {
                        entry.previous.remove(0);
                    }
                }
                // the served version: the file's, or with promoted values another
                let version = table.version.clone();
                entry.serve(Arc::new(table));
                entry.error = None;
                (entry, Outcome::Loaded { version, recovered: had_error })
            }
            Err(e) => {
                let full: Arc<str> = e.to_string().into();
                entry.error = Some(TableError {
                    kind: FailureKind::Invalid,
                    summary: e.summary(),
                    full: full.clone(),
                    failed_bytes: Some((path, digest)),
                });
                (entry, Outcome::Failed { error: full, serving, again: false })
            }
        }
    }

    /// The table a pin serves: the one serving already, or (after a restart) built again from
    /// the source kept in `state_dir`.
    fn pinned_table(&self, pin: &Pin, current: Option<&Arc<Table>>) -> Result<Arc<Table>, PinSourceError> {
        if let Some(c) = current.filter(|c| c.file_version == pin.version && c.path == pin.path) {
            return Ok(c.clone());
        }
        let store = self.store.as_ref().ok_or(PinSourceError::NotKept)?;
        let bytes = store.read_pin_source(pin)?;
        let digest = crate::table::file_digest(&bytes);
        build(&pin.path, &bytes, digest, &self.sources)
            .map(Arc::new)
            .map_err(|e| PinSourceError::DoesNotLoad(e.summary()))
    }

    // -----------------------------------------------------------------------------------------
    // kill switches

    /// Serves `entry`'s table with the kill switches saved for `name`, and notes the switches
    /// for rules it does not have (logged when that set changes: a reload removed a rule).
    fn apply_switches(&self, name: &str, entry: &mut Entry) {
        let none = BTreeSet::new();
        let ids = self.state.switches.get(name).unwrap_or(&none);
        let Some(current) = &entry.current else { return };
        let (table, missing) = with_switches(current, ids);
        if !Arc::ptr_eq(&table, current) {
            entry.serve(table);
        }
        if missing != entry.switches_without_rule && !missing.is_empty() {
            log::warn!(
                "table {name}: kill switches for rules it does not have: {}; they are kept (in force should the \
                 rules come back); PUT /tables/{name}/rules/ID/enabled true removes one",
                missing.join(", ")
            );
        }
        entry.switches_without_rule = missing;
    }

    fn set_enabled(&mut self, name: &str, rule: &str, enabled: bool) -> Result<Switched, SwitchError> {
        let old = self.published.load_full();
        let entry = old.entries.get(name).ok_or(SwitchError::UnknownTable)?;
        let current = entry.current.as_ref().ok_or(SwitchError::Unavailable)?;
        if let Engine::Flash(_) = &*current.engine {
            return Err(SwitchError::NoRules);
        }
        let rules = current.engine.rules();
        let index = rules.iter().position(|r| r.id == rule);
        let had = self.state.switches.get(name).is_some_and(|s| s.contains(rule));
        let disabled_in_file = index.and_then(|i| rules.get(i)).is_some_and(|r| !r.enabled);
        match index {
            // a switch for a rule the table no longer has may be removed
            None if !(enabled && had) => return Err(SwitchError::UnknownRule),
            Some(_) if enabled && !had && disabled_in_file => return Err(SwitchError::DisabledInFile),
            _ => {}
        }
        let changed = had == enabled;
        let mut persist_error = None;
        let mut entry = entry.clone();
        if changed {
            if enabled {
                if let Some(ids) = self.state.switches.get_mut(name) {
                    ids.remove(rule);
                    if ids.is_empty() {
                        self.state.switches.remove(name);
                    }
                }
            } else {
                self.state.switches.entry(name.to_string()).or_default().insert(rule.to_string());
            }
            self.apply_switches(name, &mut entry);
            let mut next = Tables::clone(&old);
            next.entries.insert(name.to_string(), entry.clone());
            self.publish(next);
            persist_error = self.persist();
            log::info!("table {name}: rule {rule} switched {} (kill switch)", if enabled { "on" } else { "off" });
        }
        let serving = entry.current.as_ref().unwrap_or(current);
        Ok(Switched {
            enabled: index.is_some_and(|i| serving.outcome_enabled(i)),
            disabled_in_file,
            changed,
            switched_off: serving.switched_off_ids().to_vec(),
            persist_error,
        })
    }

    // -----------------------------------------------------------------------------------------
    // rollback

    fn rollback(&mut self, name: &str) -> Result<RolledBack, RollbackError> {
        let old = self.published.load_full();
        let mut entry = old.entries.get(name).ok_or(RollbackError::UnknownTable)?.clone();
        let previous = entry.previous.pop().ok_or(RollbackError::NoPreviousVersion)?;
        let mut pin = Pin {
            version: previous.file_version.clone(),
            path: previous.path.clone(),
            // what the file held at the last reload: a file whose bytes were never read has
            // no content to keep, and any it gets ends the pin
            file_sha256: entry.file_sha256.clone().unwrap_or_default(),
            source: String::new(),
            since: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        };
        let mut persist_error = None;
        if let Some(store) = &self.store {
            let written = unpack(&previous).ok_or(PinSourceProblem::NotKept).and_then(|bytes| {
                store
                    .write_pin_source(&pin.version, &pin.path, &bytes)
                    .map_err(|e| PinSourceProblem::Write(Arc::new(e)))
            });
            match written {
                Ok(source) => pin.source = source,
                Err(cause) => {
                    let e = PersistError::KeepPinSource {
                        version: pin.version.clone(),
                        dir: store.dir().to_path_buf(),
                        cause,
                    };
                    log::error!("table {name}: {e}; the pin holds until the server restarts");
                    persist_error = Some(e);
                }
            }
        }
        entry.serve(previous);
        entry.pin = Some(pin.clone());
        self.state.pins.insert(name.to_string(), pin);
        self.apply_switches(name, &mut entry);
        let table = entry.current.clone().ok_or(RollbackError::NoPreviousVersion)?;
        let mut next = Tables::clone(&old);
        next.entries.insert(name.to_string(), entry);
        self.publish(next);
        let saved = self.persist();
        let persist_error = persist_error.or(saved);
        log::info!("table {name}: rolled back to version {}; pinned there until its file changes", table.version);
        Ok(RolledBack { table, persist_error })
    }
}

/// `table` with the kill switches `ids` (itself when they are those it has), and the ids it has
/// no rule for.
fn with_switches(table: &Arc<Table>, ids: &BTreeSet<String>) -> (Arc<Table>, Vec<String>) {
    if ids.is_empty() && table.switched_off_ids().is_empty() {
        return (table.clone(), Vec::new());
    }
    let (switched, missing) = table.with_switched_off(ids);
    if switched.switched_off_ids() == table.switched_off_ids() {
        return (table.clone(), missing);
    }
    (Arc::new(switched), missing)
}

/// What the writer does next.
enum Event {
    /// a request, new or deferred
    Request(Request),
    /// what the reload under way read and built
    Planned(Plan),
    /// nothing came: time to look at missing files and retired snapshots
    Timeout,
    /// every sender is gone
    Stop,
}

/// Builds a table from its file's bytes as the registry serves it: with its source packed (for
/// a later pin) and the parameter values promoted for it applied.
fn build(path: &Path, bytes: &[u8], digest: [u8; 32], sources: &Sources) -> Built {
    let mut table = Table::from_digested_bytes(path, bytes, digest, &sources.limits)?;
    table.keep_packed_source(pack(bytes));
    Ok(match &sources.overlays {
        Some(folder) => crate::registry::overlay::apply(table, folder),
        None => table,
    })
}

/// What the table files hold now, each name's file read and hashed, and the tables built from
/// those that changed since `published` (or that `forced` names). A table whose compiling
/// panics (a bug) is a load error; the others still load.
fn plan_reload(sources: &Sources, published: &Tables, pins: &BTreeMap<String, Pin>, forced: Option<String>) -> Plan {
    let (files, problems) = sources.discover();
    for p in problems {
        log::error!("{p}");
    }
    let mut read = BTreeMap::new();
    let mut built = BTreeMap::new();
    for (name, paths) in &files {
        let file = pick(name, paths).map(|(path, bytes)| {
            let digest = crate::table::file_digest(&bytes);
            let sha256 = crate::table::digest_hex(&digest);
            // the version is the start of the same digest (see `version_of`)
            let version = sha256.get(..12).unwrap_or(&sha256).to_string();
            FileRead { path, bytes, digest, sha256, version }
        });
        if let Ok(file) = &file {
            let force = forced.as_deref() == Some(name.as_str());
            if needs_build(pins.get(name), published.get(name), file, force) {
                let table =
                    std::panic::catch_unwind(AssertUnwindSafe(|| build(&file.path, &file.bytes, file.digest, sources)));
                let table = table.unwrap_or_else(|_| {
                    log::error!("table {name}: compiling {} failed (a bug in clef)", file.path.display());
                    let why = "the table could not be compiled (a bug in clef; the log says more)".to_string();
                    Err(LoadError::single(&file.path.display().to_string(), why))
                });
                built.insert(name.clone(), table);
            }
        }
        read.insert(name.clone(), file);
    }
    Plan { files, read, forced, built }
}

/// Whether a reload must compile `file` for a table with `entry` (see [`Writer::load_entry`],
/// which decides: it builds what this did not foresee, and ignores what it need not use).
fn needs_build(pin: Option<&Pin>, entry: Option<&Entry>, file: &FileRead, force: bool) -> bool {
    if pin.is_some_and(|pin| pin.file_sha256 == file.sha256) {
        return false;
    }
    if force {
        return true;
    }
    let current = entry.and_then(|e| e.current.as_ref());
    let unchanged = current.is_some_and(|c| c.file_version == file.version && c.path == file.path);
    let failed_before = entry.and_then(|e| e.error.as_ref()).is_some_and(|e| e.failed(file));
    !unchanged && !failed_before
}

/// What `/health` says of a table whose file is gone and that still serves.
fn missing_error(name: &str, entry: &Entry) -> TableError {
    let files: Vec<String> = entry.files.iter().map(|f| f.display().to_string()).collect();
    TableError::new(
        FailureKind::Missing,
        format!(
            "table {name}: {} is gone; the last version serves for up to {} s, then the table is removed unless \
             the file comes back",
            files.join(" and "),
            MISSING_GRACE.as_secs()
        ),
    )
}

impl TableError {
    /// Whether these are the bytes that failed.
    fn failed(&self, read: &FileRead) -> bool {
        self.failed_bytes.as_ref().is_some_and(|(path, sha)| *path == read.path && *sha == read.sha256)
    }
}

/// A table file's bytes, compressed, to keep in memory for a later pin.
fn pack(bytes: &[u8]) -> Option<Arc<[u8]>> {
    zstd::bulk::compress(bytes, PACK_LEVEL).ok().map(Arc::from)
}

/// The bytes of a table's file, from what [`pack`] kept.
fn unpack(table: &Table) -> Option<Vec<u8>> {
    let packed = table.packed_source()?;
    zstd::bulk::decompress(packed, crate::table::MAX_TABLE_BYTES as usize).ok()
}
