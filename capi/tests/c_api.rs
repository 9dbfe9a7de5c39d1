//! The C tests: each program under `tests/c/` is compiled against the committed header
//! (`cc -std=c11 -Wall -Wextra -Werror -pedantic`, the C++ one with `c++ -std=c++17 ...`),
//! linked against the `libnpurt.so` cargo built next to this test binary, run, and its exit
//! status and output checked. When `valgrind` is on PATH each program also runs under
//! `valgrind --leak-check=full --error-exitcode=99 --errors-for-leak-kinds=definite,indirect`
//! and must report zero errors (invalid reads and writes, uses of uninitialised values,
//! invalid frees) and nothing definitely or indirectly lost; without it, the test prints
//! `SKIP ... valgrind not installed`. "Possibly lost" blocks are not errors: they are the
//! thread-local data of the CPU backend's worker threads, which a freed runtime tells to
//! stop but does not join, so some are still exiting when the process ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

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
        c.args(["build", "-p", "npurt-capi", "--lib"]).current_dir(capi_dir());
        if profile.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        let o = c.output().expect("run cargo build -p npurt-capi");
        assert!(o.status.success(), "cargo build -p npurt-capi failed:\n{}", text(&o));
        assert!(profile.join("libnpurt.so").is_file(), "no libnpurt.so in {}", profile.display());
        profile
    })
}

/// Compiles `tests/c/<name>` into an executable and returns its path.
fn compile(name: &str) -> PathBuf {
    let src = capi_dir().join("tests/c").join(name);
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-c-tests");
    std::fs::create_dir_all(&out_dir).expect("create the C tests' directory");
    let exe = out_dir.join(Path::new(name).file_stem().expect("file stem"));
    let cpp = name.ends_with(".cpp");
    let lib = lib_dir();
    let mut c = Command::new(if cpp { "c++" } else { "cc" });
    c.arg(if cpp { "-std=c++17" } else { "-std=c11" })
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-g", "-O1"])
        .arg("-I")
        .arg(capi_dir().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib)
        .arg("-lnpurt")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lm", "-lpthread"]);
    let o = c.output().unwrap_or_else(|e| panic!("run the compiler for {name}: {e}"));
    assert!(o.status.success(), "compiling {name} failed:\n{}", text(&o));
    exe
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn valgrind() -> Option<&'static Path> {
    static V: OnceLock<Option<PathBuf>> = OnceLock::new();
    V.get_or_init(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|d| d.join("valgrind")).find(|p| p.is_file())
    })
    .as_deref()
}

/// How one program runs: arguments and environment.
#[derive(Default)]
struct Run<'a> {
    args: Vec<String>,
    env: Vec<(&'a str, String)>,
    /// Skip the valgrind run (with this reason).
    no_valgrind: Option<&'a str>,
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
    c.envs(run.env.iter().map(|(k, v)| (*k, v.as_str())));
    c
}

/// Runs `exe` (and again under valgrind when installed); asserts success; returns the
/// output of the plain run.
fn run_checked(exe: &Path, run: Run<'_>) -> Output {
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
    let o = command(exe, &run).args(&run.args).output().expect("run the C test");
    assert!(o.status.success(), "{name} failed ({}):\n{}", o.status, text(&o));
    assert!(text(&o).contains(&format!("OK {name}")), "{name} did not finish:\n{}", text(&o));
    match (valgrind(), run.no_valgrind) {
        (_, Some(why)) => eprintln!("SKIP {name} under valgrind: {why}"),
        (None, None) => eprintln!("SKIP {name} under valgrind: valgrind not installed"),
        (Some(v), None) => {
            let vo = command(v, &run)
                .args(["--leak-check=full", "--error-exitcode=99", "--errors-for-leak-kinds=definite,indirect"])
                .arg(exe)
                .args(&run.args)
                .output()
                .expect("run valgrind");
            let t = text(&vo);
            assert!(vo.status.success(), "{name} under valgrind failed ({}):\n{t}", vo.status);
            assert!(t.contains("ERROR SUMMARY: 0 errors"), "{name}: valgrind reports errors:\n{t}");
            let lost =
                |kind: &str| t.contains(&format!("{kind} lost: 0 bytes")) || t.contains("All heap blocks were freed");
            assert!(lost("definitely") && lost("indirectly"), "{name}: valgrind reports leaks:\n{t}");
            eprintln!("{name} under valgrind: 0 errors, nothing definitely or indirectly lost");
        }
    }
    o
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
    // NPURT_ERR_INTERNAL comes only from a caught panic: src/error.rs tests that path.
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
        no_valgrind: None,
    };
    let o = run_checked(&exe, run);
    let t = text(&o);
    assert!(t.contains("\"backend\":\"acl\""), "{t}");
    assert!(t.contains("Ascend910B2"), "{t}");
    print!("{t}");
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
/// (`../shared/fixtures/minilm_reference.json`); skipped when the model or the fixture is
/// absent.
#[test]
fn the_c_embedder_matches_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let fixture = capi_dir().join("../../shared/fixtures/minilm_reference.json");
    let Ok(json) = std::fs::read_to_string(&fixture) else {
        eprintln!("SKIP C embedder: no fixture at {}", fixture.display());
        return;
    };
    let v: serde_json::Value = serde_json::from_str(&json).expect("fixture JSON");
    let cases = v["cases"].as_array().expect("cases");
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().expect("text")).collect();
    assert!(texts.iter().all(|t| !t.contains('\n')), "texts go one a line");
    let list = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-embed-texts.txt");
    std::fs::write(&list, texts.join("\n") + "\n").expect("write the texts");
    let exe = compile("embed.c");
    let run = Run {
        args: vec![dir.display().to_string(), list.display().to_string()],
        no_valgrind: Some("MiniLM on 8 texts takes minutes under valgrind; the other C tests cover the API's memory"),
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
