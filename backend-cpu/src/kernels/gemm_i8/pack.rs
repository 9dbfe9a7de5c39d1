//! The int8 layouts: a Linear weight quantised per output channel and packed into panels
//! of [`NR`] columns ([`PackedI8`]), and rows of `x` quantised per row at run time
//! ([`quantise_rows`]).
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
    let bits = row.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
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

/// x quantised per row: `rows` rows of `kp` bytes (row `i` of x at `i · kp`; rows past `m`
/// and bytes past `k` zero, or 128 with the offset), and each row's scale. Send and Sync
/// (plain owned data).
pub struct QuantisedX {
    pub(super) data: Vec<Line>,
    pub(super) scales: Vec<f32>,
    /// Rows holding ±inf or NaN: their outputs are NaN.
    pub(super) bad: Vec<bool>,
}

/// Quantises rows `x[..m]` of `k` floats into `rows ≥ m` rows of `kp` bytes: symmetric s8,
/// or, with `offset`, that value plus 128 as u8 (what `vpdpbusd` multiplies). In parallel
/// over rows when `threads > 1` and x is large.
pub fn quantise_rows(
    x: &[f32],
    m: usize,
    k: usize,
    kp: usize,
    rows: usize,
    offset: bool,
    threads: usize,
) -> QuantisedX {
    use rayon::prelude::*;
    let mut data = vec![Line::default(); rows * kp / 64];
    let mut scales = vec![0f32; rows];
    let mut bad = vec![false; rows];
    let fill = if offset { 128u8 } else { 0 };
    let one = |(i, (dst, (s, b))): (usize, (&mut [u8], (&mut f32, &mut bool)))| {
        if i >= m {
            dst.fill(fill);
            return;
        }
        let row = &x[i * k..(i + 1) * k];
        match row_scale(row) {
            Some((scale, inv)) => {
                *s = scale;
                quantise_row(row, inv, offset, &mut dst[..k]);
            }
            None => {
                *b = true;
                dst[..k].fill(fill);
            }
        }
        dst[k..].fill(fill);
    };
    let buf = bytes_mut(&mut data);
    if kp == 0 {
        // Nothing to quantise: the scales stay 0.
    } else if threads > 1 && m * k >= 1 << 15 {
        buf.par_chunks_mut(kp).zip(scales.par_iter_mut().zip(bad.par_iter_mut())).enumerate().for_each(one);
    } else {
        buf.chunks_mut(kp).zip(scales.iter_mut().zip(bad.iter_mut())).enumerate().for_each(one);
    }
    QuantisedX { data, scales, bad }
}

/// One row: `q8(v, inv)` as bytes, plus 128 with `offset` (written for the compiler to
/// vectorise; AVX-512 where the CPU has it).
fn quantise_row(row: &[f32], inv: f32, offset: bool, dst: &mut [u8]) {
    #[inline(always)]
    fn body(row: &[f32], inv: f32, offset: bool, dst: &mut [u8]) {
        let add = if offset { 128u8 } else { 0 };
        for (d, v) in dst.iter_mut().zip(row) {
            *d = (q8(*v, inv) as u8).wrapping_add(add);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        fn wide(row: &[f32], inv: f32, offset: bool, dst: &mut [u8]) {
            body(row, inv, offset, dst)
        }
        if has_avx512bw() {
            // SAFETY: AVX-512F, BW and VL were detected on this CPU.
            return unsafe { wide(row, inv, offset, dst) };
        }
    }
    body(row, inv, offset, dst)
}
