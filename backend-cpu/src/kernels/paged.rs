//! The block-paged KV cache on the CPU: KvCacheWrite (whole rows moved into the caches
//! in place, shared with every host tier: [`runtime::reference::paged`]) and the decode
//! step's PagedAttention.
//!
//! PagedAttention reads each sequence's cache blocks where they lie (no gather of the
//! context into a contiguous copy). One job per (sequence, kv head): the query heads that
//! share the kv head (grouped-query) are scored together, so each K and V row is read
//! once for all of them. The scores of a job (heads of the group × context length) are
//! normalised as Attention's are (`simd_math::softmax_in_place`): a NaN or +inf score gives
//! a NaN row; a zero context, or scores with no number above -inf (all -inf, or NaN and -inf
//! only, as the reference tier's maximum skips NaN), a zero row. f16 and bf16 caches are widened
//! one row at a time. The fast tier runs the job compiled for its path (AVX-512 or AVX2 +
//! FMA): a decode step of qwen2-0.5b (24 layers, 144 cached tokens) spent 2.2 ms in this op
//! at the baseline's SSE2.

use super::common::*;
use super::simd_math::softmax_in_place;
use crate::features::Isa;
use half::{bf16, f16};
use rayon::prelude::*;
use runtime::DType;
use runtime::reference::paged::{PagedSeqs, cache_dims};

/// KvCacheWrite: the shared host kernel (outputs 0 and 1 hold the caches, in place).
pub fn kv_cache_write(ins: &[In], outs: &mut [Out]) -> KResult {
    runtime::reference::paged::kv_cache_write(ins, outs)
}

/// A cache operand's elements, read a row at a time as f32.
enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl<'a> Rows<'a> {
    fn of(x: &'a In) -> Result<Rows<'a>, KernelError> {
        let n = x.numel();
        let cast = |e| KernelError::misaligned("paged cache", e);
        Ok(match x.dtype {
            DType::F32 => Rows::F32(bytemuck::try_cast_slice(&x.bytes[..n * 4]).map_err(cast)?),
            DType::F16 => Rows::F16(bytemuck::try_cast_slice(&x.bytes[..n * 2]).map_err(cast)?),
            DType::BF16 => Rows::Bf16(bytemuck::try_cast_slice(&x.bytes[..n * 2]).map_err(cast)?),
            _ => return Err(KernelError::Internal("a paged cache is f32, f16 or bf16".into())),
        })
    }

    /// A hint to bring elements `at..at + len` into L1; out of range is harmless.
    #[inline(always)]
    fn prefetch(&self, at: usize, len: usize) {
        let (p, bytes) = match self {
            Rows::F32(s) => (s.as_ptr().wrapping_add(at).cast::<i8>(), len * 4),
            Rows::F16(s) => (s.as_ptr().wrapping_add(at).cast::<i8>(), len * 2),
            Rows::Bf16(s) => (s.as_ptr().wrapping_add(at).cast::<i8>(), len * 2),
        };
        #[cfg(target_arch = "x86_64")]
        for o in (0..bytes).step_by(64) {
            // SAFETY: a prefetch reads nothing architecturally and never faults.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.wrapping_add(o)) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (p, bytes);
    }

    /// Elements `at..at + buf.len()`: borrowed when f32, else widened into `buf`.
    #[inline(always)]
    fn row<'b>(&'b self, at: usize, buf: &'b mut [f32]) -> &'b [f32] {
        let d = buf.len();
        match self {
            Rows::F32(s) => &s[at..at + d],
            Rows::F16(s) => {
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(&s[at..at + d], buf);
                buf
            }
            Rows::Bf16(s) => {
                // A bf16 is an f32's upper half: widened here, where the loop is compiled
                // for the job's path and vectorises (the half crate's slice conversion
                // is compiled for the baseline).
                for (o, x) in buf.iter_mut().zip(&s[at..at + d]) {
                    *o = f32::from_bits(u32::from(x.to_bits()) << 16);
                }
                buf
            }
        }
    }
}

/// Rows read this far ahead are prefetched: a kv head's rows lie `KVH · D` elements apart
/// (4 KiB for Qwen3's 8 heads of 128 floats), one page each, where the hardware
/// prefetcher does not follow.
const AHEAD: usize = 8;

/// `a · b` with eight partial sums (so that it vectorises).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `acc += w · v`.
#[inline(always)]
fn axpy(acc: &mut [f32], w: f32, v: &[f32]) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a += w * x;
    }
}

/// What every job of one PagedAttention shares.
struct Job<'a> {
    q: &'a [f32],
    k: Rows<'a>,
    v: Rows<'a>,
    seqs: PagedSeqs,
    /// `[NB, BS, KVH, D]` of the caches, H and the group size H / KVH.
    cache: [usize; 4],
    heads: usize,
    group: usize,
    scale: f32,
    /// The path the job is compiled for (`Isa::Scalar`: the baseline).
    isa: Isa,
}

impl Job<'_> {
    /// The output rows (`group · D`) of kv head `kv` of sequence `b`, on the job's path.
    fn run(&self, b: usize, kv: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx2,fma")]
            fn avx512(j: &Job<'_>, b: usize, kv: usize, out: &mut [f32]) {
                j.run_body(b, kv, out)
            }
            #[target_feature(enable = "avx2,fma")]
            fn avx2(j: &Job<'_>, b: usize, kv: usize, out: &mut [f32]) {
                j.run_body(b, kv, out)
            }
            match self.isa {
                // SAFETY: `Isa::Avx512` is only chosen when AVX-512F, AVX2 and FMA were
                // detected on this CPU at run time (features.rs).
                Isa::Avx512 => return unsafe { avx512(self, b, kv, out) },
                // SAFETY: `Isa::Avx2Fma` is only chosen when AVX2 and FMA were detected.
                Isa::Avx2Fma => return unsafe { avx2(self, b, kv, out) },
                Isa::Scalar => {}
            }
        }
        self.run_body(b, kv, out)
    }

    #[inline(always)]
    fn run_body(&self, b: usize, kv: usize, out: &mut [f32]) {
        let [_, bs, kvh, d] = self.cache;
        let (g, len) = (self.group, self.seqs.lens[b]);
        out.fill(0.0);
        if len == 0 || d == 0 {
            return;
        }
        let q = &self.q[(b * self.heads + kv * g) * d..][..g * d];
        let at = |p: usize| (self.seqs.slot(b, p, bs) * kvh + kv) * d;
        let mut buf = vec![0f32; d];
        let mut scores = vec![0f32; g * len];
        for p in 0..len {
            if p + AHEAD < len {
                self.k.prefetch(at(p + AHEAD), d);
            }
            let k = self.k.row(at(p), &mut buf);
            for j in 0..g {
                scores[j * len + p] = dot(&q[j * d..][..d], k) * self.scale;
            }
        }
        // Per head: weights exp(s - max) / sum; NaN poisons its row; a row with no number
        // above -inf (all -inf, or NaN and -inf only: the reference tier's maximum skips NaN)
        // gives 0.
        let live: Vec<bool> = scores
            .chunks_mut(len)
            .take(g)
            .map(|row| row.iter().any(|&x| x > f32::NEG_INFINITY) && !softmax_in_place(self.isa, row, None))
            .collect();
        for p in 0..len {
            if p + AHEAD < len {
                self.v.prefetch(at(p + AHEAD), d);
            }
            let v = self.v.row(at(p), &mut buf);
            for j in (0..g).filter(|&j| live[j]) {
                axpy(&mut out[j * d..][..d], scores[j * len + p], v);
            }
        }
    }
}

/// PagedAttention, one job per (sequence, kv head), compiled for `isa`, in parallel when
/// `parallel` and the kernel runs in the device's thread pool.
pub fn paged_attention(ins: &[In], out: &mut Out, scale: Option<f32>, isa: Isa, parallel: bool) -> KResult {
    let cache = cache_dims(ins[1].dims)?;
    let [nb, bs, kvh, d] = cache;
    let (b, heads) = (ins[0].dims[0], ins[0].dims[1]);
    let seqs = PagedSeqs::resolve(&ins[3], &ins[4], nb, bs)?;
    let q = load_f32(&ins[0])?;
    let group = heads.checked_div(kvh).unwrap_or(1);
    let job = Job {
        q: &q,
        k: Rows::of(&ins[1])?,
        v: Rows::of(&ins[2])?,
        seqs,
        cache,
        heads,
        group,
        scale: scale.unwrap_or(1.0 / (d as f32).sqrt()),
        isa,
    };
    let chunk = group * d;
    with_f32_out(out, |o| {
        if chunk == 0 || b == 0 {
            return Ok(());
        }
        let f = |(i, rows): (usize, &mut [f32])| job.run(i / kvh, i % kvh, rows);
        if parallel && b * kvh > 1 && rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1 {
            o.par_chunks_mut(chunk).enumerate().for_each(f);
        } else {
            o.chunks_mut(chunk).enumerate().for_each(f);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path (the detected one, AVX2 where there is AVX-512, the baseline) gives the
    /// reference tier's rows, extremes included: a query of NaN (no score above -inf: 0), a
    /// NaN in one key (a NaN row), and plain rows; grouped-query heads, two sequences of different
    /// lengths in blocks of 2.
    #[test]
    fn every_path_matches_the_reference_with_extreme_scores() {
        let (h, kvh, d, nb, bs) = (4usize, 2usize, 16usize, 6usize, 2usize);
        let mut q: Vec<f32> = (0..2 * h * d).map(|i| ((i * 13 % 17) as f32 - 8.0) / 9.0).collect();
        q[..d].fill(f32::NAN); // sequence 0, head 0: every score NaN
        let v: Vec<f32> = (0..nb * bs * kvh * d).map(|i| ((i * 7 % 23) as f32 - 11.0) / 12.0).collect();
        let mut k: Vec<f32> = v.iter().map(|x| x * 0.75 - 0.1).collect();
        // Sequence 0's key 1 of kv head 0 (heads 0 and 1): one NaN score in head 1's row.
        k[kvh * d + 5] = f32::NAN; // slot 1: block 0, position 1
        let tables = [0i32, 1, 2, 3, 4, 5];
        let lens = [5i32, 2];
        let (qd, cd, td, ld) = ([2usize, h, d], [nb, bs, kvh, d], [2usize, 3], [2usize]);
        let st = |dims: &[usize]| runtime::Shape::new(dims.to_vec()).contiguous_strides();
        let (qs, cs, ts, ls) = (st(&qd), st(&cd), st(&td), st(&ld));
        let ins = [
            In { dtype: DType::F32, dims: &qd, strides: &qs, bytes: bytemuck::cast_slice(&q) },
            In { dtype: DType::F32, dims: &cd, strides: &cs, bytes: bytemuck::cast_slice(&k) },
            In { dtype: DType::F32, dims: &cd, strides: &cs, bytes: bytemuck::cast_slice(&v) },
            In { dtype: DType::I32, dims: &td, strides: &ts, bytes: bytemuck::cast_slice(&tables) },
            In { dtype: DType::I32, dims: &ld, strides: &ls, bytes: bytemuck::cast_slice(&lens) },
        ];
        let run = |f: &dyn Fn(&mut Out) -> KResult| {
            let mut o = vec![0f32; 2 * h * d];
            f(&mut Out { dtype: DType::F32, dims: &qd, bytes: bytemuck::cast_slice_mut(&mut o) }).unwrap();
            o
        };
        let want = run(&|o| runtime::reference::paged::paged_attention(&ins, o, None));
        let detected = crate::features::get().isa;
        let mut isas = vec![Isa::Scalar, detected];
        if detected == Isa::Avx512 {
            isas.push(Isa::Avx2Fma);
        }
        for isa in isas {
            let got = run(&|o| paged_attention(&ins, o, None, isa, false));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let same = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-5 * w.abs().max(1.0);
                assert!(same, "{isa:?}: element {i} (head {}): {g} against {w}", i / d);
            }
        }
        assert!(want[..d].iter().all(|&x| x == 0.0), "no score above -inf: a zero row");
        assert!(want[d..2 * d].iter().all(|x| x.is_nan()), "a NaN score: a NaN row");
        assert!(want[2 * d..].iter().all(|x| x.is_finite()));
    }
}
