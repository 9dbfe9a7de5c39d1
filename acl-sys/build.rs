//! With feature `bindgen` and CANN headers present, generates bindings from the real
//! headers and compile-time checks that every hand-written function-pointer type in
//! `src/fns.rs` equals the generated prototype. Without the feature (or without headers)
//! nothing is generated and the checked-in declarations are used as they are.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/fns.rs");
    for v in ["ACL_INCLUDE_DIR", "ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo::rustc-check-cfg=cfg(acl_bindgen_check)");
    #[cfg(feature = "bindgen")]
    abi_check::run();
}

#[cfg(feature = "bindgen")]
mod abi_check {
    use std::path::PathBuf;

    /// Directory that contains `acl/acl_rt.h` or `acl_rt.h`.
    fn include_dir() -> Option<PathBuf> {
        let mut c: Vec<PathBuf> = Vec::new();
        if let Some(d) = std::env::var_os("ACL_INCLUDE_DIR") {
            c.push(d.into());
        }
        for v in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
            if let Some(d) = std::env::var_os(v) {
                c.push(PathBuf::from(d).join("include"));
            }
        }
        c.into_iter().find(|d| d.join("acl/acl_rt.h").is_file() || d.join("acl_rt.h").is_file())
    }

    /// C enum typedefs, which bindgen emits as `c_uint` or `c_int` depending on their
    /// values; the ABI is a 4-byte int either way, and acl-sys uses `i32` newtypes.
    const ENUMS: &[&str] = &[
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
    ];

    pub fn run() {
        let Some(inc) = include_dir() else {
            println!(
                "cargo:warning=acl-sys: feature `bindgen` is on but no CANN headers were found (set ACL_INCLUDE_DIR); ABI check skipped"
            );
            return;
        };
        let acl = if inc.join("acl/acl_rt.h").is_file() { inc.join("acl") } else { inc.clone() };
        let mut wrapper = String::new();
        for h in ["acl_base_rt.h", "acl_rt.h", "acl_rt_allocator.h", "acl_rt_memory_soma.h"] {
            if acl.join(h).is_file() {
                wrapper.push_str(&format!("#include \"{}\"\n", acl.join(h).display()));
            }
        }
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
        let wrapper_path = out.join("acl_wrapper.h");
        std::fs::write(&wrapper_path, wrapper).expect("write wrapper");
        let bindings = bindgen::Builder::default()
            .header(wrapper_path.display().to_string())
            .clang_arg(format!("-I{}", inc.display()))
            .clang_arg(format!("-I{}", acl.display()))
            .allowlist_function("acl.*")
            .default_enum_style(bindgen::EnumVariation::Consts)
            .layout_tests(false)
            .generate()
            .expect("bindgen over the CANN headers");
        let mut text = bindings.to_string();
        // Enums: 4-byte ints either way; acl-sys declares them as `i32` newtypes.
        for e in ENUMS {
            for raw in ["::std::os::raw::c_uint", "::std::os::raw::c_int", "u32", "i32"] {
                text = text.replace(&format!("pub type {e} = {raw};"), &format!("pub type {e} = crate::types::{e};"));
            }
        }
        // The checked functions: every runtime symbol acl-sys declares that the headers have.
        let fns_src = std::fs::read_to_string("src/fns.rs").expect("read src/fns.rs");
        let mut checks = String::new();
        let mut n = 0;
        for line in fns_src.lines() {
            let l = line.trim();
            let Some(rest) = l.strip_prefix("[Runtime] fn ") else { continue };
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if text.contains(&format!("pub fn {name}(")) {
                checks.push_str(&format!(
                    "const _: crate::fns::pfn::{name} = bindings::{name} as crate::fns::pfn::{name};\n"
                ));
                n += 1;
            } else {
                println!("cargo:warning=acl-sys: {name} is not in the headers found in {}", inc.display());
            }
        }
        let module = format!(
            "#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, clippy::all)]\nmod bindings {{\n{text}\n}}\n{checks}"
        );
        std::fs::write(out.join("abi_check.rs"), module).expect("write abi_check.rs");
        println!("cargo:rustc-cfg=acl_bindgen_check");
        println!("cargo:warning=acl-sys: ABI check generated for {n} runtime functions against {}", inc.display());
    }
}
