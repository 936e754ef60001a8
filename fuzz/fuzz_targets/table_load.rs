#![no_main]
use std::path::Path;

use clef::table::{Limits, Table};
use libfuzzer_sys::fuzz_target;

const INPUT: &[u8] = br#"{"user_tier":"vip","amount":1500,"country_code":"CN","tags":["a","b"],"user":{"name":"Ann","age":30,"roles":["admin"]},"content":"hello","flag":true,"x":null}"#;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(table) = Table::from_bytes(Path::new("t.json"), data, &limits) {
        if let Ok(d) = table.decide(INPUT, true) {
            let _ = table.action_json(&d);
        }
        let _ = table.decide(INPUT, false);
        let _ = table.decide(b"{}", true);
    }
});
