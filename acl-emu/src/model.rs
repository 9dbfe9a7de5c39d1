//! The modelled device: per-SoC peak rates and the roofline cost of a kernel, a copy or a
//! fill, in picoseconds. Everything here is a *model* (docs/ASCEND.md, "The modelled
//! clock", cites every constant); nothing is measured.
//!
//! A kernel costs `max(FLOPs / peak of its unit for its dtype, bytes / HBM bandwidth)`
//! plus [`LAUNCH_PS`]; its unit is the Cube for matrix products and the Vector units for
//! everything else. FLOPs and bytes are the runtime's own counts (`Op::flops`,
//! `Op::bytes`). A host↔device copy costs its bytes over PCIe, a device-to-device copy
//! its bytes read and written over HBM, a fill its bytes over HBM, each plus
//! [`COPY_PS`].

use acl_sys::soc::{CUBE_MACS, SocFigures, VECTOR_LANES_FP16, secs_to_ps};
use runtime::{DType, Op, TensorMeta};

/// Fixed cost of one kernel launch on a stream: 3 µs (an assumption of the order of a
/// GPU kernel launch; Huawei publishes no figure).
pub const LAUNCH_PS: u64 = 3_000_000;
/// Fixed cost of one copy or fill: 5 µs (assumption: DMA setup, as for a launch).
pub const COPY_PS: u64 = 5_000_000;
/// Fixed cost of replaying one captured graph (`aclmdlRIExecuteAsync`): 10 µs
/// (assumption: one submission of a task list, no per-kernel host work).
pub const REPLAY_PS: u64 = 10_000_000;
/// Launch cost of each kernel inside a replayed capture: 1 µs instead of [`LAUNCH_PS`]
/// (assumption: the device's scheduler walks the task list).
pub const REPLAYED_LAUNCH_PS: u64 = 1_000_000;

/// PCIe 4.0 x16, one direction: 16 GT/s x 16 lanes x 128/130 / 8 bits.
const PCIE4_X16: f64 = 16e9 * 16.0 * 128.0 / 130.0 / 8.0;

/// The unit a kernel runs on, in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Cube,
    Vector,
    /// Copies and fills (DMA).
    Copy,
}

/// A modelled duration and the unit that spends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    pub ps: u64,
    pub unit: Unit,
    /// A kernel's roofline bound, picoseconds: `max(FLOPs / peak, bytes / HBM bandwidth)`
    /// with the Cube at its FP16 peak whatever the dtype and the Vector units at their
    /// peak for the widest operand, no launch cost ([`Soc::roofline`]); 0 for copies and
    /// fills, which are not kernels.
    pub bound_ps: u64,
}

/// Where a copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDir {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

/// One SoC's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Soc {
    /// The `aclrtGetSocName` string the figures were chosen for.
    pub name: String,
    /// Cube cores (AI cores on the 910 family).
    pub cube_cores: u32,
    /// Vector units: one per AI core on the 910 family, the AIV cores on Atlas A2.
    pub vector_cores: u32,
    /// Cube and vector clock, MHz (platform ini `cube_freq`).
    pub mhz: u32,
    /// Whether the Cube takes BF16 (ini `support_bf16`).
    pub bf16: bool,
    /// Whether the Cube has an FP32 path (Atlas A2); the 910 computes FP32 as FP16.
    pub cube_fp32: bool,
    /// HBM bandwidth, bytes/s.
    pub hbm: f64,
    /// Host link bandwidth per direction, bytes/s.
    pub pcie: f64,
}

impl Soc {
    /// The figures of `name`; an unknown SoC gets the Ascend910A's (logged at debug).
    pub fn of(name: &str) -> Soc {
        // From CANN's platform description files (acl-sys's `soc` table, docs/ASCEND.md).
        let f = SocFigures::of(name).unwrap_or_else(|| {
            log::debug!("acl-emu: no modelled figures for SoC {name:?}; using the Ascend910A's");
            SocFigures::ASCEND_910A
        });
        let (cube, vector, mhz, a2, hbm) = (f.cube_cores, f.vector_cores, f.mhz, f.atlas_a2, f.hbm);
        Soc {
            name: name.to_string(),
            cube_cores: cube,
            vector_cores: vector,
            mhz,
            bf16: a2,
            cube_fp32: a2,
            hbm,
            pcie: PCIE4_X16,
        }
    }

    fn hz(&self) -> f64 {
        self.mhz as f64 * 1e6
    }

    /// Cube peak, FLOP/s (a MAC is 2 FLOPs) for products computed in `dt`: FP16 and BF16
    /// at the full rate; FP32 (Atlas A2 only) at a quarter of it (an assumption: no public
    /// figure); integer types as FP16.
    pub fn cube_flops(&self, dt: DType) -> f64 {
        let fp16 = self.cube_cores as f64 * CUBE_MACS * 2.0 * self.hz();
        match dt {
            DType::F32 if self.cube_fp32 => fp16 / 4.0,
            _ => fp16,
        }
    }

    /// Vector peak, FLOP/s, for elements of `dt`: 128 lanes a cycle for 2-byte types,
    /// 64 for 4- and 8-byte types.
    pub fn vector_flops(&self, dt: DType) -> f64 {
        let lanes = if dt.size() <= 2 { VECTOR_LANES_FP16 } else { VECTOR_LANES_FP16 / 2.0 };
        self.vector_cores as f64 * lanes * self.hz()
    }

    /// The modelled duration of one execution of `op` on these operands. `fp16_compute`:
    /// FP32 products the Cube computes in FP16 (cubeMathType 1 on the 910).
    pub fn kernel(&self, op: &Op, inputs: &[TensorMeta], outputs: &[TensorMeta], fp16_compute: bool) -> Cost {
        let flops = op.flops(inputs, outputs) as f64;
        let bytes = op.bytes(inputs, outputs) as f64;
        let cube = op.is_matrix_product();
        let (unit, peak) = if cube {
            let dt = inputs.first().map_or(DType::F16, |m| m.dtype);
            let dt = if fp16_compute && dt == DType::F32 { DType::F16 } else { dt };
            (Unit::Cube, self.cube_flops(dt))
        } else {
            // The widest element decides the lanes (an FP32 operand halves them).
            let widest = inputs.iter().chain(outputs).map(|m| m.dtype).max_by_key(|d| d.size()).unwrap_or(DType::F16);
            (Unit::Vector, self.vector_flops(widest))
        };
        let secs = (flops / peak).max(bytes / self.hbm);
        let bound_ps = self.roofline(op, inputs, outputs);
        Cost { ps: secs_to_ps(secs).saturating_add(LAUNCH_PS), unit, bound_ps }
    }

    /// The roofline bound of one execution of `op`, picoseconds: `max(FLOPs / peak,
    /// bytes / HBM bandwidth)`, the peak being the Cube's FP16 rate for matrix products
    /// (whatever their dtype: the bound `npurt bench bert` reports next to the modelled
    /// latency) and the Vector units' rate for the widest operand otherwise; no launch.
    pub fn roofline(&self, op: &Op, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> u64 {
        let flops = op.flops(inputs, outputs) as f64;
        let bytes = op.bytes(inputs, outputs) as f64;
        let peak = if op.is_matrix_product() {
            self.cube_flops(DType::F16)
        } else {
            let widest = inputs.iter().chain(outputs).map(|m| m.dtype).max_by_key(|d| d.size()).unwrap_or(DType::F16);
            self.vector_flops(widest)
        };
        secs_to_ps((flops / peak).max(bytes / self.hbm))
    }

    /// The modelled duration of a copy of `bytes`.
    pub fn copy(&self, dir: CopyDir, bytes: u64) -> Cost {
        let secs = match dir {
            CopyDir::HostToDevice | CopyDir::DeviceToHost => bytes as f64 / self.pcie,
            CopyDir::DeviceToDevice => 2.0 * bytes as f64 / self.hbm,
        };
        Cost { ps: secs_to_ps(secs).saturating_add(COPY_PS), unit: Unit::Copy, bound_ps: 0 }
    }

    /// The modelled duration of a fill of `bytes` of device memory.
    pub fn fill(&self, bytes: u64) -> Cost {
        Cost { ps: secs_to_ps(bytes as f64 / self.hbm).saturating_add(COPY_PS), unit: Unit::Copy, bound_ps: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(dt: DType, s: &[usize]) -> TensorMeta {
        TensorMeta::new(dt, s.to_vec())
    }

    #[test]
    fn peaks_follow_the_platform_figures() {
        let a = Soc::of("Ascend910A");
        // 32 cores x 4096 MACs x 2 x 1 GHz = 262.1 TFLOP/s.
        assert!((a.cube_flops(DType::F16) - 262.144e12).abs() < 1e6);
        assert!((a.vector_flops(DType::F16) - 4.096e12).abs() < 1e6);
        assert!((a.vector_flops(DType::F32) - 2.048e12).abs() < 1e6);
        assert!((a.hbm - 1228.8e9).abs() < 1.0);
        let b = Soc::of("Ascend910B2");
        assert!((b.cube_flops(DType::F16) - 353.894e12).abs() < 1e9);
        assert!(b.cube_flops(DType::F32) < b.cube_flops(DType::F16));
        assert_eq!(Soc::of("NoSuchSoc").cube_flops(DType::F16), a.cube_flops(DType::F16));
    }

    #[test]
    fn a_large_product_is_compute_bound_and_a_large_add_bandwidth_bound() {
        let soc = Soc::of("Ascend910A");
        let op = Op::MatMul { trans_a: false, trans_b: false };
        let (i, o) = ([m(DType::F16, &[4096, 4096]), m(DType::F16, &[4096, 4096])], [m(DType::F16, &[4096, 4096])]);
        let c = soc.kernel(&op, &i, &o, false);
        assert_eq!(c.unit, Unit::Cube);
        let compute = 2.0 * 4096f64.powi(3) / soc.cube_flops(DType::F16);
        assert_eq!(c.ps, secs_to_ps(compute) + LAUNCH_PS);
        let add = soc.kernel(&Op::Add, &i, &o, false);
        assert_eq!(add.unit, Unit::Vector);
        assert_eq!(add.ps, secs_to_ps(3.0 * 4096.0 * 4096.0 * 2.0 / soc.hbm) + LAUNCH_PS);
        assert_eq!(c.bound_ps, secs_to_ps(compute), "the bound is the roofline without the launch");
        assert_eq!(add.bound_ps, add.ps - LAUNCH_PS);
        // An empty op costs the launch alone.
        let e = [m(DType::F16, &[0])];
        assert_eq!(soc.kernel(&Op::Relu, &e, &e, false).ps, LAUNCH_PS);
    }

    #[test]
    fn copies_go_over_pcie_or_hbm() {
        let soc = Soc::of("Ascend910A");
        let mib = 1u64 << 20;
        assert_eq!(soc.copy(CopyDir::HostToDevice, mib).ps, secs_to_ps(mib as f64 / PCIE4_X16) + COPY_PS);
        assert_eq!(soc.copy(CopyDir::DeviceToDevice, mib).ps, secs_to_ps(2.0 * mib as f64 / soc.hbm) + COPY_PS);
        assert_eq!(soc.fill(0).ps, COPY_PS);
    }
}
