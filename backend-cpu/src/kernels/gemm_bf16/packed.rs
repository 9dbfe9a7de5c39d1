//! The k-pair layouts of the bf16 product: its blocking constants, a Linear weight packed
//! into panels of [`NR`] columns ([`PackedWeight`]), and rows of `x` as bf16 pairs.

use half::bf16;
use rayon::prelude::*;
use runtime::KernelError;

/// Output columns per packed panel (two zmm of f32).
pub const NR: usize = 32;
/// Output rows per register tile.
pub const MR: usize = 12;
/// k-pairs per block: a panel block (`KC × NR` words, 16 KiB) and a tile's rows of x
/// (`MR × KC` words, 6 KiB) stay in L1 together.
pub const KC: usize = 128;
/// Output rows per AMX block (two accumulator tiles of 16 rows).
pub const AMX_MR: usize = 32;
/// k-pairs per AMX tile product (a tile row is 64 bytes: 16 words).
pub(super) const AMX_KP: usize = 16;

/// Marks a `[n, k]` weight operand that holds [`PackedWeight`] words instead of the weight
/// (a compiled graph stores it so, once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedInPlace {
    pub n: usize,
    pub k: usize,
}

/// A `[n, k]` bf16 weight in k-pair panels of [`NR`] columns (zero padded). Send and Sync
/// (plain words, owned or borrowed).
#[derive(Debug)]
pub struct PackedWeight<'a> {
    pub n: usize,
    pub k: usize,
    /// `k.div_ceil(2)`.
    pub(super) kp: usize,
    /// `[n.div_ceil(NR)][kp][NR]` words `lo = w[j][2p]`, `hi = w[j][2p + 1]`.
    pub(super) data: Words<'a>,
}

/// 64 bytes aligned to 64: one cache line, one tile row. Tile loads from lines that are
/// not 64-byte aligned run at a fraction of the speed.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Line(pub(super) [u32; 16]);

// SAFETY: `Line` is 64 bytes of `u32` with no padding (16 × 4 = 64 = its alignment); every
// bit pattern is a valid value and all zeros is too.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; `Line` is `Copy`, `repr(C)` and has no padding or pointers.
unsafe impl bytemuck::Pod for Line {}

/// Packed words: owned in cache lines (64-byte aligned, for the tile loads) or borrowed.
#[derive(Debug)]
pub(super) enum Words<'a> {
    Owned(Vec<Line>),
    Borrowed(&'a [u32]),
}

impl std::ops::Deref for Words<'_> {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            Words::Owned(v) => bytemuck::cast_slice(v),
            Words::Borrowed(w) => w,
        }
    }
}

impl PackedWeight<'_> {
    /// Words the packed `[n, k]` weight occupies.
    pub fn words(n: usize, k: usize) -> usize {
        n.div_ceil(NR) * k.div_ceil(2) * NR
    }

    /// A weight packed earlier (`packed.words()` of [`pack`](Self::pack)) read in place,
    /// e.g. from device memory holding those words (little-endian).
    pub fn view(bytes: &[u8], n: usize, k: usize) -> Result<PackedWeight<'_>, KernelError> {
        let len = Self::words(n, k) * 4;
        let words: &[u32] = bytes
            .get(..len)
            .ok_or(KernelError::TooShort { what: "packed bf16 weight (bytes)", needed: len, got: bytes.len() })
            .and_then(|b| bytemuck::try_cast_slice(b).map_err(|e| KernelError::misaligned("packed bf16 weight", e)))?;
        Ok(PackedWeight { n, k, kp: k.div_ceil(2), data: Words::Borrowed(words) })
    }

    /// The packed words (what [`view`](Self::view) reads back).
    pub fn words_slice(&self) -> &[u32] {
        &self.data
    }

    pub fn pack(w: &[bf16], n: usize, k: usize) -> Result<PackedWeight<'static>, KernelError> {
        if w.len() < n * k {
            return Err(KernelError::TooShort { what: "bf16 weight", needed: n * k, got: w.len() });
        }
        let kp = k.div_ceil(2);
        let panels = n.div_ceil(NR);
        // `NR` (32) words per k-pair row: whole lines.
        let mut lines = vec![Line::default(); panels * kp * NR / 16];
        let data: &mut [u32] = bytemuck::cast_slice_mut(&mut lines);
        if kp > 0 {
            data.par_chunks_mut(kp * NR).enumerate().for_each(|(pi, panel)| {
                for jj in 0..NR.min(n - pi * NR) {
                    let row = &w[(pi * NR + jj) * k..(pi * NR + jj + 1) * k];
                    for p in 0..kp {
                        let lo = row[2 * p].to_bits() as u32;
                        let hi = row.get(2 * p + 1).map_or(0, |h| h.to_bits() as u32);
                        panel[p * NR + jj] = lo | (hi << 16);
                    }
                }
            });
        }
        Ok(PackedWeight { n, k, kp, data: Words::Owned(lines) })
    }

    /// Bytes held (for reports).
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// f32 → bf16 (round to nearest even), two per word, without SIMD: the conversion of
/// rows (and row tails) that the AVX-512 path does not take.
pub(super) fn to_pairs_scalar(src: &[f32], dst: &mut [u32]) {
    for (p, d) in dst.iter_mut().enumerate() {
        let lo = bf16::from_f32(src[2 * p]).to_bits() as u32;
        let hi = src.get(2 * p + 1).map_or(0, |&h| bf16::from_f32(h).to_bits() as u32);
        *d = lo | (hi << 16);
    }
}
