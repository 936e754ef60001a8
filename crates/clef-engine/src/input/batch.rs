//! Batch bodies (`POST /decide/batch`): NDJSON, one input per line, or a JSON array of inputs,
//! taken one at a time without copying them out of the body.

use super::InputError;

/// One input of a batch: its line number (1-based: the NDJSON line, or the array element)
/// and its bytes.
pub type BatchItem<'b> = (usize, &'b [u8]);

/// The inputs of a batch body: NDJSON (one object per line; blank lines are skipped) or a JSON
/// array of objects, checked once ([`BatchInputs::check`]) and then taken one at a time from
/// the body, which is given again each time: the inputs are not copied out, so an answer can be
/// streamed while the body stays where the connection read it.
#[derive(Debug, Clone, Copy)]
pub struct BatchInputs {
    /// a JSON array (else NDJSON)
    array: bool,
    /// how many inputs the body holds
    count: usize,
    /// where the next input is looked for in the body
    at: usize,
    /// the line (or element) number of the last input taken
    line: usize,
}

impl BatchInputs {
    /// Checks a batch body and counts its inputs. `Err` when an array body is not valid JSON
    /// as a whole.
    pub fn check(body: &[u8]) -> Result<BatchInputs, InputError> {
        let at = if body.starts_with(b"\xEF\xBB\xBF") { 3 } else { 0 };
        let rest = body.get(at..).unwrap_or_default();
        let first = rest.iter().position(|b| !b.is_ascii_whitespace());
        if let Some(open) = first.filter(|&i| rest.get(i) == Some(&b'[')) {
            let text = std::str::from_utf8(rest).map_err(|e| InputError::InvalidJson {
                offset: e.valid_up_to(),
                message: "the body is not UTF-8".into(),
            })?;
            let mut de = serde_json::Deserializer::from_str(text);
            let count = serde::Deserializer::deserialize_seq(&mut de, CountElements).and_then(|n| de.end().map(|()| n));
            let count = count.map_err(|e| InputError::from_serde_syntax(text.as_bytes(), &e))?;
            return Ok(BatchInputs { array: true, count, at: at + open + 1, line: 0 });
        }
        let count = rest.split(|&b| b == b'\n').filter(|line| !blank(line)).count();
        Ok(BatchInputs { array: false, count, at, line: 0 })
    }

    /// How many inputs the body holds.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The next input of `body` (the body given to [`BatchInputs::check`]); `None` after the last.
    pub fn next<'b>(&mut self, body: &'b [u8]) -> Option<BatchItem<'b>> {
        if self.array {
            return self.next_element(body);
        }
        while let Some(rest) = body.get(self.at..) {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            let line = rest.get(..end).unwrap_or_default();
            self.at += end + 1;
            self.line += 1;
            if !blank(line) {
                return Some((self.line, line));
            }
        }
        None
    }

    /// The next element of a checked array: after blanks and a comma, up to `]`.
    fn next_element<'b>(&mut self, body: &'b [u8]) -> Option<BatchItem<'b>> {
        let rest = body.get(self.at..)?;
        let skip = rest.iter().position(|&b| !b.is_ascii_whitespace() && b != b',')?;
        if rest.get(skip) == Some(&b']') {
            self.at = body.len();
            return None;
        }
        let start = self.at + skip;
        let mut values =
            serde_json::Deserializer::from_slice(body.get(start..)?).into_iter::<&serde_json::value::RawValue>();
        let raw = values.next()?.ok()?;
        self.at = start + values.byte_offset();
        self.line += 1;
        Some((self.line, raw.get().as_bytes()))
    }
}

/// Whether an NDJSON line holds nothing but blanks.
fn blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Counts the elements of a JSON array without keeping them.
struct CountElements;

impl<'de> serde::de::Visitor<'de> for CountElements {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn all(body: &[u8]) -> (usize, Vec<(usize, String)>) {
        let mut inputs = BatchInputs::check(body).unwrap();
        let mut out = Vec::new();
        while let Some((line, bytes)) = inputs.next(body) {
            out.push((line, String::from_utf8(bytes.to_vec()).unwrap()));
        }
        assert!(inputs.next(body).is_none(), "inputs after the last");
        (inputs.count(), out)
    }

    #[test]
    fn ndjson_lines_are_taken_in_order_with_their_numbers() {
        let (count, got) = all(b"\xEF\xBB\xBF{\"a\": 1}\n\n  \n{\"b\": 2}\r\nnot json\n{}");
        let want = [(1, "{\"a\": 1}"), (4, "{\"b\": 2}\r"), (5, "not json"), (6, "{}")];
        assert_eq!(count, 4);
        assert_eq!(got, want.map(|(n, s)| (n, s.to_string())));
        assert_eq!(all(b""), (0, vec![]));
        assert_eq!(all(b"\n \n"), (0, vec![]));
    }

    #[test]
    fn array_elements_are_taken_in_order_with_their_positions() {
        let (count, got) = all(b"  [ {\"a\": [1, {\"x\": \"],\"}]} ,\n\"no\", 3,{} ]  ");
        let want = [(1, "{\"a\": [1, {\"x\": \"],\"}]}"), (2, "\"no\""), (3, "3"), (4, "{}")];
        assert_eq!(count, 4);
        assert_eq!(got, want.map(|(n, s)| (n, s.to_string())));
        assert_eq!(all(b"[]"), (0, vec![]));
        assert_eq!(all(b"\xEF\xBB\xBF[{}]").1, vec![(1, "{}".to_string())]);
    }

    #[test]
    fn an_array_that_is_not_json_is_one_error_with_its_offset() {
        for (body, offset) in [(&b"[{\"x\": 50}, "[..], 11), (b"[1] 2", 4), (b"[1,,2]", 3)] {
            match BatchInputs::check(body) {
                Err(InputError::InvalidJson { offset: at, .. }) => {
                    assert_eq!(at, offset, "{}", String::from_utf8_lossy(body));
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(body)),
            }
        }
    }
}
