//! The recorder: workers append snapshot lines to per-core queues of fixed-size chunks; one
//! writer thread takes the filled chunks, compresses each into one zstd frame, appends them to
//! segment files, rotates and deletes segments, and keeps the most recent frames in memory for
//! `GET /snapshots/{id}` and `GET /snapshots` ([`Recorder::recent`]).
//!
//! **The queue is bounded in memory, not in lines.** Each core's stripe owns chunks of
//! `Settings::chunk_bytes` (128 KiB), at most its share of `Settings::queue_bytes` of them
//! counted by capacity wherever they are (being filled, waiting, with the writer, spare). A
//! worker encodes the line into its thread's scratch string, locks its own stripe (uncontended:
//! only the writer, for pointer moves, and a rare lookup take it too), copies the line into the
//! open chunk and unlocks. A chunk never grows: a line that does not fit closes it and opens a
//! spare; with no spare and no room left in the share the snapshot is refused and counted (the
//! decision never waits for the disk). A line longer than a chunk gets a chunk of its own size,
//! within the same share. Closing a chunk wakes the writer (one `unpark` per chunk, none per
//! snapshot); otherwise it wakes every `flush_ms / 2` and then also takes the chunks still
//! being filled.
//!
//! **Memory comes back.** Chunks are mapped from the OS ([`memmap2`]), not taken from the
//! allocator: a chunk that is unmapped returns its pages at once, whichever thread filled it,
//! and a fresh one costs nothing until it is written. The writer hands a written chunk back to
//! its stripe as a spare (a warm recorder maps nothing), and once a second unmaps the spares the
//! stripe did not need in the last second: a second after a burst, an idle stripe holds nothing.
//! The recent window holds the compressed frames as written (about ten times more snapshots
//! per byte than the lines), bounded in bytes. An idle writer also frees its zstd context and
//! frame buffer (made again for the next frame). Then it asks the allocator to give back what
//! was freed ([`crate::memory::release`]).
//!
//! **A lookup misses nothing recent.** A chunk is in exactly one of three places a lookup
//! searches: its stripe, the writer's in-flight list (entered under the stripe's lock as the
//! chunk leaves the stripe, left only after its frame joined the window), or the window. A
//! lookup searches the window, the in-flight list, the stripes, the in-flight list again and the
//! window again, so a chunk moving on while it looks is found at its next place; each chunk
//! and frame carries the time range of its ids, so a lookup decodes only the frames that can
//! hold the id.
// Every index is a worker stripe masked by the stripe count or a position checked just before; each
// `expect` names an invariant of the lines above it.
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
use super::recent::{Collector, Listing, RecentQuery, Window};
use super::record::{encode, Event, Redact, Scratch};
use super::segment::{self, Stream};
use crate::per_core::{machine_stripes, random_u64, share_threshold, worker_stripe};

/// Internal sizes and intervals; the defaults suit a Raspberry Pi. Tests shrink them.
#[derive(Clone, Debug)]
pub struct Settings {
    /// memory the queue may take, all cores together, in bytes of chunk capacity (beyond:
    /// snapshots are dropped); each core's stripe gets an equal share, at least 64 KiB
    pub queue_bytes: usize,
    /// the memory of the recent window `lookup` answers from, in bytes: compressed frames
    /// (plain chunks with `compress: none`)
    pub recent_bytes: usize,
    /// the size of one queue chunk, and so the largest uncompressed zstd frame (a longer line
    /// is a frame of its own); at most a quarter of a stripe's share
    pub chunk_bytes: usize,
    /// a segment is closed beyond this size; default: `max_disk_mb / 8`, from 256 KiB to 64 MiB
    pub segment_bytes: Option<u64>,
    /// a segment is closed once open this long (so that age-based retention can delete it)
    pub max_segment_age: Duration,
    /// the longest written data waits for `fdatasync` (SD card wear: not every flush)
    pub sync_interval: Duration,
    /// how often retention runs (also at start and after each segment closes)
    pub retention_interval: Duration,
    /// how often spare chunks a stripe did not need are unmapped and freed memory is returned
    pub trim_interval: Duration,
    /// zstd compression level
    pub zstd_level: i32,
    /// the most written-but-not-stored snapshot data (compressed frames) kept to retry while
    /// the disk refuses it; beyond it the oldest is given up and counted as lost
    pub retry_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            queue_bytes: 4 << 20,
            recent_bytes: 1 << 20,
            chunk_bytes: 128 << 10,
            segment_bytes: None,
            max_segment_age: Duration::from_secs(3600),
            sync_interval: Duration::from_secs(10),
            retention_interval: Duration::from_secs(60),
            trim_interval: Duration::from_secs(1),
            zstd_level: 1,
            retry_bytes: 1 << 20,
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
    /// memory the queue's chunks take now (their capacity: filled, waiting, being written, spare)
    pub queue_memory_bytes: u64,
    /// snapshot bytes (uncompressed NDJSON) written to segments
    pub bytes_in: u64,
    /// bytes written to segment files (after compression)
    pub bytes_written: u64,
    /// batches written (each one write of one zstd frame per chunk)
    pub batches: u64,
    /// segments opened
    pub segments_opened: u64,
    /// segments deleted by retention
    pub segments_deleted: u64,
    /// failed writes, syncs, opens and deletes
    pub write_errors: u64,
    /// snapshots lost to failed writes (given up after retrying), or whose segment was deleted
    /// while it was being written
    pub lost: u64,
    /// snapshot data (compressed) the disk refused, kept to be written again
    pub retry_bytes: u64,
    /// times the snapshots folder was found missing and made again
    pub folder_recreated: u64,
    /// bytes the segments take on disk now (as of the last retention run, plus writes since)
    pub disk_bytes: u64,
    /// segment files in the folder now (likewise)
    pub segments: u64,
    /// memory held by the recent window, in bytes
    pub recent_bytes: u64,
}

/// Whether the recorder can store what it records, for `GET /health`: the disk refusing
/// snapshots must show where an operator looks, not only in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// since when the writer cannot store snapshots (its last attempt failed); `None` while it can
    pub failing_since: Option<SystemTime>,
    /// the last failure, and when it happened; kept after the writer recovers. The message
    /// names no path (it is shown on the decision listener).
    pub last_error: Option<(SystemTime, String)>,
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
    stripes: Box<[CachePadded<Stripe>]>,
    stripe_mask: usize,
    /// each stripe's share of `queue_bytes`
    stripe_cap: usize,
    /// the capacity of an ordinary chunk (a page multiple)
    chunk_bytes: usize,
    writer: OnceLock<Thread>,
    stopped: AtomicBool,
    flush_asked: AtomicU64,
    flush_done: Mutex<u64>,
    flushed: Condvar,
    /// chunks the writer took from the stripes and has not put in the window yet
    in_flight: Mutex<Vec<Arc<Chunk>>>,
    recent: Mutex<Recent>,
    w: WriterCounters,
}

#[derive(Default)]
struct Stripe {
    queue: Mutex<StripeQueue>,
    recorded: AtomicU64,
    sampled_out: AtomicU64,
    dropped: AtomicU64,
    /// bytes of lines in `open` and `ready`
    queued: AtomicU64,
    /// capacity of every chunk of the stripe (`StripeQueue::held`), for the figures
    held: AtomicU64,
}

#[derive(Default)]
struct StripeQueue {
    /// the chunk being filled, per stream (`Stream as usize`); never empty when there
    open: [Option<Chunk>; 2],
    /// closed chunks waiting for the writer, in order
    ready: Vec<Chunk>,
    /// empty chunks the writer handed back
    spares: Vec<Chunk>,
    /// capacity of every chunk of this stripe, wherever it is (here or with the writer)
    held: usize,
    /// bytes of lines in `open` and `ready`
    queued: usize,
    /// the writer was woken for a closed chunk and has not taken it yet
    signalled: bool,
}

/// A buffer of whole snapshot lines of one stream, mapped from the OS. It never grows: its
/// capacity is what it was mapped with, and its pages are resident only once written.
struct Chunk {
    map: memmap2::MmapMut,
    len: usize,
    stream: Stream,
    /// the range of the unix ms of the ids in it (`first_ms > last_ms` while empty)
    first_ms: u64,
    last_ms: u64,
    /// the snapshot lines in it
    lines: u64,
}

impl Chunk {
    fn map(capacity: usize) -> io::Result<Chunk> {
        let map = memmap2::MmapMut::map_anon(capacity)?;
        Ok(Chunk { map, len: 0, stream: Stream::Ordinary, first_ms: u64::MAX, last_ms: 0, lines: 0 })
    }

    fn capacity(&self) -> usize {
        self.map.len()
    }

    fn room(&self) -> usize {
        self.map.len() - self.len
    }

    fn push(&mut self, line: &[u8], ms: u64) {
        self.map[self.len..self.len + line.len()].copy_from_slice(line);
        self.len += line.len();
        self.lines += 1;
        self.first_ms = self.first_ms.min(ms);
        self.last_ms = self.last_ms.max(ms);
    }

    fn bytes(&self) -> &[u8] {
        &self.map[..self.len]
    }

    fn may_hold(&self, ms: u64) -> bool {
        self.first_ms <= ms && ms <= self.last_ms
    }

    fn clear(&mut self) {
        self.len = 0;
        self.lines = 0;
        self.first_ms = u64::MAX;
        self.last_ms = 0;
    }
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
    retry_bytes: AtomicU64,
    folder_recreated: AtomicU64,
    disk_bytes: AtomicU64,
    segments: AtomicU64,
    /// what [`Recorder::health`] answers; written by the writer on each failure and recovery
    health: Mutex<Health>,
}

/// One chunk as it was written: a zstd frame, or the plain lines.
#[derive(Clone)]
struct Frame {
    data: Arc<[u8]>,
    zstd: bool,
    first_ms: u64,
    last_ms: u64,
    /// the snapshot lines in it
    lines: u64,
}

impl Frame {
    /// The snapshot line starting with `finder`'s needle, if this frame holds it.
    fn find(&self, finder: &memchr::memmem::Finder<'_>) -> Option<String> {
        if !self.zstd {
            return find_line(finder, &self.data);
        }
        let lines = zstd::stream::decode_all(&self.data[..]).ok()?;
        find_line(finder, &lines)
    }

    /// Decompresses this zstd frame into `out` (replacing what it held), with `decompressor`
    /// (made on first use, kept for the next frame). The frame records its size (the writer's
    /// compressor sets the flag), so `out` grows once, to exactly that.
    fn decode_into(
        &self,
        decompressor: &mut Option<zstd::bulk::Decompressor<'static>>,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let size = zstd::zstd_safe::get_frame_content_size(&self.data)
            .ok()
            .flatten()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a frame without its size"))?;
        out.clear();
        out.reserve(
            usize::try_from(size).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a frame too large"))?,
        );
        if decompressor.is_none() {
            *decompressor = Some(zstd::bulk::Decompressor::new()?);
        }
        decompressor.as_mut().expect("made above").decompress_to_buffer(&self.data[..], out)?;
        Ok(())
    }
}

/// The recent window: the frames last written, newest last, bounded in bytes.
#[derive(Default)]
struct Recent {
    frames: VecDeque<Frame>,
    bytes: usize,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// A line longer than this leaves the thread's scratch string freed rather than kept.
const SCRATCH_KEPT: usize = 64 << 10;

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
        let n_stripes = machine_stripes();
        let stripe_cap = (settings.queue_bytes / n_stripes).max(64 << 10);
        let chunk_bytes = page_multiple(settings.chunk_bytes.clamp(PAGE, stripe_cap / 4));
        let threshold = share_threshold(config.sample_rate);
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            config: config.clone(),
            redact: Redact::new(&config.redact),
            keep: config.always_keep.clone(),
            threshold,
            stripes: (0..n_stripes).map(|_| CachePadded::new(Stripe::default())).collect(),
            stripe_mask: n_stripes - 1,
            stripe_cap,
            chunk_bytes,
            writer: OnceLock::new(),
            stopped: AtomicBool::new(false),
            flush_asked: AtomicU64::new(0),
            flush_done: Mutex::new(0),
            flushed: Condvar::new(),
            in_flight: Mutex::new(Vec::new()),
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
        let stripe = &s.stripes[worker_stripe() & s.stripe_mask];
        let keep = s.keep.iter().any(|&c| ev.is(c));
        if !keep && s.threshold != u64::MAX && random_u64() >= s.threshold {
            stripe.sampled_out.fetch_add(1, Relaxed);
            return Status::SampledOut;
        }
        if s.stopped.load(Relaxed) {
            stripe.dropped.fetch_add(1, Relaxed);
            return Status::Dropped;
        }
        let stream = if keep { Stream::Keep } else { Stream::Ordinary };
        SCRATCH.with(|scratch| {
            let scratch = &mut *scratch.borrow_mut();
            let redacted = !s.redact.is_empty();
            if redacted {
                scratch.redacted.clear();
                s.redact.write(ev.input, &mut scratch.redacted);
            }
            scratch.line.clear();
            encode(id, ev, redacted.then_some(scratch.redacted.as_str()), &mut scratch.text, &mut scratch.line);
            let status = s.enqueue(stripe, stream, scratch.line.as_bytes(), id.unix_ms());
            if scratch.line.capacity() > SCRATCH_KEPT {
                scratch.line = String::new();
            }
            status
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
        let ms = id.unix_ms();
        let search_recent = || {
            let frames: Vec<Frame> =
                s.recent.lock().frames.iter().rev().filter(|f| f.first_ms <= ms && ms <= f.last_ms).cloned().collect();
            frames.iter().find_map(|f| f.find(&finder))
        };
        let search_in_flight = || {
            let chunks: Vec<Arc<Chunk>> = s.in_flight.lock().iter().filter(|c| c.may_hold(ms)).cloned().collect();
            chunks.iter().find_map(|c| find_line(&finder, c.bytes()))
        };
        let search_stripes = || {
            s.stripes.iter().find_map(|stripe| {
                let q = stripe.queue.lock();
                let mut chunks = q.open.iter().flatten().chain(q.ready.iter());
                chunks.find_map(|c| if c.may_hold(ms) { find_line(&finder, c.bytes()) } else { None })
            })
        };
        search_recent()
            .or_else(search_in_flight)
            .or_else(search_stripes)
            .or_else(search_in_flight)
            .or_else(search_recent)
    }

    /// The recent decisions in memory that `query` asks for, newest first, for `GET /snapshots`
    /// (see [`super::recent`]): the lines are at most `max_bytes` in all. Searches what
    /// [`Recorder::lookup`] searches, in the order that misses no batch moving on meanwhile
    /// (its stripe, then the in-flight list, then the window: a batch leaves each only once it
    /// is in the next); a batch seen twice is listed once. Each lock is held only to copy: a
    /// stripe's lines (at most its share of the queue), the in-flight chunks' and the window's
    /// frames' handles; decompressing and filtering happen after.
    pub fn recent(&self, query: &RecentQuery, max_bytes: usize) -> Listing {
        let s = &*self.handle.shared;
        let mut collector = Collector::new(query, max_bytes);
        let mut window = Window::default();
        // 1. the stripes: the newest snapshots, not written yet
        let mut copy: Vec<u8> = Vec::new();
        let mut parts: Vec<(usize, usize, u64, u64)> = Vec::new();
        for stripe in s.stripes.iter() {
            copy.clear();
            parts.clear();
            {
                let q = stripe.queue.lock();
                for chunk in q.open.iter().flatten().chain(q.ready.iter()) {
                    window.add(chunk.lines, chunk.first_ms, chunk.last_ms);
                    if chunk.len > 0 && collector.wants(chunk.first_ms, chunk.last_ms) {
                        parts.push((copy.len(), copy.len() + chunk.len, chunk.first_ms, chunk.last_ms));
                        copy.extend_from_slice(chunk.bytes());
                    }
                }
            }
            for &(start, end, first, last) in &parts {
                collector.scan(&copy[start..end], first, last);
            }
        }
        drop(copy);
        // 2. the batch the writer is writing (its frames may be in the window already: not
        // counted here)
        let in_flight: Vec<Arc<Chunk>> = s.in_flight.lock().iter().cloned().collect();
        for chunk in &in_flight {
            collector.scan(chunk.bytes(), chunk.first_ms, chunk.last_ms);
        }
        drop(in_flight);
        // 3. the window, newest frames first
        let mut frames: Vec<Frame> = {
            let recent = s.recent.lock();
            let mut wanted = Vec::new();
            for f in &recent.frames {
                window.add(f.lines, f.first_ms, f.last_ms);
                if query.may_hold(f.first_ms, f.last_ms) {
                    wanted.push(f.clone());
                }
            }
            wanted
        };
        frames.sort_by_key(|f| std::cmp::Reverse(f.last_ms));
        let mut decompressor = None;
        let mut plain: Vec<u8> = Vec::new();
        for f in &frames {
            if !collector.wants(f.first_ms, f.last_ms) {
                continue;
            }
            if !f.zstd {
                collector.scan(&f.data, f.first_ms, f.last_ms);
                continue;
            }
            if f.decode_into(&mut decompressor, &mut plain).is_ok() {
                collector.scan(&plain, f.first_ms, f.last_ms);
            }
            // a frame of one long line does not keep its buffer
            if plain.capacity() > 2 * s.chunk_bytes {
                plain = Vec::new();
            }
        }
        collector.finish(window)
    }

    /// Whether snapshots reach the disk now, and the last failure (see [`Health`]).
    pub fn health(&self) -> Health {
        self.handle.shared.w.health.lock().clone()
    }

    /// The recorder's figures.
    pub fn stats(&self) -> Stats {
        let s = &*self.handle.shared;
        let mut out = Stats::default();
        for stripe in s.stripes.iter() {
            out.recorded += stripe.recorded.load(Relaxed);
            out.sampled_out += stripe.sampled_out.load(Relaxed);
            out.dropped += stripe.dropped.load(Relaxed);
            out.queued_bytes += stripe.queued.load(Relaxed);
            out.queue_memory_bytes += stripe.held.load(Relaxed);
        }
        let w = &s.w;
        out.bytes_in = w.bytes_in.load(Relaxed);
        out.bytes_written = w.bytes_written.load(Relaxed);
        out.batches = w.batches.load(Relaxed);
        out.segments_opened = w.segments_opened.load(Relaxed);
        out.segments_deleted = w.segments_deleted.load(Relaxed);
        out.write_errors = w.write_errors.load(Relaxed);
        out.lost = w.lost.load(Relaxed);
        out.retry_bytes = w.retry_bytes.load(Relaxed);
        out.folder_recreated = w.folder_recreated.load(Relaxed);
        out.disk_bytes = w.disk_bytes.load(Relaxed);
        out.segments = w.segments.load(Relaxed);
        out.recent_bytes = s.recent.lock().bytes as u64;
        out
    }
}

/// The size the OS maps memory in.
const PAGE: usize = 4096;

fn page_multiple(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// The whole line holding `finder`'s needle at its start, if `buf` has one.
fn find_line(finder: &memchr::memmem::Finder<'_>, buf: &[u8]) -> Option<String> {
    for at in finder.find_iter(buf) {
        if at == 0 || buf[at - 1] == b'\n' {
            let end = memchr::memchr(b'\n', &buf[at..]).map_or(buf.len(), |i| at + i);
            return std::str::from_utf8(&buf[at..end]).ok().map(str::to_owned);
        }
    }
    None
}

impl Shared {
    /// Copies one encoded line into the stripe's open chunk of `stream` (opening another when it
    /// does not fit); `Dropped` when the stripe's share of the queue is used up.
    fn enqueue(&self, stripe: &Stripe, stream: Stream, line: &[u8], ms: u64) -> Status {
        let mut q = stripe.queue.lock();
        let i = stream as usize;
        if q.open[i].as_ref().is_none_or(|c| c.room() < line.len()) {
            if let Some(closed) = q.open[i].take() {
                q.ready.push(closed);
            }
            let wake = !q.ready.is_empty() && !q.signalled;
            q.signalled |= wake;
            let fresh = self.fresh_chunk(&mut q, line.len());
            stripe.held.store(q.held as u64, Relaxed);
            if wake {
                self.wake_writer();
            }
            match fresh {
                Some(mut chunk) => {
                    chunk.stream = stream;
                    q.open[i] = Some(chunk);
                }
                None => {
                    drop(q);
                    stripe.dropped.fetch_add(1, Relaxed);
                    return Status::Dropped;
                }
            }
        }
        q.open[i].as_mut().expect("opened above").push(line, ms);
        q.queued += line.len();
        let queued = q.queued;
        drop(q);
        stripe.queued.store(queued as u64, Relaxed);
        stripe.recorded.fetch_add(1, Relaxed);
        Status::Recorded
    }

    /// An empty chunk for a line of `need` bytes: a spare, or a new one within the stripe's share.
    fn fresh_chunk(&self, q: &mut StripeQueue, need: usize) -> Option<Chunk> {
        if need <= self.chunk_bytes {
            if let Some(spare) = q.spares.pop() {
                return Some(spare);
            }
        }
        let capacity = if need <= self.chunk_bytes { self.chunk_bytes } else { page_multiple(need) };
        if q.held + capacity > self.stripe_cap {
            return None;
        }
        let chunk = Chunk::map(capacity).ok()?;
        q.held += capacity;
        Some(chunk)
    }

    fn wake_writer(&self) {
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }
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
    /// snapshot lines in it
    lines: u64,
    opened: Instant,
    /// written since the last sync
    dirty: bool,
}

/// A frame made from a chunk, waiting to be stored (the disk may have refused it).
struct Pending {
    frame: Frame,
    /// snapshot lines in it
    lines: u64,
    /// their bytes before compression
    raw: usize,
}

struct Writer {
    s: Arc<Shared>,
    /// the zstd level when segments are compressed; `None`: plain NDJSON
    zstd_level: Option<i32>,
    /// made for the first frame after an idle spell and freed when the recorder goes idle
    /// (its tables take about half a MiB)
    compressor: Option<zstd::bulk::Compressor<'static>>,
    segment_bytes: u64,
    open: [Option<OpenSegment>; 2],
    next_seq: u64,
    /// one compressed frame, before it is copied to its exact size
    frame_out: Vec<u8>,
    /// chunks taken from each stripe since the last trim (how many spares it needs)
    taken: Vec<usize>,
    /// frames not stored yet, per stream, oldest first: the batch being written, and while the
    /// disk refuses them, every batch since (at most `Settings::retry_bytes`)
    pending: [VecDeque<Pending>; 2],
    /// bytes of the frames in `pending`
    pending_bytes: usize,
    /// the last store failed and none has succeeded since
    failing: bool,
    /// when a store was last tried: while failing, at most one try per tick
    last_store: Instant,
    /// half of `flush_ms`: how often the writer takes the chunks being filled
    tick: Duration,
    last_take_all: Instant,
    last_trim: Instant,
    /// whether the last trim found the recorder busy (a burst's end asks for a full release)
    was_busy: bool,
    last_sync: Instant,
    last_retention: Instant,
    last_error_log: Option<Instant>,
    /// flush requests answered
    flushes_done: u64,
}

impl Writer {
    fn new(s: Arc<Shared>) -> io::Result<Writer> {
        let zstd_level = (s.config.compress == Compress::Zstd).then_some(s.settings.zstd_level);
        // made now so that a level zstd refuses fails the start
        let compressor = zstd_level.map(new_compressor).transpose()?;
        let segment_bytes =
            s.settings.segment_bytes.unwrap_or_else(|| ((s.config.max_disk_mb << 20) / 8).clamp(256 << 10, 64 << 20));
        let next_seq = segment::list(&s.dir)?.iter().map(|seg| seg.seq + 1).max().unwrap_or(1);
        Ok(Writer {
            zstd_level,
            compressor,
            segment_bytes,
            open: [None, None],
            next_seq,
            frame_out: Vec::new(),
            taken: vec![0; s.stripes.len()],
            pending: [VecDeque::new(), VecDeque::new()],
            pending_bytes: 0,
            failing: false,
            last_store: Instant::now(),
            tick: Duration::from_millis((s.config.flush_ms / 2).max(1)),
            last_take_all: Instant::now(),
            last_trim: Instant::now(),
            was_busy: false,
            last_sync: Instant::now(),
            last_retention: Instant::now(),
            last_error_log: None,
            flushes_done: 0,
            s,
        })
    }

    fn run(mut self) {
        let tick = self.tick;
        loop {
            let stopping = self.s.stopped.load(SeqCst);
            let asked = self.s.flush_asked.load(SeqCst);
            // Woken for a closed chunk, only closed chunks are taken (whole frames); every
            // tick, and for a flush, the chunks being filled too.
            let take_all = stopping || asked > self.flushes_done || self.last_take_all.elapsed() >= tick;
            if take_all {
                self.last_take_all = Instant::now();
            }
            self.write_queued(take_all);
            if stopping || (self.pending_bytes > 0 && self.store_due()) {
                self.store_all();
            }
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
                self.give_up_pending();
                for i in 0..2 {
                    self.close(i);
                }
                return;
            }
            if self.last_trim.elapsed() >= self.s.settings.trim_interval {
                self.trim();
            }
            let next_tick = tick.saturating_sub(self.last_take_all.elapsed());
            let next_trim = self.s.settings.trim_interval.saturating_sub(self.last_trim.elapsed());
            std::thread::park_timeout(next_tick.min(next_trim).max(Duration::from_millis(1)));
        }
    }

    /// Takes the stripes' closed chunks (`all`: and those being filled) and writes them: one
    /// frame per chunk, one write per stream. Then hands each chunk back to its stripe.
    fn write_queued(&mut self, all: bool) {
        let s = self.s.clone();
        let mut taken: Vec<(usize, Arc<Chunk>)> = Vec::new();
        for (at, stripe) in s.stripes.iter().enumerate() {
            let mut q = stripe.queue.lock();
            q.signalled = false;
            let before = taken.len();
            taken.extend(q.ready.drain(..).map(|c| (at, Arc::new(c))));
            if all {
                taken.extend(q.open.iter_mut().filter_map(Option::take).map(|c| (at, Arc::new(c))));
            }
            if taken.len() == before {
                continue;
            }
            q.queued = q.open.iter().flatten().map(|c| c.len).sum();
            stripe.queued.store(q.queued as u64, Relaxed);
            self.taken[at] += taken.len() - before;
            // into the in-flight list before the stripe lets go of them: a lookup always finds them
            s.in_flight.lock().extend(taken[before..].iter().map(|(_, c)| c.clone()));
        }
        if taken.is_empty() {
            return;
        }
        for stream in [Stream::Ordinary, Stream::Keep] {
            let chunks: Vec<&Chunk> = taken.iter().map(|(_, c)| &**c).filter(|c| c.stream == stream).collect();
            if !chunks.is_empty() {
                self.write_stream(stream, &chunks);
            }
        }
        s.in_flight.lock().clear();
        for (at, chunk) in taken {
            let stripe = &s.stripes[at];
            let mut q = stripe.queue.lock();
            match Arc::try_unwrap(chunk) {
                Ok(mut chunk) if chunk.capacity() == s.chunk_bytes => {
                    chunk.clear();
                    q.spares.push(chunk);
                }
                // a chunk of one long line, or one a lookup still reads: unmapped when dropped
                Ok(chunk) => q.held -= chunk.capacity(),
                Err(chunk) => q.held -= chunk.capacity(),
            }
            stripe.held.store(q.held as u64, Relaxed);
        }
    }

    /// Once a second: unmaps the spares each stripe did not need since the last trim (an idle
    /// stripe keeps none), and asks the allocator to return what was freed; all of it when the
    /// recorder has just gone idle.
    fn trim(&mut self) {
        self.last_trim = Instant::now();
        let busy = self.taken.iter().any(|&n| n > 0);
        for (stripe, taken) in self.s.stripes.iter().zip(self.taken.iter_mut()) {
            let mut q = stripe.queue.lock();
            let keep = std::mem::take(taken);
            if q.spares.len() > keep {
                let surplus: Vec<Chunk> = q.spares.drain(keep..).collect();
                q.held -= surplus.iter().map(Chunk::capacity).sum::<usize>();
                stripe.held.store(q.held as u64, Relaxed);
                drop(q);
                drop(surplus);
            }
        }
        if !busy {
            self.frame_out = Vec::new();
            self.compressor = None;
        }
        crate::memory::release(self.was_busy && !busy);
        self.was_busy = busy;
    }

    /// Makes the chunks' frames, puts them in the recent window, and stores them with whatever
    /// the disk refused before (unless a failed store was tried less than a tick ago).
    fn write_stream(&mut self, stream: Stream, chunks: &[&Chunk]) {
        let i = stream as usize;
        let frames = match self.frames(chunks) {
            Ok(frames) => frames,
            Err(e) => {
                let lines = chunks.iter().map(|c| count_lines(c.bytes())).sum();
                self.failed("compress snapshots", &e, lines);
                return;
            }
        };
        // Into the recent window before the chunks leave the in-flight list, so that a lookup
        // finds them while they are written.
        let mut evicted = Vec::new();
        {
            let mut recent = self.s.recent.lock();
            for f in &frames {
                recent.bytes += f.data.len();
                recent.frames.push_back(f.clone());
            }
            while recent.bytes > self.s.settings.recent_bytes {
                let Some(old) = recent.frames.pop_front() else { break };
                recent.bytes -= old.data.len();
                evicted.push(old);
            }
        }
        drop(evicted);
        for (frame, chunk) in frames.into_iter().zip(chunks) {
            self.pending_bytes += frame.data.len();
            self.pending[i].push_back(Pending { frame, lines: count_lines(chunk.bytes()), raw: chunk.len });
        }
        if self.store_due() {
            self.store(stream);
        }
        self.bound_pending();
    }

    /// Whether to try storing now: always while stores succeed; once a tick after a failure.
    fn store_due(&self) -> bool {
        !self.failing || self.last_store.elapsed() >= self.tick
    }

    fn store_all(&mut self) {
        for stream in [Stream::Ordinary, Stream::Keep] {
            self.store(stream);
        }
        self.bound_pending();
    }

    /// Writes the stream's pending frames to its segment (opened if needed) in one write. What
    /// a failed write left of a frame is cut off the segment, which stays open: the next try
    /// follows its last whole frame in the same file. (Starting a new segment after each
    /// failure spent one empty file per flush on a full disk, until the inodes ran out.)
    fn store(&mut self, stream: Stream) {
        let i = stream as usize;
        if self.pending[i].is_empty() {
            return;
        }
        self.last_store = Instant::now();
        self.check_open(i);
        if self.open[i].is_none() {
            if let Err(e) = self.open_segment(stream) {
                return self.failed_to_store("open a new segment", &e);
            }
        }
        let seg = self.open[i].as_mut().expect("opened above");
        let mut slices: Vec<IoSlice<'_>> = self.pending[i].iter().map(|p| IoSlice::new(&p.frame.data)).collect();
        let (reached, result) = write_all_vectored(&mut seg.file, &mut slices);
        // The frames that reached the file whole are stored, even when the write failed after
        // them (a disk with a little room takes what fits).
        let (mut whole, mut frames, mut lines, mut raw) = (0, 0, 0, 0);
        for p in &self.pending[i] {
            if whole + p.frame.data.len() > reached {
                break;
            }
            whole += p.frame.data.len();
            frames += 1;
            lines += p.lines;
            raw += p.raw;
        }
        self.pending[i].drain(..frames);
        self.pending_bytes -= whole;
        seg.bytes += whole as u64;
        seg.lines += lines;
        seg.dirty |= whole > 0;
        let full = seg.bytes >= self.segment_bytes;
        let cut = if result.is_err() { seg.file.set_len(seg.bytes) } else { Ok(()) };
        let w = &self.s.w;
        w.bytes_in.fetch_add(raw as u64, Relaxed);
        w.bytes_written.fetch_add(whole as u64, Relaxed);
        w.batches.fetch_add(u64::from(frames > 0), Relaxed);
        w.disk_bytes.fetch_add(whole as u64, Relaxed);
        w.retry_bytes.store(self.pending_bytes as u64, Relaxed);
        match result {
            Ok(()) => {
                self.recovered();
                if full {
                    self.close(i);
                    self.retention();
                }
            }
            Err(e) => {
                self.failed_to_store("write a segment", &e);
                if let Err(e) = cut {
                    // the torn tail stays: the next try starts a new segment rather than follow it
                    self.failed("cut a failed write off its segment", &e, 0);
                    self.abandon(i);
                }
            }
        }
    }

    /// Gives up the oldest pending frames (counted as lost) while they take more than
    /// `Settings::retry_bytes`.
    fn bound_pending(&mut self) {
        let mut lost = 0;
        while self.pending_bytes > self.s.settings.retry_bytes {
            let older = |p: &VecDeque<Pending>| p.front().map_or(u64::MAX, |f| f.frame.first_ms);
            let i = if older(&self.pending[0]) <= older(&self.pending[1]) { 0 } else { 1 };
            let Some(old) = self.pending[i].pop_front() else { break };
            self.pending_bytes -= old.frame.data.len();
            lost += old.lines;
        }
        self.s.w.lost.fetch_add(lost, Relaxed);
        self.s.w.retry_bytes.store(self.pending_bytes as u64, Relaxed);
    }

    /// At shutdown: what is still pending after the last try is lost.
    fn give_up_pending(&mut self) {
        let lost: u64 = self.pending.iter().flatten().map(|p| p.lines).sum();
        if lost > 0 {
            log::warn!("snapshots: {lost} snapshots the disk refused are lost at shutdown");
        }
        self.pending = [VecDeque::new(), VecDeque::new()];
        self.pending_bytes = 0;
        self.s.w.lost.fetch_add(lost, Relaxed);
        self.s.w.retry_bytes.store(0, Relaxed);
    }

    /// Drops the open segment of stream `i` if it is no longer the file at its path: deleted
    /// (with its folder, say: its snapshots are gone and counted as lost) or moved away.
    /// Otherwise the writer would go on filling a file nobody can read.
    fn check_open(&mut self, i: usize) {
        use std::os::unix::fs::MetadataExt;
        let Some(seg) = &self.open[i] else { return };
        let (open, at_path) = (seg.file.metadata(), std::fs::metadata(&seg.path));
        let same = match (&open, &at_path) {
            (Ok(o), Ok(p)) => o.dev() == p.dev() && o.ino() == p.ino(),
            _ => false,
        };
        if same {
            return;
        }
        let deleted = open.as_ref().is_ok_and(|o| o.nlink() == 0);
        let Some(seg) = self.open[i].take() else { return };
        self.segment_gone();
        if deleted {
            let e = io::Error::new(
                io::ErrorKind::NotFound,
                format!("it was deleted while open, with the {} snapshots it held", seg.lines),
            );
            self.failed("keep writing a segment", &e, seg.lines);
        } else {
            log::warn!("snapshots: {} was moved away while open; starting a new segment", seg.path.display());
        }
        if let Err(e) = self.ensure_folder() {
            self.failed_to_store("make the snapshots folder again", &e);
        }
    }

    /// Makes the snapshots folder again if it is gone (deleted while serving).
    fn ensure_folder(&mut self) -> io::Result<()> {
        match std::fs::metadata(&self.s.dir) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => return Err(io::Error::new(io::ErrorKind::AlreadyExists, "its path is taken by a file")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir_all(&self.s.dir)?;
        self.s.w.folder_recreated.fetch_add(1, Relaxed);
        log::warn!("snapshots: the folder {} was gone; made it again", self.s.dir.display());
        Ok(())
    }

    /// Closes stream `i`'s segment after a failure it cannot follow; an empty one is removed,
    /// so that failures never leave empty files behind.
    fn abandon(&mut self, i: usize) {
        let Some(seg) = self.open[i].take() else { return };
        let _ = seg.file.sync_data();
        if seg.bytes == 0 && std::fs::remove_file(&seg.path).is_ok() {
            self.segment_gone();
        }
    }

    /// One segment fewer in the folder (saturating: retention may have counted it gone already).
    fn segment_gone(&self) {
        let _ = self.s.w.segments.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
    }

    /// Each chunk as it goes to the file: a zstd frame of its lines, or the lines themselves.
    fn frames(&mut self, chunks: &[&Chunk]) -> io::Result<Vec<Frame>> {
        let mut frames = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let data: Arc<[u8]> = match self.zstd_level {
                Some(level) => {
                    if self.compressor.is_none() {
                        self.compressor = Some(new_compressor(level)?);
                    }
                    let c = self.compressor.as_mut().expect("made above");
                    self.frame_out.clear();
                    self.frame_out.reserve(zstd::zstd_safe::compress_bound(chunk.len));
                    c.compress_to_buffer(chunk.bytes(), &mut self.frame_out)?;
                    Arc::from(&self.frame_out[..])
                }
                None => Arc::from(chunk.bytes()),
            };
            let zstd = self.zstd_level.is_some();
            frames.push(Frame { data, zstd, first_ms: chunk.first_ms, last_ms: chunk.last_ms, lines: chunk.lines });
        }
        // a long line's frame does not keep its buffer
        if self.frame_out.capacity() > 2 * zstd::zstd_safe::compress_bound(self.s.chunk_bytes) {
            self.frame_out = Vec::new();
        }
        Ok(frames)
    }

    fn open_segment(&mut self, stream: Stream) -> io::Result<()> {
        let zstd = self.zstd_level.is_some();
        let mut retried = false;
        for _ in 0..1000 {
            let seq = self.next_seq;
            self.next_seq += 1;
            let path = self.s.dir.join(segment::file_name(seq, SystemTime::now(), stream, zstd));
            match std::fs::OpenOptions::new().append(true).create_new(true).open(&path) {
                Ok(file) => {
                    self.s.w.segments_opened.fetch_add(1, Relaxed);
                    self.s.w.segments.fetch_add(1, Relaxed);
                    self.open[stream as usize] =
                        Some(OpenSegment { file, path, bytes: 0, lines: 0, opened: Instant::now(), dirty: false });
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                // the folder was deleted while serving: made again, and this name tried again
                Err(e) if e.kind() == io::ErrorKind::NotFound && !retried => {
                    retried = true;
                    self.next_seq -= 1;
                    self.ensure_folder()?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free segment name"))
    }

    fn close(&mut self, i: usize) {
        if let Some(seg) = self.open[i].take() {
            if seg.dirty {
                if let Err(e) = seg.file.sync_data() {
                    self.failed("sync a segment", &e, 0);
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
                self.failed("sync a segment", &e, 0);
            }
        }
    }

    /// Counts a failure (and the snapshots it lost), notes it for `/health` and logs it (at
    /// most once a minute). `what` says what could not be done, without a path: the message
    /// is shown on the decision listener; the log names the folder.
    fn failed(&mut self, what: &str, e: &io::Error, lost: u64) {
        self.s.w.write_errors.fetch_add(1, Relaxed);
        self.s.w.lost.fetch_add(lost, Relaxed);
        let now = SystemTime::now();
        self.s.w.health.lock().last_error = Some((now, format!("cannot {what}: {e}")));
        let quiet = self.last_error_log.is_some_and(|t| t.elapsed() < Duration::from_secs(60));
        if !quiet {
            self.last_error_log = Some(Instant::now());
            log::warn!(
                "snapshots: cannot {what} in {}: {e}{}",
                self.s.dir.display(),
                if lost > 0 { format!(" ({lost} snapshots lost)") } else { String::new() }
            );
        }
    }

    /// A failure to store snapshots: counted like any, and the recorder is failing (`/health`
    /// says so) until a store succeeds. What was not stored stays pending, to be tried again.
    fn failed_to_store(&mut self, what: &str, e: &io::Error) {
        self.failed(what, e, 0);
        if !self.failing {
            self.failing = true;
            self.s.w.health.lock().failing_since = Some(SystemTime::now());
        }
    }

    /// A store succeeded: no longer failing.
    fn recovered(&mut self) {
        if self.failing {
            self.failing = false;
            self.s.w.health.lock().failing_since = None;
            log::info!("snapshots: writing to {} again", self.s.dir.display());
        }
    }

    /// Deletes segments past their age (`keep_days`, tiered), then, while the segments take
    /// more than `max_disk_mb`, the oldest: ordinary segments before those of the
    /// `always_keep` classes. Open segments and other files are never deleted.
    fn retention(&mut self) {
        self.last_retention = Instant::now();
        let segments = match segment::list(&self.s.dir) {
            Ok(list) => list,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Err(e) = self.ensure_folder() {
                    self.failed_to_store("make the snapshots folder again", &e);
                }
                return;
            }
            Err(e) => return self.failed("list the segments", &e, 0),
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
                Err(e) => self.failed("delete an old segment", &e, 0),
            }
        }
        let remaining = listed - deleted;
        self.s.w.segments_deleted.fetch_add(deleted, Relaxed);
        self.s.w.segments.store(remaining, Relaxed);
        self.s.w.disk_bytes.store(total, Relaxed);
    }
}

/// A zstd compressor at `level` whose frames carry their size and a checksum (a reader tells
/// a torn last frame by them).
fn new_compressor(level: i32) -> io::Result<zstd::bulk::Compressor<'static>> {
    let mut c = zstd::bulk::Compressor::new(level)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))?;
    Ok(c)
}

/// The snapshot lines in a chunk's bytes.
fn count_lines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

/// Writes every slice, with as few `writev` calls as the kernel allows (one, normally); how
/// many bytes reached the file, and the error that stopped it, if any.
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice<'_>]) -> (usize, io::Result<()>) {
    IoSlice::advance_slices(&mut slices, 0);
    let mut reached = 0;
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return (reached, Err(io::Error::new(io::ErrorKind::WriteZero, "the file took no more bytes"))),
            Ok(n) => {
                reached += n;
                IoSlice::advance_slices(&mut slices, n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (reached, Err(e)),
        }
    }
    (reached, Ok(()))
}
