//! Each instruction-set path's micro-kernels: whether this CPU runs them, the panel
//! width and blocking, the name they are reported under.

use super::layout::{Blocking, MicroKernel};
use super::scalar::ScalarKernel;
#[cfg(target_arch = "x86_64")]
use super::x86;
use crate::features::Isa;

/// Whether this CPU runs `isa`'s micro-kernels (the features detected at start-up).
pub(super) fn supported(isa: Isa) -> bool {
    crate::features::get().check(isa).is_ok()
}

/// The name of `isa`'s micro-kernels: `"avx512-fma"`, `"avx2-fma"` or `"scalar"`.
pub(super) fn kernel_name(isa: Isa) -> &'static str {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => "avx512-fma",
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => "avx2-fma",
        _ => "scalar",
    }
}

/// The panel width `NR` and cache blocking of `isa`'s micro-kernel (the 12-row one on
/// AVX-512: the 8-row one shares its panels).
pub(super) fn shape(isa: Isa) -> (usize, Blocking) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => (<x86::Avx512 as MicroKernel>::NR, <x86::Avx512 as MicroKernel>::BLOCKING),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => (<x86::Avx2 as MicroKernel>::NR, <x86::Avx2 as MicroKernel>::BLOCKING),
        _ => (ScalarKernel::NR, ScalarKernel::BLOCKING),
    }
}

/// Every path this CPU runs, widest first.
#[cfg(test)]
pub(super) fn all_supported() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|&i| supported(i)).collect()
}
