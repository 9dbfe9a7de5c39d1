//! The CUDA kernel table: which implementations exist per op, their tier, unit and
//! support predicate, declared with [`runtime::KernelTable`]. The NVRTC sources are in
//! [`source`]; launching lives in `launch.rs`.

pub mod source;

use crate::info::{CUDA_CORES, CUDA_CORES_FP64, TENSOR_CORES};
use runtime::{DType, KernelQuery, KernelTable, Op, OpKind, Tier, Unit};
use std::sync::OnceLock;

/// How a table entry runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// A generated NVRTC kernel of this tier.
    Nvrtc(Tier),
    /// cuBLAS GEMM (f32 SIMT / tf32 / f16 / bf16 tensor cores).
    Blas,
    /// A device-to-device copy (`cuMemcpyDtoDAsync`), strided kernel when not contiguous.
    Memcpy,
}

/// Most shared memory the fused attention kernel asks for (bytes).
pub const ATTENTION_SMEM_LIMIT: usize = 48 * 1024;

fn ranks_ok(q: &KernelQuery<'_>) -> Result<(), String> {
    match q.inputs.iter().chain(q.outputs).map(|m| m.shape.rank()).max() {
        Some(r) if r > crate::plan::MAX_RANK + 2 => Err(format!("rank {r} is above the supported maximum")),
        _ => Ok(()),
    }
}

fn any(q: &KernelQuery<'_>) -> Result<(), String> {
    ranks_ok(q)
}

/// Every input has the output's shape (no broadcasting): the vectorised path.
fn same_shape(q: &KernelQuery<'_>) -> Result<(), String> {
    let out = &q.outputs[0].shape;
    if q.inputs.iter().all(|i| &i.shape == out) {
        Ok(())
    } else {
        Err("operands are broadcast; the vectorised kernel needs equal shapes".into())
    }
}

fn last_axis_softmax(q: &KernelQuery<'_>) -> Result<(), String> {
    let Op::Softmax { axis } = q.op else { return Err("not a softmax".into()) };
    let s = &q.inputs[0].shape;
    match s.axis(*axis) {
        Some(a) if a + 1 == s.rank() => Ok(()),
        _ => Err("the warp-per-row kernel handles the last axis only".into()),
    }
}

/// The CUDA attention kernels index q, k, v and the output as `[B, H, S, D]`; the graph
/// fusion keeps the head permutes on this device (it folds them only where the kernel
/// takes the tokens-first layout).
fn heads_first(q: &KernelQuery<'_>) -> Result<(), String> {
    if let (Some(x), Some(m)) = (q.inputs.first(), q.inputs.get(3))
        && m.dtype != runtime::DType::U8
        && m.dtype != x.dtype
    {
        return Err(format!("the CUDA attention kernels read the mask as {} like q, not {}", x.dtype, m.dtype));
    }
    match q.op {
        runtime::Op::Attention { layout: runtime::AttentionLayout::Bsnd, .. } => {
            Err("layout bsnd: the CUDA attention kernels take [B, H, S, D] (bnsd) operands only".into())
        }
        _ => Ok(()),
    }
}

/// The Rope kernel reads f32 cos and sin tables.
fn rope_f32_tables(q: &KernelQuery<'_>) -> Result<(), String> {
    match q.inputs.get(1).map(|m| m.dtype) {
        Some(runtime::DType::F32) => Ok(()),
        Some(d) => Err(format!("the CUDA Rope kernel reads f32 cos/sin tables, not {d}")),
        None => Err("Rope needs its tables".into()),
    }
}

fn fused_attention(q: &KernelQuery<'_>) -> Result<(), String> {
    heads_first(q)?;
    let (qs, ks) = (&q.inputs[0].shape, &q.inputs[1].shape);
    let need = (qs.dims()[3] + ks.dims()[2]) * 4;
    if need > ATTENTION_SMEM_LIMIT {
        return Err(format!("D + T needs {need} bytes of shared memory, above {ATTENTION_SMEM_LIMIT}"));
    }
    Ok(())
}

fn dims_fit_i32(q: &KernelQuery<'_>) -> Result<(), String> {
    // cuBLAS skips the product when alpha is 0, so 0 × NaN would give 0 where every other
    // tier gives NaN (docs/OPS.md): the NVRTC kernels run that case.
    if let runtime::Op::Gemm { alpha, .. } = q.op
        && *alpha == 0.0
    {
        return Err("cuBLAS skips the product when alpha is 0".into());
    }
    let big = q.inputs.iter().chain(q.outputs).flat_map(|m| m.shape.dims().iter()).any(|&d| d > i32::MAX as usize);
    if big { Err("a dimension exceeds cuBLAS's 32-bit sizes".into()) } else { ranks_ok(q) }
}

fn blas_f32(q: &KernelQuery<'_>) -> Result<(), String> {
    if q.inputs[0].dtype != DType::F32 {
        return Err(format!("this cuBLAS kernel takes f32, got {}", q.inputs[0].dtype));
    }
    dims_fit_i32(q)
}

fn blas_half(q: &KernelQuery<'_>) -> Result<(), String> {
    if !matches!(q.inputs[0].dtype, DType::F16 | DType::BF16) {
        return Err(format!("this cuBLAS kernel takes f16/bf16, got {}", q.inputs[0].dtype));
    }
    dims_fit_i32(q)
}

fn blas_tc(q: &KernelQuery<'_>) -> Result<(), String> {
    if !q.inputs[0].dtype.is_float() {
        return Err(format!("cuBLAS takes floats, got {}", q.inputs[0].dtype));
    }
    dims_fit_i32(q)
}

/// The tiled kernel puts the batch on the grid's z axis and rows on y.
fn tiled_matmul(q: &KernelQuery<'_>) -> Result<(), String> {
    let o = &q.outputs[0].shape;
    let r = o.rank();
    let batch: usize = o.dims()[..r.saturating_sub(2)].iter().product();
    let rows = if matches!(q.op, Op::Linear) { o.numel() / o.last().max(1) } else { o.dims()[r - 2] };
    if batch > 65535 || rows.div_ceil(16) > 65535 {
        return Err("batch or rows exceed the grid limits of the tiled kernel".into());
    }
    ranks_ok(q)
}

fn unit_of(kind: OpKind, imp: Impl) -> Unit {
    match imp {
        Impl::Blas => TENSOR_CORES,
        Impl::Memcpy => CUDA_CORES,
        Impl::Nvrtc(Tier::Reference) => match kind {
            OpKind::Permute
            | OpKind::Reshape
            | OpKind::Gather
            | OpKind::Cast
            | OpKind::Copy
            | OpKind::Where
            | OpKind::Concat
            | OpKind::Slice
            | OpKind::Expand => CUDA_CORES,
            _ => CUDA_CORES_FP64,
        },
        Impl::Nvrtc(_) => CUDA_CORES,
    }
}

/// The table for a backend with (or without) cuBLAS, with tf32 allowed or not. Built
/// once per configuration per process.
pub fn table(blas: bool, tf32: bool) -> &'static KernelTable<Impl> {
    static T: [OnceLock<KernelTable<Impl>>; 4] = [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    T[usize::from(blas) * 2 + usize::from(tf32)].get_or_init(|| build(blas, tf32))
}

fn build(blas: bool, tf32: bool) -> KernelTable<Impl> {
    use Tier::*;
    type S = runtime::kernel::SupportFn;
    let mut t = KernelTable::new();
    for kind in OpKind::ALL {
        let std3 = |t: &mut KernelTable<Impl>, fast: S| {
            let n = Impl::Nvrtc(HighPerformance);
            t.add(kind, HighPerformance, unit_of(kind, n), "vec4", fast, n);
            let g = Impl::Nvrtc(Generic);
            t.add(kind, Generic, unit_of(kind, g), "grid-stride", any, g);
            let r = Impl::Nvrtc(Reference);
            t.add(kind, Reference, unit_of(kind, r), "thread-per-element", any, r);
        };
        let r = Impl::Nvrtc(Reference);
        match kind {
            OpKind::MatMul | OpKind::Gemm | OpKind::Linear => {
                if blas {
                    if tf32 {
                        t.add(kind, HighPerformance, TENSOR_CORES, "cublas-tf32", blas_tc, Impl::Blas);
                    } else {
                        t.add(kind, HighPerformance, CUDA_CORES, "cublas-sgemm", blas_f32, Impl::Blas);
                        t.add(kind, HighPerformance, TENSOR_CORES, "cublas-tensor-op", blas_half, Impl::Blas);
                    }
                }
                let g = Impl::Nvrtc(Generic);
                t.add(kind, Generic, unit_of(kind, g), "tiled-16x16", tiled_matmul, g);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", any, r);
            }
            OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Pow => std3(&mut t, same_shape),
            OpKind::Equal => {
                let g = Impl::Nvrtc(Generic);
                t.add(kind, Generic, unit_of(kind, g), "grid-stride", any, g);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", any, r);
            }
            OpKind::Relu
            | OpKind::Gelu
            | OpKind::Tanh
            | OpKind::Erf
            | OpKind::Exp
            | OpKind::Sqrt
            | OpKind::Neg
            | OpKind::Sigmoid
            | OpKind::Scale
            | OpKind::BiasGelu => std3(&mut t, any),
            OpKind::Softmax | OpKind::LayerNorm | OpKind::AddLayerNorm => {
                let f = Impl::Nvrtc(HighPerformance);
                let fs: S = if kind == OpKind::Softmax { last_axis_softmax } else { any };
                t.add(kind, HighPerformance, unit_of(kind, f), "warp-per-row", fs, f);
                let g = Impl::Nvrtc(Generic);
                t.add(kind, Generic, unit_of(kind, g), "block-per-row", any, g);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-row", any, r);
            }
            OpKind::ReduceSum | OpKind::ReduceMean => {
                let g = Impl::Nvrtc(Generic);
                t.add(kind, Generic, unit_of(kind, g), "block-per-output", any, g);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-output", any, r);
            }
            OpKind::Attention => {
                let f = Impl::Nvrtc(HighPerformance);
                t.add(kind, HighPerformance, unit_of(kind, f), "fused-block-per-query", fused_attention, f);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", heads_first, r);
            }
            OpKind::Rope => {
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", rope_f32_tables, r);
            }
            OpKind::Copy => {
                t.add(kind, HighPerformance, CUDA_CORES, "memcpy", any, Impl::Memcpy);
                t.add(kind, Reference, unit_of(kind, r), "strided", any, r);
            }
            OpKind::Reshape => {
                t.add(kind, Reference, CUDA_CORES, "memcpy", any, Impl::Memcpy);
            }
            OpKind::Permute
            | OpKind::Gather
            | OpKind::Cast
            | OpKind::Where
            | OpKind::Concat
            | OpKind::Slice
            | OpKind::Expand => {
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", any, r);
            }
            OpKind::Silu => std3(&mut t, any),
            // No CUDA kernel: selection refuses it, and the graph fusion keeps Linear and BiasGelu.
            OpKind::LinearGelu => {}
            OpKind::RmsNorm | OpKind::AddRmsNorm => {
                let f = Impl::Nvrtc(HighPerformance);
                t.add(kind, HighPerformance, unit_of(kind, f), "warp-per-row", any, f);
                let g = Impl::Nvrtc(Generic);
                t.add(kind, Generic, unit_of(kind, g), "block-per-row", any, g);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-row", any, r);
            }
            OpKind::SwiGlu => {
                let f = Impl::Nvrtc(HighPerformance);
                t.add(kind, HighPerformance, unit_of(kind, f), "grid-stride-f32", any, f);
                let g = Impl::Nvrtc(Generic);
                t.add(kind, Generic, unit_of(kind, g), "grid-stride", any, g);
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", any, r);
            }
            OpKind::KvCacheWrite | OpKind::PagedAttention => {
                t.add(kind, Reference, unit_of(kind, r), "thread-per-element", any, r);
            }
        }
    }
    t
}
