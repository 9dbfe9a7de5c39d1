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
        let base = || {
            bindgen::Builder::default()
                .header(wrapper_path.display().to_string())
                .clang_arg(format!("-I{}", inc.display()))
                .clang_arg(format!("-I{}", acl.display()))
                .default_enum_style(bindgen::EnumVariation::Consts)
                .layout_tests(false)
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
        let allow = "#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, unused_imports, clippy::all)]";
        let module = format!(
            "{allow}\nmod bindings {{\nuse crate::types::*;\n{text}\n}}\n{allow}\nmod layouts {{\n{layouts}\n}}\n{checks}{layout_checks}"
        );
        std::fs::write(out.join("abi_check.rs"), module).expect("write abi_check.rs");
        println!("cargo:rustc-cfg=acl_bindgen_check");
        println!("cargo:warning=acl-sys: ABI check generated for {n} runtime functions against {}", inc.display());
    }
}
