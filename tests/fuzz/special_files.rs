//! Every loader given a path that is not a regular file (a device, a directory, a FIFO, a
//! link to one, a broken link) refuses it naming the path, before reading anything: no
//! hang on a FIFO, no endless read of `/dev/zero`, no allocation from what it would hold.

use crate::alloc::largest_allocation;
use crate::files::TempDir;
use npurt::models::bert::BertConfig;
use npurt::models::safetensors::SafetensorsFile;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// The special paths: each with the words the error must hold.
#[derive(Clone, Copy, Debug)]
enum Special {
    DevZero,
    DevNull,
    DevUrandom,
    Directory,
    LinkToDevZero,
    Fifo,
    BrokenLink,
}

/// `special` made in `dir` (or the device itself); `None` when this host cannot make it.
fn make(dir: &Path, special: Special) -> Option<(PathBuf, &'static str)> {
    let link = |target: &str| {
        let p = dir.join("link");
        std::os::unix::fs::symlink(target, &p).ok().map(|()| p)
    };
    Some(match special {
        Special::DevZero => ("/dev/zero".into(), "not a regular file (a character device)"),
        Special::DevNull => ("/dev/null".into(), "not a regular file (a character device)"),
        Special::DevUrandom => ("/dev/urandom".into(), "not a regular file (a character device)"),
        Special::Directory => (dir.to_path_buf(), "not a regular file (a directory)"),
        Special::LinkToDevZero => (link("/dev/zero")?, "not a regular file (a character device)"),
        Special::BrokenLink => (link("/nonexistent/npurt")?, "No such file"),
        Special::Fifo => {
            let p = dir.join("fifo");
            let made = std::process::Command::new("mkfifo").arg(&p).status().is_ok_and(|s| s.success());
            if !made {
                eprintln!("SKIP the FIFO case: mkfifo is not available here");
                return None;
            }
            (p, "not a regular file (a FIFO)")
        }
    })
}

fn special() -> impl Strategy<Value = Special> {
    prop::sample::select(vec![
        Special::DevZero,
        Special::DevNull,
        Special::DevUrandom,
        Special::Directory,
        Special::LinkToDevZero,
        Special::Fifo,
        Special::BrokenLink,
    ])
}

proptest! {
    #![proptest_config(crate::config(32))]

    /// `npy::read`, `BertConfig::from_file` and `SafetensorsFile::open` refuse each special
    /// path naming it, allocating at most a few KiB.
    #[test]
    fn non_regular_files_are_refused_naming_the_path(s in special(), loader in 0usize..3) {
        let dir = TempDir::new("special");
        let Some((p, words)) = make(dir.path(), s) else { return Ok(()) };
        let (msg, largest) = largest_allocation(|| match loader {
            0 => npurt::npy::read(&p).map(drop).unwrap_err().to_string(),
            1 => BertConfig::from_file(&p).map(drop).unwrap_err().to_string(),
            _ => SafetensorsFile::open(&p).map(drop).unwrap_err().to_string(),
        });
        prop_assert!(largest <= 64 << 10, "{} bytes allocated refusing {}", largest, p.display());
        prop_assert!(msg.contains(&p.display().to_string()) && msg.contains(words), "{:?}: {}", s, msg);
    }
}
