//! The regex side of the multi-pattern comparison (issue 28).
//!
//! ```text
//! mp-bench ENGINE [-n ITER] [-t SECONDS] [-o IDS_DIR] PATTERNS MSG...
//! ```
//!
//! ENGINE is one of:
//!
//! - `clef`: clef's own pass, `crates/clef-engine/src/expr/patterns.rs` compiled in as it is
//!   (one `PatternGroup` of every pattern, each built as clef builds a table's regex, with a
//!   1 MiB size limit): the Aho-Corasick pass over the required literals, then every
//!   pattern's answer (`test`), which runs the regex of each pattern whose literals occurred
//!   and the `RegexSet` of those without any. A table that asks every pattern does this.
//! - `set`: one `regex::RegexSet` of all the patterns (`matches`: which patterns match), with
//!   the size limits clef gives its set of patterns without literals (64 MiB, DFA 16 MiB).
//! - `meta`: one multi-pattern `regex_automata::meta::Regex` (`MatchKind::All`,
//!   `which_overlapping_matches`), the engine under `RegexSet`, with the same limits.
//!
//! Prints one JSON object in the shape `hs_bench` prints: compile time, the heap the compiled
//! matcher holds (counted by the global allocator) before and after the scans (the lazy DFA's
//! caches grow as they scan), the allocator's peak while compiling, peak RSS, and per message
//! the median and 99th percentile of one pass and how many patterns matched. With -o, writes
//! IDS_DIR/MSG_NAME.ids, the matching patterns' line numbers (from 0), one a line.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../../../../crates/clef-engine/src/expr/alphabet.rs"]
mod alphabet;
#[allow(dead_code)]
#[path = "../../../../crates/clef-engine/src/expr/matcher.rs"]
mod matcher;
#[allow(dead_code)]
#[path = "../../../../crates/clef-engine/src/expr/patterns.rs"]
mod patterns;

use patterns::{PatternGroup, PatternTest};
use regex_automata::nfa::thompson::WhichCaptures;
use regex_automata::{meta, MatchKind, PatternSet};

/// The system allocator, counting the bytes held now and at most.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = HELD.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        HELD.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn max_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

// one matcher a process: the size of the variants does not matter
#[allow(clippy::large_enum_variant)]
enum Matcher {
    Clef(PatternGroup),
    Set(regex::RegexSet),
    Meta(meta::Regex, meta::Cache, PatternSet),
}

impl Matcher {
    /// The patterns that match `text`, by index.
    fn matches(&mut self, text: &str, out: &mut Vec<usize>) {
        out.clear();
        match self {
            Matcher::Clef(g) => {
                let mut state = g.state();
                g.scan(text, &mut state);
                out.extend((0..g.len()).filter(|&i| g.test(i, text, &mut state)));
            }
            Matcher::Set(s) => out.extend(s.matches(text).iter()),
            Matcher::Meta(re, cache, set) => {
                set.clear();
                re.which_overlapping_matches_with(cache, &regex_automata::Input::new(text), set);
                out.extend(set.iter().map(|p| p.as_usize()));
            }
        }
    }
}

fn build(engine: &str, patterns: &[&str]) -> Result<Matcher, String> {
    Ok(match engine {
        "clef" => {
            let mut tests = Vec::with_capacity(patterns.len());
            // as clef's compiler builds a table's `matches` tests (crates/clef-engine/src/expr/compile.rs):
            // over the alphabet of all of them
            let hirs: Vec<_> = patterns.iter().filter_map(|p| regex_syntax::Parser::new().parse(p).ok()).collect();
            let alphabet = alphabet::Alphabet::new(&hirs).map(std::sync::Arc::new);
            for p in patterns {
                let re = matcher::Matcher::with_alphabet(p, 1 << 20, alphabet.as_ref()).map_err(|e| format!("{p}: {e}"))?;
                tests.push(PatternTest::Regex(re));
            }
            Matcher::Clef(PatternGroup::new(tests, alphabet.as_ref()))
        }
        "set" => Matcher::Set(
            regex::RegexSetBuilder::new(patterns)
                .size_limit(64 << 20)
                .dfa_size_limit(16 << 20)
                .build()
                .map_err(|e| e.to_string())?,
        ),
        "meta" => {
            let re = meta::Builder::new()
                .configure(
                    meta::Config::new()
                        .match_kind(MatchKind::All)
                        // as RegexSet does: without it the PikeVM's cache keeps 2 slots a
                        // pattern for every NFA state (gigabytes with 500 patterns)
                        .which_captures(WhichCaptures::None)
                        .nfa_size_limit(Some(64 << 20))
                        .hybrid_cache_capacity(16 << 20),
                )
                .build_many(patterns)
                .map_err(|e| e.to_string())?;
            let cache = re.create_cache();
            let set = PatternSet::new(re.pattern_len());
            Matcher::Meta(re, cache, set)
        }
        _ => return Err(format!("unknown engine {engine} (clef, set or meta)")),
    })
}

fn json(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: mp-bench clef|set|meta [-n ITER] [-t SECONDS] [-o IDS_DIR] PATTERNS MSG...";
    let Some(engine) = args.first().cloned() else {
        eprintln!("{usage}");
        std::process::exit(2)
    };
    let (mut iters, mut seconds, mut ids_dir) = (2000usize, 3.0f64, None::<String>);
    let mut a = 1;
    while a + 1 < args.len() && args[a].starts_with('-') {
        match args[a].as_str() {
            "-n" => iters = args[a + 1].parse().expect("-n N"),
            "-t" => seconds = args[a + 1].parse().expect("-t SECONDS"),
            "-o" => ids_dir = Some(args[a + 1].clone()),
            _ => break,
        }
        a += 2;
    }
    if args.len() - a < 2 {
        eprintln!("{usage}");
        std::process::exit(2)
    }
    let text = std::fs::read_to_string(&args[a]).expect("the patterns file");
    let patterns: Vec<&str> = text.lines().collect();

    let before = HELD.load(Relaxed);
    PEAK.store(before, Relaxed);
    let t0 = Instant::now();
    let mut m = match build(&engine, &patterns) {
        Ok(m) => m,
        Err(e) => {
            println!(
                "{{\"engine\":{},\"patterns\":{},\"error\":{},\"compile_ms\":{:.2},\"max_rss_kb\":{}}}",
                json(&engine),
                patterns.len(),
                json(&e),
                t0.elapsed().as_secs_f64() * 1e3,
                max_rss_kb()
            );
            return;
        }
    };
    let compile = t0.elapsed();
    let built = HELD.load(Relaxed) - before;
    let compile_peak = PEAK.load(Relaxed) - before;
    let rss_after_compile = max_rss_kb();

    let mut out = Vec::new();
    let mut messages = Vec::new();
    for path in &args[a + 1..] {
        let msg = std::fs::read_to_string(path).expect("a message file");
        let name = path.rsplit('/').next().unwrap_or(path);
        m.matches(&msg, &mut out);
        let expected = out.clone();
        if let Some(dir) = &ids_dir {
            let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
            let mut f = std::fs::File::create(format!("{dir}/{stem}.ids")).expect("the ids file");
            for i in &expected {
                writeln!(f, "{i}").expect("the ids file");
            }
        }
        // warm-up, then the timed passes
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_secs_f64(seconds * 0.1) {
            m.matches(black_box(&msg), &mut out);
        }
        let mut times = Vec::with_capacity(iters);
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        while times.len() < iters {
            let t = Instant::now();
            m.matches(black_box(&msg), &mut out);
            times.push(t.elapsed());
            assert_eq!(out, expected, "{name}: the answer changed between passes");
            if Instant::now() > until {
                break;
            }
        }
        times.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        messages.push(format!(
            "{{\"message\":{},\"bytes\":{},\"matched\":{},\"scans\":{},\"median_us\":{:.3},\"p99_us\":{:.3}}}",
            json(name),
            msg.len(),
            expected.len(),
            times.len(),
            us(times[times.len() / 2]),
            us(times[times.len() * 99 / 100])
        ));
    }
    let held = HELD.load(Relaxed) - before;
    println!(
        "{{\"engine\":{},\"patterns\":{},\"refused\":0,\"compile_ms\":{:.2},\"memory_bytes\":{},\"memory_after_scans_bytes\":{},\
         \"compile_peak_bytes\":{},\"max_rss_after_compile_kb\":{},\"messages\":[{}],\"max_rss_kb\":{}}}",
        json(&engine),
        patterns.len(),
        compile.as_secs_f64() * 1e3,
        built,
        held,
        compile_peak,
        rss_after_compile,
        messages.join(","),
        max_rss_kb()
    );
}
