//! The `.cfb` reader on any bytes: a table or an error, never a panic or a read out of bounds;
//! a table that reads decides (explained or not) and writes back to bytes that read the same.
//! When the first byte is odd, the rest gets a matching checksum before it is read, so that the
//! checks behind the checksum (offsets, counts, strings, ranges) are reached too.
#![no_main]
use clef::table::flash::cfb;
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

const INPUTS: &[&[u8]] = &[
    br#"{"device":"mobile","error_rate":0.07}"#,
    br#"{"device":"desktop","error_rate":-1e300,"a":{"b":{"c":"x"}}}"#,
    br#"{"a":"","b":0,"c":null,"d":[1],"e":{}}"#,
    b"{}",
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 && bytes.len() >= 32 {
        let body = bytes.len() - 32;
        let sum = Sha256::digest(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum);
    }
    let Ok(table) = cfb::read(&bytes) else { return };
    for input in INPUTS {
        let _ = clef::input::with_parsed(input, 128, |root| {
            let fast = table.decide(&root, true);
            assert_eq!(fast.rule, table.decide_reference(&root).rule);
            let _ = table.action_json(fast.rule);
            if let Some(c) = fast.rule {
                let _ = table.cell_id_json(c);
            }
        });
    }
    let again = cfb::read(&cfb::write(&table)).expect("a table written back reads");
    assert_eq!(again.spec(), table.spec());
});
