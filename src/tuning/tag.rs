//! Which arm made a tuned decision, carried in the decision's own snapshot id.
//!
//! **Why in the id.** `POST /feedback` names a decision only by its `snapshot_id`, and must
//! know which table and which arm (baseline or variant) made it. Keeping a record per
//! decision until its feedback comes would grow with traffic (100,000 decisions a second, most
//! never fed back) and be written on the request path. Instead the last 32 bits of the
//! UUIDv7 — random bits in an ordinary id — carry the table's slot (4 bits), the arm (4 bits)
//! and a 24-bit keyed hash (SipHash-1-3) of the rest of the id, the slot, the arm and the
//! table's tuning generation. Feedback recomputes the hash: an id clef did not make for a
//! tuned decision, or one made before the table's tuning last started over (a new version,
//! a promotion), fails it except by a 1 in 16.7 million chance. The key is random, kept in
//! `state_dir` so that ids made before a restart still count.
//!
//! The id stays a valid UUIDv7: time, version, variant and the per-thread counter are
//! untouched, so ids still increase within a worker thread.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

use crate::snapshot::SnapshotId;

/// The most tables tuned at once (4 bits of slot).
pub const MAX_TABLES: usize = 16;
/// The most arms per table, baseline included (4 bits of arm).
pub const MAX_ARMS: usize = 16;

const MAC_BITS: u32 = 24;
const MAC_MASK: u128 = (1 << MAC_BITS) - 1;

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

impl Tagger {
    /// A tagger with this secret key.
    pub fn new(key: [u64; 2]) -> Tagger {
        Tagger { key }
    }

    /// `id` with its last 32 bits replaced by the tag of (`slot`, `arm`) under `generation`.
    pub fn tag(&self, id: SnapshotId, tag: Tag, generation: u32) -> SnapshotId {
        let head = id.as_u128() >> 32;
        let (slot, arm) = ((tag.slot & 0xf) as u128, (tag.arm & 0xf) as u128);
        let mac = self.mac(head, slot, arm, generation);
        SnapshotId::from_u128((head << 32) | (slot << 28) | (arm << 24) | mac)
    }

    /// The tag `id` carries, if its hash holds under the generation `generation_of` gives for
    /// its slot (`None` from it: no such tuned table).
    pub fn read(&self, id: SnapshotId, generation_of: impl Fn(usize) -> Option<u32>) -> Option<Tag> {
        let v = id.as_u128();
        let head = v >> 32;
        let (slot, arm) = (((v >> 28) & 0xf) as usize, ((v >> 24) & 0xf) as usize);
        let generation = generation_of(slot)?;
        (self.mac(head, slot as u128, arm as u128, generation) == v & MAC_MASK).then_some(Tag { slot, arm })
    }

    fn mac(&self, head: u128, slot: u128, arm: u128, generation: u32) -> u128 {
        let mut h = SipHasher13::new_with_keys(self.key[0], self.key[1]);
        h.write_u128(head);
        h.write_u8(slot as u8);
        h.write_u8(arm as u8);
        h.write_u32(generation);
        u128::from(h.finish()) & MAC_MASK
    }
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
    fn later_ids_of_a_thread_still_sort_later() {
        let t = Tagger::new([9, 9]);
        let ids: Vec<SnapshotId> =
            (0..100).map(|i| t.tag(next_id(), Tag { slot: i % 16, arm: (i * 7) % 16 }, 1)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
