//! The file layer: `config.yaml`'s text read into a [`Config`] with each of its problems at its
//! line and column (syntax, unknown keys with "did you mean", wrong types, Windows paths), and
//! where each key is written ([`Places`]), so that later checks can point at a value too.
// Load time only: every index is checked by the test beside it (a position just found, a length
// less one, saturating).
#![allow(clippy::indexing_slicing)]

use std::ops::Range;
use std::path::Path;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::sections::Config;
use super::windows::prepare;
use super::wording::{io_reason, size};
use crate::diagnostic::{quote, Diagnostic};
use crate::suggest::did_you_mean;
use crate::yaml::{self, DeErrorKind};

/// The largest configuration file read. A configuration is a few KB: the cap keeps a wrong `-c`
/// (a log, a disk image) from costing memory and time.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of a configuration file, without its BOM: a regular file of at most
/// [`MAX_CONFIG_BYTES`] in UTF-8, or a diagnostic saying why not.
pub(super) fn read_config_text(path: &Path) -> Result<String, Vec<Diagnostic>> {
    use std::io::Read;
    let shown = path.display().to_string();
    let cannot = |e: std::io::Error| {
        vec![Diagnostic::whole_file(&shown, format!("cannot read the configuration file: {}", io_reason(&e)))]
    };
    let mut bytes = Vec::new();
    crate::files::open_regular(path)
        .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(vec![Diagnostic::whole_file(
            &shown,
            format!(
                "the configuration file is larger than {} ({MAX_CONFIG_BYTES} bytes), the most clef reads; \
                 a configuration is a few KB: is this the right file?",
                size(MAX_CONFIG_BYTES)
            ),
        )]);
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let good = String::from_utf8_lossy(good).into_owned();
        vec![Diagnostic::at_offset(
            &shown,
            &good,
            good.len(),
            1,
            "the file is not UTF-8 text; save it as UTF-8".to_string(),
        )]
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// At most this many errors are reported for one file: more would bury the first ones.
const MAX_ERRORS: usize = 10;

/// How deep lists and mappings may nest below the top level. A configuration needs three or
/// four levels; the parse stops at the first bracket deeper than this, so a file of 200,000 `[`
/// costs no more than one of 33.
const MAX_DEPTH: usize = 32;

const YAML: yaml::Options =
    yaml::Options { max_depth: MAX_DEPTH, depth_hint: "a configuration needs a few", what: "a configuration" };

/// Where the keys of a configuration file and their values are written: dotted key → (the key,
/// the value), as byte ranges of the file.
#[derive(Debug, Default)]
pub(super) struct Places(FxHashMap<String, (Range<usize>, Range<usize>)>);

impl Places {
    fn of(root: &yaml::Node<'_>) -> Places {
        fn walk(node: &yaml::Node<'_>, prefix: &str, depth: usize, out: &mut Places) {
            for (k, v) in node.entries().unwrap_or_default() {
                let Some(key) = k.key_text() else { continue };
                let path = if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") };
                if depth < 3 {
                    walk(v, &path, depth + 1, out);
                    // list items as `key.N` (`router.instances.1.addr`)
                    for (i, item) in v.items().iter().enumerate() {
                        let item_path = format!("{path}.{i}");
                        walk(item, &item_path, depth + 2, out);
                        out.0.entry(item_path).or_insert((item.span.clone(), item.span.clone()));
                    }
                }
                out.0.entry(path).or_insert((k.span.clone(), v.span.clone()));
            }
        }
        let mut places = Places::default();
        walk(root, "", 0, &mut places);
        places
    }

    /// Where the key `keys` (dotted) is written.
    pub(super) fn key(&self, keys: &[&str]) -> Option<Range<usize>> {
        self.0.get(&keys.join(".")).map(|(k, _)| k.clone())
    }

    /// Where the value of `keys` is written (the key, when the value is left empty).
    pub(super) fn value(&self, keys: &[&str]) -> Option<Range<usize>> {
        self.0.get(&keys.join(".")).map(|(k, v)| if v.is_empty() { k.clone() } else { v.clone() })
    }
}

/// Reads the text of a configuration file (without its BOM) into a [`Config`], as the file
/// layer of `clef serve` does, with the problems it has (at most 10): syntax, unknown keys,
/// values of the wrong type, Windows paths, each at its line and column.
pub fn parse_text(shown: &str, text: &str) -> Result<Config, Vec<Diagnostic>> {
    validate_text(shown, text).map(|(config, _)| config)
}

/// Reads the file text into a [`Config`], reporting its problems (up to [`MAX_ERRORS`]) with their
/// positions. The text is parsed after [`prepare`], which keeps every position, so diagnostics
/// show the text as written.
///
/// serde stops at the first problem; to find the next one, the offending entry is taken out of the
/// parsed tree and the tree deserialized again (no new parse). The other unknown keys of a
/// mapping are all taken at the first one, so a file of many unknown keys costs two passes rather
/// than one per key.
pub(super) fn validate_text(shown: &str, text: &str) -> Result<(Config, Places), Vec<Diagnostic>> {
    let prepared = prepare(text);
    let at = |span: &Range<usize>, message: String| Diagnostic::at_offset(shown, text, span.start, span.len(), message);
    let document = yaml::parse(&prepared, &YAML).map_err(|p| vec![at(&(p.at..p.at + p.width), p.message)])?;
    let mut diags: Vec<Diagnostic> =
        document.problems.into_iter().take(MAX_ERRORS).map(|p| at(&(p.at..p.at + p.width), p.message)).collect();
    let mut root = match document.root {
        Some(root) if !root.is_null() => root,
        _ if diags.is_empty() => return Ok((Config::default(), Places::default())),
        _ => return Err(diags),
    };
    let places = Places::of(&root);
    let mut more = false;
    'passes: loop {
        let err = match Config::deserialize(yaml::NodeDe(&root)) {
            Ok(config) if diags.is_empty() => return Ok((config, places)),
            Ok(_) => break,
            Err(e) => e,
        };
        if diags.len() >= MAX_ERRORS {
            more = true;
            break;
        }
        let span = err.span.clone().unwrap_or(0..0);
        diags.push(at(&span, describe(&err)));
        let (Some((&entry, parent)), DeErrorKind::UnknownField { expected, .. }) =
            (err.indices.split_last(), &err.kind)
        else {
            if yaml::remove_at(&mut root, &err.indices) {
                continue;
            }
            break;
        };
        // the other unknown keys of this mapping, in the order written
        let mapping_path = &err.path[..err.path.len().saturating_sub(1)];
        let mut remove = vec![entry];
        let entries = yaml::node_at(&root, parent).and_then(yaml::Node::entries).unwrap_or_default();
        for (i, (k, _)) in entries.iter().enumerate().skip(entry + 1) {
            let Some(key) = k.key_text().filter(|key| !expected.contains(key)) else { continue };
            if diags.len() >= MAX_ERRORS {
                more = true;
                break 'passes;
            }
            let known: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            diags.push(at(&k.span, unknown_key_message(key, &yaml::path_text(mapping_path), &known)));
            remove.push(i);
        }
        let mut path = parent.to_vec();
        for i in remove.into_iter().rev() {
            path.push(i);
            yaml::remove_at(&mut root, &path);
            path.pop();
        }
    }
    diags.sort_by_key(|d| (d.line, d.column));
    if more {
        diags.push(Diagnostic::whole_file(
            shown,
            format!("stopping after {MAX_ERRORS} errors; fix these and check again for more"),
        ));
    }
    Err(diags)
}

/// What a deserialization error says, naming the key and how to fix it.
fn describe(e: &yaml::DeError) -> String {
    let path = yaml::path_text(&e.path);
    let key = if path.is_empty() { "the file".to_string() } else { format!("`{}`", quote(&path)) };
    match &e.kind {
        DeErrorKind::UnknownField { field, expected } => {
            let mapping = yaml::path_text(&e.path[..e.path.len().saturating_sub(1)]);
            let known: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            unknown_key_message(field, &mapping, &known)
        }
        DeErrorKind::Invalid { found, .. } if e.in_key => {
            let mapping = yaml::path_text(&e.path[..e.path.len().saturating_sub(1)]);
            let place = if mapping.is_empty() { "at the top level".to_string() } else { format!("in `{mapping}`") };
            format!("a key {place} is {}, not a name; write keys like `port:`", quote(found))
        }
        DeErrorKind::UnknownVariant { variant, expected } => match suggestion(variant, expected.iter().copied()) {
            Some(s) => format!("{key} cannot be `{}`, did you mean `{s}`?", quote(variant)),
            None => format!("{key} cannot be `{}`; it is one of {}", quote(variant), expected.join(", ")),
        },
        DeErrorKind::Invalid { found, expected } => {
            format!("{key} must be {}, not {}", friendly(expected), quote(found))
        }
        DeErrorKind::Custom(message) => format!("{key}: {message}"),
    }
}

fn unknown_key_message(key: &str, path: &str, known: &[String]) -> String {
    let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{path}`") };
    let key = quote(key);
    match suggestion(&key, known.iter().map(String::as_str)) {
        Some(s) => format!("unknown key `{key}` {place}, did you mean `{s}`?"),
        None if known.is_empty() => format!("unknown key `{key}` {place}"),
        None => format!("unknown key `{key}` {place}; the known keys are {}", known.join(", ")),
    }
}

/// [`did_you_mean`] for words short enough to be a misspelt name: the similarity of a long pasted
/// value to each name would cost time for nothing.
fn suggestion<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    (word.chars().count() <= 40).then(|| did_you_mean(word, candidates)).flatten()
}

/// The words a person knows for a type serde names (`u16` → "a port number (0 to 65535)").
pub(super) fn friendly(expected: &str) -> String {
    match expected {
        "u16" => "a port number (0 to 65535)".into(),
        "u8" | "u32" | "u64" | "usize" => "a whole number (0 or more)".into(),
        "i32" | "i64" | "isize" => "a whole number".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "a list".into(),
        "a string" | "a text value" => "a text value".into(),
        e if e.starts_with("struct ") => "a mapping of keys (like `key: value` lines)".into(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first error of `text` as a config file: (line, column, message).
    fn first_error(text: &str) -> Option<(usize, usize, String)> {
        validate_text("c.yaml", text).err().map(|d| (d[0].line, d[0].column, d[0].message.clone()))
    }

    #[test]
    fn nesting_deeper_than_a_config_needs_is_refused_at_the_bracket_too_deep() {
        let deep = |n: usize| format!("server: {}{}\n", "[".repeat(n), "]".repeat(n));
        // 32 levels below the top level are read (and are then a wrong type for `server`)
        assert!(!first_error(&deep(MAX_DEPTH)).unwrap().2.contains("nested"));
        let too_deep = |text: &str| first_error(text).filter(|e| e.2.contains("nested more than 32 levels deep"));
        assert_eq!(too_deep(&deep(MAX_DEPTH + 1)).map(|e| e.1), Some(9 + MAX_DEPTH));
        assert_eq!(too_deep(&format!("a: {}", "{a: ".repeat(40))).map(|e| e.1), Some(4 + 4 * MAX_DEPTH));
        // block nesting counts as well as brackets
        let block: String = (0..40).map(|i| format!("{}k{i}:\n", "  ".repeat(i))).collect();
        assert_eq!(too_deep(&block).map(|e| e.0), Some(34));
        for text in [format!("x: !!seq {}", "[ !!seq ".repeat(40)), format!("x: &a {}", "[ &a ".repeat(40))] {
            assert!(first_error(&text).is_some(), "{text}");
        }
        // brackets that are text are not nesting
        for text in [
            format!("a: '{}'\nb: \"{}\"\n", "[".repeat(40), "{".repeat(40)),
            format!("a: 1 # {}\n", "[".repeat(40)),
            format!("a: |\n  {}\n  more\n", "[".repeat(40)),
        ] {
            let e = first_error(&text).unwrap();
            assert!(e.2.starts_with("unknown key `a`"), "{text}: {e:?}");
        }
        // 200 KB of `[` is refused at once, as the only error
        let d = validate_text("c.yaml", &format!("server: {}", "[".repeat(200_000))).unwrap_err();
        assert_eq!((d.len(), d[0].line, d[0].column), (1, 1, 9 + MAX_DEPTH), "{d:?}");
        assert!(d[0].message.contains("nested more than 32 levels deep"), "{}", d[0]);
    }

    #[test]
    fn values_are_found_where_the_parser_saw_them() {
        let text = "# server: {port: 2}\nserver: {host: x, port: \"x\"}\n";
        let (line, column, message) = first_error(text).unwrap();
        assert_eq!((line, column), (2, 25), "{message}");
        assert!(message.starts_with("`server.port` must be a port number"), "{message}");
        // one line of 100,000 unknown keys and a wrong value at its end: ten errors, at once
        let line = format!("server: {{{} port: x}}\n", (0..100_000).map(|i| format!("k{i}: 1, ")).collect::<String>());
        let started = std::time::Instant::now();
        let d = validate_text("c.yaml", &line).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(d.len(), MAX_ERRORS + 1, "{d:?}");
    }
}
