//! Bad input over acl-emu: missing libraries / symbols, no devices, OOM at the emulated
//! capacity, and every ACL call of a workload failed once in turn. None may panic or
//! hang; every failure is a typed error naming the ACL call; teardown leaks nothing.

mod common;

use backend_acl::{AclBackend, AclBackendError, AclConfig};
use runtime::{Backend, DType, Op, Runtime, RuntimeConfig};
use std::sync::Arc;

fn unavailable(r: Result<AclBackend, AclBackendError>) -> String {
    match r {
        Err(e @ AclBackendError::Unavailable(_)) => {
            let s = e.to_string();
            assert!(s.starts_with("Ascend not available: "), "{s}");
            s
        }
        Err(e) => panic!("expected Unavailable, got {e}"),
        Ok(_) => panic!("expected Unavailable, got a backend"),
    }
}

#[test]
fn missing_library_is_unavailable() {
    let dir = npurt_test_support::scratch::dir("acl-empty");
    let s = unavailable(AclBackend::new(AclConfig { lib_dir: Some(dir.clone()), ..AclConfig::default() }));
    assert!(s.contains("libascendcl.so") && s.contains(&dir.display().to_string()), "{s}");
}

#[test]
fn missing_symbol_is_unavailable() {
    let Some(emu) = common::emu_or_skip("missing_symbol") else { return };
    let _g = common::serial();
    let tk = common::fake_toolkit("nosym", &emu);
    // An operator library that exports none of the aclnn operators.
    let other = std::env::current_exe().unwrap().parent().unwrap().join("libacl_emu_not_here.so");
    let libm = ["/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file());
    let Some(libm) = libm else {
        eprintln!("SKIP missing_symbol: no libm found to stand in for libopapi.so ({})", other.display());
        return;
    };
    let op = tk.join("lib64/libopapi.so");
    std::fs::remove_file(&op).unwrap();
    std::os::unix::fs::symlink(&libm, &op).unwrap();
    let s = unavailable(common::backend(&tk));
    assert!(s.contains("symbol aclnn") && s.contains("libopapi.so"), "{s}");
}

#[test]
fn no_device_is_unavailable() {
    let Some(emu) = common::emu_or_skip("no_device") else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    let tk = common::fake_toolkit("nodev", &emu);
    assert_eq!(ctl.configure("devices=0;fail="), 0);
    let s = unavailable(common::backend(&tk));
    assert!(s.contains("aclrtGetDeviceCount") && s.contains("207004"), "{s}");
    assert_eq!(ctl.configure("devices=1"), 0);
    assert!(common::backend(&tk).is_ok());
}

#[test]
fn oom_at_the_emulated_capacity_is_a_typed_error() {
    let Some(emu) = common::emu_or_skip("oom") else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    let tk = common::fake_toolkit("oom", &emu);
    assert_eq!(ctl.configure("memory=8M;fail="), 0);
    {
        let b: Arc<dyn Backend> = Arc::new(common::backend(&tk).unwrap());
        let e = b.alloc(0, 16 << 20, 64).unwrap_err();
        assert!(matches!(e, runtime::Error::OutOfMemory { .. }) && e.to_string().contains("207001"), "{e}");
        let rt = Runtime::with_backend(b.clone(), RuntimeConfig::default()).unwrap();
        let e = rt.empty(DType::F32, [4 << 20], 0).unwrap_err();
        assert!(matches!(e, runtime::Error::OutOfMemory { .. }) || e.to_string().contains("207001"), "{e}");
        // Smaller work still runs afterwards.
        let t = rt.from_slice(&[1f32, -2., 3.], [3], 0).unwrap();
        let y = rt.run(&Op::Relu, &[&t]).unwrap();
        assert_eq!(y[0].to_ndarray::<f32>().unwrap().into_raw_vec_and_offset().0, vec![1., 0., 3.]);
    }
    let c = ctl.counters();
    assert_eq!(c.device_allocations, 0, "{c:?}");
    assert_eq!(ctl.configure("memory=1G"), 0);
}

/// MatMul, Add, ReLU on the default stream, Softmax and Gather on a user stream, then a
/// masked Attention.
fn workload(tk: &std::path::Path) -> Result<Vec<f32>, String> {
    let b: Arc<dyn Backend> = Arc::new(common::backend(tk).map_err(|e| e.to_string())?);
    let rt = Runtime::with_backend(b, RuntimeConfig::default()).map_err(|e| e.to_string())?;
    let e = |e: runtime::Error| e.to_string();
    let h = |v: &[f32]| v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>();
    let a = rt.from_slice(&h(&[1., 2., 3., 4., 5., 6.]), [2, 3], 0).map_err(e)?;
    let w = rt.from_slice(&h(&[1., 0., 0., 1., 1., -1.]), [3, 2], 0).map_err(e)?;
    let m = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &w]).map_err(e)?.remove(0);
    let s = rt.run(&Op::Add, &[&m, &m]).map_err(e)?.remove(0);
    let r = rt.run(&Op::Relu, &[&s]).map_err(e)?.remove(0);
    let st = rt.stream(0).map_err(e)?;
    let out = {
        let _scope = rt.stream_scope(&st);
        let sm = rt.run(&Op::Softmax { axis: -1 }, &[&r]).map_err(e)?.remove(0);
        let idx = rt.from_slice(&[1i64, -2], [2], 0).map_err(e)?;
        let g = rt.run(&Op::Gather { axis: 0 }, &[&sm, &idx]).map_err(e)?.remove(0);
        st.synchronize().map_err(e)?;
        g
    };
    // Fused Attention (aclnn composition, or aclnnFlashAttentionScore on Atlas A2) whose
    // second query row has every key masked.
    let q = rt.from_slice(&h(&[1., 0., 0., 1.]), [1, 1, 2, 2], 0).map_err(e)?;
    let v = rt.from_slice(&h(&[1., 2., 3., 4.]), [1, 1, 2, 2], 0).map_err(e)?;
    let mask = rt.from_slice(&h(&[0., 0., f32::NEG_INFINITY, f32::NEG_INFINITY]), [1, 1, 2, 2], 0).map_err(e)?;
    let att = rt
        .run(
            &Op::Attention { scale: None, layout: runtime::AttentionLayout::Bnsd, causal: false },
            &[&q, &q, &v, &mask],
        )
        .map_err(e)?
        .remove(0);
    let mut all = Vec::new();
    for t in [&out, &att] {
        let c = rt.run(&Op::Cast { to: DType::F32 }, &[t]).map_err(e)?.remove(0);
        all.extend(c.to_ndarray::<f32>().map_err(e)?.into_raw_vec_and_offset().0);
    }
    Ok(all)
}

#[test]
fn every_acl_call_failed_once_in_turn() {
    every_acl_call_failed_once_in_turn_on("Ascend910A", "faults");
}

/// On the 910B2 the masked Attention is one aclnnFlashAttentionScore (q scaled first, the
/// fully masked row found from the mask and zeroed): its two symbols fail in turn too.
#[test]
fn every_acl_call_failed_once_in_turn_on_910b2() {
    every_acl_call_failed_once_in_turn_on("Ascend910B2", "faults-b2");
}

fn every_acl_call_failed_once_in_turn_on(soc: &str, tag: &str) {
    let Some(emu) = common::emu_or_skip(tag) else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    let tk = common::fake_toolkit(tag, &emu);
    assert_eq!(ctl.configure(&format!("soc={soc};fail=")), 0);
    let clean = workload(&tk).expect("fault-free run");
    let flash = ["aclnnFlashAttentionScoreGetWorkspaceSize", "aclnnFlashAttentionScore"].map(|n| ctl.calls(n));
    let on_a2 = soc != "Ascend910A";
    assert_eq!(flash, if on_a2 { [1, 1] } else { [0, 0] }, "{soc}: aclnnFlashAttentionScore calls");
    // [[1,2,3],[4,5,6]] @ w = [[4,-1],[10,-1]]; x2, relu -> [[8,0],[20,0]];
    // softmax rows -> [[~1, ~0.0003], [1, ~0]]; gather rows 1 and -2 -> row1, row0.
    // Attention: row 0 = softmax([1/sqrt 2, 0]) . v = [1.6604, 2.6604]; row 1 masked = 0.
    assert_eq!(clean.len(), 8);
    assert!((clean[4] - 1.6604).abs() < 2e-3 && (clean[5] - 2.6604).abs() < 2e-3, "{clean:?}");
    assert_eq!(&clean[6..], &[0.0, 0.0], "a fully masked row is 0");
    assert!((clean[0] - 1.0).abs() < 1e-3 && clean[1].abs() < 1e-3, "{clean:?}");
    assert!((clean[2] - 0.99966).abs() < 1e-3 && (clean[3] - 0.000335).abs() < 1e-4, "{clean:?}");
    let used: Vec<(&str, u64)> =
        acl_emu::EXPORTED.iter().chain(ACLNN).map(|&n| (n, ctl.calls(n))).filter(|(_, c)| *c > 0).collect();
    assert!(used.len() > 15, "{used:?}");
    let mut failures = 0;
    let mut surfaced = std::collections::BTreeSet::new();
    for (sym, count) in &used {
        for nth in [1, *count].into_iter().collect::<std::collections::BTreeSet<_>>() {
            assert_eq!(ctl.configure(&format!("fail={sym}:{nth}:507899")), 0);
            let r = workload(&tk);
            match &r {
                Ok(v) => assert_eq!(v.len(), 8, "{sym}#{nth}"),
                Err(msg) => {
                    failures += 1;
                    surfaced.insert(*sym);
                    assert!(
                        msg.contains(sym) && msg.contains("507899"),
                        "{sym}#{nth}: error does not name the call: {msg}"
                    );
                }
            }
            let c = ctl.counters();
            assert_eq!(
                (
                    c.device_allocations,
                    c.host_allocations,
                    c.streams,
                    c.events,
                    c.executors,
                    c.descriptors,
                    c.device_refs
                ),
                (0, 0, 0, 0, 0, 0, 0),
                "{sym}#{nth} leaked: {c:?} (result {r:?})"
            );
        }
    }
    assert!(failures > 10, "only {failures} injected faults surfaced");
    if on_a2 {
        for sym in ["aclnnFlashAttentionScoreGetWorkspaceSize", "aclnnFlashAttentionScore"] {
            assert!(surfaced.contains(sym), "{soc}: a fault of {sym} never surfaced");
        }
    }
    assert_eq!(ctl.configure("soc=Ascend910A;fail="), 0);
}

const ACLNN: &[&str] = &[
    "aclnnMatmulGetWorkspaceSize",
    "aclnnMatmul",
    "aclnnAddGetWorkspaceSize",
    "aclnnAdd",
    "aclnnReluGetWorkspaceSize",
    "aclnnRelu",
    "aclnnSoftmaxGetWorkspaceSize",
    "aclnnSoftmax",
    "aclnnInplaceCopyGetWorkspaceSize",
    "aclnnInplaceCopy",
    "aclnnAddsGetWorkspaceSize",
    "aclnnAdds",
    "aclnnIndexSelectGetWorkspaceSize",
    "aclnnIndexSelect",
    "aclnnCastGetWorkspaceSize",
    "aclnnCast",
    "aclnnMulsGetWorkspaceSize",
    "aclnnMuls",
    "aclnnAmaxGetWorkspaceSize",
    "aclnnAmax",
    "aclnnEqScalarGetWorkspaceSize",
    "aclnnEqScalar",
    "aclnnInplaceMaskedFillScalarGetWorkspaceSize",
    "aclnnInplaceMaskedFillScalar",
    "aclnnFlashAttentionScoreGetWorkspaceSize",
    "aclnnFlashAttentionScore",
];
