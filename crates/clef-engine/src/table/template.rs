//! `{{ path }}` placeholders in the strings of an action or a fallback (SPEC §4.2), filled
//! from the input per decision.
//!
//! The action is serialized once at load time and cut around its placeholders, so a decision
//! writes the fixed pieces and the values and nothing else. A string that is exactly one
//! placeholder (`"{{ n }}"`) takes the value with its JSON type; a placeholder inside longer
//! text is written as text (strings raw, anything else as its JSON). A missing value — an
//! absent field or JSON `null` — means the action cannot be built: the caller falls back.

use crate::expr::ir::PathSeg;
use crate::expr::json::write_json_string;
use crate::expr::program::{Program, SlotValue};
use crate::expr::value::Value;

/// An action (or fallback) with placeholders, cut into fixed JSON pieces and holes.
#[derive(Debug)]
pub struct Template {
    /// the JSON text around the holes: `pieces.len() == holes.len() + 1`
    pieces: Vec<Box<str>>,
    holes: Vec<Hole>,
}

#[derive(Debug)]
struct Hole {
    /// the path as written, for warnings
    path: Box<str>,
    /// the slot the program fills with the value at `path`
    slot: u32,
    /// inside a longer string: written as text, escaped for that string
    in_text: bool,
}

/// A placeholder whose value the input does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingValue {
    /// the path of the placeholder, as written
    pub path: Box<str>,
}

/// Why the strings of an action (or a fallback) cannot be made into a [`Template`]: what is wrong
/// with a placeholder, or with the text around it. The loaders place the message on the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateError {
    /// `{{` opens a placeholder that no `}}` closes
    Unclosed {
        /// the byte of the string where the `{{` is
        at: usize,
    },
    /// `{{ }}`, with no path inside
    Empty,
    /// the path is not dotted segments of letters, digits, `_` and `-`
    NotAPath {
        /// the path as written
        path: String,
        /// the first segment that is not a field name
        segment: String,
    },
    /// a string holds U+E000, which marks the holes while the action is serialized
    ReservedCharacter,
    /// a hole's marker was not found in the serialized action (a bug, not the file's fault)
    Lost,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateError::Unclosed { at } => write!(f, "`{{{{` at byte {at} is never closed with `}}}}`"),
            TemplateError::Empty => {
                f.write_str("an empty placeholder `{{ }}`; write the input field's path, like `{{ user.id }}`")
            }
            TemplateError::NotAPath { path, segment } => write!(
                f,
                "the placeholder `{{{{ {path} }}}}` is not a dotted path of field names (at `{segment}`); \
                 write it like `{{{{ headers.x-query-hash }}}}`"
            ),
            TemplateError::ReservedCharacter => {
                f.write_str("a string of the action holds the character U+E000, which clef reserves")
            }
            TemplateError::Lost => f.write_str("a placeholder was lost while serializing"),
        }
    }
}

impl std::error::Error for TemplateError {}

/// The placeholders `{{ path }}` of `text` as (byte range of the whole placeholder, path).
/// `Err` says what is wrong with one.
pub fn placeholders(text: &str) -> Result<Vec<(std::ops::Range<usize>, &str)>, TemplateError> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| i + from) {
        let Some(close) = text[open + 2..].find("}}").map(|i| i + open + 2) else {
            return Err(TemplateError::Unclosed { at: open });
        };
        let path = text[open + 2..close].trim();
        check_path(path)?;
        out.push((open..close + 2, path));
        from = close + 2;
    }
    Ok(out)
}

/// A placeholder's path: dotted segments of letters, digits, `_` and `-`.
fn check_path(path: &str) -> Result<(), TemplateError> {
    if path.is_empty() {
        return Err(TemplateError::Empty);
    }
    let bad =
        path.split('.').find(|seg| seg.is_empty() || !seg.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'));
    match bad {
        Some(seg) => Err(TemplateError::NotAPath { path: path.to_string(), segment: seg.to_string() }),
        None => Ok(()),
    }
}

/// The path segments of a placeholder path.
pub fn path_segments(path: &str) -> Vec<PathSeg> {
    path.split('.').map(|s| PathSeg::Key(s.into())).collect()
}

impl Template {
    /// The template of `action`, or `None` when no string in it holds a placeholder. Adds to
    /// `program` a slot for each placeholder's path. `Err` says what is wrong with a placeholder.
    pub fn new(action: &serde_json::Value, program: &mut Program) -> Result<Option<Template>, TemplateError> {
        let mut holes: Vec<(String, bool)> = Vec::new();
        let marked = mark(action, &mut holes)?;
        if holes.is_empty() {
            return Ok(None);
        }
        let json = marked.to_string();
        let mut pieces = Vec::with_capacity(holes.len() + 1);
        let mut out_holes = Vec::with_capacity(holes.len());
        let mut rest = json.as_str();
        for (n, (path, whole)) in holes.iter().enumerate() {
            let marker = marker(n);
            // a whole-string placeholder is replaced with its quotes
            let needle = if *whole { format!("\"{marker}\"") } else { marker };
            let at = rest.find(&needle).ok_or(TemplateError::Lost)?;
            pieces.push(rest[..at].into());
            rest = &rest[at + needle.len()..];
            let slot = program.slot_for(&path_segments(path));
            out_holes.push(Hole { path: path.as_str().into(), slot, in_text: !whole });
        }
        pieces.push(rest.into());
        Ok(Some(Template { pieces, holes: out_holes }))
    }

    /// Writes the action for one input, or says which placeholder has no value.
    pub fn render(&self, slots: &[SlotValue<'_>], out: &mut String) -> Result<(), MissingValue> {
        let start = out.len();
        for (piece, hole) in self.pieces.iter().zip(&self.holes) {
            out.push_str(piece);
            let value = match slots.get(hole.slot as usize) {
                Some(Ok(v)) if !matches!(v, Value::Nil) => *v,
                _ => {
                    out.truncate(start);
                    return Err(MissingValue { path: hole.path.clone() });
                }
            };
            match (hole.in_text, value) {
                (false, v) => v.write_json(out),
                (true, Value::Str(s)) => write_in_string(s, out),
                (true, v) => write_in_string(&v.to_json(), out),
            }
        }
        out.push_str(self.pieces.last().map(|p| &**p).unwrap_or(""));
        Ok(())
    }

    /// Room for a rendered action: the fixed text and some for each value, so that rendering
    /// allocates once instead of growing the string value by value.
    pub fn capacity_hint(&self) -> usize {
        self.pieces.iter().map(|p| p.len()).sum::<usize>() + 32 * self.holes.len()
    }

    /// The placeholders' paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.holes.iter().map(|h| &*h.path)
    }
}

/// Text written inside a JSON string: escaped, without the quotes.
fn write_in_string(s: &str, out: &mut String) {
    let start = out.len();
    write_json_string(s, out);
    // drop the quotes write_json_string added
    out.remove(start);
    out.pop();
}

/// A marker no placeholder-free text contains: written where a placeholder was, found again in
/// the serialized JSON.
fn marker(n: usize) -> String {
    format!("\u{e000}clef-hole-{n}\u{e000}")
}

/// A copy of `v` whose placeholders are replaced by markers; `holes` gets (path, whole string).
fn mark(v: &serde_json::Value, holes: &mut Vec<(String, bool)>) -> Result<serde_json::Value, TemplateError> {
    use serde_json::Value as J;
    Ok(match v {
        J::String(s) => {
            if s.contains('\u{e000}') {
                return Err(TemplateError::ReservedCharacter);
            }
            let found = placeholders(s)?;
            if found.is_empty() {
                return Ok(v.clone());
            }
            if let [(range, path)] = found.as_slice() {
                if *range == (0..s.len()) {
                    holes.push((path.to_string(), true));
                    return Ok(J::String(marker(holes.len() - 1)));
                }
            }
            let mut text = String::new();
            let mut last = 0;
            for (range, path) in found {
                text.push_str(&s[last..range.start]);
                holes.push((path.to_string(), false));
                text.push_str(&marker(holes.len() - 1));
                last = range.end;
            }
            text.push_str(&s[last..]);
            J::String(text)
        }
        J::Array(items) => J::Array(items.iter().map(|i| mark(i, holes)).collect::<Result<_, _>>()?),
        J::Object(members) => {
            let mut out = serde_json::Map::new();
            for (k, item) in members {
                out.insert(k.clone(), mark(item, holes)?);
            }
            J::Object(out)
        }
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_with_or_without_spaces() {
        let found = placeholders("a {{ x.y-z }} b {{w}}").unwrap();
        assert_eq!(found.iter().map(|(_, p)| *p).collect::<Vec<_>>(), vec!["x.y-z", "w"]);
        assert_eq!(placeholders("x {{ a").unwrap_err(), TemplateError::Unclosed { at: 2 });
        assert_eq!(placeholders("x {{ a").unwrap_err().to_string(), "`{{` at byte 2 is never closed with `}}`");
        assert_eq!(placeholders("{{ }}").unwrap_err(), TemplateError::Empty);
        assert!(placeholders("{{ a..b }}").is_err());
        assert_eq!(
            placeholders("{{ a[0] }}").unwrap_err().to_string(),
            "the placeholder `{{ a[0] }}` is not a dotted path of field names (at `a[0]`); \
             write it like `{{ headers.x-query-hash }}`"
        );
        assert_eq!(placeholders("no braces { here }").unwrap().len(), 0);
    }
}
