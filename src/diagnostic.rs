//! File diagnostics: `path:line:col: error: message`, the source line and a caret.

use std::fmt;

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
    /// the text of the line, for the caret display
    pub source_line: Option<String>,
    /// how many characters the caret underlines
    pub width: usize,
}

impl Diagnostic {
    /// A diagnostic at byte `offset` of `source` (the whole file text).
    pub fn at_offset(path: &str, source: &str, offset: usize, width_bytes: usize, message: String) -> Diagnostic {
        let offset = floor_char_boundary(source, offset.min(source.len()));
        let line_start = source[..offset].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let line_end = source[offset..].find('\n').map(|i| offset + i).unwrap_or(source.len());
        let line = source[..offset].matches('\n').count() + 1;
        let column = source[line_start..offset].chars().count() + 1;
        let text = source[line_start..line_end].trim_end_matches('\r');
        let end = floor_char_boundary(source, (offset + width_bytes).min(line_end));
        let width = source[offset..end.max(offset)].chars().count().max(1);
        Diagnostic {
            path: path.to_string(),
            line,
            column,
            severity: Severity::Error,
            message,
            source_line: Some(text.to_string()),
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
            message,
            source_line: None,
            width: 0,
        }
    }

    /// The same diagnostic as a warning.
    pub fn warning(mut self) -> Diagnostic {
        self.severity = Severity::Warning;
        self
    }
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
            let pad: String = text.chars().take(self.column - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
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

    #[test]
    fn maps_decoded_offsets_through_escapes() {
        let raw = r#""a \"b\" \u00e9 c""#;
        // decoded: a "b" é c  → 'c' at decoded byte 9 (é is 2 bytes)
        assert_eq!(&raw[json_string_offset(raw, 9)..json_string_offset(raw, 9) + 1], "c");
        assert_eq!(&raw[json_string_offset(raw, 2)..json_string_offset(raw, 2) + 2], "\\\"");
    }
}
