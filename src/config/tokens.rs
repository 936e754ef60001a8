//! The bearer tokens of the two listeners: read from the token file the config names, else from
//! the service's systemd credential.

use std::path::{Path, PathBuf};

use super::layer::Layered;
use super::wording::io_reason;
use crate::diagnostic::Diagnostic;

/// Only the first 4 KiB of a token file count, so a token file pointing at a large file cannot
/// exhaust memory.
const MAX_TOKEN_BYTES: u64 = 4096;

/// The systemd credential that stands in for `server.token_file` / `admin.token_file` when the
/// config names no file: `server-token` / `admin-token`.
pub fn credential_name(section: &str) -> String {
    format!("{section}-token")
}

/// The token `keys` (`[section, "token_file"]`) asks for, trimmed, from `named` (the resolved
/// file the config names) or the credential; `file` becomes the file it was read from. A problem
/// with the file goes to `errors`, at the key.
///
/// A token file the config names wins; without one, a systemd credential of the service
/// (`LoadCredential=server-token:…`, read from `$CREDENTIALS_DIRECTORY`) closes the listener:
/// that is how the Debian package hands clef the token it generated (SPEC §10 rev 4).
pub(super) fn read_token(
    layered: &Layered,
    named: Option<PathBuf>,
    credentials_dir: Option<&str>,
    keys: [&str; 2],
    file: &mut Option<PathBuf>,
    errors: &mut Vec<Diagnostic>,
) -> Option<String> {
    let p = match named {
        Some(p) => p,
        None => {
            let credential = Path::new(credentials_dir?).join(credential_name(keys[0]));
            // systemd creates the folder with exactly the credentials the unit loads
            if !credential.exists() {
                return None;
            }
            credential
        }
    };
    *file = Some(p.clone());
    let problem = match read_token_file(&p) {
        Ok(t) if !t.trim().is_empty() => return Some(t.trim().to_string()),
        Ok(_) => format!("the token file `{}` ({}.{}) is empty", p.display(), keys[0], keys[1]),
        Err(e) => {
            format!("cannot read the token file `{}` ({}.{}): {}", p.display(), keys[0], keys[1], io_reason(&e))
        }
    };
    errors.push(layered.at_value(&keys, problem));
    None
}

/// Reads a token file: a regular file, of which only the first [`MAX_TOKEN_BYTES`] count.
fn read_token_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::files::open_regular(path)?.take(MAX_TOKEN_BYTES).read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}
