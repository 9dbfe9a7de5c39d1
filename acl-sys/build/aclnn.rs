//! The aclnn pass: bindgen in C++ mode over the aclnn headers (`aclnn/aclnn_base.h`,
//! which pulls in `aclnn/acl_meta.h`, and the operator headers `aclnn_*.h`), with
//! acl-sys's own enum and opaque types standing in for the generated ones; each
//! `[NnOpBase]` / `[OpApi]` function-pointer type is asserted equal to the header's.
//!
//! Where the headers come from:
//! - `ACLNN_INCLUDE_DIRS`, a `:`-separated list of absolute directories, each put on the
//!   include path and searched (up to 8 levels deep) for `aclnn_*.h` and
//!   `aclnn/acl_meta.h` — e.g. hicann/opbase's `include/nnopbase` and checkouts of the
//!   ops repositories (hicann/ops-math, ops-nn, ...), whose `op_api/` directories hold
//!   the operator headers;
//! - otherwise an installed toolkit: `$ASCEND_TOOLKIT_HOME/include` (or
//!   `$ASCEND_HOME_PATH/include`) and its `aclnnop/`, when `include/aclnn/aclnn_base.h`
//!   is there.
//!
//! The headers include `acl/acl_base.h`, which comes from CANN's runtime headers: the
//! runtime include directory (`ACL_INCLUDE_DIR`, the toolkit's `include/`) is put on the
//! include path after the aclnn directories. The operator headers include
//! `aclnn_util.h` for `ACLNN_API`; the real one of recent releases also pulls in opbase
//! internals, so clang is given a stub that only defines `ACLNN_API`, first on the include
//! path; a header that sits next to a real `aclnn_util.h` is read from an unchanged copy
//! elsewhere, so that its quoted include reaches the stub too.
//!
//! Only headers that declare one of acl-sys's symbols are read (a prototype `NAME(...);`
//! outside comments; calls in samples and wrappers do not count), and `experimental/`,
//! `example(s)/` and `test(s)/` directories are not searched, so a whole repository
//! checkout or toolkit can be given without parsing thousands of unrelated operators.
//! A declared symbol no header declares is a `cargo:warning` naming it.

use crate::common::{self, ALLOW, ENUMS};
use crate::headers::{MAX_DEPTH, declared_in, scan, short_name};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// acl-sys's opaque aclnn types (`crate::types`): the generated ones are blocklisted so
/// that a prototype matches only with exactly these pointee types.
const OPAQUE: &[&str] = &[
    "aclTensor",
    "aclScalar",
    "aclIntArray",
    "aclFloatArray",
    "aclBoolArray",
    "aclTensorList",
    "aclScalarList",
    "aclOpExecutor",
];

/// The aclnn include directories and where they were found, or `None`.
fn include_dirs() -> Option<(Vec<PathBuf>, String)> {
    if let Some(v) = std::env::var_os("ACLNN_INCLUDE_DIRS") {
        let dirs: Vec<PathBuf> = std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect();
        if !dirs.is_empty() {
            return Some((dirs, "ACLNN_INCLUDE_DIRS".into()));
        }
    }
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        let Some(root) = std::env::var_os(var) else { continue };
        let inc = PathBuf::from(root).join("include");
        if inc.join("aclnn/aclnn_base.h").is_file() {
            let mut dirs = vec![inc.clone()];
            if inc.join("aclnnop").is_dir() {
                dirs.push(inc.join("aclnnop"));
            }
            return Some((dirs, format!("${var}/include")));
        }
    }
    None
}

/// The headers under `dirs` that declare a symbol of `wanted` (aclnn_base.h first, as every
/// operator header includes it) and for each symbol the first header that declares it.
fn find_headers<'a>(
    dirs: &[PathBuf],
    origin: &str,
    wanted: &'a HashSet<&'a str>,
) -> (Vec<PathBuf>, BTreeMap<&'a str, String>) {
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for d in dirs {
        println!("cargo:rerun-if-changed={}", d.display());
        if d.is_dir() {
            scan(d, MAX_DEPTH, &mut seen, &mut files);
        } else {
            println!("cargo:warning=acl-sys: {} (from {origin}) is not a directory", d.display());
        }
    }
    let mut unique = HashSet::new();
    files.retain(|f| unique.insert(f.canonicalize().unwrap_or_else(|_| f.clone())));
    let mut headers: Vec<PathBuf> = Vec::new();
    let mut where_: BTreeMap<&str, String> = BTreeMap::new();
    for f in &files {
        let Ok(src) = std::fs::read_to_string(f) else { continue };
        let names = declared_in(&src, wanted);
        if names.is_empty() {
            continue;
        }
        for n in names {
            where_.entry(n).or_insert_with(|| short_name(f, dirs));
        }
        headers.push(f.clone());
    }
    // aclnn_base.h (and through it acl_meta.h) first, as every operator header does.
    headers.sort_by_key(|h| h.file_name().is_none_or(|n| n != "aclnn_base.h"));
    (headers, where_)
}

/// Writes the `aclnn_util.h` stub (only `ACLNN_API`) into a directory of its own under
/// `out` and returns that directory.
fn write_stub(out: &Path) -> PathBuf {
    let stub_dir = out.join("aclnn-stub");
    std::fs::create_dir_all(&stub_dir).expect("create aclnn-stub");
    std::fs::write(
        stub_dir.join("aclnn_util.h"),
        "/* Stub written by acl-sys's build script: the operator headers include aclnn_util.h only for ACLNN_API. */\n#ifndef ACLNN_API\n#define ACLNN_API\n#endif\n",
    )
    .expect("write aclnn_util.h stub");
    stub_dir
}

/// Writes the wrapper header that includes every header, staging the ones next to a real
/// `aclnn_util.h`; returns its path and the original directories of the staged headers.
fn write_wrapper(out: &Path, headers: &[PathBuf]) -> (PathBuf, Vec<PathBuf>) {
    // A quoted include looks in the includer's own directory before any -I directory, so
    // a header next to a real aclnn_util.h (a toolkit's aclnnop/) would get that one, and
    // recent ones pull in opbase internals (opdev/platform.h, C++ namespaces). Such
    // headers are read from an unchanged copy in a directory of their own, where the
    // lookup falls through to the stub; their original directory stays on the include
    // path (after the stub) for whatever else they include.
    let staged = out.join("aclnn-staged");
    let _ = std::fs::remove_dir_all(&staged);
    let mut source_dirs: Vec<PathBuf> = Vec::new();
    let mut wrapper = String::new();
    for h in headers {
        println!("cargo:rerun-if-changed={}", h.display());
        let dir = h.parent().unwrap_or(Path::new("."));
        let read_from = if dir.join("aclnn_util.h").is_file() {
            let k = source_dirs.iter().position(|d| d == dir).unwrap_or_else(|| {
                source_dirs.push(dir.to_path_buf());
                source_dirs.len() - 1
            });
            let copy = staged.join(k.to_string()).join(h.file_name().expect("header file name"));
            std::fs::create_dir_all(copy.parent().expect("staged dir")).expect("create aclnn-staged");
            std::fs::copy(h, &copy).expect("stage an aclnn header");
            copy
        } else {
            h.clone()
        };
        wrapper.push_str(&format!("#include \"{}\"\n", read_from.display()));
    }
    let wrapper_path = out.join("aclnn_wrapper.hpp");
    std::fs::write(&wrapper_path, wrapper).expect("write aclnn wrapper");
    (wrapper_path, source_dirs)
}

/// Where bindgen reads the headers from: the wrapper, the stub directory, the aclnn
/// directories, the runtime headers and the staged headers' original directories.
struct Inputs<'a> {
    wrapper_path: &'a Path,
    stub_dir: &'a Path,
    dirs: &'a [PathBuf],
    source_dirs: &'a [PathBuf],
    shown: &'a str,
    origin: &'a str,
}

/// bindgen's bindings of the `declared` functions (panics, failing the build, when clang
/// cannot read the headers).
fn generate(i: &Inputs, declared: &[String]) -> String {
    let mut b = common::builder()
        .header(i.wrapper_path.display().to_string())
        .clang_args(["-x", "c++", "-std=c++14"])
        .clang_arg(format!("-I{}", i.stub_dir.display()));
    for d in i.dirs {
        b = b.clang_arg(format!("-I{}", d.display()));
    }
    // acl/acl_base.h: from an aclnn directory if one has it, else the runtime headers.
    let runtime_inc = common::runtime_include_candidates()
        .into_iter()
        .find(|d| d.join("acl/acl_base.h").is_file() || d.join("acl_base.h").is_file());
    if let Some(inc) = &runtime_inc {
        b = b.clang_args(common::runtime_include_args(inc));
    }
    for d in i.source_dirs {
        b = b.clang_arg(format!("-I{}", d.display()));
    }
    for n in declared {
        b = b.allowlist_function(n);
    }
    for t in ENUMS.iter().chain(OPAQUE) {
        b = b.blocklist_type(t);
    }
    match b.generate() {
        Ok(bindings) => bindings.to_string(),
        Err(e) => panic!(
            "acl-sys: bindgen could not read the aclnn headers under {} (from {}): {e}. \
             They include acl/acl_base.h from CANN's runtime headers ({}); set ACL_INCLUDE_DIR to them if it is missing.",
            i.shown,
            i.origin,
            runtime_inc.map_or("none found".into(), |d| format!("using {}", d.display()))
        ),
    }
}

/// One assertion per declared function the bindings have (each naming its header), a
/// warning for each they lack; returns the assertions and how many functions were missing.
fn assertions(declared: &[String], text: &str, where_: &BTreeMap<&str, String>, shown: &str) -> (String, usize) {
    let mut checks = String::new();
    let mut missing = Vec::new();
    for name in declared {
        if text.contains(&format!("pub fn {name}(")) {
            // The header sits on the assertion's line, so a mismatch names both.
            let from = where_.get(name.as_str()).map_or(String::new(), |p| p.replace("*/", "*_/"));
            checks.push_str(&format!("const _: p::{name} = /* {from} */ h::{name} as p::{name};\n"));
        } else {
            println!("cargo:warning=acl-sys: {name} is declared by acl-sys but not in the aclnn headers under {shown}");
            missing.push(name.as_str());
        }
    }
    (checks, missing.len())
}

/// The generated module text (bindings and assertions), or `None` when no aclnn headers
/// were found.
pub fn check(fns_src: &str) -> Option<String> {
    let Some((dirs, origin)) = include_dirs() else {
        println!(
            "cargo:warning=acl-sys: feature `bindgen` is on but no aclnn headers were found (set ACLNN_INCLUDE_DIRS, or ASCEND_TOOLKIT_HOME to a toolkit with include/aclnn/aclnn_base.h); aclnn ABI check skipped"
        );
        return None;
    };
    let shown = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":");
    let declared = common::declared(fns_src, &["NnOpBase", "OpApi"]);
    let wanted: HashSet<&str> = declared.iter().map(String::as_str).collect();

    // The headers that declare a symbol acl-sys declares, and for each symbol the first.
    let (headers, where_) = find_headers(&dirs, &origin, &wanted);
    if headers.is_empty() {
        println!(
            "cargo:warning=acl-sys: no header under {shown} (from {origin}) declares an aclnn function acl-sys declares; aclnn ABI check skipped"
        );
        return None;
    }

    let out = common::out_dir();
    let stub_dir = write_stub(&out);
    let (wrapper_path, source_dirs) = write_wrapper(&out, &headers);
    let inputs = Inputs {
        wrapper_path: &wrapper_path,
        stub_dir: &stub_dir,
        dirs: &dirs,
        source_dirs: &source_dirs,
        shown: &shown,
        origin: &origin,
    };
    let text = generate(&inputs, &declared);

    let (checks, missing) = assertions(&declared, &text, &where_, &shown);
    let n = declared.len() - missing;
    println!(
        "cargo:warning=acl-sys: aclnn ABI check generated for {n} aclnn functions ({missing} not found) from {} headers under {shown} (from {origin})",
        headers.len()
    );
    Some(format!(
        "{ALLOW}\nmod aclnn_bindings {{\nuse crate::types::*;\n{text}\n}}\n{ALLOW}\nmod aclnn_checks {{\nuse super::aclnn_bindings as h;\nuse crate::fns::pfn as p;\n{checks}}}\n"
    ))
}
