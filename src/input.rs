//! Request bodies → values: simd-json parsing into a reused tape, with the
//! nesting limit and BOM tolerance of SPEC §10–§11.

use std::cell::RefCell;
use std::fmt;

use simd_json::{Buffers, Tape};

use crate::expr::Value;

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
}

impl InputError {
    /// The API error code (SPEC §6).
    pub fn code(&self) -> &'static str {
        match self {
            InputError::InvalidJson { .. } => "invalid_json",
            InputError::NotAnObject { .. } => "not_an_object",
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::InvalidJson { offset, message } => write!(f, "invalid JSON at byte {offset}: {message}"),
            InputError::NotAnObject { got } => write!(f, "the input must be a JSON object, got {got}"),
        }
    }
}

impl std::error::Error for InputError {}

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
