//! The acl-emu harness. The emulator is a cdylib exporting CANN's symbols plus control
//! functions (`aclEmuConfigure`, `aclEmuCounters`, `aclEmuCallCount`); the Ascend backend
//! loads it from a fake toolkit, and the tests open the same library to steer it. The
//! counters record is acl-sys's [`EmuCounters`], passed with its size.

use acl_sys::emu::AclEmuCountersFn;
pub use acl_sys::emu::EmuCounters;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The emulator library: `$ACL_EMU_LIB`, else next to the test binary
/// (`target/<profile>/libacl_emu.so` or `.../deps/`), built because acl-emu is a
/// dev-dependency and a workspace member.
pub fn emu_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ACL_EMU_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps.join("libacl_emu.so"), deps.parent()?.join("libacl_emu.so")].into_iter().find(|p| p.is_file())
}

/// Prints why and returns `None` when the emulator is absent (the test then skips,
/// visibly); fails the test instead when `NPURT_TEST_REQUIRE` names `acl_emu`
/// ([`crate::require`]).
pub fn emu_or_skip(test: &str) -> Option<PathBuf> {
    let p = emu_lib();
    if p.is_none() {
        let why = "libacl_emu.so not found next to the test binary (build acl-emu or set ACL_EMU_LIB)";
        crate::require::fail_if_required(test, "acl_emu", why);
        eprintln!("SKIP {test}: {why}");
    }
    p
}

/// `acl-toolkit-<tag>/lib64/{libascendcl,libnnopbase,libopapi}.so -> emulator` in the
/// process's [`scratch`](crate::scratch) root (removed at exit).
pub fn fake_toolkit(tag: &str, emu: &Path) -> PathBuf {
    let root = crate::scratch::dir(&format!("acl-toolkit-{tag}"));
    let lib = root.join("lib64");
    std::fs::create_dir_all(&lib).expect("create fake toolkit");
    for n in ["libascendcl.so", "libnnopbase.so", "libopapi.so"] {
        let l = lib.join(n);
        let _ = std::fs::remove_file(&l);
        std::os::unix::fs::symlink(emu, &l).expect("symlink emulator");
    }
    root
}

/// The emulator's control functions (the same library instance the backend loads, as
/// the dynamic loader opens a path once per process).
pub struct Emu {
    lib: libloading::Library,
}

impl Emu {
    pub fn open(path: &Path) -> Emu {
        // SAFETY: the emulator is a Rust cdylib without special initialisers.
        let lib = unsafe { libloading::Library::new(path) }.expect("open emulator");
        Emu { lib }
    }

    /// `aclEmuConfigure("key=value;...")`; 0 on success.
    pub fn configure(&self, spec: &str) -> i32 {
        let c = CString::new(spec).expect("spec without NUL");
        // SAFETY: exported as `int aclEmuConfigure(const char *)`; `c` outlives the call.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const std::ffi::c_char) -> i32>(b"aclEmuConfigure")
                .expect("aclEmuConfigure");
            f(c.as_ptr())
        }
    }

    /// `aclEmuCounters(&c, sizeof c)`: the objects the emulator holds now.
    pub fn counters(&self) -> EmuCounters {
        let mut c = EmuCounters::default();
        // SAFETY: exported as `int aclEmuCounters(EmuCounters *, size_t)` (`AclEmuCountersFn`),
        // the record of acl-sys both crates use; `c` is a valid, writable record of the
        // size passed for the duration of the call.
        unsafe {
            let f = self.lib.get::<AclEmuCountersFn>(b"aclEmuCounters").expect("aclEmuCounters");
            assert_eq!(f(&mut c, std::mem::size_of::<EmuCounters>()), 0);
        }
        c
    }

    /// How often the emulator's symbol `name` was called since the last configuration.
    pub fn calls(&self, name: &str) -> u64 {
        let c = CString::new(name).expect("name without NUL");
        // SAFETY: exported as `uint64_t aclEmuCallCount(const char *)`; `c` outlives the call.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const std::ffi::c_char) -> u64>(b"aclEmuCallCount")
                .expect("aclEmuCallCount");
            f(c.as_ptr())
        }
    }
}

/// Tests of one binary share the emulator: they take turns.
pub fn serial() -> MutexGuard<'static, ()> {
    static M: OnceLock<Mutex<()>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(())).lock().unwrap_or_else(|p| p.into_inner())
}
