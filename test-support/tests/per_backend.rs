//! `per_backend!` generates one test per backend, asks the maker for each backend once,
//! and skips (without calling the body) a backend the maker cannot make or the case
//! does not apply to. The maker here makes nothing on purpose, so these cases ignore
//! `NPURT_TEST_REQUIRE` (`Runs::ignore_required`; `run_case_requiring(None, ..)`).

use npurt_test_support::per_backend::{BACKENDS, Runs, run_case_requiring};
use runtime::Backend;
use std::sync::Arc;

/// A maker with no backend at all: every case skips.
fn absent(name: &str) -> Result<Arc<dyn Backend>, String> {
    Err(format!("no {name} in this test"))
}

npurt_test_support::per_backend!(crate::absent, generated_case, Runs::all().ignore_required(), |_b| {
    panic!("the body runs only on a backend the maker made");
});

npurt_test_support::per_backend!(
    crate::absent,
    generated_case_with_runs,
    Runs::all().skip("cuda", "not for this case").serial().ignore_required(),
    |_b: Arc<dyn Backend>| panic!("the body runs only on a backend the maker made"),
);

#[test]
fn a_skipped_backend_is_not_made() {
    let mut made = false;
    run_case_requiring(
        None,
        "case",
        "cuda",
        Runs::all().skip("cuda", "why"),
        |_| {
            made = true;
            Err("absent".to_string())
        },
        |_| panic!("skipped"),
    );
    assert!(!made, "a backend the case does not apply to is not made");
    run_case_requiring(
        None,
        "case",
        "cpu",
        Runs::all().skip("cuda", "why"),
        |_| {
            made = true;
            Err("absent".to_string())
        },
        |_| panic!("absent"),
    );
    assert!(made, "a backend the case applies to is made");
    assert_eq!(Runs::all().skip("acl_emu", "slow").skipped("acl_emu"), Some("slow"));
    assert_eq!(Runs::all().skip("acl_emu", "slow").skipped("cpu"), None);
    assert_eq!(BACKENDS, ["cpu", "acl_emu", "cuda"]);
}
