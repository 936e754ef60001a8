//! Many regexes and substrings on one subject, literal first.
//!
//! A moderation table tests one message against hundreds of patterns. Running each regex,
//! or one `RegexSet` of all of them, costs a pass per pattern or a large automaton that can
//! fall off the fast DFA (one Unicode `\b` makes a whole set run on the slow engine). Most
//! patterns, though, cannot match unless some literal occurs: `t\.me/` needs `t.me/`,
//! `\d+(\.\d+)?\s*元` needs `元`, `(?i)(buy|cheap)\s+followers` needs `follower` in some case.
//!
//! So when a table loads, each pattern's *required literals* are extracted (regex-syntax's
//! literal extractor, on the whole pattern and on each part of a concatenation, keeping the
//! longest): a set of strings one of which every match contains. All of them go into one
//! Aho-Corasick automaton, case-folded for ASCII (which only adds candidates). Per decision,
//! one pass over the subject finds which literals occur; a pattern none of whose literals
//! occurred is false without running it; the others run on their own regex, each only when a
//! rule asks. Patterns without a usable literal keep the regex path: together in one
//! `RegexSet` when none needs a Unicode word boundary, else one by one. The answers are those
//! of running every regex.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use memchr::memmem::Finder;
use regex::{Regex, RegexSet, RegexSetBuilder};
use regex_syntax::hir::literal::{ExtractKind, Extractor, Seq};
use regex_syntax::hir::{Hir, HirKind};

/// A test of the subject that a group answers.
#[derive(Debug)]
pub(crate) enum PatternTest {
    /// `contains "needle"`
    Substring(Box<Finder<'static>>),
    /// `matches "re"`
    Regex(Regex),
}

#[derive(Debug)]
struct Pattern {
    test: PatternTest,
    /// whether some literal must occur for the test to hold
    prefiltered: bool,
    /// its index in `rest`, when it is answered by the set of patterns without literals
    in_rest: Option<u32>,
}

/// The substring and regex tests of one subject, answered together.
#[derive(Debug)]
pub struct PatternGroup {
    patterns: Vec<Pattern>,
    /// every required literal, ASCII lower-cased
    literals: Option<AhoCorasick>,
    /// for each literal: the patterns that require it
    owners: Vec<Vec<u32>>,
    /// the patterns without literals that can run together
    rest: Option<RegexSet>,
}

/// What one decision has learnt of a group: which literals occurred, which tests are answered.
#[derive(Debug, Clone)]
pub(crate) struct GroupState {
    /// by test: some literal of it occurred (a prefiltered test without it is false)
    pub(crate) candidates: Vec<u64>,
    known: Vec<u64>,
    held: Vec<u64>,
    rest: Option<regex::SetMatches>,
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

fn set(bits: &mut [u64], i: usize) {
    if let Some(w) = bits.get_mut(i / 64) {
        *w |= 1 << (i % 64);
    }
}

impl PatternGroup {
    /// The group of `tests`, in order (a test's index is its position).
    pub(crate) fn new(tests: Vec<PatternTest>) -> PatternGroup {
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut owners: Vec<Vec<u32>> = Vec::new();
        let mut patterns = Vec::with_capacity(tests.len());
        let mut rest_patterns: Vec<&str> = Vec::new();
        for (i, test) in tests.into_iter().enumerate() {
            let required = match &test {
                PatternTest::Substring(f) if !f.needle().is_empty() => Some(vec![f.needle().to_vec()]),
                PatternTest::Substring(_) => None,
                // a one-byte literal (`+`, `!`, `v`) is in most texts: such a pattern runs with
                // those that have none
                PatternTest::Regex(re) => {
                    required_literals(re.as_str()).filter(|lits| lits.iter().all(|l| l.len() >= MIN_LITERAL))
                }
            };
            let prefiltered = required.is_some();
            for lit in required.into_iter().flatten() {
                let lit = lit.to_ascii_lowercase();
                let at = match literals.iter().position(|l| *l == lit) {
                    Some(at) => at,
                    None => {
                        literals.push(lit);
                        owners.push(Vec::new());
                        literals.len() - 1
                    }
                };
                if let Some(owned) = owners.get_mut(at).filter(|o| o.last() != Some(&(i as u32))) {
                    owned.push(i as u32);
                }
            }
            patterns.push(Pattern { test, prefiltered, in_rest: None });
        }
        // Patterns without literals: one set for those a DFA can run (no Unicode `\b`).
        let mut rest_ids = Vec::new();
        for (i, p) in patterns.iter().enumerate() {
            if let (false, PatternTest::Regex(re)) = (p.prefiltered, &p.test) {
                if !unicode_word_boundary(re.as_str()) {
                    rest_patterns.push(re.as_str());
                    rest_ids.push(i);
                }
            }
        }
        let rest = if rest_patterns.len() >= 2 {
            RegexSetBuilder::new(&rest_patterns).size_limit(64 << 20).dfa_size_limit(16 << 20).build().ok()
        } else {
            None
        };
        if rest.is_some() {
            for (n, i) in rest_ids.into_iter().enumerate() {
                if let Some(p) = patterns.get_mut(i) {
                    p.in_rest = Some(n as u32);
                }
            }
        }
        let literals = if literals.is_empty() {
            None
        } else {
            // a DFA without a prefilter: one table lookup per byte, however many literals occur
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .kind(Some(AhoCorasickKind::DFA))
                .prefilter(false)
                .build(&literals)
                .ok()
        };
        if literals.is_none() {
            // without the automaton, every pattern runs
            patterns.iter_mut().for_each(|p| p.prefiltered = false);
        }
        PatternGroup { patterns, literals, owners, rest }
    }

    /// How many tests the group answers.
    pub(crate) fn len(&self) -> usize {
        self.patterns.len()
    }

    /// Whether test `index` can hold only when one of its literals occurs: then the literal
    /// pass alone can prove it false (what the rule index reads).
    pub(crate) fn prefiltered(&self, index: usize) -> bool {
        self.patterns.get(index).is_some_and(|p| p.prefiltered)
    }

    /// A fresh state for one decision.
    pub(crate) fn state(&self) -> GroupState {
        let words = self.patterns.len().div_ceil(64);
        GroupState { candidates: vec![0; words], known: vec![0; words], held: vec![0; words], rest: None }
    }

    /// One pass over `subject`: which patterns' literals occur.
    pub(crate) fn scan(&self, subject: &str, state: &mut GroupState) {
        let Some(ac) = &self.literals else { return };
        let mut seen = vec![0u64; self.owners.len().div_ceil(64)];
        for m in ac.find_overlapping_iter(subject) {
            let l = m.pattern().as_usize();
            if bit(&seen, l) {
                continue;
            }
            set(&mut seen, l);
            for &p in self.owners.get(l).map(Vec::as_slice).unwrap_or_default() {
                set(&mut state.candidates, p as usize);
            }
        }
    }

    /// Whether test `index` holds on `subject` (after [`PatternGroup::scan`] on the same subject).
    pub(crate) fn test(&self, index: usize, subject: &str, state: &mut GroupState) -> bool {
        if bit(&state.known, index) {
            return bit(&state.held, index);
        }
        let Some(p) = self.patterns.get(index) else { return false };
        let held = if p.prefiltered && !bit(&state.candidates, index) {
            false
        } else if let (Some(n), Some(rest)) = (p.in_rest, &self.rest) {
            state.rest.get_or_insert_with(|| rest.matches(subject)).matched(n as usize)
        } else {
            match &p.test {
                PatternTest::Substring(f) => f.find(subject.as_bytes()).is_some(),
                PatternTest::Regex(re) => re.is_match(subject),
            }
        };
        set(&mut state.known, index);
        if held {
            set(&mut state.held, index);
        }
        held
    }
}

/// Whether the pattern has a Unicode word boundary (which no DFA runs on non-ASCII text).
fn unicode_word_boundary(pattern: &str) -> bool {
    match regex_syntax::Parser::new().parse(pattern) {
        Ok(hir) => hir.properties().look_set().contains_word_unicode(),
        Err(_) => true,
    }
}

/// Strings one of which occurs in every match of `pattern`, or `None` when there is no
/// usable set (an empty literal, too many, or none at all).
pub(crate) fn required_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    required(&hir, 0)
}

/// Literals shorter than this (in bytes) do not prefilter a regex.
const MIN_LITERAL: usize = 2;

/// At most this many literals stand for one pattern.
const MAX_LITERALS: usize = 64;

fn required(hir: &Hir, depth: usize) -> Option<Vec<Vec<u8>>> {
    if depth > 32 {
        return None;
    }
    match hir.kind() {
        HirKind::Literal(lit) => usable(vec![lit.0.to_vec()]),
        HirKind::Capture(c) => required(&c.sub, depth + 1),
        HirKind::Repetition(r) if r.min >= 1 => required(&r.sub, depth + 1),
        HirKind::Class(_) => from_seq(extract(hir, ExtractKind::Prefix)),
        HirKind::Alternation(subs) => {
            // every branch must give its own set; the union stands for the whole
            let mut all = Vec::new();
            for s in subs {
                all.extend(required(s, depth + 1)?);
            }
            all.sort();
            all.dedup();
            usable(all)
        }
        HirKind::Concat(subs) => {
            // every part occurs in a match: take the best of the parts and of the whole's
            // prefixes and suffixes (which join adjacent parts: `t\.me/` is one literal)
            let mut best = from_seq(extract(hir, ExtractKind::Prefix));
            best = better(best, from_seq(extract(hir, ExtractKind::Suffix)));
            for s in subs {
                best = better(best, required(s, depth + 1));
            }
            best
        }
        _ => None,
    }
}

fn extract(hir: &Hir, kind: ExtractKind) -> Seq {
    let prefix = kind.is_prefix();
    let mut e = Extractor::new();
    e.kind(kind).limit_total(MAX_LITERALS * 4);
    let mut seq = e.extract(hir);
    if prefix {
        seq.optimize_for_prefix_by_preference();
    } else {
        seq.optimize_for_suffix_by_preference();
    }
    seq
}

fn from_seq(seq: Seq) -> Option<Vec<Vec<u8>>> {
    let lits = seq.literals()?;
    usable(lits.iter().map(|l| l.as_bytes().to_vec()).collect())
}

/// A set every match hits: not empty, no empty string in it, not too many.
fn usable(mut lits: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    // folded as the automaton folds them, duplicates go
    lits.iter_mut().for_each(|l| l.make_ascii_lowercase());
    lits.sort();
    lits.dedup();
    (!lits.is_empty() && lits.len() <= MAX_LITERALS && lits.iter().all(|l| !l.is_empty())).then_some(lits)
}

/// The set that rules out more: longer shortest literal, then fewer literals.
fn better(a: Option<Vec<Vec<u8>>>, b: Option<Vec<Vec<u8>>>) -> Option<Vec<Vec<u8>>> {
    let score = |s: &Vec<Vec<u8>>| (s.iter().map(Vec::len).min().unwrap_or(0).min(8), usize::MAX - s.len());
    match (a, b) {
        (Some(a), Some(b)) => Some(if score(&b) > score(&a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(p: &str) -> Option<Vec<String>> {
        required_literals(p).map(|v| v.into_iter().map(|l| String::from_utf8_lossy(&l).into_owned()).collect())
    }

    #[test]
    fn literals_every_match_contains() {
        assert_eq!(lits("t\\.me/[a-z0-9_]{5,}"), Some(vec!["t.me/".into()]));
        assert_eq!(lits("\\d+(\\.\\d+)?\\s*元"), Some(vec!["元".into()]));
        assert_eq!(lits("(微信|wechat)[0-9]{3,}"), Some(vec!["wechat".into(), "微信".into()]));
        let folded = lits("(?i)followers").unwrap();
        assert!(folded.iter().all(|l| "followers".starts_with(l.as_str()) || l.contains('ſ')), "{folded:?}");
        assert_eq!(lits("[A-Z]{8,}"), None);
        assert_eq!(lits("\\p{Han}{40,}"), None);
        assert_eq!(lits("a|"), None);
        assert_eq!(lits("(?i)k"), Some(vec!["k".into(), "\u{212a}".into()]));
    }

    /// Answers equal to running each regex, on texts where literals occur without a match.
    #[test]
    fn a_group_answers_as_each_regex_would() {
        let patterns = [
            "t\\.me/[a-z0-9_]{5,}",
            "\\d+(\\.\\d+)?\\s*元",
            "(?i)\\bfree\\s+(bitcoin|crypto)\\b",
            "[A-Z]{5,}",
            "\\d{6,}",
            "(?i)k",
            "\\bgo\\b",
            "(?i)ſ",
            "^$",
        ];
        let needles = ["元", "go", ""];
        let mut tests: Vec<PatternTest> = patterns.iter().map(|p| PatternTest::Regex(Regex::new(p).unwrap())).collect();
        tests.extend(needles.iter().map(|n| PatternTest::Substring(Box::new(Finder::new(n.as_bytes()).into_owned()))));
        let group = PatternGroup::new(tests);
        for text in [
            "",
            "元旦快乐 see t.me/ab",
            "价格 3.5 元 join t.me/abcdef",
            "FREE   Bitcoin now",
            "free bitcoinx",
            "SHOUTING 1234567",
            "\u{212a}elvin",
            "go, gopher",
            "ſ",
            "S",
        ] {
            let mut state = group.state();
            group.scan(text, &mut state);
            for (i, p) in patterns.iter().enumerate() {
                assert_eq!(group.test(i, text, &mut state), Regex::new(p).unwrap().is_match(text), "{p} on {text:?}");
            }
            for (j, n) in needles.iter().enumerate() {
                assert_eq!(group.test(patterns.len() + j, text, &mut state), text.contains(n), "{n} in {text:?}");
            }
        }
    }
}
