//! With feature `bindgen` and CANN headers present, generates bindings from the real
//! headers and compile-time checks that every hand-written function-pointer type in
//! `src/fns.rs` equals the generated prototype: the runtime pass (`[Runtime]` functions,
//! `#[repr(C)]` struct layouts) over `acl/acl_rt.h` & co. under `ACL_INCLUDE_DIR`,
//! `$ASCEND_TOOLKIT_HOME/include` or `$ASCEND_HOME_PATH/include` (`build/runtime.rs`).
//!
//! Without the feature (or without headers) nothing is generated and the checked-in
//! declarations are used as they are.

#[cfg(feature = "bindgen")]
#[path = "build/common.rs"]
mod common;
#[cfg(feature = "bindgen")]
#[path = "build/runtime.rs"]
mod runtime;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=src/fns.rs");
    for v in ["ACL_INCLUDE_DIR", "ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo::rustc-check-cfg=cfg(acl_bindgen_check)");
    #[cfg(feature = "bindgen")]
    abi_check();
}

/// Writes `$OUT_DIR/abi_check.rs` (included by `src/lib.rs` under `cfg(acl_bindgen_check)`)
/// with what the passes generated.
#[cfg(feature = "bindgen")]
fn abi_check() {
    let fns_src = std::fs::read_to_string("src/fns.rs").expect("read src/fns.rs");
    let mut module = String::new();
    if let Some(m) = runtime::check(&fns_src) {
        module.push_str(&m);
    }
    if module.is_empty() {
        return;
    }
    std::fs::write(common::out_dir().join("abi_check.rs"), module).expect("write abi_check.rs");
    println!("cargo:rustc-cfg=acl_bindgen_check");
}
