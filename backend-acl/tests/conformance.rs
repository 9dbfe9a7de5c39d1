//! The Foundation conformance suite, unchanged, on backend-acl over acl-emu (SoC
//! Ascend910A: the dtypes the 910 supports — no BF16).

mod common;

use runtime::DType;
use std::sync::Arc;

fn check(tag: &str, dtypes: &[DType]) {
    let Some(emu) = common::emu_or_skip(tag) else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    assert_eq!(ctl.configure("fail=;workspace=4K"), 0);
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
    drop(b);
    let c = ctl.counters();
    assert_eq!((c.device_allocations, c.streams, c.events, c.executors, c.descriptors), (0, 0, 0, 0, 0), "{c:?}");
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
