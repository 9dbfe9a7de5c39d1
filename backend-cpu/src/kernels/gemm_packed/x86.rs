//! The AVX2+FMA (6×16, 5×16 short tiles) and AVX-512F (12×32, 10×32 short tiles, and
//! 8×32 for row counts that neither cuts well) micro-kernels.

use super::layout::{ATile, Blocking, CTile, MicroKernel, Problem, pack_a_panel, pack_b_panel};
use std::arch::x86_64::*;

/// Defines a `#[target_feature]` micro-kernel with `MR` rows and `NV` vectors of `LANES`
/// floats per row; the accumulator array is fully unrolled into registers by LLVM, and the
/// k loop `$unroll` times.
macro_rules! simd_kernel {
    ($name:ident, $feat:literal, $vt:ty, $lanes:expr, $mr:expr, $nv:expr, $unroll:literal,
     $zero:ident, $loadu:ident, $storeu:ident, $set1:ident, $fmadd:ident, $mul:ident) => {
        /// Computes the first `R` (at most `MR`) rows of the tile: `MR` for the kernel's
        /// tile, fewer for its short tile ([`MicroKernel::SHORT_ROWS`]), read from the
        /// same `MR`-row A panels. `STREAM`: each k step also prefetches the B rows
        /// [`B_PREFETCH_BYTES`] ahead ([`MicroKernel::run_streaming`]). `pf`: null, or
        /// where every other k step prefetches its next cache line into L2
        /// ([`MicroKernel::run_prefetching`]; never read).
        ///
        /// # Safety
        /// CPU supports the target features; `a`: `kc*MR` floats readable (a packed panel)
        /// or, where `IN_PLACE`, R rows of `kc` floats at row stride `lda`; `b`: `kc*NR`
        /// floats readable; `c` as [`MicroKernel::run`] for `R` rows.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const R: usize, const IN_PLACE: bool, const STREAM: bool>(
            kc: usize,
            a: *const f32,
            lda: usize,
            b: *const f32,
            c: CTile,
            pf: *const f32,
        ) {
            let CTile { c, ldc, alpha, beta, bias } = c;
            const MR: usize = $mr;
            const NV: usize = $nv;
            const L: usize = $lanes;
            const NR: usize = NV * L;
            const { assert!(R <= MR) };
            for i in 0..R {
                // SAFETY: prefetch is only a hint; the address is inside the C tile.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(c.add(i * ldc).cast::<i8>());
                    _mm_prefetch::<_MM_HINT_T0>(c.add(i * ldc + NR - 1).cast::<i8>());
                }
            }
            let mut acc: [[$vt; NV]; R] = [[$zero(); NV]; R];
            let mut pa = a;
            let mut pb = b;
            let (mut pf_at, mut pf_on) = (pf, true);
            // One k step at `pa`/`pb`, advanced past it.
            macro_rules! step {
                () => {{
                    if STREAM {
                        for line in 0..(NR * 4).div_ceil(64) {
                            let ahead = pb.wrapping_add(B_PREFETCH_BYTES / 4 + line * 16);
                            // A hint that never faults: the address (wrapping arithmetic)
                            // is never dereferenced.
                            _mm_prefetch::<_MM_HINT_T0>(ahead.cast::<i8>());
                        }
                    }
                    if !pf.is_null() {
                        if pf_on {
                            // A hint that never faults (wrapping arithmetic, never read).
                            _mm_prefetch::<_MM_HINT_T1>(pf_at.cast::<i8>());
                            pf_at = pf_at.wrapping_add(16);
                        }
                        pf_on = !pf_on;
                    }
                    let mut bv: [$vt; NV] = [$zero(); NV];
                    for (j, v) in bv.iter_mut().enumerate() {
                        // SAFETY: `pb` points at one packed row of NR floats (kc rows in all).
                        *v = unsafe { $loadu(pb.add(j * L)) };
                    }
                    for (i, row) in acc.iter_mut().enumerate() {
                        // SAFETY: `pa` points at one packed column of MR floats, or (IN_PLACE)
                        // at column p of row 0 of MR rows `lda` apart.
                        let ai = $set1(unsafe { *pa.add(if IN_PLACE { i * lda } else { i }) });
                        for (acc_ij, &bj) in row.iter_mut().zip(bv.iter()) {
                            *acc_ij = $fmadd(ai, bj, *acc_ij);
                        }
                    }
                    // SAFETY: advancing within (or one past the end of) the packed panels.
                    unsafe {
                        pa = pa.add(if IN_PLACE { 1 } else { MR });
                        pb = pb.add(NR);
                    }
                }};
            }
            let mut left = kc;
            while left >= $unroll {
                for _ in 0..$unroll {
                    step!();
                }
                left -= $unroll;
            }
            for _ in 0..left {
                step!();
            }
            let va = $set1(alpha);
            // The bias, added in registers: no second pass over the tile.
            let mut bias_v: [$vt; NV] = [$zero(); NV];
            if !bias.is_null() {
                for (j, v) in bias_v.iter_mut().enumerate() {
                    // SAFETY: a non-null `bias` holds NR readable floats.
                    *v = unsafe { $loadu(bias.add(j * L)) };
                }
            }
            if beta == 0.0 && bias.is_null() {
                for (i, row) in acc.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        // SAFETY: (i, j*L..j*L+L) lies in the writable MR×NR tile.
                        unsafe { $storeu(c.add(i * ldc + j * L), $mul(v, va)) };
                    }
                }
            } else if beta == 0.0 {
                for (i, row) in acc.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        // SAFETY: (i, j*L..j*L+L) lies in the writable MR×NR tile.
                        unsafe { $storeu(c.add(i * ldc + j * L), $fmadd(v, va, bias_v[j])) };
                    }
                }
            } else {
                let vb = $set1(beta);
                for (i, row) in acc.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        // SAFETY: (i, j*L..j*L+L) lies in the readable/writable tile.
                        unsafe {
                            let cp = c.add(i * ldc + j * L);
                            $storeu(cp, $fmadd(v, va, $fmadd($loadu(cp), vb, bias_v[j])));
                        }
                    }
                }
            }
        }
    };
}

simd_kernel!(
    kernel_avx2_6x16,
    "avx2,fma",
    __m256,
    8,
    6,
    2,
    // Two k steps per iteration: the 6×16 step is 12 FMAs, and its 4 loop instructions
    // were a sixth of the issue slots (Zen 4, `bench peak --kernels` and `bench gemm
    // --isa avx2` alternated: 512×4096×1024 64–71 → 66–80 %). AVX-512's larger steps lost
    // with it at 32 and 128 rows, so they keep one.
    2,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_mul_ps
);

/// An AVX-512F kernel of `$mr` rows × 32 columns.
macro_rules! avx512_kernel {
    ($name:ident, $mr:expr) => {
        simd_kernel!(
            $name,
            "avx512f",
            __m512,
            16,
            $mr,
            2,
            1,
            _mm512_setzero_ps,
            _mm512_loadu_ps,
            _mm512_storeu_ps,
            _mm512_set1_ps,
            _mm512_fmadd_ps,
            _mm512_mul_ps
        );
    };
}

avx512_kernel!(kernel_avx512_12x32, 12);
avx512_kernel!(kernel_avx512_8x32, 8);

/// How far ahead of its B loads a streaming call ([`MicroKernel::run_streaming`])
/// prefetches: at 8 to 12 cycles per k step of a 32-wide kernel (128 bytes of B), 8 KiB is
/// 64 steps, 500 to 800 cycles, more than a DRAM miss. The last steps of a panel prefetch
/// the start of the next one, which the packed layouts place right after it. 4, 8 and
/// 16 KiB measured alike (Sapphire Rapids, the `streaming_b_against_plain_b` test: +30–32 %
/// at 32 rows, +10–11 % at 128 for each).
const B_PREFETCH_BYTES: usize = 8 << 10;

/// `MicroKernel::run`, `run_streaming` and (with a short tile of `$short` rows)
/// `run_short` of a kernel type, forwarded to the `simd_kernel!` function `$kernel`
/// instantiated for `$mr` (or `$short`) rows and a packed or an in-place A.
macro_rules! forward_to {
    ($kernel:ident, $mr:literal) => {
        unsafe fn run(kc: usize, a: ATile, b: *const f32, c: CTile) {
            // SAFETY: forwarded contract (the CPU has the kernel's features, pointers valid).
            unsafe {
                match a {
                    ATile::Packed(a) => $kernel::<$mr, false, false>(kc, a, 0, b, c, std::ptr::null()),
                    ATile::InPlace { a, lda } => $kernel::<$mr, true, false>(kc, a, lda, b, c, std::ptr::null()),
                }
            }
        }
        unsafe fn run_prefetching(kc: usize, a: ATile, b: *const f32, c: CTile, next: *const f32) {
            // SAFETY: forwarded contract (the CPU has the kernel's features, pointers valid;
            // `next` is only prefetched).
            unsafe {
                match a {
                    ATile::Packed(a) => $kernel::<$mr, false, false>(kc, a, 0, b, c, next),
                    ATile::InPlace { a, lda } => $kernel::<$mr, true, false>(kc, a, lda, b, c, next),
                }
            }
        }
        unsafe fn run_streaming(kc: usize, a: ATile, b: *const f32, c: CTile) {
            // SAFETY: forwarded contract (the CPU has the kernel's features, pointers valid).
            unsafe {
                match a {
                    ATile::Packed(a) => $kernel::<$mr, false, true>(kc, a, 0, b, c, std::ptr::null()),
                    ATile::InPlace { a, lda } => $kernel::<$mr, true, true>(kc, a, lda, b, c, std::ptr::null()),
                }
            }
        }
    };
    ($kernel:ident, $mr:literal, $short:literal) => {
        forward_to!($kernel, $mr);
        const SHORT_ROWS: usize = $short;
        unsafe fn run_short(kc: usize, a: ATile, b: *const f32, c: CTile, streaming: bool, next: *const f32) {
            // SAFETY: forwarded contract for `$short` rows (the CPU has the kernel's
            // features, pointers valid; `next` is only prefetched).
            unsafe {
                match (a, streaming) {
                    (ATile::Packed(a), false) => $kernel::<$short, false, false>(kc, a, 0, b, c, next),
                    (ATile::Packed(a), true) => $kernel::<$short, false, true>(kc, a, 0, b, c, next),
                    (ATile::InPlace { a, lda }, false) => $kernel::<$short, true, false>(kc, a, lda, b, c, next),
                    (ATile::InPlace { a, lda }, true) => $kernel::<$short, true, true>(kc, a, lda, b, c, next),
                }
            }
        }
    };
}

/// The packing methods of [`MicroKernel`] for `MR` rows and `NR` columns: a whole panel of a
/// row-major A, or of a transposed (column-major) B, is transposed in registers by
/// [`pack_transposed`]; other panels take the portable loops. A's 6-row AVX2 panels stay
/// on the portable loop: with no 8-row group, the register path did not gain there
/// (alternated on Zen 4), where the 8- and 12-row ones did.
macro_rules! x86_packing {
    ($mr:expr, $nr:expr) => {
        fn pack_a(p: &Problem<'_>, i0: usize, rows: usize, p0: usize, kc: usize, dst: &mut [f32]) {
            if $mr >= 8 && rows == $mr && p.csa == 1 {
                let base = i0 * p.rsa + p0;
                let src: [&[f32]; $mr] = std::array::from_fn(|i| &p.a[base + i * p.rsa..][..kc]);
                pack_transposed(&src, kc, dst)
            } else {
                pack_a_panel::<$mr>(p, i0, rows, p0, kc, dst)
            }
        }
        fn pack_b(p: &Problem<'_>, j0: usize, cols: usize, p0: usize, kc: usize, dst: &mut [f32]) {
            if cols == $nr && p.rsb == 1 && p.csb != 1 {
                let base = p0 + j0 * p.csb;
                let src: [&[f32]; $nr] = std::array::from_fn(|j| &p.b[base + j * p.csb..][..kc]);
                pack_transposed(&src, kc, dst)
            } else {
                pack_b_panel::<$nr>(p, j0, cols, p0, kc, dst)
            }
        }
    };
}

/// AVX2 + FMA, 6×16, with 5×16 short tiles read from the same 6-row panels
/// ([`RowPlan`](super::layout::RowPlan)).
pub(super) struct Avx2;

impl MicroKernel for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;
    const BLOCKING: Blocking = Blocking { mc: 3072, kc: 384, nc: 256 };
    // 384 × 16 floats of B: 24 KiB of Zen 4's 32 KiB L1.
    const B_PANEL_IN_L1: bool = true;
    x86_packing!(6, 16);

    forward_to!(kernel_avx2_6x16, 6, 5);
}

/// AVX-512F, 12×32, with 10×32 short tiles ([`RowPlan`](super::layout::RowPlan)): on
/// Emerald Rapids (BERT-base s128 f32, 4 alternated rounds) 85.3 against 88.7 ms where
/// 128 rows ran as sixteen 8-row tiles.
pub(super) struct Avx512;

impl MicroKernel for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;
    const BLOCKING: Blocking = Blocking { mc: 3072, kc: 512, nc: 384 };
    x86_packing!(12, 32);

    forward_to!(kernel_avx512_12x32, 12, 10);
}

/// AVX-512F, 8×32: the B panels (and so a prepacked B) of [`Avx512`], for products whose
/// 12- and 10-row tiles would compute empty rows that 8-row ones do not ([`eight_rows`]).
pub(super) struct Avx512x8;

impl MicroKernel for Avx512x8 {
    const MR: usize = 8;
    const NR: usize = <Avx512 as MicroKernel>::NR;
    const BLOCKING: Blocking = <Avx512 as MicroKernel>::BLOCKING;

    x86_packing!(8, 32);

    forward_to!(kernel_avx512_8x32, 8);
}

/// Whether a product of `m` rows runs on [`Avx512x8`] rather than [`Avx512`]: when no cut
/// into 12- and 10-row tiles is exact (odd `m`, or a few rows) and its 8-row tiles compute
/// over 2 % fewer rows than 12-row ones (m = 7: 8 against 12; m = 301: 304 against 312).
pub(super) fn eight_rows(m: usize) -> bool {
    if super::layout::RowPlan::new(m, 12, 10).exact() {
        return false;
    }
    let (r8, r12) = (m.div_ceil(8) * 8, m.div_ceil(12) * 12);
    r8 * 50 < r12 * 49
}

/// `dst[k*W + i] = src[i][k]` for every `k < kc` and `i < W`: one packed panel from W
/// rows (of A) or W columns (of a transposed B) read as W sequential streams. Rows are
/// transposed eight at a time in AVX registers and four at a time in SSE ones (the
/// portable loop moved one float at a time), the rest one float at a time.
/// Panics (before any write) when a row is shorter than `kc` or `dst` than `kc * W`.
fn pack_transposed<const W: usize>(src: &[&[f32]; W], kc: usize, dst: &mut [f32]) {
    assert!(src.iter().all(|r| r.len() >= kc), "pack_transposed: a row is shorter than the panel");
    let dst = &mut dst[..kc * W];
    let mut i = 0;
    if std::arch::is_x86_feature_detected!("avx2") {
        while i + 8 <= W {
            let rows: &[&[f32]; 8] = src[i..i + 8].try_into().expect("eight rows");
            // SAFETY: AVX2 was just detected; the rows hold `kc` floats (asserted) and
            // `dst` exactly `kc * W`, with `i + 8 <= W`.
            unsafe { transpose_8(rows, kc, dst, W, i) };
            i += 8;
        }
    }
    while i + 4 <= W {
        let rows: &[&[f32]; 4] = src[i..i + 4].try_into().expect("four rows");
        transpose_4(rows, kc, dst, W, i);
        i += 4;
    }
    for (ii, row) in src.iter().enumerate().skip(i) {
        for (k, &x) in row[..kc].iter().enumerate() {
            dst[k * W + ii] = x;
        }
    }
}

/// `dst[k*w + i0 + i] = src[i][k]` for `k < kc`, `i < 4`, in SSE registers (x86_64's
/// baseline). The rows hold `kc` floats and `dst` `kc * w` with `i0 + 4 <= w` (checked by
/// the slicing below: a violation panics).
fn transpose_4(src: &[&[f32]; 4], kc: usize, dst: &mut [f32], w: usize, i0: usize) {
    let full = kc / 4 * 4;
    for k in (0..full).step_by(4) {
        let r: [&[f32]; 4] = std::array::from_fn(|i| &src[i][k..k + 4]);
        let out = &mut dst[k * w + i0..(k + 3) * w + i0 + 4];
        // SAFETY: SSE is part of x86_64; each row slice holds the 4 floats read, and
        // `out` covers the four 4-float stores at 0, w, 2w and 3w.
        unsafe {
            let v: [__m128; 4] = std::array::from_fn(|i| _mm_loadu_ps(r[i].as_ptr()));
            let t0 = _mm_unpacklo_ps(v[0], v[1]);
            let t1 = _mm_unpacklo_ps(v[2], v[3]);
            let t2 = _mm_unpackhi_ps(v[0], v[1]);
            let t3 = _mm_unpackhi_ps(v[2], v[3]);
            let cols = [_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3), _mm_movehl_ps(t3, t2)];
            for (j, c) in cols.into_iter().enumerate() {
                _mm_storeu_ps(out.as_mut_ptr().add(j * w), c);
            }
        }
    }
    for k in full..kc {
        for (i, row) in src.iter().enumerate() {
            dst[k * w + i0 + i] = row[k];
        }
    }
}

/// `dst[k*w + i0 + i] = src[i][k]` for `k < kc`, `i < 8`: eight rows transposed 8×8 at a
/// time in AVX registers.
///
/// # Safety
/// The CPU supports AVX2; every row holds at least `kc` floats; `dst` holds at least
/// `kc * w` floats and `i0 + 8 <= w`.
#[target_feature(enable = "avx2")]
unsafe fn transpose_8(src: &[&[f32]; 8], kc: usize, dst: &mut [f32], w: usize, i0: usize) {
    debug_assert!(src.iter().all(|r| r.len() >= kc) && dst.len() >= kc * w && i0 + 8 <= w);
    let full = kc / 8 * 8;
    for k in (0..full).step_by(8) {
        // SAFETY: every row holds at least `kc >= k + 8` floats, and the stores reach
        // `(k + 7) * w + i0 + 8 <= kc * w` (the contract).
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src[i].as_ptr().add(k)));
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            // Columns 0..4 of rows 0..4 (low lanes) and of rows 4..8 (high lanes: 4..8).
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let cols = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            let out = dst.as_mut_ptr().add(k * w + i0);
            for (j, c) in cols.into_iter().enumerate() {
                _mm256_storeu_ps(out.add(j * w), c);
            }
        }
    }
    for k in full..kc {
        for (i, row) in src.iter().enumerate() {
            dst[k * w + i0 + i] = row[k];
        }
    }
}
