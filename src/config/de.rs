//! How the values of `config.yaml` are read (serde's `deserialize_with`): text that may be
//! written as a number, paths written on Windows, sections written empty. Lenient where a
//! person's intent is plain, so that the file and a `CLEF_…` variable read alike.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::windows::windows_path_problem;

/// A string that also accepts numbers and booleans (`default_table: 2024`, `CLEF_MODEL__DEFAULT_TABLE=7`).
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a text value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A text value, also when written as a number or a boolean.
pub(super) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Text::deserialize(d).map(|t| t.0)
}

/// An optional text value, also when written as a number or a boolean.
pub(super) fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<Text>::deserialize(d).map(|t| t.map(|t| t.0))
}

/// A path: Windows absolute paths are refused with what to write instead; backslashes in
/// relative paths become slashes.
pub(super) fn opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let Some(Text(s)) = Option::<Text>::deserialize(d)? else { return Ok(None) };
    if s.trim().is_empty() {
        return Err(de::Error::custom("an empty path; remove the key to use the default"));
    }
    if let Some(problem) = windows_path_problem(&s) {
        return Err(de::Error::custom(problem));
    }
    Ok(Some(PathBuf::from(if s.starts_with('/') { s } else { s.replace('\\', "/") })))
}

/// A section that may be written empty (`server:` with every key commented out) = its defaults.
pub(super) fn section<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// [`section`] for a key that is absent unless written (the seed's top-level `cors:`).
pub(super) fn opt_section<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::<Option<T>>::deserialize(d).map(|o| o.map(Option::unwrap_or_default))
}
