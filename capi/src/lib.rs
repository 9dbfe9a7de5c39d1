//! The C ABI of npurt: `libnpurt.so` / `libnpurt.a` with the header `include/npurt.h`
//! (generated from these sources by cbindgen; `tests/header.rs` checks it is current).
//!
//! Every exported function runs its body under [`error::guard`]: a panic is caught and
//! returned as `NPURT_ERR_INTERNAL`, a failure sets the calling thread's last error
//! message. Handles are entries of a table ([`handles`]) handed out as opaque pointers
//! that are never dereferenced: a released, foreign or wrong-type handle is
//! `NPURT_ERR_INVALID_HANDLE`. Every pointer argument is checked for NULL; out-parameters are written only on success (the size
//! queries `npurt_runtime_info` and `npurt_embed` excepted). docs/C_API.md describes the
//! conventions, ownership and threading rules.

#![allow(non_camel_case_types)]

#[cfg(feature = "debug-hooks")]
mod debug;
mod embed;
mod error;
mod execute;
mod ffi;
mod graph;
mod handles;
mod options;
mod runtime;
mod stream;
mod tensor;
mod types;

#[cfg(feature = "debug-hooks")]
pub use debug::*;
pub use embed::*;
pub use error::{
    NPURT_ERR_BACKEND_UNAVAILABLE, NPURT_ERR_DEVICE, NPURT_ERR_INTERNAL, NPURT_ERR_INVALID_ARGUMENT,
    NPURT_ERR_INVALID_HANDLE, NPURT_ERR_OUT_OF_MEMORY, NPURT_ERR_UNSUPPORTED, NPURT_ERR_VALIDATION, NPURT_OK,
    npurt_last_error, npurt_status, npurt_status_name,
};
pub use execute::*;
pub use graph::*;
pub use runtime::*;
pub use stream::*;
pub use tensor::*;
pub use types::*;

use std::ffi::c_char;

/// Major version of the library this header belongs to.
pub const NPURT_VERSION_MAJOR: i32 = 0;
/// Minor version.
pub const NPURT_VERSION_MINOR: i32 = 1;
/// Patch version.
pub const NPURT_VERSION_PATCH: i32 = 0;

/// The library's version, `"MAJOR.MINOR.PATCH"` (static; compare with the
/// `NPURT_VERSION_*` macros of the header the program was compiled with).
#[unsafe(no_mangle)]
pub extern "C" fn npurt_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_macros_are_the_package_version() {
        let v = format!("{NPURT_VERSION_MAJOR}.{NPURT_VERSION_MINOR}.{NPURT_VERSION_PATCH}");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        // SAFETY: npurt_version returns a static NUL-terminated string.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(npurt_version()) }.to_str().unwrap(), v);
    }
}
