//! Fused scaled-dot-product attention for the high-performance tier.
//!
//! `out = softmax(scale · Q Kᵀ + mask) · V` per (batch, head), computed in blocks of
//! [`ROWS`] query rows: the block's scores (`ROWS × t` f32, 256 KiB at t = 512) are
//! produced by one GEMM, masked, scaled and normalised in place while still in L2, and
//! consumed by the second GEMM. The full `s × t` score matrix is never materialised, and
//! the blocks of all heads are the units of parallel work.
//!
//! Where a head has several blocks and there are heads enough to keep the threads busy,
//! a head is the unit of work instead: its K and V are packed once (the GEMM's prepacked
//! B) for all its blocks, not once per block.
//!
//! In the tokens-first layout ([`AttentionLayout::Bsnd`]) a head's q, k and v rows are
//! read in place at the row stride `H·D`, and each block's output rows are copied to
//! theirs: no head split or merge permute around the op.
//!
//! Grouped-query: query head `h` reads kv head `h / (H / H_kv)` in place (no copy of the
//! shared heads). Causal: a block of query rows computes its scores only against the keys
//! its last row sees (`causal_keys`), so the key blocks past the diagonal are never
//! multiplied (causal prefill does about half the work); within the block each row's
//! softmax spans its own keys, the others weigh 0, and a row whose product then holds NaN
//! (`0 · inf` from a key it does not see) is formed again from its own keys.
//!
//! Extreme rows, as the other tiers compute them: a row whose scores hold a NaN or +inf
//! gives NaN; a row whose every score is -inf (all keys masked out) gives 0, whatever V
//! holds. A u8 mask adds -inf where it is 0 (so a masked NaN score stays NaN).

use super::blas;
use super::common::*;
use super::gemm_packed::{self, BMatrix, PackedBLayout, Sgemm, Strided};
use super::simd_math::softmax_in_place;
use rayon::prelude::*;
use runtime::{AttentionLayout, DType};

/// Query rows per block: large enough to amortise packing K and V, small enough that
/// the block's scores stay in L2.
pub const ROWS: usize = 128;

/// The additive mask, read through broadcast strides over `[b, h, s, t]` (the bf16
/// kernel, [`super::attention_bf16`], reads it too). Send and Sync (a shared slice).
pub(super) struct Mask<'a> {
    vals: &'a [f32],
    /// Element strides for the batch, head, query-row and key axes (0 where broadcast).
    strides: [usize; 4],
}

impl<'a> Mask<'a> {
    /// The values of the mask input `m` as f32: a u8 mask becomes 0 / -inf once (the mask
    /// is small: it broadcasts over heads), a float one is read as it is.
    pub(super) fn values<'b>(m: &'b In) -> Result<std::borrow::Cow<'b, [f32]>, KernelError> {
        let raw = load_f32(m)?;
        Ok(if m.dtype == DType::U8 {
            raw.iter().map(|&x| if x == 0.0 { f32::NEG_INFINITY } else { 0.0 }).collect::<Vec<_>>().into()
        } else {
            raw
        })
    }

    /// The mask `m` (its [`Mask::values`] in `vals`) over the scores `score_dims`.
    pub(super) fn new(vals: &'a [f32], m: &In, score_dims: [usize; 4]) -> Mask<'a> {
        let st = broadcast_strides(m.dims, &score_dims);
        Mask { vals, strides: [st[0], st[1], st[2], st[3]] }
    }

    /// The mask row for query `i` of head `hh` in batch `bi`, with its key stride.
    pub(super) fn row(&self, bi: usize, hh: usize, i: usize, t: usize) -> (&[f32], usize) {
        let [sb, sh, ss, st] = self.strides;
        let start = bi * sb + hh * sh + i * ss;
        let len = if st == 0 { 1 } else { (t - 1) * st + 1 };
        (&self.vals[start..start + len], st)
    }
}

/// The output of a tokens-first ([`AttentionLayout::Bsnd`]) attention, written row by row
/// from the jobs of the blocks.
#[derive(Clone, Copy)]
struct RowsOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the jobs write through the pointer only (`RowsOut::put`), each to the output
// rows of its own (batch, head, query rows) block, which no other job writes; the buffer
// outlives the jobs (they are joined before `attention` returns).
unsafe impl Send for RowsOut {}
// SAFETY: as for `Send`: sharing `&RowsOut` shares only the address.
unsafe impl Sync for RowsOut {}

impl RowsOut {
    /// Copies `row` to elements `at..at + row.len()`; panics outside the buffer.
    fn put(self, at: usize, row: &[f32]) {
        assert!(at + row.len() <= self.len, "attention output row outside the output");
        // SAFETY: in bounds (asserted); only this block's job writes these elements, and
        // no reference to them is live (see the `Send` impl).
        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), self.ptr.add(at), row.len()) }
    }
}

/// One head's K (as Kᵀ, `d × t`) and V (`t × dv`) packed for the fast GEMM.
struct HeadKv<'a> {
    kt: &'a [f32],
    v: &'a [f32],
    lk: PackedBLayout,
    lv: PackedBLayout,
}

/// A per-head job's buffers, kept across the heads one thread runs.
#[derive(Default)]
struct HeadScratch {
    kt: Vec<f32>,
    v: Vec<f32>,
    out: Vec<f32>,
    scores: Vec<f32>,
}

pub fn attention(
    ins: &[In],
    out: &mut Out,
    scale: Option<f32>,
    layout: AttentionLayout,
    causal: bool,
    ctx: &Ctx,
) -> KResult {
    let isa = ctx.features.isa;
    let (q, k, v) = (load_f32(&ins[0])?, load_f32(&ins[1])?, load_f32(&ins[2])?);
    let [bsz, h, s, d] = layout.bhsd(ins[0].dims);
    let ([_, hkv, t, _], [_, _, _, dv]) = (layout.bhsd(ins[1].dims), layout.bhsd(ins[2].dims));
    let group = h.checked_div(hkv).unwrap_or(1);
    // Element strides of (batch, head, row) in each operand: the operands of a head are
    // strided rows in the tokens-first layout.
    let (sq, sk) = (layout.strides([bsz, h, s, d]), layout.strides([bsz, hkv, t, d]));
    let (sv, so) = (layout.strides([bsz, hkv, t, dv]), layout.strides([bsz, h, s, dv]));
    let span = |rows: usize, stride: usize, width: usize| if rows == 0 { 0 } else { (rows - 1) * stride + width };
    // The element offset of row `i` of head `bh` (batch · heads + head) in an operand.
    let at = |st: [usize; 4], bh: usize, i: usize| (bh / h) * st[0] + (bh % h) * st[1] + i * st[2];
    // The same in k or v, whose head is the query head's kv head.
    let kv_at = |st: [usize; 4], bh: usize| (bh / h) * st[0] + (bh % h / group) * st[1];
    // The first `n` keys and values of query head `bh`'s kv head, at their row strides.
    let k_head = |bh: usize, n: usize| &k[kv_at(sk, bh)..][..span(n, sk[2], d)];
    let v_head = |bh: usize, n: usize| &v[kv_at(sv, bh)..][..span(n, sv[2], dv)];
    // The keys query row `i` sees.
    let seen = |i: usize| if causal { runtime::reference::causal_keys(i, s, t) } else { t };
    let scale = scale.unwrap_or(1.0 / (d as f32).sqrt());
    // The GEMM skips its product for alpha = 0; `0 * score` keeps a non-finite score NaN.
    let (alpha, post) = if scale == 0.0 { (1.0, Some(0.0f32)) } else { (scale, None) };
    let score_dims = [bsz, h, s, t];
    let mask_vals = ins.get(3).map(Mask::values).transpose()?;
    let mask = mask_vals.as_deref().zip(ins.get(3)).map(|(vals, m)| Mask::new(vals, m, score_dims));
    let mask = mask.as_ref();
    with_f32_out(out, |o| {
        if s * dv == 0 {
            return Ok(());
        }
        if t == 0 {
            o.fill(0.0);
            return Ok(());
        }
        let block = |bh: usize, blk: usize, ob: &mut [f32], scores: &mut Vec<f32>, kv: Option<&HeadKv>| -> KResult {
            let (bi, hh) = (bh / h, bh % h);
            let i0 = blk * ROWS;
            let rows = ob.len() / dv;
            // The keys the block's last row sees: the key blocks past them are skipped.
            let t = block_keys(i0, rows, s, t, causal);
            if t == 0 {
                ob.fill(0.0);
                return Ok(());
            }
            let qb = &q[at(sq, bh, i0)..][..span(rows, sq[2], d)];
            scores.resize(rows * t, 0.0);
            let kt = match kv {
                Some(kv) => BMatrix::Packed { layout: &kv.lk, data: kv.kt },
                None => BMatrix::Strided(Strided { data: k_head(bh, t), rs: 1, cs: sk[2] }),
            };
            let a = Strided { data: qb, rs: sq[2], cs: 1 };
            let c = &mut scores[..];
            blas::sgemm(Sgemm {
                isa,
                m: rows,
                n: t,
                k: d,
                alpha,
                a,
                b: kt,
                beta: 0.0,
                bias: None,
                c,
                ldc: t,
                threads: 1,
            })?;
            let mut masked = [false; ROWS];
            for (r, row) in scores.chunks_mut(t).enumerate() {
                if let Some(f) = post {
                    row.iter_mut().for_each(|x| *x *= f);
                }
                // Causal: the row's own keys; the others weigh 0.
                let lim = seen(i0 + r);
                row[lim..].fill(0.0);
                if lim == 0 {
                    masked[r] = true;
                    continue;
                }
                let m = mask.map(|m| m.row(bi, hh, i0 + r, lim));
                masked[r] = softmax_in_place(isa, &mut row[..lim], m);
            }
            let v = match kv {
                Some(kv) => BMatrix::Packed { layout: &kv.lv, data: kv.v },
                None => BMatrix::Strided(Strided { data: v_head(bh, t), rs: sv[2], cs: 1 }),
            };
            let a = Strided { data: scores, rs: t, cs: 1 };
            blas::sgemm(Sgemm {
                isa,
                m: rows,
                n: dv,
                k: t,
                alpha: 1.0,
                a,
                b: v,
                beta: 0.0,
                bias: None,
                c: ob,
                ldc: dv,
                threads: 1,
            })?;
            for (r, out_row) in ob.chunks_mut(dv).enumerate() {
                if masked[r] {
                    out_row.fill(0.0);
                } else if causal && out_row.iter().any(|x| x.is_nan()) {
                    // Formed again from the row's own keys only (a key it does not see
                    // weighs 0, and `0 · inf` is NaN).
                    let (p, vh) = (&scores[r * t..][..seen(i0 + r)], v_head(bh, t));
                    for (c, o) in out_row.iter_mut().enumerate() {
                        *o = p.iter().enumerate().map(|(j, &w)| w * vh[j * sv[2] + c]).sum();
                    }
                }
            }
            Ok(())
        };
        let blocks = s.div_ceil(ROWS);
        let heads = bsz * h;
        // Block `blk` of head `bh` computed into `buf`, its rows then copied to theirs in the
        // output (strided ones in the tokens-first layout).
        let dst = RowsOut { ptr: o.as_mut_ptr(), len: o.len() };
        let block_out = |bh: usize, blk: usize, buf: &mut Vec<f32>, scores: &mut Vec<f32>, kv: Option<&HeadKv>| {
            buf.resize(ROWS.min(s - blk * ROWS) * dv, 0.0);
            block(bh, blk, buf, scores, kv)?;
            for (r, row) in buf.chunks(dv).enumerate() {
                dst.put(at(so, bh, blk * ROWS + r), row);
            }
            Ok(())
        };
        if !causal && blocks > 1 && blas::use_packed() && (ctx.threads <= 1 || heads >= 2 * ctx.threads) {
            // Per head: K and V packed once, then its blocks.
            let (lk, lv) = (PackedBLayout::for_cpu(isa, d, t), PackedBLayout::for_cpu(isa, t, dv));
            let run = |bh: usize, sc: &mut HeadScratch| -> KResult {
                sc.kt.resize(lk.len(), 0.0);
                sc.v.resize(lv.len(), 0.0);
                gemm_packed::pack_b(&lk, k_head(bh, t), 1, sk[2], &mut sc.kt)?;
                gemm_packed::pack_b(&lv, v_head(bh, t), sv[2], 1, &mut sc.v)?;
                let kv = HeadKv { kt: &sc.kt, v: &sc.v, lk, lv };
                (0..blocks).try_for_each(|blk| block_out(bh, blk, &mut sc.out, &mut sc.scores, Some(&kv)))
            };
            return if ctx.threads > 1 {
                (0..heads).into_par_iter().try_for_each_init(HeadScratch::default, |sc, bh| run(bh, sc))
            } else {
                let mut sc = HeadScratch::default();
                (0..heads).try_for_each(|bh| run(bh, &mut sc))
            };
        }
        if layout == AttentionLayout::Bsnd {
            // A head's output rows are strided: each block computes into its own buffer
            // and copies the rows out.
            let run = |job: usize, bufs: &mut (Vec<f32>, Vec<f32>)| -> KResult {
                let (ob, scores) = bufs;
                block_out(job / blocks, job % blocks, ob, scores, None)
            };
            let jobs = heads * blocks;
            return if ctx.threads > 1 && jobs > 1 {
                (0..jobs).into_par_iter().try_for_each_init(Default::default, |bufs, job| run(job, bufs))
            } else {
                let mut bufs = Default::default();
                (0..jobs).try_for_each(|job| run(job, &mut bufs))
            };
        }
        if ctx.threads > 1 && (bsz * h > 1 || s > ROWS) {
            o.par_chunks_mut(s * dv).enumerate().try_for_each(|(bh, oh)| {
                oh.par_chunks_mut(ROWS * dv)
                    .enumerate()
                    .try_for_each_init(Vec::new, |scores, (blk, ob)| block(bh, blk, ob, scores, None))
            })
        } else {
            let mut scores = Vec::new();
            for (bh, oh) in o.chunks_mut(s * dv).enumerate() {
                for (blk, ob) in oh.chunks_mut(ROWS * dv).enumerate() {
                    block(bh, blk, ob, &mut scores, None)?;
                }
            }
            Ok(())
        }
    })
}

/// The keys a block of `rows` query rows from row `i0` multiplies: all `t`, or, causal,
/// those its last row sees (bottom-right aligned); the products past them are skipped.
pub fn block_keys(i0: usize, rows: usize, s: usize, t: usize, causal: bool) -> usize {
    if causal && rows > 0 { runtime::reference::causal_keys(i0 + rows - 1, s, t) } else { t }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The score products the blocks of one head compute.
    fn products(s: usize, t: usize, causal: bool) -> usize {
        (0..s.div_ceil(ROWS))
            .map(|blk| {
                let rows = ROWS.min(s - blk * ROWS);
                rows * block_keys(blk * ROWS, rows, s, t, causal)
            })
            .sum()
    }

    #[test]
    fn causal_blocks_skip_the_keys_past_their_last_row() {
        // Prefill of 2048 tokens: the blocks multiply about half the scores (the upper
        // triangle is skipped block by block, only the diagonal blocks compute some extra).
        let (full, causal) = (products(2048, 2048, false), products(2048, 2048, true));
        assert_eq!(full, 2048 * 2048);
        assert!(causal * 100 <= full * 54, "causal {causal} of {full}");
        // A block's keys: its last row's, so a past of 100 keys adds 100 to every block.
        assert_eq!(block_keys(0, ROWS, 300, 400, true), ROWS + 100);
        assert_eq!(block_keys(256, 44, 300, 400, true), 400);
        // More queries than keys: the first blocks see none.
        assert_eq!(block_keys(0, ROWS, 300, 100, true), 0);
        assert_eq!(block_keys(0, ROWS, 300, 100, false), 100);
    }
}

/// Times the f32 kernel at the encoder shapes against a product of the same FLOPs (run
/// with `cargo test --release -p backend-cpu --lib attention::timing -- --ignored
/// --nocapture`): prints medians of thread CPU time, asserts nothing.
#[cfg(test)]
mod timing {
    use super::*;
    use runtime::{Op, Shape};

    fn cpu_us() -> f64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out-pointer for the call.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
    }

    fn median_us(mut f: impl FnMut()) -> f64 {
        let mut t: Vec<f64> = (0..31)
            .map(|_| {
                let t0 = cpu_us();
                f();
                cpu_us() - t0
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[15]
    }

    #[test]
    #[ignore = "a measurement, not a check"]
    fn encoder_shapes() {
        let f = crate::features::get();
        for (name, h, s, d) in [
            ("bert-large s512", 16, 512, 64),
            ("bert-base s128", 12, 128, 64),
            ("minilm s128", 12, 128, 32),
            ("minilm s32", 12, 32, 32),
        ] {
            let dims = vec![1, s, h, d];
            let st = Shape::new(dims.clone()).contiguous_strides();
            let x: Vec<f32> = (0..s * h * d).map(|i| ((i * 31 % 97) as f32 - 48.0) / 40.0).collect();
            let mask = vec![0f32; s];
            let (md, ms) = (vec![1, 1, 1, s], vec![s, s, s, 1]);
            let op = Op::Attention { scale: None, layout: AttentionLayout::Bsnd, causal: false };
            let mut o = vec![0f32; x.len()];
            let ctx = Ctx { threads: 1, features: f, prepacked: None };
            let bytes: &[u8] = bytemuck::cast_slice(&x);
            let mut ins: Vec<In> = (0..3).map(|_| In { dtype: DType::F32, dims: &dims, strides: &st, bytes }).collect();
            ins.push(In { dtype: DType::F32, dims: &md, strides: &ms, bytes: bytemuck::cast_slice(&mask) });
            let att = median_us(|| {
                let mut outs = [Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut o) }];
                crate::kernels::fast::run(&op, &ins, &mut outs, &ctx).unwrap()
            });
            // The same FLOPs (4·h·s·s·d) as one product of s rows, k = d·h, n = 2·s.
            let (m, k, n) = (s, d * h, 2 * s);
            let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32).collect();
            let mut c = vec![0f32; m * n];
            let gemm = median_us(|| {
                blas::sgemm(Sgemm {
                    isa: f.isa,
                    m,
                    n,
                    k,
                    alpha: 1.0,
                    a: Strided { data: &a, rs: k, cs: 1 },
                    b: BMatrix::Strided(Strided { data: &b, rs: n, cs: 1 }),
                    beta: 0.0,
                    bias: None,
                    c: &mut c,
                    ldc: n,
                    threads: 1,
                })
                .unwrap()
            });
            let gf = |us: f64| (4 * h * s * s * d) as f64 / us / 1e3;
            println!(
                "TIMING {name}, 1 thread: attention {att:.0} us ({:.1} GFLOP/s), product of the same FLOPs {gemm:.0} us ({:.1})",
                gf(att),
                gf(gemm)
            );
        }
    }
}
