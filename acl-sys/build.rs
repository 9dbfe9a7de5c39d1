//! With feature `bindgen` and CANN headers present, generates bindings from the real
//! headers and compile-time checks that every hand-written function-pointer type in
//! `src/fns.rs` equals the generated prototype. Two passes, each run when its headers
//! are found:
//!
//! - runtime (`[Runtime]` functions, `#[repr(C)]` struct layouts): `acl/acl_rt.h` & co.
//!   under `ACL_INCLUDE_DIR`, `$ASCEND_TOOLKIT_HOME/include` or `$ASCEND_HOME_PATH/include`
//!   (`build/runtime.rs`);
//! - aclnn (`[NnOpBase]` and `[OpApi]` functions): `aclnn/aclnn_base.h` and `aclnn_*.h`
//!   under the directories of `ACLNN_INCLUDE_DIRS`, or an installed toolkit's `include/`
//!   and `include/aclnnop/`, read by bindgen in C++ mode (`build/aclnn.rs`).
//!
//! Without the feature (or without headers) nothing is generated and the checked-in
//! declarations are used as they are.

#[cfg(feature = "bindgen")]
#[path = "build/aclnn.rs"]
mod aclnn;
#[cfg(feature = "bindgen")]
#[path = "build/common.rs"]
mod common;
#[cfg(feature = "bindgen")]
#[path = "build/headers.rs"]
mod headers;
#[cfg(feature = "bindgen")]
#[path = "build/runtime.rs"]
mod runtime;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=src/fns.rs");
    for v in ["ACL_INCLUDE_DIR", "ACLNN_INCLUDE_DIRS", "ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo::rustc-check-cfg=cfg(acl_bindgen_check)");
    #[cfg(feature = "bindgen")]
    abi_check();
}

/// Writes `$OUT_DIR/abi_check.rs` (included by `src/lib.rs` under `cfg(acl_bindgen_check)`)
/// with whatever the two passes generated.
#[cfg(feature = "bindgen")]
fn abi_check() {
    let fns_src = std::fs::read_to_string("src/fns.rs").expect("read src/fns.rs");
    let mut module = String::new();
    if let Some(m) = runtime::check(&fns_src) {
        module.push_str(&m);
    }
    if let Some(m) = aclnn::check(&fns_src) {
        module.push_str(&m);
    }
    if module.is_empty() {
        return;
    }
    std::fs::write(common::out_dir().join("abi_check.rs"), module).expect("write abi_check.rs");
    println!("cargo:rustc-cfg=acl_bindgen_check");
}
