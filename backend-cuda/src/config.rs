//! [`CudaConfig`]: how the CUDA backend is set up.

/// How the CUDA backend is set up.
#[derive(Clone, Debug)]
pub struct CudaConfig {
    /// Let f32 matrix products use tf32 tensor cores (reported in the kernel name).
    pub allow_tf32: bool,
    /// Size of each device's pinned staging buffer (split in two for double buffering).
    pub staging_bytes: usize,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig { allow_tf32: false, staging_bytes: 8 << 20 }
    }
}

impl CudaConfig {
    /// Defaults with `NPURT_CUDA_TF32=1` (allow tf32) applied.
    pub fn from_env() -> CudaConfig {
        let tf32 = std::env::var("NPURT_CUDA_TF32").is_ok_and(|v| matches!(v.as_str(), "1" | "on" | "true" | "yes"));
        CudaConfig { allow_tf32: tf32, ..CudaConfig::default() }
    }
}
