//! Many regexes and substrings on one subject, literal first.
//!
//! A moderation table tests one message against hundreds of patterns. Running each regex,
//! or one regex set of all of them, costs a pass per pattern or a large automaton that can
//! fall off the fast DFA (one Unicode `\b` makes a whole set run on the slow engine). Most
//! patterns, though, cannot match unless some literal occurs: `t\.me/` needs `t.me/`,
//! `\d+(\.\d+)?\s*元` needs `元`, `(?i)(buy|cheap)\s+followers` needs `follower` in some case.
//!
//! So when a table loads, each pattern's *required literals* are extracted (regex-syntax's
//! literal extractor, on the whole pattern and on each part of a concatenation, keeping the
//! longest): a set of strings one of which every match contains, and for a concatenation up
//! to three more sets, one a part, each of which must occur too (`\bconfig\b.{0,20}\bnft\b`
//! needs `config` and `nft`: a post full of the one does not run it). Classes of ASCII
//! letters are folded first, so `(?i)casino` requires `casino` rather than the short
//! prefixes that 64 case spellings shrink to. All of them go into one
//! Aho-Corasick automaton that ignores ASCII case (the folded extraction relies on it). Per decision,
//! one pass over the subject finds which literals occur; a pattern none of whose literals
//! occurred is false without running it; the others run on their own regex, each only when a
//! rule asks. Patterns without a usable literal keep the regex path: together in one
//! set (a multi-pattern [`Matcher`]) when none needs a Unicode word boundary, else one by one. The answers are those
//! of running every regex.

use std::sync::Arc;

use super::alphabet::{rewrite, Alphabet};
use super::matcher::Matcher;
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use memchr::memmem::Finder;
use regex_automata::{PatternID, PatternSet};
use regex_syntax::hir::literal::{ExtractKind, Extractor, Seq};
use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind};

/// A test of the subject that a group answers.
#[derive(Debug)]
pub(crate) enum PatternTest {
    /// `contains "needle"`
    Substring(Box<Finder<'static>>),
    /// `matches "re"`
    Regex(Matcher),
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
    /// for each literal: the patterns that require it, with which of their sets it is in
    owners: Vec<Vec<(u32, u8)>>,
    /// by pattern: the mask of its required sets when all of them must occur (0 for one set)
    all_sets: Vec<u8>,
    /// the patterns without literals that can run together
    rest: Option<Matcher>,
}

/// What one decision has learnt of a group: which literals occurred, which tests are answered.
#[derive(Debug, Clone)]
pub(crate) struct GroupState {
    /// by test: some literal of it occurred (a prefiltered test without it is false)
    pub(crate) candidates: Vec<u64>,
    known: Vec<u64>,
    held: Vec<u64>,
    rest: Option<PatternSet>,
    /// by pattern with several required sets: which of them occurred (allocated when needed)
    sets_seen: Vec<u8>,
    /// the subject in the table's alphabet, once a regex built in it runs: `Some(None)` when
    /// it is ASCII (read as it is)
    translated: Option<Option<String>>,
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
    pub(crate) fn new(tests: Vec<PatternTest>, alphabet: Option<&Arc<Alphabet>>) -> PatternGroup {
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut owners: Vec<Vec<(u32, u8)>> = Vec::new();
        let mut all_sets = Vec::with_capacity(tests.len());
        let mut patterns = Vec::with_capacity(tests.len());
        let mut rest_patterns: Vec<&str> = Vec::new();
        for (i, test) in tests.into_iter().enumerate() {
            let required = match &test {
                PatternTest::Substring(f) if !f.needle().is_empty() => Some(vec![vec![f.needle().to_vec()]]),
                PatternTest::Substring(_) => None,
                PatternTest::Regex(re) => required_sets(re.as_str()),
            };
            let prefiltered = required.is_some();
            let sets = required.unwrap_or_default();
            all_sets.push(if sets.len() > 1 { u8::MAX >> (8 - sets.len()) } else { 0 });
            for (g, lit) in sets.into_iter().enumerate().flat_map(|(g, set)| set.into_iter().map(move |l| (g, l))) {
                let owner = (i as u32, g as u8);
                let lit = lit.to_ascii_lowercase();
                let at = match literals.iter().position(|l| *l == lit) {
                    Some(at) => at,
                    None => {
                        literals.push(lit);
                        owners.push(Vec::new());
                        literals.len() - 1
                    }
                };
                if let Some(owned) = owners.get_mut(at).filter(|o| o.last() != Some(&owner)) {
                    owned.push(owner);
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
        let rest = if rest_patterns.len() >= 2 { Matcher::many(&rest_patterns, 64 << 20, alphabet).ok() } else { None };
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
            // a DFA without a prefilter: one table lookup per byte, however many literals occur;
            // past a few thousand literals its table no longer fits in the caches and every
            // byte misses (a 20,000-pattern table: ms per decision), so the compact contiguous
            // NFA takes over there
            let kind =
                if literals.len() <= MAX_DFA_LITERALS { AhoCorasickKind::DFA } else { AhoCorasickKind::ContiguousNFA };
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .kind(Some(kind))
                .prefilter(false)
                .build(&literals)
                .ok()
        };
        if literals.is_none() {
            // without the automaton, every pattern runs
            patterns.iter_mut().for_each(|p| p.prefiltered = false);
        }
        PatternGroup { patterns, literals, owners, all_sets, rest }
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
        GroupState {
            candidates: vec![0; words],
            known: vec![0; words],
            held: vec![0; words],
            rest: None,
            sets_seen: Vec::new(),
            translated: None,
        }
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
            for &(p, g) in self.owners.get(l).map(Vec::as_slice).unwrap_or_default() {
                let all = self.all_sets.get(p as usize).copied().unwrap_or(0);
                if all == 0 {
                    set(&mut state.candidates, p as usize);
                    continue;
                }
                // a candidate once every one of its sets has occurred
                if state.sets_seen.is_empty() {
                    state.sets_seen = vec![0; self.patterns.len()];
                }
                if let Some(seen) = state.sets_seen.get_mut(p as usize) {
                    *seen |= 1 << g;
                    if *seen == all {
                        set(&mut state.candidates, p as usize);
                    }
                }
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
            let text = Self::text_for(rest, subject, &mut state.translated);
            state.rest.get_or_insert_with(|| rest.which_translated(text)).contains(PatternID::new_unchecked(n as usize))
        } else {
            match &p.test {
                PatternTest::Substring(f) => f.find(subject.as_bytes()).is_some(),
                PatternTest::Regex(re) => re.is_match_translated(Self::text_for(re, subject, &mut state.translated)),
            }
        };
        set(&mut state.known, index);
        if held {
            set(&mut state.held, index);
        }
        held
    }

    /// The text `matcher` runs on: `subject`, or its translation into the alphabet the matcher
    /// was built in, made once per decision in `translated` (a table's regexes are all built in
    /// its one alphabet).
    fn text_for<'t>(matcher: &Matcher, subject: &'t str, translated: &'t mut Option<Option<String>>) -> &'t str {
        let Some(alphabet) = matcher.alphabet() else { return subject };
        translated.get_or_insert_with(|| alphabet.translated(subject)).as_deref().unwrap_or(subject)
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
/// usable set (an empty literal, too many, or none at all): the first of
/// [`required_sets`] before short literals are dropped, which the tests read.
#[cfg(test)]
fn required_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    required(&fold_ascii(&hir), 0)
}

/// `hir` with every all-ASCII class replaced by its ASCII-lower-cased members (a literal when
/// one is left).
///
/// The automaton ignores ASCII case, so `(?i)casino` needs only `casino`; extracted as parsed,
/// each letter is a class `[cC]` and the word 64 spellings, more than the extractor keeps, so
/// it falls back to short prefixes (`cas`) that occur in most texts and the regex runs on
/// every decision. A class with non-ASCII members (`(?i)k` holds the Kelvin sign) is kept, so
/// that those spellings stay in the set.
fn fold_ascii(hir: &Hir) -> Hir {
    rewrite(hir, 32, &|h| match h.kind() {
        HirKind::Class(Class::Unicode(c)) if c.ranges().iter().all(|r| r.end().is_ascii()) => {
            let mut lower: Vec<u8> =
                c.ranges().iter().flat_map(|r| r.start()..=r.end()).map(|ch| ch.to_ascii_lowercase() as u8).collect();
            lower.sort_unstable();
            lower.dedup();
            Some(ascii_class(&lower))
        }
        HirKind::Class(Class::Bytes(c)) if c.ranges().iter().all(|r| r.end().is_ascii()) => {
            let mut lower: Vec<u8> =
                c.ranges().iter().flat_map(|r| r.start()..=r.end()).map(|b| b.to_ascii_lowercase()).collect();
            lower.sort_unstable();
            lower.dedup();
            Some(ascii_class(&lower))
        }
        _ => None,
    })
}

/// The class of these ASCII bytes (sorted, distinct), or the literal when there is one.
fn ascii_class(bytes: &[u8]) -> Hir {
    match bytes {
        [one] => Hir::literal(vec![*one]),
        _ => Hir::class(Class::Unicode(ClassUnicode::new(
            bytes.iter().map(|&b| ClassUnicodeRange::new(char::from(b), char::from(b))),
        ))),
    }
}

/// Sets of strings such that every match of `pattern` contains one string of each set, at
/// most [`MAX_SETS`] of them; `None` when there is no usable set.
///
/// The first set is the best single one (prefixes, suffixes and parts compared). When the pattern is a concatenation, each of
/// its parts with a set of its own adds one: `\bconfig\b.{0,20}\bnft\b` needs `config` *and*
/// `nft`, so a text with only the common word `config` rules it out without running it.
/// A one-byte literal (`+`, `!`, `v`) is in most texts: a set holding one does not count.
pub(crate) fn required_sets(pattern: &str) -> Option<Vec<Vec<Vec<u8>>>> {
    let hir = fold_ascii(&regex_syntax::Parser::new().parse(pattern).ok()?);
    let long = |lits: &Vec<Vec<u8>>| lits.iter().all(|l| l.len() >= MIN_LITERAL);
    let mut sets: Vec<Vec<Vec<u8>>> = required(&hir, 0).filter(long).into_iter().collect();
    // a part's set only adds to the automaton's work when its strings are short and common
    // (`ee` in `f[r4]ee`): it must be longer to count
    let selective = |lits: &Vec<Vec<u8>>| lits.iter().all(|l| l.len() >= MIN_PART_LITERAL);
    let mut top = &hir;
    while let HirKind::Capture(c) = top.kind() {
        top = &c.sub;
    }
    if let HirKind::Concat(subs) = top.kind() {
        for part in subs.iter().filter_map(|s| required(s, 1)).filter(selective) {
            // a set that holds one already kept is implied by it
            if !sets.iter().any(|kept| kept.iter().all(|l| part.contains(l)) || part.iter().all(|l| kept.contains(l))) {
                sets.push(part);
            }
        }
    }
    sets.truncate(MAX_SETS);
    (!sets.is_empty()).then_some(sets)
}

/// Literals shorter than this (in bytes) do not make a part's set required beside the first.
const MIN_PART_LITERAL: usize = 3;

/// At most this many required sets stand for one pattern (a bit each in a byte).
const MAX_SETS: usize = 4;

/// Past this many literals the literal pass is a contiguous NFA rather than a DFA.
const MAX_DFA_LITERALS: usize = 2_000;

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
        // ASCII case is the automaton's: one spelling a word (plus its `ſ` and Kelvin-sign
        // spellings), whatever the alternation's size
        assert_eq!(
            lits("(?i)\\b(casino|bonus42|jackpot|lottery|payday)\\b"),
            Some(
                ["bonus42", "bonuſ42", "casino", "caſino", "jackpot", "jac\u{212a}pot", "lottery", "payday"]
                    .map(String::from)
                    .to_vec()
            )
        );
        let sets = required_sets("\\bconfig\\b.{0,20}\\bnft\\b").unwrap();
        assert_eq!(sets, vec![vec![b"config".to_vec()], vec![b"nft".to_vec()]]);
        assert_eq!(required_sets("[a-z]+b").map(|s| s.len()), None);
        assert_eq!(
            lits("(?i)c[a4@]sh"),
            Some(["c4sh", "c4ſh", "c@sh", "c@ſh", "cash", "caſh"].map(String::from).to_vec())
        );
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
            "(?i)\\b(casino|bonus)\\b",
            "(?i)kelvins?",
            "(?i)c[a4@]sh\\s*app",
            "\\bconfig\\b.{0,20}\\bnft\\b",
            "(?i)(the)\\s+(?:\\w+\\s+){0,2}pump[!?.]{2,}",
        ];
        let needles = ["元", "go", ""];
        let hirs: Vec<Hir> = patterns.iter().map(|p| regex_syntax::Parser::new().parse(p).unwrap()).collect();
        let alphabet = Alphabet::new(&hirs).map(Arc::new);
        assert!(alphabet.is_some());
        // as parsed, and cut down to the patterns' alphabet (the subject translated)
        for alphabet in [None, alphabet.as_ref()] {
            let mut tests: Vec<PatternTest> = patterns
                .iter()
                .map(|p| PatternTest::Regex(Matcher::with_alphabet(p, 10 << 20, alphabet).unwrap()))
                .collect();
            tests.extend(
                needles.iter().map(|n| PatternTest::Substring(Box::new(Finder::new(n.as_bytes()).into_owned()))),
            );
            let group = PatternGroup::new(tests, alphabet);
            answers_as_each_regex(&group, &patterns, &needles);
        }
    }

    fn answers_as_each_regex(group: &PatternGroup, patterns: &[&str], needles: &[&str]) {
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
            "Visit CaSiNo now",
            "\u{212a}ELVIN",
            "C@SH App, casinos",
            "the config only",
            "nft, then config nft",
            "config: an nft",
            "The big PUMP!! the pump",
            "the pump!?",
        ] {
            let mut state = group.state();
            group.scan(text, &mut state);
            for (i, p) in patterns.iter().enumerate() {
                assert_eq!(
                    group.test(i, text, &mut state),
                    regex::Regex::new(p).unwrap().is_match(text),
                    "{p} on {text:?}"
                );
            }
            for (j, n) in needles.iter().enumerate() {
                assert_eq!(group.test(patterns.len() + j, text, &mut state), text.contains(n), "{n} in {text:?}");
            }
        }
    }
}
