//! One `#[test]` per backend for a case written once: [`per_backend!`](macro@crate::per_backend)
//! generates a module named after the case with the tests `cpu`, `acl_emu` (the Ascend
//! backend over acl-emu) and `cuda`, so that a failure names its backend
//! (`streams::some_case::acl_emu`). The test crate supplies the backend maker, so this
//! crate depends on no backend.

use crate::emu::serial;
use runtime::Backend;
use std::sync::Arc;

/// The backend names a case is generated for, in the order of its tests.
pub const BACKENDS: [&str; 3] = ["cpu", "acl_emu", "cuda"];

/// How the tests of one case run: backends the case does not apply to (with the reason,
/// printed when the test runs) and whether the case takes turns on every backend.
#[derive(Clone, Debug, Default)]
pub struct Runs {
    skips: Vec<(&'static str, &'static str)>,
    serial: bool,
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
/// does not apply to it per `runs`, or the backend is absent). The body of the test
/// [`per_backend!`](macro@crate::per_backend) generates.
pub fn run_case<M, F>(case: &str, backend: &str, runs: Runs, maker: M, body: F)
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
        Err(why) => skip(case, backend, &why),
    }
}

/// Defines `mod $case` with one `#[test]` per backend (`cpu`, `acl_emu`, `cuda`), each
/// running `$body(backend)` on the backend `$maker(name)` makes.
///
/// `$maker` is a path to a `fn(&str) -> Result<Arc<dyn Backend>, String>` of the test
/// crate (resolved inside the case's module, which glob-imports its parent: a
/// `crate::`-path always works); an `Err` is the reason the backend is absent, printed as
/// `SKIP <case> on <backend>: <why>`. The optional third argument is a
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
