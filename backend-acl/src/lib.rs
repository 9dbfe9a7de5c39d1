//! `Backend` for Huawei Ascend NPUs over the CANN libraries (through `acl-sys`).
//!
//! * Devices: count, SoC name (matched on the whole string), memory, cube/vector cores
//!   and nominal peaks per SoC; the calling thread is bound to a device automatically
//!   (`aclrtSetCurrentContext` with the device's context) before every ACL call.
//! * Memory (`memory`): `aclrtMalloc` under the runtime's pool, every address checked
//!   against the device's allocation table (contract rule M1) and 32-byte aligned for
//!   aclnn; frees wait for streams with queued work (M2). Host copies are synchronous
//!   `aclrtMemcpy` from pageable memory (`aclrtMemcpyAsync`, `acl/acl_rt.h`: async copies
//!   only from pinned buffers).
//! * Streams and events (`stream`): `aclrtCreateStreamWithConfig`, falling back to
//!   `aclrtCreateStream`; each stream owns a workspace and a scratch buffer.
//! * Frozen plans (`frozen`): a compiled graph's launches per run arena, whose aclnn
//!   executors are recorded once (phase 1, made repeatable) and relaunched every run with
//!   only the graph's input and output addresses patched.
//! * Kernels (`kernels`): every op of the table through aclnn two-phase calls (tier
//!   `fast`, units Cube / Vector / Scalar), and a host reference tier (the runtime's
//!   reference kernels on copies) that is the ground truth and the implementation chosen
//!   for what the SoC cannot run (BF16, aclnnExp, AddLayerNorm... on the 910).
//!
//! Every ACL and aclnn call goes through `acl_sys::result`. Modules: `probe` (loading
//! CANN, SoC figures, units), `device` (per-device records), `memory`, `stream`,
//! `kernels`, `backend` (the `runtime::Backend` impl), [`error`].

#![allow(clippy::too_many_arguments)]

mod backend;
mod device;
pub mod emulator;
pub mod error;
mod frozen;
mod kernels;
mod memory;
mod open;
mod probe;
mod stream;

pub use backend::AclBackend;
pub use emulator::{Emulator, RunCounters};
pub use error::{AclBackendError, Unavailable};
pub use probe::{has_flash_attention, is_910_family};
pub use stream::DEFAULT_STREAM;

use std::path::PathBuf;

/// How FP32 matrix products are run where the Cube has no FP32 path (Atlas training).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp32Matmul {
    /// Decline FP32 on the Cube: the host reference tier runs it (exact, slow). Opt-in
    /// (`NPURT_ACL_FP32_MATMUL=exact`).
    Exact,
    /// `cubeMathType = 1`: the 910 computes FP32 inputs as FP16 (the kernel is named
    /// `*.aclnn-fp16compute.cube` and a one-time warning says so). The default.
    Fp16,
}

/// Configuration of the Ascend backend.
#[derive(Clone, Debug)]
pub struct AclConfig {
    /// Directory holding the CANN libraries; `None` = discovery (see `acl_sys::search_dirs`).
    pub lib_dir: Option<PathBuf>,
    pub fp32_matmul: Fp32Matmul,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig { lib_dir: None, fp32_matmul: Fp32Matmul::Fp16 }
    }
}

impl AclConfig {
    /// Defaults overridden by `NPURT_ACL_LIB_DIR` and `NPURT_ACL_FP32_MATMUL`
    /// (`exact` | `fp16`, the default).
    pub fn from_env() -> Result<AclConfig, AclBackendError> {
        let mut c = AclConfig::default();
        if let Some(d) = std::env::var_os("NPURT_ACL_LIB_DIR").filter(|d| !d.is_empty()) {
            c.lib_dir = Some(d.into());
        }
        if let Ok(v) = std::env::var("NPURT_ACL_FP32_MATMUL") {
            c.fp32_matmul = match v.trim() {
                "exact" => Fp32Matmul::Exact,
                "fp16" | "" => Fp32Matmul::Fp16,
                o => {
                    return Err(AclBackendError::BadRequest(format!(
                        "NPURT_ACL_FP32_MATMUL must be exact or fp16, got {o:?}"
                    )));
                }
            };
        }
        Ok(c)
    }
}
