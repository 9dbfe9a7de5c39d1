//! What the host CPU can do, detected at run time, and its nominal peak rates.

use runtime::{Unit, UnitClass};
use std::sync::OnceLock;

/// Instruction-set level chosen for the high-performance kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    Avx2Fma,
    Avx512,
}

#[derive(Clone, Debug)]
pub struct CpuFeatures {
    pub isa: Isa,
    pub avx512bf16: bool,
    pub f16c: bool,
    /// Every feature of interest that was detected, for `npurt info`.
    pub detected: Vec<&'static str>,
    pub model: String,
    pub cores: usize,
    pub mhz: f64,
    pub mem_total: u64,
}

pub fn get() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(detect)
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
    let isa = if has("avx512f") && has("fma") {
        Isa::Avx512
    } else if has("avx2") && has("fma") {
        Isa::Avx2Fma
    } else {
        Isa::Scalar
    };
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

fn detect() -> CpuFeatures {
    let (isa, avx512bf16, f16c, detected) = x86();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mhz = cpuinfo_field("cpu MHz").and_then(|v| v.parse().ok()).filter(|m: &f64| *m > 100.0).unwrap_or(2000.0);
    CpuFeatures {
        isa,
        avx512bf16,
        f16c,
        detected,
        model: cpuinfo_field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        cores,
        mhz,
        mem_total: meminfo("MemTotal:").unwrap_or(8 << 30),
    }
}

impl CpuFeatures {
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
    pub fn bf16_unit(&self) -> Unit {
        Unit { class: UnitClass::Cube, label: "avx512-bf16" }
    }
    /// f32 lanes per vector register.
    pub fn lanes(&self) -> f64 {
        match self.isa {
            Isa::Avx512 => 16.0,
            Isa::Avx2Fma => 8.0,
            Isa::Scalar => 1.0,
        }
    }
}
