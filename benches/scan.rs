//! The table-aware scan against the full simd-json parse, on request bodies from 300 B to 64 KiB
//! (issue 28: where does SIMD pay?).
//!
//! Two shapes of body, each at 300 B, 1 KiB, 4 KiB, 16 KiB and 64 KiB, compact JSON as clients
//! send it, read by a table of three rules that reads `user.tier` (near the start), `channel`
//! and `amount` (at the end):
//! - `strings`: a chat/API request whose bulk is unread text — chat messages with escapes
//!   (`\n`, `\"`, `\u` pairs) and raw UTF-8, user agents, base64 attachments;
//! - `nested`: an order-like request whose bulk is unread objects, arrays and numbers (line
//!   items with prices, tags and dimensions; metric series).
//!
//! For each, `scan/SIZE` is [`Table::decide`] (the path every decision takes: the scan, or
//! whatever it hands the body to) and `full/SIZE` the full parse then the same decision from it
//! (`input::with_parsed` + `Table::decide_parsed`). The rule evaluation is the same few
//! comparisons on both: the difference is the parse.
//!
//! Run: `cargo bench --bench scan` (`-- strings` or `-- nested` for one shape). The table and
//! the bodies are also written to `$TMPDIR/clef-bench-scan/` (`table.json`, `strings-65536.json`
//! …) for `clef bench TABLE INPUT`.
// Benchmark code: a failed unwrap, expect or index is the benchmark's setup failing, as an assertion would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;

use clef::table::{Limits, Table};
use criterion::{criterion_group, criterion_main, Criterion};

const SIZES: [usize; 5] = [300, 1024, 4096, 16 * 1024, 64 * 1024];

/// Reads one field near the start of the body and two at its end; only the last rule matches.
const TABLE: &str = r#"{
  "rules": [
    {"id": "platinum", "condition": "user.tier == \"platinum\" && amount > 1000", "action": {"route": "review"}},
    {"id": "mobile", "condition": "channel == \"mobile\" || amount > 5000", "action": {"route": "app"}},
    {"id": "web", "condition": "channel == \"web\" && user.tier in [\"gold\", \"silver\"]", "action": {"route": "default"}}
  ]
}"#;

/// A deterministic stream of pseudo-random numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "hello",
    "the",
    "order",
    "arrived",
    "late",
    "again",
    "and",
    "I",
    "would",
    "like",
    "a",
    "refund",
    "please",
    "thanks",
    "can",
    "you",
    "check",
    "tracking",
    "number",
    "café",
    "déjà",
    "vu",
    "naïve",
    "übermäßig",
    "señor",
    "東京",
    "😀",
    "ok",
];

/// Chat text as a JSON string's content: words, punctuation, escaped newlines and quotes, raw
/// UTF-8 and the odd `\u` escape.
fn chat_text(rng: &mut Rng, len: usize) -> String {
    let mut s = String::new();
    while s.len() < len {
        match rng.below(40) {
            0 => s.push_str("\\n"),
            1 => s.push_str("\\\""),
            2 => s.push_str("\\ud83d\\ude00"),
            3 => s.push_str(", "),
            4 => s.push_str(". "),
            _ => {
                s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
                s.push(' ');
            }
        }
    }
    s
}

fn user_agent(rng: &mut Rng) -> String {
    format!(
        "Mozilla/5.0 (Linux; Android 14; Pixel {}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{}.0.{}.{} Mobile Safari/537.36",
        rng.below(9),
        100 + rng.below(30),
        rng.below(7000),
        rng.below(200)
    )
}

fn base64(rng: &mut Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len).map(|_| ALPHABET[rng.below(64) as usize] as char).collect()
}

/// `{HEAD, members..., TAIL}` of about `size` bytes: members are added while they fit, and a
/// string member pads the rest.
fn body(size: usize, head: &str, tail: &str, mut member: impl FnMut(usize, usize) -> String) -> String {
    let mut out = format!("{{{head}");
    let mut i = 0;
    loop {
        let room = size.saturating_sub(out.len() + tail.len() + 2);
        let m = member(i, room);
        if m.len() + 1 > room {
            break;
        }
        out.push(',');
        out.push_str(&m);
        i += 1;
    }
    let room = size.saturating_sub(out.len() + tail.len() + 2);
    if room > 10 {
        write!(out, ",\"pad\":\"{}\"", "x".repeat(room - 9)).unwrap();
    }
    write!(out, ",{tail}}}").unwrap();
    out
}

const HEAD: &str =
    r#""request_id":"5f0c7e9a-3b1d-4c8e-9f2a-7d6b1e0c4a93","user":{"id":"u-48213","tier":"gold","since":"2019-04-02"}"#;
const TAIL: &str = r#""channel":"web","amount":129.95"#;

/// A request whose bulk is unread strings.
fn strings_body(size: usize) -> String {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    body(size, HEAD, TAIL, |i, room| match i % 4 {
        0 => format!("\"message_{i}\":{{\"text\":\"{}\",\"lang\":\"en\"}}", chat_text(&mut rng, 120 + i * 40)),
        1 => format!("\"user_agent_{i}\":\"{}\"", user_agent(&mut rng)),
        2 => {
            let len = (room.saturating_sub(60) / 2).clamp(64, 8192) & !3;
            format!("\"attachment_{i}\":{{\"name\":\"photo-{i}.jpg\",\"data\":\"{}\"}}", base64(&mut rng, len))
        }
        _ => format!("\"note_{i}\":\"{}\"", chat_text(&mut rng, 60)),
    })
}

/// A request whose bulk is unread objects, arrays and numbers.
fn nested_body(size: usize) -> String {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    body(size, HEAD, TAIL, |i, _| {
        match i % 3 {
        0 | 1 => format!(
            "\"item_{i}\":{{\"sku\":\"A-{}\",\"qty\":{},\"price\":{}.{:02},\"tags\":[\"new\",\"sale\"],\"dims\":{{\"w\":{}.5,\"h\":{},\"d\":[{},{},{}]}},\"gift\":{},\"note\":null}}",
            rng.below(100_000),
            1 + rng.below(9),
            rng.below(500),
            rng.below(100),
            rng.below(80),
            rng.below(80),
            rng.below(10),
            rng.below(10),
            rng.below(10),
            rng.below(2) == 0,
        ),
        _ => {
            let series: Vec<String> =
                (0..12).map(|_| format!("{}.{}", rng.below(2000), rng.below(1000))).collect();
            format!("\"metrics_{i}\":{{\"latency_ms\":[{}],\"errors\":[[0,1],[2,0]],\"ok\":true}}", series.join(","))
        }
    }
    })
}

fn scan(c: &mut Criterion) {
    let table = Table::from_bytes(Path::new("scan.json"), TABLE.as_bytes(), &Limits::default()).unwrap();
    let dir = std::env::temp_dir().join("clef-bench-scan");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("table.json"), TABLE).unwrap();
    for (shape, make) in [("strings", strings_body as fn(usize) -> String), ("nested", nested_body)] {
        let mut group = c.benchmark_group(shape);
        for size in SIZES {
            let body = make(size);
            assert!(body.len().abs_diff(size) < size / 10 + 16, "{shape}: {} bytes for {size}", body.len());
            std::fs::write(dir.join(format!("{shape}-{size}.json")), &body).unwrap();
            let body = body.into_bytes();
            let d = table.decide(&body, false).unwrap();
            assert_eq!(d.rule, Some(2), "{shape}-{size}: the last rule must match");
            let full = clef::input::with_parsed(&body, 128, |root| table.decide_parsed(&root, false)).unwrap().unwrap();
            assert_eq!(full.rule, d.rule);
            group.throughput(criterion::Throughput::Bytes(body.len() as u64));
            group.bench_function(format!("scan/{size}"), |b| b.iter(|| table.decide(black_box(&body), false)));
            group.bench_function(format!("full/{size}"), |b| {
                b.iter(|| clef::input::with_parsed(black_box(&body), 128, |root| table.decide_parsed(&root, false)))
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(40).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = scan
}
criterion_main!(benches);
