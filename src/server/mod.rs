//! `clef serve`: the HTTP appliance on may coroutines, one worker thread per core.
//!
//! Start-up: load the config, load every table, start the main and admin
//! listeners, a signal thread (SIGHUP reloads, SIGTERM drains), a watcher
//! that reloads changed tables, and a sampler for `/health`'s `load`.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: indexes are worker stripes, which the per-worker arrays are sized for.
#![allow(clippy::indexing_slicing)]

pub mod activity;
pub mod admin;
pub mod buffer;
pub mod conn;
pub mod errors;
pub mod notify;
pub mod page;
pub mod recent;
mod router_admin;
pub mod routes;
pub mod socket;
mod tuning_routes;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam::utils::CachePadded;

use crate::config::Loaded;
use crate::decide::Stages;
use crate::metrics::ServerStats;
use crate::per_core::{worker_stripe, STRIPES};
use crate::registry::{Outcome, Registry, Reloaded, Sources, WriterError};
use crate::snapshot::Recorder;
use crate::table::Limits;
use conn::{ConnLimits, ConnObserver};
use routes::Listener;

/// The longest a drain waits for connections to finish.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);
/// Connections the admin listener accepts at once.
const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Everything the handlers share. Per-core fields are padded and written only
/// by their own core.
pub struct App {
    /// the served tables
    pub registry: Registry,
    /// `model.default_table`
    pub default_table: Option<String>,
    /// bearer token for decision calls
    pub server_token: Option<String>,
    /// bearer token for admin calls
    pub admin_token: Option<String>,
    /// CORS on the main listener
    pub cors_enabled: bool,
    /// allowed origins
    pub cors_origins: Vec<String>,
    /// when the server started
    pub started: Instant,
    /// response and connection counters
    pub stats: ServerStats,
    /// canary and shadow tables, and the snapshot recorder
    pub stages: Stages,
    /// the Clef router (SPEC §7), when `router:` names instances
    pub router: Option<Arc<crate::router::Router>>,
    /// samples of the tables' counters for `GET /activity` (the status page's figures)
    pub activity: activity::Activity,
    draining: AtomicBool,
    /// set at the end of a drain: the listeners accept what is queued, then close
    closing: AtomicBool,
    inflight: Vec<CachePadded<AtomicI64>>,
    busy_ns: Vec<CachePadded<AtomicU64>>,
    load_bits: AtomicU64,
    /// open connections: main listener, admin listener
    open: [AtomicUsize; 2],
    /// open connections accepted before the drain began: the drain waits for them
    open_before_drain: AtomicUsize,
    max_connections: usize,
    /// most inputs in one batch request (`server.max_batch_lines`)
    pub max_batch_lines: usize,
    limits: ConnLimits,
}

/// Marks one request as in flight until dropped.
pub struct InFlight<'a> {
    app: &'a App,
    stripe: usize,
    started: Instant,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.app.inflight[self.stripe].fetch_sub(1, Ordering::Relaxed);
        self.app.busy_ns[self.stripe].fetch_add(self.started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

impl App {
    /// Counts a request as in flight (and its time as busy) until the guard drops.
    pub fn enter(&self) -> InFlight<'_> {
        let stripe = worker_stripe() % STRIPES;
        self.inflight[stripe].fetch_add(1, Ordering::Relaxed);
        InFlight { app: self, stripe, started: Instant::now() }
    }

    /// Requests being handled now.
    pub fn inflight(&self) -> u64 {
        self.inflight.iter().map(|c| c.load(Ordering::Relaxed)).sum::<i64>().max(0) as u64
    }

    /// Share of the workers' time spent handling requests over the last second.
    pub fn load(&self) -> f64 {
        f64::from_bits(self.load_bits.load(Ordering::Relaxed))
    }

    /// Bytes held now by requests larger than a connection's base buffer (the shared budget
    /// of `server.request_memory_bytes`).
    pub fn request_memory_held(&self) -> usize {
        self.limits.request_memory.held()
    }

    /// Open connections on both listeners.
    pub fn open_connections(&self) -> usize {
        self.open.iter().map(|o| o.load(Ordering::Relaxed)).sum()
    }

    /// Whether SIGTERM was received.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Reloads every table and logs what happened (`why`: what asked for it).
    pub fn reload(&self, why: &str) -> Result<Reloaded, WriterError> {
        let reloaded = self.registry.reload();
        match &reloaded {
            Ok(r) => self.reloaded(why, &r.outcomes),
            Err(e) => log::error!("reload ({why}): {e}"),
        }
        reloaded
    }

    /// Serves table `name` again with its promoted parameter values (after a tuning
    /// promotion), logged and counted as a reload.
    pub fn reapply(&self, name: &str) {
        match self.registry.reapply(name) {
            Ok(r) => self.reloaded("tuning promotion", &r.outcomes),
            Err(e) => log::error!("table {name}: serving its promoted values: {e}"),
        }
    }

    /// Logs what a load or reload did to each table, then one summary line, and counts it in
    /// the metrics. Unchanged tables are quiet unless they recovered, so that a SIGHUP on a box
    /// with many tables says what changed, not what did not.
    fn reloaded(&self, why: &str, outcomes: &[(String, Outcome)]) {
        let (mut loaded, mut unchanged, mut failed, mut removed, mut missing) = (0, 0, 0, 0, 0);
        for (name, outcome) in outcomes {
            match outcome {
                Outcome::Loaded { version, recovered } => {
                    loaded += 1;
                    if *recovered {
                        log::info!("table {name}: recovered; loaded version {version} ({why})");
                    } else {
                        log::info!("table {name}: loaded version {version} ({why})");
                    }
                }
                // pinned by a rollback, its file as it was: nothing changed
                Outcome::Pinned { .. } => unchanged += 1,
                Outcome::Unchanged { version, recovered } => {
                    unchanged += 1;
                    if *recovered {
                        // The broken file was put back as it was: the error clears, nothing else changes.
                        log::info!(
                            "table {name}: recovered; its file is back to version {version}, which kept serving ({why})"
                        );
                    }
                }
                Outcome::Failed { error, serving, again } => {
                    failed += 1;
                    match (serving, again) {
                        // its diagnostics are in the log already, and in GET /health on the admin listener
                        (Some(v), true) => {
                            log::warn!("table {name}: its file still fails to load as before; still serving {v}")
                        }
                        (None, true) => log::warn!("table {name}: its file still fails to load as before"),
                        (Some(v), false) => {
                            log::error!("table {name}: new file failed to load; still serving {v}:\n{error}")
                        }
                        (None, false) => log::error!("table {name}: failed to load:\n{error}"),
                    }
                }
                // the registry said so when the file went; it says so again when the table goes
                Outcome::Missing { .. } => missing += 1,
                Outcome::Removed => {
                    removed += 1;
                    log::warn!("table {name}: file removed; no longer served");
                }
            }
        }
        let n = outcomes.len();
        let tables = if n == 1 { "table" } else { "tables" };
        let missing = if missing > 0 { format!(", {missing} missing") } else { String::new() };
        let summary = format!(
            "reload ({why}): {n} {tables}: {loaded} loaded, {unchanged} unchanged, {failed} failed, {removed} removed{missing}"
        );
        if failed == 0 {
            log::info!("{summary}");
        } else {
            log::warn!("{summary}");
        }
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        self.stats.reload_finished(failed == 0, now);
    }
}

struct Observer<'a> {
    app: &'a App,
    admin: bool,
}

impl ConnObserver for Observer<'_> {
    fn responded(&self, status: u16) {
        self.app.stats.record_response(self.admin, status);
    }
    fn timed_out(&self) {
        self.app.stats.request_timed_out();
    }
    fn write_timed_out(&self) {
        self.app.stats.write_timed_out();
    }
    fn closed(&self, why: crate::http1::Closed) {
        self.app.stats.connection_closed(why);
    }
    fn draining(&self) -> bool {
        self.app.is_draining()
    }
}

/// Why the server cannot start: a subsystem cannot keep its files.
#[derive(Debug)]
pub enum StartError {
    /// the snapshot recorder cannot write in `snapshots.dir`
    Snapshots {
        /// the folder
        dir: std::path::PathBuf,
        /// what the system said
        error: std::io::Error,
    },
    /// tuning cannot keep its state in `state_dir`
    Tuning {
        /// the folder
        state_dir: std::path::PathBuf,
        /// what the system said
        error: std::io::Error,
    },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Snapshots { dir, error } => write!(
                f,
                "cannot record snapshots in {} (snapshots.dir): {error}; fix the folder or set snapshots.enabled: false",
                dir.display()
            ),
            StartError::Tuning { state_dir, error } => write!(
                f,
                "cannot keep tuning state in {} (state_dir): {error}; fix the folder or set tuning.enabled: false",
                state_dir.display()
            ),
        }
    }
}

impl std::error::Error for StartError {}

impl App {
    /// Everything `clef serve` answers with, from its configuration: the snapshot recorder
    /// and the tuner started, the tables loaded (a table that fails to load is in the
    /// outcomes, not an error). Err: the recorder or the tuner cannot keep their files, with
    /// what to do about it. No thread serves yet; [`run`] starts them.
    pub fn open(loaded: &Loaded) -> Result<(App, Reloaded), StartError> {
        let cfg = &loaded.config;
        let sources = table_sources(loaded);
        let started = Instant::now();
        let recorder = match cfg.snapshots.enabled.then(|| Recorder::start(&cfg.snapshots)).transpose() {
            Ok(r) => r,
            Err(error) => return Err(StartError::Snapshots { dir: cfg.snapshots.dir.clone(), error }),
        };
        let tuner = match cfg.tuning.active().then(|| crate::tuning::Tuner::new(&cfg.tuning, &loaded.state_dir)) {
            Some(Err(error)) => return Err(StartError::Tuning { state_dir: loaded.state_dir.clone(), error }),
            tuner => tuner.and_then(Result::ok),
        };
        let (registry, loaded_tables) = Registry::open_in(sources, Some(loaded.state_dir.clone()));
        let activity = activity::Activity::new(&registry.served());
        let app = App {
            registry,
            default_table: loaded.default_table.clone(),
            server_token: loaded.server_token.clone(),
            admin_token: loaded.admin_token.clone(),
            cors_enabled: cfg.server.cors.enabled,
            cors_origins: cfg.server.cors.origins.clone(),
            started,
            stats: ServerStats::new(),
            stages: Stages::new(&cfg.model, recorder, tuner),
            router: cfg.router.enabled().then(|| crate::router::Router::new(&cfg.router)),
            activity,
            draining: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            inflight: (0..STRIPES).map(|_| CachePadded::new(AtomicI64::new(0))).collect(),
            busy_ns: (0..STRIPES).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            load_bits: AtomicU64::new(0f64.to_bits()),
            open: [AtomicUsize::new(0), AtomicUsize::new(0)],
            open_before_drain: AtomicUsize::new(0),
            max_connections: cfg.server.max_connections,
            max_batch_lines: cfg.server.max_batch_lines,
            limits: ConnLimits {
                max_body_bytes: cfg.server.max_body_bytes,
                max_headers: cfg.server.max_headers,
                max_header_bytes: cfg.server.max_header_bytes,
                idle_timeout: Duration::from_millis(cfg.server.idle_timeout_ms),
                read_timeout: Duration::from_millis(cfg.server.read_timeout_ms),
                write_timeout: Duration::from_millis(cfg.server.write_timeout_ms),
                request_memory: buffer::RequestMemory::new(cfg.server.request_memory()),
            },
        };
        Ok((app, loaded_tables))
    }

    /// Serves one accepted connection on `listener` until it closes: what each of the
    /// server's connections runs (benches run it over a socket in memory).
    pub fn serve_connection<S: conn::Socket>(&self, listener: Listener, stream: &mut S) {
        let observer = Observer { app: self, admin: listener == Listener::Admin };
        conn::serve(stream, &self.limits, &|req, rsp| routes::handle(self, listener, req, rsp), &observer);
    }
}

/// Where the tables are served from, and the limits they load under.
fn table_sources(loaded: &Loaded) -> Sources {
    let cfg = &loaded.config;
    Sources {
        tables_dir: loaded.tables_dir.clone(),
        extra: loaded.decision_table_path.clone(),
        limits: Limits {
            max_rules: cfg.limits.max_rules,
            max_expr_depth: cfg.limits.max_expression_depth,
            regex_size_limit: cfg.limits.max_regex_bytes,
            max_input_depth: cfg.limits.max_input_depth,
        },
        // promoted values serve whether or not tuning is still on: they are the table's values now
        overlays: Some(crate::tuning::Tuner::overlay_folder(&loaded.state_dir)),
    }
}

/// Runs the appliance until SIGTERM; returns the process exit code.
pub fn run(loaded: Loaded) -> i32 {
    // Signals go to one thread that waits for them (this one). A thread inherits the signal
    // mask of the thread that creates it, and a thread with SIGHUP unblocked takes it with its
    // default action, which ends the process: they are blocked before the first thread starts
    // (the registry's writer starts with the tables' first load).
    let signals = signal_set();
    if let Err(e) = signals.thread_block() {
        log::warn!("cannot block signals: {e}");
    }
    let cfg = &loaded.config;
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    // Taken before loading, so that an edit made while the tables load is noticed.
    let watched = (table_sources(&loaded).fingerprint(), file_stamp(&loaded.path));
    let (app, loaded_tables) = match App::open(&loaded) {
        Ok(opened) => opened,
        Err(message) => {
            log::error!("{message}");
            return 1;
        }
    };
    let app = Arc::new(app);
    let started = app.started;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let workers = cfg.server.worker_threads(cores);
    // The load at start is logged and counted as a reload (`clef_reloads_total` says so).
    app.reloaded("start", &loaded_tables.outcomes);
    for (role, served, candidate) in app.stages.missing_candidates(&app.registry.served()) {
        log::warn!("model.{role}: table \"{candidate}\" ({role} of \"{served}\") is not loaded; \"{served}\" answers alone until it is");
    }
    if let Some(r) = &app.stages.recorder {
        log::info!("recording decision snapshots in {}", r.dir().display());
    }
    if let Some(router) = &app.router {
        router_admin::announce(router, &app.registry.served());
    }
    if let Some(tuner) = &app.stages.tuner {
        let tables = app.registry.served();
        for name in tuner.table_names().filter(|name| tables.get(name).is_none()) {
            log::warn!(
                "tuning.tables names \"{name}\", which is not among the loaded tables; it is tuned once a table of that name loads"
            );
        }
    }
    if let Some(d) = &app.default_table {
        if app.registry.served().get(d).is_none() {
            log::warn!("default_table \"{d}\" is not among the loaded tables; POST /decide will answer 404");
        }
    }

    raise_open_files_limit(cfg.server.open_files_needed(cores), cfg.server.max_connections);
    // 0x2000 words: 64 KiB. Unoptimised (debug) builds take several times the stack per frame:
    // a reload or a forward through the router's client would overflow it there.
    let stack_words = if cfg!(debug_assertions) { 0x8000 } else { 0x2000 };
    may::config().set_workers(workers).set_stack_size(stack_words).set_pool_capacity(8);
    may::config().set_worker_pin(true);

    let main_addr = format!("{}:{}", cfg.server.host, cfg.server.port);
    let admin_addr = cfg.admin.listen.clone();
    let (main, admin) = match bind_listeners(&app, &main_addr, &admin_addr) {
        Ok(listeners) => listeners,
        Err(message) => {
            log::error!("{message}");
            return 1;
        }
    };
    log::info!(
        "clef {} listening on {main_addr} (admin {}), {} tables, {workers} workers, ready in {} ms",
        env!("CARGO_PKG_VERSION"),
        if admin.is_some() { admin_addr.as_str() } else { "off" },
        app.registry.served().entries.len(),
        started.elapsed().as_millis()
    );
    if let Some(router) = &app.router {
        // probes run on may coroutines: started once may is configured
        router.start();
    }
    notify::ready(&format!("serving on {main_addr}"));
    // what loading the tables freed goes back to the system now, not when this thread next
    // allocates (an idle box may never do so)
    crate::memory::release(true);
    spawn_sampler(app.clone(), workers);
    if app.stages.tuner.is_some() {
        spawn_tuning(app.clone());
    }
    if cfg.model.watch_file {
        spawn_watcher(app.clone(), loaded.path.clone(), watched);
    }
    let sighup = spawn_sighup_reloader(app.clone());
    let stop = wait_for_signals(&app, &signals, sighup.as_ref());
    log::info!("{stop}: draining: finishing in-flight requests, closing connections");
    app.draining.store(true, Ordering::SeqCst);
    notify::stopping();
    drain(&app, [Some(main), admin].into_iter().flatten().collect());
    if let Some(recorder) = &app.stages.recorder {
        // every snapshot of an answered decision reaches the disk before the exit
        recorder.shutdown();
    }
    if let Some(tuner) = &app.stages.tuner {
        tuner.save();
    }
    log::info!("stopped");
    0
}

/// A listener's accept loop, and where it listens.
struct Listening {
    accepting: may::coroutine::JoinHandle<()>,
    at: std::net::SocketAddr,
}

/// Waits until every request in flight is answered and every connection open at SIGTERM has
/// closed (idle ones close within [`conn::IDLE_SLICE`]; busy ones after their next answer, which
/// says `Connection: close`), at most [`DRAIN_DEADLINE`]. The listeners stay open meanwhile: a
/// client that reconnects gets its 503 `draining` rather than a refused connection. Then the
/// listeners take the connections already queued and close, and the drain waits for every
/// connection they accepted to be answered: from then on a client is refused at connect, and
/// only one that connects in the instant between the last accept and the close is reset.
fn drain(app: &App, listeners: Vec<Listening>) {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    let quiet = |before_drain_only: bool| {
        let open =
            if before_drain_only { app.open_before_drain.load(Ordering::SeqCst) } else { app.open_connections() };
        app.inflight() == 0 && open == 0
    };
    while !quiet(true) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    close_listeners(app, listeners, deadline);
    while !quiet(false) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // the last answers are written; let them leave before the exit closes their sockets
    std::thread::sleep(Duration::from_millis(20));
}

/// Makes each listener accept what is queued and close: the accept loops see `closing` once a
/// connection wakes them, and this connects to each to be that connection.
fn close_listeners(app: &App, listeners: Vec<Listening>, deadline: Instant) {
    app.closing.store(true, Ordering::SeqCst);
    for l in &listeners {
        let mut to = l.at;
        if to.ip().is_unspecified() {
            to.set_ip(match to {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        // closed at once: its connection ends as soon as it is accepted
        if let Err(e) = std::net::TcpStream::connect_timeout(&to, Duration::from_millis(200)) {
            log::warn!("cannot reach the listener on {to} to close it ({e}); it closes at the exit");
        }
    }
    for l in listeners {
        while !l.accepting.is_done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Binds the decision listener and the admin listener (unless `admin.listen` is empty),
/// each owning its port; an admin address that overlaps the decision listener is refused.
fn bind_listeners(
    app: &Arc<App>,
    main_addr: &str,
    admin_addr: &str,
) -> Result<(Listening, Option<Listening>), BindError> {
    fn cannot(listener: Listener, address: &str, resolving: bool) -> impl FnOnce(std::io::Error) -> BindError + '_ {
        move |error| BindError::Cannot { listener, address: address.to_string(), resolving, error }
    }
    let main_at = socket::resolve(main_addr).map_err(cannot(Listener::Main, main_addr, true))?;
    let admin_at = if admin_addr.is_empty() {
        None
    } else {
        let at = socket::resolve(admin_addr).map_err(cannot(Listener::Admin, admin_addr, true))?;
        if socket::overlap(main_at, at) {
            return Err(BindError::Overlap { admin: admin_addr.to_string(), main: main_addr.to_string() });
        }
        Some(at)
    };
    let main = listen(app, main_at, Listener::Main).map_err(cannot(Listener::Main, main_addr, false))?;
    let admin = match admin_at {
        None => None,
        Some(at) => Some(listen(app, at, Listener::Admin).map_err(cannot(Listener::Admin, admin_addr, false))?),
    };
    Ok((main, admin))
}

/// Why a listener could not be opened.
#[derive(Debug)]
enum BindError {
    /// its address does not resolve (`resolving`), or binding it failed
    Cannot {
        /// which listener
        listener: Listener,
        /// its address as configured
        address: String,
        /// whether resolving the address failed (else binding it)
        resolving: bool,
        /// what the system said
        error: std::io::Error,
    },
    /// `admin.listen` overlaps the decision listener
    Overlap {
        /// the admin address
        admin: String,
        /// the decision address
        main: String,
    },
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindError::Cannot { listener: Listener::Main, address, resolving, error } => {
                let hint = if *resolving { String::new() } else { in_use_hint(error, "server.port or --port") };
                write!(f, "cannot listen on {address}: {error}{hint}")
            }
            BindError::Cannot { listener: Listener::Admin, address, resolving: true, error } => {
                write!(f, "cannot listen on the admin address {address} (admin.listen): {error}")
            }
            BindError::Cannot { listener: Listener::Admin, address, resolving: false, error } => {
                write!(f, "cannot listen on the admin address {address}: {error}{}", in_use_hint(error, "admin.listen"))
            }
            BindError::Overlap { admin, main } => write!(
                f,
                "admin.listen {admin} overlaps the decision listener {main}: admin endpoints would be served on the \
                 decision port; give admin.listen a port of its own (e.g. 127.0.0.1:9901)"
            ),
        }
    }
}

fn in_use_hint(e: &std::io::Error, key: &str) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(" (another process, perhaps another clef, has this port; stop it or choose another with {key})")
    } else {
        String::new()
    }
}

/// Every connection is a file descriptor: lift the soft limit (often 1024) so that
/// `max_connections` can be reached. (The config check already refused values the hard
/// limit cannot hold.)
fn raise_open_files_limit(needed: u64, max_connections: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return };
    let wanted = needed.min(hard);
    if wanted > soft {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, wanted, hard) {
            log::warn!("cannot raise the open files limit to {wanted}: {e}");
        }
    }
    if wanted < max_connections as u64 {
        log::warn!("open files limit {hard} is below server.max_connections {max_connections}");
    }
}

fn signal_set() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGHUP);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set
}

/// Starts the thread that reloads the tables on SIGHUP; returns what asks it to. The signal
/// thread only asks, so that it never waits for a reload (a SIGTERM that comes during a long
/// one is acted on at once). The channel holds one request: SIGHUPs that come while a reload
/// runs leave one there, and coalesce into one more reload, which reads every file they may
/// have announced.
fn spawn_sighup_reloader(app: Arc<App>) -> Option<crossbeam::channel::Sender<()>> {
    let (ask, asked) = crossbeam::channel::bounded::<()>(1);
    let spawned = std::thread::Builder::new().name("clef-sighup".into()).spawn(move || {
        while asked.recv().is_ok() {
            let _ = app.reload("SIGHUP");
        }
    });
    match spawned {
        Ok(_) => Some(ask),
        Err(e) => {
            log::warn!("cannot start the SIGHUP reload thread ({e}); SIGHUP reloads on the signal thread");
            None
        }
    }
}

/// Waits for signals, reloading on SIGHUP, until one that stops the server; returns it.
fn wait_for_signals(
    app: &App,
    set: &nix::sys::signal::SigSet,
    sighup: Option<&crossbeam::channel::Sender<()>>,
) -> nix::sys::signal::Signal {
    use nix::sys::signal::Signal;
    loop {
        match set.wait() {
            Ok(Signal::SIGHUP) => match sighup {
                // full: a reload is asked already and has not started; this one joins it
                Some(ask) => {
                    let _ = ask.try_send(());
                }
                None => {
                    let _ = app.reload("SIGHUP");
                }
            },
            Ok(sig) => return sig,
            Err(e) => {
                log::error!("waiting for signals failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn listen(app: &Arc<App>, addr: std::net::SocketAddr, listener: Listener) -> std::io::Result<Listening> {
    let socket = socket::bind_exclusive(addr)?;
    let at = socket.local_addr()?;
    let app = app.clone();
    let accepting = may::go!(move || {
        for stream in socket.incoming() {
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("accept failed: {e}");
                    may::coroutine::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if app.closing.load(Ordering::SeqCst) {
                // the end of a drain: what is queued is served (each answered 503), then the
                // socket closes and new connections are refused
                accepted(&app, listener, stream);
                while let Ok((queued, _)) = socket.inner().accept() {
                    match queued.set_nonblocking(true) {
                        Ok(()) => accepted(&app, listener, clef_sys::may_stream(queued)),
                        Err(e) => log::warn!("accept failed: {e}"),
                    }
                }
                return;
            }
            accepted(&app, listener, stream);
        }
    });
    Ok(Listening { accepting, at })
}

/// Serves a connection `listener` accepted on a coroutine of its own, unless there are too many.
fn accepted(app: &Arc<App>, listener: Listener, mut stream: may::net::TcpStream) {
    // The admin listener has its own small budget: a flood on the decision port must not lock
    // operators out.
    let (open, max) = match listener {
        Listener::Main => (&app.open[0], app.max_connections),
        Listener::Admin => (&app.open[1], ADMIN_MAX_CONNECTIONS),
    };
    if open.load(Ordering::Relaxed) >= max {
        app.stats.connection_rejected();
        return;
    }
    open.fetch_add(1, Ordering::Relaxed);
    // Connections that arrive during the drain are answered 503 and closed; the first part of
    // the drain does not wait for them.
    let before_drain = !app.is_draining();
    if before_drain {
        app.open_before_drain.fetch_add(1, Ordering::SeqCst);
    }
    app.stats.connection_accepted();
    let app = app.clone();
    may::go!(move || {
        socket::tune_accepted(&stream);
        app.serve_connection(listener, &mut stream);
        drop(stream);
        let open = if listener == Listener::Main { &app.open[0] } else { &app.open[1] };
        open.fetch_sub(1, Ordering::Relaxed);
        if before_drain {
            app.open_before_drain.fetch_sub(1, Ordering::SeqCst);
        }
    });
}

/// Once a second, turns the workers' busy time into `/health`'s `load`, and gives back to the
/// system what the allocator holds freed (idle workers never call into it, so memory freed by
/// connections that ended would otherwise stay resident: see [`crate::memory`]).
fn spawn_sampler(app: Arc<App>, workers: usize) {
    std::thread::Builder::new()
        .name("clef-load".into())
        .spawn(move || {
            let mut last = 0u64;
            let mut at = Instant::now();
            loop {
                std::thread::sleep(Duration::from_secs(1));
                notify::watchdog();
                let busy: u64 = app.busy_ns.iter().map(|b| b.load(Ordering::Relaxed)).sum();
                let elapsed = at.elapsed().as_nanos() as f64;
                at = Instant::now();
                let load = ((busy - last) as f64 / (elapsed * workers.max(1) as f64)).clamp(0.0, 1.0);
                last = busy;
                app.load_bits.store(load.to_bits(), Ordering::Relaxed);
                app.activity.tick(&app.registry.served());
                crate::memory::release(false);
            }
        })
        .ok();
}

/// The tuning thread: builds the arms of tuned tables as the registry serves new versions of
/// them, redraws choices after feedback, saves the rewards, and loads a table again after an
/// automatic promotion (see `crate::tuning`).
fn spawn_tuning(app: Arc<App>) {
    let spawned = std::thread::Builder::new().name("clef-tuning".into()).spawn(move || {
        let Some(tuner) = &app.stages.tuner else { return };
        let mut rng = crate::tuning::thread_rng();
        while !app.is_draining() {
            let tables = app.registry.served();
            let promoted = tuner.tick(|name| tables.get(name).and_then(|s| s.current.clone()), &mut rng);
            drop(tables);
            for name in promoted {
                app.reapply(&name);
            }
            std::thread::sleep(crate::tuning::TICK);
        }
    });
    if let Err(e) = spawned {
        log::error!("cannot start the tuning thread: {e}; tables are not tuned");
    }
}

fn file_stamp(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

type Fingerprint = (Vec<(std::path::PathBuf, u64, Option<SystemTime>)>, Option<SystemTime>);

/// Polls table files (and the config file) for changes: a few `stat` calls a second.
fn spawn_watcher(app: Arc<App>, config_path: std::path::PathBuf, start: Fingerprint) {
    std::thread::Builder::new()
        .name("clef-watch".into())
        .spawn(move || {
            let (mut tables, mut config) = start;
            loop {
                std::thread::sleep(Duration::from_millis(500));
                if app.is_draining() {
                    return;
                }
                let now = app.registry.sources().fingerprint();
                if now != tables {
                    tables = now;
                    let _ = app.reload("file changed");
                }
                let c = file_stamp(&config_path);
                if c != config {
                    config = c;
                    log::warn!(
                        "{} changed; configuration changes need a restart (tables reload on their own)",
                        config_path.display()
                    );
                }
            }
        })
        .ok();
}
