//! The small-m product: operand checks, x laid out for the kernels, the output columns
//! split over the threads, and the kernel of the selected path for each layout.

use super::scalar;
use super::weight::{BF16, F16, F32, MAX_M, Weight, WeightData};
#[cfg(target_arch = "x86_64")]
use super::x86;
use crate::features::{CpuFeatures, Isa};
use crate::kernels::gemm_bf16::PackedWeight;
use crate::kernels::gemm_packed::PackedBLayout;
use rayon::prelude::*;
use runtime::KernelError;
use std::borrow::Cow;

/// Weight bytes below which the product stays on the calling thread.
const PAR_BYTES: usize = 1 << 18;

/// `c[m×n] = x[m×k] · wᵀ + bias + (if accumulate { c } else { 0 })`, `x` and `c` row-major
/// and contiguous, `bias` (when given) one value per output column, for `m <= MAX_M`,
/// on the path of the features `f` the backend selected, with output columns split over
/// `threads` threads of the current rayon pool.
#[allow(clippy::too_many_arguments)]
pub fn gemv(
    f: &CpuFeatures,
    m: usize,
    x: &[f32],
    w: &Weight<'_>,
    bias: Option<&[f32]>,
    c: &mut [f32],
    accumulate: bool,
    threads: usize,
) -> Result<(), KernelError> {
    let (n, k) = (w.n, w.k);
    if m > MAX_M {
        return Err(KernelError::Internal(format!("gemv takes at most {MAX_M} rows, got {m}")));
    }
    w.check(f.isa)?;
    // `n * k` fits (checked above) but `m * k` or `m * n` alone may not where the other is 0.
    let (mk, mn) =
        m.checked_mul(k).zip(m.checked_mul(n)).ok_or(KernelError::Internal(format!("gemv {m}x{k}x{n} overflows")))?;
    if x.len() < mk {
        return Err(KernelError::TooShort { what: "gemv x", needed: mk, got: x.len() });
    }
    if c.len() < mn {
        return Err(KernelError::TooShort { what: "gemv output", needed: mn, got: c.len() });
    }
    if let Some(b) = bias.filter(|b| b.len() < n) {
        return Err(KernelError::TooShort { what: "gemv bias", needed: n, got: b.len() });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let out = COut { c: c.as_mut_ptr(), n, bias, accumulate };
    let par = threads > 1 && w.bytes() >= PAR_BYTES;
    let threads = if par { threads } else { 1 };
    match w.data {
        WeightData::F32(v) => rows(f, m, x, k, v.as_ptr().cast(), F32, 4, n, &out, threads),
        WeightData::F16(v) => rows(f, m, x, k, v.as_ptr().cast(), F16, 2, n, &out, threads),
        WeightData::Bf16(v) => rows(f, m, x, k, v.as_ptr().cast(), BF16, 2, n, &out, threads),
        WeightData::F32Packed(l, v) => f32_packed(f, m, x, l, v, &out, threads),
        WeightData::Bf16Packed(p) => bf16_packed(f, m, x, p, &out, threads),
    }
    Ok(())
}

/// Where the kernels put their sums: `c` (row stride `n`) with the bias and the
/// accumulation applied. Each thread writes only its own columns.
struct COut<'a> {
    c: *mut f32,
    n: usize,
    bias: Option<&'a [f32]>,
    accumulate: bool,
}

// SAFETY: `COut` is only shared by the threads of one `gemv` call while `c` is mutably
// borrowed by that call; each thread writes a disjoint set of columns (see `split`).
unsafe impl Send for COut<'_> {}
// SAFETY: as for `Send`.
unsafe impl Sync for COut<'_> {}

impl COut<'_> {
    /// Writes the sums `v[i][jj]` (rows `i < v.len()`, columns `j0 + jj` for `jj < cols`).
    ///
    /// # Safety
    /// `v.len()` is at most the `m` of the call, `j0 + cols <= n`, and no other thread
    /// writes these columns.
    unsafe fn put<const C: usize>(&self, v: &[[f32; C]], j0: usize, cols: usize) {
        for (i, row) in v.iter().enumerate() {
            for (jj, &s) in row[..cols].iter().enumerate() {
                let j = j0 + jj;
                // SAFETY: `(i, j)` lies in `c` (`i < m`, `j < n`), per this function's contract.
                let dst = unsafe { &mut *self.c.add(i * self.n + j) };
                let base = if self.accumulate { *dst } else { 0.0 };
                *dst = base + s + self.bias.map_or(0.0, |b| b[j]);
            }
        }
    }
}

/// Runs `work(j0, j1)` over column ranges aligned to `align` covering `0..n`, on up to
/// `threads` threads: four ranges per thread (so that a thread the host delays holds up
/// little), of `align`-column units spread evenly, their sizes differing by at most one
/// unit and alternating, so that any half or quarter of the ranges holds its share of
/// the columns (rayon hands a thread a contiguous run of ranges). Ranges of a fixed width
/// left one thread the larger half where the units do not divide evenly: qwen2-0.5b's
/// 896 columns (28 panels of 32) ran as 7 ranges, 16 panels against 12.
fn split(n: usize, align: usize, threads: usize, work: impl Fn(usize, usize) + Sync) {
    if threads <= 1 {
        return work(0, n);
    }
    let r = EvenSplit::new(n, align, threads * 4);
    (0..r.count).into_par_iter().for_each(|t| work(r.start(t), r.start(t + 1)));
}

/// `0..n` cut into `count` ranges of whole `align`-column units (the last one may be
/// short), their unit counts differing by at most one and spread evenly: range `t`
/// starts at unit `⌊t · units / count⌋`.
pub(super) struct EvenSplit {
    n: usize,
    align: usize,
    units: usize,
    /// At most `units` (and at least 1 where `n > 0`).
    pub(super) count: usize,
}

impl EvenSplit {
    /// At most `max` ranges (at least one), no more than there are units.
    pub(super) fn new(n: usize, align: usize, max: usize) -> EvenSplit {
        let align = align.max(1);
        let units = n.div_ceil(align);
        EvenSplit { n, align, units, count: max.max(1).min(units.max(1)) }
    }

    /// The first column of range `t` (`n` for `t == count`).
    pub(super) fn start(&self, t: usize) -> usize {
        // u128: `t · units` may exceed usize where n is near its limit.
        ((t as u128 * self.units as u128 / self.count as u128) as usize * self.align).min(self.n)
    }
}

/// The rows of `x` zero padded to a multiple of 16 floats (borrowed where already so).
fn padded(m: usize, x: &[f32], k: usize) -> (Cow<'_, [f32]>, usize) {
    let ldx = k.next_multiple_of(16);
    if ldx == k {
        return (Cow::Borrowed(&x[..m * k]), k);
    }
    let mut v = vec![0f32; m * ldx];
    for (d, s) in v.chunks_exact_mut(ldx).zip(x.chunks_exact(k)) {
        d[..k].copy_from_slice(s);
    }
    (Cow::Owned(v), ldx)
}

/// `x` (`m` rows of `k`) padded with zeros to whole 16-float blocks, each block with its
/// even elements first and its odd ones after: the order `x86::bf16_rows256` reads it in.
#[cfg(target_arch = "x86_64")]
fn split_pairs(m: usize, x: &[f32], k: usize) -> (Vec<f32>, usize) {
    let ldx = k.next_multiple_of(16);
    if ldx == 0 {
        return (Vec::new(), 0);
    }
    let mut v = vec![0f32; m * ldx];
    for (d, s) in v.chunks_exact_mut(ldx).zip(x.chunks_exact(k)) {
        for (db, sb) in d.chunks_exact_mut(16).zip(s.chunks(16)) {
            for (j, &e) in sb.iter().enumerate() {
                db[(j % 2) * 8 + j / 2] = e;
            }
        }
    }
    (v, ldx)
}

/// A row-major bf16 weight on AVX2 (`x86::bf16_rows256`, x in [`split_pairs`] order):
/// four weight rows at a time for one or two rows of x, two for up to four, else one.
#[cfg(target_arch = "x86_64")]
fn bf16_rows_avx2<const M: usize>(a: &RowArgs<'_>, n: usize, threads: usize) {
    if M <= 2 {
        split(n, 4, threads, |j0, j1| {
            row_groups::<M, 4>(x86::bf16_rows256::<M, 4>, x86::bf16_rows256::<M, 1>, a, j0, j1)
        })
    } else if M <= 4 {
        split(n, 2, threads, |j0, j1| {
            row_groups::<M, 2>(x86::bf16_rows256::<M, 2>, x86::bf16_rows256::<M, 1>, a, j0, j1)
        })
    } else {
        split(n, 1, threads, |j0, j1| {
            row_groups::<M, 1>(x86::bf16_rows256::<M, 1>, x86::bf16_rows256::<M, 1>, a, j0, j1)
        })
    }
}

/// A kernel over `R` rows of a row-major weight (see `x86::rows512`).
type RowKernel<const M: usize, const R: usize> =
    unsafe fn(*const u8, usize, usize, *const f32, usize, &mut [[f32; R]; M]);

/// Dispatches on `m` (1..=8) to `$f::<$pre.., m>(args)`.
macro_rules! by_m {
    ($m:expr, $f:ident [$($pre:tt)*] ($($a:expr),*)) => {
        match $m {
            1 => $f::<$($pre)* 1>($($a),*),
            2 => $f::<$($pre)* 2>($($a),*),
            3 => $f::<$($pre)* 3>($($a),*),
            4 => $f::<$($pre)* 4>($($a),*),
            5 => $f::<$($pre)* 5>($($a),*),
            6 => $f::<$($pre)* 6>($($a),*),
            7 => $f::<$($pre)* 7>($($a),*),
            _ => $f::<$($pre)* 8>($($a),*),
        }
    };
}

/// A row-major weight (`w`: `n × k` elements of kind `e`, `esize` bytes each).
#[allow(clippy::too_many_arguments)]
fn rows(
    f: &CpuFeatures,
    m: usize,
    x: &[f32],
    k: usize,
    w: *const u8,
    e: u8,
    esize: usize,
    n: usize,
    out: &COut<'_>,
    threads: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if e == BF16 && f.isa == Isa::Avx2Fma {
        let (xp, ldx) = split_pairs(m, x, k);
        let a = RowArgs { w: WPtr(w), esize, k, x: &xp, ldx, out };
        return by_m!(m, bf16_rows_avx2 [] (&a, n, threads));
    }
    let (xp, ldx) = padded(m, x, k);
    let a = RowArgs { w: WPtr(w), esize, k, x: &xp, ldx, out };
    match e {
        F32 => by_m!(m, rows_m [F32,] (f, &a, n, threads)),
        F16 => by_m!(m, rows_m [F16,] (f, &a, n, threads)),
        _ => by_m!(m, rows_m [BF16,] (f, &a, n, threads)),
    }
}

/// A weight pointer shared by the threads of one call (read only).
#[derive(Clone, Copy)]
struct WPtr(*const u8);
// SAFETY: the weight is only read, and outlives the call that shares the pointer.
unsafe impl Send for WPtr {}
// SAFETY: as for `Send`.
unsafe impl Sync for WPtr {}

struct RowArgs<'a> {
    w: WPtr,
    esize: usize,
    k: usize,
    x: &'a [f32],
    ldx: usize,
    out: &'a COut<'a>,
}

fn rows_m<const E: u8, const M: usize>(f: &CpuFeatures, a: &RowArgs<'_>, n: usize, threads: usize) {
    #[cfg(target_arch = "x86_64")]
    match f.isa {
        Isa::Avx512 => {
            if M <= 4 {
                return split(n, 4, threads, |j0, j1| {
                    row_groups::<M, 4>(x86::rows512::<E, M, 4>, x86::rows512::<E, M, 1>, a, j0, j1)
                });
            }
            return split(n, 2, threads, |j0, j1| {
                row_groups::<M, 2>(x86::rows512::<E, M, 2>, x86::rows512::<E, M, 1>, a, j0, j1)
            });
        }
        Isa::Avx2Fma if f.f16c => {
            // One or two rows of x: four weight rows at a time. With two, a one-row
            // product waits on two FMA chains (about four cycles each) and the tied
            // output projection (row-major, 545 MB in qwen2-0.5b) streamed 8 % (one row)
            // and 17 % (two rows) slower on Zen 3, thread CPU time. Three or more rows
            // keep two weight rows (4 · 3 sums would not fit the 16 registers).
            if M <= 2 {
                return split(n, 4, threads, |j0, j1| {
                    row_groups::<M, 4>(x86::rows256::<E, M, 4>, x86::rows256::<E, M, 1>, a, j0, j1)
                });
            }
            if M <= 4 {
                return split(n, 2, threads, |j0, j1| {
                    row_groups::<M, 2>(x86::rows256::<E, M, 2>, x86::rows256::<E, M, 1>, a, j0, j1)
                });
            }
            return split(n, 1, threads, |j0, j1| {
                row_groups::<M, 1>(x86::rows256::<E, M, 1>, x86::rows256::<E, M, 1>, a, j0, j1)
            });
        }
        _ => {}
    }
    let _ = f;
    split(n, 2, threads, |j0, j1| row_groups::<M, 2>(scalar::rows::<E, M, 2>, scalar::rows::<E, M, 1>, a, j0, j1));
}

/// Columns `j0..j1` of a row-major weight, `R` rows at a time, then one at a time.
///
/// `kern` and `kern1` must be kernels the CPU runs (the caller matched the path on the
/// selected features).
fn row_groups<const M: usize, const R: usize>(
    kern: RowKernel<M, R>,
    kern1: RowKernel<M, 1>,
    a: &RowArgs<'_>,
    j0: usize,
    j1: usize,
) {
    let row = |j: usize| a.w.0.wrapping_add(j * a.k * a.esize);
    let mut j = j0;
    while j + R <= j1 {
        let mut o = [[0f32; R]; M];
        // SAFETY: the path's features were detected; rows `j..j + R` of `k` elements lie
        // in the weight (`j + R <= n`, checked length), `x` holds `M` rows of `ldx` floats
        // padded with zeros; columns `j..j + R` belong to this thread (`split`).
        unsafe {
            kern(row(j), a.esize, a.k, a.x.as_ptr(), a.ldx, &mut o);
            a.out.put(&o, j, R);
        }
        j += R;
    }
    while j < j1 {
        let mut o = [[0f32; 1]; M];
        // SAFETY: as above, for one row.
        unsafe {
            kern1(row(j), a.esize, a.k, a.x.as_ptr(), a.ldx, &mut o);
            a.out.put(&o, j, 1);
        }
        j += 1;
    }
}

/// gemm_packed's prepacked B: panels of `nr` columns.
fn f32_packed(f: &CpuFeatures, m: usize, x: &[f32], l: &PackedBLayout, b: &[f32], out: &COut<'_>, threads: usize) {
    let (kc_max, nr) = l.panel_shape();
    let k = l.k;
    let (xp, ldx) = padded(m, x, k);
    let a =
        PanelArgs { b: WPtr(b.as_ptr().cast()), k, kc_max, slice: kc_max * l.n.div_ceil(nr) * nr, x: &xp, ldx, out };
    by_m!(m, f32_packed_m [] (f, &a, l.n, nr, threads))
}

struct PanelArgs<'a> {
    b: WPtr,
    k: usize,
    kc_max: usize,
    /// Floats per k slice.
    slice: usize,
    x: &'a [f32],
    ldx: usize,
    out: &'a COut<'a>,
}

/// A kernel over one panel of `NR` columns of a prepacked f32 B (see `x86::f32_panel512`).
type PanelKernel<const M: usize, const NR: usize> =
    unsafe fn(*const f32, usize, usize, usize, usize, *const f32, usize, &mut [[f32; NR]; M]);

fn f32_packed_m<const M: usize>(f: &CpuFeatures, a: &PanelArgs<'_>, n: usize, nr: usize, threads: usize) {
    #[cfg(target_arch = "x86_64")]
    match (f.isa, nr) {
        (Isa::Avx512, 32) => {
            return split(n, 32, threads, |j0, j1| panels::<M, 32>(x86::f32_panel512::<M>, a, n, j0, j1));
        }
        (Isa::Avx2Fma, 16) => {
            return split(n, 16, threads, |j0, j1| panels::<M, 16>(x86::f32_panel256::<M>, a, n, j0, j1));
        }
        _ => {}
    }
    let _ = f;
    match nr {
        32 => split(n, 32, threads, |j0, j1| panels::<M, 32>(scalar::f32_panel::<M, 32>, a, n, j0, j1)),
        16 => split(n, 16, threads, |j0, j1| panels::<M, 16>(scalar::f32_panel::<M, 16>, a, n, j0, j1)),
        _ => split(n, 8, threads, |j0, j1| panels::<M, 8>(scalar::f32_panel::<M, 8>, a, n, j0, j1)),
    }
}

/// Columns `j0..j1` (panel aligned) of a prepacked f32 B, one panel at a time.
fn panels<const M: usize, const NR: usize>(
    kern: PanelKernel<M, NR>,
    a: &PanelArgs<'_>,
    n: usize,
    j0: usize,
    j1: usize,
) {
    for q in j0 / NR..j1.div_ceil(NR) {
        let mut o = [[0f32; NR]; M];
        // The layout's panel width is `NR`; the packed B holds every slice's panel `q`
        // (`q < n.div_ceil(NR)`, checked length), `x` holds `M` rows of `ldx >= k` floats;
        // columns `q * NR..` up to `n` belong to this thread (`split` aligned to `NR`).
        // SAFETY: the path's features were detected (the caller matched them); as listed.
        unsafe {
            kern(a.b.0.cast(), q, a.k, a.kc_max, a.slice, a.x.as_ptr(), a.ldx, &mut o);
            a.out.put(&o, q * NR, NR.min(n - q * NR));
        }
    }
}

/// gemm_bf16's k-pair panels: x rounded to bf16 pairs, `vdpbf16ps` where the CPU has it.
fn bf16_packed(f: &CpuFeatures, m: usize, x: &[f32], p: &PackedWeight<'_>, out: &COut<'_>, threads: usize) {
    let (n, k) = (p.n, p.k);
    let kp = k.div_ceil(2);
    let mut xb = vec![0u32; m * kp];
    for (d, s) in xb.chunks_exact_mut(kp.max(1)).zip(x.chunks_exact(k.max(1))) {
        to_pairs(f, s, d);
    }
    let words = p.words_slice();
    let a = Bf16Args { w: WPtr(words.as_ptr().cast()), kp, xb: &xb, out };
    by_m!(m, bf16_packed_m [] (f, &a, n, threads))
}

struct Bf16Args<'a> {
    w: WPtr,
    kp: usize,
    xb: &'a [u32],
    out: &'a COut<'a>,
}

fn bf16_packed_m<const M: usize>(f: &CpuFeatures, a: &Bf16Args<'_>, n: usize, threads: usize) {
    type Kern<const M: usize> = unsafe fn(*const u32, usize, *const u32, &mut [[f32; 32]; M]);
    let kern: Kern<M> = if f.avx512bf16 {
        #[cfg(target_arch = "x86_64")]
        {
            x86::bf16_panel512::<M>
        }
        #[cfg(not(target_arch = "x86_64"))]
        scalar::bf16_panel::<M>
    } else {
        scalar::bf16_panel::<M>
    };
    split(n, 32, threads, |j0, j1| {
        for q in j0 / 32..j1.div_ceil(32) {
            let mut o = [[0f32; 32]; M];
            // SAFETY: AVX-512-BF16 was detected where `kern` uses it; panel `q` holds
            // `kp * 32` words (`q < n.div_ceil(32)`, checked length) and `xb` `M` rows of
            // `kp` words; columns `q * 32..` up to `n` belong to this thread.
            unsafe {
                kern(a.w.0.cast::<u32>().add(q * a.kp * 32), a.kp, a.xb.as_ptr(), &mut o);
                a.out.put(&o, q * 32, 32.min(n - q * 32));
            }
        }
    });
}

/// f32 → bf16 pairs (round to nearest even), an odd k leaving the last high half 0.
fn to_pairs(f: &CpuFeatures, src: &[f32], dst: &mut [u32]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if f.avx512bf16 {
        // SAFETY: AVX-512-BF16 (with AVX-512F) was detected.
        done = unsafe { x86::to_pairs512(src, dst) };
    }
    let _ = f;
    scalar::to_pairs(&src[done..], &mut dst[done / 2..]);
}
