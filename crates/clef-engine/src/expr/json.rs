//! Writing JSON text: values, strings and floats, the way every response, log line and
//! message of clef writes them. The one place that knows JSON's escapes.

use std::fmt::Write as _;

use super::value::Value;

/// Appends the compact JSON text of `v` to `out` (what `string(x)` gives for non-strings).
///
/// Iterative over arrays and objects: request data can be 128 levels deep
/// and this may run on a small coroutine stack.
pub fn write_value(v: &Value<'_>, out: &mut String) {
    write_value_bounded(v, out, usize::MAX);
}

/// [`write_value`] that stops once it has written more than `budget` bytes: the text then ends
/// somewhere inside the value (not valid JSON), and is at least `budget / 4` characters long.
/// For previews of values that may be large (an explanation shows a 4 KB message's first
/// characters), at a cost that does not grow with the value.
pub fn write_value_bounded(v: &Value<'_>, out: &mut String, budget: usize) {
    let start = out.len();
    enum Step<'a> {
        Value(Value<'a>),
        Key(&'a str),
        Text(&'static str),
    }
    let mut stack = vec![Step::Value(*v)];
    while let Some(step) = stack.pop() {
        let written = out.len() - start;
        if written > budget {
            return;
        }
        match step {
            Step::Text(t) => out.push_str(t),
            Step::Key(k) => {
                write_json_string(k, out);
                out.push(':');
            }
            Step::Value(v) => match v {
                Value::Nil => out.push_str("null"),
                Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
                Value::Int(i) => {
                    let _ = write!(out, "{i}");
                }
                Value::Float(f) => write_json_float(f, out),
                Value::Str(s) => {
                    let shown = prefix(s, budget - written);
                    if shown.len() == s.len() {
                        write_json_string(s, out);
                    } else {
                        // cut: no closing quote, the text goes on
                        out.push('"');
                        write_escaped(shown, out);
                        return;
                    }
                }
                Value::Array(a) => {
                    out.push('[');
                    stack.push(Step::Text("]"));
                    let items: Vec<Value<'_>> = a.iter().collect();
                    for (i, item) in items.into_iter().enumerate().rev() {
                        stack.push(Step::Value(item));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
                Value::Object(o) => {
                    out.push('{');
                    stack.push(Step::Text("}"));
                    let members: Vec<(&str, Value<'_>)> = o.iter().collect();
                    for (i, (k, item)) in members.into_iter().enumerate().rev() {
                        stack.push(Step::Value(item));
                        stack.push(Step::Key(k));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
            },
        }
    }
}

/// `s` when it has at most `max` bytes, else its shortest start of more than `max` bytes that
/// ends on a character boundary (so that a bounded writer is past its budget after it).
fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max + 1;
    while !s.is_char_boundary(end) {
        end += 1;
    }
    s.get(..end).unwrap_or(s)
}

/// Writes a float the way JSON writers do: `2.0`, `0.5`, `1e21`; non-finite as `null`.
pub fn write_json_float(f: f64, out: &mut String) {
    if f.is_finite() {
        match serde_json::Number::from_f64(f) {
            Some(n) => {
                let _ = write!(out, "{n}");
            }
            None => out.push_str("null"),
        }
    } else {
        out.push_str("null");
    }
}

/// Writes `s` as a JSON string literal with the escapes JSON requires.
pub fn write_json_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    write_escaped(s, out);
    out.push('"');
}

/// The inside of a JSON string literal: `s` with the escapes JSON requires.
pub fn write_escaped(s: &str, out: &mut String) {
    let bytes = s.as_bytes();
    let mut plain_from = 0;
    while let Some(at) = next_escaped(bytes, plain_from) {
        out.push_str(s.get(plain_from..at).unwrap_or_default());
        match bytes.get(at).copied().unwrap_or_default() {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        plain_from = at + 1;
    }
    out.push_str(s.get(plain_from..).unwrap_or_default());
}

/// Where the next byte from `from` on that a JSON string must escape is: a quote, a backslash
/// or a control character (every byte of a multi-byte character is 0x80 or above: none is).
/// Eight bytes at a time, without a call: an explanation escapes a quote in every `a["b"]` it
/// shows, some twenty per line, where a search's set-up would cost more than the bytes between.
fn next_escaped(bytes: &[u8], mut from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // a byte below n sets its high bit in (x - n) & !x; the lowest byte flagged is always one
    // (a borrow only carries upwards)
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * n as u64) & !x & HIGH;
    while let Some(word) = bytes.get(from..from + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
        let word = u64::from_le_bytes(word);
        let flagged =
            below(word, 0x20) | below(word ^ (ONES * b'"' as u64), 1) | below(word ^ (ONES * b'\\' as u64), 1);
        if flagged != 0 {
            return Some(from + flagged.trailing_zeros() as usize / 8);
        }
        from += 8;
    }
    let tail = bytes.get(from..)?;
    tail.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\').map(|at| from + at)
}

/// Writes `pairs` as a JSON object of strings (`{"a":"b",...}`).
pub fn write_string_map(pairs: &[(String, String)], out: &mut String) {
    out.push('{');
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_string(key, out);
        out.push(':');
        write_json_string(value, out);
    }
    out.push('}');
}

/// `s` as a JSON string literal, for messages (`invalid regex "a("`).
pub fn quote(s: &str) -> String {
    let mut out = String::new();
    write_json_string(s, &mut out);
    out
}

/// Converts a value to a `serde_json::Value` (int and float kept apart).
pub fn to_serde(v: &Value<'_>) -> serde_json::Value {
    serde_json::from_str(&v.to_json()).unwrap_or(serde_json::Value::Null)
}

// Written here, beside the writer, so that the value types need nothing of JSON text.
impl Value<'_> {
    /// Compact JSON text of this value (what `string(x)` returns for non-strings).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// Appends the compact JSON text of this value to `out`.
    pub fn write_json(&self, out: &mut String) {
        write_value(self, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn full(v: &Value<'_>) -> String {
        let mut s = String::new();
        write_value(v, &mut s);
        s
    }

    proptest! {
        /// What `write_json_string` and `write_string_map` write reads back as what they were
        /// given, for any text (controls, quotes, backslashes, any script).
        #[test]
        fn written_strings_read_back_as_themselves(key in "(?s).{0,40}", text in "(?s).{0,200}") {
            let mut one = String::new();
            write_json_string(&text, &mut one);
            prop_assert_eq!(serde_json::from_str::<String>(&one).ok(), Some(text.clone()));
            let mut map = String::new();
            write_string_map(&[(key.clone(), text.clone()), ("z".into(), key.clone())], &mut map);
            let read: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&map).map_err(|e| TestCaseError::fail(format!("{e}: {map}")))?;
            prop_assert_eq!(read.get(&key).and_then(|v| v.as_str()), Some(if key == "z" { key.as_str() } else { text.as_str() }));
        }

        /// The same for text dense in what must be escaped, on both sides of the eight-byte
        /// words the escaper skips by.
        #[test]
        fn escapes_read_back_in_and_between_words(text in "[\\x00-\\x1f\"\\\\a-z\u{e9}\u{1F389}]{0,60}") {
            let mut one = String::new();
            write_json_string(&text, &mut one);
            prop_assert_eq!(serde_json::from_str::<String>(&one).ok(), Some(text.clone()), "{}", one);
        }

        /// A bounded write is the start of the full text: all of it within the budget, else
        /// more than the budget's bytes and at least a quarter as many characters.
        #[test]
        fn a_bounded_write_is_a_prefix_of_the_full_text(text in "(?s).{0,300}", budget in 0usize..400) {
            let items = [Value::Int(1), Value::Str(&text), Value::Str(&text)];
            let values = [Value::Str(&text), Value::Array(crate::expr::value::Array::Values(&items))];
            for v in values {
                let whole = full(&v);
                let mut cut = String::from("x");
                write_value_bounded(&v, &mut cut, budget);
                let cut = &cut[1..];
                prop_assert!(whole.starts_with(cut), "{cut:?} is not a start of {whole:?}");
                if cut.len() < whole.len() {
                    prop_assert!(cut.len() > budget && cut.chars().count() >= budget / 4, "{budget}: {cut:?}");
                }
            }
        }
    }
}
