//! The committed header `include/npurt.h` is what cbindgen (the version pinned in
//! Cargo.toml) generates from `src/` now, and it declares every name of the C API.
//! `NPURT_BLESS=1 cargo test -p npurt-capi --test header` rewrites it.

use std::path::Path;

fn generate() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("capi/cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("UTF-8 header")
}

#[test]
fn the_committed_header_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/npurt.h");
    let fresh = generate();
    if std::env::var_os("NPURT_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/npurt.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let line = committed.lines().zip(fresh.lines()).position(|(a, b)| a != b);
        panic!(
            "capi/include/npurt.h is not what cbindgen generates from capi/src (first difference at line {}); \
             regenerate it with `NPURT_BLESS=1 cargo test -p npurt-capi --test header` and commit it",
            line.map_or_else(|| "end".to_string(), |l| (l + 1).to_string())
        );
    }
}

/// Every function, type and constant the C API promises appears in the header.
#[test]
fn the_header_declares_every_name() {
    let h = generate();
    let functions = [
        "npurt_runtime_new",
        "npurt_runtime_free",
        "npurt_runtime_info",
        "npurt_device_count",
        "npurt_tensor_new",
        "npurt_tensor_from_host",
        "npurt_tensor_to_host",
        "npurt_tensor_info",
        "npurt_tensor_free",
        "npurt_execute",
        "npurt_stream_new",
        "npurt_stream_synchronize",
        "npurt_stream_free",
        "npurt_event_new",
        "npurt_event_record",
        "npurt_stream_wait_event",
        "npurt_event_synchronize",
        "npurt_event_elapsed_ms",
        "npurt_event_free",
        "npurt_last_error",
        "npurt_status_name",
        "npurt_version",
        "npurt_synchronize",
        "npurt_event_query",
        "npurt_release_cached",
        "npurt_graph_input_count",
        "npurt_graph_input_info",
        "npurt_get_memory_info",
        "npurt_graph_from_bert",
        "npurt_graph_run",
        "npurt_graph_free",
        "npurt_embedder_new",
        "npurt_embed",
        "npurt_embedder_free",
    ];
    for f in functions {
        let declared = h.contains(&format!(" {f}(")) || h.contains(&format!("*{f}("));
        assert!(declared, "function {f} missing from the header");
    }
    let types = [
        "typedef int32_t npurt_status;",
        "typedef int32_t npurt_dtype;",
        "typedef int32_t npurt_unit_class;",
        "typedef int32_t npurt_tier;",
        "typedef struct npurt_runtime npurt_runtime;",
        "typedef struct npurt_tensor npurt_tensor;",
        "typedef struct npurt_stream npurt_stream;",
        "typedef struct npurt_event npurt_event;",
        "typedef struct npurt_graph npurt_graph;",
        "typedef struct npurt_embedder npurt_embedder;",
        "} npurt_report;",
        "} npurt_memory_info;",
        "char implementation[96];",
        "char unit[32];",
    ];
    for t in types {
        assert!(h.contains(t), "{t} missing from the header");
    }
    let constants = [
        "NPURT_OK 0",
        "NPURT_ERR_INVALID_ARGUMENT",
        "NPURT_ERR_VALIDATION",
        "NPURT_ERR_OUT_OF_MEMORY",
        "NPURT_ERR_DEVICE",
        "NPURT_ERR_BACKEND_UNAVAILABLE",
        "NPURT_ERR_UNSUPPORTED",
        "NPURT_ERR_INTERNAL",
        "NPURT_ERR_INVALID_HANDLE",
        "NPURT_F32",
        "NPURT_F16",
        "NPURT_BF16",
        "NPURT_I32",
        "NPURT_I64",
        "NPURT_U8",
        "NPURT_UNIT_CUBE",
        "NPURT_UNIT_VECTOR",
        "NPURT_UNIT_SCALAR",
        "NPURT_TIER_REFERENCE",
        "NPURT_TIER_GENERIC",
        "NPURT_TIER_FAST",
        "NPURT_VERSION_MAJOR",
        "NPURT_VERSION_MINOR",
        "NPURT_VERSION_PATCH",
    ];
    for c in constants {
        assert!(h.contains(&format!("#define {c}")), "#define {c} missing from the header");
    }
}

/// The pkg-config files name the package's version and the library.
#[test]
fn the_pkg_config_files_name_this_version() {
    for f in ["npurt.pc", "npurt.pc.in"] {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).expect(f);
        assert!(text.contains(&format!("\nVersion: {}\n", env!("CARGO_PKG_VERSION"))), "{f}: version");
        assert!(text.contains("Libs: -L${libdir} -lnpurt"), "{f}: libs");
    }
}

/// docs/C_API.md shows the C example the tests run, as it is.
#[test]
fn the_documented_example_is_the_tested_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(dir.join("tests/c/basic.c")).expect("tests/c/basic.c");
    let doc = std::fs::read_to_string(dir.join("../docs/C_API.md")).expect("docs/C_API.md");
    assert!(doc.contains(&format!("```c\n{example}```")), "docs/C_API.md's example differs from tests/c/basic.c");
}
