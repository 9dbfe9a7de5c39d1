//! [`CudaConfig`]: how the CUDA backend is set up.

use std::ffi::OsString;

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
    /// Defaults with `NPURT_CUDA_TF32` (`on` allows tf32, `off` is the default) applied; a
    /// value that is not UTF-8, is empty or is not on/off is an error naming the variable.
    pub fn from_env() -> Result<CudaConfig, runtime::env::EnvError> {
        Self::from_lookup(|k| std::env::var_os(k))
    }

    /// [`CudaConfig::from_env`] with the variables read through `get` (`None`: unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> Result<CudaConfig, runtime::env::EnvError> {
        let tf32 = match runtime::env::value(TF32_ENV, get(TF32_ENV))? {
            Some(v) => runtime::env::switch(TF32_ENV, &v)?,
            None => false,
        };
        Ok(CudaConfig { allow_tf32: tf32, ..CudaConfig::default() })
    }
}

const TF32_ENV: &str = "NPURT_CUDA_TF32";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_is_on_or_off_and_a_bad_value_is_a_config_error_naming_it() {
        let with = |v: Option<&str>| CudaConfig::from_lookup(|_| v.map(OsString::from));
        assert!(!with(None).unwrap().allow_tf32);
        assert!(with(Some("1")).unwrap().allow_tf32);
        assert!(!with(Some("off")).unwrap().allow_tf32);
        for bad in ["", " ", "maybe"] {
            let e = runtime::Error::from(with(Some(bad)).unwrap_err());
            assert!(matches!(&e, runtime::Error::Config(m) if m.contains("NPURT_CUDA_TF32")), "{bad:?}: {e}");
        }
        use std::os::unix::ffi::OsStringExt;
        let e = CudaConfig::from_lookup(|_| Some(OsString::from_vec(vec![0xff]))).unwrap_err();
        assert_eq!(e.problem, runtime::env::Problem::NotUtf8);
    }
}
