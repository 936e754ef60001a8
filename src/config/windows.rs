//! Windows tolerance: files written on Windows read as their author meant. A Windows absolute
//! path is refused with what to write instead, and a double-quoted scalar with backslashes
//! (`tables_dir: "tables\risk"`) is read raw rather than with YAML's escapes.
// Load time only: every index is checked by the test beside it (a length, a loop bound, a position
// just found).
#![allow(clippy::indexing_slicing)]

use crate::diagnostic::quote;

/// A Windows absolute path in the config: its message says what to write instead.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct WindowsPath {
    /// the path as written, quoted as diagnostics quote it
    path: String,
    /// its last component (the folder's name), quoted: the examples of what to write
    last: String,
}

impl std::fmt::Display for WindowsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let WindowsPath { path, last } = self;
        write!(
            f,
            "`{path}` is a Windows path, which does not exist on this Linux box; write a path relative to the folder \
             of this config file (like `./{last}`) or a Linux absolute path (like `/etc/clef/{last}`)"
        )
    }
}

impl std::error::Error for WindowsPath {}

/// Says what is wrong with a Windows absolute path (`C:\…`, `C:/…`, `\\server\share`), if `s` is one.
pub(super) fn windows_path_problem(s: &str) -> Option<WindowsPath> {
    let b = s.as_bytes();
    let drive =
        b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b.len() == 2 || matches!(b[2], b'\\' | b'/'));
    let unc = s.starts_with("\\\\");
    if !drive && !unc {
        return None;
    }
    let last = quote(s.rsplit(['\\', '/']).find(|c| !c.is_empty() && !c.ends_with(':')).unwrap_or("tables"));
    Some(WindowsPath { path: quote(s), last })
}

/// Rewrites double-quoted scalars that must be read raw as single-quoted scalars of the same
/// length (so positions stay right): the value of a path key (`tables_dir: "tables\risk"`, where
/// YAML would read `\r` as a carriage return), or any scalar with an escape YAML does not know
/// (`"\d"`). Elsewhere valid escapes keep their YAML meaning.
pub(super) fn prepare(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' if i == 0 || b[i - 1].is_ascii_whitespace() => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\'' if scalar_start(b, i) => {
                i += 1;
                while i < b.len() {
                    if b[i] == b'\'' {
                        if b.get(i + 1) == Some(&b'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'"' if scalar_start(b, i) => {
                let raw_end = b[i + 1..].iter().position(|&c| c == b'"' || c == b'\n').map(|p| p + i + 1);
                if let Some(end) = raw_end.filter(|&e| b[e] == b'"') {
                    let content = &text[i + 1..end];
                    if content.contains('\\')
                        && !content.contains('\'')
                        && terminator_follows(b, end + 1)
                        && (is_path_key(key_before(b, i)) || has_unknown_escape(content))
                    {
                        out[i] = b'\'';
                        out[end] = b'\'';
                        i = end + 1;
                        continue;
                    }
                }
                // a YAML double-quoted scalar: skip it, escapes included
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// Whether a quote at `i` starts a scalar (rather than sitting inside a plain one).
fn scalar_start(b: &[u8], i: usize) -> bool {
    let before = b[..i].iter().rposition(|&c| c != b' ' && c != b'\t');
    match before {
        None => true,
        Some(p) => match b[p] {
            b'\n' | b'[' | b'{' | b',' | b'?' => true,
            b':' | b'-' => p + 1 < i,
            _ => false,
        },
    }
}

fn terminator_follows(b: &[u8], mut i: usize) -> bool {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i >= b.len() || matches!(b[i], b'\r' | b'\n' | b'#' | b',' | b'}' | b']')
}

/// The key of a `key: "value"` pair, when the quote at `i` is such a value.
fn key_before(b: &[u8], i: usize) -> &str {
    let mut j = i;
    while j > 0 && (b[j - 1] == b' ' || b[j - 1] == b'\t') {
        j -= 1;
    }
    if j == 0 || b[j - 1] != b':' {
        return "";
    }
    let end = j - 1;
    let mut start = end;
    while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b'-') {
        start -= 1;
    }
    std::str::from_utf8(&b[start..end]).unwrap_or("")
}

fn is_path_key(key: &str) -> bool {
    key.ends_with("dir") || key.ends_with("path") || key.ends_with("file")
}

fn has_unknown_escape(content: &str) -> bool {
    let mut chars = content.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(
                    '0' | 'a' | 'b' | 't' | '\t' | 'n' | 'v' | 'f' | 'r' | 'e' | ' ' | '"' | '/' | '\\' | 'N' | '_',
                )
                | Some('L' | 'P' | 'x' | 'u' | 'U') => {}
                _ => return true,
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_rewrites_path_values_only() {
        let t = "model:\n  tables_dir: \"tables\\risk\"\n  x: \"a\\tb\"\n  y: \"\\d+\"\n";
        let p = prepare(t);
        assert_eq!(p.len(), t.len());
        assert!(p.contains("tables_dir: 'tables\\risk'"), "{p}");
        assert!(p.contains("x: \"a\\tb\""), "{p}");
        assert!(p.contains("y: '\\d+'"), "{p}");
    }

    #[test]
    fn windows_paths_are_recognised() {
        assert!(windows_path_problem("C:\\clef\\tables").unwrap().to_string().contains("/etc/clef/tables"));
        assert!(windows_path_problem("d:/x").is_some());
        assert!(windows_path_problem("\\\\server\\share").is_some());
        assert!(windows_path_problem(".\\tables").is_none());
        assert!(windows_path_problem("/etc/clef").is_none());
    }
}
