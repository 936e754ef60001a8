//! Request bodies → values: simd-json parsing into a reused tape, with the
//! nesting limit and BOM tolerance of SPEC §10–§11, the request-time schema
//! check of SPEC §3, and parse errors in plain words.

pub mod batch;
pub(crate) mod scan;

use std::cell::RefCell;
use std::fmt;

use simd_json::{Buffers, Tape};

use crate::expr::check::with_article;
use crate::expr::ir::PathSeg;
use crate::expr::program::{Program, SlotValue};
use crate::expr::{Schema, SchemaType, Type, Value};

/// Deepest accepted nesting; the top-level object is level 1.
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// Why a body could not be read as a decision input.
#[derive(Clone, Debug, PartialEq)]
pub enum InputError {
    /// Not valid JSON (or nested too deeply); `offset` is the byte where it went wrong.
    InvalidJson {
        /// byte offset of the problem
        offset: usize,
        /// what went wrong
        message: String,
    },
    /// Valid JSON, but not an object.
    NotAnObject {
        /// the type that was sent
        got: &'static str,
    },
    /// A field the table's schema declares is present, not null, and of another type.
    SchemaMismatch {
        /// the dotted path of the field (`headers.user-agent`)
        path: String,
        /// the declared type (`number`; `object` for a field that a declared path runs through)
        declared: &'static str,
        /// the type sent: `string`, `number`, `boolean`, `array`, `object`, or `float`
        /// for a number that is not an integer where one is declared
        actual: &'static str,
    },
}

impl InputError {
    /// serde_json's syntax error in `body` as `invalid_json`, with the byte offset of its line
    /// and column and its message without them (the offset says where).
    pub fn from_serde_syntax(body: &[u8], e: &serde_json::Error) -> InputError {
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_string();
        InputError::InvalidJson { offset: byte_offset(body, e.line(), e.column()), message }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::InvalidJson { offset, message } => write!(f, "invalid JSON at byte {offset}: {message}"),
            InputError::NotAnObject { got } => write!(f, "the input must be a JSON object, got {got}"),
            InputError::SchemaMismatch { path, declared, actual } => {
                write!(f, "field \"{path}\" must be {} (schema), got {}", with_article(declared), with_article(actual))
            }
        }
    }
}

impl std::error::Error for InputError {}

/// The request-time schema check (SPEC §3): a table with a `schema` fails
/// closed, answering `schema_mismatch` instead of deciding on an input whose
/// declared field is present, not null, and of another type.
///
/// Every declared path has a slot in the table's [`Program`], so the one pass
/// that fills slots reads declared fields too: the check is then one type test
/// per declared field. A table without a schema has nothing to check.
#[derive(Debug, Default)]
pub struct SchemaCheck {
    /// sorted by path, so that the first mismatch reported does not depend on hashing
    fields: Vec<DeclaredField>,
}

#[derive(Debug)]
struct DeclaredField {
    path: Box<str>,
    segments: Box<[Box<str>]>,
    declared: SchemaType,
    slot: u32,
}

impl SchemaCheck {
    /// The check of `schema`, adding to `program` a slot for each declared path.
    pub fn new(schema: &Schema, program: &mut Program) -> SchemaCheck {
        let mut paths: Vec<(&String, &SchemaType)> = schema.fields.iter().collect();
        paths.sort_by_key(|(path, _)| *path);
        let mut fields = Vec::new();
        for (path, &declared) in paths {
            // A top-level `any` admits everything; a dotted one still needs objects on its way.
            if declared == SchemaType::Any && !path.contains('.') {
                continue;
            }
            let segments: Box<[Box<str>]> = path.split('.').map(Box::from).collect();
            let slot_path: Vec<PathSeg> = segments.iter().map(|s| PathSeg::Key(s.clone())).collect();
            let slot = program.slot_for(&slot_path);
            fields.push(DeclaredField { path: path.as_str().into(), segments, declared, slot });
        }
        SchemaCheck { fields }
    }

    /// Checks the declared fields in `slots` (filled from `root` by the program
    /// given to [`SchemaCheck::new`]).
    #[inline]
    pub fn check(&self, slots: &[SlotValue<'_>], root: &Value<'_>) -> Result<(), InputError> {
        for f in &self.fields {
            match slots.get(f.slot as usize) {
                Some(Ok(v)) if f.declared.admits(v) => {}
                // A wrong type, or a path that runs through a non-object: the walk names which.
                _ => f.walk(root)?,
            }
        }
        Ok(())
    }

    /// Whether every declared field in `slots` has its declared type (the check without the
    /// message: a body that fails it gets its error from [`SchemaCheck::check`]).
    #[inline]
    pub fn passes(&self, slots: &[SlotValue<'_>]) -> bool {
        self.fields.iter().all(|f| matches!(slots.get(f.slot as usize), Some(Ok(v)) if f.declared.admits(v)))
    }

    /// The same check without slots: each declared path walked from the root
    /// (the reference the property tests hold [`SchemaCheck::check`] to).
    pub fn check_reference(&self, root: &Value<'_>) -> Result<(), InputError> {
        self.fields.iter().try_for_each(|f| f.walk(root))
    }
}

impl DeclaredField {
    fn walk(&self, root: &Value<'_>) -> Result<(), InputError> {
        let mut v = *root;
        for (i, seg) in self.segments.iter().enumerate() {
            v = match v {
                Value::Object(o) => o.get(seg).unwrap_or(Value::Nil),
                Value::Nil => return Ok(()),
                // `a.b` is declared, so `a` must be an object when present.
                other => {
                    let path = self.segments.get(..i).unwrap_or_default().join(".");
                    return Err(mismatch(path, SchemaType::Object, &other));
                }
            };
        }
        if self.declared.admits(&v) {
            Ok(())
        } else {
            Err(mismatch(self.path.to_string(), self.declared, &v))
        }
    }
}

fn mismatch(path: String, declared: SchemaType, v: &Value<'_>) -> InputError {
    let actual = match v.type_of() {
        Type::Nil => "null",
        Type::Bool => "boolean",
        Type::Float if declared == SchemaType::Integer => "float",
        Type::Int | Type::Float => "number",
        Type::Str => "string",
        Type::Array => "array",
        Type::Object => "object",
    };
    InputError::SchemaMismatch { path, declared: declared.name(), actual }
}

/// Per-thread buffers, reused so that a decision allocates nothing to parse.
struct Scratch {
    input: Vec<u8>,
    buffers: Buffers,
    tape: Option<Tape<'static>>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { input: Vec::new(), buffers: Buffers::new(4096), tape: Some(Tape::null().reset()) }
    }
}

/// The byte offset of serde_json's 1-based line and column in `body`.
fn byte_offset(body: &[u8], line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in body.split_inclusive(|&b| b == b'\n').enumerate() {
        if i + 1 == line {
            return offset + column.saturating_sub(1).min(l.len());
        }
        offset += l.len();
    }
    body.len()
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

/// Parses `bytes` and calls `f` with the top-level value, which must be an object.
pub fn with_parsed<R>(bytes: &[u8], max_depth: usize, f: impl FnOnce(Value<'_>) -> R) -> Result<R, InputError> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => parse_into(&mut scratch, bytes, max_depth, f),
        // Re-entered from inside `f`: use fresh buffers.
        Err(_) => parse_into(&mut Scratch::new(), bytes, max_depth, f),
    })
}

fn parse_into<R>(
    scratch: &mut Scratch,
    bytes: &[u8],
    max_depth: usize,
    f: impl FnOnce(Value<'_>) -> R,
) -> Result<R, InputError> {
    let (bytes, skipped) = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => (rest, 3),
        None => (bytes, 0),
    };
    let Scratch { input, buffers, tape } = scratch;
    input.clear();
    input.extend_from_slice(bytes);
    input.resize(bytes.len() + simd_json::INPUT_PADDING, 0);
    let mut local = tape.take().unwrap_or_else(|| Tape::null().reset()).reset();
    let parsed = simd_json::fill_tape_padded(input, bytes.len(), buffers, &mut local);
    let result = match parsed {
        Err(e) => {
            let (offset, message) = describe(&e, bytes, max_depth);
            Err(InputError::InvalidJson { offset: offset + skipped, message })
        }
        Ok(()) => match depth_of(&local) {
            d if d > max_depth => Err(InputError::InvalidJson {
                offset: skipped,
                message: format!("nested {d} levels deep; at most {max_depth} are accepted"),
            }),
            _ => {
                let root = Value::from_tape(&local.0);
                match root {
                    Value::Object(_) => Ok(f(root)),
                    other => Err(InputError::NotAnObject { got: other.type_of().name() }),
                }
            }
        },
    };
    *tape = Some(local.reset());
    result
}

/// Where and why simd-json rejected `bytes`, in plain words. Errors found
/// while indexing the body (strings, UTF-8) come without a position; they are
/// located here by a second look at the body, which only failed requests pay.
fn describe(e: &simd_json::Error, bytes: &[u8], max_depth: usize) -> (usize, String) {
    use simd_json::ErrorType as E;
    let at = e.index().min(bytes.len());
    let found = || found_at(bytes, at);
    match e.error() {
        E::Eof if bytes.iter().all(u8::is_ascii_whitespace) => (0, "the body is empty".into()),
        E::Eof => (bytes.len(), "the body ends too early".into()),
        // Stage 2 ran out of input inside a container.
        E::Syntax if e.character().is_some() => ends_too_early(bytes),
        // Stage 1: an unterminated string, or a raw control character in one.
        E::Syntax | E::InvalidEscape | E::InvalidUnicodeEscape | E::InvalidUnicodeCodepoint => {
            string_problem(bytes).unwrap_or((at, "invalid escape in a string".into()))
        }
        E::InvalidUtf8 => match std::str::from_utf8(bytes) {
            Err(u) => {
                let byte = bytes.get(u.valid_up_to()).copied().unwrap_or(0);
                (u.valid_up_to(), format!("the body is not valid UTF-8 (byte 0x{byte:02x})"))
            }
            Ok(_) => string_problem(bytes).unwrap_or((at, "invalid escape in a string".into())),
        },
        E::InvalidNumber | E::InvalidExponent => {
            let (start, token) = number_at(bytes, at);
            (start, format!("invalid number `{token}`"))
        }
        E::Overflow => {
            let (start, token) = number_at(bytes, at);
            (start, format!("the number `{token}` is out of range"))
        }
        E::ExpectedTrue => (at, format!("expected `true`, found `{}`", word_at(bytes, at))),
        E::ExpectedFalse => (at, format!("expected `false`, found `{}`", word_at(bytes, at))),
        E::ExpectedNull => (at, format!("expected `null`, found `{}`", word_at(bytes, at))),
        E::ExpectedObjectColon => (at, format!("expected `:` after an object key, found {}", found())),
        E::ExpectedObjectKey => match trailing_comma(bytes, at) {
            Some(problem) => problem,
            None => (at, format!("expected a key in double quotes after `,`, found {}", found())),
        },
        E::ExpectedObjectContent => match previous(bytes, at) {
            Some((_, b'{')) => (at, format!("expected a key in double quotes or `}}`, found {}", found())),
            _ => (at, format!("expected `,` or `}}` after an object member, found {}", found())),
        },
        E::ExpectedArrayContent => (at, format!("expected `,` or `]` after an array element, found {}", found())),
        // A byte that cannot start a value, or more after the top-level value.
        E::InternalError => match previous(bytes, at) {
            None => (at, format!("expected a JSON object, found {}", found())),
            Some((_, b':' | b'[')) => (at, format!("expected a value, found {}", found())),
            Some((_, b',')) => trailing_comma(bytes, at)
                .unwrap_or_else(|| (at, format!("expected a value after `,`, found {}", found()))),
            Some(_) if matches!(bytes.get(at), Some(b'}' | b']')) && closes_top_level(bytes, at) => {
                let next = next_from(bytes, at + 1).unwrap_or(at + 1);
                (next, "unexpected data after the JSON object".into())
            }
            Some(_) => (at, format!("expected a value, found {}", found())),
        },
        // A string, number or literal at the top, with more after it.
        E::TrailingData => (at, format!("expected a JSON object, found {}", found())),
        E::DepthLimitExceeded => (at, format!("nested too deeply; at most {max_depth} levels are accepted")),
        E::InputTooLarge => (0, "the body is larger than 4 GiB".into()),
        // Not produced while filling a tape; no parser internals in the message.
        _ => (at, "not valid JSON".into()),
    }
}

/// The byte at `at` for a message: `` `x` ``, or "the end of the body".
fn found_at(bytes: &[u8], at: usize) -> String {
    let head = |rest: &[u8]| String::from_utf8_lossy(rest.get(..rest.len().min(4)).unwrap_or(rest)).chars().next();
    match bytes.get(at..).and_then(head) {
        Some(c) if c.is_control() => format!("`{}`", c.escape_debug()),
        Some(c) => format!("`{c}`"),
        None => "the end of the body".into(),
    }
}

/// The letters and digits from `at` (a misspelt `true`), at most 20.
fn word_at(bytes: &[u8], at: usize) -> String {
    let rest = bytes.get(at..).unwrap_or_default();
    let n = rest.iter().take(20).take_while(|b| b.is_ascii_alphanumeric()).count().max(1).min(rest.len());
    String::from_utf8_lossy(rest.get(..n).unwrap_or(rest)).into_owned()
}

/// The number token around `at` (simd-json reports the byte after some bad numbers).
fn number_at(bytes: &[u8], at: usize) -> (usize, String) {
    let is_num = |b: &u8| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E');
    let mut start = at.min(bytes.len());
    if !bytes.get(start).is_some_and(is_num) && start > 0 && bytes.get(start - 1).is_some_and(is_num) {
        start -= 1;
    }
    while start > 0 && bytes.get(start - 1).is_some_and(is_num) {
        start -= 1;
    }
    let rest = bytes.get(start..).unwrap_or_default();
    let len = rest.iter().take(40).take_while(|b| is_num(b)).count();
    (start, String::from_utf8_lossy(rest.get(..len).unwrap_or(rest)).into_owned())
}

/// The last non-whitespace byte before `at`, with its offset.
fn previous(bytes: &[u8], at: usize) -> Option<(usize, u8)> {
    let before = bytes.get(..at.min(bytes.len())).unwrap_or(bytes);
    before.iter().enumerate().rev().find(|(_, b)| !b.is_ascii_whitespace()).map(|(i, b)| (i, *b))
}

/// The first non-whitespace byte at or after `from`.
fn next_from(bytes: &[u8], from: usize) -> Option<usize> {
    bytes.get(from..)?.iter().position(|b| !b.is_ascii_whitespace()).map(|i| from + i)
}

/// `,` right before a closing bracket at `at`: reported at the comma.
fn trailing_comma(bytes: &[u8], at: usize) -> Option<(usize, String)> {
    let close = *bytes.get(at).filter(|b| matches!(b, b'}' | b']'))?;
    match previous(bytes, at) {
        Some((comma, b',')) => Some((comma, format!("trailing comma before `{}`", close as char))),
        _ => None,
    }
}

/// Calls `f(offset, byte)` for every byte outside strings, until it returns false.
fn outside_strings(bytes: &[u8], mut f: impl FnMut(usize, u8) -> bool) {
    let (mut in_string, mut escaped) = (false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if !f(i, b) {
            return;
        }
    }
}

/// Whether the bracket at `at` closes the top-level value.
fn closes_top_level(bytes: &[u8], at: usize) -> bool {
    let mut depth = 0i64;
    let mut closes = false;
    outside_strings(bytes, |i, b| {
        match b {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            _ => {}
        }
        if i == at {
            closes = depth == 0;
            return false;
        }
        true
    });
    closes
}

/// The body stopped inside a container: name the innermost one left open.
fn ends_too_early(bytes: &[u8]) -> (usize, String) {
    if let Some(problem) = string_problem(bytes) {
        return problem;
    }
    let mut open = Vec::new();
    outside_strings(bytes, |i, b| {
        match b {
            b'{' | b'[' => open.push((i, b)),
            b'}' | b']' => {
                open.pop();
            }
            _ => {}
        }
        true
    });
    let message = match open.last() {
        Some((i, b)) => format!("the body ends too early: the `{}` at byte {i} is not closed", *b as char),
        None => "the body ends too early".to_string(),
    };
    (bytes.len(), message)
}

/// The first string that is not closed or holds a raw control character or a bad escape.
fn string_problem(bytes: &[u8]) -> Option<(usize, String)> {
    let hex4 = |at: usize| -> Option<u32> {
        let digits = bytes.get(at..at + 4).filter(|d| d.iter().all(u8::is_ascii_hexdigit))?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    // Where the string being read starts.
    let mut start = None;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if start.is_none() {
            if b == b'"' {
                start = Some(i);
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => start = None,
            b'\\' => {
                match bytes.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {}
                    Some(b'u') => {
                        let Some(code) = hex4(i + 2) else {
                            return Some((i, "a `\\u` escape needs 4 hex digits".into()));
                        };
                        let pair = bytes.get(i + 6..i + 8) == Some(b"\\u")
                            && hex4(i + 8).is_some_and(|low| (0xDC00..0xE000).contains(&low));
                        if (0xD800..0xDC00).contains(&code) && pair {
                            i += 6;
                        } else if (0xD800..0xE000).contains(&code) {
                            return Some((
                                i,
                                format!("`\\u{code:04x}` is half of a UTF-16 surrogate pair without its other half"),
                            ));
                        }
                        i += 4;
                    }
                    Some(&c) if (0x20..0x7f).contains(&c) => {
                        return Some((
                            i,
                            format!("invalid escape `\\{}` in a string (write `\\\\` for a backslash)", c as char),
                        ));
                    }
                    _ => return Some((i, "invalid escape in a string".into())),
                }
                i += 1;
            }
            0..=0x1f => {
                return Some((
                    i,
                    format!("a control character (byte 0x{b:02x}) in a string must be escaped, e.g. as \\n or \\t"),
                ));
            }
            _ => {}
        }
        i += 1;
    }
    start.map(|s| (s, "a string is not closed".to_string()))
}

/// Maximum nesting of a tape, counting the top-level container as 1.
fn depth_of(tape: &Tape<'_>) -> usize {
    // Index of the last node inside each open container.
    let mut ends: Vec<usize> = Vec::new();
    let mut max = 0;
    for (j, node) in tape.0.iter().enumerate() {
        while ends.last().is_some_and(|&end| end < j) {
            ends.pop();
        }
        if let simd_json::Node::Array { count, .. } | simd_json::Node::Object { count, .. } = node {
            ends.push(j + count);
            max = max.max(ends.len());
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(body: &[u8]) -> (usize, String) {
        match with_parsed(body, DEFAULT_MAX_DEPTH, |_| ()) {
            Err(InputError::InvalidJson { offset, message }) => (offset, message),
            other => panic!("{:?} should be invalid JSON, got {other:?}", String::from_utf8_lossy(body)),
        }
    }

    /// Every kind of mistake gets plain words and the byte where it is; nothing
    /// of simd-json's error names (`ExpectedObjectContent`) reaches the message.
    #[test]
    fn parse_errors_say_what_and_where() {
        let cases: &[(&[u8], usize, &str)] = &[
            (b"", 0, "the body is empty"),
            (b" \r\n\t ", 0, "the body is empty"),
            (b"{", 1, "ends too early: the `{` at byte 0 is not closed"),
            (b"{\"a\": [1, 2", 11, "the `[` at byte 6 is not closed"),
            (b"{\"a\" 1}", 5, "expected `:` after an object key, found `1`"),
            (b"{1: 2}", 1, "expected a key in double quotes or `}`, found `1`"),
            (b"{\"a\": 1 \"b\": 2}", 8, "expected `,` or `}` after an object member"),
            (b"{\"a\": 1, b: 2}", 9, "expected a key in double quotes after `,`, found `b`"),
            (b"{\"a\": 1,}", 7, "trailing comma before `}`"),
            (b"{\"a\": [1,]}", 8, "trailing comma before `]`"),
            (b"{\"a\": [1 2]}", 9, "expected `,` or `]` after an array element, found `2`"),
            (b"{\"a\": }", 6, "expected a value, found `}`"),
            (b"{\"a\": tru}", 6, "expected `true`, found `tru`"),
            (b"{\"a\": nul}", 6, "expected `null`, found `nul`"),
            (b"{\"a\": 01}", 6, "invalid number `01`"),
            (b"{\"a\": 1e}", 6, "invalid number `1e`"),
            (b"{\"a\": -}", 6, "invalid number `-`"),
            (b"{\"a\": \"x}", 6, "a string is not closed"),
            (b"{\"a\": \"\\q\"}", 7, "invalid escape `\\q`"),
            (b"{\"a\": \"\\u12\"}", 7, "needs 4 hex digits"),
            (b"{\"a\": \"\\ud800\"}", 7, "surrogate pair"),
            (b"{\"a\": \"a\tb\"}", 8, "control character (byte 0x09)"),
            (b"{\"a\": \"\xff\"}", 7, "not valid UTF-8 (byte 0xff)"),
            (b"{\"a\": 1}x", 8, "unexpected data after the JSON object"),
            (b"{\"a\": 1}  }", 10, "unexpected data after the JSON object"),
            (b"x", 0, "expected a JSON object, found `x`"),
            (b"]", 0, "expected a JSON object, found `]`"),
            (b"1 2", 0, "expected a JSON object, found `1`"),
            (b"\xEF\xBB\xBF{\"a\": 1,}", 10, "trailing comma"),
        ];
        let mut wrong = Vec::new();
        for (body, offset, fragment) in cases {
            let (at, message) = error_of(body);
            let shown = String::from_utf8_lossy(body);
            if at != *offset || !message.contains(fragment) {
                wrong.push(format!("{shown:?}: got byte {at} `{message}`, want byte {offset} `{fragment}`"));
            }
            if message.contains("Expected") || message.contains("Error") || message.contains("Syntax") {
                wrong.push(format!("{shown:?}: parser internals in `{message}`"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn too_deep_for_the_parser_names_the_limit() {
        let body = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        let (_, message) = error_of(format!("{{\"a\": {body}}}").as_bytes());
        assert!(message.contains("at most 128"), "{message}");
    }
}
