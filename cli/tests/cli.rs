//! The `npurt` binary: `op` agrees with an independent computation on .npy files, `info`
//! and `demo` run and print every part.

use npurt::DType;
use npurt::npy::{self, NpyArray};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_npurt"))
}

fn f32_array(shape: &[usize], seed: u32) -> (NpyArray, Vec<f32>) {
    let n: usize = shape.iter().product();
    let v: Vec<f32> =
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0).collect();
    (NpyArray { dtype: DType::F32, shape: shape.to_vec(), data: bytemuck::cast_slice(&v).to_vec() }, v)
}

fn run_op(dir: &std::path::Path, op: &str, ins: &[&NpyArray], attrs: &[&str], imp: &str) -> NpyArray {
    let mut c = bin();
    c.arg("op").arg(op);
    for (i, a) in ins.iter().enumerate() {
        let p = dir.join(format!("{op}-in{i}.npy"));
        npy::write(&p, a).unwrap();
        c.arg("--input").arg(p);
    }
    let out = dir.join(format!("{op}-{imp}-out.npy"));
    c.arg("--output").arg(&out).arg("--impl").arg(imp);
    for a in attrs {
        c.arg("--attr").arg(a);
    }
    let r = c.output().unwrap();
    assert!(r.status.success(), "npurt op {op} failed: {}", String::from_utf8_lossy(&r.stderr));
    npy::read(&out).unwrap()
}

fn floats(a: &NpyArray) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(&a.data)
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() <= tol * (1.0 + w.abs()), "element {i}: {g} vs {w}");
    }
}

#[test]
fn op_matches_independent_math() {
    let dir = std::env::temp_dir().join(format!("npurt-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, av) = f32_array(&[5, 7], 1);
    let (b, bv) = f32_array(&[7, 3], 2);
    let mut mm = vec![0f64; 15];
    for i in 0..5 {
        for j in 0..3 {
            mm[i * 3 + j] = (0..7).map(|k| av[i * 7 + k] as f64 * bv[k * 3 + j] as f64).sum();
        }
    }
    let (x, xv) = f32_array(&[2, 1, 4], 3);
    let (y, yv) = f32_array(&[3, 1], 4);
    let mut add = Vec::new();
    for i in 0..2 {
        for &yj in &yv[..3] {
            for k in 0..4 {
                add.push(xv[i * 4 + k] as f64 + yj as f64);
            }
        }
    }
    let (s, sv) = f32_array(&[3, 6], 5);
    let mut sm = Vec::new();
    for r in sv.chunks(6) {
        let m = r.iter().cloned().fold(f32::MIN, f32::max) as f64;
        let e: Vec<f64> = r.iter().map(|v| (*v as f64 - m).exp()).collect();
        let t: f64 = e.iter().sum();
        sm.extend(e.iter().map(|v| v / t));
    }
    let (g, gv) = f32_array(&[6], 6);
    let (be, bev) = f32_array(&[6], 7);
    let mut ln = Vec::new();
    for r in sv.chunks(6) {
        let m = r.iter().map(|v| *v as f64).sum::<f64>() / 6.0;
        let var = r.iter().map(|v| (*v as f64 - m).powi(2)).sum::<f64>() / 6.0;
        for k in 0..6 {
            ln.push((r[k] as f64 - m) / (var + 1e-5).sqrt() * gv[k] as f64 + bev[k] as f64);
        }
    }
    for imp in ["reference", "generic", "fast"] {
        let o = run_op(&dir, "MatMul", &[&a, &b], &[], imp);
        assert_eq!(o.shape, vec![5, 3]);
        close(&floats(&o), &mm, 1e-5);
        let o = run_op(&dir, "Add", &[&x, &y], &[], imp);
        assert_eq!(o.shape, vec![2, 3, 4]);
        close(&floats(&o), &add, 1e-6);
        let o = run_op(&dir, "Softmax", &[&s], &["axis=-1"], imp);
        close(&floats(&o), &sm, 1e-5);
        let o = run_op(&dir, "LayerNorm", &[&s, &g, &be], &["eps=1e-5"], imp);
        close(&floats(&o), &ln, 1e-5);
        // The op-name table's ONNX names and aliases, in any case.
        let o = run_op(&dir, "BatchMatMul", &[&a, &b], &[], imp);
        close(&floats(&o), &mm, 1e-5);
        let o = run_op(&dir, "softmaxv2", &[&s], &["axis=-1"], imp);
        close(&floats(&o), &sm, 1e-5);
        let o = run_op(&dir, "LayerNormalization", &[&s, &g, &be], &["eps=1e-5"], imp);
        close(&floats(&o), &ln, 1e-5);
    }
    // Bad attributes and ops are reported, not panics.
    let r = bin().args(["op", "Frobnicate", "--input", "x.npy"]).output().unwrap();
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown op"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_and_demo_run() {
    let r = bin().arg("info").output().unwrap();
    assert!(r.status.success());
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("backend in use: cpu"), "{out}");
    assert!(out.contains("CPU features detected at run time"), "{out}");
    let r = bin().arg("demo").output().unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for n in 1..=12 {
        assert!(out.contains(&format!("== {n}.")), "demo misses part {n}:\n{out}");
    }
    assert!(out.contains("inner dimensions differ"), "{out}");
    assert!(out.contains("allclose(rtol=1e-4, atol=1e-4) vs ndarray = true"), "{out}");
    assert!(out.contains("supports_zero_copy: true"), "{out}");
}

/// A pipe whose reading end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

/// Writing to a closed pipe (`npurt info | head -1`, a stderr reader that went away)
/// ends the process quietly, as other tools do, instead of a panic (exit 101).
#[test]
fn closed_pipes_end_the_process_quietly() {
    // Exit status 141, as a shell reports a process ended by SIGPIPE.
    let r = bin().arg("info").stdout(closed_pipe()).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(r.status.code(), Some(141), "{err}");
    // An error message to a closed stderr: the error's own status.
    let r = bin().args(["op", "Frobnicate"]).stderr(closed_pipe()).output().unwrap();
    assert_eq!(r.status.code(), Some(1));
    // Output to /dev/null is unaffected.
    let r = bin().arg("info").stdout(std::process::Stdio::null()).output().unwrap();
    assert!(r.status.success());
}

/// `bench bert --model DIR` with a small vocabulary: token ids stay inside it (the ids
/// were `101 + i % (vocab - 101)`: a division by zero at 101, out of range below).
#[test]
fn bench_bert_runs_with_small_vocabularies() {
    let dir = std::env::temp_dir().join(format!("npurt-cli-bert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for vocab in [101usize, 50, 1, 102] {
        let config = serde_json::json!({"vocab_size": vocab, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64});
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let r = bin()
            .args(["bench", "bert", "--model"])
            .arg(&dir)
            .args(["--seq", "16", "--runs", "1", "--config", "+mapping", "--backend", "cpu"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "vocab {vocab}: {err}");
        let line: serde_json::Value = serde_json::from_slice(&r.stdout).expect("one JSON line");
        assert!(line["median_ms"].as_f64().is_some(), "{line}");
    }
    // An absurd vocabulary is refused before anything is allocated (it used to hang).
    let config = serde_json::json!({"vocab_size": 1u64 << 62, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let r = bin().args(["bench", "bert", "--model"]).arg(&dir).args(["--seq", "16", "--runs", "1"]).output().unwrap();
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("vocab_size"), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `npurt ARGS` and returns (exit status, stdout, stderr).
fn npurt(args: &[&str]) -> (Option<i32>, String, String) {
    let r = bin().args(args).output().unwrap();
    (r.status.code(), String::from_utf8_lossy(&r.stdout).into_owned(), String::from_utf8_lossy(&r.stderr).into_owned())
}

/// A bad value or an unknown flag is an error that names it (a bad `--runs` used to
/// become the default, a misspelt flag was ignored).
#[test]
fn bad_values_and_unknown_flags_are_errors_that_name_them() {
    for args in [
        &["bench", "--runs", "abc"][..],
        &["bench", "gemm", "--runs", "abc"],
        &["bench", "bert", "--runs", "abc"],
        &["bench", "bert", "--runs", "0"],
        &["bench", "bert", "--model", "tiny", "--seq", "-3"],
        &["bench", "bert", "--bogus"],
        &["bench", "gemm", "--peer", "blas"],
        &["bench", "gemm", "--isa", "sse9"],
        &["bench", "gemm", "--peak", "-5"],
        &["bench", "peak", "--isa", "avx1024"],
        &["bench", "peak", "--runs", "0"],
        &["bench", "bert", "--config", "+bogus"],
        &["bench", "bert", "--compare-ort", "--pairs", "bert-base"],
        &["embed", "--model-dir", "x", "--batch", "many"],
        &["op", "Relu", "--attr", "novalue"],
        &["info", "--impl", "fastest"],
        &["--precision", "f8", "info"],
    ] {
        let (code, out, err) = npurt(args);
        assert_ne!(code, Some(0), "{args:?} succeeded: {out}");
        let flag = args.iter().rev().find(|a| a.starts_with("--")).unwrap();
        assert!(err.contains(flag), "{args:?}: the error does not name {flag}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} printed: {out}");
    }
    // The bad value is quoted too.
    let (_, _, err) = npurt(&["bench", "gemm", "--runs", "abc"]);
    assert!(err.contains("'abc'"), "{err}");
    // Benchmarks' modes exclude each other, and options of one mode need it.
    for (args, named) in [
        (&["bench", "bert", "--accuracy", "--serve"][..], "--serve"),
        (&["bench", "bert", "--concurrent", "2", "--ablation"], "--ablation"),
        (&["bench", "bert", "--pairs", "bert-base:128"], "--compare-ort"),
        (&["bench", "bert", "--profile"], "--trace"),
    ] {
        let (code, _, err) = npurt(args);
        assert_ne!(code, Some(0), "{args:?} succeeded");
        assert!(err.contains(named), "{args:?}: the error does not name {named}: {err}");
    }
}

/// Every subcommand documents every one of its options, and the runtime options.
#[test]
fn every_subcommand_has_help() {
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &["info", "demo", "op", "bench", "embed"]),
        (&["info"], &[]),
        (&["demo"], &[]),
        (&["op"], &["<OP>", "--input", "--output", "--attr"]),
        (&["bench"], &["gemm", "peak", "bert"]),
        (&["bench", "gemm"], &["--peer", "--runs", "--all-tiers", "--isa", "--peak", "--json"]),
        (&["bench", "peak"], &["--isa", "--threads", "--runs", "--ms", "--json"]),
        (
            &["bench", "bert"],
            &[
                "--model",
                "--seq",
                "--batch",
                "--runs",
                "--ablation",
                "--json",
                "--chart",
                "--trace",
                "--profile",
                "--concurrent",
                "--accuracy",
                "--compare-ort",
                "--pairs",
                "--precisions",
                "--ort-variants",
                "--ort-threads",
                "--pause-ms",
                "--keep",
                "--ort-workdir",
                "--config",
                "--serve",
            ],
        ),
        (&["embed"], &["--model-dir", "--batch", "--pad-multiple", "--stats", "[TEXT]"]),
    ];
    for (path, names) in cases {
        for help in ["--help", "-h"] {
            let args: Vec<&str> = path.iter().copied().chain([help]).collect();
            let (code, out, err) = npurt(&args);
            assert_eq!(code, Some(0), "{args:?}: {err}");
            let usage = ["Usage: npurt"].into_iter().chain(path.iter().copied()).collect::<Vec<_>>().join(" ");
            assert!(out.contains(&usage), "{args:?}: no {usage:?} in\n{out}");
            for name in names.iter().chain(&["--backend", "--impl", "--devices", "--precision"]) {
                assert!(out.contains(name), "{args:?}: {name} is not documented:\n{out}");
            }
        }
    }
    // `help SUBCOMMAND` and no arguments at all print help too.
    let (code, out, _) = npurt(&["help", "bench", "bert"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("--ablation"), "{out}");
    let (code, out, _) = npurt(&[]);
    assert_eq!(code, Some(0));
    assert!(out.contains("Usage: npurt"), "{out}");
}

/// The runtime options stand before or after the subcommand, at any depth.
#[test]
fn runtime_options_stand_before_or_after_the_subcommand() {
    for args in [
        &["--backend", "cpu", "info"][..],
        &["info", "--backend", "cpu"],
        &["--impl", "generic", "--devices", "2", "info", "--backend", "cpu"],
    ] {
        let (code, out, err) = npurt(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(out.contains("backend in use: cpu"), "{args:?}: {out}");
    }
    let (_, out, _) = npurt(&["--devices", "2", "info", "--backend", "cpu"]);
    assert!(out.contains("(2 device(s))"), "{out}");
    for args in [
        &["--backend", "cpu", "bench", "bert", "--model", "tiny", "--seq", "16", "--runs", "1", "--config", "none"][..],
        &["bench", "--precision", "bf16", "bert", "--model", "tiny", "--seq", "16", "--runs", "1", "--config", "none"],
        &["bench", "bert", "--model", "tiny", "--seq", "16", "--runs", "1", "--config", "none", "--impl", "reference"],
    ] {
        let (code, out, err) = npurt(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        let line: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
        assert_eq!(line["config"].as_str(), Some("none"), "{line}");
    }
}

/// `bench bert --ablation --json --chart`: five rows with every field, a PNG chart, and
/// no progress bar when the output is not a terminal.
#[test]
fn bench_bert_ablation_writes_json_and_chart() {
    let dir = std::env::temp_dir().join(format!("npurt-cli-ablation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, chart) = (dir.join("ablation.json"), dir.join("ablation.png"));
    let r = bin()
        .args(["bench", "bert", "--model", "tiny", "--seq", "16", "--runs", "1", "--ablation", "--backend", "cpu"])
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&r.stderr));
    assert!(r.status.success(), "{err}");
    assert!(!err.contains("configuration") && !err.contains('\r') && !err.contains('\u{1b}'), "progress shown: {err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((v["model"].as_str(), v["seq"].as_u64(), v["runs"].as_u64()), (Some("tiny"), Some(16), Some(1)));
    let rows = v["rows"].as_array().unwrap();
    let configs: Vec<&str> = rows.iter().filter_map(|r| r["config"].as_str()).collect();
    assert_eq!(configs, ["none", "+pool", "+reuse", "+parallel", "+mapping"]);
    for row in rows {
        for key in ["median_ms", "min_ms", "max_ms", "pool_peak_bytes", "rss_peak_bytes", "streams"] {
            assert!(row[key].as_f64().is_some(), "{key} missing: {row}");
        }
        for key in ["arena_bytes", "load_bytes"] {
            assert!(row.get(key).is_some(), "{key} missing: {row}");
        }
        let util = row["utilisation"].as_array().expect("utilisation");
        assert!(util.iter().all(|u| u["unit"].is_string() && u["compute"].is_number() && u["bandwidth"].is_number()));
        assert!(out.contains(row["config"].as_str().unwrap()), "{out}");
    }
    // The configurations with a memory plan report its arena.
    assert!(rows[4]["arena_bytes"].as_u64().is_some_and(|b| b > 0), "{}", rows[4]);
    let png = std::fs::read(&chart).unwrap();
    let reader = png::Decoder::new(std::io::Cursor::new(png)).read_info().expect("a PNG");
    assert_eq!((reader.info().width, reader.info().height), (900, 500));
    std::fs::remove_dir_all(&dir).ok();
}

/// The paths `bench peak` can measure on this CPU (`avx512`, `avx2`), widest first.
fn fma_paths() -> Vec<&'static str> {
    backend_cpu::peak::measurable().into_iter().map(|i| i.name()).collect()
}

/// `bench peak --kernels --json`: a row per path and thread count (1 and all), each with a
/// positive median among its runs, and each path's micro-kernels timed in cache and with B
/// from memory; the scalar path has no FMA loop and says so.
#[test]
fn bench_peak_writes_one_row_per_path_and_thread_count() {
    let paths = fma_paths();
    if paths.is_empty() {
        println!("SKIP bench peak: this CPU has neither AVX2+FMA nor AVX-512");
        return;
    }
    let file = std::env::temp_dir().join(format!("npurt-peak-{}.json", std::process::id()));
    let r = bin()
        .args(["bench", "peak", "--runs", "3", "--ms", "5", "--threads", "2", "--kernels", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let _ = std::fs::remove_file(&file);
    let rows = j["rows"].as_array().unwrap();
    let got: Vec<(String, u64)> =
        rows.iter().map(|r| (r["isa"].as_str().unwrap().to_string(), r["threads"].as_u64().unwrap())).collect();
    let want: Vec<(String, u64)> = paths.iter().flat_map(|p| [(p.to_string(), 1), (p.to_string(), 2)]).collect();
    assert_eq!(got, want);
    for r in rows {
        let runs: Vec<f64> = r["runs_gflops"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 3);
        assert!(runs.iter().all(|g| *g > 0.0) && runs.contains(&r["gflops"].as_f64().unwrap()), "{r}");
    }
    let kernels = j["kernels"].as_array().unwrap();
    for p in &paths {
        let mine: Vec<_> = kernels.iter().filter(|k| k["isa"].as_str() == Some(*p)).collect();
        assert!(!mine.is_empty(), "no micro-kernel timed on {p}: {kernels:?}");
        for k in mine {
            let (mr_nr, rows, cols) =
                (k["kernel"].as_str().unwrap(), k["rows"].as_u64().unwrap(), k["cols"].as_u64().unwrap());
            assert!(rows > 0 && cols > 0 && mr_nr.contains('x'), "{k}");
            for f in ["in_cache_gflops", "b_from_memory_gflops", "peak_1_thread_gflops"] {
                assert!(k[f].as_f64().is_some_and(|g| g > 0.0 && g.is_finite()), "{f}: {k}");
            }
        }
    }
    let (code, _, err) = npurt(&["bench", "peak", "--isa", "scalar"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("no FMA") && !err.contains("panicked"), "{err}");
}

/// `bench gemm --isa avx2 --peak G --json`: every row measured on the forced path, with
/// its median time and its share of the given peak; `info` shows the forced path and a
/// path the CPU lacks or an unknown name is refused with the reason.
#[test]
fn bench_gemm_on_a_forced_path_reports_percent_of_peak() {
    if !fma_paths().contains(&"avx2") {
        println!("SKIP bench gemm --isa avx2: this CPU has no AVX2+FMA");
        return;
    }
    let file = std::env::temp_dir().join(format!("npurt-gemm-{}.json", std::process::id()));
    let r = bin()
        .args(["bench", "gemm", "--isa", "avx2", "--runs", "1", "--peak", "50", "--json"])
        .arg(&file)
        .env("NPURT_BACKEND", "cpu")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("ISA avx2") && out.contains("%)"), "{out}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        (j["isa"].as_str(), j["isa_forced"].as_bool(), j["peak_gflops"].as_f64()),
        (Some("avx2"), Some(true), Some(50.0))
    );
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.iter().filter(|r| r["variant"] == "fast").count(), 11, "{j}");
    assert!(rows.iter().all(|r| r["variant"] != "bf16"), "no bf16 below avx512: {j}");
    for r in rows {
        assert_eq!(r["isa"].as_str(), Some("avx2"), "{r}");
        let (g, ms, pct) =
            (r["gflops"].as_f64().unwrap(), r["median_ms"].as_f64().unwrap(), r["pct_of_peak"].as_f64().unwrap());
        assert!(g > 0.0 && ms > 0.0, "{r}");
        assert!((pct - 2.0 * g).abs() < 1e-9 * pct.max(1.0), "{r}");
        let flops = 2.0 * ["m", "k", "n", "batch"].iter().map(|d| r[*d].as_f64().unwrap()).product::<f64>();
        assert!((flops / (ms * 1e6) - g).abs() < 1e-6 * g, "{r}");
    }

    // --paired: each f32 figure has its share of the peak measured right after each run.
    let r = bin()
        .args(["bench", "gemm", "--isa", "avx2", "--runs", "1", "--paired", "--json"])
        .arg(&file)
        .env("NPURT_BACKEND", "cpu")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(j["paired"].as_bool(), Some(true), "{j}");
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.iter().filter(|r| r["variant"] == "prepacked").count(), 10, "{j}");
    for r in rows.iter().filter(|r| r["variant"] == "fast" || r["variant"] == "prepacked") {
        let pct = r["pct_of_peak_paired"].as_f64().unwrap_or(-1.0);
        assert!(pct > 0.0 && pct.is_finite(), "{r}");
    }
    let r = bin().args(["bench", "gemm", "--paired", "--peak", "50"]).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("cannot be used with"), "{err}");

    let info = |isa: &str| bin().arg("info").env("NPURT_BACKEND", "cpu").env("NPURT_CPU_ISA", isa).output().unwrap();
    let r = info("avx2");
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success() && out.contains("CPU ISA in use: avx2 (forced by NPURT_CPU_ISA"), "{out}");
    assert!(out.contains("avx2-fma"), "{out}");
    let r = info("sse9");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("NPURT_CPU_ISA=\"sse9\"") && !err.contains("panicked"), "{err}");
    if !fma_paths().contains(&"avx512") {
        let r = info("avx512");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && err.contains("lacks avx512f"), "{err}");
    }
}

/// AddRmsNorm's two outputs come back as two `--output` files (the normalised sum, then the
/// sum); RmsNorm answers to ONNX's RMSNormalization.
#[test]
fn op_writes_every_output_of_add_rms_norm() {
    let tmp = tempfile::Builder::new().prefix("npurt-cli-rms-").tempdir().unwrap();
    let dir = tmp.path();
    let (x, xv) = f32_array(&[3, 8], 11);
    let (r, rv) = f32_array(&[3, 8], 12);
    let (w, wv) = f32_array(&[8], 13);
    let sum: Vec<f64> = xv.iter().zip(&rv).map(|(a, b)| (a + b) as f64).collect();
    let norm = |v: &[f64]| -> Vec<f64> {
        v.chunks(8)
            .flat_map(|row| {
                let inv = 1.0 / (row.iter().map(|a| a * a).sum::<f64>() / 8.0 + 1e-5).sqrt();
                row.iter().zip(&wv).map(move |(a, g)| a * inv * *g as f64).collect::<Vec<_>>()
            })
            .collect()
    };
    let paths: Vec<_> = ["x", "r", "w"].iter().map(|n| dir.join(format!("{n}.npy"))).collect();
    for (p, a) in paths.iter().zip([&x, &r, &w]) {
        npy::write(p, a).unwrap();
    }
    let (y, s) = (dir.join("y.npy"), dir.join("sum.npy"));
    let mut c = bin();
    c.args(["op", "AddRmsNorm"]);
    for p in &paths {
        c.arg("--input").arg(p);
    }
    let out = c.arg("--output").arg(&y).arg("--output").arg(&s).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    close(&floats(&npy::read(&s).unwrap()), &sum, 1e-6);
    close(&floats(&npy::read(&y).unwrap()), &norm(&sum), 1e-5);
    let xs: Vec<f64> = xv.iter().map(|&a| a as f64).collect();
    for imp in ["reference", "fast"] {
        let o = run_op(dir, "RMSNormalization", &[&x, &w], &["eps=1e-5"], imp);
        close(&floats(&o), &norm(&xs), 1e-5);
    }
}

/// `bench llm --trace F --profile`: one decode step's nodes as a Chrome trace, and a table
/// of its op kinds with the products first among them; `--profile` alone is refused.
#[test]
fn bench_llm_traces_a_decode_step() {
    let file = std::env::temp_dir().join(format!("npurt-llm-trace-{}.json", std::process::id()));
    let path = file.to_str().unwrap();
    let r = bin()
        .args([
            "bench",
            "llm",
            "--model",
            "llama-tiny",
            "--prompt-len",
            "4",
            "--gen",
            "2",
            "--trace",
            path,
            "--profile",
        ])
        .env("NPURT_BACKEND", "cpu")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(out.contains("one decode step"), "{out}");
    assert!(out.lines().any(|l| l.trim_start().starts_with("Linear [") && l.contains("GB/s")), "{out}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events.iter().filter(|e| e["ph"] == "X").filter_map(|e| e["name"].as_str()).collect();
    assert!(names.iter().any(|n| n.contains("layers.0")), "{names:?}");
    std::fs::remove_file(&file).ok();
    let (code, _, err) =
        npurt(&["bench", "llm", "--model", "llama-tiny", "--prompt-len", "4", "--gen", "2", "--profile"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--trace"), "{err}");
}

/// `bench llm --kv-cache`: the caches' dtype as given (in the report and the JSON), the
/// precision's without it (f16 at f16), and a dtype a cache cannot hold is refused by name.
#[test]
fn bench_llm_takes_the_kv_cache_dtype() {
    let file = std::env::temp_dir().join(format!("npurt-llm-kv-{}.json", std::process::id()));
    let path = file.to_str().unwrap();
    let base = ["bench", "llm", "--model", "llama-tiny", "--prompt-len", "4", "--gen", "2", "--json", path];
    for (precision, flag, want) in [("f16", None, "f16"), ("f16", Some("f32"), "f32"), ("f32", Some("bf16"), "bf16")] {
        let mut c = bin();
        c.args(base).env("NPURT_BACKEND", "cpu").env("NPURT_PRECISION", precision);
        if let Some(f) = flag {
            c.args(["--kv-cache", f]);
        }
        let r = c.output().unwrap();
        assert!(r.status.success(), "{precision} {flag:?}: {}", String::from_utf8_lossy(&r.stderr));
        assert!(String::from_utf8_lossy(&r.stdout).contains(&format!("MiB ({want})")), "{precision} {flag:?}");
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(doc["kv_cache_dtype"], want, "{precision} {flag:?}");
    }
    std::fs::remove_file(&file).ok();
    let (code, _, err) =
        npurt(&["bench", "llm", "--model", "llama-tiny", "--prompt-len", "4", "--gen", "2", "--kv-cache", "i32"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("the KV cache is f32, f16 or bf16"), "{err}");
    // One generated token has no decode step to time: refused, not a made-up figure.
    let (code, _, err) = npurt(&["bench", "llm", "--model", "llama-tiny", "--prompt-len", "4", "--gen", "1"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("expected a count >= 2"), "{err}");
}
