//! The recorder: workers append snapshot lines to per-core buffers; one writer thread takes
//! them in batches, writes them to segment files, rotates and deletes segments, and keeps the
//! most recent batches in memory for `GET /snapshots/{id}`.
//!
//! The queue from the workers to the writer is a set of per-core buffers, bounded in bytes:
//! a worker locks its own core's buffer (uncontended: only the writer, once per batch, takes
//! it too, for the time of a pointer swap), appends the encoded line, and unlocks. A buffer
//! beyond its share of `Settings::queue_bytes` refuses the snapshot (counted as dropped): the
//! decision never waits for the disk. A worker whose buffer passes half its share wakes the
//! writer early (one `unpark` per half buffer, not per snapshot); otherwise the writer wakes
//! every `flush_ms / 2`. Buffers go round: the worker's buffer becomes a batch, the batch
//! joins the recent window, and when it leaves the window it is emptied and handed back to a
//! worker, so a warm recorder allocates nothing per snapshot.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: every index is a worker slot masked by the slot count or a position checked just
// before; each `expect` names an invariant of the lines above it.
#![allow(clippy::indexing_slicing, clippy::expect_used)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant, SystemTime};

use crossbeam::utils::CachePadded;
use parking_lot::{Condvar, Mutex};

use super::config::{Compress, KeepClass, SnapshotsConfig};
use super::id::{unix_ms, with_thread_gen, SnapshotId};
use super::record::{encode, Event, Redact, Scratch};
use super::segment::{self, Stream};
use crate::metrics::worker_slot;

/// Internal sizes and intervals; the defaults suit a Raspberry Pi. Tests shrink them.
#[derive(Clone, Debug)]
pub struct Settings {
    /// snapshots waiting for the writer, all cores together, in bytes (beyond: dropped)
    pub queue_bytes: usize,
    /// the memory of the recent window `lookup` answers from, in bytes (of buffer capacity)
    pub recent_bytes: usize,
    /// largest uncompressed batch in one zstd frame (a bigger flush is several frames)
    pub frame_bytes: usize,
    /// a segment is closed beyond this size; default: `max_disk_mb / 8`, from 256 KiB to 64 MiB
    pub segment_bytes: Option<u64>,
    /// a segment is closed once open this long (so that age-based retention can delete it)
    pub max_segment_age: Duration,
    /// the longest written data waits for `fdatasync` (SD card wear: not every flush)
    pub sync_interval: Duration,
    /// how often retention runs (also at start and after each segment closes)
    pub retention_interval: Duration,
    /// zstd compression level
    pub zstd_level: i32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            queue_bytes: 8 << 20,
            recent_bytes: 4 << 20,
            frame_bytes: 1 << 20,
            segment_bytes: None,
            max_segment_age: Duration::from_secs(3600),
            sync_interval: Duration::from_secs(10),
            retention_interval: Duration::from_secs(60),
            zstd_level: 1,
        }
    }
}

/// What became of one decision's snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// queued for the segment file (and the recent window)
    Recorded,
    /// left off by `sample_rate`
    SampledOut,
    /// the queue was full (or the recorder stopped): counted, not written
    Dropped,
}

/// The id a decision answers with, and whether its snapshot will be on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordOutcome {
    /// the decision's `snapshot_id`
    pub id: SnapshotId,
    /// what became of the snapshot
    pub status: Status,
}

impl RecordOutcome {
    /// Whether the snapshot was recorded; the response says `"recorded": false` otherwise.
    pub fn recorded(&self) -> bool {
        self.status == Status::Recorded
    }
}

/// The recorder's figures, for `GET /metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// snapshots queued for disk
    pub recorded: u64,
    /// decisions left off by `sample_rate`
    pub sampled_out: u64,
    /// snapshots dropped because the queue was full (or the recorder had stopped)
    pub dropped: u64,
    /// bytes waiting for the writer now
    pub queued_bytes: u64,
    /// snapshot bytes (uncompressed NDJSON) written to segments
    pub bytes_in: u64,
    /// bytes written to segment files (after compression)
    pub bytes_written: u64,
    /// batches written (each one write, and one zstd frame per MiB)
    pub batches: u64,
    /// segments opened
    pub segments_opened: u64,
    /// segments deleted by retention
    pub segments_deleted: u64,
    /// failed writes, syncs, opens and deletes
    pub write_errors: u64,
    /// snapshots lost to failed writes
    pub lost: u64,
    /// bytes the segments take on disk now (as of the last retention run, plus writes since)
    pub disk_bytes: u64,
    /// segment files in the folder now (likewise)
    pub segments: u64,
    /// memory held by the recent window, in bytes
    pub recent_bytes: u64,
}

/// A handle on the recorder: cheap to clone into every worker. The writer stops (after a last
/// flush and sync) on [`Recorder::shutdown`], or when the last handle is dropped.
#[derive(Clone)]
pub struct Recorder {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("dir", &self.handle.shared.dir).finish()
    }
}

struct Handle {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        stop(&self.shared, &self.thread);
    }
}

struct Shared {
    dir: PathBuf,
    config: SnapshotsConfig,
    settings: Settings,
    /// `redact`, prepared
    redact: Redact,
    keep: Vec<KeepClass>,
    /// `sample_rate` as a threshold on 64 random bits; `u64::MAX`: keep all
    threshold: u64,
    slots: Box<[CachePadded<Slot>]>,
    slot_mask: usize,
    slot_cap: usize,
    writer: OnceLock<Thread>,
    stopped: AtomicBool,
    flush_asked: AtomicU64,
    flush_done: Mutex<u64>,
    flushed: Condvar,
    recent: Mutex<Recent>,
    w: WriterCounters,
}

#[derive(Default)]
struct Slot {
    bufs: Mutex<SlotBufs>,
    recorded: AtomicU64,
    sampled_out: AtomicU64,
    dropped: AtomicU64,
    queued: AtomicU64,
}

#[derive(Default)]
struct SlotBufs {
    ordinary: String,
    keep: String,
    /// the writer was woken for this buffer and has not taken it yet
    signalled: bool,
}

#[derive(Default)]
struct WriterCounters {
    bytes_in: AtomicU64,
    bytes_written: AtomicU64,
    batches: AtomicU64,
    segments_opened: AtomicU64,
    segments_deleted: AtomicU64,
    write_errors: AtomicU64,
    lost: AtomicU64,
    disk_bytes: AtomicU64,
    segments: AtomicU64,
}

/// The recent window: whole batches, newest last, bounded in bytes.
#[derive(Default)]
struct Recent {
    batches: VecDeque<Arc<String>>,
    bytes: usize,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

impl Recorder {
    /// Starts recording into `config.dir` (created if missing) with the default [`Settings`].
    /// Fails when the config has a value that cannot work or the folder cannot be written.
    /// (`config.enabled` is the caller's business: this starts a recorder either way.)
    pub fn start(config: &SnapshotsConfig) -> io::Result<Recorder> {
        Recorder::start_with(config, Settings::default())
    }

    /// Starts recording with explicit [`Settings`].
    pub fn start_with(config: &SnapshotsConfig, settings: Settings) -> io::Result<Recorder> {
        let problems = config.problems();
        if !problems.is_empty() {
            let text: Vec<String> = problems.iter().map(|(k, m)| format!("snapshots.{k}: {m}")).collect();
            return Err(io::Error::new(io::ErrorKind::InvalidInput, text.join("; ")));
        }
        let dir = config.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create the snapshots folder {}: {e}", dir.display()))
        })?;
        probe_writable(&dir)?;
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let n_slots = (cores * 2).next_power_of_two().min(crate::metrics::SLOTS);
        let slot_cap = (settings.queue_bytes / n_slots).max(64 << 10);
        let threshold = if config.sample_rate >= 1.0 {
            u64::MAX
        } else {
            (config.sample_rate.max(0.0) * 18_446_744_073_709_551_616.0) as u64
        };
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            config: config.clone(),
            redact: Redact::new(&config.redact),
            keep: config.always_keep.clone(),
            threshold,
            slots: (0..n_slots).map(|_| CachePadded::new(Slot::default())).collect(),
            slot_mask: n_slots - 1,
            slot_cap,
            writer: OnceLock::new(),
            stopped: AtomicBool::new(false),
            flush_asked: AtomicU64::new(0),
            flush_done: Mutex::new(0),
            flushed: Condvar::new(),
            recent: Mutex::new(Recent::default()),
            w: WriterCounters::default(),
            settings,
        });
        let mut writer = Writer::new(shared.clone())?;
        writer.retention();
        let thread = std::thread::Builder::new().name("clef-snapshots".into()).spawn(move || writer.run())?;
        let _ = shared.writer.set(thread.thread().clone());
        Ok(Recorder { handle: Arc::new(Handle { shared, thread: Mutex::new(Some(thread)) }) })
    }

    /// The folder the segments are written to.
    pub fn dir(&self) -> &Path {
        &self.handle.shared.dir
    }

    /// The configuration the recorder runs with.
    pub fn config(&self) -> &SnapshotsConfig {
        &self.handle.shared.config
    }

    /// Gives the decision its id and records its snapshot (unless sampled out or the queue is
    /// full). Never blocks on the disk; the id is this thread's next (see [`super::id`]).
    #[inline]
    pub fn record(&self, ev: &Event<'_>) -> RecordOutcome {
        let id = with_thread_gen(|g| g.next(unix_ms(ev.timestamp)));
        RecordOutcome { id, status: self.record_as(id, ev) }
    }

    /// Records the snapshot of a decision that already has its id (from [`super::next_id`]),
    /// for a pipeline that writes the response before the snapshot (a shadow table that runs
    /// after the response).
    pub fn record_as(&self, id: SnapshotId, ev: &Event<'_>) -> Status {
        let s = &*self.handle.shared;
        let slot = &s.slots[worker_slot() & s.slot_mask];
        let keep = s.keep.iter().any(|&c| ev.is(c));
        if !keep && s.threshold != u64::MAX && with_thread_gen(|g| g.rng().next_u64()) >= s.threshold {
            slot.sampled_out.fetch_add(1, Relaxed);
            return Status::SampledOut;
        }
        if s.stopped.load(Relaxed) {
            slot.dropped.fetch_add(1, Relaxed);
            return Status::Dropped;
        }
        SCRATCH.with(|scratch| {
            let scratch = &mut *scratch.borrow_mut();
            let redacted = !s.redact.is_empty();
            if redacted {
                scratch.redacted.clear();
                s.redact.write(ev.input, &mut scratch.redacted);
            }
            let mut bufs = slot.bufs.lock();
            let used = bufs.ordinary.len() + bufs.keep.len();
            if used >= s.slot_cap {
                drop(bufs);
                slot.dropped.fetch_add(1, Relaxed);
                return Status::Dropped;
            }
            let buf = if keep { &mut bufs.keep } else { &mut bufs.ordinary };
            let start = buf.len();
            encode(id, ev, redacted.then_some(scratch.redacted.as_str()), &mut scratch.text, buf);
            let now_used = used + buf.len() - start;
            if now_used > s.slot_cap {
                buf.truncate(start);
                drop(bufs);
                slot.dropped.fetch_add(1, Relaxed);
                return Status::Dropped;
            }
            let wake = !bufs.signalled && now_used >= s.slot_cap / 2;
            bufs.signalled |= wake;
            drop(bufs);
            slot.queued.store(now_used as u64, Relaxed);
            slot.recorded.fetch_add(1, Relaxed);
            if wake {
                s.wake_writer();
            }
            Status::Recorded
        })
    }

    /// Asks the writer to write everything queued now and sync it to disk, and waits for it
    /// (at most `timeout`). Whether it finished in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        let s = &*self.handle.shared;
        if s.stopped.load(SeqCst) {
            return false;
        }
        let target = s.flush_asked.fetch_add(1, SeqCst) + 1;
        s.wake_writer();
        let deadline = Instant::now() + timeout;
        let mut done = s.flush_done.lock();
        while *done < target {
            if s.flushed.wait_until(&mut done, deadline).timed_out() {
                return *done >= target;
            }
        }
        true
    }

    /// Stops recording: the writer writes and syncs what is queued, closes its segments and
    /// ends (for SIGTERM). Snapshots recorded afterwards are dropped. Idempotent.
    pub fn shutdown(&self) {
        stop(&self.handle.shared, &self.handle.thread);
    }

    /// The snapshot line of a recent decision (the recent window in memory, and what is queued
    /// for the writer), for `GET /snapshots/{id}`; `None` when it is not in memory (too old,
    /// sampled out, dropped, or never made).
    pub fn lookup(&self, id: SnapshotId) -> Option<String> {
        let s = &*self.handle.shared;
        let mut needle = String::with_capacity(45);
        needle.push_str("{\"id\":\"");
        needle.push_str(&id.text());
        needle.push('"');
        let finder = memchr::memmem::Finder::new(needle.as_bytes());
        let search_recent = || {
            let batches: Vec<Arc<String>> = s.recent.lock().batches.iter().rev().cloned().collect();
            batches.iter().find_map(|b| find_line(&finder, b))
        };
        if let Some(line) = search_recent() {
            return Some(line);
        }
        for slot in s.slots.iter() {
            let bufs = slot.bufs.lock();
            if let Some(line) = find_line(&finder, &bufs.ordinary).or_else(|| find_line(&finder, &bufs.keep)) {
                return Some(line);
            }
        }
        // taken by the writer while we looked at the queue
        search_recent()
    }

    /// The recorder's figures.
    pub fn stats(&self) -> Stats {
        let s = &*self.handle.shared;
        let mut out = Stats::default();
        for slot in s.slots.iter() {
            out.recorded += slot.recorded.load(Relaxed);
            out.sampled_out += slot.sampled_out.load(Relaxed);
            out.dropped += slot.dropped.load(Relaxed);
            out.queued_bytes += slot.queued.load(Relaxed);
        }
        let w = &s.w;
        out.bytes_in = w.bytes_in.load(Relaxed);
        out.bytes_written = w.bytes_written.load(Relaxed);
        out.batches = w.batches.load(Relaxed);
        out.segments_opened = w.segments_opened.load(Relaxed);
        out.segments_deleted = w.segments_deleted.load(Relaxed);
        out.write_errors = w.write_errors.load(Relaxed);
        out.lost = w.lost.load(Relaxed);
        out.disk_bytes = w.disk_bytes.load(Relaxed);
        out.segments = w.segments.load(Relaxed);
        out.recent_bytes = s.recent.lock().bytes as u64;
        out
    }
}

/// The whole line holding `finder`'s needle at its start, if `buf` has one.
fn find_line(finder: &memchr::memmem::Finder<'_>, buf: &str) -> Option<String> {
    let bytes = buf.as_bytes();
    for at in finder.find_iter(bytes) {
        if at == 0 || bytes[at - 1] == b'\n' {
            let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
            return Some(buf[at..end].to_string());
        }
    }
    None
}

fn stop(shared: &Shared, thread: &Mutex<Option<JoinHandle<()>>>) {
    shared.stopped.store(true, SeqCst);
    shared.wake_writer();
    if let Some(t) = thread.lock().take() {
        let _ = t.join();
    }
    // wake anyone still waiting for a flush
    let _guard = shared.flush_done.lock();
    shared.flushed.notify_all();
}

impl Shared {
    fn wake_writer(&self) {
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }
}

fn probe_writable(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!(".clef-probe-{}", std::process::id()));
    let result = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&probe);
    let _ = std::fs::remove_file(&probe);
    result
        .map(|_| ())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write to the snapshots folder {}: {e}", dir.display())))
}

// ---------------------------------------------------------------------------------------------
// The writer thread

struct OpenSegment {
    file: File,
    path: PathBuf,
    bytes: u64,
    opened: Instant,
    /// written since the last sync
    dirty: bool,
}

struct Writer {
    s: Arc<Shared>,
    compressor: Option<zstd::bulk::Compressor<'static>>,
    segment_bytes: u64,
    open: [Option<OpenSegment>; 2],
    next_seq: u64,
    frame_in: Vec<u8>,
    frame_out: Vec<u8>,
    out: Vec<u8>,
    spares: Vec<String>,
    last_sync: Instant,
    last_retention: Instant,
    last_error_log: Option<Instant>,
    /// flush requests answered
    flushes_done: u64,
}

impl Writer {
    fn new(s: Arc<Shared>) -> io::Result<Writer> {
        let compressor = match s.config.compress {
            Compress::Zstd => {
                let mut c = zstd::bulk::Compressor::new(s.settings.zstd_level)?;
                c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
                c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))?;
                Some(c)
            }
            Compress::None => None,
        };
        let segment_bytes =
            s.settings.segment_bytes.unwrap_or_else(|| ((s.config.max_disk_mb << 20) / 8).clamp(256 << 10, 64 << 20));
        let next_seq = segment::list(&s.dir)?.iter().map(|seg| seg.seq + 1).max().unwrap_or(1);
        Ok(Writer {
            compressor,
            segment_bytes,
            open: [None, None],
            next_seq,
            frame_in: Vec::new(),
            frame_out: Vec::new(),
            out: Vec::new(),
            spares: Vec::new(),
            last_sync: Instant::now(),
            last_retention: Instant::now(),
            last_error_log: None,
            flushes_done: 0,
            s,
        })
    }

    fn run(mut self) {
        let tick = Duration::from_millis((self.s.config.flush_ms / 2).max(1));
        loop {
            let stopping = self.s.stopped.load(SeqCst);
            let asked = self.s.flush_asked.load(SeqCst);
            self.write_queued();
            let now = Instant::now();
            if asked > self.flushes_done
                || stopping
                || now.duration_since(self.last_sync) >= self.s.settings.sync_interval
            {
                self.sync_all();
            }
            if asked > self.flushes_done {
                self.flushes_done = asked;
                *self.s.flush_done.lock() = asked;
                self.s.flushed.notify_all();
            }
            let mut closed = false;
            for i in 0..2 {
                if self.open[i].as_ref().is_some_and(|seg| seg.opened.elapsed() >= self.s.settings.max_segment_age) {
                    self.close(i);
                    closed = true;
                }
            }
            if closed || self.last_retention.elapsed() >= self.s.settings.retention_interval {
                self.retention();
            }
            if stopping {
                for i in 0..2 {
                    self.close(i);
                }
                return;
            }
            std::thread::park_timeout(tick);
        }
    }

    /// Takes every core's queued lines and writes them: one write per stream.
    fn write_queued(&mut self) {
        let s = self.s.clone();
        let mut swapped: Vec<(Stream, String)> = Vec::new();
        for slot in s.slots.iter() {
            let mut bufs = slot.bufs.lock();
            bufs.signalled = false;
            if !bufs.ordinary.is_empty() {
                let spare = self.spares.pop().unwrap_or_default();
                swapped.push((Stream::Ordinary, std::mem::replace(&mut bufs.ordinary, spare)));
            }
            if !bufs.keep.is_empty() {
                let spare = self.spares.pop().unwrap_or_default();
                swapped.push((Stream::Keep, std::mem::replace(&mut bufs.keep, spare)));
            }
            drop(bufs);
            slot.queued.store(0, Relaxed);
        }
        if swapped.is_empty() {
            return;
        }
        // A buffer grown under load that holds little now is copied to its size (the window
        // counts capacity, not length) and goes back to the workers.
        let taken: Vec<(Stream, Arc<String>)> = swapped
            .into_iter()
            .map(|(stream, buf)| {
                if buf.capacity() > 2 * buf.len() + (64 << 10) {
                    let small = buf.as_str().to_owned();
                    self.recycle(buf);
                    (stream, Arc::new(small))
                } else {
                    (stream, Arc::new(buf))
                }
            })
            .collect();
        // Into the recent window first, so that a lookup finds them while they are written.
        let mut evicted = Vec::new();
        {
            let mut recent = s.recent.lock();
            for (_, b) in &taken {
                recent.bytes += b.capacity();
                recent.batches.push_back(b.clone());
            }
            while recent.bytes > s.settings.recent_bytes {
                let Some(old) = recent.batches.pop_front() else { break };
                recent.bytes -= old.capacity();
                evicted.push(old);
            }
        }
        for stream in [Stream::Ordinary, Stream::Keep] {
            let bufs: Vec<&str> = taken.iter().filter(|(st, _)| *st == stream).map(|(_, b)| b.as_str()).collect();
            if !bufs.is_empty() {
                self.write_stream(stream, &bufs);
            }
        }
        drop(taken);
        for old in evicted {
            // a lookup may still hold it: then it is simply freed when the lookup is done
            if let Ok(buf) = Arc::try_unwrap(old) {
                self.recycle(buf);
            }
        }
    }

    /// Keeps an emptied buffer for a worker (one spare per core at most, none larger than two
    /// shares of the queue), or frees it.
    fn recycle(&mut self, mut buf: String) {
        if self.spares.len() < self.s.slots.len() && buf.capacity() <= self.s.slot_cap * 2 {
            buf.clear();
            self.spares.push(buf);
        }
    }

    fn write_stream(&mut self, stream: Stream, bufs: &[&str]) {
        let i = stream as usize;
        let lines: u64 = bufs.iter().map(|b| memchr::memchr_iter(b'\n', b.as_bytes()).count() as u64).sum();
        let raw: usize = bufs.iter().map(|b| b.len()).sum();
        if self.open[i].is_none() {
            if let Err(e) = self.open_segment(stream) {
                self.failed("open a segment in", &e, lines);
                return;
            }
        }
        let result = match self.compressor.is_some() {
            true => self.compress(bufs).and_then(|()| {
                let seg = self.open[i].as_mut().expect("opened above");
                seg.file.write_all(&self.out).map(|()| self.out.len())
            }),
            false => {
                let seg = self.open[i].as_mut().expect("opened above");
                let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b.as_bytes())).collect();
                write_all_vectored(&mut seg.file, &mut slices).map(|()| raw)
            }
        };
        match result {
            Ok(written) => {
                let seg = self.open[i].as_mut().expect("opened above");
                seg.bytes += written as u64;
                seg.dirty = true;
                let w = &self.s.w;
                w.bytes_in.fetch_add(raw as u64, Relaxed);
                w.bytes_written.fetch_add(written as u64, Relaxed);
                w.batches.fetch_add(1, Relaxed);
                w.disk_bytes.fetch_add(written as u64, Relaxed);
                if seg.bytes >= self.segment_bytes {
                    self.close(i);
                    self.retention();
                }
            }
            Err(e) => {
                // What reached the file of this batch is a torn tail: the next batch starts a
                // new segment rather than follow it.
                self.failed("write to", &e, lines);
                if let Some(seg) = self.open[i].take() {
                    let _ = seg.file.sync_data();
                }
            }
        }
    }

    /// Compresses `bufs` into `self.out`: frames of at most `frame_bytes` (a longer line is a
    /// frame of its own), cut at line ends.
    fn compress(&mut self, bufs: &[&str]) -> io::Result<()> {
        let frame_bytes = self.s.settings.frame_bytes.max(1);
        self.out.clear();
        self.frame_in.clear();
        for buf in bufs {
            let mut rest = buf.as_bytes();
            while !rest.is_empty() {
                let room = frame_bytes.saturating_sub(self.frame_in.len());
                let take = if rest.len() <= room {
                    rest.len()
                } else if let Some(i) = memchr::memrchr(b'\n', &rest[..room]) {
                    i + 1
                } else if self.frame_in.is_empty() {
                    memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1)
                } else {
                    0
                };
                self.frame_in.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if take == 0 || self.frame_in.len() >= frame_bytes {
                    self.compress_frame()?;
                }
            }
        }
        if !self.frame_in.is_empty() {
            self.compress_frame()?;
        }
        Ok(())
    }

    fn compress_frame(&mut self) -> io::Result<()> {
        let Some(c) = self.compressor.as_mut() else { return Ok(()) };
        self.frame_out.clear();
        self.frame_out.reserve(zstd::zstd_safe::compress_bound(self.frame_in.len()));
        c.compress_to_buffer(&self.frame_in, &mut self.frame_out)?;
        self.out.extend_from_slice(&self.frame_out);
        self.frame_in.clear();
        Ok(())
    }

    fn open_segment(&mut self, stream: Stream) -> io::Result<()> {
        let zstd = self.compressor.is_some();
        for _ in 0..1000 {
            let seq = self.next_seq;
            self.next_seq += 1;
            let path = self.s.dir.join(segment::file_name(seq, SystemTime::now(), stream, zstd));
            match std::fs::OpenOptions::new().append(true).create_new(true).open(&path) {
                Ok(file) => {
                    self.s.w.segments_opened.fetch_add(1, Relaxed);
                    self.s.w.segments.fetch_add(1, Relaxed);
                    self.open[stream as usize] =
                        Some(OpenSegment { file, path, bytes: 0, opened: Instant::now(), dirty: false });
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free segment name"))
    }

    fn close(&mut self, i: usize) {
        if let Some(seg) = self.open[i].take() {
            if seg.dirty {
                if let Err(e) = seg.file.sync_data() {
                    self.failed("sync", &e, 0);
                }
            }
        }
    }

    fn sync_all(&mut self) {
        self.last_sync = Instant::now();
        for i in 0..2 {
            let Some(seg) = self.open[i].as_mut() else { continue };
            if !seg.dirty {
                continue;
            }
            seg.dirty = false;
            if let Err(e) = seg.file.sync_data() {
                self.failed("sync", &e, 0);
            }
        }
    }

    fn failed(&mut self, what: &str, e: &io::Error, lost: u64) {
        self.s.w.write_errors.fetch_add(1, Relaxed);
        self.s.w.lost.fetch_add(lost, Relaxed);
        let quiet = self.last_error_log.is_some_and(|t| t.elapsed() < Duration::from_secs(60));
        if !quiet {
            self.last_error_log = Some(Instant::now());
            log::warn!(
                "snapshots: cannot {what} {}: {e}{}",
                self.s.dir.display(),
                if lost > 0 { format!(" ({lost} snapshots lost)") } else { String::new() }
            );
        }
    }

    /// Deletes segments past their age (`keep_days`, tiered), then, while the segments take
    /// more than `max_disk_mb`, the oldest: ordinary segments before those of the
    /// `always_keep` classes. Open segments and other files are never deleted.
    fn retention(&mut self) {
        self.last_retention = Instant::now();
        let segments = match segment::list(&self.s.dir) {
            Ok(list) => list,
            Err(e) => return self.failed("list", &e, 0),
        };
        let listed = segments.len() as u64;
        let now = SystemTime::now();
        let day = 86_400.0;
        let open: Vec<&Path> = self.open.iter().flatten().map(|o| o.path.as_path()).collect();
        let keep_days = self.s.config.keep_days;
        let mut live = Vec::new();
        let mut doomed = Vec::new();
        for seg in segments {
            let is_open = open.contains(&seg.path.as_path());
            let age = now.duration_since(seg.modified).unwrap_or_default().as_secs_f64() / day;
            let limit = if seg.stream == Stream::Keep { keep_days.always_keep } else { keep_days.all };
            if !is_open && age > limit {
                doomed.push(seg);
            } else {
                live.push((seg, is_open));
            }
        }
        let max = self.s.config.max_disk_mb << 20;
        let mut total: u64 = live.iter().map(|(s, _)| s.bytes).sum();
        for stream in [Stream::Ordinary, Stream::Keep] {
            for (seg, is_open) in &live {
                if total <= max {
                    break;
                }
                if seg.stream == stream && !*is_open {
                    total -= seg.bytes;
                    doomed.push(seg.clone());
                }
            }
        }
        let mut deleted = 0;
        for seg in &doomed {
            match std::fs::remove_file(&seg.path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => self.failed("delete a segment in", &e, 0),
            }
        }
        let remaining = listed - deleted;
        self.s.w.segments_deleted.fetch_add(deleted, Relaxed);
        self.s.w.segments.store(remaining, Relaxed);
        self.s.w.disk_bytes.store(total, Relaxed);
    }
}

/// Writes every slice, with as few `writev` calls as the kernel allows (one, normally).
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the file took no more bytes")),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
