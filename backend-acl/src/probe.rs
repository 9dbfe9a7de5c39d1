//! Finding and starting CANN, and what is known about each SoC.
//!
//! * [`load`]: the libraries (through `acl_sys::Api::load`), every symbol the backend
//!   cannot work without, `aclInit`; [`device_count`] after it.
//! * The SoC families and figures of CANN's platform description files
//!   (`platform_config/<SoC>.ini`, see docs/ASCEND.md), matched on the whole name
//!   `aclrtGetSocName` returns, and the hardware units the kernel table runs on.

use crate::error::Unavailable;
use acl_sys::{Api, LibKind, LoadConfig, result};
use runtime::{DeviceInfo, Unit, UnitClass, UnitInfo};
use std::path::PathBuf;
use std::sync::Arc;

/// The matrix unit (aclnn matrix products).
pub const CUBE: Unit = Unit { class: UnitClass::Cube, label: "Cube" };
/// The vector unit (element-wise ops, norms, softmax, reductions, casts, gathers).
pub const VECTOR: Unit = Unit { class: UnitClass::Vector, label: "Vector" };
/// The scalar unit (shape-only moves).
pub const SCALAR: Unit = Unit { class: UnitClass::Scalar, label: "Scalar" };
/// The host reference tier, reached through copies.
pub const HOST: Unit = runtime::graph::HOST_UNIT;

/// Symbols without which the backend cannot work.
const REQUIRED: &[&str] = &[
    "aclInit",
    "aclGetRecentErrMsg",
    "aclrtSetDevice",
    "aclrtResetDevice",
    "aclrtGetDeviceCount",
    "aclrtGetSocName",
    "aclrtGetCurrentContext",
    "aclrtSetCurrentContext",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtSynchronizeStream",
    "aclrtSynchronizeDevice",
    "aclrtStreamWaitEvent",
    "aclrtCreateEvent",
    "aclrtDestroyEvent",
    "aclrtRecordEvent",
    "aclrtSynchronizeEvent",
    "aclrtEventElapsedTime",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtGetMemInfo",
    "aclrtMemcpy",
    "aclrtMemcpyAsync",
    "aclrtMemset",
    "aclCreateTensor",
    "aclDestroyTensor",
    "aclCreateScalar",
    "aclDestroyScalar",
    "aclCreateIntArray",
    "aclDestroyIntArray",
    "aclnnMatmulGetWorkspaceSize",
    "aclnnMatmul",
    "aclnnAddGetWorkspaceSize",
    "aclnnAdd",
];

/// Loads the libraries from `lib_dir` (or by discovery, see `acl_sys::search_dirs`),
/// checks the required symbols and initialises ACL (a repeated initialisation counts
/// as success: `aclInit`, `acl/acl.h`, returns `ACL_ERROR_REPEAT_INITIALIZE`).
pub(crate) fn load(lib_dir: Option<PathBuf>) -> Result<Arc<Api>, Unavailable> {
    let api = Api::load(&LoadConfig { lib_dir, no_system_loader: false })?;
    for k in [LibKind::NnOpBase, LibKind::OpApi] {
        api.library_status(k)?;
    }
    api.require(REQUIRED)?;
    // SAFETY: aclInit(NULL) = no configuration file.
    match unsafe { result::init(&api, std::ptr::null()) } {
        Err(e) if e.code() == Some(acl_sys::codes::ACL_ERROR_REPEAT_INITIALIZE) => {}
        r => r?,
    }
    Ok(Arc::new(api))
}

/// The number of visible devices; none is [`Unavailable::NoDevice`].
pub(crate) fn device_count(api: &Api) -> Result<u32, Unavailable> {
    let count = result::get_device_count(api).map_err(|e| match e {
        e if e.is_missing() => Unavailable::Acl(e),
        e => Unavailable::DeviceCount(e),
    })?;
    if count == 0 {
        return Err(Unavailable::NoDevice);
    }
    Ok(count)
}

/// The Atlas training (910) SoCs, as CANN's platform files name them (matched on the
/// whole name: `Ascend910B` is an old 910 part, `Ascend910B1`..`B4` are Atlas A2).
pub fn is_910_family(soc: &str) -> bool {
    matches!(soc, "Ascend910A" | "Ascend910B" | "Ascend910ProA" | "Ascend910ProB" | "Ascend910PremiumA")
}

/// The Atlas A2 (910B1–B4) and A3 (`Ascend910_93xx`) training SoCs: the ones
/// `aclnnFlashAttentionScore` has kernels for (hicann/ops-transformer registers the
/// operator for `ascend910b` and `ascend910_93` only; its docs list Atlas A2/A3 training).
/// Whole names: "Ascend910B" alone is an old 910 part.
pub fn has_flash_attention(soc: &str) -> bool {
    matches!(soc, "Ascend910B1" | "Ascend910B2" | "Ascend910B2C" | "Ascend910B3" | "Ascend910B4" | "Ascend910B4-1")
        || soc.starts_with("Ascend910_93")
}

/// (cube cores, vector cores, cube MHz) from CANN's `platform_config/<SoC>.ini` files.
fn soc_figures(soc: &str) -> Option<(u32, u32, f64)> {
    Some(match soc {
        "Ascend910A" => (32, 0, 1000.0),
        "Ascend910B" => (30, 0, 900.0),
        "Ascend910ProA" => (32, 0, 1100.0),
        "Ascend910ProB" => (30, 0, 1150.0),
        "Ascend910PremiumA" => (32, 0, 1220.0),
        "Ascend910B1" => (24, 48, 1850.0),
        "Ascend910B2" | "Ascend910B2C" => (24, 48, 1800.0),
        "Ascend910B3" => (20, 40, 1800.0),
        "Ascend910B4" => (20, 40, 1500.0),
        _ => return None,
    })
}

/// Cube and vector core counts as the device reports them (0 where it does not):
/// `aclrtGetDeviceInfo` where the release has it, else `aclGetDeviceCapability`.
fn core_counts(api: &Api, d: u32) -> (i64, i64) {
    match result::get_device_info(api, d, acl_sys::ACL_DEV_ATTR_CUBE_CORE_NUM) {
        Err(e) if e.is_missing() => {
            log::debug!("acl-sys: optional symbol unavailable: {e}");
            (
                result::get_device_capability(api, d, acl_sys::ACL_DEVICE_INFO_AI_CORE_NUM).unwrap_or(0),
                result::get_device_capability(api, d, acl_sys::ACL_DEVICE_INFO_VECTOR_CORE_NUM).unwrap_or(0),
            )
        }
        cube => {
            (cube.unwrap_or(0), result::get_device_info(api, d, acl_sys::ACL_DEV_ATTR_VECTOR_CORE_NUM).unwrap_or(0))
        }
    }
}

/// The description of device `d` (SoC `soc`, `total` bytes of memory): its units with
/// nominal peaks from the platform figures, the core counts the device reports.
pub(crate) fn describe(api: &Api, d: i32, soc: &str, total: u64) -> DeviceInfo {
    let (ai_cores, vec_cores) = core_counts(api, d as u32);
    let (cube, vector, mhz, src) = match soc_figures(soc) {
        Some((c, v, m)) => (
            if ai_cores > 0 { ai_cores as f64 } else { c as f64 },
            if vec_cores > 0 { vec_cores as f64 } else { v as f64 },
            m,
            format!("platform ini of {soc}: cores x 16x16x16 MAC x 2 x {m} MHz (nominal)"),
        ),
        None => (ai_cores.max(1) as f64, vec_cores as f64, 1000.0, format!("unknown SoC {soc}: 1 GHz assumed")),
    };
    let hz = mhz * 1e6;
    // Bandwidth is not stated by any Huawei file (see docs/ASCEND.md): a labelled assumption.
    let bw = 1.0e12;
    let bw_note = "; HBM bandwidth unknown, 1 TB/s assumed";
    // 910: the vector unit sits inside each AI core (128 FP16 lanes).
    let vec_units = if vector > 0.0 { vector } else { cube };
    DeviceInfo {
        name: format!("{soc} (acl:{d})"),
        memory_bytes: total,
        units: vec![
            UnitInfo {
                unit: CUBE,
                peak_flops: cube * 4096.0 * 2.0 * hz,
                peak_bytes_per_s: bw,
                source: format!("{src}{bw_note}"),
            },
            UnitInfo {
                unit: VECTOR,
                peak_flops: vec_units * 128.0 * 2.0 * hz,
                peak_bytes_per_s: bw,
                source: format!("{vec_units} vector units x 128 FP16 lanes x 2 x {mhz} MHz{bw_note}"),
            },
            UnitInfo {
                unit: SCALAR,
                peak_flops: cube * hz,
                peak_bytes_per_s: bw,
                source: format!("{cube} scalar units x {mhz} MHz{bw_note}"),
            },
            UnitInfo {
                unit: HOST,
                peak_flops: 1e10,
                peak_bytes_per_s: 1e9,
                source: "host reference tier through PCIe copies (assumed 10 GFLOP/s, 1 GB/s)".into(),
            },
        ],
        host_shared: false,
        min_alignment: 64,
    }
}
