//! Raw C ABI of Huawei CANN, resolved at run time.
//!
//! * [`types`]: opaque handles, `i32` newtypes for every ACL enum, flags and structs.
//! * [`codes`]: every `aclError` / `aclnnStatus` value of CANN's headers, with names.
//! * [`fns`]: one function-pointer type per C function ([`pfn`]) and the lazily
//!   resolved table [`Api`] (`api.aclrtMalloc()?` resolves once and caches).
//! * [`Api::load`]: library discovery (explicit directory, `ASCEND_TOOLKIT_HOME`,
//!   `ASCEND_HOME_PATH`, `/usr/local/Ascend/ascend-toolkit/latest`, the system loader).
//! * [`result`]: the checked layer, one function per call npurt makes: it resolves the
//!   symbol, calls it, and turns a failure into an [`AclError`] carrying the code, its
//!   name, the calling function and the text of `aclGetRecentErrMsg`; out-parameters
//!   come back as return values.
//! * [`soc`]: the modelled figures of each Ascend SoC (cores, clock, HBM), plain data.
//!
//! No policy lives here: no allocation logic, no retries, no device selection.
//!
//! # Safety
//!
//! Every function pointer handed out by [`Api`] is valid while that `Api` is alive
//! (the libraries are unloaded when it drops). Calling one is `unsafe`: the caller
//! upholds the C function's own contract (valid pointers, sizes, handle lifetimes) as
//! CANN's headers and documentation state it (summarised in docs/ASCEND.md).

pub mod codes;
mod elf;
pub mod emu;
mod error;
pub mod fns;
mod load;
pub mod result;
pub mod soc;
pub mod types;

pub use error::{AclError, LoadError};
pub use fns::{Api, LibKind, OPTIONAL, SYMBOLS, pfn};
pub use load::{LoadConfig, NNOPBASE_LIB, OPAPI_LIB, OPAPI_SPLIT_LIBS, RUNTIME_LIBS, search_dirs};
pub use types::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_names() {
        assert_eq!(codes::name(207001), "ACL_ERROR_RT_MEMORY_ALLOCATION");
        assert_eq!(codes::name(100002), "ACL_ERROR_REPEAT_INITIALIZE");
        assert_eq!(codes::name(161002), "ACLNN_ERR_PARAM_INVALID");
        assert_eq!(codes::name(561103), "ACLNN_ERR_INNER_NULLPTR");
        assert_eq!(codes::name(0), "ACL_SUCCESS");
        assert_eq!(codes::name(107999), "ACL_ERROR_RT_<unlisted parameter error>");
        assert_eq!(codes::name(-5), "<unknown status code>");
    }

    #[test]
    fn enum_values_match_the_headers() {
        assert_eq!(ACL_BF16.0, 27);
        assert_eq!(ACL_FORMAT_ND.0, 2);
        assert_eq!(ACL_MEMCPY_DEVICE_TO_HOST.0, 2);
        assert_eq!(ACL_EVENT_RECORDED_STATUS_COMPLETE.0, 1);
        assert_eq!(ACL_EVENT_STATUS_COMPLETE.0, 0);
        assert_eq!(ACL_HBM_MEM.0, 1);
        assert_eq!(aclDataType(27).name(), Some("ACL_BF16"));
        assert_eq!(aclDataType(5).name(), None);
        assert_eq!(ACL_FLOAT16.size(), Some(2));
    }

    #[test]
    fn missing_library_is_an_error_naming_it() {
        let tmp = tempfile::Builder::new().prefix("acl-sys-empty-").tempdir().unwrap();
        let dir = tmp.path();
        let e = Api::load(&LoadConfig { lib_dir: Some(dir.to_path_buf()), no_system_loader: true }).unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, LoadError::LibraryNotFound { .. }), "{s}");
        assert!(s.contains("libascendcl.so") && s.contains(&dir.display().to_string()), "{s}");
    }

    #[test]
    fn unloadable_library_is_an_error_naming_the_path() {
        let tmp = tempfile::Builder::new().prefix("acl-sys-bad-").tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("libascendcl.so"), b"this is not a shared object").unwrap();
        let e = Api::load(&LoadConfig { lib_dir: Some(dir.to_path_buf()), no_system_loader: true }).unwrap_err();
        assert!(matches!(&e, LoadError::LibraryOpen { path, .. } if path.contains("libascendcl.so")), "{e}");
    }

    #[test]
    fn symbol_table_is_consistent() {
        let mut names: Vec<&str> = SYMBOLS.iter().map(|(n, _)| *n).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate symbol");
        for o in OPTIONAL {
            assert!(names.binary_search(o).is_ok(), "optional {o} is not declared");
        }
        // Every operator has both phases.
        for (s, k) in SYMBOLS {
            if let Some(op) = s.strip_suffix("GetWorkspaceSize") {
                assert_eq!(*k, LibKind::OpApi);
                assert!(names.binary_search(&op).is_ok(), "{op} lacks phase 2");
            }
        }
    }

    #[test]
    fn error_display_carries_everything() {
        let e = AclError::status(207001, "aclrtMalloc", Some("oom ".into()));
        assert_eq!(e.to_string(), "aclrtMalloc returned 207001 (ACL_ERROR_RT_MEMORY_ALLOCATION): oom");
        assert_eq!((e.code(), e.call(), e.message()), (Some(207001), Some("aclrtMalloc"), Some("oom ")));
        let e = AclError::status(207001, "aclrtMalloc", Some("  ".into()));
        assert_eq!(e.to_string(), "aclrtMalloc returned 207001 (ACL_ERROR_RT_MEMORY_ALLOCATION)");
        let e = AclError::Null { call: "aclrtGetSocName", message: None };
        assert_eq!(e.to_string(), "aclrtGetSocName returned NULL: ");
        let load = LoadError::SymbolMissing { symbol: "aclnnAdd".into(), libraries: vec!["libopapi.so".into()] };
        let e = AclError::from(load.clone());
        assert_eq!(e.to_string(), load.to_string());
        assert!(e.is_missing() && e.code().is_none() && e.call().is_none());
    }
}

/// Compile-time ABI check against the real headers (feature `bindgen`, headers found):
/// each `const _: pfn::X = bindings::X as pfn::X;` fails to compile when the
/// hand-written prototype differs from the header's.
#[cfg(acl_bindgen_check)]
#[allow(unsafe_code)]
mod abi_check {
    include!(concat!(env!("OUT_DIR"), "/abi_check.rs"));
}
