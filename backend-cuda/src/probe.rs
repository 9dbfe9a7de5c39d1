//! Finding the driver and libraries before cudarc touches them.
//!
//! cudarc resolves libraries and symbols lazily and panics when one is missing, so every
//! check here opens the library itself with `libloading`, resolves the symbols the
//! backend will call, and only then lets cudarc in.

use crate::error::CudaError;
use std::ffi::c_int;

/// Names tried for the driver library, in order.
pub const DRIVER_LIBRARIES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// Driver entry points the backend (through cudarc) calls. All must resolve.
pub const REQUIRED_DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemGetInfo_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
];

/// NVRTC entry points used by the kernel compiler.
pub const REQUIRED_NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcDestroyProgram",
];

/// cuBLAS entry points used for matrix products.
pub const REQUIRED_CUBLAS_SYMBOLS: &[&str] =
    &["cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGemmEx", "cublasGemmStridedBatchedEx"];

/// What the driver reported.
#[derive(Clone, Debug)]
pub struct DriverFacts {
    /// The library that was opened.
    pub library: String,
    /// `cuDriverGetVersion`, e.g. 12040.
    pub version: i32,
    pub devices: usize,
}

/// Opens the first library of `names` that loads; `Err` lists every attempt.
pub fn open_first(names: &[String]) -> Result<(libloading::Library, String), String> {
    let mut tried = Vec::new();
    for n in names {
        // SAFETY: loading a shared library runs its initialisers; the CUDA libraries are
        // designed to be dlopen'ed by applications and have no initialiser preconditions.
        match unsafe { libloading::Library::new(n) } {
            Ok(l) => return Ok((l, n.clone())),
            Err(e) => tried.push(format!("{n}: {e}")),
        }
    }
    Err(tried.join("; "))
}

/// The symbols of `wanted` that `lib` lacks.
pub fn missing_symbols(lib: &libloading::Library, wanted: &[&str]) -> Vec<String> {
    wanted
        .iter()
        .filter(|s| {
            // SAFETY: only the address is looked up (typed as an untyped pointer), nothing
            // is called through it.
            unsafe { lib.get::<*const std::ffi::c_void>(s.as_bytes()) }.is_err()
        })
        .map(|s| s.to_string())
        .collect()
}

/// Checks the driver: it opens, has every symbol we use, initialises, and sees a device.
/// Calls no cudarc function.
pub fn check_driver() -> Result<DriverFacts, CudaError> {
    let names: Vec<String> = DRIVER_LIBRARIES.iter().map(|s| s.to_string()).collect();
    let (lib, library) = open_first(&names)
        .map_err(|e| CudaError::NotAvailable(format!("the NVIDIA driver library cannot be opened ({e})")))?;
    let missing = missing_symbols(&lib, REQUIRED_DRIVER_SYMBOLS);
    if !missing.is_empty() {
        return Err(CudaError::NotAvailable(format!(
            "{library} lacks driver entry points {} (driver too old?)",
            missing.join(", ")
        )));
    }
    type InitFn = unsafe extern "C" fn(u32) -> c_int;
    type IntOutFn = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: the symbols were just found; their C signatures are those of the CUDA driver
    // API (`CUresult cuInit(unsigned)`, `CUresult cuDriverGetVersion(int*)`,
    // `CUresult cuDeviceGetCount(int*)`), and `lib` outlives the calls.
    let (rc, version, rc_count, count) = unsafe {
        let init: libloading::Symbol<'_, InitFn> =
            lib.get(b"cuInit").map_err(|e| CudaError::NotAvailable(format!("cuInit: {e}")))?;
        let ver: libloading::Symbol<'_, IntOutFn> =
            lib.get(b"cuDriverGetVersion").map_err(|e| CudaError::NotAvailable(format!("cuDriverGetVersion: {e}")))?;
        let cnt: libloading::Symbol<'_, IntOutFn> =
            lib.get(b"cuDeviceGetCount").map_err(|e| CudaError::NotAvailable(format!("cuDeviceGetCount: {e}")))?;
        let rc = init(0);
        let mut version: c_int = 0;
        let _ = ver(&mut version);
        let mut count: c_int = 0;
        let rc_count = if rc == 0 { cnt(&mut count) } else { rc };
        (rc, version, rc_count, count)
    };
    if rc != 0 {
        return Err(CudaError::NotAvailable(format!("cuInit failed with {} ({library})", driver_code_name(rc))));
    }
    if rc_count != 0 {
        return Err(CudaError::NotAvailable(format!("cuDeviceGetCount failed with {}", driver_code_name(rc_count))));
    }
    if count <= 0 {
        return Err(CudaError::NotAvailable(format!("the driver ({library}) sees no CUDA device")));
    }
    // The library stays loaded (cudarc opens it again by name and shares the handle).
    std::mem::forget(lib);
    Ok(DriverFacts { library, version, devices: count as usize })
}

/// Checks that a CUDA library (`nvrtc`, `cublas`) opens under one of the names cudarc
/// tries and has `symbols`; returns the name that loaded.
pub fn check_library(stem: &str, symbols: &[&str]) -> Result<String, CudaError> {
    let names = cudarc::get_lib_name_candidates(stem);
    let (lib, name) = open_first(&names).map_err(|_| {
        CudaError::NotAvailable(format!(
            "lib{stem} cannot be opened (tried {}); add its folder to LD_LIBRARY_PATH",
            names.iter().take(4).cloned().collect::<Vec<_>>().join(", ")
        ))
    })?;
    let missing = missing_symbols(&lib, symbols);
    if !missing.is_empty() {
        return Err(CudaError::NotAvailable(format!("{name} lacks {}", missing.join(", "))));
    }
    std::mem::forget(lib);
    Ok(name)
}

/// A readable name for a few common driver result codes.
pub fn driver_code_name(rc: c_int) -> String {
    let name = match rc {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        35 => "CUDA_ERROR_INSUFFICIENT_DRIVER",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        304 => "CUDA_ERROR_OPERATING_SYSTEM",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => return format!("CUresult {rc}"),
    };
    format!("{name} ({rc})")
}
