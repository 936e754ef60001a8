//! File diagnostics: `path:line:col: error: message`, the source line and a caret.
//!
//! A diagnostic quotes at most one line of the file, and a long line only around the caret, so a
//! file with a megabyte on one line (a minified table, a pasted blob in a config) still gives a
//! message of a few lines.
// Building a message: offsets are clamped to the source text (and to a character boundary) before
// they index it, and loops stop at its end.
#![allow(clippy::indexing_slicing)]

use std::fmt;

/// Source lines up to this many characters are shown whole (a condition line of a table is often
/// 150 or 200); longer ones are cut to this many characters around the caret.
const SHOWN_LINE_CHARS: usize = 240;

/// Characters kept before the caret when a long line is cut: enough to see the key of a value.
const CONTEXT_BEFORE_CARET: usize = 80;

/// Values echoed inside a message (`cannot be `…``) are cut to this many characters.
pub const QUOTED_CHARS: usize = 80;

/// A message longer than this (in bytes) is cut: only a message that echoes data is that long.
const MESSAGE_BYTES: usize = 2000;

/// `value` as quoted inside a message: its first line, at most [`QUOTED_CHARS`] characters, with
/// `…` where it was cut.
pub fn quote(value: &str) -> String {
    let line = value.split(['\n', '\r']).next().unwrap_or("");
    match line.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None if line.len() < value.len() => format!("{line}…"),
        None => line.to_string(),
    }
}

fn cap_message(mut message: String) -> String {
    if message.len() > MESSAGE_BYTES {
        message.truncate(floor_char_boundary(&message, MESSAGE_BYTES));
        message.push('…');
    }
    message
}

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// the file cannot be used
    Error,
    /// the file works, but something looks wrong
    Warning,
}

/// One problem found in a file, located by line and column (1-based, columns in characters).
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// the file
    pub path: String,
    /// 1-based line
    pub line: usize,
    /// 1-based column, in characters
    pub column: usize,
    /// error or warning
    pub severity: Severity,
    /// what is wrong and how to fix it
    pub message: String,
    /// the text of the line, for the caret display: a line longer than 240 characters is cut to
    /// 240 characters around the caret, with `…` where it was cut
    pub source_line: Option<String>,
    /// 1-based column of the caret in `source_line` (not `column` when the line was cut)
    pub source_column: usize,
    /// how many characters of `source_line` the caret underlines
    pub width: usize,
}

impl Diagnostic {
    /// A diagnostic at byte `offset` of `source` (the whole file text). It counts the lines
    /// before `offset`: a loader that reports many problems in one file positions them with a
    /// [`SourceFile`] instead.
    pub fn at_offset(path: &str, source: &str, offset: usize, width_bytes: usize, message: String) -> Diagnostic {
        let line_of = |line_start: usize| memchr::memchr_iter(b'\n', &source.as_bytes()[..line_start]).count() + 1;
        Diagnostic::positioned(path, source, offset, width_bytes, message, line_of)
    }

    /// [`Diagnostic::at_offset`], with `line_of` giving the 1-based number of the line that
    /// starts at a byte offset.
    fn positioned(
        path: &str,
        source: &str,
        offset: usize,
        width_bytes: usize,
        message: String,
        line_of: impl FnOnce(usize) -> usize,
    ) -> Diagnostic {
        let offset = floor_char_boundary(source, offset.min(source.len()));
        let line_start = memchr::memrchr(b'\n', &source.as_bytes()[..offset]).map(|i| i + 1).unwrap_or(0);
        let line_end = memchr::memchr(b'\n', &source.as_bytes()[offset..]).map(|i| offset + i).unwrap_or(source.len());
        let line = line_of(line_start);
        let column = source[line_start..offset].chars().count() + 1;
        let text = source[line_start..line_end].trim_end_matches('\r');
        let end = floor_char_boundary(source, (offset + width_bytes).min(line_end));
        let width = source[offset..end.max(offset)].chars().count().max(1);
        // the caret may stand on the `\r` of a CRLF line end, past `text`
        let caret = (offset - line_start).min(text.len());
        let (shown, source_column, width) = window(&text[..caret], &text[caret..], width);
        Diagnostic {
            path: path.to_string(),
            line,
            column,
            severity: Severity::Error,
            message: cap_message(message),
            source_line: Some(shown),
            source_column,
            width,
        }
    }

    /// A diagnostic at a 1-based line and byte column (as serde reports them).
    pub fn at_line_col(path: &str, source: &str, line: usize, byte_col: usize, message: String) -> Diagnostic {
        let mut offset = 0;
        for (i, l) in source.split_inclusive('\n').enumerate() {
            if i + 1 == line {
                offset += byte_col.saturating_sub(1).min(l.len());
                return Diagnostic::at_offset(path, source, offset, 1, message);
            }
            offset += l.len();
        }
        Diagnostic::at_offset(path, source, source.len(), 1, message)
    }

    /// A diagnostic about a whole file (no position inside it).
    pub fn whole_file(path: &str, message: String) -> Diagnostic {
        Diagnostic {
            path: path.to_string(),
            line: 1,
            column: 1,
            severity: Severity::Error,
            message: cap_message(message),
            source_line: None,
            source_column: 1,
            width: 0,
        }
    }

    /// The same diagnostic as a warning.
    pub fn warning(mut self) -> Diagnostic {
        self.severity = Severity::Warning;
        self
    }
}

/// The most diagnostics a file's load error lists; past them it only says how many more there
/// are. One mistake repeated over a generated table of 100,000 rules would otherwise write a
/// diagnostic per rule into the log, the answer of `POST /reload` and `clef check`.
pub const MAX_LISTED: usize = 50;

/// One file's text, to position many diagnostics in it. The offsets where its lines start are
/// found once, on the first diagnostic, so that each costs a binary search rather than a count
/// of every line before it: with a count, 100,000 problems in a 6 MB table took minutes.
pub struct SourceFile<'s> {
    path: &'s str,
    text: &'s str,
    line_starts: std::cell::OnceCell<Vec<usize>>,
}

impl<'s> SourceFile<'s> {
    /// The file `text`, named `path` in its diagnostics.
    pub fn new(path: &'s str, text: &'s str) -> SourceFile<'s> {
        SourceFile { path, text, line_starts: std::cell::OnceCell::new() }
    }

    /// The file's name in diagnostics.
    pub fn path(&self) -> &'s str {
        self.path
    }

    /// The file's text.
    pub fn text(&self) -> &'s str {
        self.text
    }

    /// A diagnostic at byte `offset`, underlining `width_bytes`.
    pub fn at(&self, offset: usize, width_bytes: usize, message: String) -> Diagnostic {
        let starts = self.line_starts.get_or_init(|| {
            std::iter::once(0).chain(memchr::memchr_iter(b'\n', self.text.as_bytes()).map(|i| i + 1)).collect()
        });
        let line_of = |line_start: usize| starts.partition_point(|&s| s <= line_start);
        Diagnostic::positioned(self.path, self.text, offset, width_bytes, message, line_of)
    }
}

/// The part of a line shown under a diagnostic whose caret stands between `before` and `after` (the
/// line's text on either side) and underlines `width` characters: the whole line when it is
/// short, else [`SHOWN_LINE_CHARS`] characters around the caret with `…` at the cuts. Returns the
/// text, the 1-based column of the caret in it and the width of the caret in it.
fn window(before: &str, after: &str, width: usize) -> (String, usize, usize) {
    // Characters are counted only as far as a window reaches, from the caret outwards: a 10 MB
    // line costs no more than a short one.
    let near_before = before.chars().rev().take(SHOWN_LINE_CHARS + 1).count();
    let near_after = after.chars().take(SHOWN_LINE_CHARS + 1).count();
    if near_before + near_after <= SHOWN_LINE_CHARS {
        return (format!("{before}{after}"), near_before + 1, width);
    }
    // Some context before the caret; more when the line ends soon after it.
    let keep_before = near_before.min(CONTEXT_BEFORE_CARET.max(SHOWN_LINE_CHARS.saturating_sub(near_after)));
    let keep_after = near_after.min(SHOWN_LINE_CHARS - keep_before);
    let start = before.char_indices().rev().nth(keep_before.wrapping_sub(1)).map_or(before.len(), |(i, _)| i);
    let end = after.char_indices().nth(keep_after).map_or(after.len(), |(i, _)| i);
    let cut_start = start > 0;
    let mut shown = String::with_capacity(start.abs_diff(before.len()) + end + 8);
    if cut_start {
        shown.push('…');
    }
    shown.push_str(&before[start..]);
    shown.push_str(&after[..end]);
    if end < after.len() {
        shown.push('…');
    }
    (shown, keep_before + 1 + usize::from(cut_start), width.min(keep_after).max(1))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}:{}:{}: {level}: {}", self.path, self.line, self.column, self.message)?;
        if let Some(text) = &self.source_line {
            let gutter = self.line.to_string().len();
            let pad: String =
                text.chars().take(self.source_column - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
            write!(
                f,
                "\n{:gutter$} |\n{} | {text}\n{:gutter$} | {pad}{}",
                "",
                self.line,
                "",
                "^".repeat(self.width.max(1))
            )?;
        }
        Ok(())
    }
}

/// Maps a byte offset in a decoded JSON string to the byte offset in its raw
/// text (`raw` starts at the opening quote), so errors inside a condition
/// point at the right character of the file.
pub fn json_string_offset(raw: &str, decoded_offset: usize) -> usize {
    let bytes = raw.as_bytes();
    let mut i = 1; // past the opening quote
    let mut decoded = 0;
    while decoded < decoded_offset && i < bytes.len() {
        if bytes[i] == b'\\' {
            let escape = bytes.get(i + 1).copied().unwrap_or(b'\\');
            if escape == b'u' {
                let code = raw.get(i + 2..i + 6).and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or(0);
                if (0xD800..0xDC00).contains(&code) && raw.get(i + 6..i + 8) == Some("\\u") {
                    i += 12;
                    decoded += 4;
                } else {
                    i += 6;
                    decoded += char::from_u32(code).map(char::len_utf8).unwrap_or(3);
                }
            } else {
                i += 2;
                decoded += 1;
            }
        } else {
            let c = raw[i..].chars().next().map(char::len_utf8).unwrap_or(1);
            i += c;
            decoded += c;
        }
    }
    i.min(raw.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_position_line_and_caret() {
        let src = "{\n  \"a\": 1,\n  \"b\": x\n}";
        let off = src.find('x').unwrap();
        let d = Diagnostic::at_offset("t.json", src, off, 1, "bad value".into());
        assert_eq!((d.line, d.column), (3, 8));
        let text = d.to_string();
        assert!(text.starts_with("t.json:3:8: error: bad value"), "{text}");
        assert!(text.ends_with("|        ^"), "{text}");
    }

    /// The caret line under the source line of a rendered diagnostic, and the source line.
    fn shown(d: &Diagnostic) -> (String, String) {
        let text = d.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let strip = |l: &str| l.split_once(" | ").map(|x| x.1.to_string()).unwrap_or_default();
        (strip(lines[2]), strip(lines[3]))
    }

    #[test]
    fn a_long_line_is_shown_around_the_caret_only() {
        // a 10 MB line with the error in the middle: the display stays a few hundred bytes
        let mut src = "x".repeat(5_000_000);
        src.push_str("BAD");
        src.push_str(&"y".repeat(5_000_000));
        let d = Diagnostic::at_offset("t.json", &src, 5_000_000, 3, "bad value".into());
        assert_eq!((d.line, d.column, d.width), (1, 5_000_001, 3));
        let text = d.to_string();
        assert!(text.len() < 1000, "{} bytes", text.len());
        let (line, caret) = shown(&d);
        assert!(line.starts_with('…') && line.ends_with('…'), "{line}");
        assert_eq!(line.chars().count(), SHOWN_LINE_CHARS + 2);
        // the caret is under `BAD`
        let at = caret.find('^').unwrap();
        assert_eq!(caret.trim_start(), "^^^");
        assert_eq!(line.chars().skip(at).take(3).collect::<String>(), "BAD", "{line}\n{caret}");
    }

    #[test]
    fn long_lines_are_cut_at_one_end_near_their_start_and_their_end() {
        let src = format!("BAD{}", "y".repeat(500));
        let d = Diagnostic::at_offset("t", &src, 0, 3, "m".into());
        let (line, caret) = shown(&d);
        assert!(line.starts_with("BAD") && line.ends_with('…'), "{line}");
        assert_eq!(caret, "^^^");
        // an error at the very end of a long last line (the file ends too early)
        let src = format!("{{\"a\": \"{}", "z".repeat(500));
        let d = Diagnostic::at_offset("t", &src, src.len(), 1, "m".into());
        let (line, caret) = shown(&d);
        assert!(line.starts_with('…') && line.ends_with('z'), "{line}");
        assert_eq!(caret.len(), line.chars().count() + 1, "the caret just after the last character");
        // a short line is shown whole
        let d = Diagnostic::at_offset("t", "a: 1\n", 3, 1, "m".into());
        assert_eq!(shown(&d), ("a: 1".to_string(), "   ^".to_string()));
        // a caret at the end of a CRLF line
        let d = Diagnostic::at_offset("t", "a: 1\r\nb", 5, 1, "m".into());
        assert_eq!((d.line, d.column, shown(&d)), (1, 6, ("a: 1".to_string(), "    ^".to_string())));
    }

    #[test]
    fn a_source_file_positions_each_diagnostic_as_a_count_of_its_lines_does() {
        let src = "a\r\nbb\n\nccc é x\n\nlast";
        let file = SourceFile::new("t", src);
        for offset in 0..=src.len() + 2 {
            let alone = Diagnostic::at_offset("t", src, offset, 2, "m".into());
            assert_eq!(file.at(offset, 2, "m".into()), alone, "at {offset}");
        }
        assert_eq!(file.at(src.len(), 1, "m".into()).line, 6);
        let empty = SourceFile::new("t", "");
        assert_eq!((empty.at(0, 1, "m".into()).line, empty.at(0, 1, "m".into()).column), (1, 1));
    }

    #[test]
    fn quoted_values_and_messages_are_capped() {
        assert_eq!(quote("short"), "short");
        assert_eq!(quote("two\nlines"), "two…");
        let long = quote(&"é".repeat(10_000));
        assert_eq!(long.chars().count(), QUOTED_CHARS + 1);
        assert!(long.ends_with('…'));
        let d = Diagnostic::whole_file("t", "m".repeat(1_000_000));
        assert!(d.message.len() <= MESSAGE_BYTES + 3);
    }

    #[test]
    fn maps_decoded_offsets_through_escapes() {
        let raw = r#""a \"b\" \u00e9 c""#;
        // decoded: a "b" é c  → 'c' at decoded byte 9 (é is 2 bytes)
        assert_eq!(&raw[json_string_offset(raw, 9)..json_string_offset(raw, 9) + 1], "c");
        assert_eq!(&raw[json_string_offset(raw, 2)..json_string_offset(raw, 2) + 2], "\\\"");
    }
}
