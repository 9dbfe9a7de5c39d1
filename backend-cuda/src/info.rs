//! Device facts and nominal peak rates by architecture.

use runtime::{Unit, UnitClass, UnitInfo};

/// Tensor cores: this backend's matrix ("Cube") unit.
pub const TENSOR_CORES: Unit = Unit { class: UnitClass::Cube, label: "tensor-cores" };
/// CUDA cores in f32: the vector unit.
pub const CUDA_CORES: Unit = Unit { class: UnitClass::Vector, label: "cuda-cores" };
/// CUDA cores computing in f64: where the reference tier runs.
pub const CUDA_CORES_FP64: Unit = Unit { class: UnitClass::Scalar, label: "cuda-cores-fp64" };

/// Per-SM, per-clock throughput of one architecture (multiply-adds count as 2 flops).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArchRates {
    pub name: &'static str,
    /// f32 FMA lanes per SM.
    pub fp32_lanes: u32,
    /// f64 FMA lanes per SM.
    pub fp64_lanes: u32,
    /// Dense f16 tensor-core flops per SM per clock (f32 accumulation); 0 when absent.
    pub tc_f16_flops: u32,
    /// Dense bf16 tensor-core flops per SM per clock; 0 when unsupported.
    pub tc_bf16_flops: u32,
    /// Dense tf32 tensor-core flops per SM per clock; 0 when unsupported.
    pub tc_tf32_flops: u32,
    /// Boost clock used when the driver reports none, MHz.
    pub default_mhz: u32,
}

/// The rates of compute capability `major.minor` (the closest older known one if new).
pub fn arch_rates(major: i32, minor: i32) -> ArchRates {
    let r = |name, fp32_lanes, fp64_lanes, f16, bf16, tf32, mhz| ArchRates {
        name,
        fp32_lanes,
        fp64_lanes,
        tc_f16_flops: f16,
        tc_bf16_flops: bf16,
        tc_tf32_flops: tf32,
        default_mhz: mhz,
    };
    match (major, minor) {
        (m, _) if m < 7 => r("pre-Volta", 64, 2, 0, 0, 0, 1500),
        (7, 0) | (7, 2) => r("Volta", 64, 32, 1024, 0, 0, 1530),
        (7, _) => r("Turing", 64, 2, 1024, 0, 0, 1590),
        (8, 0) => r("Ampere (GA100)", 64, 32, 2048, 2048, 1024, 1410),
        (8, 9) => r("Ada", 128, 2, 1024, 1024, 512, 2520),
        (8, _) => r("Ampere (GA10x)", 128, 2, 1024, 1024, 512, 1700),
        (9, _) => r("Hopper", 128, 64, 4096, 4096, 2048, 1980),
        (10, _) | (11, _) => r("Blackwell (datacenter)", 128, 64, 8192, 8192, 4096, 1965),
        _ => r("Blackwell (consumer) or newer", 128, 2, 4096, 4096, 2048, 2400),
    }
}

/// Everything the backend knows about one GPU.
#[derive(Clone, Debug)]
pub struct CudaDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
    pub clock_mhz: u32,
    /// Whether the clock came from the driver (`true`) or the architecture table.
    pub clock_from_driver: bool,
    pub memory_bytes: u64,
    /// Peak DRAM bandwidth from the memory clock and bus width, bytes/s (0 if unknown).
    pub memory_bandwidth: f64,
    pub driver_version: i32,
    pub arch: ArchRates,
    pub peak_f32: f64,
    pub peak_f64: f64,
    pub peak_tf32: f64,
    pub peak_f16: f64,
    pub peak_bf16: f64,
}

impl CudaDeviceInfo {
    /// Derives the peaks from attributes (`clock_khz`, `mem_clock_khz`, `bus_bits` may be
    /// 0 when the driver does not report them).
    #[allow(clippy::too_many_arguments)]
    pub fn from_attributes(
        ordinal: usize,
        name: String,
        cc: (i32, i32),
        sm_count: u32,
        clock_khz: u32,
        mem_clock_khz: u32,
        bus_bits: u32,
        memory_bytes: u64,
        driver_version: i32,
    ) -> CudaDeviceInfo {
        let arch = arch_rates(cc.0, cc.1);
        let (clock_mhz, from_driver) = if clock_khz > 0 { (clock_khz / 1000, true) } else { (arch.default_mhz, false) };
        let hz = clock_mhz as f64 * 1e6;
        let sms = sm_count as f64;
        let memory_bandwidth = 2.0 * mem_clock_khz as f64 * 1e3 * bus_bits as f64 / 8.0;
        CudaDeviceInfo {
            ordinal,
            name,
            compute_capability: cc,
            sm_count,
            clock_mhz,
            clock_from_driver: from_driver,
            memory_bytes,
            memory_bandwidth,
            driver_version,
            arch,
            peak_f32: sms * hz * arch.fp32_lanes as f64 * 2.0,
            peak_f64: sms * hz * arch.fp64_lanes as f64 * 2.0,
            peak_tf32: sms * hz * arch.tc_tf32_flops as f64,
            peak_f16: sms * hz * arch.tc_f16_flops as f64,
            peak_bf16: sms * hz * arch.tc_bf16_flops as f64,
        }
    }

    /// The units for the runtime's utilisation figures.
    pub fn units(&self) -> Vec<UnitInfo> {
        let clock = if self.clock_from_driver { "driver clock" } else { "table clock" };
        let src = |what: &str| {
            format!(
                "{} SMs x {} MHz ({clock}) x {what} ({}, sm_{}{}); bandwidth = 2 x memory clock x bus width",
                self.sm_count, self.clock_mhz, self.arch.name, self.compute_capability.0, self.compute_capability.1
            )
        };
        let bw = self.memory_bandwidth;
        vec![
            UnitInfo {
                unit: TENSOR_CORES,
                peak_flops: if self.peak_f16 > 0.0 { self.peak_f16 } else { self.peak_f32 },
                peak_bytes_per_s: bw,
                source: src(&format!(
                    "{} dense f16/bf16 tensor-core flops/SM/clock (tf32 peak {:.1} TFLOP/s)",
                    self.arch.tc_f16_flops,
                    self.peak_tf32 / 1e12
                )),
            },
            UnitInfo {
                unit: CUDA_CORES,
                peak_flops: self.peak_f32,
                peak_bytes_per_s: bw,
                source: src(&format!("{} f32 FMA lanes x 2", self.arch.fp32_lanes)),
            },
            UnitInfo {
                unit: CUDA_CORES_FP64,
                peak_flops: self.peak_f64,
                peak_bytes_per_s: bw,
                source: src(&format!("{} f64 FMA lanes x 2", self.arch.fp64_lanes)),
            },
        ]
    }
}
