//! f32 rows rounded to bf16 pairs: AVX-512-BF16 where the CPU has it, else portable code.

use super::packed::to_pairs_scalar;
#[cfg(target_arch = "x86_64")]
use super::x86;

/// f32 → bf16 (round to nearest even), two per word; an odd k leaves the last high half 0.
/// `bf16`: the CPU has AVX-512-BF16 (the features detected it).
pub(crate) fn to_pairs(src: &[f32], dst: &mut [u32], bf16: bool) {
    #[cfg(target_arch = "x86_64")]
    if bf16 {
        // SAFETY: AVX-512-BF16 (with AVX-512F) was detected, as `bf16` says.
        unsafe { x86::to_pairs(src, dst) };
        return;
    }
    to_pairs_scalar(src, dst)
}
