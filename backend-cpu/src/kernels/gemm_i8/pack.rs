//! The int8 layouts: a Linear weight quantised per output channel and packed into panels
//! of [`NR`] columns ([`PackedI8`]), and rows of `x` quantised per row at run time
//! ([`QuantisedX::quantise`], into the layout each unit reads).
//!
//! Both units read the same panel layout: per group of 4 k-bytes, one 128-byte row of
//! [`NR`] columns × 4 bytes. That is `vpdpbusd`'s operand (16 columns × 4 bytes per zmm,
//! two zmm per group) and AMX's B tile layout (16 groups of one half-panel per tile,
//! row stride 128 bytes).

use runtime::KernelError;

/// Output columns per packed panel (two zmm / two B tiles of 16 i32 columns).
pub const NR: usize = 32;
/// k-bytes per AMX step: k is padded to a multiple of this in both layouts.
pub const KSTEP: usize = 64;
/// Largest `k` the products take: `255 · 127 · k` stays inside an i32 after the VNNI
/// offset is taken off, so every sum is exact.
pub const MAX_K: usize = 1 << 17;

/// AVX-512F, BW and VL were detected (the quantiser's and the dequantisation's vector code).
pub fn has_avx512bw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let d = &crate::features::get().detected;
        ["avx512f", "avx512bw", "avx512vl"].iter().all(|f| d.contains(f))
    })
}

/// 64 bytes aligned to 64: one cache line, one tile row. Send and Sync (plain bytes).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct Line(pub [u8; 64]);

impl Default for Line {
    fn default() -> Line {
        Line([0; 64])
    }
}

/// Lines viewed as bytes.
pub fn bytes(l: &[Line]) -> &[u8] {
    let n = std::mem::size_of_val(l);
    // SAFETY: `Line` is 64 plain bytes with no padding (size 64 = its alignment), so `l`
    // is `n` initialised bytes, valid for as long as `l` is borrowed.
    unsafe { std::slice::from_raw_parts(l.as_ptr().cast::<u8>(), n) }
}

/// Lines viewed as mutable bytes.
pub fn bytes_mut(l: &mut [Line]) -> &mut [u8] {
    let n = std::mem::size_of_val(l);
    // SAFETY: as in [`bytes`]; every byte pattern is a valid `Line`, and `l` is borrowed
    // mutably for the slice's life.
    unsafe { std::slice::from_raw_parts_mut(l.as_mut_ptr().cast::<u8>(), n) }
}

/// `k` padded to whole AMX steps.
pub fn padded_k(k: usize) -> usize {
    k.div_ceil(KSTEP) * KSTEP
}

/// A `[n, k]` f32 weight quantised to symmetric s8 per output row (`w[j] ≈ scale[j] · q[j]`,
/// `|q| ≤ 127`) and packed into panels of [`NR`] columns, zero padded to whole panels and
/// to [`padded_k`]. Made once, when a graph is compiled. Send and Sync (plain owned data).
#[derive(Debug)]
pub struct PackedI8 {
    pub n: usize,
    pub k: usize,
    /// `padded_k(k)`.
    pub kp: usize,
    /// `[n.div_ceil(NR)][kp / 4][NR][4]` bytes: `q[p·NR + j][4g + t]` at `((p·kp/4 + g)·NR + j)·4 + t`.
    pub(super) data: Vec<Line>,
    /// Per output row: the dequantisation scale (`max |w[j]| / 127`).
    pub(super) scales: Vec<f32>,
    /// Per output row: `128 · Σ_k q[j][k]`, what the VNNI path's offset of 128 on x adds.
    pub(super) comp: Vec<i32>,
}

/// Symmetric s8 quantisation of one row: `(scale, 1 / scale)` from its largest magnitude,
/// or `None` when the row holds ±inf or NaN. An all-zero row has scale 0.
pub fn row_scale(row: &[f32]) -> Option<(f32, f32)> {
    // The largest magnitude as bits: integer max vectorises, and ±inf and NaN have the
    // largest bit patterns of all, so one comparison finds them.
    #[inline(always)]
    fn max_bits(row: &[f32]) -> u32 {
        row.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff))
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn wide(row: &[f32]) -> u32 {
        max_bits(row)
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F, BW and VL were detected on this CPU.
    let bits = if has_avx512bw() { unsafe { wide(row) } } else { max_bits(row) };
    #[cfg(not(target_arch = "x86_64"))]
    let bits = max_bits(row);
    if bits >= 0x7f80_0000 {
        return None;
    }
    let max = f32::from_bits(bits);
    if max == 0.0 {
        return Some((0.0, 0.0));
    }
    Some((max / 127.0, 127.0 / max))
}

/// `round(v · inv)` in s8 (ties to even; `|v · inv| ≤ 127` up to a rounding, and the cast
/// saturates).
#[inline(always)]
pub fn q8(v: f32, inv: f32) -> i8 {
    (v * inv).round_ties_even() as i8
}

impl PackedI8 {
    /// Quantises and packs `w` (`[n, k]` row-major). `Ok(None)` when a row holds ±inf or
    /// NaN (the layer keeps its f32 weight); an error when `k` exceeds [`MAX_K`] or `w`
    /// is short.
    pub fn quantise(w: &[f32], n: usize, k: usize) -> Result<Option<PackedI8>, KernelError> {
        let len = n.checked_mul(k).ok_or_else(|| KernelError::Internal(format!("weight [{n}, {k}] too large")))?;
        if w.len() < len {
            return Err(KernelError::Internal(format!("int8 weight: {} values for [{n}, {k}]", w.len())));
        }
        if k > MAX_K {
            return Err(KernelError::Internal(format!("int8 weight: k = {k} above {MAX_K}")));
        }
        let kp = padded_k(k);
        let panels = n.div_ceil(NR);
        let mut data = vec![Line::default(); panels * kp * NR / 64];
        let mut scales = vec![0f32; n];
        let mut comp = vec![0i32; n];
        let out = bytes_mut(&mut data);
        let mut q = vec![0i8; k];
        for j in 0..n {
            let row = &w[j * k..(j + 1) * k];
            let Some((scale, inv)) = row_scale(row) else { return Ok(None) };
            let mut sum = 0i32;
            for (d, v) in q.iter_mut().zip(row) {
                *d = q8(*v, inv);
                sum += *d as i32;
            }
            scales[j] = scale;
            comp[j] = 128 * sum;
            let (p, jj) = (j / NR, j % NR);
            let base = p * kp * NR + jj * 4;
            for (kk, v) in q.iter().enumerate() {
                out[base + (kk / 4) * NR * 4 + kk % 4] = *v as u8;
            }
        }
        Ok(Some(PackedI8 { n, k, kp, data, scales, comp }))
    }

    /// Bytes held (packed weight, scales, compensation).
    pub fn bytes(&self) -> usize {
        self.data.len() * 64 + self.scales.len() * 4 + self.comp.len() * 4
    }

    /// Panel `p`'s bytes (`kp / 4` rows of `NR · 4` bytes).
    pub(super) fn panel(&self, p: usize) -> &[u8] {
        let len = self.kp * NR;
        &bytes(&self.data)[p * len..(p + 1) * len]
    }
}

/// Rows per group of quantised x: an AMX row block (32 rows, two tiles), the unit of the
/// parallel quantisation.
pub const GROUP_ROWS: usize = 32;

/// x quantised per row into `rows` rows of `kp` bytes (bytes past `k` and rows past `m`
/// zero, or 128 with the offset), grouped by [`GROUP_ROWS`] rows (group `g` at
/// `g · GROUP_ROWS · kp`); within a group, row-major (row `r` at `r · kp`) or, `blocked`,
/// in AMX's tile-ready form: per step of [`KSTEP`] k-bytes, the group's rows of 64 bytes
/// one after another (row `r`'s bytes `64s..64s + 64` at `s · 2048 + r · 64`), so that the
/// two x tiles of a step are two loads of stride 64 from one place. Also each row's scale.
/// Kept by each thread between products ([`with_quantised`]): no allocation per call.
/// Send and Sync (plain owned data).
#[derive(Default)]
pub struct QuantisedX {
    pub(super) data: Vec<Line>,
    pub(super) scales: Vec<f32>,
    /// Rows holding ±inf or NaN: their outputs are NaN.
    pub(super) bad: Vec<bool>,
}

/// One group of rows as the quantiser writes it: its index, its bytes, scales and flags.
type GroupOut<'a> = (usize, (&'a mut [u8], (&'a mut [f32], &'a mut [bool])));

thread_local! {
    /// The calling thread's quantised x, kept between products.
    static QUANTISED: std::cell::Cell<QuantisedX> = std::cell::Cell::new(QuantisedX::default());
}

/// `f` on this thread's [`QuantisedX`] (taken out of the thread-local for the call: a
/// thread that waits for a parallel loop may run another product meanwhile, which then
/// finds an empty one).
pub fn with_quantised<R>(f: impl FnOnce(&mut QuantisedX) -> R) -> R {
    let mut q = QUANTISED.take();
    let r = f(&mut q);
    QUANTISED.set(q);
    r
}

impl QuantisedX {
    /// Quantises rows `x[..m]` of `k` floats into `rows ≥ m` rows of `kp` bytes (see the
    /// type; growing the buffers where they are short): symmetric s8, or, with `offset`,
    /// that value plus 128 as u8 (what `vpdpbusd` multiplies). In parallel over groups of
    /// rows when `threads > 1` and x is large. `kp % KSTEP == 0`, `kp ≥ k`, `x.len() ≥ m · k`.
    #[allow(clippy::too_many_arguments)]
    pub fn quantise(
        &mut self,
        x: &[f32],
        (m, k, kp): (usize, usize, usize),
        rows: usize,
        blocked: bool,
        offset: bool,
        threads: usize,
    ) {
        use rayon::prelude::*;
        debug_assert!(kp.is_multiple_of(KSTEP) && kp >= k && rows >= m && x.len() >= m * k);
        if self.data.len() < rows * kp / 64 {
            self.data.resize(rows * kp / 64, Line::default());
        }
        if self.scales.len() < rows {
            self.scales.resize(rows, 0.0);
            self.bad.resize(rows, false);
        }
        if kp == 0 || rows == 0 {
            // No bytes: every row's sums are 0 (and a row of no values is finite).
            self.scales[..rows].fill(0.0);
            self.bad[..rows].fill(false);
            return;
        }
        let fill = if offset { 128u8 } else { 0 };
        let group = |(g, (dst, (sc, bad))): GroupOut<'_>| {
            for (r, (s, b)) in sc.iter_mut().zip(bad.iter_mut()).enumerate() {
                let i = g * GROUP_ROWS + r;
                let (base, stride) = if blocked { (r * 64, GROUP_ROWS * 64) } else { (r * kp, 64) };
                let scale = if i < m { row_scale(&x[i * k..(i + 1) * k]) } else { Some((0.0, 0.0)) };
                *b = scale.is_none();
                match scale {
                    Some((scale, inv)) if i < m => {
                        *s = scale;
                        quantise_row(&x[i * k..(i + 1) * k], inv, offset, kp, &mut dst[base..], stride);
                    }
                    _ => {
                        *s = 0.0;
                        for c in 0..kp / 64 {
                            dst[base + c * stride..base + c * stride + 64].fill(fill);
                        }
                    }
                }
            }
        };
        let buf = &mut bytes_mut(&mut self.data)[..rows * kp];
        let (scales, bad) = (&mut self.scales[..rows], &mut self.bad[..rows]);
        let chunk = GROUP_ROWS * kp;
        if threads > 1 && m * k >= 1 << 15 && rows > GROUP_ROWS {
            let it =
                buf.par_chunks_mut(chunk).zip(scales.par_chunks_mut(GROUP_ROWS).zip(bad.par_chunks_mut(GROUP_ROWS)));
            it.enumerate().for_each(group);
        } else {
            let it = buf.chunks_mut(chunk).zip(scales.chunks_mut(GROUP_ROWS).zip(bad.chunks_mut(GROUP_ROWS)));
            it.enumerate().for_each(group);
        }
    }
}

/// One row: `q8(v, inv)` as bytes, plus 128 with `offset`, in chunks of 64 bytes, chunk `c`
/// at `dst[c · stride..]` (bytes past the row's end filled as zeros are), for `kp / 64`
/// chunks: one pass over the row, straight into the layout the products read (written for
/// the compiler to vectorise; AVX-512 where the CPU has it).
fn quantise_row(row: &[f32], inv: f32, offset: bool, kp: usize, dst: &mut [u8], stride: usize) {
    #[inline(always)]
    fn body(row: &[f32], inv: f32, offset: bool, kp: usize, dst: &mut [u8], stride: usize) {
        let add = if offset { 128u8 } else { 0 };
        for c in 0..kp / 64 {
            let d: &mut [u8; 64] = (&mut dst[c * stride..c * stride + 64]).try_into().unwrap();
            let lo = (c * 64).min(row.len());
            let src = &row[lo..(lo + 64).min(row.len())];
            if src.len() == 64 {
                for (d, v) in d.iter_mut().zip(src) {
                    *d = (q8(*v, inv) as u8).wrapping_add(add);
                }
            } else {
                for (j, d) in d.iter_mut().enumerate() {
                    *d = src.get(j).map_or(0, |v| q8(*v, inv) as u8).wrapping_add(add);
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512bw() {
        // SAFETY: AVX-512F, BW and VL were detected on this CPU.
        return unsafe { quantise_row_avx512(row, inv, offset, kp, dst, stride) };
    }
    body(row, inv, offset, kp, dst, stride)
}

/// [`quantise_row`] in AVX-512 registers: 16 floats at a time scaled, rounded to the
/// nearest integer with ties to even (`vcvtps2dq` under the default rounding mode, as
/// [`q8`] rounds) and narrowed with signed saturation (as `q8`'s cast saturates); the
/// values past the row's end are loaded as zeros.
///
/// # Safety
/// AVX-512F, BW and VL must be supported.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantise_row_avx512(row: &[f32], inv: f32, offset: bool, kp: usize, dst: &mut [u8], stride: usize) {
    use std::arch::x86_64::*;
    let k = row.len();
    let scale = _mm512_set1_ps(inv);
    let add = _mm_set1_epi8(if offset { -128 } else { 0 });
    for c in 0..kp / 64 {
        let d: &mut [u8; 64] = (&mut dst[c * stride..c * stride + 64]).try_into().unwrap();
        for q in 0..4 {
            let j = c * 64 + q * 16;
            let n = k.saturating_sub(j).min(16);
            let mask = ((1u32 << n) - 1) as __mmask16;
            // SAFETY: the mask covers only values `j..j + n` of `row` (`n` of them are
            // left from `j`); masked-off lanes are not read; the store writes 16 bytes of
            // `d`'s 64 from `16 · q`.
            unsafe {
                let v = _mm512_maskz_loadu_ps(mask, row.as_ptr().wrapping_add(j));
                let b = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v, scale)));
                _mm_storeu_si128(d.as_mut_ptr().add(16 * q).cast(), _mm_add_epi8(b, add));
            }
        }
    }
}
