//! Backend discovery through the facade, as on a real Ascend host: a toolkit directory whose
//! `lib64/` holds libascendcl.so, libnnopbase.so and libopapi.so (here: acl-emu), found
//! through `ASCEND_TOOLKIT_HOME`. Each case runs the `npurt` binary in its own process, so
//! the environment of one case cannot leak into another.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>/libacl_emu.so` (built as a dev-dependency), or `$ACL_EMU_LIB`.
fn emu_or_skip(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("ACL_EMU_LIB").map(PathBuf::from).or_else(|| {
        let exe = std::env::current_exe().ok()?;
        let deps = exe.parent()?;
        [deps.join("libacl_emu.so"), deps.parent()?.join("libacl_emu.so")].into_iter().find(|p| p.is_file())
    });
    if found.is_none() {
        eprintln!("SKIP {test}: libacl_emu.so not found next to the test binary (build acl-emu or set ACL_EMU_LIB)");
    }
    found
}

/// `facade-toolkit-<tag>/lib64/` in the test process's scratch root, with the three
/// libraries linked to `emu`, or left empty when `emu` is `None`.
fn toolkit(tag: &str, emu: Option<&Path>) -> PathBuf {
    let root = npurt_test_support::scratch::dir(&format!("facade-toolkit-{tag}"));
    let lib = root.join("lib64");
    let _ = std::fs::remove_dir_all(&lib);
    std::fs::create_dir_all(&lib).expect("create toolkit");
    if let Some(emu) = emu {
        for n in ["libascendcl.so", "libnnopbase.so", "libopapi.so"] {
            std::os::unix::fs::symlink(emu, lib.join(n)).expect("symlink emulator");
        }
    }
    root
}

fn npurt(toolkit: &Path, envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(npurt_test_support::cli::npurt_bin());
    c.args(args).env("ASCEND_TOOLKIT_HOME", toolkit).env("RUST_LOG", "info");
    for v in ["NPURT_BACKEND", "NPURT_ACL_LIB_DIR", "ASCEND_HOME_PATH", "ACL_EMU_DEVICES", "ACL_EMU_FAIL"] {
        c.env_remove(v);
    }
    c.envs(envs.iter().copied());
    c.output().expect("run npurt")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The run succeeded on another backend and said why Ascend was passed over, once.
fn assert_fell_back(o: &Output) {
    let t = text(o);
    assert!(o.status.success(), "{t}");
    let lines: Vec<&str> = t.lines().filter(|l| l.contains("Ascend not available")).collect();
    assert_eq!(lines.len(), 1, "exactly one line about Ascend:\n{t}");
    assert!(!t.contains("using the acl backend"), "{t}");
}

#[test]
fn runtime_new_picks_ascend_and_info_lists_the_emulated_devices() {
    let Some(emu) = emu_or_skip("facade discovery") else { return };
    let tk = toolkit("found", Some(&emu));
    let o = npurt(&tk, &[("ACL_EMU_DEVICES", "2")], &["info"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("using the acl backend (2 device(s))"), "{t}");
    assert!(t.matches("Ascend910A").count() >= 2, "both emulated devices listed:\n{t}");
    assert!(t.contains("Cube"), "units listed:\n{t}");
}

#[test]
fn an_op_runs_on_the_emulated_npu_through_the_facade() {
    let Some(emu) = emu_or_skip("facade op") else { return };
    let tk = toolkit("op", Some(&emu));
    let dir = tk.join("io");
    std::fs::create_dir_all(&dir).unwrap();
    let a = npurt::npy::NpyArray {
        dtype: npurt::DType::F32,
        shape: vec![2, 3],
        data: bytemuck::cast_slice(&[1f32, -2., 3., -4., 5., -6.]).to_vec(),
    };
    npurt::npy::write(dir.join("a.npy"), &a).unwrap();
    let out = dir.join("relu.npy");
    let o = npurt(
        &tk,
        &[("NPURT_BACKEND", "acl")],
        &["op", "Relu", "--input", dir.join("a.npy").to_str().unwrap(), "--output", out.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let r = npurt::npy::read(&out).unwrap();
    let v: Vec<f32> = bytemuck::pod_collect_to_vec(&r.data);
    assert_eq!(v, vec![1., 0., 3., 0., 5., 0.]);
}

#[test]
fn missing_libraries_fall_back_with_one_log_line() {
    let tk = toolkit("empty", None);
    let o =
        npurt(&tk, &[("NPURT_BACKEND", "auto"), ("NPURT_ACL_LIB_DIR", tk.join("lib64").to_str().unwrap())], &["info"]);
    assert_fell_back(&o);
}

#[test]
fn a_host_with_no_device_falls_back() {
    let Some(emu) = emu_or_skip("no device") else { return };
    let tk = toolkit("nodev", Some(&emu));
    let o = npurt(&tk, &[("ACL_EMU_DEVICES", "0")], &["info"]);
    assert_fell_back(&o);
    // Asking for Ascend by name is an error that says why, not a silent fallback.
    let o = npurt(&tk, &[("ACL_EMU_DEVICES", "0"), ("NPURT_BACKEND", "acl")], &["info"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("Ascend not available"), "{}", text(&o));
}

/// An injected `aclrtSynchronizeStream` failure on the default stream names the stream as
/// the runtime does (`acl:0/default`), not by its raw ACL handle.
#[test]
fn a_failed_synchronize_names_the_default_stream() {
    let Some(emu) = emu_or_skip("sync fault label") else { return };
    let tk = toolkit("syncfault", Some(&emu));
    let dir = tk.join("io");
    std::fs::create_dir_all(&dir).unwrap();
    let a = npurt::npy::NpyArray {
        dtype: npurt::DType::F32,
        shape: vec![4],
        data: bytemuck::cast_slice(&[1f32, -2., 3., -4.]).to_vec(),
    };
    npurt::npy::write(dir.join("a.npy"), &a).unwrap();
    let out = dir.join("relu.npy");
    let o = npurt(
        &tk,
        &[("NPURT_BACKEND", "acl"), ("ACL_EMU_FAIL", "aclrtSynchronizeStream:1:507011")],
        &["op", "Relu", "--input", dir.join("a.npy").to_str().unwrap(), "--output", out.to_str().unwrap()],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    let line =
        t.lines().find(|l| l.contains("aclrtSynchronizeStream returned 507011")).unwrap_or_else(|| panic!("{t}"));
    assert!(line.contains("failed on acl:0/default (submission #1)"), "{line}");
    assert!(!t.contains("acl/stream0x"), "{t}");
}

/// `npurt bench bert` over the emulator reports what the emulator counted during the last
/// timed run and a modelled latency (labelled so); on the CPU the object is null.
#[test]
fn bench_bert_over_the_emulator_reports_its_counters_and_a_modelled_latency() {
    let Some(emu) = emu_or_skip("bench bert emulator counters") else { return };
    let tk = toolkit("bench", Some(&emu));
    let run_with = |backend: &str, capture: &str| {
        let json = tk.join(format!("bert-{backend}-{capture}.json"));
        let args = ["bench", "bert", "--model", "tiny", "--seq", "16", "--runs", "3", "--json", json.to_str().unwrap()];
        let o = npurt(&tk, &[("NPURT_BACKEND", backend), ("NPURT_ACL_GRAPH_CAPTURE", capture)], &args);
        assert!(o.status.success(), "{}", text(&o));
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (text(&o), doc["rows"][0].clone())
    };
    let run = |backend: &str| run_with(backend, "auto");
    let (t, row) = run("acl");
    let e = &row["emulator"];
    assert!(e.is_object(), "an emulator object over acl-emu: {row}");
    for k in [
        "phase1_calls",
        "phase2_calls",
        "h2d_copies",
        "d2h_copies",
        "h2d_bytes",
        "d2h_bytes",
        "allocations",
        "replays",
        "modelled_latency_ms",
        "roofline_ms",
        "latency_over_roofline",
    ] {
        assert!(e.get(k).is_some_and(|v| v.is_number()), "{k} in {e}");
    }
    // Captured by default: the third run replays what the second recorded.
    assert!(e["replays"].as_u64().unwrap() > 0, "the run replayed its capture: {e}");
    assert_eq!((e["phase1_calls"].as_u64(), e["phase2_calls"].as_u64()), (Some(0), Some(0)), "{e}");
    let (_, off) = run_with("acl", "off");
    let e = &off["emulator"];
    assert!(e["phase2_calls"].as_u64().unwrap() > 0, "without capture the run launches aclnn kernels: {e}");
    assert_eq!(e["replays"].as_u64(), Some(0), "NPURT_ACL_GRAPH_CAPTURE=off: {e}");
    assert!(e["modelled_latency_ms"].as_f64().unwrap() > 0.0, "{e}");
    assert!(row["backend_held_bytes"].as_u64().is_some_and(|b| b > 0), "the backend's frozen buffers: {row}");
    // Existing fields are still there.
    assert!(row["median_ms"].is_number() && row["host_tier_nodes"].is_number(), "{row}");
    let line = t.lines().find(|l| l.contains("acl-emu, last timed run")).unwrap_or_else(|| panic!("{t}"));
    assert!(line.contains("modelled latency") && line.contains("modelled, not measured"), "{line}");
    // The kernels' summed roofline bound is below the modelled latency (which adds launches).
    let (bound, latency) = (e["roofline_ms"].as_f64().unwrap(), e["modelled_latency_ms"].as_f64().unwrap());
    assert!(bound > 0.0 && bound < latency && line.contains("roofline bound"), "{e} {line}");

    let (t, row) = run("cpu");
    assert!(row["emulator"].is_null(), "no emulator object on the CPU: {row}");
    assert_eq!(row["backend_held_bytes"].as_u64(), Some(0), "{row}");
    assert!(!t.contains("acl-emu, last timed run"), "{t}");
}
