//! The computation and the modelled cost of aclnnIncreFlashAttentionV4's paged form (its
//! entry points and checks: [`crate::aclnn::incre_flash`]), apart from the aclnn layer so
//! that the kernels and the clock need nothing of it.

use crate::model::{Cost, LAUNCH_PS, Soc, Unit};
use acl_sys::soc::secs_to_ps;
use runtime::reference::operands::{load_f64, load_i64, store_f64};
use runtime::reference::{In, Out};
use runtime::{DType, KernelError, KernelResult, TensorMeta};

const OP: &str = "aclnnIncreFlashAttentionV4";

/// What the paged decode attention computes (see [`crate::aclnn::incre_flash`]); plain
/// data, Send and Sync. Inputs
/// `[query BSH, key cache, value cache, blocktable]` and, with a mask, `attenMask`
/// (`[B, S]` of bytes); output attentionOut (query's shape).
#[derive(Clone, Debug, PartialEq)]
pub struct IncreFlash {
    pub scale: f64,
    pub heads: usize,
    pub kv_heads: usize,
    pub block_size: usize,
    /// actualSeqLengths, one per sequence (copied at phase 1).
    pub lens: Vec<usize>,
}

impl IncreFlash {
    /// Output shapes (phase 1 checked the operands): attentionOut of query's shape.
    pub(crate) fn infer(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>, String> {
        match inputs.first() {
            Some(q) if (4..=5).contains(&inputs.len()) => Ok(vec![q.clone()]),
            _ => Err(format!("{} operands for {OP}", inputs.len())),
        }
    }

    /// Computes the attention (see the module documentation).
    pub(crate) fn run(&self, ins: &[In], outs: &mut [Out]) -> KernelResult {
        let ([q, kc, vc, bt, mask @ ..], [o]) = (ins, outs) else {
            return Err(KernelError::Internal(format!("{OP}: {} inputs", ins.len())));
        };
        let (b, heads, kvh, bs) = (q.dims[0], self.heads, self.kv_heads.max(1), self.block_size.max(1));
        let d = q.dims[2] / heads.max(1);
        let (nb, mb) = (kc.dims[0], bt.dims[1]);
        let group = heads / kvh;
        let (qv, kv, vv, table) = (load_f64(q)?, load_f64(kc)?, load_f64(vc)?, load_i64(bt)?);
        let masked: Option<(Vec<u8>, usize)> =
            mask.first().map(|m| (m.bytes[..m.numel()].to_vec(), *m.dims.last().unwrap_or(&0)));
        let mut out = vec![0.0; b * heads * d];
        for bi in 0..b {
            let len = self.lens.get(bi).copied().unwrap_or(0).min(mb * bs);
            // The cache row of each position, the table read as the kernel reads it.
            let mut rows = Vec::with_capacity(len);
            for p in 0..len {
                let id = table[bi * mb + p / bs];
                let blk = usize::try_from(id).ok().filter(|&x| x < nb);
                let blk = blk.ok_or(KernelError::IndexOutOfRange { index: id, len: nb })?;
                let drop = masked.as_ref().is_some_and(|(m, s)| m[bi * s + p] != 0);
                rows.push((blk * bs + p % bs, drop));
            }
            for hh in 0..heads {
                let (qr, kvo) = (&qv[(bi * heads + hh) * d..][..d], (hh / group.max(1)) * d);
                let scores: Vec<f64> = rows
                    .iter()
                    .map(|&(r, drop)| {
                        let kr = &kv[r * kvh * d + kvo..][..d];
                        if drop {
                            f64::NEG_INFINITY
                        } else {
                            self.scale * qr.iter().zip(kr).map(|(x, y)| x * y).sum::<f64>()
                        }
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                for c in 0..d {
                    let acc: f64 = rows.iter().zip(&w).map(|(&(r, _), p)| p * vv[r * kvh * d + kvo + c]).sum();
                    out[(bi * heads + hh) * d + c] = acc / sum;
                }
            }
        }
        store_f64(o, &out)
    }
}

/// The modelled duration of one launch: the two products (`2·B·N·T·D` multiply-adds in all,
/// `T` the positions the lengths cover) on the Cube at its rate for the dtype, the softmax
/// (about 5 operations a score: scale, max, subtract, exp, sum) on the Vector units, one
/// after the other, against the bytes moved over HBM (query, output, the table, the mask
/// and the cache rows of every covered position, keys and values); plus the launch.
pub(crate) fn cost(soc: &Soc, k: &IncreFlash, ins: &[TensorMeta], outs: &[TensorMeta]) -> Cost {
    let Some(q) = ins.first() else {
        return Cost { ps: LAUNCH_PS, unit: Unit::Cube, bound_ps: 0 };
    };
    let dt = q.dtype;
    let d = q.shape.dims().get(2).copied().unwrap_or(0) / k.heads.max(1);
    let covered: usize = k.lens.iter().sum();
    let products = 2.0 * 2.0 * (covered * k.heads * d) as f64;
    let softmax = 5.0 * (covered * k.heads) as f64;
    let rows = 2 * covered * k.kv_heads * d * dt.size();
    let small: usize = ins.iter().enumerate().filter(|(i, _)| !matches!(i, 1 | 2)).map(|(_, m)| m.bytes()).sum();
    let bytes = (rows + small + outs.iter().map(TensorMeta::bytes).sum::<usize>()) as f64;
    let compute = products / soc.cube_flops(dt) + softmax / soc.vector_flops(dt);
    let secs = compute.max(bytes / soc.hbm);
    let bound = (products / soc.cube_flops(DType::F16)).max(bytes / soc.hbm);
    Cost { ps: secs_to_ps(secs).saturating_add(LAUNCH_PS), unit: Unit::Cube, bound_ps: secs_to_ps(bound) }
}
