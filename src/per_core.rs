//! Per-core helpers shared by every subsystem that counts or draws on the request path: the
//! worker stripes that keep counters contention-free, a fast random source, and the threshold
//! that turns a share (a canary's traffic, a sample rate, an exploration rate) into a draw.
//!
//! Kept below everything that uses them (metrics, the server, snapshots, the router, canaries
//! and tuning), so that none of those needs another for them.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::SystemTime;

/// Number of distinct worker stripes; threads beyond this share stripes (still correct, as every
/// counter is updated with an atomic `fetch_add`, just no longer contention-free).
pub const STRIPES: usize = 64;

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    // A `Cell` of a `Copy` value with a constant start: reading it is a plain load, with
    // neither a lazy-initialisation check nor a borrow flag (seeded on first use).
    static RNG: Cell<Option<Rng>> = const { Cell::new(None) };
}

/// The calling thread's stable stripe in `0..STRIPES`.
///
/// Stripes are handed out from a global counter the first time a thread asks, so a worker that
/// calls this once at start-up gets one of the lowest stripes (which every [`machine_stripes`]
/// sized array keeps separate). Threads beyond [`STRIPES`] wrap around and share a stripe. With
/// `may` coroutines the stripe is that of the OS thread running the coroutine at the moment of
/// the call; never keep it across a yield point.
#[inline]
pub fn worker_stripe() -> usize {
    STRIPE.with(|stripe| {
        let v = stripe.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_STRIPE.fetch_add(1, Relaxed) % STRIPES;
        stripe.set(v);
        v
    })
}

/// How many stripes a per-table or per-recorder array needs on this machine: twice the cores
/// (room for the admin listener and other helper threads), rounded up to a power of two, at most
/// [`STRIPES`]. Keeps a 10,000-rule table's counters at about 1.3 MB on a 4-core Raspberry Pi
/// instead of 10 MB for all 64 stripes. Index such an array with `worker_stripe() & (n - 1)`.
pub fn machine_stripes() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        (cores * 2).next_power_of_two().min(STRIPES)
    })
}

/// A small fast random generator (wyrand): for the random bits of ids and for sampling, where
/// speed matters and unpredictability to an attacker does not.
#[derive(Clone, Copy, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from the process's random hashing keys, the thread and the time.
    pub fn from_entropy() -> Rng {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64);
        std::hash::Hash::hash(&std::thread::current().id(), &mut h);
        Rng(h.finish())
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0).wrapping_mul(u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db));
        ((t >> 64) ^ t) as u64
    }
}

/// 64 random bits from this thread's generator (sampling, canary draws without a key, seeds).
#[inline]
pub fn random_u64() -> u64 {
    RNG.with(|cell| {
        let mut rng = cell.get().unwrap_or_else(Rng::from_entropy);
        let v = rng.next_u64();
        cell.set(Some(rng));
        v
    })
}

/// `share × 2^64`, saturating: a uniform 64-bit draw (or hash) below it happens with
/// probability `share`; 1.0 (or more) takes every draw, 0 (or less, or NaN) none.
pub fn share_threshold(share: f64) -> u64 {
    if share >= 1.0 {
        u64::MAX
    } else if share > 0.0 {
        (share * 2f64.powi(64)) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_stripe_is_stable_and_in_range() {
        let here = worker_stripe();
        assert_eq!(here, worker_stripe());
        assert!(here < STRIPES);
        let there = std::thread::spawn(|| (worker_stripe(), worker_stripe())).join().unwrap();
        assert_eq!(there.0, there.1);
        assert!(there.0 < STRIPES);
        assert!(machine_stripes().is_power_of_two() && machine_stripes() <= STRIPES);
    }

    #[test]
    fn share_thresholds_take_the_share_of_draws() {
        assert_eq!(share_threshold(1.0), u64::MAX);
        assert_eq!(share_threshold(0.0), 0);
        assert_eq!(share_threshold(-1.0), 0);
        assert_eq!(share_threshold(f64::NAN), 0);
        assert_eq!(share_threshold(0.5), 1 << 63);
        let t = share_threshold(0.25);
        let taken = (0..40_000).filter(|_| random_u64() < t).count();
        assert!((9_000..11_000).contains(&taken), "{taken} of 40000 draws below a 0.25 threshold");
    }
}
