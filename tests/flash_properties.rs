//! Property tests of flash tables, bounded to run in a few seconds:
//! - the `.cfb` reader returns a table or an error for any bytes — random ones, and valid files
//!   flipped, truncated, extended, or altered with the checksum made to match again (so that the
//!   checks behind the checksum are reached) — and never panics or reads out of bounds;
//! - any changed byte of a valid file is caught (the checksum), and a written table reads back
//!   the same;
//! - the lookup (linear scans, hashing, binary search, strides) decides as the plain reference
//!   that compares each value with every category and range as written.
//!
//! `PROPTEST_CASES` scales the number of cases (default 10,000, as in tests/properties.rs).
// Test code: a failed unwrap, expect or index is the test failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use proptest::prelude::*;
use proptest::test_runner::Config;
use sha2::{Digest, Sha256};

use clef::table::flash::{cfb, DimensionSpec, FlashSpec, FlashTable, RangeSpec};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

/// Category names: short and long, so that both lookups (a scan, a hash) are used.
const WORDS: &[&str] = &[
    "a",
    "b",
    "c",
    "ab",
    "mobile",
    "desktop",
    "tablet",
    "tv",
    "x1",
    "x2",
    "x3",
    "x4",
    "long-name-1",
    "long-name-2",
    "é",
    "漢字",
];

fn dimension(i: usize) -> impl Strategy<Value = DimensionSpec> {
    let field = prop::sample::select(vec![format!("f{i}"), format!("o.f{i}"), format!("o.p.f{i}")]);
    // Small dimensions after the third, so that tables of up to 6 stay small.
    let most = if i < 3 { 12 } else { 2 };
    let categories = prop::sample::subsequence(WORDS.to_vec(), 1..=most)
        .prop_shuffle()
        .prop_map(|v| (v.into_iter().map(String::from).collect::<Vec<_>>(), None));
    // Ranges: sorted distinct bounds (quarters, so that inputs can hit them exactly), the first
    // and last possibly unbounded, each range mapped to one of 1..=n buckets.
    let ranges = (1usize..=20).prop_flat_map(move |n| {
        (
            prop::collection::btree_set(-200i32..200, n + 1),
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(0u16..n as u16, n),
            1..=n.min(most),
        )
            .prop_map(move |(bounds, open_low, open_high, buckets, k)| {
                let mut b: Vec<f64> = bounds.into_iter().map(|x| f64::from(x) / 4.0).collect();
                if open_low {
                    b[0] = f64::NEG_INFINITY;
                }
                if open_high {
                    b[n] = f64::INFINITY;
                }
                let k = k as u16;
                let ranges =
                    (0..n).map(|j| RangeSpec { min: b[j], max: b[j + 1], bucket: buckets[j] % k }).collect::<Vec<_>>();
                let values = (0..k).map(|v| format!("r{v}")).collect::<Vec<_>>();
                (values, Some(ranges))
            })
    });
    (field, prop_oneof![categories, ranges]).prop_map(move |(field, (values, ranges))| DimensionSpec {
        name: format!("d{i}"),
        field,
        values,
        ranges,
    })
}

fn spec() -> impl Strategy<Value = FlashSpec> {
    // Up to 6 dimensions: tables of more than 4 read each field on its own, not in one pass.
    prop_oneof![3 => 1usize..=3, 1 => 4usize..=6]
        .prop_flat_map(|n| {
            let dims: Vec<_> = (0..n).map(dimension).collect();
            (dims, 1usize..=5)
        })
        .prop_flat_map(|(dims, n_actions)| {
            let cells: usize = dims.iter().map(|d| d.values.len()).product();
            (
                Just(dims),
                prop::collection::vec(0u16..n_actions as u16, cells),
                prop::option::of(0u16..n_actions as u16),
                prop::option::of("[a-z ]{0,20}"),
                any::<[u8; 32]>(),
                Just(n_actions),
            )
        })
        .prop_map(|(dimensions, cells, default, description, source_sha256, n)| FlashSpec {
            dimensions,
            actions: (0..n).map(|i| format!(r#"{{"id":{i},"type":"t{i}","n":[{i},"x"]}}"#)).collect(),
            cells,
            default,
            description,
            source_sha256,
        })
}

fn table() -> impl Strategy<Value = FlashTable> {
    spec().prop_map(|s| FlashTable::new(s).expect("a generated spec holds together"))
}

/// A value for a field: a word, a number near or at the bounds, or something else.
fn value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        prop::sample::select(WORDS.to_vec()).prop_map(|w| json!(w)),
        (-210i32..210).prop_map(|x| json!(f64::from(x) / 4.0)),
        (-60i64..60).prop_map(|x| json!(x)),
        Just(json!(null)),
        Just(json!(true)),
        Just(json!("MOBILE")),
        Just(json!([1])),
        Just(json!({"f0": 1})),
        Just(json!(1e300)),
        Just(json!(-1e300)),
    ]
}

/// An input object setting some of the fields the generated dimensions may read.
fn input() -> impl Strategy<Value = String> {
    let keys = (0..6).flat_map(|i| [format!("f{i}"), format!("o.f{i}"), format!("o.p.f{i}")]).collect::<Vec<_>>();
    prop::collection::vec((prop::sample::select(keys), value()), 0..14).prop_map(|pairs| {
        let mut root = serde_json::Map::new();
        for (path, v) in pairs {
            let parts: Vec<&str> = path.split('.').collect();
            let mut obj = &mut root;
            for p in &parts[..parts.len() - 1] {
                let entry = obj.entry(p.to_string()).or_insert_with(|| serde_json::json!({}));
                if !entry.is_object() {
                    *entry = serde_json::json!({});
                }
                obj = entry.as_object_mut().expect("an object");
            }
            obj.insert(parts[parts.len() - 1].to_string(), v);
        }
        serde_json::Value::Object(root).to_string()
    })
}

/// Decides a few inputs with a table read from bytes: nothing may panic.
fn exercise(t: &FlashTable) {
    for input in [r#"{"f0":"a","f1":0.5,"o":{"f2":-1,"p":{"f0":"tv"}}}"#, "{}", r#"{"f0":1e300,"f1":"b"}"#] {
        clef::input::with_parsed(input.as_bytes(), 128, |root| {
            let d = t.decide(&root, true);
            assert_eq!(d.rule, t.decide_reference(&root).rule);
            let _ = t.action_json(d.rule);
        })
        .expect("a valid input");
    }
}

/// Recomputes the checksum of a (modified) file, so that the reader gets past it.
fn reseal(bytes: &mut [u8]) {
    if bytes.len() >= 32 {
        let body = bytes.len() - 32;
        let sum = Sha256::digest(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum);
    }
}

proptest! {
    #![proptest_config(Config { cases: cases() / 4, ..Config::default() })]

    #[test]
    fn random_bytes_give_an_error(bytes in prop::collection::vec(any::<u8>(), 0..600), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 4 {
            bytes[..4].copy_from_slice(b"CFB1");
        }
        // A random file cannot carry a matching checksum.
        prop_assert!(cfb::read(&bytes).is_err());
    }

    #[test]
    fn written_tables_read_back_the_same(t in table()) {
        let bytes = cfb::write(&t);
        prop_assert!(bytes.len() <= cfb::MAX_BYTES);
        let back = cfb::read(&bytes).expect("a written table reads");
        prop_assert_eq!(back.spec(), t.spec());
        prop_assert_eq!(cfb::write(&back), bytes);
    }

    #[test]
    fn any_changed_byte_is_caught(t in table(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut bytes = cfb::write(&t);
        let i = at.index(bytes.len());
        bytes[i] ^= flip;
        prop_assert!(cfb::read(&bytes).is_err(), "byte {} changed", i);
    }

    #[test]
    fn truncated_and_extended_files_are_refused(t in table(), cut in any::<prop::sample::Index>(), extra in prop::collection::vec(any::<u8>(), 1..40)) {
        let bytes = cfb::write(&t);
        let n = cut.index(bytes.len());
        let err = cfb::read(&bytes[..n]).unwrap_err().0;
        prop_assert!(err.contains("truncated") || err.contains("CFB1"), "{}", err);
        let mut longer = bytes.clone();
        longer.extend_from_slice(&extra);
        prop_assert!(cfb::read(&longer).is_err());
    }

    /// Behind the checksum: altered bytes (a byte, or a whole little-endian u16/u32 set to a
    /// random or extreme value, as a bad offset or count would be), truncated or extended
    /// files, all with a checksum that matches again. The reader gives a table (which then
    /// decides without panicking) or an error.
    #[test]
    fn altered_files_with_a_matching_checksum_never_panic(
        t in table(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, any::<u32>()), 1..4),
        resize in prop_oneof![Just(0i32), -40i32..40],
    ) {
        let mut bytes = cfb::write(&t);
        let body = bytes.len() - 32;
        for (at, kind, v) in edits {
            let i = at.index(body);
            let v = match v % 4 { 0 => v, 1 => u32::MAX, 2 => 0, _ => v % 256 };
            match kind {
                0 => bytes[i] = v as u8,
                1 => { let end = (i + 2).min(body); bytes[i..end].copy_from_slice(&(v as u16).to_le_bytes()[..end - i]); }
                _ => { let end = (i + 4).min(body); bytes[i..end].copy_from_slice(&v.to_le_bytes()[..end - i]); }
            }
        }
        if resize != 0 {
            let len = (bytes.len() as i64 + i64::from(resize)).max(0) as usize;
            bytes.resize(len, 0);
            if len >= 12 {
                bytes[8..12].copy_from_slice(&(len as u32).to_le_bytes());
            }
        }
        reseal(&mut bytes);
        if let Ok(t) = cfb::read(&bytes) {
            exercise(&t);
        }
    }

    #[test]
    fn the_lookup_decides_as_the_reference(t in table(), inputs in prop::collection::vec(input(), 1..20)) {
        for input in &inputs {
            clef::input::with_parsed(input.as_bytes(), 128, |root| {
                let fast = t.decide(&root, true);
                let plain = t.decide_reference(&root);
                assert_eq!(fast.rule, plain.rule, "{}", input);
                assert_eq!(fast.trace.as_ref().map(|tr| tr[0].matched), Some(fast.rule.is_some()));
            }).expect("a valid input");
        }
    }
}
