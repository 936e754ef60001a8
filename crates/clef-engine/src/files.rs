//! Reading the files a user names (config, tokens, tables): regular files only, and only up
//! to a size, so that a path pointing at a FIFO, a device or a huge log fails at once with a
//! clear reason instead of blocking or exhausting memory. And writing the files clef keeps
//! (state, compiled tables) atomically, so that no crash and no reader ever sees half of one.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (through symbolic links). The type is checked
/// before opening, because opening a FIFO blocks until someone writes to it and a device such as
/// `/dev/zero` never ends; and again on the open file, opened non-blocking, in case the path was
/// swapped in between.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let regular = |meta: std::fs::Metadata| {
        let t = meta.file_type();
        let what = if t.is_file() {
            return Ok(());
        } else if t.is_dir() {
            "a folder"
        } else if t.is_fifo() {
            "a FIFO (named pipe)"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("it is {what}, not a regular file")))
    };
    regular(std::fs::metadata(path)?)?;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    regular(file.metadata()?)?;
    Ok(file)
}

/// The bytes of the regular file `path`, refused (`InvalidData`) when it holds more than `max`.
pub fn read_limited(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path)?.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the file is larger than {max} bytes, the most clef reads of such a file"),
        ));
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` so that a crash, or a reader at any moment, sees either the old file
/// or the new one: a hidden temporary file beside it (created with the folder if needed),
/// synced, renamed over it, and the folder synced so that the rename itself reaches the disk.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // hidden, so that a folder watcher never takes it for a table; one fixed name, so that
    // what a crash in the middle of a write left behind is overwritten by the next write
    let tmp = dir.join(format!(".{name}.tmp"));
    let written = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

/// Reads a JSON file clef wrote (at most `max` bytes): `Ok(None)` when there is none, the
/// reason (naming the file) when it cannot be read or parsed.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path, max: u64) -> Result<Option<T>, ReadJsonError> {
    let path_buf = || path.to_path_buf();
    match read_limited(path, max) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map(Some).map_err(|error| ReadJsonError::Json { path: path_buf(), error })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(ReadJsonError::Io { path: path_buf(), error }),
    }
}

/// Why a JSON file clef wrote cannot be read back.
#[derive(Debug)]
pub enum ReadJsonError {
    /// reading it failed (or it is larger than allowed)
    Io {
        /// the file
        path: std::path::PathBuf,
        /// what the system said
        error: io::Error,
    },
    /// it is not the JSON expected
    Json {
        /// the file
        path: std::path::PathBuf,
        /// where and what
        error: serde_json::Error,
    },
}

impl std::fmt::Display for ReadJsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadJsonError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ReadJsonError::Json { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for ReadJsonError {}
