//! Bounded reads of the files npurt is given.
//!
//! Every input file is opened through [`open_regular`]: it must be a regular file (a
//! device such as `/dev/zero`, a FIFO, a socket or a directory is refused before anything
//! is read from it, naming the path), and its size is known before its content is. JSON
//! files ([`read_json_text`]) are refused past [`MAX_JSON_BYTES`]; a `.npy` file is read
//! header first and its data only when the file's size is exactly what the header
//! declares ([`crate::npy::read`]); a safetensors file is memory-mapped after the same
//! check ([`crate::models::safetensors::SafetensorsFile::open`]).
//!
//! The kind of a path is checked before it is opened (opening a FIFO for reading would
//! block until a writer comes) and again on the opened file; what is read is at most the
//! size found then, so a file that grows while it is read does not make a read unbounded.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The largest JSON file npurt reads (`config.json`, `tokenizer.json`,
/// `sentence_bert_config.json`, `modules.json`, a pooling `config.json`): 64 MiB. The
/// largest published `tokenizer.json` files are about 20 MB.
pub const MAX_JSON_BYTES: u64 = 64 << 20;

/// Why an input file was refused before its content was parsed. `Send + Sync`.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Opening, inspecting or reading the file failed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A directory, a device, a FIFO, a socket: nothing npurt reads is one of these.
    #[error("{path}: not a regular file (a {kind})")]
    NotRegular { path: String, kind: &'static str },
    /// Larger than the documented cap for its kind of file.
    #[error("{path}: {size} bytes exceed the limit of {cap} bytes for {what}")]
    TooLarge { path: String, size: u64, cap: u64, what: &'static str },
}

impl FileError {
    /// The path the error is about.
    pub fn path(&self) -> &str {
        match self {
            FileError::Io { path, .. } | FileError::NotRegular { path, .. } | FileError::TooLarge { path, .. } => path,
        }
    }
}

impl From<FileError> for runtime::Error {
    /// Always [`runtime::Error::Io`] naming the path: a failed read keeps its `io::Error`;
    /// a refused file is an `io::Error` (kind `InvalidInput` or `FileTooLarge`) holding
    /// this error.
    fn from(e: FileError) -> runtime::Error {
        use std::io::ErrorKind;
        match e {
            FileError::Io { path, source } => runtime::Error::io(path, source),
            e @ FileError::NotRegular { .. } => {
                runtime::Error::io(String::new(), std::io::Error::new(ErrorKind::InvalidInput, e))
            }
            e @ FileError::TooLarge { .. } => {
                runtime::Error::io(String::new(), std::io::Error::new(ErrorKind::FileTooLarge, e))
            }
        }
    }
}

/// What a file that is not a regular one is, in words.
#[cfg(unix)]
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "directory"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(not(unix))]
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() { "directory" } else { "special file" }
}

/// Opens `path` (following links) for reading if it is a regular file; returns the file
/// and its size.
pub fn open_regular(path: &Path) -> Result<(File, u64), FileError> {
    let name = || path.display().to_string();
    let io = |source| FileError::Io { path: name(), source };
    let check = |m: std::fs::Metadata| {
        if m.is_file() {
            Ok(m.len())
        } else {
            Err(FileError::NotRegular { path: name(), kind: kind_of(m.file_type()) })
        }
    };
    // Before opening: opening a FIFO would wait for a writer.
    check(std::fs::metadata(path).map_err(io)?)?;
    let file = File::open(path).map_err(io)?;
    let len = check(file.metadata().map_err(io)?)?;
    Ok((file, len))
}

/// The whole of the regular file `path`, refused (before reading) when over `cap` bytes;
/// `what` names the kind of file in that error.
pub fn read_capped(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, FileError> {
    let (file, len) = open_regular(path)?;
    if len > cap {
        return Err(FileError::TooLarge { path: path.display().to_string(), size: len, cap, what });
    }
    let mut out = Vec::new();
    let io = |source| FileError::Io { path: path.display().to_string(), source };
    // `len` is at most `cap`, a small constant, so it fits a usize.
    out.try_reserve_exact(usize::try_from(len).unwrap_or(0)).map_err(|e| io(std::io::Error::other(e)))?;
    file.take(len).read_to_end(&mut out).map_err(io)?;
    Ok(out)
}

/// The JSON file `path` as text: a regular file of at most [`MAX_JSON_BYTES`], UTF-8.
pub fn read_json_text(path: &Path) -> Result<String, FileError> {
    let bytes = read_capped(path, MAX_JSON_BYTES, "a JSON file")?;
    String::from_utf8(bytes).map_err(|e| FileError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("npurt-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn devices_directories_and_missing_files_are_refused_naming_the_path() {
        let d = scratch("kinds");
        for (p, want) in [
            (Path::new("/dev/zero").to_path_buf(), "not a regular file (a character device)"),
            (d.clone(), "not a regular file (a directory)"),
            (d.join("absent.json"), "No such file"),
        ] {
            let e = read_json_text(&p).unwrap_err();
            let msg = runtime::Error::from(e).to_string();
            assert!(msg.contains(&p.display().to_string()) && msg.contains(want), "{msg}");
        }
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_file_over_the_cap_is_refused_before_it_is_read() {
        let d = scratch("cap");
        let p = d.join("big.json");
        let f = File::create(&p).unwrap();
        // Sparse: nothing is written, nothing would be read.
        f.set_len(MAX_JSON_BYTES + 1).unwrap();
        let e = read_json_text(&p).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { size, .. } if size == MAX_JSON_BYTES + 1), "{e}");
        assert!(e.to_string().contains(&MAX_JSON_BYTES.to_string()), "{e}");
        std::fs::write(&p, b"{}").unwrap();
        assert_eq!(read_json_text(&p).unwrap(), "{}");
        std::fs::remove_dir_all(&d).ok();
    }
}
