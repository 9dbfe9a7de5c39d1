//! What both ABI passes share: the declarations read from `src/fns.rs`, the bindgen
//! settings, the types acl-sys declares itself.

use std::path::PathBuf;

pub fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"))
}

/// The names of the functions `src/fns.rs` declares in the given library groups
/// (`[Runtime] fn NAME(`, `[NnOpBase] fn NAME(`, `[OpApi] fn NAME(`), in file order.
pub fn declared(fns_src: &str, groups: &[&str]) -> Vec<String> {
    let mut names = Vec::new();
    for line in fns_src.lines() {
        let l = line.trim();
        for g in groups {
            if let Some(rest) = l.strip_prefix(&format!("[{g}] fn ")) {
                names.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
            }
        }
    }
    names
}

/// C enum typedefs, which bindgen emits as `c_uint` or `c_int` depending on their
/// values; the ABI is a 4-byte int either way, and acl-sys uses `i32` newtypes.
pub const ENUMS: &[&str] = &[
    "aclDataType",
    "aclFormat",
    "aclrtMemMallocPolicy",
    "aclrtMemcpyKind",
    "aclrtRunMode",
    "aclrtEventStatus",
    "aclrtEventRecordedStatus",
    "aclrtEventWaitStatus",
    "aclrtStreamStatus",
    "aclrtCallbackBlockType",
    "aclrtMemAttr",
    "aclSysParamOpt",
    "aclDeviceInfo",
    "aclCANNPackageName",
    "aclrtLastErrLevel",
    "aclrtHostRegisterType",
    "aclrtMemLocationType",
    "aclrtMemHandleType",
    "aclrtMemAllocationType",
    "aclrtMemGranularityOptions",
    "aclrtDeviceStatus",
    "aclrtDevAttr",
    "aclrtMemAccessFlags",
    "aclrtMemPoolAttr",
    "aclmdlRICaptureMode",
    "aclmdlRICaptureStatus",
];

/// Attributes of every generated module.
pub const ALLOW: &str =
    "#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, unused_imports, clippy::all)]";

/// bindgen settings common to both passes.
pub fn builder() -> bindgen::Builder {
    bindgen::Builder::default().default_enum_style(bindgen::EnumVariation::Consts).layout_tests(false)
}

/// Runtime include directories to try, in order: `ACL_INCLUDE_DIR`, then
/// `$ASCEND_TOOLKIT_HOME/include`, then `$ASCEND_HOME_PATH/include`.
pub fn runtime_include_candidates() -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("ACL_INCLUDE_DIR") {
        c.push(d.into());
    }
    for v in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        if let Some(d) = std::env::var_os(v) {
            c.push(PathBuf::from(d).join("include"));
        }
    }
    c
}

/// The include flags for a runtime include directory: the directory itself (for
/// `#include "acl/acl_base.h"`) and its `acl/` (CANN's headers also include each other
/// without the prefix, e.g. `error_codes/rt_error_codes.h`).
pub fn runtime_include_args(inc: &std::path::Path) -> Vec<String> {
    let mut a = vec![format!("-I{}", inc.display())];
    if inc.join("acl").is_dir() {
        a.push(format!("-I{}", inc.join("acl").display()));
    }
    a
}
