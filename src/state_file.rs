//! The files clef keeps in `state_dir` — kill switches and rollback pins, tuning's rewards and
//! promoted values: written so that a damaged file has a good one beside it, read back as
//! strictly as the tables they change, and a file that fails is reported where an operator
//! looks (`GET /health`), not only in the log.
//!
//! **Writing** ([`save`]). The new bytes are written atomically ([`crate::files::write_atomically`]:
//! a temporary file, synced, renamed over the old one). Before that, the file being replaced
//! becomes `NAME.last-good` (one rename) when it passes the caller's check: a file that was
//! damaged on the card since it was written never replaces the good copy. A crash between the
//! two renames leaves no `NAME` and a `NAME.last-good` holding the state before the write, which
//! is what [`load`] then reads.
//!
//! **Reading** ([`load`]). `NAME` is parsed and checked (the caller's check: a promoted value
//! within its parameter's bounds, rewards that add up, a pin that names a version); one that
//! fails gives way to `NAME.last-good`, checked the same way, and the failure is said. Nothing
//! that failed its check is ever used.
//!
//! **Reporting** ([`report`], [`resolve`], [`problems`]). What failed stays listed until the
//! same file is read again and passes (or the process restarts): the messages name no path,
//! since `/health` is also served on the decision listener; the log names the file.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::de::DeserializeOwned;

/// The suffix of the last good copy beside a state file.
pub const LAST_GOOD: &str = ".last-good";

/// Where the last good copy of `path` is kept.
pub fn last_good_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(LAST_GOOD);
    path.with_file_name(name)
}

/// Writes `bytes` to `path` atomically, first keeping the file it replaces as the last good
/// copy when `is_good` accepts that file's bytes (at most `max` of them are read).
pub fn save(path: &Path, bytes: &[u8], max: u64, is_good: impl Fn(&[u8]) -> bool) -> io::Result<()> {
    match crate::files::read_limited(path, max) {
        Ok(current) if current != bytes && is_good(&current) => std::fs::rename(path, last_good_path(path))?,
        // nothing to keep: no file yet, the same bytes, or a file that fails its check
        _ => {}
    }
    crate::files::write_atomically(path, bytes)
}

/// Removes the state file `path` and its last good copy (the copy first: were it left alone,
/// the next read would bring it back).
pub fn remove(path: &Path) -> io::Result<()> {
    for p in [last_good_path(path), path.to_path_buf()] {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// What [`load`] found.
#[derive(Debug, PartialEq)]
pub struct Loaded<T> {
    /// the state to use: the file's, else its last good copy's; `None` when neither passes
    pub value: Option<T>,
    /// why the file was not used, and what was instead; `None` when the file passed, or there
    /// is none
    pub problem: Option<Problem>,
}

/// Why a state file was not used, and what was instead (no path in either).
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// in full, for the log: it may quote the file (a value out of bounds, a parse error)
    pub detail: String,
    /// the same with nothing read from the file, for `/health` (served on the decision
    /// listener without a token)
    pub summary: String,
}

impl Problem {
    fn new(detail: String, summary: String) -> Problem {
        Problem { detail, summary }
    }

    /// This problem, then `more` (the same words in both forms).
    fn then(self, more: &str) -> Problem {
        Problem::new(format!("{}{more}", self.detail), format!("{}{more}", self.summary))
    }
}

/// Why the content of a state file fails its checks (it parsed, but does not hold together or
/// does not fit what is served): what is wrong, in the words the log and `/health` show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailed(pub String);

impl std::fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailed {}

/// Reads the JSON state file `path` (at most `max` bytes) and checks it with `check`; when it
/// fails, its last good copy (see the module doc). No file at all is `value: None` with no
/// problem.
pub fn load<T: DeserializeOwned>(path: &Path, max: u64, check: impl Fn(&T) -> Result<(), CheckFailed>) -> Loaded<T> {
    let read = |p: &Path| -> Result<Option<T>, Problem> {
        let bytes = match crate::files::read_limited(p, max) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Problem::new(format!("cannot be read: {e}"), format!("cannot be read: {e}"))),
        };
        let value: T = serde_json::from_slice(&bytes)
            .map_err(|e| Problem::new(format!("is not valid: {e}"), "is not valid".into()))?;
        check(&value).map_err(|e| Problem::new(format!("fails its checks: {e}"), "fails its checks".into()))?;
        Ok(Some(value))
    };
    let backup = last_good_path(path);
    match read(path) {
        Ok(Some(value)) => Loaded { value: Some(value), problem: None },
        // a crash between keeping the last good copy and writing the new file
        Ok(None) => match read(&backup) {
            Ok(value) => Loaded { value, problem: None },
            Err(why) => {
                let why = Problem::new(
                    format!("its last good copy {}", why.detail),
                    format!("its last good copy {}", why.summary),
                );
                Loaded { value: None, problem: Some(why) }
            }
        },
        Err(why) => match read(&backup) {
            Ok(Some(value)) => {
                let when = std::fs::metadata(&backup).and_then(|m| m.modified()).ok();
                let when = when.map(|t| format!(" (saved {})", humantime::format_rfc3339_seconds(t)));
                let used = format!("; the last good copy{} is used", when.unwrap_or_default());
                Loaded { value: Some(value), problem: Some(why.then(&used)) }
            }
            Ok(None) => Loaded { value: None, problem: Some(why.then("; there is no last good copy")) },
            Err(backup) => {
                let problem = Problem::new(
                    format!("{}; its last good copy {} too", why.detail, backup.detail),
                    format!("{}; its last good copy {} too", why.summary, backup.summary),
                );
                Loaded { value: None, problem: Some(problem) }
            }
        },
    }
}

/// A problem with persisted state, for `/health`: the subsystem (`tuning`, `registry`), the
/// thing it concerns (a table name, `state`) and which file of it.
type ProblemKey = (&'static str, String, &'static str);

static PROBLEMS: Mutex<BTreeMap<ProblemKey, String>> = Mutex::new(BTreeMap::new());

/// Reports that a state file of `subsystem` about `item` (`file` tells which of its files)
/// failed: `message` says why and what is used instead. Replaces an earlier report of it.
pub fn report(subsystem: &'static str, item: &str, file: &'static str, message: String) {
    PROBLEMS.lock().insert((subsystem, item.to_string(), file), message);
}

/// The file reported by [`report`] passed when read again.
pub fn resolve(subsystem: &'static str, item: &str, file: &'static str) {
    PROBLEMS.lock().remove(&(subsystem, item.to_string(), file));
}

/// How many state files are reported and not resolved.
pub fn failing_count() -> usize {
    PROBLEMS.lock().len()
}

/// The state files' family of a scrape (`clef_state_files_failing`), as it is now.
pub fn collector() -> FailingCollector {
    FailingCollector(failing_count() as u64)
}

/// `clef_state_files_failing`: state files reported and not resolved.
#[derive(Debug)]
pub struct FailingCollector(pub u64);

impl prometheus_client::collector::Collector for FailingCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        let help = "State files (kill switches, tuning rewards and promoted values) that failed their checks";
        let family = encoder.encode_descriptor(
            "clef_state_files_failing",
            help,
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        prometheus_client::metrics::gauge::ConstGauge::new(self.0).encode(family)
    }
}

/// Every problem reported and not resolved, grouped: subsystem → item → the messages of its
/// files, joined.
pub fn problems() -> BTreeMap<&'static str, BTreeMap<String, String>> {
    let mut out: BTreeMap<&'static str, BTreeMap<String, String>> = BTreeMap::new();
    for ((subsystem, item, _), message) in PROBLEMS.lock().iter() {
        let text = out.entry(subsystem).or_default().entry(item.clone()).or_default();
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(message);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positive(v: &i64) -> Result<(), CheckFailed> {
        if *v > 0 {
            Ok(())
        } else {
            Err(CheckFailed(format!("{v} is not above 0")))
        }
    }

    fn parses_positive(b: &[u8]) -> bool {
        serde_json::from_slice::<i64>(b).is_ok_and(|v| v > 0)
    }

    #[test]
    fn a_damaged_file_gives_way_to_its_last_good_copy() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        assert_eq!(load(&p, 100, positive), Loaded { value: None, problem: None });
        save(&p, b"1", 100, parses_positive).unwrap();
        save(&p, b"2", 100, parses_positive).unwrap();
        assert_eq!(std::fs::read(last_good_path(&p)).unwrap(), b"1");
        assert_eq!(load(&p, 100, positive), Loaded { value: Some(2), problem: None });
        // one flipped bit: the value fails its check, the last good copy serves
        std::fs::write(&p, b"-2").unwrap();
        let l = load(&p, 100, positive);
        assert_eq!(l.value, Some(1));
        let why = l.problem.unwrap();
        assert!(why.detail.contains("fails its checks: -2 is not above 0"), "{why:?}");
        assert!(why.summary.starts_with("fails its checks; the last good copy (saved "), "{why:?}");
        assert!(!why.summary.contains("-2"), "nothing read from the file in the summary: {why:?}");
        assert!(!why.detail.contains(&*dir.path().to_string_lossy()), "no path: {why:?}");
        // the damaged file never replaces the good copy
        save(&p, b"3", 100, parses_positive).unwrap();
        assert_eq!(std::fs::read(last_good_path(&p)).unwrap(), b"1");
        assert_eq!(load(&p, 100, positive).value, Some(3));
        // garbage with no good copy: nothing is used, and it is said
        remove(&p).unwrap();
        std::fs::write(&p, b"{").unwrap();
        let l = load(&p, 100, positive);
        assert_eq!(l.value, None);
        assert!(l.problem.unwrap().summary.contains("is not valid; there is no last good copy"));
    }

    #[test]
    fn a_crash_between_the_renames_reads_the_state_before_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        save(&p, b"5", 100, parses_positive).unwrap();
        std::fs::rename(&p, last_good_path(&p)).unwrap();
        assert_eq!(load(&p, 100, positive), Loaded { value: Some(5), problem: None });
        remove(&p).unwrap();
        assert!(!last_good_path(&p).exists());
        assert_eq!(load(&p, 100, positive).value, None);
    }

    #[test]
    fn problems_are_grouped_and_resolved() {
        report("test-sub", "t", "a", "one".into());
        report("test-sub", "t", "b", "two".into());
        assert_eq!(problems()["test-sub"]["t"], "one; two");
        resolve("test-sub", "t", "a");
        resolve("test-sub", "t", "b");
        assert!(!problems().contains_key("test-sub"));
    }
}
