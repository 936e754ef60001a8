//! Path resolution: the relative paths of `config.yaml` are read against the folder of the file
//! (not the working directory, so `clef serve -c /etc/clef/config.yaml` means the same from
//! anywhere), and the folders left unset get their defaults: `tables/`, `state/`, `snapshots/`.

use std::path::{Component, Path, PathBuf};

use super::layer::Layered;
use super::sections::{Config, Model};
use super::tokens::read_token;
use crate::diagnostic::Diagnostic;

/// The absolute folder of the config file at `path`: relative paths resolve against it.
pub(super) fn base_dir_of(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    normalize(abs.parent().unwrap_or(Path::new("/")))
}

/// Joins a relative path to `base` and removes `.` and `..` components lexically.
pub(super) fn resolve_path(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        normalize(p)
    } else {
        normalize(&base.join(p))
    }
}

/// The folder whose tables are served: `model.tables_dir`, by default `tables` next to the config
/// file.
pub(super) fn tables_dir_of(base_dir: &Path, model: &Model) -> PathBuf {
    resolve_path(base_dir, model.tables_dir.as_deref().unwrap_or_else(|| Path::new("./tables")))
}

/// `p` without `.` components, and with each `..` taking away the component before it.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// A loaded configuration, its paths resolved against the folder of the config file.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// the layered configuration (its relative paths replaced by the resolved ones below)
    pub config: Config,
    /// the config file used
    pub path: PathBuf,
    /// the (absolute) folder of the config file: relative paths resolve against it
    pub base_dir: PathBuf,
    /// the folder whose tables are served
    pub tables_dir: PathBuf,
    /// the seed's single table file, if configured
    pub decision_table_path: Option<PathBuf>,
    /// `model.default_table`, else the name of `decision_table_path` (its file name without every extension)
    pub default_table: Option<String>,
    /// the bearer token decision calls need (`server.token_file`, trimmed)
    pub server_token: Option<String>,
    /// the bearer token admin calls need (`admin.token_file`, trimmed)
    pub admin_token: Option<String>,
    /// `state_dir`, else `$STATE_DIRECTORY`, else `<base_dir>/state`
    pub state_dir: PathBuf,
    /// settings that work but are risky (a limit lowered to fit this machine, an open admin listener)
    pub warnings: Vec<String>,
}

/// Resolves the paths of a reviewed configuration and reads its token files: the configuration
/// `clef serve` runs with, or every error found.
pub(super) fn resolve(
    layered: Layered,
    mut errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    env: &[(String, String)],
) -> Result<Loaded, Vec<Diagnostic>> {
    let mut config = layered.config.clone();
    let path = layered.path.clone();
    let base_dir = base_dir_of(&path);
    let tables_dir = tables_dir_of(&base_dir, &config.model);
    let decision_table_path = config.model.decision_table_path.as_deref().map(|p| resolve_path(&base_dir, p));
    let default_table =
        config.model.default_table.clone().or_else(|| decision_table_path.as_deref().map(crate::table::table_name));
    let state_dir = match &config.state_dir {
        Some(p) => resolve_path(&base_dir, p),
        None => match env.iter().find(|(k, v)| k == "STATE_DIRECTORY" && !v.is_empty()) {
            // systemd may list several directories separated by colons: the first is ours
            Some((_, v)) => PathBuf::from(v.split(':').next().unwrap_or(v)),
            None => base_dir.join("state"),
        },
    };
    let credentials_dir =
        env.iter().find(|(k, v)| k == "CREDENTIALS_DIRECTORY" && !v.is_empty()).map(|(_, v)| v.as_str());
    let mut token = |keys: [&str; 2], file: &mut Option<PathBuf>| {
        let named = file.as_deref().map(|f| resolve_path(&base_dir, f));
        read_token(&layered, named, credentials_dir, keys, file, &mut errors)
    };
    let server_token = token(["server", "token_file"], &mut config.server.token_file);
    let admin_token = token(["admin", "token_file"], &mut config.admin.token_file);
    if !errors.is_empty() {
        return Err(errors);
    }
    let warnings = warnings.into_iter().map(|d| d.message).collect();
    config.model.tables_dir = Some(tables_dir.clone());
    config.model.decision_table_path = decision_table_path.clone();
    config.snapshots.dir = if config.snapshots.dir.as_os_str().is_empty() {
        state_dir.join("snapshots")
    } else {
        resolve_path(&base_dir, &config.snapshots.dir)
    };
    config.state_dir = Some(state_dir.clone());
    Ok(Loaded {
        config,
        path,
        base_dir,
        tables_dir,
        decision_table_path,
        default_table,
        server_token,
        admin_token,
        state_dir,
        warnings,
    })
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn stems_drop_every_extension() {
        assert_eq!(crate::table::table_name(Path::new("/a/net.flash.json")).as_str(), "net");
        assert_eq!(crate::table::table_name(Path::new("decision_table.json")).as_str(), "decision_table");
        assert_eq!(crate::table::table_name(Path::new("été.json")).as_str(), "été");
    }
}
