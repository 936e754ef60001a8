//! Segment files: their names and finding them in a folder.
//!
//! `clef-00000042-20261130T082345Z.ndjson.zst`: the sequence number first (one more than the
//! highest in the folder when the segment is opened, so names sort in the order segments were
//! written whatever the wall clock did), then the UTC time it was opened (for people), then
//! `-keep` for the segments of the `always_keep` classes (kept `keep_days.always_keep`), and
//! `.ndjson` or `.ndjson.zst`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The name every segment starts with.
pub const PREFIX: &str = "clef-";

/// What a segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// ordinary decisions (sampled)
    Ordinary,
    /// decisions of the `always_keep` classes
    Keep,
}

/// A segment file found in the folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// its path
    pub path: PathBuf,
    /// its sequence number
    pub seq: u64,
    /// which stream
    pub stream: Stream,
    /// its size in bytes
    pub bytes: u64,
    /// when it was last written
    pub modified: SystemTime,
}

/// The file name of a new segment.
pub fn file_name(seq: u64, opened: SystemTime, stream: Stream, zstd: bool) -> String {
    let stamp = humantime::format_rfc3339_seconds(opened).to_string().replace(['-', ':'], "");
    let keep = if stream == Stream::Keep { "-keep" } else { "" };
    let ext = if zstd { ".ndjson.zst" } else { ".ndjson" };
    format!("{PREFIX}{seq:08}-{stamp}{keep}{ext}")
}

/// The sequence number and stream of a segment's file name; `None` for other files.
pub fn parse_name(name: &str) -> Option<(u64, Stream)> {
    let rest = name.strip_prefix(PREFIX)?;
    let stem = rest.strip_suffix(".ndjson.zst").or_else(|| rest.strip_suffix(".ndjson"))?;
    let digits = stem.split('-').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = digits.parse().ok()?;
    let stream = if stem.ends_with("-keep") { Stream::Keep } else { Stream::Ordinary };
    Some((seq, stream))
}

/// The segments in `dir`, oldest (lowest sequence number) first. Other files are left alone.
pub fn list(dir: &Path) -> std::io::Result<Vec<Segment>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some((seq, stream)) = name.to_str().and_then(parse_name) else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        out.push(Segment {
            path: entry.path(),
            seq,
            stream,
            bytes: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        });
    }
    out.sort_by(|a, b| (a.seq, &a.path).cmp(&(b.seq, &b.path)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_round_trip_and_sort() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_491_025);
        let a = file_name(42, t, Stream::Ordinary, true);
        assert_eq!(a, "clef-00000042-20251130T082345Z.ndjson.zst");
        assert_eq!(parse_name(&a), Some((42, Stream::Ordinary)));
        let b = file_name(43, SystemTime::UNIX_EPOCH, Stream::Keep, false);
        assert_eq!(parse_name(&b), Some((43, Stream::Keep)));
        assert!(a < b, "the sequence number orders names, not the clock");
        for other in ["clef-.ndjson", "clef-x1-2025.ndjson", "notes.txt", "clef-00000001-2025.json"] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }
}
