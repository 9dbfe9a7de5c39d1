//! Output files named on the command line (`--json`, `--chart`, `--trace`, `--output`):
//! checked when the command line is parsed, before any work, and written with errors
//! that name them.
//!
//! [`output_file`] is the options' value parser: the path must be non-empty and not a
//! directory; an existing regular file must be writable (it is opened for writing, not
//! truncated); a new file must be creatable (it is created and removed again, so a run
//! that fails later leaves nothing behind). A device or FIFO (`/dev/null`,
//! `/dev/stdout`) is taken as it is: opening a FIFO would wait for a reader.

use npurt::{Error, Result};
use std::fs::OpenOptions;
use std::path::Path;

/// The value parser of an input path (`op --input`, `embed --model-dir`): non-empty, so
/// that the error names the option rather than an empty path.
pub fn input_path(s: &str) -> std::result::Result<String, String> {
    if s.is_empty() { Err("an empty path".into()) } else { Ok(s.to_string()) }
}

/// Checks that the output file `s` can be written; returns it unchanged.
pub fn output_file(s: &str) -> std::result::Result<String, String> {
    if s.is_empty() {
        return Err("an empty path".into());
    }
    let p = Path::new(s);
    let cannot = |e: std::io::Error| format!("cannot write {s}: {e}");
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Err(format!("{s} is a directory")),
        Ok(m) if m.is_file() => OpenOptions::new().write(true).open(p).map(drop).map_err(cannot),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            OpenOptions::new().write(true).create_new(true).open(p).map_err(cannot)?;
            std::fs::remove_file(p).map_err(cannot)
        }
        Err(e) => Err(cannot(e)),
    }?;
    Ok(s.to_string())
}

/// Writes `bytes` to `path`; a failure names the path.
pub fn write(path: &str, bytes: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(format!("writing {path}"), e))
}

/// Writes `doc` as pretty-printed JSON to `path`; a failure names the path.
pub fn write_json(path: &str, doc: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(doc).map_err(|e| Error::format_from(path.to_string(), e))?;
    write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_checked_and_leave_nothing_behind() {
        let d = std::env::temp_dir().join(format!("npurt-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let new = d.join("new.json");
        let s = new.to_str().unwrap();
        assert_eq!(output_file(s).as_deref(), Ok(s));
        assert!(!new.exists(), "the check left {s} behind");
        std::fs::write(&new, "kept").unwrap();
        assert_eq!(output_file(s).as_deref(), Ok(s));
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "kept", "the check truncated the file");
        for (bad, says) in [
            ("", "an empty path".to_string()),
            (d.to_str().unwrap(), format!("{} is a directory", d.display())),
            ("/proc/nope/x.json", "cannot write /proc/nope/x.json: ".to_string()),
        ] {
            let e = output_file(bad).unwrap_err();
            assert!(e.contains(&says), "{bad:?}: {e}");
        }
        assert!(output_file("/dev/null").is_ok());
        std::fs::remove_dir_all(&d).ok();
    }
}
