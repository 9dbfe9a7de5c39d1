//! The block-paged KV cache on the CPU: KvCacheWrite (whole rows moved into the caches
//! in place, shared with every host tier: [`runtime::reference::paged`]) and the decode
//! step's PagedAttention.
//!
//! PagedAttention reads each sequence's cache blocks where they lie (no gather of the
//! context into a contiguous copy). One job per (sequence, kv head): the query heads that
//! share the kv head (grouped-query) are scored together, so each K and V row is read
//! once for all of them. The scores of a job (heads of the group × context length) are
//! normalised as Attention's are: a NaN or +inf score gives a NaN row, a zero context
//! (or scores all -inf) a zero row. f16 and bf16 caches are widened one row at a time.

use super::common::*;
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

    /// Elements `at..at + buf.len()`: borrowed when f32, else widened into `buf`.
    fn row<'b>(&'b self, at: usize, buf: &'b mut [f32]) -> &'b [f32] {
        let d = buf.len();
        match self {
            Rows::F32(s) => &s[at..at + d],
            Rows::F16(s) => {
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(&s[at..at + d], buf);
                buf
            }
            Rows::Bf16(s) => {
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(&s[at..at + d], buf);
                buf
            }
        }
    }
}

/// `a · b` with eight partial sums (so that it vectorises).
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
}

impl Job<'_> {
    /// The output rows (`group · D`) of kv head `kv` of sequence `b`.
    fn run(&self, b: usize, kv: usize, out: &mut [f32]) {
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
            let k = self.k.row(at(p), &mut buf);
            for j in 0..g {
                scores[j * len + p] = dot(&q[j * d..][..d], k) * self.scale;
            }
        }
        // Per head: weights exp(s - max) / sum; NaN poisons its row, all -inf gives 0.
        let mut live = vec![true; g];
        for j in 0..g {
            let row = &mut scores[j * len..][..len];
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if m == f32::NEG_INFINITY {
                live[j] = false;
                continue;
            }
            let mut sum = 0f32;
            for s in row.iter_mut() {
                *s = (*s - m).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|s| *s *= inv);
        }
        for p in 0..len {
            let v = self.v.row(at(p), &mut buf);
            for j in (0..g).filter(|&j| live[j]) {
                axpy(&mut out[j * d..][..d], scores[j * len + p], v);
            }
        }
    }
}

/// PagedAttention, one job per (sequence, kv head), in parallel when `parallel` and the
/// kernel runs in the device's thread pool.
pub fn paged_attention(ins: &[In], out: &mut Out, scale: Option<f32>, parallel: bool) -> KResult {
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
