//! Scratch directories of a test process: `<tmp>/npurt-test-<pid>/<name>`, removed when the
//! process exits normally. A process killed before that leaves its root behind; the next
//! test process that asks for a scratch directory removes the roots of processes that no
//! longer run (`/proc/<pid>` gone), so runs do not accumulate them in the temp dir.
//!
//! The fake CANN toolkits of [`crate::emu::fake_toolkit`] live here: the backend under test
//! opens their libraries by path at any time during the process, so they stay until exit.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const PREFIX: &str = "npurt-test-";

/// This process's scratch root, made (and its removal at exit registered) on first use.
fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let tmp = std::env::temp_dir();
        remove_roots_of_exited_processes(&tmp);
        let root = tmp.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("create the test scratch root");
        extern "C" fn remove_root() {
            if let Some(root) = ROOT.get() {
                let _ = std::fs::remove_dir_all(root);
            }
        }
        // SAFETY: `atexit` takes a plain function without arguments; `remove_root` does not
        // unwind (it ignores the removal's error) and reads a static that outlives `exit`.
        if unsafe { libc::atexit(remove_root) } != 0 {
            eprintln!("note: atexit refused; {} stays until the next test run", root.display());
        }
        root
    })
}

/// Removes `<tmp>/npurt-test-<pid>` for every pid with no `/proc/<pid>` (on a system
/// without `/proc`, nothing).
fn remove_roots_of_exited_processes(tmp: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `<tmp>/npurt-test-<pid>/<name>`, created where missing (what an earlier call of this
/// process put there stays: tests of one process may share a directory by name).
pub fn dir(name: &str) -> PathBuf {
    let d = root().join(name);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
    d
}

/// A path for a file `name` in this process's scratch root (not created).
pub fn file(name: &str) -> PathBuf {
    root().join(name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn scratch_dirs_live_under_this_process_root() {
        let d = super::dir("probe");
        assert!(d.is_dir());
        assert!(d.parent().unwrap().ends_with(format!("npurt-test-{}", std::process::id())));
        std::fs::write(d.join("x"), b"1").unwrap();
        // A second call gives the same directory, its files kept.
        assert_eq!(super::dir("probe"), d);
        assert!(d.join("x").exists());
    }

    #[test]
    fn roots_of_exited_processes_are_removed() {
        let tmp = std::env::temp_dir();
        // A pid above the kernel's maximum (4194304) never runs.
        let stale = tmp.join("npurt-test-4294967290");
        std::fs::create_dir_all(stale.join("lib64")).unwrap();
        let live = tmp.join(format!("npurt-test-{}", std::process::id()));
        std::fs::create_dir_all(&live).unwrap();
        super::remove_roots_of_exited_processes(&tmp);
        if std::path::Path::new("/proc/self").exists() {
            assert!(!stale.exists(), "the root of a process that does not run is removed");
        } else {
            eprintln!("SKIP the removal check: no /proc");
            let _ = std::fs::remove_dir_all(&stale);
        }
        assert!(live.exists(), "this process's root stays");
    }
}
