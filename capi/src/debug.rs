//! Test hooks, compiled only with the cargo feature `debug-hooks` (the C tests build the
//! library with it; release builds do not have them).

use crate::error::{guard, npurt_status};
use crate::ffi::opt_str_arg;
use std::ffi::c_char;

/// A test hook, present only in a library built with the cargo feature `debug-hooks`
/// (`cargo build -p npurt-capi --features debug-hooks`; the header declares it when
/// `NPURT_DEBUG_HOOKS` is defined): panics inside npurt with `msg` (NULL: a fixed text),
/// so that a C test sees what a bug in npurt becomes at the boundary: `NPURT_ERR_INTERNAL`,
/// with `"internal error (panic): MSG"` as the last error.
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_debug_panic(msg: *const c_char) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let msg = unsafe { opt_str_arg(msg, "msg") }?.unwrap_or("npurt_debug_panic");
        panic!("{msg}")
    })
}

/// A test hook, present only with the cargo feature `debug-hooks`: the number of handles
/// (of every type) made and not yet released, in the whole process.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_debug_live_handles() -> usize {
    crate::handles::live()
}

/// At unload (process exit), a library built with `debug-hooks` says on stderr how many
/// handles were never released: the C tests fail on it. (Objects behind handles live in
/// npurt's handle table, so valgrind sees a forgotten handle as reachable, not lost.)
extern "C" fn report_unreleased() {
    let n = crate::handles::live();
    if n > 0 {
        use std::io::Write;
        // Nothing to do when stderr is closed.
        let _ = writeln!(std::io::stderr(), "npurt: {n} handle(s) never released");
    }
}

#[cfg(target_os = "linux")]
#[used]
// SAFETY: `.fini_array` holds pointers to functions taking and returning nothing, which
// the dynamic loader calls at unload; `report_unreleased` is one and does not unwind.
#[unsafe(link_section = ".fini_array")]
static REPORT_UNRELEASED: extern "C" fn() = report_unreleased;
