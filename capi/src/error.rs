//! Status codes, the calling thread's last error message, and the guard every exported
//! function runs its body in (panics caught, errors turned into a status).

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The result of every fallible call: `NPURT_OK` or one `NPURT_ERR_*` code.
pub type npurt_status = i32;

/// Success.
pub const NPURT_OK: npurt_status = 0;
/// A NULL pointer, an out-of-range enum value, a malformed or unknown option, an unknown
/// op, a byte count or buffer size that does not match, a path that cannot be read.
pub const NPURT_ERR_INVALID_ARGUMENT: npurt_status = 1;
/// The runtime refused the operands: shapes, dtypes or attributes an op cannot accept,
/// inputs that do not match a compiled graph, malformed model files.
pub const NPURT_ERR_VALIDATION: npurt_status = 2;
/// The device memory, or the pool's `pool_limit`, could not satisfy a request.
pub const NPURT_ERR_OUT_OF_MEMORY: npurt_status = 3;
/// A device or driver failure: a device index that does not exist, too many streams,
/// a failure of queued work reported at a synchronisation.
pub const NPURT_ERR_DEVICE: npurt_status = 4;
/// The backend asked for is not compiled in or not present on this machine.
pub const NPURT_ERR_BACKEND_UNAVAILABLE: npurt_status = 5;
/// A valid request the runtime does not implement (no kernel for these dtypes, a
/// precision or feature this build does not have).
pub const NPURT_ERR_UNSUPPORTED: npurt_status = 6;
/// A bug in npurt (a caught panic); the message says where.
pub const NPURT_ERR_INTERNAL: npurt_status = 7;
/// A handle that is no live handle of the type the argument takes: released already (a
/// use after release, a double release), of another type (a stream passed as a tensor),
/// or a value npurt never handed out. Detected through npurt's handle table, never by
/// reading the memory the pointer names; the message names the argument.
pub const NPURT_ERR_INVALID_HANDLE: npurt_status = 8;

/// A failure on its way to C: the status and the message `npurt_last_error` returns.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) status: npurt_status,
    pub(crate) msg: String,
}

pub(crate) type CResult<T = ()> = Result<T, Fail>;

impl Fail {
    pub(crate) fn new(status: npurt_status, msg: impl Into<String>) -> Fail {
        Fail { status, msg: msg.into() }
    }
    /// `NPURT_ERR_INVALID_ARGUMENT` with `msg`.
    pub(crate) fn arg(msg: impl Into<String>) -> Fail {
        Fail::new(NPURT_ERR_INVALID_ARGUMENT, msg)
    }
}

/// The status each kind of runtime error maps to.
pub(crate) fn status_of(e: &npurt::Error) -> npurt_status {
    use npurt::Error as E;
    match e {
        E::Invalid { .. } | E::Format { .. } => NPURT_ERR_VALIDATION,
        E::Config(_) | E::Io { .. } | E::Overflow { .. } => NPURT_ERR_INVALID_ARGUMENT,
        E::OutOfMemory { .. } => NPURT_ERR_OUT_OF_MEMORY,
        E::NoKernel { .. } | E::Unsupported(_) => NPURT_ERR_UNSUPPORTED,
        E::Async { .. } | E::Backend { .. } | E::Device { .. } => NPURT_ERR_DEVICE,
    }
}

impl From<npurt::Error> for Fail {
    fn from(e: npurt::Error) -> Fail {
        Fail { status: status_of(&e), msg: e.to_string() }
    }
}

thread_local! {
    /// This thread's last error message (empty until a call fails).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    // Interior NULs cannot cross as a C string: they are shown as spaces.
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, catching panics; a failure becomes its status and this thread's last error.
pub(crate) fn guard(f: impl FnOnce() -> CResult) -> npurt_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NPURT_OK,
        Ok(Err(fail)) => {
            set_last_error(&fail.msg);
            fail.status
        }
        Err(payload) => {
            set_last_error(&format!("internal error (panic): {}", runtime::error::panic_message(&*payload)));
            NPURT_ERR_INTERNAL
        }
    }
}

/// The calling thread's last error message: empty when no call of this thread has
/// failed. Valid until this thread's next npurt call; never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_last_error() -> *const c_char {
    match catch_unwind(|| LAST_ERROR.with(|l| l.borrow().as_ptr())) {
        Ok(p) => p,
        Err(_) => c"internal error".as_ptr(),
    }
}

/// The static name of `status` (`"NPURT_OK"`, `"NPURT_ERR_DEVICE"`, ...); `"NPURT_ERR_UNKNOWN"`
/// for a value that is no status. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_status_name(status: npurt_status) -> *const c_char {
    let name = match status {
        NPURT_OK => c"NPURT_OK",
        NPURT_ERR_INVALID_ARGUMENT => c"NPURT_ERR_INVALID_ARGUMENT",
        NPURT_ERR_VALIDATION => c"NPURT_ERR_VALIDATION",
        NPURT_ERR_OUT_OF_MEMORY => c"NPURT_ERR_OUT_OF_MEMORY",
        NPURT_ERR_DEVICE => c"NPURT_ERR_DEVICE",
        NPURT_ERR_BACKEND_UNAVAILABLE => c"NPURT_ERR_BACKEND_UNAVAILABLE",
        NPURT_ERR_UNSUPPORTED => c"NPURT_ERR_UNSUPPORTED",
        NPURT_ERR_INTERNAL => c"NPURT_ERR_INTERNAL",
        NPURT_ERR_INVALID_HANDLE => c"NPURT_ERR_INVALID_HANDLE",
        _ => c"NPURT_ERR_UNKNOWN",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: npurt_last_error returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(npurt_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_internal_with_its_message() {
        let s = guard(|| panic!("the kernel table is empty"));
        assert_eq!(s, NPURT_ERR_INTERNAL);
        assert_eq!(last(), "internal error (panic): the kernel table is empty");
    }

    #[test]
    fn errors_map_to_their_status() {
        let s = guard(|| Err(npurt::Error::Config("pool_limit".into()).into()));
        assert_eq!(s, NPURT_ERR_INVALID_ARGUMENT);
        assert_eq!(last(), "invalid configuration: pool_limit");
        assert_eq!(guard(|| Err(npurt::Error::invalid("MatMul", "k").into())), NPURT_ERR_VALIDATION);
        assert_eq!(guard(|| Err(npurt::Error::device("d").into())), NPURT_ERR_DEVICE);
        assert_eq!(guard(|| Err(npurt::Error::Unsupported("u".into()).into())), NPURT_ERR_UNSUPPORTED);
        assert_eq!(guard(|| Ok(())), NPURT_OK);
        // Success leaves the last message in place.
        assert_eq!(last(), "unsupported: u");
    }

    #[test]
    fn every_status_has_a_name() {
        for (s, n) in [
            (NPURT_OK, "NPURT_OK"),
            (NPURT_ERR_INVALID_ARGUMENT, "NPURT_ERR_INVALID_ARGUMENT"),
            (NPURT_ERR_VALIDATION, "NPURT_ERR_VALIDATION"),
            (NPURT_ERR_OUT_OF_MEMORY, "NPURT_ERR_OUT_OF_MEMORY"),
            (NPURT_ERR_DEVICE, "NPURT_ERR_DEVICE"),
            (NPURT_ERR_BACKEND_UNAVAILABLE, "NPURT_ERR_BACKEND_UNAVAILABLE"),
            (NPURT_ERR_UNSUPPORTED, "NPURT_ERR_UNSUPPORTED"),
            (NPURT_ERR_INTERNAL, "NPURT_ERR_INTERNAL"),
            (NPURT_ERR_INVALID_HANDLE, "NPURT_ERR_INVALID_HANDLE"),
            (-1, "NPURT_ERR_UNKNOWN"),
        ] {
            // SAFETY: npurt_status_name returns a static NUL-terminated string.
            assert_eq!(unsafe { CStr::from_ptr(npurt_status_name(s)) }.to_str().unwrap(), n);
        }
    }
}
