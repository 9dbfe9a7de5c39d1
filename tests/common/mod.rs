//! Backends available to the whole-stack tests. A case written with [`on_every_backend!`]
//! becomes one test per backend — `<case>::cpu`, `<case>::acl_emu` (the Ascend backend
//! over acl-emu) and `<case>::cuda` — and a backend that is absent prints why its test
//! skipped.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use npurt_test_support::gate;

use npurt::{Backend, RuntimeConfig};
use std::sync::Arc;

/// The backend named `name` (one of [`npurt_test_support::per_backend::BACKENDS`]), or
/// why it is absent on this machine or in this build.
pub fn backend(name: &str) -> Result<Arc<dyn Backend>, String> {
    match name {
        "cpu" => npurt::cpu_backend(&RuntimeConfig::default()).map_err(|e| e.to_string()),
        "acl_emu" => acl_emu(),
        "cuda" => cuda(),
        other => Err(format!("unknown backend {other}")),
    }
}

/// The Ascend backend over the emulator, loaded from a fake toolkit whose libraries are
/// `libacl_emu.so`.
#[cfg(feature = "acl")]
fn acl_emu() -> Result<Arc<dyn Backend>, String> {
    use npurt_test_support::emu::{emu_lib, fake_toolkit};
    use std::path::PathBuf;
    use std::sync::OnceLock;
    static TOOLKIT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let toolkit = TOOLKIT.get_or_init(|| {
        let emu = emu_lib().ok_or("libacl_emu.so not found next to the test binary (or set ACL_EMU_LIB)")?;
        Ok(fake_toolkit("root-tests", &emu))
    });
    let lib = toolkit.clone()?.join("lib64");
    let cfg = backend_acl::AclConfig { lib_dir: Some(lib), ..backend_acl::AclConfig::default() };
    Ok(Arc::new(backend_acl::AclBackend::new(cfg).map_err(|e| e.to_string())?))
}

#[cfg(not(feature = "acl"))]
fn acl_emu() -> Result<Arc<dyn Backend>, String> {
    Err("the acl feature is off in this build".into())
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Arc<dyn Backend>, String> {
    npurt::cuda_backend(&RuntimeConfig::default()).map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Arc<dyn Backend>, String> {
    Err("the cuda feature is off in this build".into())
}

/// A runtime over `backend` with the default configuration.
pub fn runtime(backend: &Arc<dyn Backend>) -> runtime::Runtime {
    runtime::Runtime::with_backend(backend.clone(), RuntimeConfig::default()).expect("runtime")
}

/// `on_every_backend!(case, [runs,] |b| ...)`: [`npurt_test_support::per_backend!`] over
/// [`backend`] — `mod case` with the tests `cpu`, `acl_emu` and `cuda`.
#[macro_export]
macro_rules! on_every_backend {
    ($($args:tt)*) => {
        npurt_test_support::per_backend!(crate::common::backend, $($args)*);
    };
}
