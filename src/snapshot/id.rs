//! Snapshot ids: UUIDv7 (RFC 9562), unique and strictly increasing within each thread, also
//! when the wall clock steps back (a Pi has no real-time clock and jumps when NTP syncs).
//!
//! Layout (RFC 9562 §5.7, with the monotonic counter of §6.2 method 1):
//!
//! ```text
//!  48 bits  unix time in ms: max(clock, the last ms this thread used)
//!   4 bits  version 7
//!  12 bits  counter, high part
//!   2 bits  variant 0b10
//!  30 bits  counter, low part
//!  32 bits  random
//! ```
//!
//! The 42-bit counter starts at a random value below 2^41 for each new millisecond and goes up
//! by one for every id of the same millisecond, so ids of one thread strictly increase; when the
//! clock goes back, the thread keeps its last millisecond and counts on. Should the counter ever
//! run out (2^41 ids in one millisecond), the millisecond is borrowed from the future. The random
//! start and the 32 random bits keep the ids of different threads and processes apart.
// This file is being changed on other branches, so its proofs are stated here rather than written
// into each line: indexes into fixed-size arrays by positions the loop bounds keep in range.
#![allow(clippy::indexing_slicing)]

use std::cell::Cell;
use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

pub use crate::per_core::Rng;

const COUNTER_BITS: u32 = 42;
const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;
/// A new millisecond's counter starts below this: 2^41 ids of headroom.
const COUNTER_START: u64 = 1 << (COUNTER_BITS - 1);

/// A snapshot id: a UUIDv7.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotId(u128);

impl SnapshotId {
    /// The id from its 128 bits.
    pub const fn from_u128(v: u128) -> SnapshotId {
        SnapshotId(v)
    }

    /// The 128 bits.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The unix time in milliseconds the id carries.
    pub const fn unix_ms(self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The canonical text: 36 lower-case characters, `0193b3c4-…`.
    #[inline]
    pub fn text(self) -> IdText {
        let mut out = [0u8; 36];
        uuid::Uuid::from_u128(self.0).hyphenated().encode_lower(&mut out);
        IdText(out)
    }

    /// Appends [`SnapshotId::text`] to `out` (without the validation a `&str` of the
    /// [`IdText`] would cost).
    #[inline]
    pub fn write_text(self, out: &mut String) {
        let mut buf = [std::mem::MaybeUninit::uninit(); 36];
        out.push_str(uuid::Uuid::from_u128(self.0).hyphenated().encode_lower_uninit(&mut buf));
    }

    /// Reads an id written as 36 characters with hyphens (`0193b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b`)
    /// or as 32 hex digits, in either case. Any UUID is accepted (not only version 7): an id that
    /// was never recorded is simply not found.
    pub fn parse(s: &str) -> Option<SnapshotId> {
        // uuid also reads `{…}` and `urn:uuid:…`; an id is only ever written in the two forms
        if !matches!(s.len(), 32 | 36) {
            return None;
        }
        uuid::Uuid::try_parse(s).ok().map(|u| SnapshotId(u.as_u128()))
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

impl fmt::Debug for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SnapshotId({})", self.text().as_str())
    }
}

impl FromStr for SnapshotId {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<SnapshotId, InvalidId> {
        SnapshotId::parse(s).ok_or(InvalidId)
    }
}

/// A text that is not a snapshot id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidId;

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a snapshot id is a UUID: 36 characters like 0193b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b")
    }
}

impl std::error::Error for InvalidId {}

/// The text of an id on the stack (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IdText([u8; 36]);

impl IdText {
    /// As a `&str`.
    pub fn as_str(&self) -> &str {
        // only ASCII hex digits and hyphens are ever written
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::ops::Deref for IdText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for IdText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_str().fmt(f)
    }
}

/// One thread's id generator. The clock is the caller's: [`IdGen::next`] takes the time, so
/// tests can step it back.
#[derive(Clone, Copy, Debug)]
pub struct IdGen {
    last_ms: u64,
    counter: u64,
    rng: Rng,
}

impl IdGen {
    /// A generator whose random bits come from `rng`.
    pub fn new(rng: Rng) -> IdGen {
        IdGen { last_ms: 0, counter: 0, rng }
    }

    /// The next id at wall-clock time `now_ms` (unix milliseconds): greater than every id this
    /// generator made before, whatever `now_ms` is.
    #[inline]
    pub fn next(&mut self, now_ms: u64) -> SnapshotId {
        let now_ms = now_ms.min((1 << 48) - 1);
        if now_ms > self.last_ms {
            self.last_ms = now_ms;
            self.counter = self.rng.next_u64() & (COUNTER_START - 1);
        } else if self.counter < COUNTER_MAX {
            self.counter += 1;
        } else {
            self.last_ms += 1;
            self.counter = self.rng.next_u64() & (COUNTER_START - 1);
        }
        let random = self.rng.next_u64() & 0xffff_ffff;
        let ms = u128::from(self.last_ms);
        let hi = u128::from(self.counter >> 30); // 12 bits
        let lo = u128::from(self.counter & ((1 << 30) - 1)); // 30 bits
        SnapshotId((ms << 80) | (0x7 << 76) | (hi << 64) | (0b10 << 62) | (lo << 32) | u128::from(random))
    }

    /// The generator's random numbers (also used for sampling).
    #[inline]
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

thread_local! {
    // A `Cell` of a `Copy` value with a constant start: reading it is a plain load, with
    // neither a lazy-initialisation check nor a borrow flag (the generator is seeded on first use).
    static GEN: Cell<Option<IdGen>> = const { Cell::new(None) };
}

/// Unix milliseconds of `t` (0 before 1970).
#[inline]
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(duration_ms).unwrap_or(0)
}

/// Whole milliseconds of `d` (in u64 arithmetic: `as_millis` would multiply in 128 bits).
#[inline]
fn duration_ms(d: std::time::Duration) -> u64 {
    d.as_secs().saturating_mul(1000).saturating_add(u64::from(d.subsec_millis()))
}

/// A new id from this thread's generator, for a decision made at `t`.
#[inline]
pub fn next_id_at(t: SystemTime) -> SnapshotId {
    next_id_at_ms(unix_ms(t))
}

/// A new id from this thread's generator, for a decision made at `now_ms` (unix milliseconds):
/// for callers that have the time converted already (the response writes it too).
#[inline]
pub fn next_id_at_ms(now_ms: u64) -> SnapshotId {
    with_thread_gen(|g| g.next(now_ms))
}

/// A new id from this thread's generator, now. Decisions that are not recorded (snapshots off,
/// tuning) can still be given an id this way.
pub fn next_id() -> SnapshotId {
    next_id_at(SystemTime::now())
}

/// Runs `f` with this thread's id generator. `f` works on a copy that
/// is stored back when it returns, so it must not call this again (none of its callers' closures
/// do: each is one call on the generator).
#[inline]
pub(crate) fn with_thread_gen<R>(f: impl FnOnce(&mut IdGen) -> R) -> R {
    let mut g = GEN.get().unwrap_or_else(|| IdGen::new(Rng::from_entropy()));
    let r = f(&mut g);
    GEN.set(Some(g));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_uuid_v7() {
        let mut g = IdGen::new(Rng::new(7));
        let id = g.next(1_764_491_025_123);
        let text = id.text();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "7", "version nibble: {}", text.as_str());
        assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"), "variant: {}", text.as_str());
        assert_eq!(id.unix_ms(), 1_764_491_025_123);
        assert_eq!(SnapshotId::parse(&text), Some(id));
        assert_eq!(SnapshotId::parse(&text.replace('-', "")), Some(id));
        assert_eq!(SnapshotId::parse(&text.to_uppercase()), Some(id));
        assert_eq!(SnapshotId::parse("not-an-id"), None);
        assert_eq!(SnapshotId::parse(&text.replacen('-', "x", 1)), None);
    }

    #[test]
    fn strictly_increasing_when_the_clock_steps_back_and_the_counter_runs_out() {
        let mut g = IdGen::new(Rng::new(1));
        let mut last = g.next(1000);
        for now in [1000, 999, 5, 1000, 2000, 1500, 2000, 2001] {
            let id = g.next(now);
            assert!(id > last, "{id} after {last} at {now}");
            assert!(id.text().as_str() > last.text().as_str(), "text order follows id order");
            last = id;
        }
        g.counter = COUNTER_MAX - 1;
        let a = g.next(0);
        let b = g.next(0);
        assert!(b > a && a > last);
        assert_eq!(b.unix_ms(), a.unix_ms() + 1, "the millisecond is borrowed from the future");
    }
}
