//! Every op x dtype x tier against the reference, on every backend present.

mod common;

use npurt::DType;

fn check(dtypes: &[DType]) {
    for (name, b) in common::backends() {
        let s = npurt::conformance::run(b, dtypes, 7).expect("conformance run");
        for skip in &s.skipped {
            eprintln!("SKIP {name}: {skip}");
        }
        for m in s.mismatches.iter().take(20) {
            eprintln!("MISMATCH {name} [{}] {}: {}", m.tier, m.case, m.detail);
        }
        assert!(s.checked > 0, "{name}: nothing was checked");
        assert!(s.mismatches.is_empty(), "{name}: {} mismatches in {} checks", s.mismatches.len(), s.checked);
        eprintln!("{name} {dtypes:?}: {} checks, {} skipped, 0 mismatches", s.checked, s.skipped.len());
    }
}

#[test]
fn conformance_f32() {
    check(&[DType::F32]);
}

#[test]
fn conformance_f16() {
    check(&[DType::F16]);
}

#[test]
fn conformance_bf16() {
    check(&[DType::BF16]);
}

#[test]
fn conformance_integers() {
    check(&[DType::I32, DType::I64, DType::U8]);
}
