//! The two searches of a route decision, made O(1) so that 1,000 instances cost what 2 do:
//! drawing a candidate weighted by its score (an alias table) and finding where a key falls on
//! the consistent-hash ring (a bucket index over the ring).
//!
//! # Alias table (Walker's method, Vose's construction)
//!
//! For weights `w_0 … w_{n−1}` with sum `W`, each of `n` slots holds one member, a threshold
//! `keep` and an `alias`. A draw picks a slot uniformly and takes its own member with
//! probability `keep`, else the alias: one random number, one slot read (and, for the alias,
//! one more), whatever `n` is. Vose's construction scales the weights to `p_i = n·w_i / W`
//! (mean 1) and repeatedly pairs a member below 1 (`s`) with one at or above 1 (`l`): slot `s`
//! keeps `p_s` and gives the rest of its probability to `l`, whose remaining mass drops by
//! `1 − p_s`. Every step settles one slot and preserves `Σ p = number of unsettled slots`, so
//! when it ends each member's total probability — its own slot's `keep` plus what other slots
//! give it as their alias, each divided by `n` — is `w_i / W` (up to the 2^−16 steps in which
//! `keep` is stored). Leftovers (rounding) keep themselves. A member of weight 0 is never drawn
//! (its slot always gives way); all weights 0 is a uniform draw. Each slot also carries what its
//! member's score needs, in 16 bytes, so comparing the two drawn candidates reads no other
//! memory than their slots (and our in-flight counters).
//!
//! # Ring bucket index
//!
//! The ring is its points sorted (32-bit points: 16,000 of them in 128 KB); a key goes to the
//! first point at or after its own (the high 32 bits of its hash), wrapping to the first. Instead
//! of a binary search over the points (a cache miss at every level), `2^b` buckets split the
//! 32-bit space evenly (about four points each), and bucket `j` remembers the position of the
//! first point at or above `j << (32 − b)`. A key's successor is that point or one of the few
//! after it (points are hash values, spread evenly). The scan stops at the first point at or
//! above the key's, which can be no later than the next bucket's start, so the answer is exactly
//! the binary search's: two cache lines per lookup, whatever `n` is. The retry, the first other
//! instance clockwise, is worked out per point when the ring is built, so a lookup walks no
//! further than the key's own point.
// The alias and ring tables are built together with the instance arrays they index (same
// length, never empty when consulted): an index into them is in bounds by construction.
#![allow(clippy::indexing_slicing)]

/// One candidate, as the table is built from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Member {
    /// index in `router.instances` (below [`super::config::MAX_INSTANCES`])
    pub instance: u32,
    /// the load it reported, in [0, 1]
    pub load: f32,
    /// 1 while its probes are fresh, down to 0 at [`super::STALE_AFTER`]
    pub freshness: f32,
    /// whether it is in our region (and earns [`super::REGION_BONUS`])
    pub in_region: bool,
}

impl Member {
    /// Its fields' bits, to find tables whose candidates are the same.
    pub fn bits(&self) -> [u32; 4] {
        [self.instance, self.load.to_bits(), self.freshness.to_bits(), u32::from(self.in_region)]
    }

    /// The score as published (no requests of ours in flight): its weight in the draw.
    pub fn weight(&self) -> f64 {
        f64::from(score(self.load, self.freshness, self.in_region, 0.0)).max(0.0)
    }
}

/// `freshness × (1 − load + bonus)`, the load raised by `extra` (our own in-flight requests,
/// as load) and capped at 1.
#[inline]
fn score(load: f32, freshness: f32, in_region: bool, extra: f32) -> f32 {
    // arithmetic rather than a branch: which of two random candidates is in our region is
    // anyone's guess, and a mispredicted branch costs more than the multiplication
    let bonus = f32::from(u8::from(in_region)) * super::REGION_BONUS as f32;
    freshness * (1.0 - (load + extra).min(1.0) + bonus)
}

const _: () = assert!(super::config::MAX_INSTANCES <= u16::MAX as usize, "instances and positions fit in u16");

/// One slot of the alias table: a member's score inputs, and the draw's rule — keep this
/// member when 16 random bits are below `keep`, else take the one at position `alias`.
/// 16 bytes, aligned: four slots per cache line, and 1,000 members in 16 KB.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct Slot {
    load: f32,
    freshness: f32,
    instance: u16,
    alias: u16,
    /// `u16::MAX` for "always" (the chance of giving way, 2^-16, lands on itself)
    keep: u16,
    in_region: bool,
}

/// The candidates for one table, drawn at random weighted by their published score.
#[derive(Debug, Default)]
pub(crate) struct AliasTable {
    slots: Box<[Slot]>,
}

impl AliasTable {
    /// The table for `members`, each weighted by [`Member::weight`].
    pub fn new(members: &[Member]) -> AliasTable {
        let n = members.len();
        let weights: Vec<f64> = members.iter().map(Member::weight).collect();
        let total: f64 = weights.iter().sum();
        let mut slots: Vec<Slot> = members
            .iter()
            .enumerate()
            .map(|(i, m)| Slot {
                load: m.load,
                freshness: m.freshness,
                instance: m.instance as u16,
                alias: i as u16,
                keep: u16::MAX,
                in_region: m.in_region,
            })
            .collect();
        if !(total > 0.0 && total.is_finite()) {
            // nobody has a weight: every member alike
            return AliasTable { slots: slots.into() };
        }
        let mut p: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| p[i] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            slots[s].keep = threshold(p[s]);
            slots[s].alias = l as u16;
            p[l] -= 1.0 - p[s];
            if p[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // what is left is at 1 up to rounding: it keeps itself (`keep` stays u16::MAX, alias itself)
        AliasTable { slots: slots.into() }
    }

    /// How many members.
    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The instance of the member at position `i` (in the order given to [`AliasTable::new`]).
    #[inline]
    pub fn instance(&self, i: usize) -> u32 {
        u32::from(self.slots[i].instance)
    }

    /// The instances, in the order given.
    pub fn instances(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().map(|s| u32::from(s.instance))
    }

    /// The score of the member at position `i` with its load raised by `extra`.
    #[inline]
    pub fn score(&self, i: usize, extra: f32) -> f32 {
        let s = &self.slots[i];
        score(s.load, s.freshness, s.in_region, extra)
    }

    /// The position of a member drawn with `random` (64 random bits): the high half picks the
    /// slot, 16 low bits decide between its member and its alias. The table must not be empty.
    #[inline]
    pub fn draw(&self, random: u64) -> usize {
        let n = self.slots.len() as u64;
        let i = (((random >> 32) * n) >> 32) as usize;
        let slot = &self.slots[i];
        select((random as u16) >= slot.keep, usize::from(slot.alias), i)
    }
}

/// `yes` when `cond`, else `no`, computed without a branch: on a route decision the
/// conditions (keep or give way, which of two random draws scores higher) are coin tosses that
/// no branch predictor learns, and a mispredicted branch costs more than these three operations.
#[inline]
pub(crate) fn select(cond: bool, yes: usize, no: usize) -> usize {
    no ^ ((no ^ yes) & usize::from(cond).wrapping_neg())
}

/// `p` (in [0, 1]) as a threshold for 16 random bits.
fn threshold(p: f64) -> u16 {
    (p.clamp(0.0, 1.0) * 65_536.0).min(f64::from(u16::MAX)) as u16
}

/// A consistent-hash ring with its bucket index: shared by the tables whose candidates are the
/// same instances, and kept from one publication to the next while they stay the same.
#[derive(Debug)]
pub(crate) struct Ring {
    /// sorted by point; 8 bytes each keep 16,000 of them in 128 KB
    points: Box<[RingPoint]>,
    /// per bucket, the position of the first point at or above its lower bound
    starts: Box<[u32]>,
    /// a point's bucket is `point >> shift`
    shift: u32,
}

/// One point of a ring: where it is, whose it is, and the first other instance clockwise after
/// it (the retry), worked out when the ring is built so that a lookup reads one entry and
/// walks no further, however many instances there are.
#[derive(Debug, Clone, Copy)]
struct RingPoint {
    point: u32,
    instance: u16,
    /// [`NO_INSTANCE`] when the ring holds only `instance`
    next_other: u16,
}

/// No instance: a ring of one instance has no other to retry on.
const NO_INSTANCE: u16 = u16::MAX;

/// Points per bucket, at most, on average (the bucket count is rounded up to a power of two):
/// four points are 32 bytes, so a scan mostly stays in the cache line it starts in, and the
/// index of 16,000 points (1,000 instances) is 16 KB.
const POINTS_PER_BUCKET: usize = 4;

impl Ring {
    /// The ring of `points` (any order), each a (point, instance).
    pub fn new(mut points: Vec<(u32, u32)>) -> Ring {
        points.sort_unstable();
        let mut points: Vec<RingPoint> = points
            .into_iter()
            .map(|(point, instance)| RingPoint { point, instance: instance as u16, next_other: NO_INSTANCE })
            .collect();
        // Going backwards round the ring twice: a point's next other instance is the next
        // point's instance when that differs, else the next point's own next other. The first
        // round settles every point whose answer lies before the end; the second, those whose
        // answer lies past the wrap. (All one instance: nothing is set, as it should be.)
        let n = points.len();
        for k in (0..2 * n).rev() {
            let (i, j) = (k % n, (k + 1) % n);
            let next = points[j];
            points[i].next_other = if next.instance != points[i].instance { next.instance } else { next.next_other };
        }
        let buckets = n.div_ceil(POINTS_PER_BUCKET).next_power_of_two().max(2);
        let shift = 32 - buckets.trailing_zeros();
        let mut starts = Vec::with_capacity(buckets);
        let mut at = 0usize;
        for j in 0..buckets as u64 {
            let low = j << shift;
            while at < n && u64::from(points[at].point) < low {
                at += 1;
            }
            starts.push(at as u32);
        }
        Ring { points: points.into(), starts: starts.into(), shift }
    }

    /// The point of a key: its high 32 bits.
    #[inline]
    pub fn point_of(key: u64) -> u32 {
        (key >> 32) as u32
    }

    /// The instance that owns `key` (the first point at or after the key's, going round) and
    /// the first other instance clockwise after that point, if the ring has another; `None`
    /// for an empty ring.
    #[inline]
    pub fn owner(&self, key: u64) -> Option<(u32, Option<u32>)> {
        let at = self.position(key);
        let p = self.points.get(at).or_else(|| self.points.first())?;
        let other = (p.next_other != NO_INSTANCE).then_some(u32::from(p.next_other));
        Some((u32::from(p.instance), other))
    }

    /// The position of the first point at or after `key`'s (the length when there is none:
    /// the ring then goes round to position 0).
    #[inline]
    fn position(&self, key: u64) -> usize {
        let point = Ring::point_of(key);
        let mut i = self.starts[(point >> self.shift) as usize] as usize;
        while i < self.points.len() && self.points[i].point < point {
            i += 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(instance: u32, load: f32) -> Member {
        Member { instance, load, freshness: 1.0, in_region: instance.is_multiple_of(3) }
    }

    /// Every slot's share of each member, summed exactly (no sampling): what a uniform slot
    /// choice and a uniform 32-bit threshold give.
    fn exact_shares(t: &AliasTable) -> Vec<f64> {
        let n = t.len();
        let mut share = vec![0.0; n];
        for (i, slot) in t.slots.iter().enumerate() {
            let keep = f64::from(slot.keep) / 65_536.0;
            share[i] += keep / n as f64;
            share[slot.alias as usize] += (1.0 - keep) / n as f64;
        }
        share
    }

    #[test]
    fn the_alias_table_draws_each_member_by_its_weight() {
        for loads in [
            vec![0.5],
            vec![0.1, 0.9],
            vec![0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 0.3],
            (0..1000).map(|i| (i % 10) as f32 / 10.0).collect(),
        ] {
            let members: Vec<Member> = loads.iter().enumerate().map(|(i, &l)| member(i as u32, l)).collect();
            let t = AliasTable::new(&members);
            let total: f64 = members.iter().map(Member::weight).sum();
            for (i, share) in exact_shares(&t).into_iter().enumerate() {
                let want = members[i].weight() / total;
                assert!((share - want).abs() < 2e-5, "member {i} of {}: {share} against {want}", loads.len());
                if want == 0.0 {
                    assert_eq!(share, 0.0, "a member of weight 0 is never drawn");
                }
            }
        }
        // sampled through `draw`: the high bits choose the slot, the low bits keep or give way
        let members = [member(1, 0.9), member(2, 0.1), member(4, 1.0)];
        let t = AliasTable::new(&members);
        let mut seen = [0u32; 3];
        let mut r = 0x1234_5678_9abc_def0u64;
        for _ in 0..100_000 {
            r = r.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            seen[t.draw(r)] += 1;
        }
        assert_eq!(seen[2], 0, "load 1: weight 0");
        let ratio = f64::from(seen[1]) / f64::from(seen[0]);
        assert!((ratio - 9.0).abs() < 0.6, "weights 0.9 and 0.1: {seen:?}");
    }

    #[test]
    fn no_weight_at_all_is_a_uniform_draw() {
        let t = AliasTable::new(&[member(1, 1.0), member(2, 1.0)]);
        let shares = exact_shares(&t);
        assert!((shares[0] - 0.5).abs() < 1e-9 && (shares[1] - 0.5).abs() < 1e-9, "{shares:?}");
        assert_eq!(t.draw(0), 0);
        assert_eq!(t.draw(u64::MAX), 1);
    }

    #[test]
    fn the_bucket_index_finds_what_a_binary_search_finds() {
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            super::super::mix64(state)
        };
        for n in [1usize, 2, 3, 64, 1000, 64_000] {
            let points: Vec<(u32, u32)> = (0..n).map(|i| (Ring::point_of(next()), i as u32)).collect();
            let ring = Ring::new(points);
            let mut keys: Vec<u64> = (0..2000).map(|_| next()).collect();
            let at = |i: usize, d: u64| (u64::from(ring.points[i].point) << 32).wrapping_add(d);
            keys.extend([0, u64::MAX, at(0, 0), at(n - 1, 0), at(n - 1, 1 << 32), at(n / 2, 1), at(n / 2, 1 << 32)]);
            for key in keys {
                let want = ring.points.partition_point(|p| p.point < Ring::point_of(key));
                assert_eq!(ring.position(key), want, "{n} points, key {key:#x}");
            }
        }
    }

    /// The owner and retry by walking the points clockwise: what [`Ring::owner`] precomputes.
    fn walked(ring: &Ring, key: u64) -> Option<(u32, Option<u32>)> {
        let at = ring.points.partition_point(|p| p.point < Ring::point_of(key));
        let (before, after) = ring.points.split_at(at);
        let mut round = after.iter().chain(before).map(|p| u32::from(p.instance));
        let first = round.next()?;
        Some((first, round.find(|&i| i != first)))
    }

    #[test]
    fn the_precomputed_retry_is_the_next_other_instance_clockwise() {
        let mut state = 11u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            super::super::mix64(state)
        };
        // runs of one instance (few instances, many points), across the wrap too
        for (instances, per) in [(0u64, 0u64), (1, 1), (1, 5), (2, 1), (2, 64), (3, 8), (50, 16), (1000, 16)] {
            let points: Vec<(u32, u32)> = (0..instances)
                .flat_map(|i| (0..per).map(move |v| (i, v)))
                .map(|(i, v)| (Ring::point_of(super::super::mix64(i * 7919 + v * 104_729 + 1)), i as u32))
                .collect();
            let ring = Ring::new(points);
            let mut keys: Vec<u64> = (0..3000).map(|_| next()).collect();
            keys.extend([0, u64::MAX]);
            keys.extend(ring.points.iter().map(|p| u64::from(p.point) << 32));
            for key in keys {
                assert_eq!(ring.owner(key), walked(&ring, key), "{instances} × {per}, key {key:#x}");
            }
        }
    }
}
