//! The runtime pass: bindgen over `acl_rt.h` & co. (C), with acl-sys's own enum and
//! struct types standing in for the generated ones; each `[Runtime]` function-pointer
//! type and each `#[repr(C)]` struct layout is asserted equal to the header's.

use crate::common::{self, ALLOW, ENUMS};
use std::path::PathBuf;

/// `#[repr(C)]` structs acl-sys declares by value; their layouts are checked too.
const STRUCTS: &[&str] = &[
    "aclrtMemLocation",
    "aclrtPhysicalMemProp",
    "aclrtMemPoolProps",
    "aclrtPtrAttributes",
    "aclrtMemUsageInfo",
    "aclrtUtilizationInfo",
    "aclrtMemAccessDesc",
    "aclCANNPackageVersion",
];

/// Directory that contains `acl/acl_rt.h` or `acl_rt.h`.
fn include_dir() -> Option<PathBuf> {
    common::runtime_include_candidates()
        .into_iter()
        .find(|d| d.join("acl/acl_rt.h").is_file() || d.join("acl_rt.h").is_file())
}

/// The generated module text (bindings, layouts, assertions), or `None` when no runtime
/// headers were found.
pub fn check(fns_src: &str) -> Option<String> {
    let Some(inc) = include_dir() else {
        println!(
            "cargo:warning=acl-sys: feature `bindgen` is on but no CANN runtime headers (acl/acl_rt.h) were found (set ACL_INCLUDE_DIR); runtime ABI check skipped"
        );
        return None;
    };
    let acl = if inc.join("acl/acl_rt.h").is_file() { inc.join("acl") } else { inc.clone() };
    let mut wrapper = String::new();
    for h in ["acl_base_rt.h", "acl_rt.h", "acl_rt_allocator.h", "acl_rt_memory_soma.h", "acl_mdl.h"] {
        if acl.join(h).is_file() {
            wrapper.push_str(&format!("#include \"{}\"\n", acl.join(h).display()));
        }
    }
    let wrapper_path = common::out_dir().join("acl_wrapper.h");
    std::fs::write(&wrapper_path, wrapper).expect("write wrapper");
    let base = || {
        common::builder()
            .header(wrapper_path.display().to_string())
            .clang_arg(format!("-I{}", inc.display()))
            .clang_arg(format!("-I{}", acl.display()))
    };
    // Pass 1, the functions: acl-sys's own enum newtypes and structs stand in for
    // bindgen's (blocklisted, then imported), so a prototype matches only if every
    // parameter has exactly the type acl-sys declares.
    let mut fns = base().allowlist_function("acl.*");
    for t in ENUMS.iter().chain(STRUCTS) {
        fns = fns.blocklist_type(t);
    }
    let text = fns.generate().expect("bindgen over the CANN headers").to_string();
    // Pass 2, the structs as the headers lay them out: size and alignment must equal
    // acl-sys's `#[repr(C)]` declarations.
    let mut lay = base();
    for t in STRUCTS {
        lay = lay.allowlist_type(t);
    }
    let layouts = lay.generate().expect("bindgen layouts").to_string();
    let mut layout_checks = String::new();
    for t in STRUCTS {
        if layouts.contains(&format!("pub struct {t} ")) {
            layout_checks.push_str(&format!(
                "const _: () = assert!(core::mem::size_of::<layouts::{t}>() == core::mem::size_of::<crate::types::{t}>() && core::mem::align_of::<layouts::{t}>() == core::mem::align_of::<crate::types::{t}>(), \"{t}: layout differs from the headers\");\n"
            ));
        } else {
            println!("cargo:warning=acl-sys: struct {t} is not in the headers found in {}", inc.display());
        }
    }
    // The checked functions: every runtime symbol acl-sys declares that the headers have.
    let mut checks = String::new();
    let mut n = 0;
    for name in common::declared(fns_src, &["Runtime"]) {
        if text.contains(&format!("pub fn {name}(")) {
            checks.push_str(&format!(
                "const _: crate::fns::pfn::{name} = bindings::{name} as crate::fns::pfn::{name};\n"
            ));
            n += 1;
        } else {
            println!("cargo:warning=acl-sys: {name} is not in the headers found in {}", inc.display());
        }
    }
    println!("cargo:warning=acl-sys: ABI check generated for {n} runtime functions against {}", inc.display());
    Some(format!(
        "{ALLOW}\nmod bindings {{\nuse crate::types::*;\n{text}\n}}\n{ALLOW}\nmod layouts {{\n{layouts}\n}}\n{checks}{layout_checks}"
    ))
}
