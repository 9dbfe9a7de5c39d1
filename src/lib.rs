//! npurt: one operator table for Ascend NPUs, NVIDIA GPUs and the CPU.
//!
//! [`Runtime::new`] discovers the backends compiled in, picks the best one present
//! (Ascend, then CUDA, then the CPU; `NPURT_BACKEND` or [`RuntimeConfig::backend`]
//! overrides) and announces the choice in the log.
//!
//! ```
//! use npurt::{Op, Runtime};
//! let rt = Runtime::new()?;
//! let a = rt.from_slice(&[1f32, 2., 3., 4.], [2, 2], 0)?;
//! let b = rt.from_slice(&[1f32, 0., 0., 1.], [2, 2], 0)?;
//! let c = &rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &b])?[0];
//! assert_eq!(c.to_ndarray::<f32>()?.into_raw_vec_and_offset().0, vec![1., 2., 3., 4.]);
//! # Ok::<(), npurt::Error>(())
//! ```

pub mod embed;
pub mod files;
pub mod llm;
pub mod models;
pub mod npy;

use std::sync::Arc;

pub use runtime::op as runtime_op;
pub use runtime::{
    AttentionLayout, Block, BlockKind, DType, DeviceInfo, Element, Error, Event, ExecReport, GeluApprox, HwMapping,
    Layout, MemoryInfo, Op, OpKind, Optimizations, PoolConfig, PoolStats, Precision, Result, ReuseStrategy,
    RuntimeConfig, Scheduling, Shape, Stream, StreamScope, Task, Tensor, TensorMeta, Tier, Unit, UnitClass,
    Utilisation, bf16, f16, ndarray,
};
pub use runtime::{Backend, KernelInfo};

/// Backends compiled into this build, in fallback order.
pub fn compiled_backends() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "acl") {
        v.push("acl");
    }
    if cfg!(feature = "cuda") {
        v.push("cuda");
    }
    v.push("cpu");
    v
}

/// The CUDA backend, when a GPU and driver are present.
#[cfg(feature = "cuda")]
pub fn cuda_backend(_config: &RuntimeConfig) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(backend_cuda::CudaBackend::probe()?))
}

/// The Ascend backend, when CANN's libraries and a device are present (discovery:
/// `NPURT_ACL_LIB_DIR`, `ASCEND_TOOLKIT_HOME`, `ASCEND_HOME_PATH`, the default toolkit
/// path, the system loader).
#[cfg(feature = "acl")]
pub fn acl_backend(config: &RuntimeConfig) -> Result<Arc<dyn Backend>> {
    Ok(open_acl(config)?.backend)
}

/// What acl-emu counted and modelled under the Ascend backend (see [`Runtime::acl_emulator`]).
#[cfg(feature = "acl")]
pub use backend_acl::{Emulator as AclEmulator, RunCounters as AclRunCounters};

/// A backend, and the emulator under it when it is Ascend over acl-emu.
struct Opened {
    backend: Arc<dyn Backend>,
    #[cfg(feature = "acl")]
    emulator: Option<AclEmulator>,
}

impl Opened {
    fn plain(backend: Arc<dyn Backend>) -> Opened {
        Opened {
            backend,
            #[cfg(feature = "acl")]
            emulator: None,
        }
    }
}

#[cfg(feature = "acl")]
fn open_acl(_config: &RuntimeConfig) -> Result<Opened> {
    let c = backend_acl::AclConfig::from_env()?;
    let b = backend_acl::AclBackend::new(c)?;
    let emulator = b.emulator();
    Ok(Opened { backend: Arc::new(b), emulator })
}

/// The CPU backend as configured by `config`.
pub fn cpu_backend(config: &RuntimeConfig) -> Result<Arc<dyn Backend>> {
    let b = backend_cpu::CpuBackend::new(backend_cpu::CpuConfig {
        devices: config.cpu_devices,
        threads: config.threads,
        ..backend_cpu::CpuConfig::default()
    })?;
    Ok(Arc::new(b))
}

/// Opens the backend `config` names, or the best one present.
pub fn open_backend(config: &RuntimeConfig) -> Result<Arc<dyn Backend>> {
    Ok(open(config)?.backend)
}

/// Reads the `NPURT_*` variables of every backend compiled in, whichever one opens: a
/// value that is not UTF-8, is empty or is unknown is [`Error::Config`] naming the
/// variable, so a bad value is refused rather than ignored (or lost in the fallback).
fn check_backend_env() -> Result<()> {
    backend_cpu::CpuBackend::check_env()?;
    #[cfg(feature = "acl")]
    backend_acl::AclConfig::from_env()?;
    #[cfg(feature = "cuda")]
    backend_cuda::CudaConfig::from_env()?;
    Ok(())
}

fn open(config: &RuntimeConfig) -> Result<Opened> {
    check_backend_env()?;
    let wanted = config.backend.as_deref().filter(|b| *b != "auto");
    match wanted {
        Some("cpu") => cpu_backend(config).map(Opened::plain),
        #[cfg(feature = "acl")]
        Some("acl" | "ascend") => open_acl(config),
        #[cfg(feature = "cuda")]
        Some("cuda") => cuda_backend(config).map(Opened::plain),
        #[allow(unreachable_patterns)]
        Some(other @ ("cuda" | "acl" | "ascend")) => Err(Error::Unsupported(format!(
            "backend {other:?} is not compiled into this build (compiled: {})",
            compiled_backends().join(", ")
        ))),
        Some(other) => Err(Error::Config(format!("unknown backend {other:?}"))),
        None => {
            // Fallback order: Ascend -> CUDA -> CPU, one log line per backend passed over.
            log::info!("no backend requested; trying {} in order", compiled_backends().join(" -> "));
            #[cfg(feature = "acl")]
            match open_acl(config) {
                Ok(b) => return Ok(b),
                Err(e) => log::info!("npurt: {e}; trying the next backend"),
            }
            #[cfg(feature = "cuda")]
            match cuda_backend(config) {
                Ok(b) => return Ok(Opened::plain(b)),
                Err(e) => log::info!("npurt: {e}; falling back to the CPU backend"),
            }
            cpu_backend(config).map(Opened::plain)
        }
    }
}

/// The runtime users hold: [`runtime::Runtime`] over a discovered backend. `Send + Sync`,
/// cheap to clone, as the runtime it wraps.
#[derive(Clone, Debug)]
pub struct Runtime {
    inner: runtime::Runtime,
    #[cfg(feature = "acl")]
    acl_emulator: Option<AclEmulator>,
}

impl std::ops::Deref for Runtime {
    type Target = runtime::Runtime;
    fn deref(&self) -> &runtime::Runtime {
        &self.inner
    }
}

impl Runtime {
    /// Default configuration with `NPURT_*` environment overrides, best backend present.
    pub fn new() -> Result<Runtime> {
        Runtime::with_config(RuntimeConfig::default().with_env()?)
    }

    /// Exactly this configuration (no environment overrides).
    pub fn with_config(config: RuntimeConfig) -> Result<Runtime> {
        config.validate()?;
        let opened = open(&config)?;
        let backend = opened.backend;
        log::info!("npurt: using the {} backend ({} device(s))", backend.name(), backend.device_count());
        Ok(Runtime {
            inner: runtime::Runtime::with_backend(backend, config)?,
            #[cfg(feature = "acl")]
            acl_emulator: opened.emulator,
        })
    }

    /// The backend-neutral runtime inside.
    pub fn inner(&self) -> &runtime::Runtime {
        &self.inner
    }

    /// acl-emu's run counters and modelled clock, when the backend is Ascend over the
    /// emulator; `None` on any other backend and on a real CANN host.
    #[cfg(feature = "acl")]
    pub fn acl_emulator(&self) -> Option<&AclEmulator> {
        self.acl_emulator.as_ref()
    }
}
