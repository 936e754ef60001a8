//! Reading segments back, streaming: files and folders of plain NDJSON and zstd segments (told
//! apart by their first bytes, not their names), line by line, in bounded memory.
//!
//! Whatever a crash left behind is skipped and counted, never fatal: in a plain segment, a last
//! line without its `\n`; in a zstd segment, a last frame that is incomplete (or whose checksum
//! fails): its lines are not used at all, and everything before it is. A damaged frame in the
//! middle of a file (which clef leaves only when it cannot cut a failed write off its segment)
//! is skipped up to the next frame's magic number.
//!
//! Memory is bounded whatever the files hold, so that a hostile file (a zstd bomb: a few KB
//! that decode to gigabytes) costs no more than a big honest one: a line or a decoded frame is
//! held up to [`MAX_LINE`] (beyond, it is skipped and counted), a frame whose header declares
//! more than that is skipped without being decoded, the decoder's window is at most
//! 2^[`MAX_WINDOW_LOG`] bytes (clef's own frames need 512 KiB; `zstd -19` 8 MiB; frames that
//! ask for more, as `zstd --ultra` or `--long` make, are skipped and counted), and buffers grown
//! for a large line shrink back after it.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: every range lies within the buffer, checked by the test beside it.
#![allow(clippy::indexing_slicing)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use zstd::zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer, ResetDirective};

/// The first bytes of a zstd frame.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// Bytes read from a file at a time.
const CHUNK: usize = 256 << 10;
/// The most bytes of one line (or decoded zstd frame) a reader holds; longer ones are skipped.
/// A snapshot holds its input whole, and `server.max_body_bytes` may be up to 64 MiB.
pub const MAX_LINE: usize = 64 << 20;
/// The largest zstd window the decoder accepts, as a power of two (8 MiB).
pub const MAX_WINDOW_LOG: u32 = 23;
/// A buffer grown beyond this for one large line or frame is given back after it.
const KEEP_CAPACITY: usize = 4 * CHUNK;
const _: () = assert!(CHUNK < KEEP_CAPACITY && KEEP_CAPACITY < MAX_LINE);

/// What a reader met besides complete lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// files opened
    pub files: u64,
    /// complete lines handed out
    pub lines: u64,
    /// files that ended in a torn line or frame (skipped)
    pub torn_tails: u64,
    /// bytes of those torn tails
    pub torn_bytes: u64,
    /// damaged zstd frames in the middle of a file (skipped)
    pub damaged: u64,
    /// lines and zstd frames beyond what a reader holds (skipped): longer than [`MAX_LINE`],
    /// or a frame that needs a window larger than 2^[`MAX_WINDOW_LOG`] bytes
    pub oversized: u64,
    /// files that could not be read, with why
    pub unreadable: Vec<(PathBuf, String)>,
}

/// The snapshot files a list of paths names: files as given, folders by the segment-like files
/// directly inside them (`*.ndjson`, `*.ndjson.zst`, `*.jsonl`, `*.jsonl.zst`), sorted by name
/// (clef's segment names sort in the order they were written).
pub fn expand(paths: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && is_snapshot_name(f))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn is_snapshot_name(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.') && [".ndjson", ".ndjson.zst", ".jsonl", ".jsonl.zst"].iter().any(|ext| name.ends_with(ext))
}

enum Kind {
    Plain,
    Zstd(Box<DCtx<'static>>),
}

struct Current {
    file: File,
    path: PathBuf,
    kind: Kind,
    eof: bool,
    /// zstd: compressed bytes read and not yet decoded, from `in_pos`
    input: Vec<u8>,
    in_pos: usize,
    /// zstd: input consumed since the last complete frame
    frame_bytes_in: u64,
    /// zstd: skipping to the next magic number after a damaged frame
    resync: bool,
    /// plain: skipping the rest of an over-long line
    skipping: bool,
}

/// Streams the complete lines of snapshot files, one file after the other.
pub struct SnapshotReader {
    files: VecDeque<PathBuf>,
    cur: Option<Current>,
    /// plain: the read buffer; zstd: the decoded frame. Lines are served from `pos`.
    data: Vec<u8>,
    pos: usize,
    /// `data[pos..scan]` holds no newline: a long line is searched once, not at every read
    scan: usize,
    stats: ReadStats,
}

impl SnapshotReader {
    /// A reader of `paths` (see [`expand`]).
    pub fn open(paths: &[PathBuf]) -> io::Result<SnapshotReader> {
        Ok(SnapshotReader::of_files(expand(paths)?))
    }

    /// A reader of exactly these files, in this order.
    pub fn of_files(files: Vec<PathBuf>) -> SnapshotReader {
        SnapshotReader {
            files: files.into(),
            cur: None,
            data: Vec::new(),
            pos: 0,
            scan: 0,
            stats: ReadStats::default(),
        }
    }

    /// What was met so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// The next complete line (without its `\n`; blank lines are skipped), or `None` at the end
    /// of the last file.
    pub fn next_line(&mut self) -> Option<&[u8]> {
        loop {
            if self.cur.is_none() && !self.open_next()? {
                continue;
            }
            if let Some((a, b)) = self.line_in_data() {
                self.stats.lines += 1;
                return Some(&self.data[a..b]);
            }
            let more = match self.cur.as_ref().map(|c| matches!(c.kind, Kind::Plain)) {
                Some(true) => self.fill_plain(),
                _ => self.fill_zstd(),
            };
            if !more {
                self.cur = None;
                self.data.clear();
                self.scan = 0;
                self.pos = 0;
            }
        }
    }

    /// Opens the next file; `None` when there is none, `Some(false)` when it cannot be read.
    fn open_next(&mut self) -> Option<bool> {
        let path = self.files.pop_front()?;
        self.data.clear();
        self.scan = 0;
        self.pos = 0;
        let mut file = match crate::files::open_regular(&path) {
            Ok(f) => f,
            Err(e) => {
                self.stats.unreadable.push((path, e.to_string()));
                return Some(false);
            }
        };
        self.stats.files += 1;
        let mut head = Vec::with_capacity(CHUNK);
        if let Err(e) = (&mut file).take(CHUNK as u64).read_to_end(&mut head) {
            self.stats.unreadable.push((path, e.to_string()));
            return Some(false);
        }
        let kind = if head.starts_with(&ZSTD_MAGIC) {
            let mut dctx = DCtx::create();
            if let Err(code) = dctx.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG)) {
                let why = zstd::zstd_safe::get_error_name(code);
                self.stats.unreadable.push((path, format!("cannot bound the zstd decoder's memory: {why}")));
                return Some(false);
            }
            Kind::Zstd(Box::new(dctx))
        } else {
            Kind::Plain
        };
        let eof = head.len() < CHUNK;
        let mut cur = Current {
            file,
            path,
            kind,
            eof,
            input: Vec::new(),
            in_pos: 0,
            frame_bytes_in: 0,
            resync: false,
            skipping: false,
        };
        match cur.kind {
            Kind::Plain => self.data = head,
            Kind::Zstd(_) => cur.input = head,
        }
        self.cur = Some(cur);
        Some(true)
    }

    /// The next line within `data` from `pos`, as a range.
    fn line_in_data(&mut self) -> Option<(usize, usize)> {
        loop {
            let from = self.scan.max(self.pos).min(self.data.len());
            let Some(i) = memchr::memchr(b'\n', &self.data[from..]) else {
                self.scan = self.data.len();
                return None;
            };
            let (a, b) = (self.pos, from + i);
            self.pos = b + 1;
            self.scan = self.pos;
            let skipping = self.cur.as_mut().is_some_and(|c| std::mem::take(&mut c.skipping));
            if skipping || self.data[a..b].trim_ascii().is_empty() {
                continue;
            }
            return Some((a, b));
        }
    }

    /// Plain: reads more; false at the end of the file (after counting a torn tail).
    fn fill_plain(&mut self) -> bool {
        let Some(cur) = self.cur.as_mut() else { return false };
        if self.pos > 0 {
            self.data.drain(..self.pos);
            self.scan = self.scan.saturating_sub(self.pos);
            self.pos = 0;
        }
        if self.data.len() >= MAX_LINE {
            // an over-long line: drop what we have of it and skip to its end
            if !cur.skipping {
                self.stats.oversized += 1;
            }
            cur.skipping = true;
            self.data.clear();
            self.scan = 0;
        }
        if self.data.capacity() > KEEP_CAPACITY && self.data.len() < CHUNK {
            self.data.shrink_to(CHUNK);
        }
        if cur.eof {
            let tail = &self.data[..];
            if !cur.skipping && tail.iter().any(|b| !b.is_ascii_whitespace()) {
                self.stats.torn_tails += 1;
                self.stats.torn_bytes += tail.len() as u64;
            }
            return false;
        }
        match read_chunk(&mut cur.file, &mut self.data) {
            Ok(0) => cur.eof = true,
            Ok(_) => {}
            Err(e) => {
                self.stats.unreadable.push((cur.path.clone(), e.to_string()));
                cur.eof = true;
            }
        }
        true
    }

    /// Zstd: decodes the next complete frame into `data`; false at the end of the file (after
    /// counting a torn last frame).
    fn fill_zstd(&mut self) -> bool {
        let Some(cur) = self.cur.as_mut() else { return false };
        let Kind::Zstd(dctx) = &mut cur.kind else { return false };
        self.data.clear();
        self.scan = 0;
        self.pos = 0;
        if self.data.capacity() > KEEP_CAPACITY {
            self.data = Vec::new();
            self.scan = 0;
        }
        loop {
            if cur.in_pos == cur.input.len() {
                if cur.eof {
                    if cur.frame_bytes_in > 0 || !self.data.is_empty() {
                        self.stats.torn_tails += 1;
                        self.stats.torn_bytes += cur.frame_bytes_in;
                    }
                    self.data.clear();
                    self.scan = 0;
                    return false;
                }
                cur.input.clear();
                cur.in_pos = 0;
                match read_chunk(&mut cur.file, &mut cur.input) {
                    Ok(0) => cur.eof = true,
                    Ok(_) => {}
                    Err(e) => {
                        self.stats.unreadable.push((cur.path.clone(), e.to_string()));
                        cur.eof = true;
                        cur.input.clear();
                    }
                }
                continue;
            }
            if cur.resync {
                let rest = &cur.input[cur.in_pos..];
                match memchr::memmem::find(rest, &ZSTD_MAGIC) {
                    Some(i) => {
                        cur.in_pos += i;
                        cur.resync = false;
                    }
                    None if cur.eof => cur.in_pos = cur.input.len(),
                    None => {
                        // keep the last 3 bytes: a magic number may straddle two reads
                        let start = cur.input.len() - rest.len().min(3);
                        cur.input.drain(..start);
                        cur.in_pos = 0;
                        match read_chunk(&mut cur.file, &mut cur.input) {
                            Ok(n) => cur.eof = n == 0,
                            Err(e) => {
                                self.stats.unreadable.push((cur.path.clone(), e.to_string()));
                                cur.eof = true;
                            }
                        }
                    }
                }
                continue;
            }
            // A frame that says it decodes to more than a reader holds is skipped unread; one
            // that does not say is cut off once it has.
            let declared_too_big = cur.frame_bytes_in == 0
                && matches!(
                    zstd::zstd_safe::get_frame_content_size(&cur.input[cur.in_pos..]),
                    Ok(Some(n)) if n > MAX_LINE as u64
                );
            if declared_too_big || self.data.len() >= MAX_LINE {
                self.stats.oversized += 1;
                self.data = Vec::new();
                self.scan = 0;
                let _ = dctx.reset(ResetDirective::SessionOnly);
                cur.frame_bytes_in = 0;
                cur.in_pos += 1;
                cur.resync = true;
                continue;
            }
            reserve_capped(&mut self.data, CHUNK);
            let before = cur.in_pos;
            let mut input = InBuffer::around(&cur.input[cur.in_pos..]);
            let filled = self.data.len();
            let mut output = OutBuffer::around_pos(&mut self.data, filled);
            let result = dctx.decompress_stream(&mut output, &mut input);
            let consumed = input.pos();
            cur.in_pos = before + consumed;
            cur.frame_bytes_in += consumed as u64;
            match result {
                Ok(0) => {
                    cur.frame_bytes_in = 0;
                    if self.data.last().is_some_and(|&b| b != b'\n') && self.data.len() >= MAX_LINE {
                        // a full buffer whose line goes on: beyond what a reader holds
                        self.stats.oversized += 1;
                        self.data = Vec::new();
                        self.scan = 0;
                        continue;
                    }
                    if !self.data.is_empty() {
                        if self.data.last() != Some(&b'\n') {
                            // a frame clef wrote always ends a line; keep what is whole
                            self.data.push(b'\n');
                        }
                        return true;
                    }
                }
                Ok(_) => {}
                Err(code) => {
                    if zstd::zstd_safe::get_error_name(code).contains("memory") {
                        // "Frame requires too much memory for decoding": a window beyond the bound
                        self.stats.oversized += 1;
                    } else {
                        self.stats.damaged += 1;
                    }
                    self.data = Vec::new();
                    self.scan = 0;
                    let _ = dctx.reset(ResetDirective::SessionOnly);
                    cur.frame_bytes_in = 0;
                    cur.resync = true;
                    if consumed == 0 {
                        cur.in_pos += 1;
                    }
                }
            }
        }
    }
}

/// Makes room for up to `more` bytes in `buf`, never beyond [`MAX_LINE`] in all (the caller
/// skips a line or frame that reaches it); how many. Past [`KEEP_CAPACITY`] it reserves
/// [`MAX_LINE`] at once: the pages of a large allocation cost nothing until written, while
/// growing by copies would hold the old buffer and the new one at the same time (twice the
/// largest line in resident memory).
fn reserve_capped(buf: &mut Vec<u8>, more: usize) -> usize {
    let more = more.min(MAX_LINE.saturating_sub(buf.len()));
    let need = buf.len() + more;
    if need > buf.capacity() {
        let target = if need > KEEP_CAPACITY { MAX_LINE } else { (buf.capacity() * 2).clamp(need, KEEP_CAPACITY) };
        buf.reserve_exact(target - buf.len());
    }
    more
}

/// Appends up to [`CHUNK`] bytes of `file` to `buf`; how many.
fn read_chunk(file: &mut File, buf: &mut Vec<u8>) -> io::Result<usize> {
    let old = buf.len();
    let room = reserve_capped(buf, CHUNK);
    buf.resize(old + room, 0);
    loop {
        match file.read(&mut buf[old..]) {
            Ok(n) => {
                buf.truncate(old + n);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                buf.truncate(old);
                return Ok(0);
            }
            Err(e) => {
                buf.truncate(old);
                return Err(e);
            }
        }
    }
}
