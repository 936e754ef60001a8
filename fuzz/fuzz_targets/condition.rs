#![no_main]
use std::path::Path;

use clef::table::{Limits, Table};
use libfuzzer_sys::fuzz_target;

const INPUTS: &[&str] = &[
    r#"{}"#,
    r#"{"a":1,"b":2.5,"c":"x","d":true,"e":null,"f":[1,2,3],"g":{"h":{"i":"deep"}},"s":"Hello World"}"#,
    r#"{"user":{"name":"Ann","age":30,"roles":["admin","dev"],"tier":"vip"},"amount":-9223372036854775808,"content":"加微信 tel:123","items":[{"id":1},{"id":"2"}]}"#,
    r#"{"a":"1","b":"","c":[],"d":{},"x":1e308,"y":-0.0,"z":9007199254740993,"tags":["a","b","c"],"n":0}"#,
    r#"{"a":[[1,[2,[3]]]],"b":{"c":[{"d":null}]},"s":"\u0000\uffff","amount":18446744073709551615}"#,
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let table_json = serde_json::json!([{"id": "r", "condition": text, "action": {}}]);
    let bytes = serde_json::to_vec(&table_json).unwrap();
    let Ok(table) = Table::from_bytes(Path::new("t.json"), &bytes, &Limits::default()) else { return };
    for input in INPUTS {
        let input = input.as_bytes();
        let fast = table.decide(input, true);
        let fast_noexplain = table.decide(input, false);
        let reference = table.decide_reference(input);
        match (&fast, &fast_noexplain, &reference) {
            (Ok(a), Ok(b), Ok(r)) => {
                assert_eq!(a.rule, b.rule, "explain on/off differ for {text:?} on {:?}", String::from_utf8_lossy(input));
                assert_eq!(a.rule, r.rule, "decide vs decide_reference differ for {text:?} on {:?}", String::from_utf8_lossy(input));
            }
            (Err(_), Err(_), Err(_)) => {}
            _ => panic!("decide/reference disagree on input validity for {text:?}"),
        }
    }
});
