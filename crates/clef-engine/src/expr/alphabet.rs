//! The few non-ASCII characters a table's regexes can tell apart.
//!
//! A Unicode `\w` compiles to a UTF-8 automaton of hundreds of states, and a moderation table
//! repeats it in most of its patterns (`\w+\W+(?:\w+\W+){0,4}`, `(?i)` letters, `\d`, `.`):
//! 5,000 patterns took 98 MB of automata, on a box whose unit allows 64 MB. Yet a regex
//! only ever asks which of its classes a character belongs to. Over all of a table's patterns,
//! the non-ASCII characters fall into a few *blocks* — characters that every class of every
//! pattern either holds or does not (all letters outside `(?i)` folds, all digits, all spaces,
//! the rest) — and swapping each character for its block's representative changes no answer.
//!
//! So a table's patterns are compiled with their classes cut down to ASCII plus one
//! representative per block ([`Alphabet::restrict`]), and a non-ASCII subject is translated
//! once per decision before they run on it ([`Alphabet::translate`]); ASCII subjects, most
//! of them, run as they are. A pattern the alphabet was not built from, or one that reads
//! bytes rather than characters (`(?-u:\xFF)`), keeps its full automaton ([`Alphabet::covers`]).

use std::collections::hash_map::Entry;

use regex_syntax::hir::{Capture, Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind, Repetition};
use rustc_hash::{FxHashMap, FxHashSet};

/// One past the last code point.
const END: u32 = 0x11_0000;

/// The blocks of non-ASCII characters that a set of patterns cannot tell apart.
#[derive(Debug)]
pub struct Alphabet {
    /// sorted starts of runs of characters with the same representative, from 0x80
    starts: Vec<u32>,
    /// by run: its block's representative
    reps: Vec<char>,
    /// ASCII and every representative: what a restricted class may keep
    keep: ClassUnicode,
    /// the non-ASCII parts of the classes the blocks were cut by
    classes: FxHashSet<Box<[(u32, u32)]>>,
}

impl Alphabet {
    /// The alphabet of `patterns` (parsed), or `None` when they hold no class or literal
    /// beyond ASCII (their automata are small as they are).
    pub fn new(patterns: &[Hir]) -> Option<Alphabet> {
        let mut classes: FxHashSet<Box<[(u32, u32)]>> = FxHashSet::default();
        let mut word = false;
        for hir in patterns {
            collect(hir, &mut classes, 0);
            word |= hir.properties().look_set().contains_word_unicode();
        }
        if word {
            // a Unicode `\b` asks whether a character is a word character
            if let Ok(w) = regex_syntax::Parser::new().parse(r"\w") {
                collect(&w, &mut classes, 0);
            }
        }
        if classes.is_empty() {
            return None;
        }
        let mut bounds: Vec<u32> = vec![0x80, END];
        for class in &classes {
            for &(start, end) in class.iter() {
                bounds.extend([start, end + 1]);
            }
        }
        bounds.sort_unstable();
        bounds.dedup();
        // refine one block of every interval class by class: the intervals a class holds move
        // to a new block per block they were in
        let intervals = bounds.len() - 1;
        let mut block = vec![0u32; intervals];
        let mut blocks = 1u32;
        for class in &classes {
            let mut moved: FxHashMap<u32, u32> = FxHashMap::default();
            for &(start, end) in class.iter() {
                let mut i = bounds.partition_point(|&b| b < start);
                while bounds.get(i).is_some_and(|&b| b <= end) {
                    if let Some(b) = block.get_mut(i) {
                        *b = match moved.entry(*b) {
                            Entry::Occupied(e) => *e.get(),
                            Entry::Vacant(e) => {
                                blocks += 1;
                                *e.insert(blocks - 1)
                            }
                        };
                    }
                    i += 1;
                }
            }
        }
        let mut rep_of: FxHashMap<u32, char> = FxHashMap::default();
        let (mut starts, mut reps) = (Vec::new(), Vec::new());
        for (i, &b) in block.iter().enumerate() {
            let (Some(&start), Some(&next)) = (bounds.get(i), bounds.get(i + 1)) else { continue };
            // the surrogates are no characters: an interval of them has no representative
            let Some(first) = char::from_u32(start).or_else(|| (next > 0xE000).then_some('\u{E000}')) else { continue };
            let rep = *rep_of.entry(b).or_insert(first);
            if reps.last() != Some(&rep) {
                starts.push(start);
                reps.push(rep);
            }
        }
        let mut keep = ClassUnicode::new([ClassUnicodeRange::new('\0', '\x7f')]);
        keep.union(&ClassUnicode::new(rep_of.values().map(|&c| ClassUnicodeRange::new(c, c))));
        Some(Alphabet { starts, reps, keep, classes })
    }

    /// How many representatives stand for the non-ASCII characters.
    pub fn blocks(&self) -> usize {
        self.keep.ranges().iter().map(|r| r.end() as usize - r.start() as usize + 1).sum::<usize>() - 128
    }

    /// The representative of character `c` (itself when ASCII).
    pub fn rep(&self, c: char) -> char {
        if c.is_ascii() {
            return c;
        }
        let run = self.starts.partition_point(|&s| s <= c as u32);
        run.checked_sub(1).and_then(|r| self.reps.get(r)).copied().unwrap_or(c)
    }

    /// `text` with every character swapped for its representative, into `out` (cleared).
    pub fn translate(&self, text: &str, out: &mut String) {
        out.clear();
        out.reserve(text.len());
        let mut rest = text;
        while let Some(at) = rest.bytes().position(|b| !b.is_ascii()) {
            let (ascii, tail) = rest.split_at(at);
            out.push_str(ascii);
            let mut chars = tail.chars();
            if let Some(c) = chars.next() {
                out.push(self.rep(c));
            }
            rest = chars.as_str();
        }
        out.push_str(rest);
    }

    /// `text` translated, or `None` when it is ASCII (it reads as it is).
    pub fn translated(&self, text: &str) -> Option<String> {
        if text.is_ascii() {
            return None;
        }
        let mut out = String::new();
        self.translate(text, &mut out);
        Some(out)
    }

    /// Whether `hir` tells characters apart only as the alphabet's blocks do: every class
    /// and literal of it was one the alphabet was cut by, and it reads no byte outside ASCII.
    pub fn covers(&self, hir: &Hir) -> bool {
        let mut classes = FxHashSet::default();
        if !collect(hir, &mut classes, 0) {
            return false;
        }
        if hir.properties().look_set().contains_word_unicode() {
            let Ok(w) = regex_syntax::Parser::new().parse(r"\w") else { return false };
            collect(&w, &mut classes, 0);
        }
        classes.iter().all(|c| self.classes.contains(c))
    }

    /// `hir` with each class cut down to ASCII and the representatives: the pattern as it runs
    /// on translated text (for a pattern the alphabet [`covers`](Alphabet::covers)).
    pub fn restrict(&self, hir: &Hir) -> Hir {
        rewrite(hir, MAX_DEPTH, &|h| match h.kind() {
            HirKind::Class(Class::Unicode(c)) => {
                let mut cut = c.clone();
                cut.intersect(&self.keep);
                Some(Hir::class(Class::Unicode(cut)))
            }
            _ => None,
        })
    }
}

/// `hir` with every node `leaf` replaces (`Some`) replaced, the rest rebuilt around them; past
/// `max_depth` levels, left as it is.
pub(crate) fn rewrite(hir: &Hir, max_depth: usize, leaf: &dyn Fn(&Hir) -> Option<Hir>) -> Hir {
    rewrite_at(hir, max_depth, leaf, 0)
}

fn rewrite_at(hir: &Hir, max_depth: usize, leaf: &dyn Fn(&Hir) -> Option<Hir>, depth: usize) -> Hir {
    if depth > max_depth {
        return hir.clone();
    }
    if let Some(replaced) = leaf(hir) {
        return replaced;
    }
    let sub = |h: &Hir| rewrite_at(h, max_depth, leaf, depth + 1);
    match hir.kind() {
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(sub).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(sub).collect()),
        HirKind::Capture(c) => {
            Hir::capture(Capture { index: c.index, name: c.name.clone(), sub: Box::new(sub(&c.sub)) })
        }
        HirKind::Repetition(r) => {
            Hir::repetition(Repetition { min: r.min, max: r.max, greedy: r.greedy, sub: Box::new(sub(&r.sub)) })
        }
        _ => hir.clone(),
    }
}

/// Deeper patterns keep their full automaton ([`Alphabet::covers`] says no).
const MAX_DEPTH: usize = 64;

/// Adds the non-ASCII parts of `hir`'s classes to `classes` (a non-ASCII literal character
/// is a class of its own); false when `hir` reads bytes outside ASCII or nests too deep.
fn collect(hir: &Hir, classes: &mut FxHashSet<Box<[(u32, u32)]>>, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => {
            let part: Box<[(u32, u32)]> = c
                .ranges()
                .iter()
                .filter(|r| !r.end().is_ascii())
                .map(|r| ((r.start() as u32).max(0x80), r.end() as u32))
                .collect();
            if !part.is_empty() {
                classes.insert(part);
            }
            true
        }
        HirKind::Class(Class::Bytes(c)) => c.ranges().iter().all(|r| r.end().is_ascii()),
        HirKind::Literal(lit) => match std::str::from_utf8(&lit.0) {
            Ok(s) => {
                for c in s.chars().filter(|c| !c.is_ascii()) {
                    classes.insert(Box::new([(c as u32, c as u32)]));
                }
                true
            }
            Err(_) => false,
        },
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs.iter().all(|s| collect(s, classes, depth + 1)),
        HirKind::Capture(c) => collect(&c.sub, classes, depth + 1),
        HirKind::Repetition(r) => collect(&r.sub, classes, depth + 1),
        HirKind::Empty | HirKind::Look(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(p: &str) -> Hir {
        regex_syntax::Parser::new().parse(p).unwrap()
    }

    /// Every pattern, restricted and run on translated text, answers as the regex crate does
    /// on the text itself.
    fn agree(patterns: &[&str], texts: &[&str]) {
        let hirs: Vec<Hir> = patterns.iter().map(|p| parse(p)).collect();
        let alphabet = Alphabet::new(&hirs).expect("non-ASCII classes");
        let mut translated = String::new();
        for (p, hir) in patterns.iter().zip(&hirs) {
            assert!(alphabet.covers(hir), "{p}");
            let restricted = regex_automata::meta::Builder::new().build_from_hir(&alphabet.restrict(hir)).unwrap();
            let full = regex::Regex::new(p).unwrap();
            for text in texts {
                alphabet.translate(text, &mut translated);
                assert_eq!(restricted.is_match(&translated), full.is_match(text), "{p:?} on {text:?} ({translated:?})");
            }
        }
    }

    #[test]
    fn translated_text_gives_every_pattern_its_answer() {
        let patterns = [
            r"\w+\W+\w+",
            r"(?i)\bstra(ss|ß)e\b",
            r"\d{3,}",
            r"\s{2,}",
            r"^.{4}$",
            r"(?i)k[e3]lvin",
            r"[^a-z ]{2}",
            r"café",
            r"(?i)ÉCOLE",
            r"\bgo\b",
            r"[\p{Greek}]+",
            r"x\Wy",
        ];
        let texts = [
            "",
            "hello world",
            "straße",
            "STRASSE",
            "Straße!",
            "ab١٢٣",
            "12\u{a0}\u{2003}x",
            "ä ö",
            "日本語",
            "\u{212a}elvin",
            "ſtraße",
            "café",
            "CAFÉ",
            "école",
            "emoji 🎉 go!",
            "égo go",
            "αβγ",
            "x\u{1F600}y",
            "xéy",
            "\u{E000}\u{10FFFF}",
        ];
        agree(&patterns, &texts);
    }

    #[test]
    fn the_blocks_are_few_and_the_automata_small() {
        let hirs: Vec<Hir> = [r"\w+", r"(?i)\bnft\b", r"\d+", r".{0,10}"].iter().map(|p| parse(p)).collect();
        let alphabet = Alphabet::new(&hirs).unwrap();
        assert!(alphabet.blocks() < 16, "{} blocks", alphabet.blocks());
        let size = |h: &Hir| regex_automata::nfa::thompson::NFA::compiler().build_from_hir(h).unwrap().states().len();
        let full = size(&hirs[0]);
        let cut = size(&alphabet.restrict(&hirs[0]));
        assert!(cut * 5 < full, "{cut} states restricted, {full} in full");
    }

    #[test]
    fn patterns_outside_the_alphabet_are_not_covered() {
        let alphabet = Alphabet::new(&[parse(r"\w")]).unwrap();
        assert!(alphabet.covers(&parse(r"\w+x")));
        assert!(alphabet.covers(&parse(r"\bx")), "\\b reads the word class, which is in");
        assert!(!alphabet.covers(&parse(r"é")));
        assert!(!alphabet.covers(&parse(r"\d")));
        let bytes = regex_syntax::ParserBuilder::new().utf8(false).build().parse(r"(?-u:\xFF)").unwrap();
        assert!(!alphabet.covers(&bytes));
        assert!(Alphabet::new(&[parse("abc"), parse(r"(?-u)\w")]).is_none());
    }
}
