//! The registry's one writer: a thread that performs every change to what serves, in the order
//! asked, and publishes each result as a new immutable [`Tables`].
//!
//! A change is a [`Request`] carrying the channel its answer goes back on; adding a kind of
//! change (a tuning promotion: a params overlay for a table, persisted like a pin) is one more
//! variant and one more method here. The thread owns the persisted [`State`]: a change updates
//! it, publishes, then saves it (atomically, see `state`) before answering, so an answer that
//! says `persisted` is on the disk. Old snapshots are dropped on this thread too, once no
//! request holds them (dropping a large table is not free, and a worker should not pay it).

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};

use super::state::{sha256_hex, Pin, State, Store};
use super::{
    pick, Entry, Outcome, Reloaded, RollbackError, RolledBack, Sources, SwitchError, Switched, Tables, KEPT_VERSIONS,
};
use crate::table::{version_of, Engine, Table};

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

/// Starts the writer thread; it runs until every sender is dropped.
// without its one writer the registry cannot change; a process that cannot start a thread at
// start-up cannot serve either
#[allow(clippy::expect_used)]
pub(super) fn start(published: Arc<ArcSwap<Tables>>, sources: Sources, state_dir: Option<PathBuf>) -> Sender<Request> {
    let (sender, requests) = crossbeam::channel::bounded(QUEUE);
    let mut writer =
        Writer { published, sources, store: state_dir.map(Store::new), state: State::default(), retired: Vec::new() };
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
}

impl Writer {
    fn run(&mut self, requests: Receiver<Request>) {
        loop {
            let retired = self.retired.len();
            let mut changed = false;
            match requests.recv_timeout(TICK) {
                Ok(request) => {
                    changed = true;
                    // A bug in one change must not stop every later one: the request whose
                    // handling panicked gets no answer (its reply channel drops: the caller
                    // sees `WriterError::Failed`), the thread goes on.
                    if std::panic::catch_unwind(AssertUnwindSafe(|| self.handle(request))).is_err() {
                        log::error!("the table registry failed while handling a change (a bug); it goes on");
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Arc::strong_count is exact here: publishing paid every reader's debt on the old
            // snapshot, so a count of 1 means no request holds it any more.
            self.retired.retain(|t| Arc::strong_count(t) > 1);
            if changed || self.retired.len() < retired {
                // compiling and retired tables freed memory on this thread: give it back now
                crate::memory::release(true);
            }
        }
    }

    fn handle(&mut self, request: Request) {
        // A caller that stopped waiting is no error: the change is made all the same.
        match request {
            Request::Reload(reply) => {
                let _ = reply.send(self.reload());
            }
            Request::Rollback { table, reply } => {
                let _ = reply.send(self.rollback(&table));
            }
            Request::SetEnabled { table, rule, enabled, reply } => {
                let _ = reply.send(self.set_enabled(&table, &rule, enabled));
            }
            Request::Reapply { table, reply } => {
                let _ = reply.send(self.reload_forcing(Some(&table)));
            }
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
    fn persist(&self) -> Option<String> {
        let store = self.store.as_ref()?;
        match store.save(&self.state) {
            Ok(()) => None,
            Err(e) => {
                let e = format!("cannot save {}: {e}", store.state_path().display());
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

    fn reload(&mut self) -> Reloaded {
        self.reload_forcing(None)
    }

    /// Re-reads every table file; `forced` is built again even if its file is unchanged (its
    /// promoted values changed).
    fn reload_forcing(&mut self, forced: Option<&str>) -> Reloaded {
        let old = self.published.load_full();
        let before = self.state.clone();
        let (files, problems) = self.sources.discover();
        for p in problems {
            log::error!("{p}");
        }
        let mut report = Reloaded::default();
        let mut next = Tables::default();
        for (name, paths) in &files {
            let force = forced == Some(name.as_str());
            let (mut entry, outcome) = self.load_entry(name, paths, old.entries.get(name), force, &mut report);
            if matches!(outcome, Outcome::Failed { .. }) {
                entry.load_failures += 1;
            }
            self.apply_switches(name, &mut entry);
            if !entry.switches_without_rule.is_empty() {
                report.switches_without_rule.push((name.clone(), entry.switches_without_rule.clone()));
            }
            report.outcomes.push((name.clone(), outcome));
            next.entries.insert(name.clone(), entry);
        }
        for name in old.entries.keys().filter(|n| !files.contains_key(*n)) {
            report.outcomes.push((name.clone(), Outcome::Removed));
            if let Some(pin) = self.state.pins.remove(name) {
                log::info!("table {name}: its file is gone; the rollback pin to {} ends", pin.version);
                report.unpinned.push((name.clone(), pin.version));
            }
        }
        self.publish(next);
        if self.state != before {
            report.persist_error = self.persist();
        }
        report
    }

    fn load_entry(
        &mut self,
        name: &str,
        paths: &[PathBuf],
        prior: Option<&Entry>,
        force: bool,
        report: &mut Reloaded,
    ) -> (Entry, Outcome) {
        let mut entry = prior.cloned().unwrap_or_else(|| Entry::new(paths));
        entry.files = paths.to_vec();
        // A good load after this clears the error: the outcome says the table recovered.
        let had_error = entry.error.is_some();
        let serving = entry.current.as_ref().map(|t| t.version.clone());
        let (path, bytes) = match pick(name, paths) {
            Ok(chosen) => chosen,
            Err(error) => {
                // An unreadable file holds no new content: a pin stays.
                entry.error = Some(error.clone());
                return (entry, Outcome::Failed { error, serving });
            }
        };
        let digest = sha256_hex(&bytes);
        let version = version_of(&bytes);
        entry.file_sha256 = Some(digest.clone());
        if let Some(pin) = self.state.pins.get(name).cloned() {
            if pin.file_sha256 == digest {
                match self.pinned_table(&pin, entry.current.as_ref().filter(|_| !force)) {
                    Ok(table) => {
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
                        return (entry, Outcome::Pinned { version: pin.version, file_version: version });
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
            if current.version == version && current.path == path {
                entry.error = None;
                return (entry, Outcome::Unchanged { version, recovered: had_error });
            }
        }
        match Table::from_bytes(&path, &bytes, &self.sources.limits) {
            Ok(mut table) => {
                table.packed_source = pack(&bytes);
                let table = self.promoted(table);
                if let Some(old) = entry.current.take() {
                    entry.previous.push(old);
                    if entry.previous.len() > KEPT_VERSIONS {
                        entry.previous.remove(0);
                    }
                }
                entry.serve(Arc::new(table));
                entry.error = None;
                (entry, Outcome::Loaded { version, recovered: had_error })
            }
            Err(e) => {
                let error = e.to_string();
                entry.error = Some(e.summary());
                (entry, Outcome::Failed { error, serving })
            }
        }
    }

    /// The table a pin serves: the one serving already, or (after a restart) built again from
    /// the source kept in `state_dir`.
    fn pinned_table(&self, pin: &Pin, current: Option<&Arc<Table>>) -> Result<Arc<Table>, String> {
        if let Some(c) = current.filter(|c| c.version == pin.version && c.path == pin.path) {
            return Ok(c.clone());
        }
        let store = self.store.as_ref().ok_or("its source was kept in memory only")?;
        let bytes = store.read_pin_source(pin)?;
        let mut table = Table::from_bytes(&pin.path, &bytes, &self.sources.limits).map_err(|e| e.summary())?;
        table.packed_source = pack(&bytes);
        Ok(Arc::new(self.promoted(table)))
    }

    /// `table` with the parameter values promoted for it, if any still apply.
    fn promoted(&self, table: Table) -> Table {
        match &self.sources.overlays {
            Some(folder) => crate::table::overlay::apply(table, folder),
            None => table,
        }
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
            version: previous.version.clone(),
            path: previous.path.clone(),
            // what the file held at the last reload: a file whose bytes were never read has
            // no content to keep, and any it gets ends the pin
            file_sha256: entry.file_sha256.clone().unwrap_or_default(),
            source: String::new(),
            since: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        };
        let mut persist_error = None;
        if let Some(store) = &self.store {
            let written = unpack(&previous)
                .ok_or_else(|| "its source was not kept".to_string())
                .and_then(|bytes| store.write_pin_source(&pin.version, &pin.path, &bytes).map_err(|e| e.to_string()));
            match written {
                Ok(source) => pin.source = source,
                Err(e) => {
                    let e =
                        format!("cannot keep the source of version {} in {}: {e}", pin.version, store.dir().display());
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
    if ids.is_empty() && table.switched_off.is_none() {
        return (table.clone(), Vec::new());
    }
    let (switched, missing) = match &*table.engine {
        Engine::Rules(e) => e.switch_off(ids),
        Engine::Flash(_) => (None, ids.iter().cloned().collect()),
    };
    if switched.as_ref() == table.switched_off.as_deref() {
        return (table.clone(), missing);
    }
    (Arc::new(Table { switched_off: switched.map(Arc::new), ..Table::clone(table) }), missing)
}

/// A table file's bytes, compressed, to keep in memory for a later pin.
fn pack(bytes: &[u8]) -> Option<Arc<[u8]>> {
    zstd::bulk::compress(bytes, PACK_LEVEL).ok().map(Arc::from)
}

/// The bytes of a table's file, from what [`pack`] kept.
fn unpack(table: &Table) -> Option<Vec<u8>> {
    let packed = table.packed_source.as_deref()?;
    zstd::bulk::decompress(packed, crate::table::MAX_TABLE_BYTES as usize).ok()
}
