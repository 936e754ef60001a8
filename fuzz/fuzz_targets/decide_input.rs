#![no_main]
use std::path::Path;
use std::sync::OnceLock;

use clef::table::{Limits, Table};
use libfuzzer_sys::fuzz_target;

const TABLE: &str = r#"{
  "name": "fuzz",
  "params": {"max_amount": {"value": 1000}},
  "default": {"d": true},
  "rules": [
    {"id": "nested", "condition": "user.profile.tier == \"vip\" && (user.profile.score ?? 0) > 10", "action": {"n": 1}},
    {"id": "arr", "condition": "tags[0] == \"x\" || \"y\" in tags || len(tags ?? []) > 3 || items[1].id == 2", "action": {"n": 2}},
    {"id": "neg_index", "condition": "(items[-1].name ?? \"\") startsWith \"z\"", "action": {"n": 3}},
    {"id": "re", "condition": "content ~ \"(微信|QQ|tel:)[0-9]+\" || lower(content ?? \"\") contains \"spam\"", "action": {"n": 4}},
    {"id": "re2", "condition": "(headers[\"user-agent\"] ?? \"\") matches \"(?i)(sqlmap|nikto)\" && !(path endsWith \".js\")", "action": {"n": 5}},
    {"id": "arith", "condition": "(amount ?? 0) * 2 + (fee ?? 0) / 3 - abs(delta ?? 0) > params.max_amount", "action": {"n": 6}},
    {"id": "num", "condition": "int(round(float(amount ?? 0))) % 7 == 3 || int(string(code ?? 1)) ** 2 > 100", "action": {"n": 7}},
    {"id": "inset", "condition": "country in [\"CN\", \"HK\", \"RU\"] && method in [\"GET\", \"POST\"]", "action": {"n": 8}},
    {"id": "cmp", "condition": "min(a ?? 0, b ?? 0, 3) < max(c ?? 0, 1) && trim(upper(name ?? \"\")) != \"\"", "action": {"n": 9}},
    {"id": "flag", "condition": "!is_vpn && not blocked", "action": {"n": 10}},
    {"id": "deep", "condition": "a.b.c.d.e.f == 1 || a[\"b\"][\"c\"] == [1, 2] || x == [\"k\", 1]", "action": {"n": 11}}
  ]
}"#;

/// The same kind of input through a schema: every type, dotted paths, fields
/// no condition reads. The check by slots and the walk of the reference must
/// give the same error.
const SCHEMA_TABLE: &str = r#"{
  "schema": {
    "amount": "number", "count": "integer", "tier": "string", "is_vpn": "boolean",
    "tags": "array", "user": "object", "user.profile.tier": "string", "user.profile.score": "integer",
    "headers.user-agent": "string", "meta": "any", "unread": "string"
  },
  "default": {"d": true},
  "rules": [
    {"id": "big", "condition": "(amount ?? 0) > 1000 && (count ?? 0) % 2 == 0", "action": {"n": 1}},
    {"id": "vip", "condition": "user.profile.tier == \"vip\" && (user.profile.score ?? 0) > 10", "action": {"n": 2}},
    {"id": "bot", "condition": "(headers[\"user-agent\"] ?? \"\") contains \"bot\" || \"x\" in tags", "action": {"n": 3}},
    {"id": "vpn", "condition": "is_vpn == true || tier in [\"gold\", \"vip\"]", "action": {"n": 4}}
  ]
}"#;

fn tables() -> &'static [Table] {
    static T: OnceLock<Vec<Table>> = OnceLock::new();
    T.get_or_init(|| {
        // A table that does not load would make every run test nothing: stop at once.
        [("fuzz.json", TABLE), ("schema.json", SCHEMA_TABLE)]
            .into_iter()
            .map(|(name, text)| {
                Table::from_bytes(Path::new(name), text.as_bytes(), &Limits::default())
                    .unwrap_or_else(|e| panic!("the fuzz table {name} must load:\n{e}"))
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    for t in tables() {
        let a = t.decide(data, true);
        let b = t.decide(data, false);
        let r = t.decide_reference(data);
        match (&a, &b, &r) {
            (Ok(a), Ok(b), Ok(r)) => {
                assert_eq!(a.rule, b.rule, "explain on/off differ");
                assert_eq!(a.rule, r.rule, "decide vs reference differ");
                let _ = t.action_json(a);
            }
            (Err(x), Err(y), Err(z)) => {
                assert_eq!(x, y);
                assert_eq!(x, z);
            }
            _ => panic!("decide/reference disagree on validity: {a:?} {b:?} {r:?}"),
        }
    }
});
