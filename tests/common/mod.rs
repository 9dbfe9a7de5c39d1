//! Backends available to the whole-stack tests. Each test runs on every backend that is
//! compiled in and present; a backend that is absent is reported as skipped, visibly.
#![allow(dead_code)]

pub mod gate;

use npurt::{Backend, RuntimeConfig};
use std::sync::Arc;

/// `(name, backend)` for every backend present on this machine.
pub fn backends() -> Vec<(&'static str, Arc<dyn Backend>)> {
    let mut v: Vec<(&'static str, Arc<dyn Backend>)> = Vec::new();
    match npurt::cpu_backend(&RuntimeConfig::default()) {
        Ok(b) => v.push(("cpu", b)),
        Err(e) => eprintln!("SKIP cpu backend: {e}"),
    }
    #[cfg(feature = "cuda")]
    match npurt::cuda_backend(&RuntimeConfig::default()) {
        Ok(b) => v.push(("cuda", b)),
        Err(e) => eprintln!("SKIP cuda backend: {e}"),
    }
    v
}

/// A runtime over `backend` with the default configuration.
pub fn runtime(backend: &Arc<dyn Backend>) -> runtime::Runtime {
    runtime::Runtime::with_backend(backend.clone(), RuntimeConfig::default()).expect("runtime")
}

/// Defines one `#[test]` per backend name that runs `$body(backend)`.
#[macro_export]
macro_rules! test_on_every_backend {
    ($name:ident, $body:expr) => {
        #[test]
        fn $name() {
            let all = common::backends();
            assert!(!all.is_empty(), "no backend at all (the CPU backend is always compiled in)");
            for (bname, b) in all {
                eprintln!("{} on {bname}", stringify!($name));
                ($body)(b);
            }
        }
    };
}
