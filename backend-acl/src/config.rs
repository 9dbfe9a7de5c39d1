//! The backend's configuration: where the CANN libraries are, and how FP32 matrix
//! products run on a SoC whose Cube has no FP32 path.

use runtime::env::{self, EnvError};
use std::ffi::OsString;
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
    /// Defaults overridden by `NPURT_ACL_LIB_DIR` (an existing directory) and
    /// `NPURT_ACL_FP32_MATMUL` (`exact` | `fp16`, the default). A value that is not UTF-8,
    /// is empty or is not one of those is an error naming the variable.
    pub fn from_env() -> Result<AclConfig, EnvError> {
        Self::from_lookup(|k| std::env::var_os(k))
    }

    /// [`AclConfig::from_env`] with the variables read through `get` (`None`: unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> Result<AclConfig, EnvError> {
        let mut c = AclConfig::default();
        if let Some(d) = env::value(LIB_DIR_ENV, get(LIB_DIR_ENV))? {
            let dir = PathBuf::from(&d);
            if !dir.is_dir() {
                return Err(env::bad(LIB_DIR_ENV, &d, "an existing directory (of the CANN libraries)"));
            }
            c.lib_dir = Some(dir);
        }
        if let Some(v) = env::value(FP32_ENV, get(FP32_ENV))? {
            c.fp32_matmul = env::choice(FP32_ENV, &v, &[("exact", Fp32Matmul::Exact), ("fp16", Fp32Matmul::Fp16)])?;
        }
        Ok(c)
    }
}

const LIB_DIR_ENV: &str = "NPURT_ACL_LIB_DIR";
const FP32_ENV: &str = "NPURT_ACL_FP32_MATMUL";

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, OsString)]) -> Result<AclConfig, EnvError> {
        AclConfig::from_lookup(|k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn bad_acl_variables_are_config_errors_naming_them() {
        use std::os::unix::ffi::OsStringExt;
        let here = OsString::from(env!("CARGO_MANIFEST_DIR"));
        let c = config(&[(LIB_DIR_ENV, here.clone()), (FP32_ENV, " Exact ".into())]).unwrap();
        assert_eq!((c.lib_dir, c.fp32_matmul), (Some(PathBuf::from(&here)), Fp32Matmul::Exact));
        assert_eq!(config(&[]).unwrap().fp32_matmul, Fp32Matmul::Fp16);
        for var in [LIB_DIR_ENV, FP32_ENV] {
            let bad = [OsString::from_vec(vec![b'/', 0xff]), "".into(), "  ".into(), "/nonexistent/zzz".into()];
            for v in bad {
                let e = runtime::Error::from(config(&[(var, v.clone())]).unwrap_err());
                assert!(matches!(&e, runtime::Error::Config(m) if m.contains(var)), "{var}={v:?}: {e}");
            }
        }
    }
}
