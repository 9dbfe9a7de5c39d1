//! The C tests: each program under `tests/c/` is compiled against the committed header
//! (`cc -std=c11 -Wall -Wextra -Werror -pedantic`, the C++ one with `c++ -std=c++17 ...`),
//! linked against the `libnpurt.so` cargo built next to this test binary (with the
//! `debug-hooks` feature, so that errors.c can provoke `NPURT_ERR_INTERNAL` and every
//! program's exit reports handles never released), run, and its exit status and output
//! checked. Each program also runs under `valgrind --leak-check=full` and must report zero
//! errors (invalid reads and writes, uses of uninitialised values, invalid frees) and
//! nothing definitely, indirectly or possibly lost, apart from the process-lifetime
//! allocations `tests/valgrind.supp` names, each with why. Without valgrind the test prints
//! `SKIP ... valgrind not installed`, except under CI (`CI` set, as CI sets `CI=true`),
//! where a missing valgrind fails the test.
//!
//! The release build of the library is checked the same way under valgrind (its inlining
//! changes the stacks the suppressions match): when `target/release/libnpurt.so` exists,
//! each program is compiled against it too (after `cargo build --release -p npurt-capi`
//! brings it up to date, with the features it was built with) and run under valgrind;
//! when it does not, each test prints `SKIP ... on the release library` with the command
//! that builds it, except under CI, where it fails (`.ci/run` builds it first).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

fn capi_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `libnpurt.so`: the profile directory above this test binary
/// (`target/<profile>/deps/c_api-*`). Cargo does not build a cdylib for an integration test,
/// so the first call runs `cargo build -p npurt-capi --lib` (a no-op when it is current).
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let profile = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "npurt-capi", "--lib", "--features", "debug-hooks"]).current_dir(capi_dir());
        if profile.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        let o = c.output().expect("run cargo build -p npurt-capi");
        assert!(o.status.success(), "cargo build -p npurt-capi failed:\n{}", text(&o));
        assert!(profile.join("libnpurt.so").is_file(), "no libnpurt.so in {}", profile.display());
        profile
    })
}

/// A C or C++ program of the tests, compiled against the library of this test's profile.
struct Program {
    src: PathBuf,
    exe: PathBuf,
}

/// Compiles `tests/c/<name>` against the library of this test's profile.
fn compile(name: &str) -> Program {
    compile_path(&capi_dir().join("tests/c").join(name))
}

/// The directory the C programs linked against the library in `lib` are compiled into.
fn out_dir(lib: &Path) -> PathBuf {
    let profile = lib.file_name().and_then(|n| n.to_str()).unwrap_or("lib");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-c-tests-{profile}"));
    std::fs::create_dir_all(&dir).expect("create the C tests' directory");
    dir
}

/// Compiles the C (`.c`) or C++ (`.cpp`) program `src` against the library of this
/// test's profile.
fn compile_path(src: &Path) -> Program {
    Program { src: src.to_path_buf(), exe: compile_for(src, lib_dir(), true) }
}

/// Compiles `src` into an executable named after it, linked against the `libnpurt.so` in
/// `lib`, and returns its path; once per program and library (tests running at once share
/// it). `NPURT_DEBUG_HOOKS` is defined when the library has the hooks.
fn compile_for(src: &Path, lib: &Path, hooks: bool) -> PathBuf {
    static DONE: Mutex<BTreeMap<(PathBuf, PathBuf), PathBuf>> = Mutex::new(BTreeMap::new());
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    let key = (src.to_path_buf(), lib.to_path_buf());
    if let Some(exe) = done.get(&key) {
        return exe.clone();
    }
    let exe = compile_now(src, lib, hooks);
    done.insert(key, exe.clone());
    exe
}

fn compile_now(src: &Path, lib: &Path, hooks: bool) -> PathBuf {
    let name = src.file_name().and_then(|n| n.to_str()).expect("a UTF-8 file name");
    let exe = out_dir(lib).join(Path::new(name).file_stem().expect("file stem"));
    let cpp = name.ends_with(".cpp");
    let mut c = Command::new(if cpp { "c++" } else { "cc" });
    c.arg(if cpp { "-std=c++17" } else { "-std=c11" })
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-g", "-O1"])
        .args(hooks.then_some("-DNPURT_DEBUG_HOOKS"))
        .arg("-I")
        .arg(capi_dir().join("include"))
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib)
        .arg("-lnpurt")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lm", "-lpthread", "-ldl"]);
    let o = c.output().unwrap_or_else(|e| panic!("run the compiler for {name}: {e}"));
    assert!(o.status.success(), "compiling {name} failed:\n{}", text(&o));
    exe
}

/// The release build of the library, brought up to date, and whether it has the debug
/// hooks; `None` (with the reason) when this test is itself the release build (its own
/// library is the release one) or `target/release/libnpurt.so` was never built.
fn release_lib() -> Result<(&'static Path, bool), &'static str> {
    static LIB: OnceLock<Result<(PathBuf, bool), &'static str>> = OnceLock::new();
    let r = LIB.get_or_init(|| {
        let own = lib_dir();
        if own.file_name().is_some_and(|n| n == "release") {
            return Err("this test runs on the release library already");
        }
        let dir = own.parent().expect("target/").join("release");
        let so = dir.join("libnpurt.so");
        let Ok(bytes) = std::fs::read(&so) else {
            assert!(
                !under_ci(),
                "CI must run the C programs on the release library too: {} is missing \
                 (.ci/run builds it first: cargo build -p npurt-capi --release --features debug-hooks)",
                so.display()
            );
            return Err(
                "target/release/libnpurt.so not built (cargo build -p npurt-capi --release --features debug-hooks)",
            );
        };
        // Rebuilt with the features it has (a library built without the hooks stays so).
        let hooks = bytes.windows(b"npurt_debug_panic".len()).any(|w| w == b"npurt_debug_panic");
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "--release", "-p", "npurt-capi", "--lib"]).current_dir(capi_dir());
        if hooks {
            c.args(["--features", "debug-hooks"]);
        }
        let o = c.output().expect("run cargo build --release -p npurt-capi");
        assert!(o.status.success(), "cargo build --release -p npurt-capi failed:\n{}", text(&o));
        Ok((dir, hooks))
    });
    r.as_ref().map(|(d, h)| (d.as_path(), *h)).map_err(|e| *e)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Whether this runs under CI (`CI` set to anything but `""`, `0` or `false`).
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// valgrind, when on PATH. Under CI its absence fails the calling test: CI must check for
/// leaks (.ci/run installs it); elsewhere the valgrind runs are skipped with a message.
fn valgrind() -> Option<&'static Path> {
    static V: OnceLock<Option<PathBuf>> = OnceLock::new();
    let v = V
        .get_or_init(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path).map(|d| d.join("valgrind")).find(|p| p.is_file())
        })
        .as_deref();
    assert!(v.is_some() || !under_ci(), "valgrind is not installed, and CI must run the C tests under it");
    v
}

/// The suppressions of the valgrind runs: allocations that live as long as the process.
fn suppressions() -> PathBuf {
    capi_dir().join("tests/valgrind.supp")
}

/// How a program runs under valgrind.
#[derive(Default)]
enum Valgrind {
    /// With the plain run's arguments.
    #[default]
    Same,
    /// With these arguments instead (a shorter input).
    Args(Vec<String>),
}

/// How one program runs: arguments and environment.
#[derive(Default)]
struct Run<'a> {
    args: Vec<String>,
    env: Vec<(&'a str, String)>,
    valgrind: Valgrind,
}

/// Variables that would change what a program does; removed from its environment.
const SCRUBBED: &[&str] = &[
    "NPURT_BACKEND",
    "NPURT_DEVICES",
    "NPURT_CPU_DEVICES",
    "NPURT_THREADS",
    "NPURT_POOL_LIMIT",
    "NPURT_ALIGNMENT",
    "NPURT_MEMORY_REUSE",
    "NPURT_MAX_STREAMS",
    "NPURT_SCHEDULING",
    "NPURT_HW_MAPPING",
    "NPURT_PRECISION",
    "NPURT_IMPL",
    "NPURT_ACL_LIB_DIR",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_HOME_PATH",
    "ACL_EMU_DEVICES",
    "ACL_EMU_FAIL",
];

fn command(program: impl AsRef<std::ffi::OsStr>, run: &Run<'_>) -> Command {
    let mut c = Command::new(program);
    for v in SCRUBBED {
        c.env_remove(v);
    }
    // cargo test points LD_LIBRARY_PATH at this profile's directory, which would take
    // precedence over the rpath of a program linked against the release library.
    c.env_remove("LD_LIBRARY_PATH");
    c.envs(run.env.iter().map(|(k, v)| (*k, v.as_str())));
    c
}

/// Runs the program (and again under valgrind when installed, on this profile's library
/// and on the release one); asserts success and that no handle was left unreleased;
/// returns the output of the plain run.
fn run_checked(p: &Program, run: Run<'_>) -> Output {
    let name = p.exe.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
    let o = command(&p.exe, &run).args(&run.args).output().expect("run the C test");
    assert!(o.status.success(), "{name} failed ({}):\n{}", o.status, text(&o));
    assert!(text(&o).contains(&format!("OK {name}")), "{name} did not finish:\n{}", text(&o));
    assert!(!text(&o).contains("never released"), "{name} left handles unreleased:\n{}", text(&o));
    let args = match &run.valgrind {
        Valgrind::Same => &run.args,
        Valgrind::Args(a) => a,
    };
    let Some(v) = valgrind() else {
        eprintln!("SKIP {name} under valgrind: valgrind not installed");
        return o;
    };
    under_valgrind(v, &p.exe, &name, &run, args);
    match release_lib() {
        Ok((lib, hooks)) => {
            let exe = compile_for(&p.src, lib, hooks);
            under_valgrind(v, &exe, &format!("{name} (release library)"), &run, args);
        }
        Err(why) => eprintln!("SKIP {name} under valgrind on the release library: {why}"),
    }
    o
}

/// Runs `exe` under valgrind; asserts it finishes with no error and nothing lost.
fn under_valgrind(v: &Path, exe: &Path, name: &str, run: &Run<'_>, args: &[String]) {
    let stem = exe.file_name().and_then(|n| n.to_str()).unwrap_or("?");
    let vo = command(v, run)
        // Each thread's TLS block charged to the code that started it (tests/valgrind.supp).
        .env("GLIBC_TUNABLES", "glibc.pthread.stack_cache_size=0")
        .args([
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect,possible",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--error-exitcode=99",
            "--num-callers=40",
        ])
        .arg(format!("--suppressions={}", suppressions().display()))
        .arg(exe)
        .args(args)
        .output()
        .expect("run valgrind");
    let t = text(&vo);
    assert!(vo.status.success(), "{name} under valgrind failed ({}):\n{t}", vo.status);
    assert!(t.contains(&format!("OK {stem}")), "{name} did not finish under valgrind:\n{t}");
    assert!(t.contains("ERROR SUMMARY: 0 errors"), "{name}: valgrind reports errors:\n{t}");
    assert!(!t.contains("never released"), "{name} left handles unreleased:\n{t}");
    let none_lost =
        |kind: &str| t.contains(&format!("{kind} lost: 0 bytes")) || t.contains("All heap blocks were freed");
    assert!(
        none_lost("definitely") && none_lost("indirectly") && none_lost("possibly"),
        "{name}: valgrind reports leaks:\n{t}"
    );
    let summary: Vec<&str> = t
        .lines()
        .filter(|l| ["lost:", "suppressed:", "ERROR SUMMARY"].iter().any(|k| l.contains(k)))
        .map(|l| l.split_once("== ").map_or(l, |(_, r)| r).trim())
        .collect();
    eprintln!("{name} under valgrind: {}", summary.join("; "));
}

/// A double release, a use after release, handles of the wrong type, values npurt never
/// handed out, buffers smaller than the tensor, and concurrent releases of one handle:
/// each a status and a message, nothing read or written out of bounds (valgrind).
#[test]
fn misused_handles_and_small_buffers_are_errors_not_crashes() {
    let exe = compile("handles.c");
    let o = run_checked(&exe, Run::default());
    let t = text(&o);
    for case in [
        "npurt_tensor_free(u)",
        "npurt_stream_free(s)",
        "npurt_event_free(ev)",
        "npurt_graph_free(g)",
        "npurt_runtime_free(rt)",
    ] {
        let hits: Vec<&str> = t.lines().filter(|l| l.contains(&format!(" {case}:"))).collect();
        assert_eq!(hits.len(), 2, "{case} once OK, once refused:\n{t}");
        assert!(hits[0].starts_with("NPURT_OK ") && hits[1].starts_with("NPURT_ERR_INVALID_HANDLE "), "{hits:?}");
        assert!(hits[1].contains("was already released"), "{hits:?}");
    }
    assert!(t.contains("concurrent releases: 8 of 8 succeeded"), "{t}");
    print!("{t}");
}

#[test]
fn matmul_add_softmax_match_values_computed_in_c() {
    let exe = compile("basic.c");
    let o = run_checked(&exe, Run::default());
    print!("{}", text(&o));
}

#[test]
fn every_error_code_is_produced_with_its_message() {
    let exe = compile("errors.c");
    // The Ascend backend looks only in an empty directory: unavailable on every machine.
    let empty = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-no-acl");
    std::fs::create_dir_all(&empty).expect("create an empty directory");
    // A model directory asking for an activation npurt does not implement.
    let relu = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-relu-model");
    std::fs::create_dir_all(&relu).expect("create the model directory");
    let config = r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 16, "hidden_act": "relu"}"#;
    std::fs::write(relu.join("config.json"), config).expect("write config.json");
    let run = Run {
        args: vec![relu.display().to_string()],
        env: vec![("NPURT_ACL_LIB_DIR", empty.display().to_string())],
        ..Run::default()
    };
    let o = run_checked(&exe, run);
    let t = text(&o);
    for status in [
        "NPURT_ERR_INVALID_ARGUMENT",
        "NPURT_ERR_VALIDATION",
        "NPURT_ERR_OUT_OF_MEMORY",
        "NPURT_ERR_DEVICE",
        "NPURT_ERR_BACKEND_UNAVAILABLE",
        "NPURT_ERR_UNSUPPORTED",
    ] {
        assert!(t.lines().any(|l| l.starts_with(status)), "{status} never produced:\n{t}");
    }
    // The library is built with the debug-hooks feature: npurt_debug_panic() panics.
    assert!(t.lines().any(|l| l.starts_with("NPURT_ERR_INTERNAL")), "NPURT_ERR_INTERNAL never produced:\n{t}");
    print!("{t}");
}

#[test]
fn streams_and_events_from_four_c_threads() {
    let exe = compile("threads.c");
    let o = run_checked(&exe, Run::default());
    print!("{}", text(&o));
}

#[test]
fn a_compiled_bert_is_fed_from_its_input_info() {
    let exe = compile("graph.c");
    let o = run_checked(&exe, Run::default());
    print!("{}", text(&o));
}

#[test]
fn the_cpp_header_wraps_handles_and_errors() {
    let exe = compile("cpp_api.cpp");
    let o = run_checked(&exe, Run::default());
    print!("{}", text(&o));
}

/// The same C program as on the CPU, on the Ascend backend over acl-emu (as an
/// Ascend910B2, whose f32 products keep f32 tolerances), found through a fake toolkit.
#[test]
fn the_c_example_runs_on_ascend_over_acl_emu() {
    let Some(emu) = npurt_test_support::emu::emu_or_skip("C API on acl-emu") else { return };
    let toolkit = npurt_test_support::emu::fake_toolkit("capi", &emu);
    let exe = compile("basic.c");
    let run = Run {
        args: vec!["backend=acl".into()],
        env: vec![("ASCEND_TOOLKIT_HOME", toolkit.display().to_string()), ("ACL_EMU_SOC", "Ascend910B2".into())],
        ..Run::default()
    };
    let o = run_checked(&exe, run);
    let t = text(&o);
    assert!(t.contains("\"backend\":\"acl\""), "{t}");
    assert!(t.contains("Ascend910B2"), "{t}");
    print!("{t}");
}

/// A fault of work queued on a user stream (an AI Core exception the emulator reports at
/// the stream's synchronisation) is `NPURT_ERR_DEVICE` from `npurt_stream_synchronize`,
/// naming the op, the stream and the submission number; once.
#[test]
fn a_kernel_failure_on_a_user_stream_surfaces_at_synchronize() {
    let Some(emu) = npurt_test_support::emu::emu_or_skip("C stream fault on acl-emu") else { return };
    let toolkit = npurt_test_support::emu::fake_toolkit("capi-fault", &emu);
    let exe = compile("stream_fault.c");
    let run = Run {
        args: vec![emu.display().to_string()],
        env: vec![("ASCEND_TOOLKIT_HOME", toolkit.display().to_string()), ("ACL_EMU_SOC", "Ascend910B2".into())],
        ..Run::default()
    };
    let o = run_checked(&exe, run);
    let t = text(&o);
    let line = t.lines().find(|l| l.starts_with("NPURT_ERR_DEVICE")).unwrap_or_else(|| panic!("{t}"));
    assert!(line.contains("ReLU failed on acl:0/stream") && line.contains("(submission #"), "{line}");
    print!("{t}");
}

/// npurt_execute takes ops by their ONNX operator names, in any case, and by the aliases
/// of the op-name table that Python accepted first (`SoftmaxV2`, `BatchMatMul`).
#[test]
fn ops_are_found_by_their_onnx_names() {
    let exe = compile("onnx_names.c");
    let o = run_checked(&exe, Run::default());
    let t = text(&o);
    for op in
        ["LayerNormalization", "Identity", "TRANSPOSE", "ReduceSum", "reducemean", "Gather", "SoftmaxV2", "BatchMatMul"]
    {
        assert!(t.lines().any(|l| l.starts_with(op) && l.ends_with("checked")), "{op}:\n{t}");
    }
    print!("{t}");
}

/// The example in the opening comment of npurt.hpp, as it is written there, compiles and
/// runs (and gives the product it claims).
#[test]
fn the_cpp_header_example_compiles_as_written() {
    let hpp = std::fs::read_to_string(capi_dir().join("include/npurt.hpp")).expect("include/npurt.hpp");
    let opening = hpp.split("#ifndef NPURT_HPP").next().expect("the opening comment");
    let example: Vec<&str> = opening.lines().filter_map(|l| l.strip_prefix("//     ")).collect();
    assert!(example.len() >= 3, "no example in npurt.hpp's opening comment:\n{opening}");
    let body: String = example.iter().map(|l| format!("    {l}\n")).collect();
    let src = format!(
        "// The example of npurt.hpp's opening comment, extracted by tests/c_api.rs.\n\
         #include <cstdio>\n#include <vector>\n\n#include \"npurt.hpp\"\n\n\
         int main() {{\n{body}    \
         if (v != std::vector<float>{{7, 10, 15, 22}}) return 1;\n    \
         std::printf(\"OK hpp_example\\n\");\n    return 0;\n}}\n"
    );
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hpp_example.cpp");
    std::fs::write(&path, &src).expect("write hpp_example.cpp");
    let exe = compile_path(&path);
    let o = run_checked(&exe, Run::default());
    print!("{src}{}", text(&o));
}

/// A model directory made here: a one-layer BERT (hidden 32) with seeded random weights,
/// a word-level tokenizer and no `modules.json`, so mean pooling and no Normalize module:
/// `npurt_embed` must normalise the rows itself.
fn tiny_model_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-tiny-embedder");
    std::fs::create_dir_all(&dir).expect("create the model directory");
    let (vocab, hidden, inter, positions) = (16usize, 32usize, 64usize, 16usize);
    let config = serde_json::json!({"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": inter, "max_position_embeddings": positions,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"});
    std::fs::write(dir.join("config.json"), config.to_string()).expect("write config.json");
    let tokenizer = r#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "[PAD]": 1, "hello": 2,
        "world": 3, "the": 4, "quick": 5, "brown": 6, "fox": 7, "jumps": 8}}}"#;
    std::fs::write(dir.join("tokenizer.json"), tokenizer).expect("write tokenizer.json");
    let mut weights: Vec<(String, Vec<usize>, bool)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![vocab, hidden], false),
        ("embeddings.position_embeddings.weight".into(), vec![positions, hidden], false),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, hidden], false),
        ("embeddings.LayerNorm.weight".into(), vec![hidden], true),
        ("embeddings.LayerNorm.bias".into(), vec![hidden], false),
    ];
    let p = "encoder.layer.0";
    for (name, n, k) in [
        ("attention.self.query", hidden, hidden),
        ("attention.self.key", hidden, hidden),
        ("attention.self.value", hidden, hidden),
        ("attention.output.dense", hidden, hidden),
        ("intermediate.dense", inter, hidden),
        ("output.dense", hidden, inter),
    ] {
        weights.push((format!("{p}.{name}.weight"), vec![n, k], false));
        weights.push((format!("{p}.{name}.bias"), vec![n], false));
    }
    for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
        weights.push((format!("{p}.{ln}.weight"), vec![hidden], true));
        weights.push((format!("{p}.{ln}.bias"), vec![hidden], false));
    }
    // safetensors: an 8-byte header length, the JSON header, the little-endian data.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape, ones) in &weights {
        let n: usize = shape.iter().product();
        let start = data.len();
        for _ in 0..n {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = if *ones { 1.0f32 } else { ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2 };
            data.extend_from_slice(&x.to_le_bytes());
        }
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    std::fs::write(dir.join("model.safetensors"), file).expect("write model.safetensors");
    dir
}

/// `npurt_embed`'s conventions on a model that does not normalise: `*dim` written only by
/// the size query, a buffer too small and success; every row of unit length.
#[test]
fn the_c_embedder_keeps_its_conventions_on_a_model_without_normalize() {
    let dir = tiny_model_dir();
    let list = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-tiny-texts.txt");
    std::fs::write(&list, "hello world\nthe quick brown fox jumps\nfox\n").expect("write the texts");
    let exe = compile("embed.c");
    let run = Run { args: vec![dir.display().to_string(), list.display().to_string()], ..Run::default() };
    let o = run_checked(&exe, run);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.lines().count(), 3, "{}", text(&o));
    assert!(text(&o).contains("dim 32"), "{}", text(&o));
}

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NPURT_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| capi_dir().join("../target/test-assets/all-MiniLM-L6-v2"));
    if dir.join("model.safetensors").is_file() && dir.join("tokenizer.json").is_file() {
        Some(dir)
    } else {
        eprintln!("SKIP C embedder: no model at {} (run scripts/fetch-test-assets.sh)", dir.display());
        None
    }
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// all-MiniLM-L6-v2 through `npurt_embed` against the sentence-transformers reference
/// (`tests/fixtures/minilm_reference.json` at the repository root); skipped when the model is
/// absent.
#[test]
fn the_c_embedder_matches_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let fixture = capi_dir().join("../tests/fixtures/minilm_reference.json");
    let json = std::fs::read_to_string(&fixture).unwrap_or_else(|e| panic!("fixture {}: {e}", fixture.display()));
    let v: serde_json::Value = serde_json::from_str(&json).expect("fixture JSON");
    let cases = v["cases"].as_array().expect("cases");
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().expect("text")).collect();
    assert!(texts.iter().all(|t| !t.contains('\n')), "texts go one a line");
    let list = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-embed-texts.txt");
    std::fs::write(&list, texts.join("\n") + "\n").expect("write the texts");
    // Under valgrind (about half a minute for two short texts), the two shortest only.
    let mut shortest = texts.clone();
    shortest.sort_by_key(|t| t.len());
    let short = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-embed-two-texts.txt");
    std::fs::write(&short, shortest[..2].join("\n") + "\n").expect("write the texts");
    let exe = compile("embed.c");
    let run = Run {
        args: vec![dir.display().to_string(), list.display().to_string()],
        valgrind: Valgrind::Args(vec![dir.display().to_string(), short.display().to_string()]),
        ..Run::default()
    };
    let o = run_checked(&exe, run);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<Vec<f64>> =
        stdout.lines().map(|l| l.split(' ').map(|x| x.parse().expect("a float")).collect()).collect();
    assert_eq!(rows.len(), cases.len());
    for (row, case) in rows.iter().zip(cases) {
        let want: Vec<f64> = case["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(row.len(), want.len());
        let cos = cosine(row, &want);
        eprintln!("cosine 1 - {:.2e}", 1.0 - cos);
        assert!(cos >= 0.99999, "cosine {cos} for {:?}", case["text"]);
    }
}
