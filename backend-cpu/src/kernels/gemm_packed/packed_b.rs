//! B packed once (constant weights): its layout for a path's micro-kernel, and the packing.

use super::layout::{MicroKernel, Problem, even_block, min_len};
use super::paths;
use super::scalar::ScalarKernel;
#[cfg(target_arch = "x86_64")]
use super::x86;
use crate::features::Isa;
use rayon::prelude::*;

/// How a constant `k×n` B is laid out once packed for this process's micro-kernel by
/// [`pack_b`] for the micro-kernel of one instruction-set path: k is cut into slices of at most `kc` rows (the kernel's `KC`, split evenly),
/// each slice holds `n.div_ceil(NR)` panels of `kc_slice × NR` floats (zero-padded past
/// `n`), slice after slice. It is exactly the order in which the driver reads B, so the
/// per-call packing pass disappears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedBLayout {
    pub k: usize,
    pub n: usize,
    isa: Isa,
    kc: usize,
    nr: usize,
}

impl PackedBLayout {
    /// The layout a packed B ([`BMatrix::Packed`](super::BMatrix::Packed)) has for a `k×n`
    /// B on the micro-kernel of the instruction-set path `isa` (which may be narrower than
    /// this CPU's widest).
    pub fn for_cpu(isa: Isa, k: usize, n: usize) -> PackedBLayout {
        let (nr, blk) = paths::shape(isa);
        PackedBLayout { k, n, isa, kc: even_block(k, blk.kc, 1), nr }
    }

    /// Floats the packed matrix occupies (`k × n` rounded up to whole panels).
    pub fn len(&self) -> usize {
        self.k * self.n.div_ceil(self.nr) * self.nr
    }

    /// Whether the packed matrix is empty (`k` or `n` is 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the layout was made for the micro-kernel of the path `isa`.
    pub fn is_for(&self, isa: Isa) -> bool {
        self.isa == isa
    }

    /// The path the layout was made for.
    pub(super) fn isa(&self) -> Isa {
        self.isa
    }

    /// The k depth of each packed slice.
    pub(super) fn kc(&self) -> usize {
        self.kc
    }

    /// The k depth of each packed slice (the last may be shorter) and the columns of each
    /// panel: where a reader other than the GEMM finds panel `q` of slice `s` (at
    /// `s * kc * n.div_ceil(nr) * nr + q * kc_s * nr` floats, `kc_s` that slice's depth).
    pub fn panel_shape(&self) -> (usize, usize) {
        (self.kc, self.nr)
    }
}

/// Packs `b` (`k×n`, element `(p, j)` at `b[p*rsb + j*csb]`) into `dst` in `layout`'s order.
/// Errors if `dst` is not `layout.len()` floats long or `b` is too short.
pub fn pack_b(
    layout: &PackedBLayout,
    b: &[f32],
    rsb: usize,
    csb: usize,
    dst: &mut [f32],
) -> Result<(), runtime::KernelError> {
    let (k, n, kc_max, nr) = (layout.k, layout.n, layout.kc, layout.nr);
    if dst.len() != layout.len() {
        return Err(runtime::KernelError::Internal(format!(
            "packed B needs {} floats, got {}",
            layout.len(),
            dst.len()
        )));
    }
    if min_len(k, n, rsb, csb).is_none_or(|l| b.len() < l) {
        return Err(runtime::KernelError::Internal(format!(
            "B of {} floats is too short for {k}x{n} with strides ({rsb}, {csb})",
            b.len()
        )));
    }
    let p = Problem { m: 0, n, k, alpha: 1.0, a: &[], rsa: 0, csa: 0, b, rsb, csb, beta: 0.0, ldc: n };
    let n_pad = n.div_ceil(nr) * nr;
    let pack = |pc: usize, slice: &mut [f32]| {
        let kc = kc_max.min(k - pc);
        for (q, panel) in slice.chunks_exact_mut(kc * nr).enumerate() {
            let j0 = q * nr;
            match layout.isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => <x86::Avx512 as MicroKernel>::pack_b(&p, j0, nr.min(n - j0), pc, kc, panel),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2Fma => <x86::Avx2 as MicroKernel>::pack_b(&p, j0, nr.min(n - j0), pc, kc, panel),
                _ => <ScalarKernel as MicroKernel>::pack_b(&p, j0, nr.min(n - j0), pc, kc, panel),
            }
        }
    };
    if k > 0 && n > 0 {
        dst.par_chunks_mut(kc_max * n_pad).enumerate().for_each(|(s, slice)| pack(s * kc_max, slice));
    }
    Ok(())
}
