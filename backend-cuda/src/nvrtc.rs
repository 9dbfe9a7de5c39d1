//! Compiling the generated modules with NVRTC: option building, compilation to CUBIN (or
//! PTX as a fallback), and a process-wide cache so each (architecture, tier, dtype)
//! module is compiled once per process.

use crate::error::{CudaError, guard};
use crate::probe;
use cudarc::nvrtc::{result, sys};
use runtime::{DType, Tier};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock};

/// What NVRTC should produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Machine code for exactly the device's architecture (`sm_XY`): no JIT at load.
    Cubin,
    /// PTX for `compute_XY`, JIT-compiled by the driver (used when CUBIN fails to load).
    Ptx,
}

/// The NVRTC options for a module of `tier` on compute capability `cc`.
pub fn options(cc: (i32, i32), tier: Tier, output: Output) -> Vec<String> {
    let arch = match output {
        Output::Cubin => format!("--gpu-architecture=sm_{}{}", cc.0, cc.1),
        Output::Ptx => format!("--gpu-architecture=compute_{}{}", cc.0, cc.1),
    };
    let mut v = vec![arch, "--std=c++17".to_string(), "--ftz=false".to_string()];
    match tier {
        // The ground truth: no contraction, IEEE division and square root.
        Tier::Reference => v.extend(["--fmad=false", "--prec-div=true", "--prec-sqrt=true"].map(String::from)),
        Tier::Generic => v.extend(["--fmad=true", "--prec-div=true", "--prec-sqrt=true"].map(String::from)),
        Tier::HighPerformance => v.extend(
            ["--fmad=true", "--prec-div=true", "--prec-sqrt=true", "--extra-device-vectorization"].map(String::from),
        ),
    }
    v.push(format!("-DNPURT_TIER_{}", crate::kernels::source::tier_tag(tier).to_ascii_uppercase()));
    v
}

/// A compiled module image.
#[derive(Clone, Debug)]
pub struct Image {
    pub output: Output,
    /// CUBIN bytes, or PTX text with one trailing NUL.
    pub bytes: Vec<u8>,
    pub log: String,
}

fn cstr_to_string(v: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = v.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

static NVRTC_OK: OnceLock<Result<String, CudaError>> = OnceLock::new();

/// Checks (once) that libnvrtc opens and has every entry point used.
pub fn available() -> Result<String, CudaError> {
    NVRTC_OK.get_or_init(|| probe::check_library("nvrtc", probe::REQUIRED_NVRTC_SYMBOLS)).clone()
}

/// NVRTC's version, e.g. `(12, 4)`.
pub fn version() -> Result<(i32, i32), CudaError> {
    available()?;
    guard("nvrtcVersion", || {
        let (mut a, mut b) = (0, 0);
        // SAFETY: two valid out-pointers; the library was checked to export the symbol.
        let rc = unsafe { sys::nvrtcVersion(&mut a, &mut b) };
        if rc != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(CudaError::Nvrtc { module: "nvrtcVersion".into(), log: format!("{rc:?}") });
        }
        Ok((a, b))
    })
}

/// Compiles `src` (named `name` in messages) with `opts`.
pub fn compile(name: &str, src: &str, opts: &[String], output: Output) -> Result<Image, CudaError> {
    available()?;
    let err = |log: String| CudaError::Nvrtc { module: name.to_string(), log };
    let csrc = CString::new(src).map_err(|_| err("source contains a NUL byte".into()))?;
    let cname = CString::new(name).map_err(|_| err("name contains a NUL byte".into()))?;
    if opts.iter().any(|o| o.contains('\0')) {
        return Err(err("an option contains a NUL byte".into()));
    }
    guard("nvrtc compile", || {
        let prog = result::create_program(&csrc, Some(&cname)).map_err(|e| err(format!("create: {e:?}")))?;
        // SAFETY: `prog` was just created and is destroyed once below; the source and name
        // strings outlive it; the options contain no NUL (checked above).
        let compiled = unsafe { result::compile_program(prog, opts) };
        // SAFETY: as above.
        let log = unsafe { result::get_program_log(prog) }.map(|v| cstr_to_string(&v)).unwrap_or_default();
        let out = match compiled {
            Err(e) => Err(err(format!("{e:?}: {log}"))),
            Ok(()) => match output {
                Output::Ptx => {
                    // SAFETY: `prog` compiled successfully and is still alive.
                    let ptx = unsafe { result::get_ptx(prog) }.map_err(|e| err(format!("get PTX: {e:?}")))?;
                    let mut bytes: Vec<u8> = ptx.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                    bytes.push(0);
                    Ok(Image { output, bytes, log: log.clone() })
                }
                Output::Cubin => {
                    let mut size = 0usize;
                    // SAFETY: valid out-pointer; `prog` compiled successfully.
                    let rc = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
                    if rc != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                        Err(err(format!("no CUBIN produced ({rc:?})")))
                    } else {
                        let mut buf = vec![0u8; size];
                        // SAFETY: `buf` has exactly the size NVRTC reported.
                        let rc = unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char) };
                        if rc != sys::nvrtcResult::NVRTC_SUCCESS {
                            Err(err(format!("get CUBIN: {rc:?}")))
                        } else {
                            Ok(Image { output, bytes: buf, log: log.clone() })
                        }
                    }
                }
            },
        };
        // SAFETY: `prog` is destroyed exactly once.
        let _ = unsafe { result::destroy_program(prog) };
        out
    })
}

type Key = ((i32, i32), Tier, DType, Output);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Image>>> {
    static C: OnceLock<Mutex<HashMap<Key, Arc<Image>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The image of the (`tier`, `dtype`) module for `cc`, compiled on first use and cached
/// for the life of the process.
pub fn module_image(cc: (i32, i32), tier: Tier, dtype: DType, output: Output) -> Result<Arc<Image>, CudaError> {
    let key = (cc, tier, dtype, output);
    // Held while compiling: concurrent first uses wait instead of compiling twice.
    let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = c.get(&key) {
        return Ok(i.clone());
    }
    let src = crate::kernels::source::module_source(tier, dtype)
        .ok_or_else(|| CudaError::BadRequest(format!("no {} kernels for {dtype}", tier.name())))?;
    let name = crate::kernels::source::module_name(tier, dtype);
    let t0 = std::time::Instant::now();
    let img = Arc::new(compile(&name, &src, &options(cc, tier, output), output)?);
    log::debug!("nvrtc: compiled {name} for sm_{}{} ({output:?}) in {:.2?}", cc.0, cc.1, t0.elapsed());
    c.insert(key, img.clone());
    Ok(img)
}
