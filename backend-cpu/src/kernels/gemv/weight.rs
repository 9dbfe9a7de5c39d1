//! The operands of the small-m Linear: the weight in each layout it is read in, and the
//! element kinds the kernels are compiled for.

use crate::features::Isa;
use crate::kernels::gemm_bf16::PackedWeight;
use crate::kernels::gemm_packed::PackedBLayout;
use half::{bf16, f16};
use runtime::KernelError;

/// The most rows of x this path takes (a Linear with more runs the GEMM).
pub const MAX_M: usize = 8;

/// Element kinds of a row-major weight (the kernels' const parameter).
pub(super) const F32: u8 = 0;
pub(super) const F16: u8 = 1;
pub(super) const BF16: u8 = 2;

/// How the `[n, k]` weight of a [`Weight`] is stored. Send and Sync (shared slices).
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    /// Row-major `[n, k]` f32.
    F32(&'a [f32]),
    /// Row-major `[n, k]` f16.
    F16(&'a [f16]),
    /// Row-major `[n, k]` bf16.
    Bf16(&'a [bf16]),
    /// `gemm_packed`'s prepacked B (`wᵀ`), for the path the layout names.
    F32Packed(&'a PackedBLayout, &'a [f32]),
    /// `gemm_bf16`'s k-pair panels.
    Bf16Packed(&'a PackedWeight<'a>),
}

/// A Linear layer's `[n, k]` weight (`n` outputs, `k` inputs). Send and Sync.
#[derive(Clone, Copy, Debug)]
pub struct Weight<'a> {
    pub n: usize,
    pub k: usize,
    pub data: WeightData<'a>,
}

impl Weight<'_> {
    /// Bytes the weight occupies (what one product streams).
    pub fn bytes(&self) -> usize {
        let nk = self.n.saturating_mul(self.k);
        match self.data {
            WeightData::F32(_) | WeightData::F32Packed(..) => nk.saturating_mul(4),
            WeightData::F16(_) | WeightData::Bf16(_) => nk.saturating_mul(2),
            WeightData::Bf16Packed(p) => p.bytes(),
        }
    }

    /// The weight's elements are present for `[n, k]` (and a packed one was packed for
    /// that shape on the path `isa`).
    pub(super) fn check(&self, isa: Isa) -> Result<(), KernelError> {
        let (n, k) = (self.n, self.k);
        let nk = n.checked_mul(k).ok_or_else(|| KernelError::Internal(format!("weight [{n}, {k}] overflows")))?;
        let (what, needed, got) = match self.data {
            WeightData::F32(w) => ("f32 weight", nk, w.len()),
            WeightData::F16(w) => ("f16 weight", nk, w.len()),
            WeightData::Bf16(w) => ("bf16 weight", nk, w.len()),
            WeightData::F32Packed(l, w) => {
                if (l.n, l.k) != (n, k) || !l.is_for(isa) {
                    return Err(KernelError::Internal(format!("packed weight {l:?} does not fit [{n}, {k}] on {isa}")));
                }
                ("packed f32 weight", l.len(), w.len())
            }
            WeightData::Bf16Packed(p) => {
                if (p.n, p.k) != (n, k) {
                    return Err(KernelError::Internal(format!("packed bf16 weight does not fit [{n}, {k}]")));
                }
                ("packed bf16 weight", PackedWeight::words(n, k), p.words_slice().len())
            }
        };
        if got < needed {
            return Err(KernelError::TooShort { what, needed, got });
        }
        Ok(())
    }
}
