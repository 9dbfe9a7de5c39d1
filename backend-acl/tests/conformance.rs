//! The Foundation conformance suite, unchanged, on backend-acl over acl-emu: SoC
//! Ascend910A with the dtypes the 910 supports (no BF16), and Ascend910B2 in f32, fp16 and
//! bf16, where fused Attention runs as one aclnnFlashAttentionScore.

mod common;

use runtime::DType;
use std::sync::Arc;

fn check(tag: &str, dtypes: &[DType]) {
    check_on("Ascend910A", tag, dtypes);
}

/// The suite for `dtypes` on the emulated `soc`; returns how often each of `counted` was
/// called.
fn check_on(soc: &str, tag: &str, dtypes: &[DType]) -> Option<Vec<u64>> {
    let emu = common::emu_or_skip(tag)?;
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    assert_eq!(ctl.configure(&format!("soc={soc};fail=;workspace=4K")), 0);
    let tk = common::fake_toolkit(tag, &emu);
    let b = Arc::new(common::backend(&tk).expect("acl backend over acl-emu"));
    let s = npurt_test_support::conformance::run(b.clone(), dtypes, 7).expect("conformance run");
    for skip in s.skipped.iter().take(40) {
        eprintln!("SKIP acl: {skip}");
    }
    for m in s.mismatches.iter().take(20) {
        eprintln!("MISMATCH acl [{}] {}: {}", m.tier, m.case, m.detail);
    }
    eprintln!("acl {dtypes:?}: {} checks, {} skipped, {} mismatches", s.checked, s.skipped.len(), s.mismatches.len());
    assert!(s.checked > 0, "nothing was checked");
    assert!(s.mismatches.is_empty(), "{} mismatches in {} checks", s.mismatches.len(), s.checked);
    // The aclnn path really ran: the fast tier was checked, not only skipped.
    assert!(ctl.calls("aclnnAdd") > 0 && ctl.calls("aclnnSoftmax") + ctl.calls("aclnnAdd") > 0);
    let flash = ctl.calls("aclnnFlashAttentionScore");
    drop(b);
    let c = ctl.counters();
    assert_eq!((c.device_allocations, c.streams, c.events, c.executors, c.descriptors), (0, 0, 0, 0, 0), "{c:?}");
    assert_eq!(ctl.configure("soc=Ascend910A"), 0);
    Some(vec![flash])
}

/// On the 910B2 every f32, fp16 and bf16 Attention with a float mask or none goes through
/// `attention.aclnn-flash.cube` (fully masked rows, NaN and +inf mask entries included)
/// and matches the reference; u8 masks stay with the host tier.
fn flash_on_910b2(tag: &str, dtype: DType) {
    let Some(calls) = check_on("Ascend910B2", tag, &[dtype]) else { return };
    // At least: the 3 non-empty shapes without a mask and with an [s, t] mask, and the two
    // fixed cases with a float mask of every kind (-inf rows, NaN, +inf, -1e4, an infinite
    // v); the suite's other Attention cases have u8 masks.
    eprintln!("acl on Ascend910B2 {dtype}: {} aclnnFlashAttentionScore launches", calls[0]);
    assert!(calls[0] >= 8, "{dtype}: {} aclnnFlashAttentionScore launches", calls[0]);
}

#[test]
fn conformance_f16_on_910b2() {
    flash_on_910b2("conf-f16-b2", DType::F16);
}

#[test]
fn conformance_f32_on_910b2() {
    flash_on_910b2("conf-f32-b2", DType::F32);
}

#[test]
fn conformance_bf16_on_910b2() {
    flash_on_910b2("conf-bf16-b2", DType::BF16);
}

#[test]
fn conformance_f32() {
    check("conf-f32", &[DType::F32]);
}

#[test]
fn conformance_f16() {
    check("conf-f16", &[DType::F16]);
}

#[test]
fn conformance_integers() {
    check("conf-int", &[DType::I32, DType::I64, DType::U8]);
}
