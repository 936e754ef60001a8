//! Request bodies → values: simd-json parsing into a reused tape, with the
//! nesting limit and BOM tolerance of SPEC §10–§11, and the request-time
//! schema check of SPEC §3.

use std::cell::RefCell;
use std::fmt;

use simd_json::{Buffers, Tape};

use crate::expr::check::with_article;
use crate::expr::compile::Program;
use crate::expr::eval::SlotValue;
use crate::expr::ir::PathSeg;
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
    /// The API error code (SPEC §6).
    pub fn code(&self) -> &'static str {
        match self {
            InputError::InvalidJson { .. } => "invalid_json",
            InputError::NotAnObject { .. } => "not_an_object",
            InputError::SchemaMismatch { .. } => "schema_mismatch",
        }
    }

    /// The HTTP status that answers it (SPEC §6): 400 for a body that is not a
    /// JSON object, 422 for an object the table's schema rejects.
    pub fn status(&self) -> u16 {
        match self {
            InputError::InvalidJson { .. } | InputError::NotAnObject { .. } => 400,
            InputError::SchemaMismatch { .. } => 422,
        }
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
                    let path = self.segments[..i].join(".");
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
        Err(e) => Err(InputError::InvalidJson { offset: e.index() + skipped, message: describe(&e) }),
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

fn describe(e: &simd_json::Error) -> String {
    use simd_json::ErrorType as E;
    match e.error() {
        E::Eof => "the body ends too early".into(),
        E::TrailingData => "unexpected data after the JSON value".into(),
        E::InvalidNumber | E::InvalidExponent | E::Overflow => "invalid number".into(),
        E::InvalidEscape | E::InvalidUnicodeEscape | E::InvalidUnicodeCodepoint => "invalid escape in a string".into(),
        E::InvalidUtf8 => "the body is not valid UTF-8".into(),
        E::UnterminatedString => "a string is not closed".into(),
        E::ExpectedObjectColon => "expected `:` after an object key".into(),
        E::ExpectedObjectKey | E::KeyMustBeAString => "expected a string key".into(),
        E::ExpectedArrayComma | E::ExpectedMapComma => "expected `,` or a closing bracket".into(),
        E::DepthLimitExceeded => "nested too deeply".into(),
        E::NoStructure => "the body is empty".into(),
        E::Syntax | E::UnexpectedCharacter | E::InternalError => "invalid JSON syntax".into(),
        other => format!("not valid JSON ({other:?})"),
    }
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
