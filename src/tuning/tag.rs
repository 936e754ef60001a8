//! Which arm made a tuned decision, carried in the decision's own snapshot id.
//!
//! **Why in the id.** `POST /feedback` names a decision only by its `snapshot_id`, and must
//! know which table and which arm (baseline or variant) made it. Keeping a record per
//! decision until its feedback comes would grow with traffic (100,000 decisions a second, most
//! never fed back) and be written on the request path. Instead the last 32 bits of the
//! UUIDv7 — random bits in an ordinary id — carry the table's slot (4 bits), the arm (4 bits)
//! and a 24-bit keyed hash of the rest of the id (its *head*: time, version, counter). Feedback
//! recomputes the hash: an id clef did not make for a tuned decision, or one made before the
//! table's tuning last started over (a new version, a promotion), fails it except by a 1 in
//! 16.7 million chance. The key is random, kept in `state_dir` so that ids made before a
//! restart still count.
//!
//! **Why this hash.** Tagging is on every tuned decision, so it must cost a few nanoseconds,
//! not the ~80 instructions of SipHash over the head, slot, arm and generation. The secret key
//! is therefore first turned into one 256-bit key per (slot, arm, generation) with SipHash-1-3
//! ([`Tagger::arm_key`]), when the arms are built (and again when feedback is read); tagging
//! a decision then only mixes the head with its arm's key: two folded 64×64→128-bit
//! multiplies (as in wyhash), the tag being the top 24 bits of the second. The slot, arm and
//! generation need not be hashed per decision: they are in the key. This is not a
//! cryptographic MAC, and need not be one: the tag only keeps feedback for ids that no tuned
//! decision of this generation made from being counted. A 24-bit tag is guessed once in 16.7
//! million tries anyway, every id counts once, and learning the arm keys from observed
//! (head, tag) pairs would take analysing the mix with a different 256-bit key per arm and
//! generation; what such an attacker gains is feedback it could send for its own real ids.
//! (Ids tagged before this hash replaced SipHash over every field are refused as unknown.)
//!
//! The id stays a valid UUIDv7: time, version, variant and the per-thread counter are
//! untouched, so ids still increase within a worker thread.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher13};

use crate::snapshot::SnapshotId;

/// The most tables tuned at once (4 bits of slot).
pub const MAX_TABLES: usize = 16;
/// The most arms per table, baseline included (4 bits of arm).
pub const MAX_ARMS: usize = 16;

const MAC_BITS: u32 = 24;

/// Tags ids with the arm that decided and reads the tags back.
#[derive(Clone, Debug)]
pub struct Tagger {
    key: [u64; 2],
}

/// What a tag says: the tuned table's slot and the arm (0: baseline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// the table's place in `tuning.tables`
    pub slot: usize,
    /// 0 for the baseline, `i` for variant `vi`
    pub arm: usize,
}

/// The key that tags the ids of one arm of one tuned table in one generation (see the module
/// doc): made once when the arms are built, so that tagging a decision is a few multiplies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArmKey {
    k: [u64; 4],
    /// slot and arm, in place in the id's last 32 bits
    bits: u32,
}

impl Tagger {
    /// A tagger with this secret key.
    pub fn new(key: [u64; 2]) -> Tagger {
        Tagger { key }
    }

    /// The key of (`slot`, `arm`) under `generation`.
    pub fn arm_key(&self, tag: Tag, generation: u32) -> ArmKey {
        let (slot, arm) = ((tag.slot & 0xf) as u8, (tag.arm & 0xf) as u8);
        let half = |part: u8| {
            let mut h = SipHasher13::new_with_keys(self.key[0], self.key[1]);
            h.write_u8(part);
            h.write_u8(slot);
            h.write_u8(arm);
            h.write_u32(generation);
            h.finish128()
        };
        let (a, b) = (half(0), half(1));
        ArmKey { k: [a.h1, a.h2, b.h1, b.h2], bits: (u32::from(slot) << 28) | (u32::from(arm) << 24) }
    }

    /// `id` with its last 32 bits replaced by the tag of (`slot`, `arm`) under `generation`.
    pub fn tag(&self, id: SnapshotId, tag: Tag, generation: u32) -> SnapshotId {
        self.arm_key(tag, generation).tag(id)
    }

    /// The tag `id` carries, if its hash holds under the generation `generation_of` gives for
    /// its slot (`None` from it: no such tuned table).
    pub fn read(&self, id: SnapshotId, generation_of: impl Fn(usize) -> Option<u32>) -> Option<Tag> {
        let v = id.as_u128();
        let (slot, arm) = (((v >> 28) & 0xf) as usize, ((v >> 24) & 0xf) as usize);
        let generation = generation_of(slot)?;
        let tag = Tag { slot, arm };
        (self.arm_key(tag, generation).tag(id) == id).then_some(tag)
    }
}

impl ArmKey {
    /// The key from what [`ArmKey::parts`] gave.
    #[inline]
    pub(crate) fn from_parts(k: [u64; 4], bits: u32) -> ArmKey {
        ArmKey { k, bits }
    }

    /// The key's words and its slot and arm bits, to keep in atomics.
    pub(crate) fn parts(&self) -> ([u64; 4], u32) {
        (self.k, self.bits)
    }

    /// `id` with its last 32 bits replaced by this arm's tag.
    #[inline]
    pub fn tag(&self, id: SnapshotId) -> SnapshotId {
        let head = id.as_u128() >> 32;
        SnapshotId::from_u128((head << 32) | u128::from(self.bits | self.mac(head)))
    }

    /// The 24-bit hash of the id's 96-bit head.
    #[inline]
    fn mac(&self, head: u128) -> u32 {
        let x = fold(head as u64 ^ self.k[0], (head >> 64) as u64 ^ self.k[1]);
        (fold(x ^ self.k[2], self.k[3] | 1) >> (64 - MAC_BITS)) as u32
    }
}

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::next_id;

    #[test]
    fn a_tag_reads_back_and_keeps_the_id_a_uuid_v7() {
        let t = Tagger::new([1, 2]);
        let id = next_id();
        let tagged = t.tag(id, Tag { slot: 3, arm: 5 }, 42);
        assert_eq!(tagged.as_u128() >> 32, id.as_u128() >> 32, "time, version, variant and counter stay");
        assert_eq!(tagged.text().as_str().as_bytes()[14], b'7');
        assert_eq!(t.read(tagged, |s| (s == 3).then_some(42)), Some(Tag { slot: 3, arm: 5 }));
        // another generation, another key, an untagged id, an unknown slot: not ours
        assert_eq!(t.read(tagged, |_| Some(43)), None);
        assert_eq!(Tagger::new([1, 3]).read(tagged, |_| Some(42)), None);
        assert_eq!(t.read(tagged, |_| None), None);
        let forged = (0..1000).filter(|_| t.read(next_id(), |_| Some(42)).is_some()).count();
        assert_eq!(forged, 0);
    }

    #[test]
    fn an_arm_key_tags_as_the_tagger_does_and_spreads_its_tags() {
        let t = Tagger::new([7, 11]);
        let key = t.arm_key(Tag { slot: 2, arm: 1 }, 9);
        let ids: Vec<SnapshotId> = (0..4096).map(|_| next_id()).collect();
        for id in &ids {
            assert_eq!(key.tag(*id), t.tag(*id, Tag { slot: 2, arm: 1 }, 9));
        }
        // consecutive ids of one thread differ in a few counter bits only; their tags must not
        let macs: std::collections::HashSet<u128> = ids.iter().map(|id| key.tag(*id).as_u128() & 0xff_ffff).collect();
        assert!(macs.len() > 4000, "{} distinct tags of 4096", macs.len());
        // every arm, slot and generation has its own key
        let other = [
            t.arm_key(Tag { slot: 2, arm: 0 }, 9),
            t.arm_key(Tag { slot: 3, arm: 1 }, 9),
            t.arm_key(Tag { slot: 2, arm: 1 }, 10),
        ];
        for k in other {
            let same = ids
                .iter()
                .filter(|id| k.tag(**id).as_u128() & 0xff_ffff == key.tag(**id).as_u128() & 0xff_ffff)
                .count();
            assert!(same < 3, "{same} equal tags under another key");
        }
    }

    #[test]
    fn later_ids_of_a_thread_still_sort_later() {
        let t = Tagger::new([9, 9]);
        let ids: Vec<SnapshotId> =
            (0..100).map(|i| t.tag(next_id(), Tag { slot: i % 16, arm: (i * 7) % 16 }, 1)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
