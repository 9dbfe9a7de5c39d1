//! What the host CPU can do, detected at run time, and its nominal peak rates; the
//! instruction-set path the kernels take (the widest detected, or one forced with
//! `NPURT_CPU_ISA` / [`crate::CpuConfig::isa`]); which precisions run natively.

use runtime::{DType, Unit, UnitClass};
use std::sync::OnceLock;
use thiserror::Error;

/// Instruction-set level chosen for the high-performance kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Scalar,
    Avx2Fma,
    Avx512,
}

/// The environment variable that forces an [`Isa`] (`avx512`, `avx2`, `scalar`; `auto` or
/// empty: the widest detected).
pub const ISA_ENV: &str = "NPURT_CPU_ISA";

/// A requested [`Isa`] that is unknown or that this CPU cannot run.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum IsaError {
    #[error("unknown CPU ISA {0:?}: expected avx512, avx2, scalar or auto")]
    Unknown(String),
    /// `NPURT_CPU_ISA` is set to a value that is not UTF-8, empty or unknown (a
    /// configuration error naming the variable).
    #[error(transparent)]
    Env(#[from] runtime::env::EnvError),
    #[error("CPU ISA {requested} was requested but this CPU lacks {missing} (the widest it runs is {widest})")]
    Unsupported { requested: &'static str, missing: String, widest: &'static str },
}

impl Isa {
    /// Every path, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2Fma, Isa::Scalar];

    /// The name `NPURT_CPU_ISA` and `--isa` use: `avx512`, `avx2`, `scalar`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2Fma => "avx2",
            Isa::Scalar => "scalar",
        }
    }

    /// Parses a name of [`Isa::name`] (case-insensitive; `avx2fma`, `avx2-fma`,
    /// `avx512f` and `avx-512` are accepted too); `auto` and the empty string give `None`.
    pub fn parse(s: &str) -> Result<Option<Isa>, IsaError> {
        let t = s.trim().to_ascii_lowercase();
        Ok(Some(match t.as_str() {
            "" | "auto" => return Ok(None),
            "avx512" | "avx512f" | "avx-512" | "avx512-fma" => Isa::Avx512,
            "avx2" | "avx2fma" | "avx2-fma" => Isa::Avx2Fma,
            "scalar" => Isa::Scalar,
            _ => return Err(IsaError::Unknown(s.to_string())),
        }))
    }

    /// The x86 features the path's code is compiled for.
    pub fn required(self) -> &'static [&'static str] {
        match self {
            Isa::Avx512 => &["avx512f", "avx2", "fma"],
            Isa::Avx2Fma => &["avx2", "fma"],
            Isa::Scalar => &[],
        }
    }

    /// f32 lanes per vector register.
    pub fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => 16,
            Isa::Avx2Fma => 8,
            Isa::Scalar => 1,
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug)]
pub struct CpuFeatures {
    /// The path the kernels take: the widest detected, or the forced one.
    pub isa: Isa,
    /// `isa` was forced (`NPURT_CPU_ISA` or [`crate::CpuConfig::isa`]) rather than detected.
    pub forced: bool,
    /// The widest path this CPU runs (what `isa` is when not forced).
    pub widest: Isa,
    /// AVX-512-BF16 dot products, used (false when the ISA is forced below AVX-512).
    pub avx512bf16: bool,
    /// AMX tiles with bf16 dot products, enabled for this process by the OS
    /// (`NPURT_AMX=0` turns their use off; false when the ISA is forced below AVX-512).
    pub amx_bf16: bool,
    /// AMX tiles with int8 dot products (`tdpbssd`), enabled for this process by the OS
    /// (`NPURT_AMX=0` turns their use off; false when the ISA is forced below AVX-512).
    pub amx_int8: bool,
    /// This CPU's `vdpbf16ps` runs at half the f32 FMA's FLOP rate (Intel's: one per two
    /// cycles, 64 FLOPs, against two 32-FLOP FMAs per cycle; AMD's Zen 4 runs it at twice
    /// its FMA rate). Where it does and AMX is not used, a bf16 product widens its weight to
    /// f32 on the way into the FMA micro-kernel instead ([`Self::bf16_on_fma`]).
    pub bf16_dot_half_rate: bool,
    pub f16c: bool,
    /// Every feature of interest that was detected, for `npurt info`.
    pub detected: Vec<&'static str>,
    pub model: String,
    pub cores: usize,
    pub mhz: f64,
    pub mem_total: u64,
}

/// What this CPU has, with the widest path it runs (nothing forced).
pub fn get() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(detect)
}

/// The path `NPURT_CPU_ISA` asks for (`None` when unset or `auto`); a value that is not
/// UTF-8, is empty or names no path is [`IsaError::Env`] (see [`runtime::env`]).
pub fn isa_from_env() -> Result<Option<Isa>, IsaError> {
    isa_from(runtime::env::var(ISA_ENV)?.as_deref())
}

/// [`isa_from_env`] on a value already read by [`runtime::env`]'s rule.
fn isa_from(v: Option<&str>) -> Result<Option<Isa>, IsaError> {
    let Some(v) = v else { return Ok(None) };
    Isa::parse(v).map_err(|_| runtime::env::bad(ISA_ENV, v, "avx512, avx2, scalar or auto").into())
}

/// The environment variable that keeps AMX unused (`off`; `on`, the default, uses it
/// where the CPU and the kernel allow).
pub const AMX_ENV: &str = "NPURT_AMX";

/// Whether `NPURT_AMX` allows AMX (`true` when unset); a bad value is an error naming it.
pub fn amx_from_env() -> Result<bool, runtime::env::EnvError> {
    Ok(runtime::env::switch_var(AMX_ENV)?.unwrap_or(true))
}

/// The features the kernels use for `requested`: that path, forced, or else the path
/// `NPURT_CPU_ISA` forces, or else the widest detected. An unknown name or a path this CPU
/// cannot run is an error (never a silent fallback).
pub fn select(requested: Option<Isa>) -> Result<&'static CpuFeatures, IsaError> {
    match requested {
        Some(isa) => forced(isa),
        None => match isa_from_env()? {
            Some(isa) => forced(isa),
            None => Ok(get()),
        },
    }
}

/// [`get`] with the kernels' path forced to `isa`; an error names the missing feature.
pub fn forced(isa: Isa) -> Result<&'static CpuFeatures, IsaError> {
    static F: [OnceLock<CpuFeatures>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let base = get();
    base.check(isa)?;
    let slot = match isa {
        Isa::Avx512 => &F[0],
        Isa::Avx2Fma => &F[1],
        Isa::Scalar => &F[2],
    };
    Ok(slot.get_or_init(|| {
        let below = isa < Isa::Avx512;
        CpuFeatures {
            isa,
            forced: true,
            avx512bf16: base.avx512bf16 && !below,
            amx_bf16: base.amx_bf16 && !below,
            amx_int8: base.amx_int8 && !below,
            ..base.clone()
        }
    }))
}

/// [`get`] with AMX left unused: the bf16 products run on AVX-512-BF16 dot products and the
/// int8 ones on AVX-512-VNNI, as on a CPU without AMX (for tests and measurements of those
/// paths).
pub fn without_amx() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(|| CpuFeatures { amx_bf16: false, amx_int8: false, ..get().clone() })
}

#[cfg(target_arch = "x86_64")]
fn x86() -> (Isa, bool, bool, Vec<&'static str>) {
    let mut d = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => {$(
            if std::arch::is_x86_feature_detected!($f) { d.push($f); }
        )*};
    }
    probe!(
        "sse2",
        "sse4.2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512bf16",
        "avx512fp16",
        "avx512vnni"
    );
    let has = |f: &str| d.contains(&f);
    // The widest path whose every required feature was detected (`Scalar` needs none).
    let isa = Isa::ALL.into_iter().find(|i| i.required().iter().all(|f| has(f))).unwrap_or(Isa::Scalar);
    (isa, has("avx512bf16"), has("f16c"), d)
}

#[cfg(not(target_arch = "x86_64"))]
fn x86() -> (Isa, bool, bool, Vec<&'static str>) {
    (Isa::Scalar, false, false, Vec::new())
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines().find(|l| l.starts_with(name)).and_then(|l| l.split(':').nth(1)).map(|v| v.trim().to_string())
}

fn meminfo(name: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let l = s.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Free host memory (MemAvailable), when the OS tells.
pub fn mem_available() -> Option<u64> {
    meminfo("MemAvailable:")
}

/// Which AMX units this process may use: `(bf16, int8)`, each its CPUID bit (leaf 7, EDX
/// bit 22 AMX-BF16, bit 25 AMX-INT8) with AMX-TILE (bit 24), and Linux's permission to
/// use the tile data state for this process (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`), asked once.
#[cfg(target_arch = "x86_64")]
fn amx_units() -> (bool, bool) {
    use std::arch::x86_64::__cpuid_count;
    // A bad value keeps AMX unused here; `CpuBackend::new` refuses it.
    if !amx_from_env().unwrap_or(false) {
        return (false, false);
    }
    // CPUID leaf 7 exists on every x86-64 CPU with AVX-512 (checked by the caller).
    let edx = __cpuid_count(7, 0).edx;
    let (tile, bf16, int8) = (edx >> 24 & 1 == 1, edx >> 22 & 1 == 1, edx >> 25 & 1 == 1);
    if !(tile && (bf16 || int8)) || !cfg!(target_os = "linux") {
        return (false, false);
    }
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: a plain Linux system call with integer arguments; it touches no memory of
    // this process and only asks the kernel to allow the AMX tile state for it (an error
    // return, e.g. on a kernel without AMX support, leaves AMX unused).
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    if ret != 0 {
        log::info!("AMX present but not enabled by the OS (arch_prctl returned {ret}); using AVX-512");
        return (false, false);
    }
    (bf16, int8)
}

#[cfg(not(target_arch = "x86_64"))]
fn amx_units() -> (bool, bool) {
    (false, false)
}

fn detect() -> CpuFeatures {
    let (isa, avx512bf16, f16c, mut detected) = x86();
    // AMX only beside AVX-512 (its kernels use AVX-512 around the tiles).
    let (amx_bf16, amx_int8) = if isa == Isa::Avx512 { amx_units() } else { (false, false) };
    let amx_bf16 = avx512bf16 && amx_bf16;
    if amx_bf16 {
        detected.push("amx-bf16");
    }
    if amx_int8 {
        detected.push("amx-int8");
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mhz = cpuinfo_field("cpu MHz").and_then(|v| v.parse().ok()).filter(|m: &f64| *m > 100.0).unwrap_or(2000.0);
    CpuFeatures {
        isa,
        forced: false,
        widest: isa,
        avx512bf16,
        amx_bf16,
        amx_int8,
        // Measured (`npurt bench peak --unit avx512 --unit avx512-bf16`): Emerald Rapids 86
        // against 175 GFLOP/s on one thread, Sapphire Rapids 104.5 against about 200.
        bf16_dot_half_rate: cpuinfo_field("vendor_id").as_deref() == Some("GenuineIntel"),
        f16c,
        detected,
        model: cpuinfo_field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        cores,
        mhz,
        mem_total: meminfo("MemTotal:").unwrap_or(8 << 30),
    }
}

/// How products with weights in one dtype run on this CPU (see [`CpuFeatures::precisions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrecisionSupport {
    pub dtype: DType,
    /// `Ok(how)`: on the CPU's own support for it, e.g. `"AVX-512-BF16 dot products"`;
    /// `Err(why not)`: a slower path, naming the feature the CPU lacks (or that the forced
    /// ISA leaves unused).
    pub native: Result<&'static str, String>,
}

impl CpuFeatures {
    /// Whether this CPU runs `isa`'s code; the error names the first missing feature.
    pub fn check(&self, isa: Isa) -> Result<(), IsaError> {
        match isa.required().iter().find(|f| !self.detected.contains(f)) {
            None => Ok(()),
            Some(missing) => Err(IsaError::Unsupported {
                requested: isa.name(),
                missing: missing.to_string(),
                widest: self.widest.name(),
            }),
        }
    }

    /// How f32, f16 and bf16 products run here: f32 on the FMA path, fp16 weights widened by
    /// F16C, bf16 on AMX tiles or AVX-512-BF16 dot products.
    pub fn precisions(&self) -> Vec<PrecisionSupport> {
        let f32_how = match self.isa {
            Isa::Avx512 => "AVX-512 FMA",
            Isa::Avx2Fma => "AVX2 FMA",
            Isa::Scalar => "scalar code",
        };
        let f16 = if self.f16c {
            Ok("F16C widening to f32, then f32 FMA: half the weight memory, not faster than f32")
        } else {
            Err("this CPU has no F16C: fp16 weights are widened to f32 in software".to_string())
        };
        let detected_bf16 = self.detected.contains(&"avx512bf16");
        let bf16 = if self.amx_bf16 {
            Ok("AMX-BF16 tiles")
        } else if self.bf16_on_fma() {
            Ok(
                "bf16 weights widened to f32 into the AVX-512 FMA kernel (this CPU's vdpbf16ps runs at half its FMA rate)",
            )
        } else if self.avx512bf16 {
            Ok("AVX-512-BF16 dot products")
        } else if detected_bf16 {
            Err(format!("the CPU ISA is forced to {}: AVX-512-BF16 is not used", self.isa))
        } else {
            Err("this CPU has no AVX-512-BF16 or AMX-BF16".to_string())
        };
        vec![
            PrecisionSupport { dtype: DType::F32, native: Ok(f32_how) },
            PrecisionSupport { dtype: DType::F16, native: f16 },
            PrecisionSupport { dtype: DType::BF16, native: bf16 },
        ]
    }

    /// Why products with `dtype` weights run slower than f32 here (the missing feature), or
    /// `None` when they run natively (or `dtype` is not a float precision).
    pub fn slow_precision(&self, dtype: DType) -> Option<String> {
        self.precisions().into_iter().find(|p| p.dtype == dtype).and_then(|p| p.native.err())
    }

    /// Unit of the matrix kernels (FMA GEMM).
    pub fn matrix_unit(&self) -> Unit {
        let label = match self.isa {
            Isa::Avx512 => "avx512-fma",
            Isa::Avx2Fma => "avx2-fma",
            Isa::Scalar => "scalar-fma",
        };
        Unit { class: UnitClass::Cube, label }
    }
    /// Unit of the SIMD element-wise kernels.
    pub fn vector_unit(&self) -> Unit {
        let label = match self.isa {
            Isa::Avx512 => "avx512",
            Isa::Avx2Fma => "avx2",
            Isa::Scalar => "scalar-simd",
        };
        Unit { class: UnitClass::Vector, label }
    }
    /// Unit of portable code (baseline SIMD the compiler chose).
    pub fn baseline_unit(&self) -> Unit {
        Unit { class: UnitClass::Vector, label: if cfg!(target_arch = "x86_64") { "sse2" } else { "baseline" } }
    }
    pub fn scalar_unit(&self) -> Unit {
        Unit { class: UnitClass::Scalar, label: "scalar" }
    }
    /// Unit of the bf16 matrix kernel: AMX tiles where the OS enabled them, else
    /// AVX-512-BF16 dot products.
    pub fn bf16_unit(&self) -> Unit {
        Unit { class: UnitClass::Cube, label: if self.amx_bf16 { "amx-bf16" } else { "avx512-bf16" } }
    }
    /// Whether the bf16 products run on the f32 FMA micro-kernel, their weight widened from
    /// bf16 on the way in (half the bytes read, the FMA's rate): where AVX-512-BF16 is used
    /// without AMX on a CPU whose `vdpbf16ps` runs at half the FMA rate.
    pub fn bf16_on_fma(&self) -> bool {
        self.avx512bf16 && !self.amx_bf16 && self.bf16_dot_half_rate && self.isa == Isa::Avx512
    }
    /// Nominal bf16 FLOP per cycle and core of [`Self::bf16_unit`], with how it is derived.
    pub fn bf16_flops_per_cycle(&self) -> (f64, &'static str) {
        if self.amx_bf16 {
            (1024.0, "AMX: one 16x16x32 tile product (16384 flops) per 16 cycles")
        } else if self.bf16_on_fma() {
            (64.0, "bf16 weights widened to f32: 16 lanes x 2 flops x two FMAs per cycle")
        } else {
            (64.0, "AVX-512-BF16: 16 lanes x 2 products x 2 flops, one vdpbf16ps per cycle")
        }
    }
    /// f32 lanes per vector register.
    pub fn lanes(&self) -> f64 {
        self.isa.lanes() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_isa_variable_refuses_unknown_names_as_a_config_error_naming_it() {
        assert_eq!(isa_from(None), Ok(None));
        assert_eq!(isa_from(Some("Auto")), Ok(None));
        assert_eq!(isa_from(Some("scalar")), Ok(Some(Isa::Scalar)));
        let e = isa_from(Some("sse9")).unwrap_err();
        let msg = runtime::Error::from(crate::CpuError::Isa(e)).to_string();
        assert_eq!(msg, "invalid configuration: NPURT_CPU_ISA=\"sse9\": expected avx512, avx2, scalar or auto");
    }
}
