//! The backend's configuration: where the CANN libraries are, and how FP32 matrix
//! products run on a SoC whose Cube has no FP32 path.

use crate::error::AclBackendError;
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
