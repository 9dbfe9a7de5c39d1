//! The figures of each Ascend SoC that npurt models: core counts, clock, the Atlas A2
//! Cube's extra paths and the HBM bandwidth, keyed by the `aclrtGetSocName` string.
//!
//! Plain data, read by acl-emu's cost model (`acl-emu/src/model.rs`) and by the Ascend
//! backend's copy of that model for the mapping choice (`backend-acl/src/cost.rs`), so both
//! take the same figures from one table. The core counts and clocks come from CANN's
//! platform description files (hicann/runtime, `platform_config/<SoC>.ini`: `ai_core_cnt`,
//! `vector_core_cnt`, `cube_freq`); docs/ASCEND.md lists them with their sources.

/// MACs of one Cube per cycle in FP16 / BF16: 16 x 16 x 16 (platform ini
/// `cube_m/n/k_size`, Hot Chips 31 "4096 FP16 MACs").
pub const CUBE_MACS: f64 = 4096.0;
/// FP16 lanes of one Vector unit per cycle: 128 (platform ini `vec_calc_size`; the
/// 2048-bit vector unit of Hot Chips 31); FP32 has half as many.
pub const VECTOR_LANES_FP16: f64 = 128.0;
/// Ascend 910: four HBM2 stacks x 1024 bits x 2.4 Gb/s = 1228.8 GB/s.
pub const HBM_910: f64 = 4.0 * 1024.0 * 2.4e9 / 8.0;
/// Atlas A2 (910B): 1.6 TB/s as commonly published (third-party; no Huawei datasheet).
pub const HBM_A2: f64 = 1.6e12;

/// One SoC's figures. Plain data: `Send + Sync`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SocFigures {
    /// Cube cores (AI cores on the 910 family).
    pub cube_cores: u32,
    /// Vector units: one per AI core on the 910 family, the AIV cores on Atlas A2.
    pub vector_cores: u32,
    /// Cube and vector clock, MHz (platform ini `cube_freq`).
    pub mhz: u32,
    /// Atlas A2: the Cube takes BF16 (ini `support_bf16`) and has an FP32 path; the 910
    /// computes FP32 products in FP16.
    pub atlas_a2: bool,
    /// HBM bandwidth, bytes/s.
    pub hbm: f64,
}

impl SocFigures {
    /// The Ascend910A's figures: what a SoC without its own entry is modelled as.
    pub const ASCEND_910A: SocFigures = SocFigures::new(32, 32, 1000, false, HBM_910);

    const fn new(cube_cores: u32, vector_cores: u32, mhz: u32, atlas_a2: bool, hbm: f64) -> SocFigures {
        SocFigures { cube_cores, vector_cores, mhz, atlas_a2, hbm }
    }

    /// The figures of `soc` (the `aclrtGetSocName` string, whole); `None` for a SoC
    /// without an entry (callers model it as [`SocFigures::ASCEND_910A`]).
    pub fn of(soc: &str) -> Option<SocFigures> {
        let new = SocFigures::new;
        Some(match soc {
            "Ascend910A" => SocFigures::ASCEND_910A,
            "Ascend910B" => new(30, 30, 900, false, HBM_910),
            "Ascend910ProA" => new(32, 32, 1100, false, HBM_910),
            "Ascend910ProB" => new(30, 30, 1150, false, HBM_910),
            "Ascend910PremiumA" => new(32, 32, 1220, false, HBM_910),
            "Ascend910B1" => new(24, 48, 1850, true, HBM_A2),
            "Ascend910B2" | "Ascend910B2C" => new(24, 48, 1800, true, HBM_A2),
            "Ascend910B3" => new(20, 40, 1800, true, HBM_A2),
            "Ascend910B4" => new(20, 40, 1500, true, HBM_A2),
            _ => return None,
        })
    }

    /// The clock, Hz.
    pub fn hz(&self) -> f64 {
        self.mhz as f64 * 1e6
    }

    /// The Cube's FP16 peak, FLOP/s (a MAC is 2 FLOPs).
    pub fn cube_fp16_flops(&self) -> f64 {
        self.cube_cores as f64 * CUBE_MACS * 2.0 * self.hz()
    }

    /// The Vector units' peak for 2-byte elements, FLOP/s (half for wider ones).
    pub fn vector_fp16_flops(&self) -> f64 {
        self.vector_cores as f64 * VECTOR_LANES_FP16 * self.hz()
    }
}

/// Seconds as whole picoseconds, rounded up; 0 for NaN or a negative time, saturating at
/// `u64::MAX`. The unit of every modelled duration, so acl-emu and the backend's copy of
/// its model round the same way.
pub fn secs_to_ps(secs: f64) -> u64 {
    let v = (secs * 1e12).ceil();
    if v.is_nan() || v <= 0.0 {
        0
    } else if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_910a_and_an_a2_part_have_their_published_rates() {
        // 910A: 32 cores x 4096 MACs x 2 x 1 GHz = 262 TFLOPS FP16 (Huawei's "256 TFLOPS"
        // is the 910's marketing figure at this clock, rounded).
        let a = SocFigures::of("Ascend910A").unwrap();
        assert!((a.cube_fp16_flops() - 262.144e12).abs() < 1e6);
        assert!(!a.atlas_a2 && a.hbm == HBM_910);
        let b2 = SocFigures::of("Ascend910B2").unwrap();
        assert!(b2.atlas_a2 && b2.hbm == HBM_A2 && b2.vector_cores == 2 * b2.cube_cores);
        assert_eq!(SocFigures::of("Ascend310P3"), None);
    }
}
