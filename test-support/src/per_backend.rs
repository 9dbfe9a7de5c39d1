//! One `#[test]` per backend for a case written once: [`per_backend!`](macro@crate::per_backend)
//! generates a module named after the case with the tests `cpu`, `acl_emu` (the Ascend
//! backend over acl-emu) and `cuda`, so that a failure names its backend
//! (`streams::some_case::acl_emu`). The test crate supplies the backend maker, so this
//! crate depends on no backend. A backend the maker cannot make skips its test, unless
//! `NPURT_TEST_REQUIRE` names it ([`crate::require`]): then the test fails.

use crate::emu::serial;
pub use crate::require::{BACKENDS, REQUIRE_VAR};
use crate::require::{absent, require_from_env};
use runtime::Backend;
use std::sync::Arc;

/// How the tests of one case run: backends the case does not apply to (with the reason,
/// printed when the test runs) and whether the case takes turns on every backend.
#[derive(Clone, Debug, Default)]
pub struct Runs {
    skips: Vec<(&'static str, &'static str)>,
    serial: bool,
    ignore_required: bool,
}

impl Runs {
    /// Every backend; only the `acl_emu` test takes turns (the emulator is shared by the
    /// whole test binary).
    pub fn all() -> Runs {
        Runs::default()
    }

    /// The case does not run on `backend`; its test prints `SKIP <case> on <backend>: <why>`.
    pub fn skip(mut self, backend: &'static str, why: &'static str) -> Runs {
        self.skips.push((backend, why));
        self
    }

    /// The case takes turns with the other serial cases of its binary on every backend,
    /// not only on `acl_emu`.
    pub fn serial(mut self) -> Runs {
        self.serial = true;
        self
    }

    /// A backend the maker cannot make skips even when `NPURT_TEST_REQUIRE` names it: for
    /// the tests of this machinery, whose makers are stand-ins that make nothing.
    pub fn ignore_required(mut self) -> Runs {
        self.ignore_required = true;
        self
    }

    /// Why the case does not run on `backend`, if it does not.
    pub fn skipped(&self, backend: &str) -> Option<&'static str> {
        self.skips.iter().find(|(b, _)| *b == backend).map(|(_, why)| *why)
    }
}

/// Prints the line a skipped case prints: `SKIP <case> on <backend>: <why>`.
pub fn skip(case: &str, backend: &str, why: &str) {
    eprintln!("SKIP {case} on {backend}: {why}");
}

/// Runs `body` on the backend `maker(backend)` makes, or prints why it skipped (the case
/// does not apply to it per `runs`, or the backend is absent and `NPURT_TEST_REQUIRE` does
/// not name it); an absent backend that is required fails the test. The body of the test
/// [`per_backend!`](macro@crate::per_backend) generates.
pub fn run_case<M, F>(case: &str, backend: &str, runs: Runs, maker: M, body: F)
where
    M: FnOnce(&str) -> Result<Arc<dyn Backend>, String>,
    F: FnOnce(Arc<dyn Backend>),
{
    run_case_requiring(require_from_env().as_deref(), case, backend, runs, maker, body)
}

/// [`run_case`] with `require`, the value of `NPURT_TEST_REQUIRE`, given (`None`: unset).
pub fn run_case_requiring<M, F>(require: Option<&str>, case: &str, backend: &str, runs: Runs, maker: M, body: F)
where
    M: FnOnce(&str) -> Result<Arc<dyn Backend>, String>,
    F: FnOnce(Arc<dyn Backend>),
{
    if let Some(why) = runs.skipped(backend) {
        skip(case, backend, why);
        return;
    }
    let _turn = (runs.serial || backend == "acl_emu").then(serial);
    match maker(backend) {
        Ok(b) => {
            eprintln!("{case} on {backend}");
            body(b)
        }
        Err(why) => {
            let require = if runs.ignore_required { None } else { require };
            if let Err(msg) = absent(require, case, backend, &why) {
                panic!("{msg}");
            }
            skip(case, backend, &why)
        }
    }
}

/// Defines `mod $case` with one `#[test]` per backend (`cpu`, `acl_emu`, `cuda`), each
/// running `$body(backend)` on the backend `$maker(name)` makes.
///
/// `$maker` is a path to a `fn(&str) -> Result<Arc<dyn Backend>, String>` of the test
/// crate (resolved inside the case's module, which glob-imports its parent: a
/// `crate::`-path always works); an `Err` is the reason the backend is absent, printed as
/// `SKIP <case> on <backend>: <why>`, or the test's failure when `NPURT_TEST_REQUIRE`
/// names the backend ([`crate::require`]). The optional third argument is a
/// [`Runs`](crate::per_backend::Runs) (default [`Runs::all`](crate::per_backend::Runs::all)).
///
/// ```ignore
/// npurt_test_support::per_backend!(crate::common::backend, relu_is_exact, |b| {
///     let rt = common::runtime(&b);
///     // ...
/// });
/// npurt_test_support::per_backend!(
///     crate::common::backend,
///     big_graph,
///     Runs::all().skip("acl_emu", "too slow on the emulator"),
///     |b| { /* ... */ }
/// );
/// ```
#[macro_export]
macro_rules! per_backend {
    ($maker:path, $case:ident, $runs:expr, $body:expr $(,)?) => {
        mod $case {
            #[allow(unused_imports)]
            use super::*;

            fn run_on_backend(backend: &str) {
                $crate::per_backend::run_case(stringify!($case), backend, $runs, $maker, $body);
            }

            #[test]
            fn cpu() {
                run_on_backend("cpu");
            }

            #[test]
            fn acl_emu() {
                run_on_backend("acl_emu");
            }

            #[test]
            fn cuda() {
                run_on_backend("cuda");
            }
        }
    };
    ($maker:path, $case:ident, $body:expr $(,)?) => {
        $crate::per_backend!($maker, $case, $crate::per_backend::Runs::all(), $body);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn absent_backend(_: &str) -> Result<Arc<dyn Backend>, String> {
        Err("libacl_emu.so not found".into())
    }

    #[test]
    fn an_absent_backend_skips_unless_required_and_then_fails() {
        // Not required: the case skips, and its body never runs.
        run_case_requiring(None, "case", "acl_emu", Runs::all(), absent_backend, |_| panic!("ran"));
        run_case_requiring(Some("cpu"), "case", "acl_emu", Runs::all(), absent_backend, |_| panic!("ran"));
        // Required: the test fails, saying why.
        let failed = std::panic::catch_unwind(|| {
            run_case_requiring(Some("cpu,acl_emu"), "case", "acl_emu", Runs::all(), absent_backend, |_| {})
        });
        let msg = failed.expect_err("a required absent backend fails");
        let msg = msg.downcast_ref::<String>().expect("a formatted message");
        assert!(msg.contains("required") && msg.contains("libacl_emu.so not found"), "{msg}");
        // A case that does not apply to the backend skips even when it is required, and so
        // does a case whose maker is a stand-in.
        let runs = Runs::all().skip("acl_emu", "not on the emulator");
        run_case_requiring(Some("acl_emu"), "case", "acl_emu", runs, absent_backend, |_| panic!("ran"));
        let runs = Runs::all().ignore_required();
        run_case_requiring(Some("acl_emu"), "case", "acl_emu", runs, absent_backend, |_| panic!("ran"));
    }
}
