//! Fused scaled-dot-product attention for the high-performance tier.
//!
//! `out = softmax(scale · Q Kᵀ + mask) · V` per (batch, head), computed in blocks of
//! [`ROWS`] query rows: the block's scores (`ROWS × t` f32, 256 KiB at t = 512) are
//! produced by one GEMM, masked, scaled and normalised in place while still in L2, and
//! consumed by the second GEMM. The full `s × t` score matrix is never materialised, and
//! the blocks of all heads are the units of parallel work.
//!
//! Extreme rows, as the other tiers compute them: a row whose scores hold a NaN or +inf
//! gives NaN; a row whose every score is -inf (all keys masked out) gives 0, whatever V
//! holds. A u8 mask adds -inf where it is 0 (so a masked NaN score stays NaN).

use super::blas;
use super::common::*;
use super::simd_math::softmax_in_place;
use rayon::prelude::*;
use runtime::DType;

/// Query rows per block: large enough to amortise packing K and V, small enough that
/// the block's scores stay in L2.
pub const ROWS: usize = 128;

/// The additive mask, read through broadcast strides over `[b, h, s, t]`.
struct Mask<'a> {
    vals: &'a [f32],
    /// Element strides for the batch, head, query-row and key axes (0 where broadcast).
    strides: [usize; 4],
}

impl Mask<'_> {
    /// The mask row for query `i` of head `hh` in batch `bi`, with its key stride.
    fn row(&self, bi: usize, hh: usize, i: usize, t: usize) -> (&[f32], usize) {
        let [sb, sh, ss, st] = self.strides;
        let start = bi * sb + hh * sh + i * ss;
        let len = if st == 0 { 1 } else { (t - 1) * st + 1 };
        (&self.vals[start..start + len], st)
    }
}

pub fn attention(ins: &[In], out: &mut Out, scale: Option<f32>, ctx: &Ctx) -> KResult {
    let isa = ctx.features.isa;
    let (q, k, v) = (load_f32(&ins[0])?, load_f32(&ins[1])?, load_f32(&ins[2])?);
    let (bsz, h, s, d) = (ins[0].dims[0], ins[0].dims[1], ins[0].dims[2], ins[0].dims[3]);
    let (t, dv) = (ins[1].dims[2], ins[2].dims[3]);
    let scale = scale.unwrap_or(1.0 / (d as f32).sqrt());
    // The GEMM skips its product for alpha = 0; `0 * score` keeps a non-finite score NaN.
    let (alpha, post) = if scale == 0.0 { (1.0, Some(0.0f32)) } else { (scale, None) };
    let score_dims = [bsz, h, s, t];
    // u8 masks become 0 / -inf once (the mask is small: it broadcasts over heads).
    let mask_vals: Option<std::borrow::Cow<'_, [f32]>> = match ins.get(3) {
        Some(m) => {
            let raw = load_f32(m)?;
            Some(if m.dtype == DType::U8 {
                raw.iter().map(|&x| if x == 0.0 { f32::NEG_INFINITY } else { 0.0 }).collect::<Vec<_>>().into()
            } else {
                raw
            })
        }
        None => None,
    };
    let mask = match (&mask_vals, ins.get(3)) {
        (Some(vals), Some(m)) => {
            let st = broadcast_strides(m.dims, &score_dims);
            Some(Mask { vals, strides: [st[0], st[1], st[2], st[3]] })
        }
        _ => None,
    };
    let mask = mask.as_ref();
    with_f32_out(out, |o| {
        if s * dv == 0 {
            return Ok(());
        }
        if t == 0 {
            o.fill(0.0);
            return Ok(());
        }
        let block = |bh: usize, blk: usize, ob: &mut [f32], scores: &mut Vec<f32>| -> KResult {
            let (bi, hh) = (bh / h, bh % h);
            let i0 = blk * ROWS;
            let rows = ob.len() / dv;
            let qb = &q[(bh * s + i0) * d..(bh * s + i0 + rows) * d];
            let kh = &k[bh * t * d..(bh + 1) * t * d];
            let vh = &v[bh * t * dv..(bh + 1) * t * dv];
            scores.resize(rows * t, 0.0);
            blas::sgemm(isa, rows, t, d, alpha, qb, d, 1, kh, 1, d, false, scores, t, 1)?;
            let mut masked = [false; ROWS];
            for (r, row) in scores.chunks_mut(t).enumerate() {
                if let Some(f) = post {
                    row.iter_mut().for_each(|x| *x *= f);
                }
                let m = mask.map(|m| m.row(bi, hh, i0 + r, t));
                masked[r] = softmax_in_place(isa, row, m);
            }
            blas::sgemm(isa, rows, dv, t, 1.0, scores, t, 1, vh, dv, 1, false, ob, dv, 1)?;
            for (r, out_row) in ob.chunks_mut(dv).enumerate() {
                if masked[r] {
                    out_row.fill(0.0);
                }
            }
            Ok(())
        };
        if ctx.threads > 1 && (bsz * h > 1 || s > ROWS) {
            o.par_chunks_mut(s * dv).enumerate().try_for_each(|(bh, oh)| {
                oh.par_chunks_mut(ROWS * dv)
                    .enumerate()
                    .try_for_each_init(Vec::new, |scores, (blk, ob)| block(bh, blk, ob, scores))
            })
        } else {
            let mut scores = Vec::new();
            for (bh, oh) in o.chunks_mut(s * dv).enumerate() {
                for (blk, ob) in oh.chunks_mut(ROWS * dv).enumerate() {
                    block(bh, blk, ob, &mut scores)?;
                }
            }
            Ok(())
        }
    })
}
