//! The product's epilogue: what happens to each output on its way out (the bias, the
//! erf GELU with the `BiasGelu` kernel's arithmetic), and the tests' timing knobs.

/// What `gemm_with` does with each output on its way to `c`, in this order: the
/// product, plus `c`'s earlier value (`acc`), plus `bias[j]`, then GELU (`gelu`: the erf
/// form, computed as the `BiasGelu` kernel computes it). On the AMX path this runs on each
/// finished 32 × 32 block while it is in L1; on AVX-512-BF16 after the product. Send and
/// Sync (plain data and a shared slice).
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    pub acc: bool,
    /// `n` values added to every row.
    pub bias: Option<&'a [f32]>,
    pub gelu: bool,
}

/// The epilogue's bias and GELU on one stretch of a row (`bias` from the stretch's column).
pub(super) fn finish_row(isa: crate::Isa, row: &mut [f32], bias: Option<&[f32]>, gelu: bool) {
    if let Some(b) = bias {
        row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
    }
    if gelu {
        let mut tmp = [0f32; 256];
        for chunk in row.chunks_mut(tmp.len()) {
            let t = &mut tmp[..chunk.len()];
            t.copy_from_slice(chunk);
            gelu_erf(isa, t, chunk);
        }
    }
}

/// `dst = gelu(src)` (erf form) with the arithmetic of the `BiasGelu` kernel
/// (`fast::gelu_erf_map`: `simd_math::gelu_erf_approx`, fused multiply-adds on the AVX
/// paths), so that the fused epilogue gives the same bits.
fn gelu_erf(isa: crate::Isa, src: &[f32], dst: &mut [f32]) {
    use crate::kernels::simd_math::gelu_erf_approx;
    #[inline(always)]
    fn body<const FMA: bool>(src: &[f32], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = gelu_erf_approx::<FMA>(*s);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn avx512(src: &[f32], dst: &mut [f32]) {
            body::<true>(src, dst)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(src: &[f32], dst: &mut [f32]) {
            body::<true>(src, dst)
        }
        match isa {
            // SAFETY: `gemm_with` checked that this CPU has AVX-512-BF16, so AVX-512F, AVX2
            // and FMA too, whichever path `isa` names.
            crate::Isa::Avx512 => return unsafe { avx512(src, dst) },
            // SAFETY: as above.
            crate::Isa::Avx2Fma => return unsafe { avx2(src, dst) },
            crate::Isa::Scalar => {}
        }
    }
    body::<false>(src, dst)
}

/// Knobs of the tests' timing aid (`tests::timing`): `[0]` the most k-pairs per slice
/// (0: `amx::KC_AMX`), `[1]` nonzero to split the AMX work by rows only, `[2]` 1 to leave
/// out the output's write through the scratch block (a breakdown, wrong results), 2 to
/// send every block through it, `[3]` nonzero to leave out the packing of x (a breakdown,
/// wrong results), `[4]` nonzero to turn the prefetch of the next output block off, `[5]`
/// nonzero to have the first row block prefetch all of the next panel data, `[6]` nonzero
/// to run a deep k's slices inside each group (not the groups inside each slice).
#[cfg(test)]
pub(super) static TUNE: [std::sync::atomic::AtomicUsize; 7] = [const { std::sync::atomic::AtomicUsize::new(0) }; 7];

/// The knob `i` of [`TUNE`] (0 outside the tests).
pub(super) fn tune(i: usize) -> usize {
    #[cfg(test)]
    return TUNE[i].load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    {
        let _ = i;
        0
    }
}
