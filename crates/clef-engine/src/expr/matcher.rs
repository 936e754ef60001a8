//! Regexes that answer only *whether* they match, forward only.
//!
//! `matches`, `~` and `!~` ask whether a pattern occurs, never where. The regex crate's
//! `Regex` is built to say where as well: beside each pattern's forward automaton it compiles a
//! reverse one, to find where a match starts. For a moderation list of 500 Unicode patterns
//! that was 26 MB of the 43 MB its regexes took, on a box whose unit allows 64 MB, and the set
//! of the patterns without literals doubled it again. A [`Matcher`] keeps one forward
//! Thompson NFA without capture states and runs on it the searches the regex crate's own
//! `is_match` runs: a lazy DFA started from the pattern's prefix prefilter and stopped at the
//! first match, and when the lazy DFA gives up (a Unicode `\b` next to non-ASCII text, a cache
//! that thrashes), the bounded backtracker on short texts or else the PikeVM. Every path is
//! linear in the text; answers are the regex crate's (the reference evaluator still uses it,
//! and the property tests compare the two).
//!
//! The same type answers a *set* of patterns in one pass ([`Matcher::many`],
//! [`Matcher::which`]): a moderation table's patterns that have no literal to prefilter on.
//!
//! Built with a table's [`Alphabet`], a matcher's automaton holds only the characters the
//! table's patterns tell apart, and runs on text translated into them (see `alphabet`).

use std::fmt;
use std::sync::{Arc, Mutex};

use regex_automata::hybrid;
use regex_automata::nfa::thompson::{self, backtrack, pikevm, WhichCaptures, NFA};
use regex_automata::util::prefilter::Prefilter;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, PatternSet};
use regex_syntax::hir::{Hir, HirKind};

use super::alphabet::Alphabet;

/// Bytes one pattern's lazy DFA may hold per thread before it clears its states (the regex
/// crate's default is 2 MiB; hundreds of patterns each reaching that would not fit the box).
const DFA_CACHE_BYTES: usize = 256 << 10;

/// Bytes a set's lazy DFA may hold per thread: its states track every pattern at once, and
/// one that keeps clearing gives up for the PikeVM, far slower on hundreds of patterns.
const SET_DFA_CACHE_BYTES: usize = 8 << 20;

/// A pattern's prefix prefilter is kept up to this size. A memchr or memmem finder takes
/// bytes; a case-insensitive alternation's (Teddy, Aho-Corasick) takes 4–64 KiB, which was 39 MB
/// of a 5,000-pattern table, while a table's literal pass (`patterns`) already keeps most
/// patterns from running on texts without their literals.
const MAX_PREFILTER_BYTES: usize = 16 << 10;

/// Bits one bounded backtracker may mark per search (texts too long for it go to the PikeVM).
const BACKTRACK_VISITED_BYTES: usize = 32 << 10;

/// Why a pattern could not be compiled.
#[derive(Debug)]
pub enum MatcherError {
    /// The pattern is not valid syntax: the parser's message.
    Syntax(String),
    /// The pattern's automaton is bigger than the limit (bytes).
    TooBig(usize),
}

impl fmt::Display for MatcherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatcherError::Syntax(message) => f.write_str(message),
            MatcherError::TooBig(limit) => write!(f, "it compiles to more than {limit} bytes"),
        }
    }
}

/// One or more patterns compiled forward only; cheap to clone (the automata are shared).
#[derive(Clone)]
pub struct Matcher {
    engines: Arc<Engines>,
    caches: Arc<CachePool>,
}

struct Engines {
    patterns: Vec<Box<str>>,
    /// the alphabet the automata were cut down to: they run on text it translated
    alphabet: Option<Arc<Alphabet>>,
    nfa: NFA,
    dfa: Option<hybrid::dfa::DFA>,
    /// for a pattern with a Unicode word boundary, which the lazy DFA gives up on next to
    /// non-ASCII text: a lazy DFA of the pattern without its word boundaries, which match
    /// wherever the pattern does, so that when it finds nothing neither does the pattern
    /// (boxed: a lazy DFA's configuration and byte maps take most of a kilobyte, which most
    /// patterns, without `\b`, should not carry)
    relaxed: Option<Box<hybrid::dfa::DFA>>,
    backtrack: backtrack::BoundedBacktracker,
    pikevm: pikevm::PikeVM,
}

/// The mutable search state of one thread. The fallbacks' caches are made when first needed:
/// sized by the automaton, they would cost every thread every pattern's worth while most texts
/// never leave the lazy DFA.
struct Caches {
    dfa: Option<hybrid::dfa::Cache>,
    relaxed: Option<hybrid::dfa::Cache>,
    backtrack: Option<backtrack::Cache>,
    pikevm: Option<pikevm::Cache>,
}

impl Caches {
    fn new(engines: &Engines) -> Caches {
        Caches {
            dfa: engines.dfa.as_ref().map(hybrid::dfa::DFA::create_cache),
            relaxed: None,
            backtrack: None,
            pikevm: None,
        }
    }
}

/// The idle [`Caches`] of a matcher: one per thread that has searched with it at once, lent
/// out for a search and put back. The regex crate's own pool, made for one regex that many
/// threads share, holds eight cache-line stacks and one thread's caches inline: about 1.5 KB a
/// pattern before its first search, 8.7 MB of a 5,000-pattern table served. A moderation table
/// has thousands of patterns, most of which never run on a given text, and clef's workers are
/// few: an idle list costs a pattern 48 bytes until it runs.
#[derive(Default)]
struct CachePool {
    // boxed: a search takes its caches out and puts them back, and moves a pointer, not the
    // caches' kilobyte
    #[allow(clippy::vec_box)]
    idle: Mutex<Vec<Box<Caches>>>,
}

impl CachePool {
    /// Runs `search` with idle caches, or new ones when every cache is lent out.
    fn lend<R>(&self, engines: &Engines, search: impl FnOnce(&mut Caches) -> R) -> R {
        // a poisoned lock only means a search panicked elsewhere: the caches it held went
        // with it, and those left are whole
        let idle = self.idle.lock().map_or(None, |mut idle| idle.pop());
        let mut caches = idle.unwrap_or_else(|| Box::new(Caches::new(engines)));
        let found = search(&mut caches);
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(caches);
        }
        found
    }
}

impl Matcher {
    /// `pattern` compiled with the regex crate's syntax, its automaton at most `size_limit` bytes.
    pub fn new(pattern: &str, size_limit: usize) -> Result<Matcher, MatcherError> {
        Matcher::build(&[pattern], MatchKind::LeftmostFirst, size_limit, None)
    }

    /// [`Matcher::new`] cut down to `alphabet` when it covers the pattern. The pattern is
    /// valid, or too big, as it is on its own: the full automaton is compiled to check it.
    pub fn with_alphabet(
        pattern: &str,
        size_limit: usize,
        alphabet: Option<&Arc<Alphabet>>,
    ) -> Result<Matcher, MatcherError> {
        Matcher::build(&[pattern], MatchKind::LeftmostFirst, size_limit, alphabet)
    }

    /// All of `patterns` in one automaton, for [`Matcher::which`] (cut down to `alphabet`
    /// when it covers all of them).
    pub fn many(
        patterns: &[&str],
        size_limit: usize,
        alphabet: Option<&Arc<Alphabet>>,
    ) -> Result<Matcher, MatcherError> {
        Matcher::build(patterns, MatchKind::All, size_limit, alphabet)
    }

    fn build(
        patterns: &[&str],
        kind: MatchKind,
        size_limit: usize,
        alphabet: Option<&Arc<Alphabet>>,
    ) -> Result<Matcher, MatcherError> {
        let hirs = patterns
            .iter()
            .map(|p| syntax::parse_with(p, &syntax::Config::new()).map_err(|e| MatcherError::Syntax(e.to_string())))
            .collect::<Result<Vec<Hir>, _>>()?;
        let compile = |hirs: &[Hir]| {
            thompson::Compiler::new()
                .configure(
                    thompson::Config::new()
                        .which_captures(WhichCaptures::None)
                        .nfa_size_limit(Some(size_limit))
                        .shrink(false),
                )
                .build_many_from_hir(hirs)
                .map_err(|e| match e.size_limit() {
                    Some(limit) => MatcherError::TooBig(limit),
                    None => MatcherError::Syntax(e.to_string()),
                })
        };
        let full = compile(&hirs)?;
        let cut = alphabet.filter(|a| hirs.iter().all(|h| a.covers(h))).and_then(|a| {
            let cut: Vec<Hir> = hirs.iter().map(|h| a.restrict(h)).collect();
            // no bigger than the full automaton; should it still fail, the pattern keeps
            // its full automaton rather than fail the table
            compile(&cut).ok().map(|nfa| (nfa, cut, a))
        });
        let (nfa, hirs, alphabet) = match cut {
            Some((nfa, cut, a)) => (nfa, cut, Some(a)),
            None => (full, hirs, None),
        };
        let prefilter = match kind {
            MatchKind::LeftmostFirst => Prefilter::from_hirs_prefix(kind, &hirs),
            // a set reports every pattern that matches: no prefix is required by all of them
            _ => None,
        }
        .filter(|p| p.memory_usage() <= MAX_PREFILTER_BYTES);
        let dfa_config = |capacity: usize| {
            hybrid::dfa::Config::new()
                .match_kind(kind)
                .prefilter(prefilter.clone())
                .specialize_start_states(prefilter.is_some())
                .unicode_word_boundary(true)
                .cache_capacity(capacity)
                .skip_cache_capacity_check(false)
                // give up (for the fallbacks) rather than clear the cache over and over
                .minimum_cache_clear_count(Some(3))
                .minimum_bytes_per_state(Some(10))
        };
        // a big automaton may need more than the small cache to hold its first states
        let capacity = if kind == MatchKind::All { SET_DFA_CACHE_BYTES } else { DFA_CACHE_BYTES };
        let dfa = [capacity, 4 * capacity].into_iter().find_map(|capacity| {
            hybrid::dfa::Builder::new().configure(dfa_config(capacity)).build_from_nfa(nfa.clone()).ok()
        });
        let relaxed = match (kind, &hirs[..]) {
            (MatchKind::LeftmostFirst, [hir]) if hir.properties().look_set().contains_word_unicode() => {
                compile(&[without_word_boundaries(hir)]).ok().and_then(|nfa| {
                    hybrid::dfa::Builder::new()
                        .configure(dfa_config(DFA_CACHE_BYTES))
                        .build_from_nfa(nfa)
                        .ok()
                        .map(Box::new)
                })
            }
            _ => None,
        };
        let backtrack = backtrack::Builder::new()
            .configure(backtrack::Config::new().visited_capacity(BACKTRACK_VISITED_BYTES))
            .build_from_nfa(nfa.clone())
            .map_err(|e| MatcherError::Syntax(e.to_string()))?;
        let pikevm = pikevm::Builder::new()
            .configure(pikevm::Config::new().match_kind(kind))
            .build_from_nfa(nfa.clone())
            .map_err(|e| MatcherError::Syntax(e.to_string()))?;
        let engines = Arc::new(Engines {
            patterns: patterns.iter().map(|&p| Box::from(p)).collect(),
            alphabet: alphabet.cloned(),
            nfa,
            dfa,
            relaxed,
            backtrack,
            pikevm,
        });
        Ok(Matcher { engines, caches: Arc::default() })
    }

    /// The (first) pattern as written.
    pub fn as_str(&self) -> &str {
        self.engines.patterns.first().map_or("", |p| p)
    }

    /// How many patterns the matcher holds.
    pub fn pattern_len(&self) -> usize {
        self.engines.patterns.len()
    }

    /// The alphabet the matcher runs in, when it was cut down to one: it runs on text that
    /// alphabet translated ([`Matcher::is_match_translated`]).
    pub fn alphabet(&self) -> Option<&Arc<Alphabet>> {
        self.engines.alphabet.as_ref()
    }

    /// Whether some pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        match self.untranslated(text) {
            Some(translated) => self.is_match_translated(&translated),
            None => self.is_match_translated(text),
        }
    }

    /// `text` translated into the matcher's alphabet when it must be.
    fn untranslated(&self, text: &str) -> Option<String> {
        self.engines.alphabet.as_ref()?.translated(text)
    }

    /// [`Matcher::is_match`] of a text already translated into [`Matcher::alphabet`] (or the
    /// text itself, when the matcher has no alphabet or the text is ASCII).
    pub fn is_match_translated(&self, text: &str) -> bool {
        self.caches.lend(&self.engines, |caches| self.is_match_with(caches, text))
    }

    fn is_match_with(&self, caches: &mut Caches, text: &str) -> bool {
        let input = Input::new(text).earliest(true);
        if let (Some(dfa), Some(cache)) = (&self.engines.dfa, caches.dfa.as_mut()) {
            if let Ok(found) = dfa.try_search_fwd(cache, &input) {
                return found.is_some();
            }
        }
        if let Some(relaxed) = &self.engines.relaxed {
            let cache = caches.relaxed.get_or_insert_with(|| relaxed.create_cache());
            if let Ok(None) = relaxed.try_search_fwd(cache, &input) {
                return false;
            }
        }
        if input.get_span().len() <= self.engines.backtrack.max_haystack_len() {
            if let Ok(found) = self.engines.backtrack.try_is_match(
                caches.backtrack.get_or_insert_with(|| self.engines.backtrack.create_cache()),
                input.clone(),
            ) {
                return found;
            }
        }
        self.engines.pikevm.is_match(caches.pikevm.get_or_insert_with(|| self.engines.pikevm.create_cache()), input)
    }

    /// The patterns (by index, as given to [`Matcher::many`]) that match somewhere in `text`.
    pub fn which(&self, text: &str) -> PatternSet {
        match self.untranslated(text) {
            Some(translated) => self.which_translated(&translated),
            None => self.which_translated(text),
        }
    }

    /// [`Matcher::which`] of a text already translated, as for [`Matcher::is_match_translated`].
    pub fn which_translated(&self, text: &str) -> PatternSet {
        self.caches.lend(&self.engines, |caches| self.which_with(caches, text))
    }

    fn which_with(&self, caches: &mut Caches, text: &str) -> PatternSet {
        let input = Input::new(text);
        let mut found = PatternSet::new(self.engines.patterns.len());
        if let (Some(dfa), Some(cache)) = (&self.engines.dfa, caches.dfa.as_mut()) {
            if dfa.try_which_overlapping_matches(cache, &input, &mut found).is_ok() {
                return found;
            }
            found.clear();
        }
        let pikevm = caches.pikevm.get_or_insert_with(|| self.engines.pikevm.create_cache());
        self.engines.pikevm.which_overlapping_matches(pikevm, &input, &mut found);
        found
    }

    /// Heap bytes of the automata (not of the per-thread caches).
    pub fn memory_usage(&self) -> usize {
        self.engines.nfa.memory_usage() + self.engines.dfa.as_ref().map_or(0, |d| d.memory_usage())
    }
}

/// `hir` with its Unicode word boundaries (`\b`, `\B`, `\<`, `\>` and halves) taken out: it
/// matches wherever `hir` does, and a lazy DFA runs it on any text.
fn without_word_boundaries(hir: &Hir) -> Hir {
    use regex_syntax::hir::Look;
    super::alphabet::rewrite(hir, 64, &|h| match h.kind() {
        HirKind::Look(
            Look::WordUnicode
            | Look::WordUnicodeNegate
            | Look::WordStartUnicode
            | Look::WordEndUnicode
            | Look::WordStartHalfUnicode
            | Look::WordEndHalfUnicode,
        ) => Some(Hir::empty()),
        _ => None,
    })
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Matcher").field(&self.engines.patterns).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_automata::PatternID;

    fn agree(pattern: &str, texts: &[&str]) {
        let ours = Matcher::new(pattern, 10 << 20).unwrap();
        let theirs = regex::Regex::new(pattern).unwrap();
        for text in texts {
            assert_eq!(ours.is_match(text), theirs.is_match(text), "{pattern:?} on {text:?}");
        }
    }

    #[test]
    fn answers_as_the_regex_crate_does() {
        let texts = ["", "free money", "FREE   M0N3Y now", "café money", "x\u{e9}free money\u{e9}", "a1b2", "t.me/x"];
        agree(r"(?i)f[r4]e{2,}\s*m[o0]n[e3]y", &texts);
        agree(r"(?i)\bfree\b", &texts);
        agree(r"\bmoney\b", &texts);
        agree(r"^$", &texts);
        agree(r"\d", &texts);
        agree(r"t\.me/", &texts);
        agree(r"[^\x00-\x7f]", &texts);
    }

    #[test]
    fn a_unicode_word_boundary_next_to_non_ascii_text_falls_back_and_still_answers() {
        // the lazy DFA quits on the first non-ASCII byte; the text is long enough that the
        // answer lies past it
        let text = format!("{}é {} money", "é".repeat(50), "x".repeat(3000));
        agree(r"\bmoney\b", &[&text, "éa", "é money"]);
        agree(r"\bmoney\b", &[&format!("{}é", "x ".repeat(20_000))]);
    }

    #[test]
    fn without_its_word_boundaries_a_pattern_rules_out_texts_and_never_rules_in() {
        // the DFA of `go` finds nothing in the first texts: false without the fallbacks; in
        // the others it finds `go` and the fallbacks judge the boundaries
        let texts = ["éé", "\u{1F389} none", "égo", "goé", "é go", "ég go", "ÉGO go", "x\u{e9}go\u{e9}"];
        agree(r"\bgo\b", &texts);
        agree(r"(?i)\bGO\B", &texts);
        agree(r"\b(?:go|é)\b", &texts);
        agree(r"(?i)\bstra(ss|ß)e\b", &["straße!", "Straßen", "é strasse", "éstrasse"]);
    }

    #[test]
    fn a_set_says_which_patterns_match() {
        let set = Matcher::many(&[r"[A-Z]{5,}", r"\d{4,}", r"(?:\W){6,}"], 10 << 20, None).unwrap();
        let found = set.which("SHOUTING and 12345");
        assert!(
            found.contains(PatternID::must(0))
                && found.contains(PatternID::must(1))
                && !found.contains(PatternID::must(2))
        );
        assert_eq!(set.which("calm").len(), 0);
        assert_eq!(set.pattern_len(), 3);
    }

    #[test]
    fn threads_searching_at_once_each_get_caches_and_leave_at_most_one_each() {
        // a Unicode `\b` beside non-ASCII text uses every cache: lazy DFA, relaxed, backtracker
        let matcher = Matcher::new(r"\bgo\b|\d{3}", 10 << 20).unwrap();
        let threads = 4;
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    barrier.wait();
                    for i in 0..200 {
                        assert!(matcher.is_match(&format!("é go {i}")));
                        assert!(!matcher.is_match("égo stop"));
                        assert_eq!(matcher.is_match(&format!("n{i}")), i >= 100);
                    }
                });
            }
        });
        let idle = matcher.caches.idle.lock().map(|idle| idle.len()).unwrap_or(0);
        assert!((1..=threads).contains(&idle), "{idle} idle caches after {threads} threads");
        // one thread alone reuses one cache
        let alone = Matcher::new(r"\bgo\b", 10 << 20).unwrap();
        for _ in 0..50 {
            assert!(alone.is_match("é go"));
        }
        assert_eq!(alone.caches.idle.lock().map(|idle| idle.len()).unwrap_or(0), 1);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        match Matcher::new("a(", 1 << 20) {
            Err(MatcherError::Syntax(m)) => assert!(m.contains("unclosed group"), "{m}"),
            other => panic!("{other:?}"),
        }
        match Matcher::new(r"\w{1000}", 1 << 16) {
            Err(MatcherError::TooBig(limit)) => assert_eq!(limit, 1 << 16),
            other => panic!("{other:?}"),
        }
    }
}
