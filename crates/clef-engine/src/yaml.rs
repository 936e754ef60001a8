//! YAML with positions: the one reader of `config.yaml` and of rule sets (`*.yaml`).
//!
//! granit-parser turns the text into events, each with the byte range it covers in the file;
//! [`parse`] builds them into a tree of [`Node`]s that keep those ranges, so every problem found
//! later — an unknown key, a value of the wrong type, an error inside a `when:` expression — is
//! reported where it is written, from the parser's own positions rather than from a search of
//! the text.
//!
//! The tree is built under guards, so that no file can make reading it slow or large: nesting
//! deeper than the caller allows stops the parse at the bracket that goes too deep (the parser
//! itself then never sees deeper levels), anchors and aliases may copy only so many values, and
//! a file holds one document. A key given twice in one mapping is a problem too (the first one
//! is kept).
//!
//! Plain scalars are resolved as YAML 1.2's core schema says (`~`/`null`, `true`/`false`,
//! decimal, `0x`/`0o` integers, floats with `.inf` and `.nan`); quoted and block scalars are
//! strings, and so is a scalar tagged `!!str`. Other tags are refused: clef's files are plain data.
//!
//! Two ways to read the tree: [`Node::to_json`] for values kept as JSON (actions, parameters),
//! and [`NodeDe`], a serde `Deserializer` whose errors carry the position and the key path of the
//! value they are about (the configuration). [`scalar_map`] maps a decoded scalar back to the
//! bytes it was written as, through quotes, escapes, folding and block indentation.
// Load time (reading YAML): every index is a position within the lines and entries this reader
// built, checked by the loop bound or the test beside it.
#![allow(clippy::indexing_slicing)]

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use granit_parser::{Event, Parser, ScalarStyle, ScanError};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};

/// The most values anchors and aliases may copy in one file: `*a` copies what `&a` names, so a
/// few lines of aliases of aliases could otherwise ask for billions of values.
pub const MAX_ALIAS_COPIES: usize = 1_000_000;

/// One node of a YAML document and the bytes of the file it covers.
#[derive(Clone, Debug, PartialEq)]
pub struct Node<'s> {
    /// where it is written (for a collection: from its first to its last character)
    pub span: Range<usize>,
    /// what it is
    pub kind: Kind<'s>,
}

/// What a node is.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind<'s> {
    /// a scalar as written, not yet resolved to a type
    Scalar(Scalar<'s>),
    /// a sequence (list)
    Seq(Vec<Node<'s>>),
    /// a mapping, its entries in the order written
    Map(Vec<(Node<'s>, Node<'s>)>),
}

/// A scalar: its text after YAML's unescaping and folding, and how it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar<'s> {
    /// the text, as the parser decoded it
    pub text: Cow<'s, str>,
    /// plain, quoted or block
    pub style: ScalarStyle,
    /// the core-schema tag written on it (`!!str`, `!!int` …), if any
    pub tag: Option<CoreTag>,
}

/// The tags of YAML's core schema that a scalar may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreTag {
    /// `!!str`: a string whatever it looks like
    Str,
    /// `!!int`
    Int,
    /// `!!float`
    Float,
    /// `!!bool`
    Bool,
    /// `!!null`
    Null,
}

/// A scalar's value, resolved by YAML 1.2's core schema.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// `~`, `null`, or nothing
    Null,
    /// `true` or `false`
    Bool(bool),
    /// an integer that fits in 64 signed bits
    Int(i64),
    /// a positive integer beyond `i64::MAX` that fits in 64 bits
    UInt(u64),
    /// a float (`.inf` and `.nan` included)
    Float(f64),
    /// anything else, and every quoted or block scalar
    Str(&'a str),
}

impl Value<'_> {
    /// How a message names the kind of value: `a number`, `a string`…
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "true or false",
            Value::Int(_) | Value::UInt(_) | Value::Float(_) => "a number",
            Value::Str(_) => "a string",
        }
    }
}

impl<'s> Scalar<'s> {
    /// The scalar's value.
    pub fn value(&self) -> Value<'_> {
        match self.tag {
            Some(CoreTag::Str) => Value::Str(&self.text),
            // a tag other than `!!str` resolves quoted text too (`!!int "12"`); `parse` checked it
            Some(CoreTag::Float) => match resolve_plain(&self.text) {
                Value::Int(i) => Value::Float(i as f64),
                Value::UInt(u) => Value::Float(u as f64),
                v => v,
            },
            Some(_) => resolve_plain(&self.text),
            None if self.style != ScalarStyle::Plain => Value::Str(&self.text),
            None => resolve_plain(&self.text),
        }
    }
}

/// A plain scalar's value (YAML 1.2 core schema).
fn resolve_plain(t: &str) -> Value<'_> {
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Value::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    let b = t.as_bytes();
    if !matches!(b[0], b'0'..=b'9' | b'-' | b'+' | b'.') {
        return Value::Str(t);
    }
    if let Some(hex) = t.strip_prefix("0x") {
        return match u64::from_str_radix(hex, 16) {
            Ok(n) if hex.bytes().all(|c| c.is_ascii_hexdigit()) => int(n),
            _ => Value::Str(t),
        };
    }
    if let Some(oct) = t.strip_prefix("0o") {
        return match u64::from_str_radix(oct, 8) {
            Ok(n) if oct.bytes().all(|c| matches!(c, b'0'..=b'7')) => int(n),
            _ => Value::Str(t),
        };
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
        if let Ok(i) = t.parse::<i64>() {
            return Value::Int(i);
        }
        if let Ok(u) =
            digits.parse::<u64>().map_err(drop).and_then(|u| if t.starts_with('-') { Err(()) } else { Ok(u) })
        {
            return Value::UInt(u);
        }
        return t.parse::<f64>().map(Value::Float).unwrap_or(Value::Str(t));
    }
    if is_float(digits) {
        if let Ok(f) = t.parse::<f64>() {
            return Value::Float(f);
        }
    }
    Value::Str(t)
}

fn int(n: u64) -> Value<'static> {
    i64::try_from(n).map(Value::Int).unwrap_or(Value::UInt(n))
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_float(t: &str) -> bool {
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let (whole, fraction) = match mantissa.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (mantissa, None),
    };
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    let mantissa_ok = match fraction {
        None => !whole.is_empty() && digits(whole),
        Some(f) => digits(whole) && digits(f) && !(whole.is_empty() && f.is_empty()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

impl<'s> Node<'s> {
    /// The scalar, if this is one.
    pub fn scalar(&self) -> Option<&Scalar<'s>> {
        match &self.kind {
            Kind::Scalar(s) => Some(s),
            _ => None,
        }
    }

    /// The resolved value of a scalar node.
    pub fn value(&self) -> Option<Value<'_>> {
        self.scalar().map(Scalar::value)
    }

    /// Whether this is a null scalar (`~`, `null`, or a key with nothing after it).
    pub fn is_null(&self) -> bool {
        matches!(self.value(), Some(Value::Null))
    }

    /// The entries, if this is a mapping.
    pub fn entries(&self) -> Option<&[(Node<'s>, Node<'s>)]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items, if this is a sequence (none otherwise).
    pub fn items(&self) -> &[Node<'s>] {
        match &self.kind {
            Kind::Seq(items) => items,
            _ => &[],
        }
    }

    /// The key and value of `key` in a mapping.
    pub fn entry(&self, key: &str) -> Option<&(Node<'s>, Node<'s>)> {
        self.entries()?.iter().find(|(k, _)| k.key_text() == Some(key))
    }

    /// The value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node<'s>> {
        self.entry(key).map(|(_, v)| v)
    }

    /// The text of a scalar used as a key (`None` for a collection).
    pub fn key_text(&self) -> Option<&str> {
        self.scalar().map(|s| &*s.text)
    }

    /// How a message names what this node is: `a mapping`, `a list`, `a string`…
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            Kind::Scalar(s) => s.value().kind_name(),
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }

    /// How many nodes this one holds, itself included.
    fn count(&self) -> usize {
        match &self.kind {
            Kind::Scalar(_) => 1,
            Kind::Seq(items) => 1 + items.iter().map(Node::count).sum::<usize>(),
            Kind::Map(entries) => 1 + entries.iter().map(|(k, v)| k.count() + v.count()).sum::<usize>(),
        }
    }

    /// The node as JSON. Keys must be scalars (their text is the JSON key); floats must be
    /// finite. `Err` is the place and what is wrong.
    pub fn to_json(&self) -> Result<serde_json::Value, (Range<usize>, String)> {
        use serde_json::Value as J;
        Ok(match &self.kind {
            Kind::Scalar(s) => match s.value() {
                Value::Null => J::Null,
                Value::Bool(b) => J::Bool(b),
                Value::Int(i) => J::from(i),
                Value::UInt(u) => J::from(u),
                Value::Float(f) => match serde_json::Number::from_f64(f) {
                    Some(n) => J::Number(n),
                    None => {
                        return Err((self.span.clone(), format!("`{}` is not a number JSON can hold", s.text)));
                    }
                },
                Value::Str(t) => J::String(t.to_string()),
            },
            Kind::Seq(items) => J::Array(items.iter().map(Node::to_json).collect::<Result<_, _>>()?),
            Kind::Map(entries) => {
                let mut out = serde_json::Map::with_capacity(entries.len());
                for (k, v) in entries {
                    let Some(key) = k.key_text() else {
                        return Err((k.span.clone(), "a key must be text, not a list or a mapping".into()));
                    };
                    out.insert(key.to_string(), v.to_json()?);
                }
                J::Object(out)
            }
        })
    }
}

/// A problem found while reading a file: where, how wide, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// byte offset in the source
    pub at: usize,
    /// bytes underlined
    pub width: usize,
    /// what is wrong and how to fix it
    pub message: String,
}

/// How a file is read.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// how deep lists and mappings may nest below the top level
    pub max_depth: usize,
    /// said after "nested more than N levels deep here; " (`a configuration needs a few`)
    pub depth_hint: &'static str,
    /// what the file is, for messages (`a configuration`, `a rule set`)
    pub what: &'static str,
}

/// A document read into a tree, and the problems that did not stop the reading (keys given twice).
#[derive(Debug)]
pub struct Document<'s> {
    /// the top-level node; `None` for a file of comments only
    pub root: Option<Node<'s>>,
    /// problems found on the way, in the order of the file
    pub problems: Vec<Problem>,
}

/// A collection being read.
struct Frame<'s> {
    start: usize,
    anchor: usize,
    body: Body<'s>,
}

enum Body<'s> {
    Seq(Vec<Node<'s>>),
    Map {
        entries: Vec<(Node<'s>, Node<'s>)>,
        key: Option<Node<'s>>,
        seen: FxHashSet<String>,
        /// the current key is a duplicate: its value is dropped
        skip: bool,
    },
}

/// One step of a path into a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// the value of a key
    Key(String),
    /// an item of a list
    Index(usize),
}

/// A dotted path for messages: `server.cors.origins[0]`.
pub fn path_text(steps: &[Step]) -> String {
    let mut out = String::new();
    for s in steps {
        match s {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Reads one YAML document from `source`. A syntax error, nesting deeper than
/// `options.max_depth`, too many copies through aliases, a tag other than `!!str` or a second
/// document stops the reading: `Err` says where and why. Keys given twice are reported in
/// [`Document::problems`].
pub fn parse<'s>(source: &'s str, options: &Options) -> Result<Document<'s>, Problem> {
    let mut limits = granit_parser::Options::default();
    // the scanner reads a run of `[` before the parser reports any: it must stop at the limit too
    limits.flow_nesting_limit = options.max_depth;
    limits.block_nesting_limit = options.max_depth + 1;
    let mut parser = Parser::new_from_str_with_options(source, limits);
    let mut stack: Vec<Frame<'s>> = Vec::new();
    let mut root: Option<Node<'s>> = None;
    let mut anchors: FxHashMap<usize, Node<'s>> = FxHashMap::default();
    let mut copies = 0usize;
    let mut problems = Vec::new();
    let mut documents = 0;
    let at = |offset: usize, message: String| Problem { at: offset, width: 1, message };
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| syntax_problem(source, &e, options))?;
        let range = span.byte_range().unwrap_or(0..0);
        let node = match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return Err(Problem {
                        at: range.start,
                        width: range.len().max(1),
                        message: format!(
                            "a second YAML document starts here; {} is one document (remove the `---`)",
                            options.what
                        ),
                    });
                }
                continue;
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => continue,
            Event::Scalar(text, style, anchor, tag) => {
                let tag = match tag.as_deref() {
                    None => None,
                    Some(t) => {
                        let core = match t.core_suffix() {
                            Some("str") => Some(CoreTag::Str),
                            Some("int") => Some(CoreTag::Int),
                            Some("float") => Some(CoreTag::Float),
                            Some("bool") => Some(CoreTag::Bool),
                            Some("null") => Some(CoreTag::Null),
                            _ => None,
                        };
                        let fits = |v: Value<'_>| match core {
                            Some(CoreTag::Str) => true,
                            Some(CoreTag::Int) => matches!(v, Value::Int(_) | Value::UInt(_)),
                            Some(CoreTag::Float) => matches!(v, Value::Int(_) | Value::UInt(_) | Value::Float(_)),
                            Some(CoreTag::Bool) => matches!(v, Value::Bool(_)),
                            Some(CoreTag::Null) => matches!(v, Value::Null),
                            None => false,
                        };
                        if !fits(resolve_plain(&text)) {
                            return Err(tag_problem(source, &span, t.original_handle(), t.suffix(), core.is_some()));
                        }
                        core
                    }
                };
                let node = Node { span: range, kind: Kind::Scalar(Scalar { text, style, tag }) };
                if anchor != 0 {
                    anchors.insert(anchor, node.clone());
                }
                node
            }
            Event::SequenceStart(_, anchor, ref tag) | Event::MappingStart(_, anchor, ref tag) => {
                let wanted = if matches!(event, Event::SequenceStart(..)) { "seq" } else { "map" };
                if let Some(t) = tag.as_deref().filter(|t| t.core_suffix() != Some(wanted)) {
                    return Err(tag_problem(source, &span, t.original_handle(), t.suffix(), false));
                }
                if stack.len() > options.max_depth {
                    return Err(Problem { at: range.start, width: 1, message: too_deep_message(options) });
                }
                let body = if matches!(event, Event::SequenceStart(..)) {
                    Body::Seq(Vec::new())
                } else {
                    Body::Map { entries: Vec::new(), key: None, seen: FxHashSet::default(), skip: false }
                };
                stack.push(Frame { start: range.start, anchor, body });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else { continue };
                let kind = match frame.body {
                    Body::Seq(items) => Kind::Seq(items),
                    Body::Map { entries, .. } => Kind::Map(entries),
                };
                let node = Node { span: frame.start..range.end.max(frame.start), kind };
                if frame.anchor != 0 {
                    copies += node.count();
                    if copies > MAX_ALIAS_COPIES {
                        return Err(at(frame.start, aliases_message()));
                    }
                    anchors.insert(frame.anchor, node.clone());
                }
                node
            }
            Event::Alias(id) => {
                let Some(target) = anchors.get(&id) else {
                    return Err(at(range.start, "this alias names no anchor defined before it".into()));
                };
                copies += target.count();
                if copies > MAX_ALIAS_COPIES {
                    return Err(at(range.start, aliases_message()));
                }
                let mut copy = target.clone();
                // the copy is reported where the alias is written
                relocate(&mut copy, &range);
                copy
            }
            _ => continue,
        };
        match stack.last_mut() {
            None => root = Some(node),
            Some(frame) => frame.add(node, &mut problems),
        }
    }
    // the paths in the duplicate-key messages are filled in once the tree is whole
    let root = root.map(|mut r| {
        name_duplicates(&mut r, &mut problems);
        r
    });
    problems.sort_by_key(|p| p.at);
    Ok(Document { root, problems })
}

fn aliases_message() -> String {
    format!(
        "anchors and aliases here copy more than {MAX_ALIAS_COPIES} values; write the values out, or alias smaller ones"
    )
}

/// A tag clef does not read (`!foo`), or a core tag on a value it does not fit (`!!int x`).
fn tag_problem(source: &str, span: &granit_parser::Span, handle: &str, suffix: &str, core: bool) -> Problem {
    let at = span.tag_start.and_then(|m| m.byte_offset()).or_else(|| span.byte_range().map(|r| r.start)).unwrap_or(0);
    let at = at.min(source.len());
    let width = source[at..].find(|c: char| c.is_whitespace()).unwrap_or(1).max(1);
    let message = if core {
        format!("the value tagged `{handle}{suffix}` is not of that type; remove the tag or fix the value")
    } else {
        format!(
            "the tag `{handle}{suffix}` is not supported: clef reads plain YAML values (the core schema's `!!str`, \
             `!!int`, `!!float`, `!!bool`, `!!null`, `!!seq` and `!!map` only); remove the tag"
        )
    };
    Problem { at, width, message }
}

/// Moves every span of an aliased copy to the alias.
fn relocate(node: &mut Node<'_>, to: &Range<usize>) {
    node.span = to.clone();
    match &mut node.kind {
        Kind::Scalar(_) => {}
        Kind::Seq(items) => items.iter_mut().for_each(|i| relocate(i, to)),
        Kind::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            relocate(k, to);
            relocate(v, to);
        }),
    }
}

/// A marker in a problem's message where the path of its mapping goes.
const PATH_MARK: &str = "\u{e000}path\u{e000}";

impl<'s> Frame<'s> {
    fn add(&mut self, node: Node<'s>, problems: &mut Vec<Problem>) {
        match &mut self.body {
            Body::Seq(items) => items.push(node),
            Body::Map { entries, key, seen, skip } => match key.take() {
                None => {
                    *skip = match node.key_text() {
                        Some(text) if !seen.insert(text.to_string()) => {
                            problems.push(Problem {
                                at: node.span.start,
                                width: node.span.len().max(1),
                                message: format!(
                                    "`{}` is given twice {PATH_MARK}; keep one",
                                    crate::diagnostic::quote(text)
                                ),
                            });
                            true
                        }
                        _ => false,
                    };
                    *key = Some(node);
                }
                Some(k) => {
                    if !std::mem::take(skip) {
                        entries.push((k, node));
                    }
                }
            },
        }
    }
}

/// Fills in the path of the mapping in each duplicate-key message: found by the key's position.
fn name_duplicates(root: &mut Node<'_>, problems: &mut [Problem]) {
    for p in problems.iter_mut().filter(|p| p.message.contains(PATH_MARK)) {
        let mut path = Vec::new();
        let place = match mapping_path_at(root, p.at, &mut path) {
            true if !path.is_empty() => format!("in `{}`", path_text(&path)),
            _ => "at the top level".to_string(),
        };
        p.message = p.message.replace(PATH_MARK, &place);
    }
}

/// The path of the innermost mapping that spans `at`, into `path`.
fn mapping_path_at(node: &Node<'_>, at: usize, path: &mut Vec<Step>) -> bool {
    match &node.kind {
        Kind::Scalar(_) => false,
        Kind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                if item.span.contains(&at) {
                    path.push(Step::Index(i));
                    if mapping_path_at(item, at, path) {
                        return true;
                    }
                    path.pop();
                }
            }
            false
        }
        Kind::Map(entries) => {
            for (k, v) in entries {
                if v.span.contains(&at) && !matches!(v.kind, Kind::Scalar(_)) {
                    path.push(Step::Key(k.key_text().unwrap_or("?").to_string()));
                    if mapping_path_at(v, at, path) {
                        return true;
                    }
                    path.pop();
                }
            }
            true
        }
    }
}

/// A syntax error as a problem, named as the mistake a person makes (a tab, a `: ` in a plain
/// value, a quote not closed, a line indented off), else the parser's message without its own
/// position.
fn syntax_problem(source: &str, e: &ScanError, options: &Options) -> Problem {
    use granit_parser::ErrorKind as K;
    let m = e.marker();
    let at = m.byte_offset().unwrap_or_else(|| source.char_indices().nth(m.index()).map_or(source.len(), |(b, _)| b));
    let mut at = at.min(source.len());
    while !source.is_char_boundary(at) {
        at -= 1;
    }
    let info = e.info();
    let line_start = source[..at].rfind('\n').map_or(0, |n| n + 1);
    let message = match e.kind() {
        K::RecursionLimitExceeded => too_deep_message(options),
        K::TabInPlainScalar | K::TabInIndentation | K::TabAtBlockScalarStart => {
            tab_problem(source, line_start, &mut at)
        }
        _ if info.contains("tab") => tab_problem(source, line_start, &mut at),
        K::MappingValueNotAllowed if source[at..].starts_with(':') => {
            colon_in_value(&source[line_start..], at - line_start)
        }
        K::UnclosedQuotedScalar => {
            let quote = source[at..].chars().next().filter(|c| matches!(c, '\'' | '"')).unwrap_or('\'');
            format!(
                "this is not valid YAML: this `{quote}` opens a quoted value that is never closed: add the closing `{quote}` where the value ends \
                 (a quoted value may go on over several lines, so YAML read on to the end of the file)"
            )
        }
        K::ExpectedBlockMappingKey | K::ExpectedBlockSequenceEntry => "this is not valid YAML: this line is indented \
             differently from the \
             lines above it: YAML nests by indentation, so the keys of one mapping (and the `- ` items of one list) \
             must start in the same column"
            .to_string(),
        _ => format!("this is not valid YAML: {info}"),
    };
    Problem { at, width: 1, message }
}

/// The message for a tab YAML does not allow, moving `at` to the tab itself: in the indentation
/// before the parser's position, or on the next line when it stopped at the end of a scalar.
fn tab_problem(source: &str, line_start: usize, at: &mut usize) -> String {
    let rest = &source[*at..];
    let line_after = rest.find('\n').map_or(rest.len(), |n| rest[n + 1..].find('\n').map_or(rest.len(), |m| n + 1 + m));
    if let Some(tab) = source[line_start..*at].find('\t') {
        *at = line_start + tab;
    } else if let Some(tab) = rest[..line_after].find('\t') {
        *at += tab;
    }
    "this is not valid YAML: a tab; YAML indents with spaces, not tabs: replace it with spaces".to_string()
}

/// The message for a `: ` YAML found inside a plain value (at byte `colon` of `line`): it reads
/// it as the start of a mapping. Names the key whose value it is, and the value quoted.
fn colon_in_value(line: &str, colon: usize) -> String {
    let line = line.split('\n').next().unwrap_or(line);
    let key_end = line.get(..colon).and_then(|before| before.find(": "));
    let Some(key_end) = key_end else {
        return "this is not valid YAML: a `: ` (a colon and a space) inside a plain value starts a mapping; put \
                the value in quotes ('…')"
            .to_string();
    };
    let key = line[..key_end].trim_start().trim_start_matches("- ").trim();
    let value = line[key_end + 2..].trim();
    let value = value.split(" #").next().unwrap_or(value).trim_end();
    format!(
        "this is not valid YAML: the value of `{key}` holds `: ` (a colon and a space), which YAML reads as the \
         start of a mapping; put the whole value in quotes: {key}: '{}'",
        value.replace('\'', "''")
    )
}

fn too_deep_message(options: &Options) -> String {
    format!("lists and mappings are nested more than {} levels deep here; {}", options.max_depth, options.depth_hint)
}

/// Whether the document in `source` is a mapping with `key` at its top level. Read as far as it
/// is valid YAML: a key written before a syntax error counts.
pub fn has_top_level_key(source: &str, key: &str) -> bool {
    let mut limits = granit_parser::Options::default();
    limits.flow_nesting_limit = 128;
    limits.block_nesting_limit = 129;
    let mut depth = 0usize;
    let mut top_is_map = false;
    // in the top-level mapping: whether the next node completed there is a key
    let mut key_next = true;
    for next in Parser::new_from_str_with_options(source, limits) {
        let Ok((event, _)) = next else { return false };
        match event {
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if depth == 0 {
                    top_is_map = matches!(event, Event::MappingStart(..));
                }
                depth += 1;
            }
            Event::MappingEnd | Event::SequenceEnd => {
                depth = depth.saturating_sub(1);
                match depth {
                    0 => return false,
                    1 => key_next = !key_next,
                    _ => {}
                }
            }
            Event::Scalar(text, ..) if depth == 1 && top_is_map => {
                if key_next && text == key {
                    return true;
                }
                key_next = !key_next;
            }
            Event::Alias(_) if depth == 1 => key_next = !key_next,
            _ => {}
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Where each byte of a scalar's text is written

/// For each byte of `node`'s decoded text, the byte of `source` it was read from, and one more
/// entry for the end of the text. `None` when the node is not a scalar, or when its text cannot
/// be mapped exactly (the map is rebuilt from the source and checked against the parser's text;
/// a scalar whose folding this does not reproduce is not mapped rather than mapped wrongly).
pub fn scalar_map(source: &str, node: &Node<'_>) -> Option<Vec<usize>> {
    let s = node.scalar()?;
    let raw = source.get(node.span.clone())?;
    let base = node.span.start;
    let (text, map) = match s.style {
        ScalarStyle::Plain => flow_map(raw, base, s.style),
        ScalarStyle::SingleQuoted => flow_map(raw.strip_prefix('\'')?.strip_suffix('\'')?, base + 1, s.style),
        ScalarStyle::DoubleQuoted => flow_map(raw.strip_prefix('"')?.strip_suffix('"')?, base + 1, s.style),
        ScalarStyle::Literal | ScalarStyle::Folded => block_map(source, node.span.clone(), s.style)?,
    };
    (text == *s.text && map.len() == text.len() + 1).then_some(map)
}

/// One character of a flow scalar: its text and where it starts in the source.
#[derive(Clone, Copy)]
enum Unit {
    /// content from `at` to `end` in the source (`ws`: a literal space or tab, which folding may trim)
    Char { c: char, at: usize, end: usize, ws: bool },
    /// a line break in the source
    Break,
    /// `\` at the end of a line in a double-quoted scalar: the break is removed
    EscapedBreak,
}

/// Decodes a plain or quoted scalar's content (without its quotes) starting at byte `base`,
/// with YAML's line folding, into its text and the map of each byte to the source.
fn flow_map(raw: &str, base: usize, style: ScalarStyle) -> (String, Vec<usize>) {
    let single = style == ScalarStyle::SingleQuoted;
    let double = style == ScalarStyle::DoubleQuoted;
    let mut units = Vec::with_capacity(raw.len());
    let mut it = raw.char_indices().peekable();
    // where the next character starts: the end of the one just read
    let next_at = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        it.peek().map_or(base + raw.len(), |&(j, _)| base + j)
    };
    while let Some((i, c)) = it.next() {
        let at = base + i;
        match c {
            '\r' if it.peek().map(|&(_, n)| n) == Some('\n') => {}
            '\n' | '\r' => units.push(Unit::Break),
            '\'' if single && it.peek().map(|&(_, n)| n) == Some('\'') => {
                it.next();
                let end = next_at(&mut it);
                units.push(Unit::Char { c: '\'', at, end, ws: false });
            }
            '\\' if double => {
                let Some((_, e)) = it.next() else { break };
                let simple = match e {
                    '0' => Some('\0'),
                    'a' => Some('\x07'),
                    'b' => Some('\x08'),
                    't' | '\t' => Some('\t'),
                    'n' => Some('\n'),
                    'v' => Some('\x0b'),
                    'f' => Some('\x0c'),
                    'r' => Some('\r'),
                    'e' => Some('\x1b'),
                    ' ' => Some(' '),
                    '"' => Some('"'),
                    '/' => Some('/'),
                    '\\' => Some('\\'),
                    'N' => Some('\u{85}'),
                    '_' => Some('\u{a0}'),
                    'L' => Some('\u{2028}'),
                    'P' => Some('\u{2029}'),
                    _ => None,
                };
                if let Some(c) = simple {
                    let end = next_at(&mut it);
                    units.push(Unit::Char { c, at, end, ws: false });
                    continue;
                }
                let digits = match e {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    '\r' | '\n' => {
                        if e == '\r' && it.peek().map(|&(_, n)| n) == Some('\n') {
                            it.next();
                        }
                        units.push(Unit::EscapedBreak);
                        continue;
                    }
                    _ => 0,
                };
                let mut code = 0u32;
                for _ in 0..digits {
                    let d = it.next().and_then(|(_, h)| h.to_digit(16)).unwrap_or(0);
                    code = code.wrapping_mul(16).wrapping_add(d);
                }
                let end = next_at(&mut it);
                units.push(Unit::Char { c: char::from_u32(code).unwrap_or('\u{fffd}'), at, end, ws: false });
            }
            c => {
                let end = next_at(&mut it);
                units.push(Unit::Char { c, at, end, ws: c == ' ' || c == '\t' });
            }
        }
    }
    // lines between breaks; an escaped break joins two lines with nothing between them
    let mut lines: Vec<(Vec<Unit>, bool)> = vec![(Vec::new(), false)];
    for u in units {
        match u {
            Unit::Break => lines.push((Vec::new(), false)),
            Unit::EscapedBreak => lines.push((Vec::new(), true)),
            ch => lines.last_mut().map(|l| l.0.push(ch)).unwrap_or_default(),
        }
    }
    let count = lines.len();
    let mut text = String::with_capacity(raw.len());
    let mut map = Vec::with_capacity(raw.len() + 1);
    let push = |c: char, at: usize, text: &mut String, map: &mut Vec<usize>| {
        text.push(c);
        map.extend(std::iter::repeat_n(at, c.len_utf8()));
    };
    let mut empty_run = 0;
    let mut pending_break: Option<usize> = None;
    for (n, (line, escaped)) in lines.iter().enumerate() {
        let mut items: &[Unit] = line;
        if n > 0 {
            let lead = items.iter().take_while(|u| matches!(u, Unit::Char { ws: true, .. })).count();
            items = &items[lead..];
        }
        if n + 1 < count {
            let trail = items.iter().rev().take_while(|u| matches!(u, Unit::Char { ws: true, .. })).count();
            // trailing white space before an escaped break is content
            if !lines[n + 1].1 {
                items = &items[..items.len() - trail];
            }
        }
        if n > 0 {
            let blank = items.is_empty() && n + 1 < count;
            if blank && !escaped {
                empty_run += 1;
                continue;
            }
            if !escaped {
                match empty_run {
                    0 => push(' ', pending_break.unwrap_or(0), &mut text, &mut map),
                    k => {
                        for _ in 0..k {
                            push('\n', pending_break.unwrap_or(0), &mut text, &mut map);
                        }
                    }
                }
            }
            empty_run = 0;
        }
        for u in items {
            if let Unit::Char { c, at, .. } = *u {
                push(c, at, &mut text, &mut map);
            }
        }
        pending_break = items.last().and_then(|u| match u {
            Unit::Char { end, .. } => Some(*end),
            _ => None,
        });
    }
    map.push(base + raw.len());
    (text, map)
}

/// Decodes a literal (`|`) or folded (`>`) block scalar covering `span` (its content lines,
/// from the first content character): the text and the map of each byte to the source.
fn block_map(source: &str, span: Range<usize>, style: ScalarStyle) -> Option<(String, Vec<usize>)> {
    // the header line (`|`, `>-`, `|2+` …) ends before the first content line
    let line_start = source[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let indent = span.start - line_start;
    let header_end = line_start.checked_sub(1)?;
    let header_start = source[..header_end].rfind(['|', '>'])?;
    let header = source[header_start + 1..header_end].split('#').next().unwrap_or("").trim();
    let chomp = if header.contains('-') {
        '-'
    } else if header.contains('+') {
        '+'
    } else {
        ' '
    };
    let mut text = String::new();
    let mut map = Vec::new();
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut at = line_start;
    for line in source[line_start..span.end].split_inclusive('\n') {
        let body = line.trim_end_matches('\n').trim_end_matches('\r');
        lines.push((at, body));
        at += line.len();
    }
    // trailing blank lines are chomped; content lines keep everything after the indentation
    let content_end = lines.iter().rposition(|(_, l)| l.len() > indent && !l[indent..].trim().is_empty())?;
    let mut previous_folds = false;
    let mut previous_end: Option<usize> = None;
    let mut blank_run: Vec<usize> = Vec::new();
    for (n, (start, body)) in lines.iter().enumerate().take(content_end + 1) {
        let content = body.get(indent..).unwrap_or("");
        let blank = content.trim().is_empty() && body.len() <= indent + content.len();
        if blank && n > 0 && content.is_empty() {
            blank_run.push(start + body.len());
            continue;
        }
        let more_indented = content.starts_with([' ', '\t']);
        if n > 0 {
            // the break is the end of the previous content line
            let break_at = previous_end.unwrap_or(*start);
            if style == ScalarStyle::Folded && previous_folds && !more_indented && blank_run.is_empty() {
                text.push(' ');
                map.push(break_at);
            } else {
                let folded_first = style == ScalarStyle::Folded && previous_folds && !more_indented;
                if !folded_first {
                    text.push('\n');
                    map.push(break_at);
                }
                for &b in &blank_run {
                    text.push('\n');
                    map.push(b);
                }
            }
            blank_run.clear();
        }
        for (i, c) in content.char_indices() {
            text.push(c);
            map.extend(std::iter::repeat_n(start + indent + i, c.len_utf8()));
        }
        previous_folds = !more_indented;
        previous_end = Some(start + body.len());
    }
    let last_end = lines.get(content_end).map_or(span.end, |(s, b)| s + b.len());
    match chomp {
        '-' => {}
        '+' => {
            text.push('\n');
            map.push(last_end);
            for (start, body) in &lines[content_end + 1..] {
                text.push('\n');
                map.push(start + body.len());
            }
        }
        _ => {
            text.push('\n');
            map.push(last_end);
        }
    }
    map.push(span.end);
    Some((text, map))
}

// ---------------------------------------------------------------------------------------------
// serde: deserializing a node, with the position of every error

/// An error while deserializing a node: what, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct DeError {
    /// what went wrong
    pub kind: DeErrorKind,
    /// the bytes of the value (or key) it is about
    pub span: Option<Range<usize>>,
    /// the key path from the top down to that value (a key error's path ends with the key)
    pub path: Vec<Step>,
    /// the same path as entry indices (the `n`-th entry of a mapping, item of a list)
    pub indices: Vec<usize>,
    /// whether the error is about a key rather than a value
    pub in_key: bool,
}

/// What went wrong while deserializing.
#[derive(Clone, Debug, PartialEq)]
pub enum DeErrorKind {
    /// a key the mapping does not have
    UnknownField {
        /// the key
        field: String,
        /// the keys it may have
        expected: &'static [&'static str],
    },
    /// a value that is not one of the names allowed
    UnknownVariant {
        /// the value
        variant: String,
        /// the names allowed
        expected: &'static [&'static str],
    },
    /// a value of the wrong type, or out of range
    Invalid {
        /// what was found (`string "abc"`, ``integer `70000` ``)
        found: String,
        /// what was expected (`u16`, `a boolean`)
        expected: String,
    },
    /// anything else (the messages of the code's own checks)
    Custom(String),
}

impl DeError {
    fn new(kind: DeErrorKind) -> DeError {
        DeError { kind, span: None, path: Vec::new(), indices: Vec::new(), in_key: false }
    }

    fn at(mut self, span: &Range<usize>) -> DeError {
        if self.span.is_none() {
            self.span = Some(span.clone());
        }
        self
    }

    fn within(mut self, step: Step, index: usize, span: &Range<usize>, in_key: bool) -> DeError {
        if self.path.is_empty() {
            self.in_key = in_key;
        }
        self.path.insert(0, step);
        self.indices.insert(0, index);
        self.at(span)
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = path_text(&self.path);
        match &self.kind {
            DeErrorKind::UnknownField { field, .. } => write!(f, "{path}: unknown key `{field}`"),
            DeErrorKind::UnknownVariant { variant, .. } => write!(f, "{path}: unknown value `{variant}`"),
            DeErrorKind::Invalid { found, expected } => write!(f, "{path}: {found}, expected {expected}"),
            DeErrorKind::Custom(m) => write!(f, "{path}: {m}"),
        }
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::new(DeErrorKind::Custom(msg.to_string()))
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        DeError::new(DeErrorKind::Invalid { found: unexp.to_string(), expected: exp.to_string() })
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        DeError::new(DeErrorKind::Invalid { found: unexp.to_string(), expected: exp.to_string() })
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(DeErrorKind::UnknownVariant { variant: variant.to_string(), expected })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        DeError::new(DeErrorKind::UnknownField { field: field.to_string(), expected })
    }
}

/// A node as a serde `Deserializer`: scalars resolve as [`Scalar::value`] says (any scalar is
/// accepted where text is expected); every error carries the position and path of its value.
pub struct NodeDe<'a, 's>(pub &'a Node<'s>);

impl<'a, 's> NodeDe<'a, 's> {
    fn unexpected(&self) -> de::Unexpected<'a> {
        match &self.0.kind {
            Kind::Scalar(s) => match s.value() {
                Value::Null => de::Unexpected::Unit,
                Value::Bool(b) => de::Unexpected::Bool(b),
                Value::Int(i) => de::Unexpected::Signed(i),
                Value::UInt(u) => de::Unexpected::Unsigned(u),
                Value::Float(f) => de::Unexpected::Float(f),
                Value::Str(_) => de::Unexpected::Str(&s.text),
            },
            Kind::Seq(_) => de::Unexpected::Seq,
            Kind::Map(_) => de::Unexpected::Map,
        }
    }
}

impl<'de> Deserializer<'de> for NodeDe<'_, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let node = self.0;
        let result = match &node.kind {
            Kind::Scalar(s) => match s.value() {
                Value::Null => visitor.visit_unit(),
                Value::Bool(b) => visitor.visit_bool(b),
                Value::Int(i) if i >= 0 => visitor.visit_u64(i as u64),
                Value::Int(i) => visitor.visit_i64(i),
                Value::UInt(u) => visitor.visit_u64(u),
                Value::Float(f) => visitor.visit_f64(f),
                Value::Str(t) => visitor.visit_str(t),
            },
            Kind::Seq(items) => visitor.visit_seq(Items { items, next: 0 }),
            Kind::Map(entries) => visitor.visit_map(Entries { entries, next: 0 }),
        };
        result.map_err(|e| e.at(&node.span))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let span = self.0.span.clone();
        if self.0.is_null() { visitor.visit_none() } else { visitor.visit_some(self) }.map_err(|e| e.at(&span))
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.0.kind {
            Kind::Scalar(s) if !self.0.is_null() => visitor.visit_str(&s.text).map_err(|e: DeError| e.at(&self.0.span)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.0.kind {
            Kind::Scalar(s) if !self.0.is_null() => {
                let text: &str = &s.text;
                visitor.visit_enum(text.into_deserializer()).map_err(|e: DeError| e.at(&self.0.span))
            }
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)).map_err(|e: DeError| e.at(&self.0.span)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, DeError> {
        let span = self.0.span.clone();
        visitor.visit_newtype_struct(self).map_err(|e| e.at(&span))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit unit_struct seq
        tuple tuple_struct map struct ignored_any
    }
}

struct Items<'a, 's> {
    items: &'a [Node<'s>],
    next: usize,
}

impl<'de> SeqAccess<'de> for Items<'_, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        let Some(item) = self.items.get(self.next) else { return Ok(None) };
        let i = self.next;
        self.next += 1;
        seed.deserialize(NodeDe(item)).map(Some).map_err(|e| e.within(Step::Index(i), i, &item.span, false))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len() - self.next)
    }
}

struct Entries<'a, 's> {
    entries: &'a [(Node<'s>, Node<'s>)],
    next: usize,
}

impl Entries<'_, '_> {
    fn step(&self, i: usize) -> Step {
        Step::Key(self.entries[i].0.key_text().unwrap_or("?").to_string())
    }
}

impl<'de> MapAccess<'de> for Entries<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        let Some((key, _)) = self.entries.get(self.next) else { return Ok(None) };
        let i = self.next;
        seed.deserialize(NodeDe(key)).map(Some).map_err(|e| e.within(self.step(i), i, &key.span, true))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let i = self.next;
        self.next += 1;
        let (_, value) = &self.entries[i];
        seed.deserialize(NodeDe(value)).map_err(|e| e.within(self.step(i), i, &value.span, false))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len() - self.next)
    }
}

/// Removes the entry (of a mapping) or item (of a list) at `indices` from `root`; `false` when
/// there is none (an empty path: the root itself).
pub fn remove_at(root: &mut Node<'_>, indices: &[usize]) -> bool {
    let Some((&last, parents)) = indices.split_last() else { return false };
    let mut node = root;
    for &i in parents {
        node = match &mut node.kind {
            Kind::Seq(items) => match items.get_mut(i) {
                Some(n) => n,
                None => return false,
            },
            Kind::Map(entries) => match entries.get_mut(i) {
                Some((_, v)) => v,
                None => return false,
            },
            Kind::Scalar(_) => return false,
        };
    }
    match &mut node.kind {
        Kind::Seq(items) if last < items.len() => {
            items.remove(last);
            true
        }
        Kind::Map(entries) if last < entries.len() => {
            entries.remove(last);
            true
        }
        _ => false,
    }
}

/// The node at `indices` (entries of mappings, items of lists) below `root`.
pub fn node_at<'a, 's>(root: &'a Node<'s>, indices: &[usize]) -> Option<&'a Node<'s>> {
    let mut node = root;
    for &i in indices {
        node = match &node.kind {
            Kind::Seq(items) => items.get(i)?,
            Kind::Map(entries) => &entries.get(i)?.1,
            Kind::Scalar(_) => return None,
        };
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTIONS: Options = Options { max_depth: 32, depth_hint: "too deep", what: "a test file" };

    fn root(text: &str) -> Node<'_> {
        parse(text, &OPTIONS).unwrap().root.unwrap()
    }

    #[test]
    fn plain_scalars_resolve_by_the_core_schema() {
        let cases: &[(&str, Value<'_>)] = &[
            ("~", Value::Null),
            ("null", Value::Null),
            ("True", Value::Bool(true)),
            ("12", Value::Int(12)),
            ("-12", Value::Int(-12)),
            ("+7", Value::Int(7)),
            ("0x1f", Value::Int(31)),
            ("0o17", Value::Int(15)),
            ("18446744073709551615", Value::UInt(u64::MAX)),
            ("1.5", Value::Float(1.5)),
            ("1e3", Value::Float(1000.0)),
            (".5", Value::Float(0.5)),
            ("-.inf", Value::Float(f64::NEG_INFINITY)),
            ("0.0.0.0", Value::Str("0.0.0.0")),
            ("1_000", Value::Str("1_000")),
            ("inf", Value::Str("inf")),
            ("yes", Value::Str("yes")),
            ("1e", Value::Str("1e")),
            (".", Value::Str(".")),
        ];
        for (text, want) in cases {
            assert_eq!(resolve_plain(text), *want, "{text}");
        }
        assert!(matches!(resolve_plain(".nan"), Value::Float(f) if f.is_nan()));
    }

    #[test]
    fn quoted_and_tagged_scalars_are_strings() {
        let r = root("a: '12'\nb: !!str 12\nc: \"true\"\nd: |\n  1\ne: !!int 8080\nf: !!float '1'\n");
        assert_eq!(r.get("e").unwrap().value(), Some(Value::Int(8080)));
        assert_eq!(r.get("f").unwrap().value(), Some(Value::Float(1.0)));
        assert!(parse("a: !!int x\n", &OPTIONS).unwrap_err().message.contains("not of that type"));
        for k in ["a", "b", "c"] {
            assert!(matches!(r.get(k).unwrap().value(), Some(Value::Str(_))), "{k}");
        }
        assert_eq!(r.get("d").unwrap().value(), Some(Value::Str("1\n")));
        let e = parse("a: !foo 1\n", &OPTIONS).unwrap_err();
        assert_eq!(e.at, 3);
        assert!(e.message.contains("`!foo`"), "{}", e.message);
    }

    #[test]
    fn spans_cover_what_is_written() {
        let text = "server:\n  port: \"80\"\n  list: [1, 2]\n";
        let r = root(text);
        let port = r.get("server").unwrap().get("port").unwrap();
        assert_eq!(&text[port.span.clone()], "\"80\"");
        let list = r.get("server").unwrap().get("list").unwrap();
        assert_eq!(&text[list.span.clone()], "[1, 2]");
        let (k, _) = r.get("server").unwrap().entry("list").unwrap();
        assert_eq!(&text[k.span.clone()], "list");
    }

    #[test]
    fn guards_stop_the_reading() {
        let deep = format!("a: {}", "[".repeat(200_000));
        let e = parse(&deep, &OPTIONS).unwrap_err();
        assert_eq!(e.at, 3 + 32, "{e:?}");
        assert!(e.message.contains("nested more than 32 levels"), "{}", e.message);
        let bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                    g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
        let e = parse(bomb, &OPTIONS).unwrap_err();
        assert!(e.message.contains("anchors and aliases"), "{}", e.message);
        let e = parse("a: 1\n---\nb: 2\n", &OPTIONS).unwrap_err();
        assert!(has_top_level_key("x: {rules: 1}\nrules:\n  - a\n", "rules"));
        assert!(has_top_level_key("a: [1, {b: 2}]\nrules: [\n", "rules"), "a key before a syntax error");
        assert!(!has_top_level_key("x: {rules: 1}\ny: rules\n", "rules"));
        assert!(!has_top_level_key("- rules\n", "rules"));
        assert_eq!(e.at, 5);
        // aliases within the budget are copies
        let r = root("base: &b {x: 1}\nuse: *b\n");
        assert_eq!(r.get("use").unwrap().to_json().unwrap(), serde_json::json!({"x": 1}));
    }

    #[test]
    fn duplicate_keys_are_problems_with_their_mapping() {
        let text = "a: 1\nserver:\n  port: 1\n  port: 2\na: 3\n";
        let doc = parse(text, &OPTIONS).unwrap();
        let messages: Vec<(usize, &str)> = doc.problems.iter().map(|p| (p.at, p.message.as_str())).collect();
        assert_eq!(
            messages,
            vec![
                (text.find("port: 2").unwrap(), "`port` is given twice in `server`; keep one"),
                (text.rfind("a: 3").unwrap(), "`a` is given twice at the top level; keep one"),
            ]
        );
        // the first one is kept
        assert_eq!(doc.root.unwrap().get("a").unwrap().value(), Some(Value::Int(1)));
    }

    #[test]
    fn syntax_errors_say_where() {
        let e = parse("server:\n  port: 1\n bad: 2\n", &OPTIONS).unwrap_err();
        assert_eq!(e.at, 19);
        assert!(e.message.starts_with("this is not valid YAML: "), "{}", e.message);
    }

    /// The map of `text`'s value of `key` must lead each decoded character back to the source
    /// character it was read from (or an escape standing for it).
    fn check_map(text: &str, want: &str) {
        let r = root(text);
        let node = r.get("w").unwrap();
        let decoded = &node.scalar().unwrap().text;
        assert_eq!(decoded, want, "{text:?}");
        let map = scalar_map(text, node).unwrap_or_else(|| panic!("no map for {text:?}"));
        assert_eq!(map.len(), decoded.len() + 1);
        for (i, c) in decoded.char_indices() {
            let at = map[i];
            let src = text[at..].chars().next().unwrap();
            let ok = src == c
                || (c == ' ' && matches!(src, '\n' | '\r'))
                || (c == '\n' && matches!(src, '\n' | '\r'))
                || src == '\\'
                || (c == '\'' && src == '\'');
            assert!(ok, "{text:?}: decoded {c:?} at {i} maps to {src:?} at {at}");
        }
    }

    #[test]
    fn scalar_maps_follow_quotes_escapes_folding_and_blocks() {
        check_map("w: a == \"b\"\n", "a == \"b\"");
        check_map("w: a == 1 &&\n  b == 2\n", "a == 1 && b == 2");
        check_map("w: 'it''s ok' \n", "it's ok");
        check_map("w: 'one\n\n  two'\n", "one\ntwo");
        check_map("w: \"x \\\"y\\\" \\u00e9 z\"\n", "x \"y\" é z");
        check_map("w: \"a \\\n   b\"\n", "a b");
        check_map("w: \"a\\\n   b\"\n", "ab");
        check_map("w: \"é\\tz\"\r\n", "é\tz");
        check_map("w: |\n  a &&\n    b\n", "a &&\n  b\n");
        check_map("w: |-\n  a\n\n  b\n\n", "a\n\nb");
        check_map("w: >\n  a &&\n  b\n\n  c\n", "a && b\nc\n");
        check_map("w: >-\n  a\n   b\n  c\n", "a\n b\nc");
        check_map("w: |+\n  a\n\nx: 1\n", "a\n\n");
        check_map("w: >\r\n  a\r\n  b\r\n", "a b\n");
        // a plain scalar maps one to one
        let text = "w: headers[\"user-agent\"] contains 'x'\n";
        let r = root(text);
        let map = scalar_map(text, r.get("w").unwrap()).unwrap();
        assert_eq!(map[0], 3);
        assert_eq!(*map.last().unwrap(), text.len() - 1);
    }

    #[test]
    fn nodes_deserialize_with_the_place_of_each_error() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct S {
            port: u16,
            name: Option<String>,
        }
        let text = "port: 1\nnmae: x\n";
        let r = root(text);
        let e = <S as serde::Deserialize>::deserialize(NodeDe(&r)).unwrap_err();
        assert!(matches!(e.kind, DeErrorKind::UnknownField { ref field, .. } if field == "nmae"), "{e:?}");
        assert_eq!((e.span, e.indices.clone(), e.in_key), (Some(8..12), vec![1], true));
        let text = "port: 70000\n";
        let e = <S as serde::Deserialize>::deserialize(NodeDe(&root(text))).unwrap_err();
        assert_eq!(e.span, Some(6..11));
        assert_eq!(path_text(&e.path), "port");
        assert!(matches!(e.kind, DeErrorKind::Invalid { ref expected, .. } if expected == "u16"), "{e:?}");
        let mut r = root("port: 1\nnmae: x\n");
        assert!(remove_at(&mut r, &[1]));
        let s = <S as serde::Deserialize>::deserialize(NodeDe(&r)).unwrap();
        assert_eq!(s.port, 1);
    }
}
