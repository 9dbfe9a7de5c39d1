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
    // Exact f32 products (the host tier on the 910): the whole-stack cases compare f32
    // results tightly. The 910's FP16 computation of f32 products (the default) is covered
    // by tests/ascend_models.rs.
    let cfg = backend_acl::AclConfig { lib_dir: Some(lib), fp32_matmul: backend_acl::Fp32Matmul::Exact };
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

/// The Ascend backend over acl-emu emulating SoC `soc`, with the backend's default
/// configuration (f32 products on a 910's Cube in FP16), the emulator's control handle, and
/// this binary's turn on the emulator (held until drop, which restores the default SoC).
#[cfg(feature = "acl")]
pub struct AclEmu {
    pub backend: Arc<dyn Backend>,
    pub ctl: npurt_test_support::emu::Emu,
    /// The emulator's run counters, through the backend.
    pub run: backend_acl::Emulator,
    _turn: std::sync::MutexGuard<'static, ()>,
}

#[cfg(feature = "acl")]
impl AclEmu {
    /// `None` (with a printed SKIP) when the emulator library was not built.
    pub fn on(soc: &str, test: &str) -> Option<AclEmu> {
        use npurt_test_support::emu::{Emu, emu_or_skip, fake_toolkit, serial};
        let emu = emu_or_skip(test)?;
        let turn = serial();
        let ctl = Emu::open(&emu);
        assert_eq!(ctl.configure(&format!("soc={soc};fail=")), 0, "configure the emulator as {soc}");
        let lib = fake_toolkit(&format!("soc-{soc}"), &emu).join("lib64");
        let cfg = backend_acl::AclConfig { lib_dir: Some(lib), ..backend_acl::AclConfig::default() };
        let acl = backend_acl::AclBackend::new(cfg).expect("acl backend over acl-emu");
        let run = acl.emulator().expect("acl-emu exports its run counters");
        let backend: Arc<dyn Backend> = Arc::new(acl);
        Some(AclEmu { backend, ctl, run, _turn: turn })
    }

    /// Drops the backend and returns the emulator's outstanding objects, which must all be
    /// zero once every runtime over it is gone.
    pub fn finish(self) -> npurt_test_support::emu::EmuCounters {
        let AclEmu { backend, ctl, run, _turn } = self;
        drop((backend, run));
        let c = ctl.counters();
        assert_eq!(ctl.configure("soc=Ascend910A;fail="), 0, "restore the default SoC");
        c
    }
}

/// A runtime over `backend` with the default configuration, except that compiled graphs
/// and embedders run in f32 (`auto` would be fp16 on Ascend): the whole-stack cases compare
/// f32 results tightly. The fp16 default on Ascend is covered by tests/ascend_models.rs.
pub fn runtime(backend: &Arc<dyn Backend>) -> runtime::Runtime {
    let cfg = RuntimeConfig { precision: npurt::Precision::F32, ..RuntimeConfig::default() };
    runtime::Runtime::with_backend(backend.clone(), cfg).expect("runtime")
}

/// BERT inputs `[b, s]`: token ids below `vocab`, alternating token types, and an
/// attention mask that pads the second sequence after 3/4 of its length.
pub fn bert_inputs(rt: &runtime::Runtime, b: usize, s: usize, vocab: usize) -> Vec<npurt::Tensor> {
    let ids: Vec<i64> = (0..b * s).map(|i| ((i * 7 + 3) % vocab) as i64).collect();
    let tt: Vec<i64> = (0..b * s).map(|i| ((i / s + i) % 2) as i64).collect();
    let mask: Vec<f32> = (0..b * s).map(|i| if i / s == 1 && i % s >= 3 * s / 4 { 0.0 } else { 1.0 }).collect();
    vec![
        rt.from_slice(&ids, [b, s], 0).unwrap(),
        rt.from_slice(&tt, [b, s], 0).unwrap(),
        rt.from_slice(&mask, [b, s], 0).unwrap(),
    ]
}

/// Cosine similarity of two f32 tensors, accumulated in f64.
pub fn cosine(a: &npurt::Tensor, b: &npurt::Tensor) -> f64 {
    let (x, y) = (a.to_ndarray::<f32>().unwrap(), b.to_ndarray::<f32>().unwrap());
    assert_eq!(x.shape(), y.shape());
    let dot: f64 = x.iter().zip(y.iter()).map(|(a, b)| *a as f64 * *b as f64).sum();
    let nx: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
    let ny: f64 = y.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
    dot / (nx * ny)
}

/// `on_every_backend!(case, [runs,] |b| ...)`: [`npurt_test_support::per_backend!`] over
/// [`backend`] — `mod case` with the tests `cpu`, `acl_emu` and `cuda`.
#[macro_export]
macro_rules! on_every_backend {
    ($($args:tt)*) => {
        npurt_test_support::per_backend!($crate::common::backend, $($args)*);
    };
}
