//! The `.cfb` reader on any bytes: a table or an error, never a panic or a read out of bounds;
//! a table that reads decides (explained or not) and writes back to bytes that read the same.
#![no_main]
use clef::table::flash::cfb;
use libfuzzer_sys::fuzz_target;

const INPUTS: &[&[u8]] = &[
    br#"{"device":"mobile","error_rate":0.07}"#,
    br#"{"device":"desktop","error_rate":-1e300,"a":{"b":{"c":"x"}}}"#,
    br#"{"a":"","b":0,"c":null,"d":[1],"e":{}}"#,
    b"{}",
];

fuzz_target!(|data: &[u8]| {
    let Ok(table) = cfb::read(data) else { return };
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
