//! What every CPU kernel shares: the operand views and element loaders of the core
//! ([`runtime::reference::operands`] and [`runtime::reference::movement`], re-exported here), the kernel context, and the
//! f32 view of an output that the f32-computing kernels write through.

use crate::features::CpuFeatures;

pub use runtime::reference::math::*;
pub use runtime::reference::movement::*;
pub use runtime::reference::operands::*;
pub use runtime::{KernelError, KernelResult as KResult};

/// What a kernel may use besides its operands.
pub struct Ctx {
    /// Threads the kernel may use (the current rayon pool has at least this many).
    pub threads: usize,
    pub features: &'static CpuFeatures,
    /// What `Backend::prepack` made of this node's constants (compiled graphs only).
    pub prepacked: Option<runtime::Prepacked>,
}

/// Runs `f` on an f32 output buffer: in place when the output is f32, else through a
/// temporary that is rounded into the output afterwards.
pub(crate) fn with_f32_out(o: &mut Out, f: impl FnOnce(&mut [f32]) -> KResult) -> KResult {
    if let Some(s) = o.f32s_mut() {
        return f(s);
    }
    let mut tmp = vec![0f32; o.numel()];
    f(&mut tmp)?;
    store_f32(o, &tmp)
}

/// The median of `v` (the upper one of an even count); `v` is not empty. The peaks and the
/// micro-kernels' own rates report it.
pub(crate) fn upper_median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
