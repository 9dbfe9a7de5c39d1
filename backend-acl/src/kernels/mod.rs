//! The kernel table of the Ascend backend and its launches.
//!
//! Every op has two kernels:
//! * tier `fast` ([`aclnn`]): aclnn two-phase calls (phase 1 `aclnnXxxGetWorkspaceSize`,
//!   the workspace from the stream's buffer, phase 2 `aclnnXxx` on the stream), on the
//!   Cube (matrix products), Vector (element-wise, norms, softmax, reductions, casts,
//!   gathers) or Scalar (shape-only moves) unit, declining what the SoC cannot run;
//! * tier `reference` ([`host`]): the runtime's reference kernels on host copies of the
//!   operands (synchronous), the ground truth, and what runs whatever the SoC cannot.
//!
//! Attention has one more, ahead of its composition where the SoC and the toolkit have it:
//! `attention.aclnn-flash.cube`, one `aclnnFlashAttentionScore` (Atlas A2/A3, fp16, bf16
//! and f32, an additive mask of q's dtype or none); the composition takes what it
//! declines, and every Attention on the 910.

mod aclnn;
mod host;

pub(crate) use aclnn::{Mapping, Recorded, byte_copy, record, repeatable, run as run_aclnn};
pub(crate) use host::run as run_host;

use crate::device::Device;
use crate::error::AclBackendError;
use crate::probe::{CUBE, HOST, SCALAR, VECTOR, has_flash_attention, is_910_family};
use crate::{AclConfig, Fp32Matmul};
use acl_sys::Api;
use runtime::backend::allocations::overlapping_output;
use runtime::{DType, KernelInfo, KernelQuery, LaunchArgs, Op, OpKind, StreamId, Tier, Unit};

/// How a kernel runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Impl {
    /// aclnn calls queued on the stream.
    Aclnn,
    /// aclnn calls with FP32 operands that the 910's Cube computes in FP16
    /// (`cubeMathType = 1`); the first launch warns once.
    AclnnFp16Compute,
    /// The fused Atlas A2/A3 operator: Attention as one aclnnFlashAttentionScore, Rope as
    /// one aclnnRotaryPositionEmbedding.
    AclnnFlash,
    /// The host reference tier on copies.
    Host,
}

impl Impl {
    /// How the aclnn tier maps ops for this kernel on a SoC with `is_910`.
    pub(crate) fn mapping(self, is_910: bool) -> Mapping {
        Mapping { is_910, flash: self == Impl::AclnnFlash }
    }
}

/// The fused Attention kernel that is one aclnnFlashAttentionScore.
pub(crate) const FLASH_ATTENTION: &str = "attention.aclnn-flash.cube";

/// The fused Rope kernel that is one aclnnRotaryPositionEmbedding (Atlas A2/A3).
pub(crate) const FUSED_ROPE: &str = "rope.aclnn-fused.vector";

/// The KvCacheWrite kernel that is one aclnnScatterPaKvCache (Atlas A2/A3, fp16 and bf16;
/// where the toolkit lacks the operator it runs as the composition's aclnnScatterNdUpdate).
pub(crate) const FUSED_KV_WRITE: &str = "kvcachewrite.aclnn-fused.vector";

/// The PagedAttention kernel that is one aclnnIncreFlashAttentionV4 in its paged form
/// (Atlas A2/A3, fp16 and bf16; where the toolkit lacks the operator it runs as the
/// composition, `aclnn/paged.rs`).
pub(crate) const FUSED_PAGED_ATTENTION: &str = "pagedattention.aclnn-fused.cube";

/// The kernels, numbered by their position, and beside each how it runs.
///
/// The Ascend kernel names (`matmul.aclnn.cube`, `matmul.host.reference`, ...) predate
/// the `<op>.<tier>.<label>` scheme of `runtime::KernelTable::add` and are kept as they
/// are (`KernelTable::add_named`).
#[derive(Default)]
pub struct Table {
    kernels: runtime::KernelTable<Impl>,
    /// The SoC is of the Atlas training (910) family (FP32 matrix products compute in
    /// FP16 there).
    is_910: bool,
}

fn unit_of(k: OpKind) -> Unit {
    match k {
        OpKind::MatMul | OpKind::Gemm | OpKind::Linear | OpKind::Attention => CUBE,
        OpKind::Permute | OpKind::Reshape | OpKind::Copy => SCALAR,
        OpKind::PagedAttention => CUBE,
        _ => VECTOR,
    }
}

macro_rules! names {
    ($($k:ident => $f:literal, $h:literal;)*) => {
        /// (aclnn kernel, host kernel) names of an op.
        fn names(k: OpKind) -> (&'static str, &'static str) {
            match k { $(OpKind::$k => ($f, $h),)* }
        }
    };
}

names! {
    MatMul => "matmul.aclnn.cube", "matmul.host.reference";
    Gemm => "gemm.aclnn-addmm.cube", "gemm.host.reference";
    Linear => "linear.aclnn-addmm.cube", "linear.host.reference";
    Add => "add.aclnn.vector", "add.host.reference";
    Sub => "sub.aclnn.vector", "sub.host.reference";
    Mul => "mul.aclnn.vector", "mul.host.reference";
    Div => "div.aclnn.vector", "div.host.reference";
    Pow => "pow.aclnn-powtensortensor.vector", "pow.host.reference";
    Equal => "equal.aclnn-eqtensor.vector", "equal.host.reference";
    Where => "where.aclnn-swhere.vector", "where.host.reference";
    Concat => "concat.aclnn-cat.vector", "concat.host.reference";
    Slice => "slice.aclnn-slice.vector", "slice.host.reference";
    Expand => "expand.aclnn-expand.vector", "expand.host.reference";
    Relu => "relu.aclnn.vector", "relu.host.reference";
    Gelu => "gelu.aclnn.vector", "gelu.host.reference";
    Tanh => "tanh.aclnn.vector", "tanh.host.reference";
    Erf => "erf.aclnn.vector", "erf.host.reference";
    Exp => "exp.aclnn.vector", "exp.host.reference";
    Sqrt => "sqrt.aclnn.vector", "sqrt.host.reference";
    Neg => "neg.aclnn.vector", "neg.host.reference";
    Sigmoid => "sigmoid.aclnn.vector", "sigmoid.host.reference";
    Softmax => "softmax.aclnn.vector", "softmax.host.reference";
    LayerNorm => "layernorm.aclnn.vector", "layernorm.host.reference";
    Permute => "permute.aclnn.scalar", "permute.host.reference";
    Reshape => "reshape.aclnn-copy.scalar", "reshape.host.reference";
    Gather => "gather.aclnn-indexselect.vector", "gather.host.reference";
    Cast => "cast.aclnn.vector", "cast.host.reference";
    ReduceSum => "reducesum.aclnn.vector", "reducesum.host.reference";
    ReduceMean => "reducemean.aclnn.vector", "reducemean.host.reference";
    Scale => "scale.aclnn-muls.vector", "scale.host.reference";
    Copy => "copy.aclnn-inplacecopy.scalar", "copy.host.reference";
    Attention => "attention.aclnn-composed.cube", "attention.host.reference";
    BiasGelu => "biasgelu.aclnn-add-gelu.vector", "biasgelu.host.reference";
    AddLayerNorm => "addlayernorm.aclnn-add-layernorm.vector", "addlayernorm.host.reference";
    Silu => "silu.aclnn.vector", "silu.host.reference";
    RmsNorm => "rmsnorm.aclnn.vector", "rmsnorm.host.reference";
    AddRmsNorm => "addrmsnorm.aclnn.vector", "addrmsnorm.host.reference";
    SwiGlu => "swiglu.aclnn.vector", "swiglu.host.reference";
    Rope => "rope.aclnn.vector", "rope.host.reference";
    KvCacheWrite => "kvcachewrite.aclnn.vector", "kvcachewrite.host.reference";
    PagedAttention => "pagedattention.aclnn.cube", "pagedattention.host.reference";
    LinearGelu => "lineargelu.aclnn.cube", "lineargelu.host.reference";
}

/// The name of the kernel that runs op `k`'s FP32 products on the 910's Cube in FP16, for
/// the ops that have a matrix product.
fn fp16_compute_name(k: OpKind) -> Option<&'static str> {
    Some(match k {
        OpKind::MatMul => "matmul.aclnn-fp16compute.cube",
        OpKind::Gemm => "gemm.aclnn-addmm-fp16compute.cube",
        OpKind::Linear => "linear.aclnn-addmm-fp16compute.cube",
        OpKind::Attention => "attention.aclnn-composed-fp16compute.cube",
        OpKind::PagedAttention => "pagedattention.aclnn-fp16compute.cube",
        _ => return None,
    })
}

struct Policy {
    bf16: bool,
    is_910: bool,
    f32_cube: bool,
}

fn check(q: &KernelQuery<'_>, p: Policy) -> Result<(), String> {
    let all = q.inputs.iter().chain(q.outputs);
    if !p.bf16 && all.clone().any(|m| m.dtype == DType::BF16) {
        return Err("BF16 is not supported on Atlas training (910) SoCs".into());
    }
    if all.clone().any(|m| m.shape.rank() > 8) {
        return Err("aclnn takes at most 8 dimensions".into());
    }
    let out_empty = q.outputs.iter().all(|o| o.shape.numel() == 0);
    if !out_empty && q.inputs.iter().any(|i| i.shape.numel() == 0) {
        return Err("empty operands with a non-empty result are left to the host tier".into());
    }
    let x = &q.inputs[0];
    match q.op {
        // An fp16 weight makes the product fp16 by choice (precision f16): allowed.
        Op::Linear if x.dtype == DType::F32 && q.inputs[1].dtype == DType::F16 => Ok(()),
        Op::MatMul { .. } | Op::Gemm { .. } | Op::Linear | Op::Attention { .. }
            if x.dtype == DType::F32 && p.is_910 && !p.f32_cube =>
        {
            Err("FP32 on the 910's Cube computes in FP16 (cubeMathType 1): the fp16compute kernel takes it, \
                 unless NPURT_ACL_FP32_MATMUL=exact"
                .into())
        }
        Op::PagedAttention { .. } if x.dtype == DType::F32 && p.is_910 && !p.f32_cube => {
            Err("FP32 on the 910's Cube computes in FP16 (cubeMathType 1): the fp16compute kernel takes it, \
                 unless NPURT_ACL_FP32_MATMUL=exact"
                .into())
        }
        Op::Attention { layout: runtime::AttentionLayout::Bsnd, .. } => {
            Err("layout bsnd: the aclnn compositions take [B, N, S, D] operands; the graph fusion keeps the head \
                 permutes on this device"
                .into())
        }
        Op::Attention { .. } if q.inputs.get(3).is_some_and(|m| m.dtype != DType::U8 && m.dtype != x.dtype) => {
            Err("an f32 mask beside half q, k and v has no aclnn composition: the host tier runs it".into())
        }
        Op::Attention { .. } if q.inputs.get(3).is_some_and(|m| m.dtype == DType::U8) => {
            Err("u8 (keep/drop) masks have no aclnn composition; an additive float mask has".into())
        }
        Op::Div if x.dtype.is_int() => Err("aclnnDiv is true division; integer division is not mapped".into()),
        Op::Exp if p.is_910 => Err("aclnnExp is not supported on Atlas training (910) per the CANN docs".into()),
        Op::Cast { to: DType::U8 } if x.dtype != DType::U8 => {
            Err("saturating casts to u8 are not documented for aclnnCast".into())
        }
        Op::ReduceSum { .. } | Op::ReduceMean { .. } if x.shape.rank() == 0 => Err("0-D reductions".into()),
        Op::Slice { steps, .. } if steps.iter().any(|&s| s < 0) => {
            Err("aclnnSlice walks forwards only: a negative step is left to the host tier".into())
        }
        Op::Slice { .. } if x.shape.rank() == 0 || out_empty => {
            Err("0-D operands and empty windows are left to the host tier".into())
        }
        _ => Ok(()),
    }
}

fn sup_910_exact(q: &KernelQuery<'_>) -> Result<(), String> {
    check(q, Policy { bf16: false, is_910: true, f32_cube: false })
}
/// The 910's Cube with FP32 operands computed in FP16: only the FP32 products the exact
/// kernel declines.
fn sup_910_fp16compute(q: &KernelQuery<'_>) -> Result<(), String> {
    if q.inputs[0].dtype != DType::F32 || sup_910_exact(q).is_ok() {
        return Err("only FP32 matrix products, which this kernel computes in FP16".into());
    }
    check(q, Policy { bf16: false, is_910: true, f32_cube: true })
}
fn sup_a2(q: &KernelQuery<'_>) -> Result<(), String> {
    check(q, Policy { bf16: true, is_910: false, f32_cube: true })
}
/// aclnnFlashAttentionScore (layout BNSD): fp16, bf16 or f32 (the dtypes its docs list,
/// old and new), no more than 256 query heads, a head dim of at most 512 (the bound of the
/// older docs; the current op_api allows 768) and not below v's, and an additive mask of
/// q's dtype or none (a u8 keep/drop mask is not the operator's boolean drop mask: the
/// host tier takes those).
fn sup_flash(q: &KernelQuery<'_>) -> Result<(), String> {
    sup_a2(q)?;
    if let Op::Attention { causal: true, .. } = q.op
        && !matches!(q.inputs[0].dtype, DType::F16 | DType::BF16)
    {
        return Err("causal f32: the composition takes it (the fused causal form serves fp16 and bf16)".into());
    }
    let (x, v) = (&q.inputs[0], &q.inputs[2]);
    if !matches!(x.dtype, DType::F16 | DType::BF16 | DType::F32) {
        return Err(format!("aclnnFlashAttentionScore takes fp16, bf16 and f32, not {}", x.dtype));
    }
    let (h, d, dv) = (x.shape.0[1], x.shape.0[3], v.shape.0[3]);
    if h > 256 || d > 512 || dv > d {
        return Err(format!("aclnnFlashAttentionScore takes at most 256 heads and D <= 512, >= Dv: q {x}, v {v}"));
    }
    match q.inputs.get(3) {
        Some(m) if m.dtype != x.dtype => Err(format!("a {} mask is not an additive mask of {}", m.dtype, x.dtype)),
        _ => Ok(()),
    }
}
/// aclnnRotaryPositionEmbedding as its docs bound it on Atlas A2/A3: D below 896; half
/// mode with B and N below 1000, in bsnd, or in bnsd where `(D/2)` fills whole 32-byte
/// blocks and `B·N <= 8·S`; interleave mode with one batch (its tables are `11SD` /
/// `1S1D` only: positions differ per batch) and `B·N < 1000`.
fn sup_rope_fused(q: &KernelQuery<'_>) -> Result<(), String> {
    sup_a2(q)?;
    let Op::Rope { interleaved, layout } = q.op else { return Err("not a Rope".into()) };
    let x = &q.inputs[0];
    let [b, n, s, d] = layout.bhsd(x.shape.dims());
    if d >= 896 {
        return Err(format!("aclnnRotaryPositionEmbedding takes D below 896, got {x}"));
    }
    if *interleaved {
        if b != 1 || b * n >= 1000 {
            return Err(format!("interleave mode takes one batch (tables 11SD / 1S1D) and B·N < 1000: x {x}"));
        }
        return Ok(());
    }
    if b >= 1000 || n >= 1000 {
        return Err(format!("half mode takes B and N below 1000: x {x}"));
    }
    let per_block = 32 / x.dtype.size();
    if *layout == runtime::AttentionLayout::Bnsd && ((d / 2) % per_block != 0 || b * n > 8 * s) {
        return Err(format!("half mode in bnsd needs D/2 a multiple of {per_block} and B·N <= 8·S: x {x}"));
    }
    Ok(())
}
/// aclnnScatterPaKvCache: FLOAT16 or BFLOAT16 caches (its docs exclude FLOAT on A2/A3).
fn sup_kv_fused(q: &KernelQuery<'_>) -> Result<(), String> {
    sup_a2(q)?;
    match q.inputs[0].dtype {
        DType::F16 | DType::BF16 => Ok(()),
        d => Err(format!("aclnnScatterPaKvCache takes fp16 and bf16 caches, not {d}: two aclnnScatterNdUpdate do")),
    }
}
/// aclnnIncreFlashAttentionV4, paged form, as its docs bound it on Atlas A2/A3: q and the
/// caches fp16 or bf16 (f32 takes the composition), a block size a multiple of 16 up to
/// 512, B <= 65536, at most 256 query heads, D <= 512; and, since every sequence is given
/// the table's full reach `MB·BS` as its length (the real lengths go in as the mask), a
/// cache of at least `B·MB` blocks (the docs: blocknum not below the blocks the lengths
/// need, summed over the batch).
fn sup_paged_fused(q: &KernelQuery<'_>) -> Result<(), String> {
    sup_a2(q)?;
    let (x, kc, bt) = (&q.inputs[0], &q.inputs[1], &q.inputs[3]);
    if !matches!(x.dtype, DType::F16 | DType::BF16) || kc.dtype != x.dtype || q.inputs[2].dtype != x.dtype {
        return Err(format!("aclnnIncreFlashAttentionV4 takes fp16 and bf16, not q {x}, caches {kc}: the composition"));
    }
    let ([b, h, d], [nb, bs, ..], [_, mb]) = (
        <[usize; 3]>::try_from(x.shape.dims()).map_err(|_| format!("q {x} is not [B, H, D]"))?,
        <[usize; 4]>::try_from(kc.shape.dims()).map_err(|_| format!("cache {kc} is not [NB, BS, KVH, D]"))?,
        <[usize; 2]>::try_from(bt.shape.dims()).map_err(|_| format!("block_tables {bt} is not [B, MB]"))?,
    );
    if bs % 16 != 0 || bs > 512 || b > 65536 || h > 256 || d > 512 {
        return Err(format!(
            "aclnnIncreFlashAttentionV4 takes a block size multiple of 16 up to 512, B <= 65536, H <= 256, D <= 512: \
             q {x}, cache {kc}"
        ));
    }
    if b.checked_mul(mb).is_none_or(|need| nb < need) {
        return Err(format!("a cache of {nb} blocks below B·MB = {b}·{mb}: the composition"));
    }
    Ok(())
}
fn sup_host(_: &KernelQuery<'_>) -> Result<(), String> {
    Ok(())
}

impl Table {
    /// The table for SoC `soc` (device 0's) under `cfg`; `flash_symbols`: the toolkit
    /// exports both aclnnFlashAttentionScore symbols (optional: only newer operator
    /// libraries have them, `aclnnop/aclnn_flash_attention_score.h`); `rope_symbols`: it
    /// exports both aclnnRotaryPositionEmbedding symbols (optional as well).
    pub fn build(soc: &str, cfg: &AclConfig, flash_symbols: bool, rope_symbols: bool) -> Table {
        let is_910 = is_910_family(soc);
        let fast: runtime::kernel::SupportFn = if is_910 { sup_910_exact } else { sup_a2 };
        let fp16_compute = is_910 && cfg.fp32_matmul == Fp32Matmul::Fp16;
        let flash = flash_symbols && has_flash_attention(soc);
        let fused_rope = rope_symbols && has_flash_attention(soc);
        let mut t = Table { is_910, ..Table::default() };
        for k in OpKind::ALL {
            if k == OpKind::LinearGelu {
                // No kernel on either tier: the graph fusion keeps Linear and BiasGelu here.
                continue;
            }
            let (fname, hname) = names(k);
            if k == OpKind::KvCacheWrite && has_flash_attention(soc) {
                // aclnnScatterPaKvCache (fp16, bf16), ahead of the two aclnnScatterNdUpdate.
                t.kernels.add_named(FUSED_KV_WRITE, k, Tier::HighPerformance, VECTOR, sup_kv_fused, Impl::AclnnFlash);
            }
            if k == OpKind::PagedAttention && has_flash_attention(soc) {
                // aclnnIncreFlashAttentionV4 (fp16, bf16), ahead of the composition.
                t.kernels.add_named(
                    FUSED_PAGED_ATTENTION,
                    k,
                    Tier::HighPerformance,
                    CUBE,
                    sup_paged_fused,
                    Impl::AclnnFlash,
                );
            }
            if k == OpKind::Attention && flash {
                // Earlier entries of a tier are preferred: ahead of the composition.
                t.kernels.add_named(FLASH_ATTENTION, k, Tier::HighPerformance, CUBE, sup_flash, Impl::AclnnFlash);
            }
            if k == OpKind::Rope && fused_rope {
                t.kernels.add_named(FUSED_ROPE, k, Tier::HighPerformance, VECTOR, sup_rope_fused, Impl::AclnnFlash);
            }
            t.kernels.add_named(fname, k, Tier::HighPerformance, unit_of(k), fast, Impl::Aclnn);
            if let Some(n) = fp16_compute.then(|| fp16_compute_name(k)).flatten() {
                t.kernels.add_named(n, k, Tier::HighPerformance, CUBE, sup_910_fp16compute, Impl::AclnnFp16Compute);
            }
            t.kernels.add_named(hname, k, Tier::Reference, HOST, sup_host, Impl::Host);
        }
        t
    }

    /// The kernels, in table order (`infos()[i].id == i`): what `Backend::kernels` returns.
    pub fn infos(&self) -> &[KernelInfo] {
        self.kernels.infos()
    }

    /// The SoC computes FP32 matrix products in FP16 (cubeMathType 1).
    pub fn is_910(&self) -> bool {
        self.is_910
    }

    /// `kernel`'s entry and implementation, when it is this table's (same id, name, op).
    pub fn resolve(&self, kernel: &KernelInfo) -> Option<(&KernelInfo, Impl)> {
        self.kernels.resolve(kernel).map(|(k, i)| (k, *i))
    }
}

/// Runs `kernel` on device `device` of `devs` (of backend `instance`): checks the
/// operands (M1: each inside a live allocation, aclnn bases 32-byte aligned; M3:
/// outputs overlap nothing), binds the thread, then queues the aclnn calls on `stream`
/// or runs the host tier.
pub(crate) fn launch(
    api: &Api,
    instance: u64,
    devs: &[Device],
    device: usize,
    table: &Table,
    kernel: &KernelInfo,
    args: &LaunchArgs,
    stream: StreamId,
) -> runtime::Result<()> {
    let (info, imp) = table
        .resolve(kernel)
        .ok_or_else(|| AclBackendError::BadRequest(format!("kernel {} is not an Ascend kernel", kernel.name)))?;
    let op = args.op.name();
    let ranges = args.validate(info)?;
    let dev = devs.get(device).ok_or(AclBackendError::NoDevice(device))?;
    for (a, r) in args.inputs.iter().chain(&args.outputs).zip(&ranges) {
        if r.1 > 0 {
            dev.allocs.locate(r.0, r.1).map_err(AclBackendError::from)?;
            if imp != Impl::Host && a.ptr.0 % 32 != 0 {
                return Err(AclBackendError::Unaligned { what: "operand base", addr: a.ptr.0, align: 32 }.into());
            }
        }
    }
    if let Some(i) = overlapping_output(&ranges, args.inputs.len(), |_| false) {
        return Err(AclBackendError::BadRequest(format!("{op}: output {i} overlaps another operand")).into());
    }
    dev.bind(api, instance)?;
    let rec = dev.stream(stream)?;
    if args.outputs.iter().all(|o| o.layout.numel() == 0) {
        return Ok(());
    }
    let r = match imp {
        Impl::Host => host::run(api, &rec, args),
        Impl::Aclnn | Impl::AclnnFp16Compute | Impl::AclnnFlash => {
            if imp == Impl::AclnnFp16Compute {
                warn_fp16_compute(op);
            }
            let r = aclnn::run(api, &rec, imp.mapping(table.is_910), args);
            if r.is_ok() {
                rec.queued(op, args.seq);
            }
            r
        }
    };
    Ok(r.map_err(|e| e.in_op(op))?)
}

/// Says once per process that FP32 matrix products compute in FP16 on this SoC.
pub(crate) fn warn_fp16_compute(op: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        log::warn!(
            "{op}: FP32 matrix products run on the 910's Cube in FP16 (cubeMathType 1, kernels named \
             *-fp16compute); NPURT_ACL_FP32_MATMUL=exact keeps them exact on the host"
        );
    });
}
