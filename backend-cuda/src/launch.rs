//! Enqueuing one table entry: operand checks and pins, parameter blocks, launch shapes,
//! cuBLAS calls.

use crate::device::{DEFAULT_STREAM, Device, StreamState};
use crate::error::{CudaError, guard, lock};
use crate::kernels::Impl;
use crate::kernels::source::{Kern, entry_name};
use crate::plan::{self, KParams, MatmulPlan};
use cudarc::cublas::sys as bsys;
use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};
use runtime::backend::allocations::overlapping_output;
use runtime::{DType, KernelInfo, KernelTable, LaunchArgs, Op, Result, StreamId, Tier};
use std::sync::atomic::Ordering;

// SAFETY: `KParams` is `#[repr(C)]`, made of `i64` / `f64` fields only, and mirrors
// `struct P` of the CUDA prelude field by field, so passing it by value is sound.
unsafe impl DeviceRepr for KParams {}

const BLOCK: u32 = 256;
const MAX_GRID: u32 = i32::MAX as u32;

fn addr(a: &runtime::TensorArg) -> u64 {
    a.ptr.0 + (a.layout.offset * a.dtype.size()) as u64
}

fn bad(msg: impl Into<String>) -> CudaError {
    CudaError::BadRequest(msg.into())
}

/// A launch's operands as the kernels read them: the inputs, the first output and its
/// dims, the compute dtype (the first input's, else the output's) and the output's
/// device address.
struct Operands<'a> {
    ins: &'a [runtime::TensorArg],
    out: &'a runtime::TensorArg,
    od: &'a [usize],
    dt: DType,
    o: u64,
}

impl<'a> Operands<'a> {
    fn of(args: &'a LaunchArgs) -> std::result::Result<Operands<'a>, CudaError> {
        let ins = args.inputs.as_slice();
        let out = args.outputs.first().ok_or_else(|| bad("no output"))?;
        let dt = ins.first().map_or(out.dtype, |a| a.dtype);
        Ok(Operands { ins, out, od: out.layout.dims(), dt, o: addr(out) })
    }
    /// Input `i`'s dims.
    fn dims(&self, i: usize) -> &'a [usize] {
        self.ins[i].layout.dims()
    }
    /// Input `i`'s device address, 0 for an input the launch does not have.
    fn addr(&self, i: usize) -> u64 {
        self.ins.get(i).map_or(0, addr)
    }
}

#[allow(clippy::too_many_arguments)]
impl Device {
    fn launch_fn(
        &self,
        st: &CudaStream,
        f: &CudaFunction,
        p: &KParams,
        ptrs: &[u64],
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
    ) -> std::result::Result<(), CudaError> {
        let mut b = st.launch_builder(f);
        b.arg(p);
        for x in ptrs {
            b.arg(x);
        }
        let cfg = LaunchConfig { grid_dim: grid, block_dim: block, shared_mem_bytes: smem };
        // The kernel's C signature is `(P, pointers...)` in this order (see `source`).
        // SAFETY: each pointer in `ptrs` is an operand validated and pinned by `launch` (or 0
        // where unused) and `p` holds those operands' shapes, so the kernel stays inside them.
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("cuLaunchKernel", e, None))?;
        Ok(())
    }

    /// Launches kernel `k` of the (`tier`, `dtype`) module over `p.n` items, one per thread.
    fn per_item(
        &self,
        st: &CudaStream,
        tier: Tier,
        dtype: DType,
        k: Kern,
        p: &KParams,
        ptrs: &[u64],
    ) -> std::result::Result<(), CudaError> {
        if p.n <= 0 {
            return Ok(());
        }
        let blocks = (p.n as u64).div_ceil(BLOCK as u64);
        if blocks > MAX_GRID as u64 {
            return Err(bad(format!("{} items exceed one launch", p.n)));
        }
        let f = self.function(tier, dtype, &entry_name(k, dtype, tier))?;
        self.launch_fn(st, &f, p, ptrs, (blocks as u32, 1, 1), (BLOCK, 1, 1), 0)
    }

    /// Grid-stride launch: at most 32 blocks per SM.
    fn strided(
        &self,
        st: &CudaStream,
        tier: Tier,
        dtype: DType,
        k: Kern,
        p: &KParams,
        items: i64,
        ptrs: &[u64],
    ) -> std::result::Result<(), CudaError> {
        if items <= 0 || p.n <= 0 {
            return Ok(());
        }
        let cap = (self.info.sm_count.max(1) * 32).min(MAX_GRID);
        let (g, b) = plan::grid_1d(items as usize, BLOCK, cap);
        let f = self.function(tier, dtype, &entry_name(k, dtype, tier))?;
        self.launch_fn(st, &f, p, ptrs, (g, 1, 1), (b, 1, 1), 0)
    }

    /// One block per row.
    fn per_row(
        &self,
        st: &CudaStream,
        tier: Tier,
        dtype: DType,
        k: Kern,
        p: &KParams,
        rows: i64,
        block: u32,
        smem: u32,
        ptrs: &[u64],
    ) -> std::result::Result<(), CudaError> {
        if rows <= 0 {
            return Ok(());
        }
        let g = (rows as u64).min(1 << 20) as u32;
        let f = self.function(tier, dtype, &entry_name(k, dtype, tier))?;
        self.launch_fn(st, &f, p, ptrs, (g, 1, 1), (block, 1, 1), smem)
    }

    /// One warp per row, 8 rows per block.
    fn per_warp(
        &self,
        st: &CudaStream,
        tier: Tier,
        dtype: DType,
        k: Kern,
        p: &KParams,
        rows: i64,
        ptrs: &[u64],
    ) -> std::result::Result<(), CudaError> {
        if rows <= 0 {
            return Ok(());
        }
        let g = (rows as u64).div_ceil(8).min(1 << 20) as u32;
        let f = self.function(tier, dtype, &entry_name(k, dtype, tier))?;
        self.launch_fn(st, &f, p, ptrs, (g, 1, 1), (BLOCK, 1, 1), 0)
    }

    /// Enqueues `imp` for `args` on `ss` (operands already validated and pinned).
    pub(crate) fn run(&self, imp: Impl, args: &LaunchArgs, ss: &StreamState) -> std::result::Result<(), CudaError> {
        let st = &ss.cu;
        let ops = Operands::of(args)?;
        let (ins, out, od, dt, o) = (ops.ins, ops.out, ops.od, ops.dt, ops.o);
        let (dims, a) = (|i: usize| ops.dims(i), |i: usize| ops.addr(i));
        match (imp, &args.op) {
            (Impl::Memcpy, op) => {
                let x = &ins[0];
                if matches!(op, Op::Copy) && !x.layout.is_contiguous() {
                    let p = plan::indexed(x.layout.dims(), &[x.layout.strides.iter().map(|&s| s as i64).collect()])
                        .map_err(bad)?;
                    return self.per_item(st, Tier::Reference, dt, Kern::Copy, &p, &[a(0), o]);
                }
                let bytes = out.layout.numel() * out.dtype.size();
                if bytes == 0 {
                    return Ok(());
                }
                // SAFETY: source and destination are validated, pinned, non-overlapping
                // operands of `bytes` bytes (contiguous input, contiguous output).
                unsafe { result::memcpy_dtod_async(o, a(0), bytes, st.cu_stream()) }
                    .map_err(|e| CudaError::driver("cuMemcpyDtoDAsync", e, None))
            }
            (Impl::Blas, op) => {
                let in_dims: Vec<&[usize]> = (0..ins.len()).map(dims).collect();
                let mp = MatmulPlan::new(op, &in_dims, od).map_err(bad)?;
                let c = if ins.len() > 2 { Some((a(2), dims(2))) } else { None };
                self.blas_matmul(st, &mp, dt, a(0), a(1), c, o)
            }
            (Impl::Nvrtc(tier), _) => self.run_nvrtc(tier, args, ss),
        }
    }

    /// Enqueues an NVRTC kernel of `tier` for `args` on `ss`, by op family.
    fn run_nvrtc(&self, tier: Tier, args: &LaunchArgs, ss: &StreamState) -> std::result::Result<(), CudaError> {
        match &args.op {
            Op::MatMul { .. } | Op::Gemm { .. } | Op::Linear => self.nvrtc_matrix(tier, args, &ss.cu),
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Pow | Op::Equal | Op::BiasGelu(_) => {
                self.nvrtc_elementwise(tier, args, &ss.cu)
            }
            Op::Relu
            | Op::Gelu(_)
            | Op::Tanh
            | Op::Erf
            | Op::Exp
            | Op::Sqrt
            | Op::Neg
            | Op::Sigmoid
            | Op::Scale { .. } => self.nvrtc_elementwise(tier, args, &ss.cu),
            Op::Softmax { .. }
            | Op::LayerNorm { .. }
            | Op::AddLayerNorm { .. }
            | Op::ReduceSum { .. }
            | Op::ReduceMean { .. }
            | Op::Attention { .. } => self.nvrtc_rows(tier, args, &ss.cu),
            Op::Copy
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Gather { .. }
            | Op::Cast { .. }
            | Op::Where
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::Expand { .. } => self.nvrtc_data(args, ss),
            Op::KvCacheWrite | Op::PagedAttention { .. } => self.nvrtc_data(args, ss),
            Op::Silu => self.nvrtc_elementwise(tier, args, &ss.cu),
            Op::RmsNorm { .. } | Op::AddRmsNorm { .. } | Op::SwiGlu => self.nvrtc_rows(tier, args, &ss.cu),
            Op::Rope { .. } => self.nvrtc_data(args, ss),
            // Not in this backend's table: the graph fusion keeps Linear and BiasGelu here.
            Op::LinearGelu => Err(bad(format!("{}: no CUDA kernel", args.op.name()))),
        }
    }

    /// A matrix product on the NVRTC kernel of `tier`.
    fn nvrtc_matrix(&self, tier: Tier, args: &LaunchArgs, st: &CudaStream) -> std::result::Result<(), CudaError> {
        let ops = Operands::of(args)?;
        let (ins, od, dt, o) = (ops.ins, ops.od, ops.dt, ops.o);
        let (dims, a) = (|i: usize| ops.dims(i), |i: usize| ops.addr(i));
        let op = &args.op;
        match op {
            Op::MatMul { .. } | Op::Gemm { .. } | Op::Linear => {
                let in_dims: Vec<&[usize]> = (0..ins.len()).map(dims).collect();
                let mp = MatmulPlan::new(op, &in_dims, od).map_err(bad)?;
                let p = mp.params();
                let ptrs = [a(0), a(1), a(2), o];
                if tier == Tier::Reference {
                    self.per_item(st, tier, dt, Kern::Matmul, &p, &ptrs)
                } else {
                    if p.n <= 0 {
                        return Ok(());
                    }
                    let f = self.function(tier, dt, &entry_name(Kern::Matmul, dt, tier))?;
                    let grid = (mp.n.div_ceil(16) as u32, mp.m.div_ceil(16) as u32, mp.batch() as u32);
                    self.launch_fn(st, &f, &p, &ptrs, grid, (16, 16, 1), 0)
                }
            }
            _ => Err(bad("not an op of this kernel family")),
        }
    }

    /// An element-wise op (binary, unary, bias + GELU) on the NVRTC kernel of `tier`.
    fn nvrtc_elementwise(&self, tier: Tier, args: &LaunchArgs, st: &CudaStream) -> std::result::Result<(), CudaError> {
        let ops = Operands::of(args)?;
        let (out, od, dt, o) = (ops.out, ops.od, ops.dt, ops.o);
        let (dims, a) = (|i: usize| ops.dims(i), |i: usize| ops.addr(i));
        let es = dt.size();
        let op = &args.op;
        match op {
            Op::Equal => {
                let p = plan::equal(dims(0), dims(1), od).map_err(bad)?;
                let ptrs = [a(0), a(1), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::Equal, &p, &ptrs),
                    _ => self.strided(st, Tier::Generic, dt, Kern::Equal, &p, p.n, &ptrs),
                }
            }
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Pow => {
                let mut p = plan::binary(op, dims(0), dims(1), od).map_err(bad)?;
                let ptrs = [a(0), a(1), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::Binary, &p, &ptrs),
                    Tier::Generic => self.strided(st, tier, dt, Kern::Binary, &p, p.n, &ptrs),
                    Tier::HighPerformance => {
                        p.i[1] = aligned(&ptrs, 4 * es) as i64;
                        self.strided(st, tier, dt, Kern::Binary, &p, (p.n + 3) / 4, &ptrs)
                    }
                }
            }
            Op::Relu
            | Op::Gelu(_)
            | Op::Tanh
            | Op::Erf
            | Op::Exp
            | Op::Sqrt
            | Op::Neg
            | Op::Sigmoid
            | Op::Silu
            | Op::Scale { .. } => {
                let mut p = plan::unary(op, out.layout.numel()).map_err(bad)?;
                let ptrs = [a(0), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::Unary, &p, &ptrs),
                    Tier::Generic => self.strided(st, tier, dt, Kern::Unary, &p, p.n, &ptrs),
                    Tier::HighPerformance => {
                        p.i[1] = aligned(&ptrs, 4 * es) as i64;
                        self.strided(st, tier, dt, Kern::Unary, &p, (p.n + 3) / 4, &ptrs)
                    }
                }
            }
            Op::BiasGelu(approx) => {
                let mut p = plan::bias_gelu(*approx, out.layout.numel(), dims(1).first().copied().unwrap_or(1));
                let ptrs = [a(0), a(1), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::BiasGelu, &p, &ptrs),
                    Tier::Generic => self.strided(st, tier, dt, Kern::BiasGelu, &p, p.n, &ptrs),
                    Tier::HighPerformance => {
                        p.i[1] = aligned(&ptrs, 4 * es) as i64;
                        self.strided(st, tier, dt, Kern::BiasGelu, &p, (p.n + 3) / 4, &ptrs)
                    }
                }
            }
            _ => Err(bad("not an op of this kernel family")),
        }
    }

    /// A row-wise op (softmax, layer norm, reduction, attention) on the NVRTC kernel of `tier`.
    fn nvrtc_rows(&self, tier: Tier, args: &LaunchArgs, st: &CudaStream) -> std::result::Result<(), CudaError> {
        let ops = Operands::of(args)?;
        let (ins, dt, o) = (ops.ins, ops.dt, ops.o);
        let (dims, a) = (|i: usize| ops.dims(i), |i: usize| ops.addr(i));
        let op = &args.op;
        match op {
            Op::Softmax { axis } => {
                let s = runtime::Shape::new(dims(0).to_vec());
                let ax = s.axis(*axis).ok_or_else(|| bad("softmax axis out of range"))?;
                let p = plan::softmax(dims(0), ax);
                if p.i[1] == 0 {
                    return Ok(());
                }
                let ptrs = [a(0), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::Softmax, &p, &ptrs),
                    Tier::Generic => self.per_row(st, tier, dt, Kern::Softmax, &p, p.n, BLOCK, 0, &ptrs),
                    Tier::HighPerformance => self.per_warp(st, tier, dt, Kern::Softmax, &p, p.n, &ptrs),
                }
            }
            Op::LayerNorm { eps } | Op::AddLayerNorm { eps } => {
                let res = matches!(op, Op::AddLayerNorm { .. });
                let p = plan::layer_norm(dims(0), *eps, res);
                let ptrs = if res { [a(0), a(1), a(2), a(3), o] } else { [a(0), 0, a(1), a(2), o] };
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::LayerNorm, &p, &ptrs),
                    Tier::Generic => self.per_row(st, tier, dt, Kern::LayerNorm, &p, p.n, BLOCK, 0, &ptrs),
                    Tier::HighPerformance => self.per_warp(st, tier, dt, Kern::LayerNorm, &p, p.n, &ptrs),
                }
            }
            Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => {
                let s = runtime::Shape::new(dims(0).to_vec());
                let ax = runtime::op::normalise_axes(&s, axes).ok_or_else(|| bad("bad reduction axes"))?;
                let p = plan::reduce(dims(0), &ax, matches!(op, Op::ReduceMean { .. })).map_err(bad)?;
                let ptrs = [a(0), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::Reduce, &p, &ptrs),
                    _ => self.per_row(st, tier, dt, Kern::Reduce, &p, p.n, BLOCK, 0, &ptrs),
                }
            }
            Op::Attention { scale, causal, .. } => {
                let mask = ins.get(3).map(|m| (m.layout.dims(), m.dtype == DType::U8));
                let p = plan::attention(dims(0), dims(1), dims(2), mask, *scale, *causal);
                let ptrs = [a(0), a(1), a(2), a(3), o];
                match tier {
                    Tier::HighPerformance => {
                        let (d, t) = (p.i[3] as usize, p.i[2] as usize);
                        let smem = ((d + t) * 4) as u32;
                        self.per_row(st, tier, dt, Kern::Attention, &p, p.i[0] * p.i[1], 128, smem, &ptrs)
                    }
                    _ => self.per_item(st, tier, dt, Kern::Attention, &p, &ptrs),
                }
            }
            Op::RmsNorm { eps } | Op::AddRmsNorm { eps } => {
                let res = matches!(op, Op::AddRmsNorm { .. });
                // The weight: AddRmsNorm's third input, RmsNorm's optional second.
                let (w, weighted) = if res { (a(2), true) } else { (a(1), ins.len() == 2) };
                let p = plan::rms_norm(dims(0), *eps, res, weighted);
                let sum = args.outputs.get(1).map_or(0, addr);
                let ptrs = [a(0), if res { a(1) } else { 0 }, w, o, sum];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::RmsNorm, &p, &ptrs),
                    Tier::Generic => self.per_row(st, tier, dt, Kern::RmsNorm, &p, p.n, BLOCK, 0, &ptrs),
                    Tier::HighPerformance => self.per_warp(st, tier, dt, Kern::RmsNorm, &p, p.n, &ptrs),
                }
            }
            Op::SwiGlu => {
                let n = ops.out.layout.numel();
                let p = plan::swiglu(n, ops.od.last().copied().unwrap_or(1), ins.len() == 2);
                let ptrs = [a(0), a(1), o];
                match tier {
                    Tier::Reference => self.per_item(st, tier, dt, Kern::SwiGlu, &p, &ptrs),
                    _ => self.strided(st, tier, dt, Kern::SwiGlu, &p, p.n, &ptrs),
                }
            }
            _ => Err(bad("not an op of this kernel family")),
        }
    }

    /// A data movement or conversion (copy, permute, gather, cast): reference kernels.
    fn nvrtc_data(&self, args: &LaunchArgs, ss: &StreamState) -> std::result::Result<(), CudaError> {
        let st = &ss.cu;
        let ops = Operands::of(args)?;
        let (ins, out, dt, o) = (ops.ins, ops.out, ops.dt, ops.o);
        let (dims, a) = (|i: usize| ops.dims(i), |i: usize| ops.addr(i));
        let op = &args.op;
        match op {
            Op::Copy | Op::Reshape { .. } => {
                let x = &ins[0];
                let p = plan::indexed(x.layout.dims(), &[x.layout.strides.iter().map(|&s| s as i64).collect()])
                    .map_err(bad)?;
                self.per_item(st, Tier::Reference, dt, Kern::Copy, &p, &[a(0), o])
            }
            Op::Permute { perm } => {
                let p = plan::permute(dims(0), perm).map_err(bad)?;
                self.per_item(st, Tier::Reference, dt, Kern::Copy, &p, &[a(0), o])
            }
            Op::Gather { axis } => {
                let idx = &ins[1];
                let p = plan::gather(dims(0), *axis, idx.layout.numel());
                ss.check_error_word.store(true, Ordering::Release);
                self.per_item(st, Tier::Reference, dt, Kern::Gather(idx.dtype), &p, &[a(0), a(1), o, self.error_word])
            }
            Op::Rope { interleaved, layout } => {
                // Positions outside the tables set the error word, as Gather's indices.
                let p = plan::rope(dims(0), dims(1)[0], *layout == runtime::AttentionLayout::Bsnd, *interleaved);
                ss.check_error_word.store(true, Ordering::Release);
                let ptrs = [a(0), a(1), a(2), a(3), o, self.error_word];
                self.per_item(st, Tier::Reference, dt, Kern::Rope(ins[3].dtype), &p, &ptrs)
            }
            Op::Where => {
                // The module of x's dtype; the condition is read as u8.
                let p = plan::select(dims(0), dims(1), dims(2), ops.od).map_err(bad)?;
                let ptrs = [a(0), a(1), a(2), o];
                self.per_item(st, Tier::Reference, ins[1].dtype, Kern::Where, &p, &ptrs)
            }
            Op::Concat { axis } => {
                // One placing copy per input, into its block of the output.
                let od = ops.od;
                let ax = runtime::Shape::new(od.to_vec()).axis(*axis).ok_or_else(|| bad("concat axis out of range"))?;
                let step = (od[ax + 1..].iter().product::<usize>() * dt.size()) as u64;
                let mut at = 0u64;
                for (j, p) in plan::concat(ins.iter().map(|x| x.layout.dims()), od, ax).map_err(bad)?.iter().enumerate()
                {
                    if p.n > 0 {
                        self.per_item(st, Tier::Reference, dt, Kern::Place, p, &[a(j), o + at * step])?;
                    }
                    at += dims(j)[ax] as u64;
                }
                Ok(())
            }
            Op::Slice { starts, ends, axes, steps } => {
                // A strided read of the window (negative steps read backwards) from its
                // first element.
                let w = runtime::op::resolve_slice(dims(0), starts, ends, axes, steps).map_err(bad)?;
                let (p, first) = plan::slice(dims(0), &w).map_err(bad)?;
                self.per_item(st, Tier::Reference, dt, Kern::Copy, &p, &[a(0) + first * dt.size() as u64, o])
            }
            Op::Expand { .. } => {
                let p = plan::indexed(ops.od, &[plan::broadcast_strides(dims(0), ops.od)]).map_err(bad)?;
                self.per_item(st, Tier::Reference, dt, Kern::Copy, &p, &[a(0), o])
            }
            Op::Cast { to } => {
                let p = KParams { n: out.layout.numel() as i64, ..Default::default() };
                self.per_item(st, Tier::Reference, dt, Kern::Cast(*to), &p, &[a(0), o])
            }
            // In place: outputs 0 and 1 are inputs 0 and 1 (the caches).
            Op::KvCacheWrite => {
                let p = plan::kv_write(dims(0), dims(2));
                ss.check_error_word.store(true, Ordering::Release);
                let ptrs = [a(2), a(3), a(4), a(0), a(1), self.error_word];
                self.per_item(st, Tier::Reference, dt, Kern::KvWrite(ins[4].dtype), &p, &ptrs)
            }
            Op::PagedAttention { scale } => {
                let p = plan::paged_attention(dims(0), dims(1), dims(3), *scale);
                ss.check_error_word.store(true, Ordering::Release);
                let ptrs = [a(0), a(1), a(2), a(3), a(4), o, self.error_word];
                self.per_item(st, Tier::Reference, dt, Kern::Paged, &p, &ptrs)
            }
            _ => Err(bad("not an op of this kernel family")),
        }
    }

    /// `out = alpha op(a) op(b) + beta c` through cuBLAS (row-major operands: computes
    /// the column-major product `out^T = op(b)^T op(a)^T`).
    fn blas_matmul(
        &self,
        st: &CudaStream,
        mp: &MatmulPlan,
        dt: DType,
        a: u64,
        b: u64,
        c: Option<(u64, &[usize])>,
        out: u64,
    ) -> std::result::Result<(), CudaError> {
        let total = mp.batch() * mp.m * mp.n;
        if total == 0 {
            return Ok(());
        }
        let es = dt.size();
        // Put beta's operand in place first: out = broadcast(c).
        if let Some((cp, cd)) = c {
            let p = plan::indexed(&[mp.m, mp.n], &[plan::broadcast_strides(cd, &[mp.m, mp.n])]).map_err(bad)?;
            self.per_item(st, Tier::Reference, dt, Kern::Copy, &p, &[cp, out])?;
        }
        if mp.k == 0 {
            // No products: out = beta * c, or zeros.
            if c.is_some() {
                let p = plan::unary(&Op::Scale { factor: mp.beta }, total).map_err(bad)?;
                return self.per_item(st, Tier::Reference, dt, Kern::Unary, &p, &[out, out]);
            }
            // SAFETY: `out` is the validated, pinned output of `total` elements.
            return unsafe { result::memset_d8_async(out, 0, total * es, st.cu_stream()) }
                .map_err(|e| CudaError::driver("cuMemsetD8Async", e, None));
        }
        let handle = self.blas.as_ref().ok_or_else(|| bad("cuBLAS is not available on this device"))?;
        let h = lock(handle);
        let (ty, compute) = match dt {
            DType::F32 if self.tf32() => {
                (bsys::cudaDataType::CUDA_R_32F, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32)
            }
            DType::F32 => (bsys::cudaDataType::CUDA_R_32F, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
            DType::F16 => (bsys::cudaDataType::CUDA_R_16F, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
            DType::BF16 => (bsys::cudaDataType::CUDA_R_16BF, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
            other => return Err(bad(format!("cuBLAS does not multiply {other}"))),
        };
        let op = |t: bool| if t { bsys::cublasOperation_t::CUBLAS_OP_T } else { bsys::cublasOperation_t::CUBLAS_OP_N };
        let (alpha, beta) = (mp.alpha, if c.is_some() { mp.beta } else { 0.0 });
        // SAFETY: the handle is exclusively held (mutex) and bound to this stream before
        // use; the stream belongs to the handle's context.
        unsafe { cudarc::cublas::result::set_stream(h.0, st.cu_stream() as bsys::cudaStream_t) }
            .map_err(|e| CudaError::cublas("cublasSetStream", e))?;
        let mn = (mp.m * mp.n) as i64;
        for (oa, ob, oc, count, sa, sb) in mp.blas_calls() {
            // SAFETY: every matrix addressed lies inside the validated operands: the plan's
            // offsets, strides and leading dimensions come from the operands' shapes; alpha
            // and beta are host floats (the default host pointer mode, f32 compute type).
            unsafe {
                cudarc::cublas::result::gemm_strided_batched_ex(
                    h.0,
                    op(mp.trans_b),
                    op(mp.trans_a),
                    mp.n as i32,
                    mp.m as i32,
                    mp.k as i32,
                    &alpha as *const f32 as *const _,
                    (b + ob as u64 * es as u64) as *const _,
                    ty,
                    mp.ldb.max(1) as i32,
                    sb,
                    (a + oa as u64 * es as u64) as *const _,
                    ty,
                    mp.lda.max(1) as i32,
                    sa,
                    &beta as *const f32 as *const _,
                    (out + oc as u64 * es as u64) as *mut _,
                    ty,
                    mp.n as i32,
                    mn,
                    count as i32,
                    compute,
                    bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            }
            .map_err(|e| CudaError::cublas("cublasGemmStridedBatchedEx", e))?;
        }
        Ok(())
    }

    fn tf32(&self) -> bool {
        self.tf32_allowed
    }
}

impl Device {
    /// Validates `args` for `kernel` of `kernels` (rules M1, M3), pins its operands and
    /// queues the kernel on `stream` (`Backend::launch`).
    pub(crate) fn launch_kernel(
        &self,
        kernels: &KernelTable<Impl>,
        kernel: &KernelInfo,
        args: LaunchArgs,
        stream: StreamId,
    ) -> Result<()> {
        let (info, &imp) = kernels
            .resolve(kernel)
            .ok_or_else(|| CudaError::BadRequest(format!("kernel {} is not a CUDA kernel", kernel.name)))?;
        let d = self;
        let st = d.stream(stream)?;
        let n_in = args.inputs.len();
        let ranges = args.validate(info)?;
        if let Some(i) = overlapping_output(&ranges, n_in, |_| false) {
            return Err(CudaError::BadRequest(format!("{}: output {i} overlaps another operand", kernel.name)).into());
        }
        if args.outputs.iter().any(|o| !o.layout.is_contiguous()) {
            return Err(CudaError::BadRequest(format!("{}: outputs must be contiguous", kernel.name)).into());
        }
        let pins = d.table.pin(&ranges).map_err(CudaError::from)?;
        d.bind()?;
        let user = stream != DEFAULT_STREAM;
        if user {
            d.reap();
        }
        let ran = guard("kernel launch", || d.run(imp, &args, &st));
        // Part of the work may have been queued even when a later step failed: keep the
        // memory alive until the stream says it is done, in every case (M2).
        d.retire(&st, user, pins, args.op.name(), args.seq)?;
        ran.map_err(|e| match e {
            e @ CudaError::OutOfMemory { .. } => e.into(),
            e => {
                let (op, seq, kernel) = (args.op.name(), args.seq, kernel.name.clone());
                runtime::Error::backend("cuda", CudaError::Launch { op, seq, kernel, source: Box::new(e) })
            }
        })
    }
}

/// All non-zero pointers are multiples of `align` bytes.
fn aligned(ptrs: &[u64], align: usize) -> bool {
    ptrs.iter().all(|&p| p == 0 || p % align as u64 == 0)
}
