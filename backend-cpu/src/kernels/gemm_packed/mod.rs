//! Packed, register-blocked single-precision GEMM (BLIS / GotoBLAS style).
//!
//! `C = alpha * A·B + beta * C` for arbitrary (positive) row/column strides of `A` and `B`
//! and a row-major `C`.
//!
//! # Structure
//!
//! * **Micro-kernels** compute one `MR×NR` tile of `C` from a packed `MR×kc` panel of `A`
//!   and a packed `kc×NR` panel of `B`, keeping the whole tile in vector registers:
//!   * `avx512-fma`: 12×32 (24 zmm accumulators), and 8×32 (16) where `m` is a multiple
//!     of 8 that 12 divides badly (32, 128 rows: no tile computes empty rows),
//!   * `avx2-fma`: 6×16 (12 ymm accumulators, the classic BLIS Haswell shape),
//!   * `scalar`: 4×8 plain `f32` arrays (portable; compiled on every target).
//!
//!   The kernel is chosen once per process with `is_x86_feature_detected!`, cached in a
//!   [`OnceLock`]; a generic (non `target-cpu=native`) build still gets the SIMD kernels.
//! * **Blocking**: the rows of A are cut into row blocks of at most `MC` rows whose packed
//!   panels (`MR` tall, every `KC`-deep slice of k) fit a bound (4 MiB with B prepacked,
//!   16 MiB with B packed per call); N is cut into `NC`-wide column blocks. An item (a column
//!   block × a row range of one row block) runs every k slice of its tile: its A panels come
//!   from the row block's packed A, shared by all items and packed lazily (the first item
//!   that needs a panel packs it, so A is packed once per product); its B panels are packed
//!   into a thread-private `KC×NC` buffer (meant to live in L2) or read from the prepacked B;
//!   the macro-kernel then sweeps all B micro-panels for every A micro-panel (`MR×KC`, stays
//!   in L1). Packing pads partial panels with zeros, so micro-kernels always run on full
//!   tiles; edge tiles of `C` are computed into a stack tile and only the valid part is
//!   written back. Block sizes are split evenly (e.g. `k = 1000` with `KC = 384` gives three
//!   slices of 334, not 384 + 384 + 232). `beta` is applied by the first k-slice only.
//! * **Threads**: one parallel region per row block: items are handed out from an atomic
//!   counter to at most `threads` jobs of the *current* rayon pool (one item per thread
//!   where B is packed per call, four where it is prepacked, so a thread the host delays
//!   holds up little); there are at least `threads` column blocks when `n` allows, and rows
//!   are split too when `n` is narrow. `threads <= 1`, or a problem with `m·n·k < 64³`, runs
//!   entirely on the calling thread without touching rayon.
//! * **Buffers**: packing buffers are 64-byte aligned and cached per thread (thread-local), so
//!   repeated calls do not allocate. The cache keeps a row block's packed A (on calling
//!   threads, within the bounds above) and `KC·NC` floats (a B block, on every thread that
//!   ran an item of a per-call product).
//!
//! Blocking parameters, tuned by measurement on a 2-core AMD EPYC guest (family 25 model 17,
//! which has AVX-512: 32 KiB L1d, 1 MiB L2 per core, 32 MiB shared L3):
//!
//! | kernel | MR×NR | MC | KC | NC | A micro-panel (L1) | B block (L2) |
//! |---|---|---|---|---|---|---|
//! | avx512-fma | 12×32 | 3072 | 512 | 384 | 24 KiB | 768 KiB |
//! | avx2-fma | 6×16 | 3072 | 384 | 256 | 9 KiB | 384 KiB |
//! | scalar | 4×8 | 1024 | 256 | 256 | 4 KiB | 256 KiB |
//!
//! AVX-512 parts (Skylake-SP and later, Zen 4/5) have ≥ 1 MiB of L2 per core; the AVX2 sizes
//! also fit a Zen 3 core (32 KiB L1d, 512 KiB L2).
//!
//! Files: `layout.rs` holds the problem, the blocking, the micro-kernel contract and the
//! packing; `x86.rs` the AVX2 and AVX-512 micro-kernels; `driver.rs` the loop nest, the
//! shared packed A and the buffers; `rate.rs` the kernels' own speed, in cache and with B
//! from memory (`npurt bench peak --kernels`); this file the kernel choice, the entry
//! points, the portable kernel and B packed once.

mod driver;
mod layout;
mod rate;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use rate::KernelRate;

use driver::BPanels;
use layout::{ATile, Blocking, CTile, MicroKernel, Problem, even_block, impl_packing, pack_a_panel, pack_b_panel};
use std::sync::OnceLock;

use rayon::prelude::*;

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// `C = alpha * A·B + beta * C`.
///
/// * `a`: `m×k`, element `(i, p)` at `a[i*rsa + p*csa]`;
/// * `b`: `k×n`, element `(p, j)` at `b[p*rsb + j*csb]`;
/// * `c`: `m×n` row-major, element `(i, j)` at `c[i*ldc + j]`.
///
/// Strides are in elements and may be any value (e.g. `rsa = 1, csa = m` for a transposed /
/// column-major view). `m`, `n` or `k` may be 0. When `beta == 0`, `C` is not read (it may hold
/// NaN or garbage); when `alpha == 0` or `k == 0`, `A` and `B` are not read.
///
/// `threads` is the maximum number of threads to use: `0` or `1` runs on the calling thread
/// without rayon; larger values run up to that many jobs on the current rayon pool (call it
/// from inside `pool.install(..)` to pick a pool). Problems with `m·n·k < 64³` always run
/// single-threaded.
///
/// # Preconditions (the caller guarantees them)
///
/// When the corresponding dimensions are non-zero:
/// * `a.len() >= (m-1)*rsa + (k-1)*csa + 1`,
/// * `b.len() >= (k-1)*rsb + (n-1)*csb + 1`,
/// * `c.len() >= (m-1)*ldc + n` and `ldc >= n` (when `m > 1`), so rows of `C` do not overlap.
///
/// The `a`/`b` conditions are `debug_assert`ed (an out-of-range read still panics via slice
/// indexing, never reads out of bounds). The `c` conditions are checked with `assert!` in all
/// builds, because `C` is written through raw pointers.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    rsa: usize,
    csa: usize,
    b: &[f32],
    rsb: usize,
    csb: usize,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
) {
    let p = Problem { m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, ldc };
    sgemm_with(selected_isa(), None, &p, c, threads);
}

/// [`sgemm`] on the micro-kernel of the instruction-set path `isa` (a backend whose path
/// is forced, `NPURT_CPU_ISA`). Panics, like [`sgemm`], when this CPU cannot run `isa`
/// ([`crate::features::CpuFeatures::check`] says so beforehand).
#[allow(clippy::too_many_arguments)]
pub fn sgemm_on(
    isa: crate::features::Isa,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    rsa: usize,
    csa: usize,
    b: &[f32],
    rsb: usize,
    csb: usize,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
) {
    let p = Problem { m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, ldc };
    sgemm_with(Isa::from_cpu(isa), None, &p, c, threads);
}

/// Measures every micro-kernel of `isa` (the 12×32 and 8×32 AVX-512 kernels, AVX2's 6×16,
/// the portable 4×8) on this thread, in cache and with B from memory (see `rate.rs`):
/// `runs` timed runs of about `run_time` each per figure, after a warm-up. `stream_bytes`
/// is the buffer B's panels are streamed from (a few times the last-level cache; at least
/// two calls' worth is used).
pub fn kernel_rates(
    isa: crate::features::Isa,
    run_time: std::time::Duration,
    runs: usize,
    stream_bytes: usize,
) -> Result<Vec<KernelRate>, crate::features::IsaError> {
    use crate::features::Isa as Cpu;
    crate::features::get().check(isa)?;
    let runs = runs.max(1);
    let mut out = Vec::new();
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX-512F (with AVX2 and FMA) on this CPU.
        Cpu::Avx512 => unsafe {
            out.push(rate::rate::<x86::Avx512>("avx512-fma", run_time, runs, stream_bytes));
            out.push(rate::rate::<x86::Avx512x8>("avx512-fma", run_time, runs, stream_bytes));
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX2 and FMA on this CPU.
        Cpu::Avx2Fma => unsafe { out.push(rate::rate::<x86::Avx2>("avx2-fma", run_time, runs, stream_bytes)) },
        // SAFETY: the portable kernel has no CPU-feature requirement.
        _ => unsafe { out.push(rate::rate::<ScalarKernel>("scalar", run_time, runs, stream_bytes)) },
    }
    Ok(out)
}

/// Which micro-kernel [`sgemm`] uses on this machine: `"avx512-fma"`, `"avx2-fma"` or
/// `"scalar"`.
pub fn isa() -> &'static str {
    selected_isa().name()
}

// ---------------------------------------------------------------------------------------------
// ISA selection
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Scalar,
}

impl Isa {
    /// The micro-kernel of the CPU backend's instruction-set path.
    fn from_cpu(isa: crate::features::Isa) -> Isa {
        use crate::features::Isa as Cpu;
        match isa {
            #[cfg(target_arch = "x86_64")]
            Cpu::Avx512 => Isa::Avx512,
            #[cfg(target_arch = "x86_64")]
            Cpu::Avx2Fma => Isa::Avx2,
            _ => Isa::Scalar,
        }
    }

    fn name(self) -> &'static str {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512-fma",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2-fma",
            Isa::Scalar => "scalar",
        }
    }

    /// Whether this CPU can run the kernel (runtime detection, uncached).
    fn supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            Isa::Scalar => true,
        }
    }

    /// The kernel's panel width `NR` and cache blocking.
    fn shape(self) -> (usize, Blocking) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => (<x86::Avx512 as MicroKernel>::NR, <x86::Avx512 as MicroKernel>::BLOCKING),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => (<x86::Avx2 as MicroKernel>::NR, <x86::Avx2 as MicroKernel>::BLOCKING),
            Isa::Scalar => (ScalarKernel::NR, ScalarKernel::BLOCKING),
        }
    }

    /// All kernels this CPU can run, best first.
    #[cfg_attr(not(test), allow(dead_code))]
    fn all_supported() -> Vec<Isa> {
        let all = [
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2,
            Isa::Scalar,
        ];
        all.into_iter().filter(|i| i.supported()).collect()
    }
}

fn selected_isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if Isa::Avx512.supported() {
                return Isa::Avx512;
            }
            if Isa::Avx2.supported() {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    })
}

/// Problems smaller than this (`m·n·k`) run single-threaded.
const PAR_THRESHOLD: usize = 64 * 64 * 64;

// ---------------------------------------------------------------------------------------------
// Entry with validation and dispatch
// ---------------------------------------------------------------------------------------------

/// Minimum slice length for a `rows×cols` strided matrix (None on overflow).
fn min_len(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(rs)?.checked_add((cols - 1).checked_mul(cs)?)?.checked_add(1)
}

fn sgemm_with(isa: Isa, blocking: Option<Blocking>, p: &Problem<'_>, c: &mut [f32], threads: usize) {
    let (m, n, k) = (p.m, p.n, p.k);
    if m == 0 || n == 0 {
        return;
    }
    // C is written through raw pointers: these checks are what make that sound.
    assert!(m == 1 || p.ldc >= n, "sgemm: ldc ({}) < n ({})", p.ldc, n);
    let c_len = min_len(m, n, p.ldc, 1).expect("sgemm: C extent overflows usize");
    assert!(c.len() >= c_len, "sgemm: c.len() = {} < required {}", c.len(), c_len);

    if k == 0 || p.alpha == 0.0 {
        scale_c(m, n, p.beta, c, p.ldc);
        return;
    }
    debug_assert!(
        min_len(m, k, p.rsa, p.csa).is_some_and(|l| p.a.len() >= l),
        "sgemm: `a` too short for {m}x{k} with strides ({}, {})",
        p.rsa,
        p.csa
    );
    debug_assert!(
        min_len(k, n, p.rsb, p.csb).is_some_and(|l| p.b.len() >= l),
        "sgemm: `b` too short for {k}x{n} with strides ({}, {})",
        p.rsb,
        p.csb
    );

    let work = m.saturating_mul(n).saturating_mul(k);
    let threads = if work < PAR_THRESHOLD { 1 } else { threads.max(1) };

    // Cheap (std caches the CPUID result) and keeps the soundness argument local.
    assert!(isa.supported(), "sgemm: kernel {} not supported by this CPU", isa.name());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa.supported()` just confirmed that `avx512f` is available, which is
        // `drive`'s requirement for this kernel.
        Isa::Avx512 if x86::eight_rows(m) => unsafe { drive_per_call::<x86::Avx512x8>(p, c, threads, blocking) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx512 => unsafe { drive_per_call::<x86::Avx512>(p, c, threads, blocking) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa.supported()` just confirmed that `avx2` and `fma` are available.
        Isa::Avx2 => unsafe { drive_per_call::<x86::Avx2>(p, c, threads, blocking) },
        // SAFETY: the scalar kernel has no CPU-feature requirement.
        Isa::Scalar => unsafe { drive_per_call::<ScalarKernel>(p, c, threads, blocking) },
    }
}

/// [`driver::drive`] with B packed per call, under `blocking` (default: the kernel's own).
///
/// # Safety
/// The CPU must support `K`'s target features.
unsafe fn drive_per_call<K: MicroKernel>(p: &Problem<'_>, c: &mut [f32], threads: usize, blocking: Option<Blocking>) {
    let blk = blocking.unwrap_or(K::BLOCKING);
    // SAFETY: forwarded (the CPU supports `K`); B is read from the problem.
    unsafe { driver::drive::<K>(p, blk, even_block(p.k, blk.kc, 1), BPanels::PerCall, None, c, threads) }
}

/// `C = beta * C` (C set to 0 without being read when `beta == 0`).
fn scale_c(m: usize, n: usize, beta: f32, c: &mut [f32], ldc: usize) {
    if beta == 1.0 {
        return;
    }
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        if beta == 0.0 {
            row.fill(0.0);
        } else {
            row.iter_mut().for_each(|x| *x *= beta);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// B packed once (constant weights)
// ---------------------------------------------------------------------------------------------

/// How a constant `k×n` B is laid out once packed for this process's micro-kernel by
/// [`pack_b`]: k is cut into slices of at most `kc` rows (the kernel's `KC`, split evenly),
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
    /// The layout [`sgemm_prepacked`] expects on this CPU for a `k×n` B.
    pub fn new(k: usize, n: usize) -> PackedBLayout {
        Self::for_isa(selected_isa(), k, n)
    }

    /// The layout [`sgemm_prepacked`] expects for a `k×n` B on the micro-kernel of the
    /// instruction-set path `isa` (which may be narrower than this CPU's widest).
    pub fn for_cpu(isa: crate::features::Isa, k: usize, n: usize) -> PackedBLayout {
        Self::for_isa(Isa::from_cpu(isa), k, n)
    }

    fn for_isa(isa: Isa, k: usize, n: usize) -> PackedBLayout {
        let (nr, blk) = isa.shape();
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

    /// Whether the layout was made for the micro-kernel this process runs.
    pub fn is_current(&self) -> bool {
        self.isa == selected_isa()
    }

    /// Whether the layout was made for the micro-kernel of the path `isa`.
    pub fn is_for(&self, isa: crate::features::Isa) -> bool {
        self.isa == Isa::from_cpu(isa)
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
                Isa::Avx2 => <x86::Avx2 as MicroKernel>::pack_b(&p, j0, nr.min(n - j0), pc, kc, panel),
                Isa::Scalar => <ScalarKernel as MicroKernel>::pack_b(&p, j0, nr.min(n - j0), pc, kc, panel),
            }
        }
    };
    if k > 0 && n > 0 {
        dst.par_chunks_mut(kc_max * n_pad).enumerate().for_each(|(s, slice)| pack(s * kc_max, slice));
    }
    Ok(())
}

/// `C = alpha * A·B (+ bias on every row)` with B packed by [`pack_b`] in `layout`.
///
/// `a` and `c` as in [`sgemm`] (`m×k` with strides `(rsa, csa)`; `m×n` row-major with row
/// stride `ldc`); C is not read. `bias`, when given, has at least `n` values and is added
/// to each row as the tile is written (no extra pass over C).
///
/// Each row block is one parallel region: items (a column block × a row range, several
/// per thread) are handed out from an atomic counter and share A, packed once.
///
/// Panics (like [`sgemm`]) when the operands are shorter than the dimensions require, or
/// when `layout` was made for a micro-kernel this CPU cannot run.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_prepacked(
    m: usize,
    alpha: f32,
    a: &[f32],
    rsa: usize,
    csa: usize,
    layout: &PackedBLayout,
    b: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
) {
    let (n, k) = (layout.n, layout.k);
    if m == 0 || n == 0 {
        return;
    }
    assert!(layout.isa.supported(), "sgemm_prepacked: {} not supported by this CPU", layout.isa.name());
    assert!(b.len() >= layout.len(), "sgemm_prepacked: packed B has {} floats, needs {}", b.len(), layout.len());
    assert!(bias.is_none_or(|v| v.len() >= n), "sgemm_prepacked: bias shorter than n = {n}");
    assert!(m == 1 || ldc >= n, "sgemm_prepacked: ldc ({ldc}) < n ({n})");
    let c_len = min_len(m, n, ldc, 1).expect("sgemm_prepacked: C extent overflows usize");
    assert!(c.len() >= c_len, "sgemm_prepacked: c.len() = {} < required {c_len}", c.len());
    if k == 0 || alpha == 0.0 {
        for i in 0..m {
            let row = &mut c[i * ldc..i * ldc + n];
            match bias {
                Some(v) => row.copy_from_slice(&v[..n]),
                None => row.fill(0.0),
            }
        }
        return;
    }
    assert!(
        min_len(m, k, rsa, csa).is_some_and(|l| a.len() >= l),
        "sgemm_prepacked: `a` too short for {m}x{k} with strides ({rsa}, {csa})"
    );
    let p = Problem { m, n, k, alpha, a, rsa, csa, b: &[], rsb: 0, csb: 0, beta: 0.0, ldc };
    let threads = if m.saturating_mul(n).saturating_mul(k) < PAR_THRESHOLD { 1 } else { threads.max(1) };
    let (kc, b) = (layout.kc, BPanels::Prepacked(b));
    match layout.isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `layout.isa.supported()` was just asserted; `b` holds `layout.len()`
        // floats (asserted), which the 8-row kernel reads as the 12-row one does.
        Isa::Avx512 if x86::eight_rows(m) => unsafe { drive_prepacked::<x86::Avx512x8>(&p, kc, b, bias, c, threads) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx512 => unsafe { drive_prepacked::<x86::Avx512>(&p, kc, b, bias, c, threads) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { drive_prepacked::<x86::Avx2>(&p, kc, b, bias, c, threads) },
        // SAFETY: the scalar kernel has no CPU-feature requirement; `b` as above.
        Isa::Scalar => unsafe { drive_prepacked::<ScalarKernel>(&p, kc, b, bias, c, threads) },
    }
}

/// [`driver::drive`] over a prepacked B, under the kernel's own blocking.
///
/// # Safety
/// As [`driver::drive`]'s.
unsafe fn drive_prepacked<K: MicroKernel>(
    p: &Problem<'_>,
    kc: usize,
    b: BPanels<'_>,
    bias: Option<&[f32]>,
    c: &mut [f32],
    threads: usize,
) {
    // SAFETY: forwarded.
    unsafe { driver::drive::<K>(p, K::BLOCKING, kc, b, bias, c, threads) }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels
// ---------------------------------------------------------------------------------------------

/// Portable 4×8 kernel.
struct ScalarKernel;

impl MicroKernel for ScalarKernel {
    const MR: usize = 4;
    const NR: usize = 8;
    const BLOCKING: Blocking = Blocking { mc: 1024, kc: 256, nc: 256 };
    impl_packing!(4, 8);

    unsafe fn run(kc: usize, a: ATile, b: *const f32, c: CTile) {
        match a {
            ATile::Packed(a) => {
                // SAFETY: the caller guarantees a packed panel of `kc*MR` floats.
                let a = unsafe { std::slice::from_raw_parts(a, kc * 4) };
                // SAFETY: forwarded contract for `b` and `c`.
                unsafe { scalar_tile(kc, |i, p| a[p * 4 + i], b, c) }
            }
            ATile::InPlace { a, lda } => {
                // SAFETY: the caller guarantees `kc` readable floats at each of the 4 rows.
                let rows: [&[f32]; 4] =
                    std::array::from_fn(|i| unsafe { std::slice::from_raw_parts(a.add(i * lda), kc) });
                // SAFETY: forwarded contract for `b` and `c`.
                unsafe { scalar_tile(kc, |i, p| rows[i][p], b, c) }
            }
        }
    }
}

/// The portable 4×8 tile, A's element (row i, depth p) read through `a`.
///
/// # Safety
/// As [`MicroKernel::run`] for `b` (the panel) and `c`.
unsafe fn scalar_tile(kc: usize, a: impl Fn(usize, usize) -> f32, b: *const f32, c: CTile) {
    let CTile { c, ldc, alpha, beta, bias } = c;
    const MR: usize = 4;
    const NR: usize = 8;
    // SAFETY: the caller guarantees `b` holds `kc*NR` floats.
    let b = unsafe { std::slice::from_raw_parts(b, kc * NR) };
    let mut acc = [[0.0f32; NR]; MR];
    for (p, bv) in b.chunks_exact(NR).enumerate() {
        for i in 0..MR {
            let ai = a(i, p);
            for j in 0..NR {
                acc[i][j] += ai * bv[j];
            }
        }
    }
    // SAFETY: a non-null `bias` holds NR floats (the caller's contract).
    let bias = (!bias.is_null()).then(|| unsafe { std::slice::from_raw_parts(bias, NR) });
    for (i, row) in acc.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            let add = bias.map_or(0.0, |b| b[j]);
            // SAFETY: the caller guarantees the MR×NR tile at `c` (stride `ldc`) is valid.
            unsafe {
                let dst = c.add(i * ldc + j);
                *dst = if beta == 0.0 { alpha * v + add } else { alpha * v + beta * *dst + add };
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    /// Deterministic pseudo-random values in [-1, 1).
    fn fill(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
            })
            .collect()
    }

    #[derive(Clone, Copy, Debug)]
    enum Layout {
        RowMajor,
        ColMajor,
        /// Row-major with padded rows (stride = cols + 3).
        Padded,
        /// Both strides > 1 (every element in its own pair of slots).
        Strided,
    }

    /// Returns (data, rs, cs) for a rows×cols matrix with element (i, j) = src[i*cols + j].
    fn layout(src: &[f32], rows: usize, cols: usize, l: Layout) -> (Vec<f32>, usize, usize) {
        let (rs, cs) = match l {
            Layout::RowMajor => (cols.max(1), 1),
            Layout::ColMajor => (1, rows.max(1)),
            Layout::Padded => (cols + 3, 1),
            Layout::Strided => (2, 2 * rows.max(1) + 1),
        };
        let len = min_len(rows, cols, rs, cs).unwrap();
        let mut v = vec![f32::NAN; len];
        for i in 0..rows {
            for j in 0..cols {
                v[i * rs + j * cs] = src[i * cols + j];
            }
        }
        (v, rs, cs)
    }

    struct Case {
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        beta: f32,
        la: Layout,
        lb: Layout,
        ldc_pad: usize,
    }

    /// Naive f64-accumulating A·B (and Σ|a·b| for the error bound), cached per shape since
    /// the test inputs depend on the shape only.
    fn reference(m: usize, n: usize, k: usize, a0: &[f32], b0: &[f32]) -> Arc<(Vec<f64>, Vec<f64>)> {
        type Cache = HashMap<(usize, usize, usize), Arc<(Vec<f64>, Vec<f64>)>>;
        static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
        if let Some(r) = CACHE.lock().unwrap().get_or_insert_default().get(&(m, n, k)) {
            return r.clone();
        }
        let (mut acc, mut mag) = (vec![0.0f64; m * n], vec![0.0f64; m * n]);
        for i in 0..m {
            for j in 0..n {
                for q in 0..k {
                    let t = a0[i * k + q] as f64 * b0[q * n + j] as f64;
                    acc[i * n + j] += t;
                    mag[i * n + j] += t.abs();
                }
            }
        }
        let r = Arc::new((acc, mag));
        CACHE.lock().unwrap().get_or_insert_default().insert((m, n, k), r.clone());
        r
    }

    fn check(isa: Isa, blk: Option<Blocking>, cs: &Case, threads: usize) {
        let Case { m, n, k, alpha, beta, la, lb, ldc_pad } = *cs;
        let a0 = fill(m * k, (m * 31 + k) as u64);
        let b0 = fill(k * n, (k * 17 + n) as u64 + 7);
        let (a, rsa, csa) = layout(&a0, m, k, la);
        let (b, rsb, csb) = layout(&b0, k, n, lb);
        let ldc = n + ldc_pad;
        let c_len = min_len(m, n, ldc, 1).unwrap() + ldc_pad;
        let c_init = fill(c_len, 99);
        let mut c = if beta == 0.0 { vec![f32::NAN; c_len] } else { c_init.clone() };
        let p = Problem { m, n, k, alpha, a: &a, rsa, csa, b: &b, rsb, csb, beta, ldc };
        sgemm_with(isa, blk, &p, &mut c, threads);

        let r = reference(m, n, k, &a0, &b0);
        let tol = 1e-5 * (k.max(1) as f64).sqrt();
        for i in 0..m {
            for j in 0..n {
                let (acc, mag) = (r.0[i * n + j], r.1[i * n + j]);
                let c0 = if beta == 0.0 { 0.0 } else { c_init[i * ldc + j] as f64 };
                let want = alpha as f64 * acc + beta as f64 * c0;
                let scale = (alpha as f64).abs() * mag + (beta as f64 * c0).abs() + 1e-30;
                let got = c[i * ldc + j] as f64;
                assert!(
                    (got - want).abs() <= tol * scale,
                    "{isa:?} {blk:?} m={m} n={n} k={k} alpha={alpha} beta={beta} {la:?}/{lb:?} \
                     threads={threads}: C[{i},{j}] = {got}, want {want}"
                );
            }
        }
        // Padding between / after rows is never touched.
        for (idx, &got) in c.iter().enumerate() {
            let inside = ldc > 0 && idx / ldc < m && idx % ldc < n;
            if !inside {
                let expect = if beta == 0.0 { f32::NAN } else { c_init[idx] };
                assert!(got.to_bits() == expect.to_bits(), "padding C[{idx}] written");
            }
        }
    }

    const SHAPES: &[(usize, usize, usize)] = &[
        (0, 0, 0),
        (0, 5, 3),
        (4, 0, 3),
        (3, 4, 0),
        (1, 1, 1),
        (2, 3, 1),
        (7, 13, 5),
        (6, 16, 8),
        (12, 32, 9),
        (13, 33, 7),
        (17, 33, 65),
        (100, 1, 37),
        (1, 200, 3),
        (1, 1, 300),
        (31, 47, 129),
        (64, 64, 64),
        (65, 97, 300),
        (150, 70, 257),
    ];

    fn sweep(isa: Isa, blk: Option<Blocking>, shapes: &[(usize, usize, usize)]) {
        let layouts = [
            (Layout::RowMajor, Layout::RowMajor),
            (Layout::ColMajor, Layout::RowMajor),
            (Layout::RowMajor, Layout::ColMajor),
            (Layout::ColMajor, Layout::ColMajor),
            (Layout::Padded, Layout::Strided),
            (Layout::Strided, Layout::Padded),
        ];
        let scalars = [(1.0, 0.0), (1.0, 1.0), (-0.5, 0.0), (2.0, -1.5), (0.75, 0.25)];
        for &(m, n, k) in shapes {
            for (li, &(la, lb)) in layouts.iter().enumerate() {
                for (si, &(alpha, beta)) in scalars.iter().enumerate() {
                    // Keep the sweep quick: every layout with (1, 0), every scalar pair with
                    // row-major, plus a diagonal mix.
                    if li != 0 && si != 0 && li != si {
                        continue;
                    }
                    for threads in [1, 2] {
                        let ldc_pad = (m + n + si) % 3;
                        let cs = Case { m, n, k, alpha, beta, la, lb, ldc_pad };
                        check(isa, blk, &cs, threads);
                    }
                }
            }
        }
    }

    #[test]
    fn selected_isa_is_supported() {
        let isa = selected_isa();
        assert!(isa.supported());
        assert_eq!(super::isa(), isa.name());
        assert!(["avx512-fma", "avx2-fma", "scalar"].contains(&super::isa()));
        assert_eq!(Isa::all_supported()[0], isa);
    }

    #[test]
    fn all_kernels_default_blocking() {
        for isa in Isa::all_supported() {
            sweep(isa, None, SHAPES);
        }
    }

    /// Tiny cache blocks so the small shapes cross many MC/KC/NC block boundaries
    /// (including beta applied only on the first k-slice).
    #[test]
    fn all_kernels_small_blocking() {
        let small: &[(usize, usize, usize)] = &[(7, 13, 5), (17, 33, 65), (1, 200, 3)];
        let larger: &[(usize, usize, usize)] = &[(7, 13, 5), (17, 33, 65), (100, 1, 37), (1, 200, 3), (65, 97, 300)];
        let cases = [
            (Blocking { mc: 1, kc: 1, nc: 1 }, small),
            (Blocking { mc: 8, kc: 16, nc: 40 }, larger),
            (Blocking { mc: 30, kc: 7, nc: 64 }, larger),
        ];
        for isa in Isa::all_supported() {
            for (blk, shapes) in cases {
                sweep(isa, Some(blk), shapes);
            }
        }
    }

    /// Shapes above the parallel threshold, exercising the multi-threaded paths (several
    /// M blocks, N blocks, the M split used when n is narrow; AVX2's row chunks of one B
    /// panel are crossed by the prepacked test's larger shapes).
    #[test]
    fn all_kernels_threaded() {
        let shapes: &[(usize, usize, usize)] =
            &[(130, 150, 70), (5, 600, 200), (301, 67, 129), (97, 161, 450), (600, 20, 100), (200, 40, 400)];
        for isa in Isa::all_supported() {
            for &(m, n, k) in shapes {
                for threads in [2, 3] {
                    for (la, lb) in [(Layout::RowMajor, Layout::RowMajor), (Layout::ColMajor, Layout::ColMajor)] {
                        let cs = Case { m, n, k, alpha: 1.25, beta: 0.0, la, lb, ldc_pad: 1 };
                        check(isa, None, &cs, threads);
                        let cs = Case { m, n, k, alpha: -1.0, beta: 0.5, la, lb, ldc_pad: 0 };
                        check(isa, Some(Blocking { mc: 48, kc: 64, nc: 96 }), &cs, threads);
                    }
                }
            }
        }
    }

    #[test]
    fn public_api_and_special_scalars() {
        // alpha = 0 and k = 0: C = beta*C, A/B not read (NaN there must not leak).
        let a = vec![f32::NAN; 12];
        let b = vec![f32::NAN; 12];
        let mut c = vec![2.0f32; 9];
        sgemm(3, 3, 4, 0.0, &a, 4, 1, &b, 3, 1, 0.5, &mut c, 3, 2);
        assert!(c.iter().all(|&x| x == 1.0));
        let mut c = vec![f32::NAN; 9];
        sgemm(3, 3, 0, 1.0, &[], 1, 1, &[], 1, 1, 0.0, &mut c, 3, 1);
        assert!(c.iter().all(|&x| x == 0.0));
        // Empty outputs with empty slices.
        sgemm(0, 3, 4, 1.0, &[], 4, 1, &b, 3, 1, 0.0, &mut [], 3, 1);
        sgemm(3, 0, 4, 1.0, &a, 4, 1, &[], 1, 1, 0.0, &mut [], 0, 1);
        // 2x2 sanity through the public entry point.
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let mut c = [f32::NAN; 4];
        sgemm(2, 2, 2, 1.0, &a, 2, 1, &b, 2, 1, 0.0, &mut c, 2, 1);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        // Transposed A view (A^T stored row-major).
        let mut c = [1.0f32; 4];
        sgemm(2, 2, 2, 1.0, &a, 1, 2, &b, 2, 1, 1.0, &mut c, 2, 1);
        assert_eq!(c, [27.0, 31.0, 39.0, 45.0]);
    }

    /// Concurrent calls from inside a rayon pool (re-entrant thread-local buffers).
    #[test]
    fn nested_in_rayon_pool() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (m, n, k) = (97, 131, 75);
        let a = fill(m * k, 1);
        let b = fill(k * n, 2);
        let mut want = vec![0.0f32; m * n];
        sgemm(m, n, k, 1.0, &a, k, 1, &b, n, 1, 0.0, &mut want, n, 1);
        let outs: Vec<Vec<f32>> = pool.install(|| {
            (0..8)
                .into_par_iter()
                .map(|_| {
                    let mut c = vec![f32::NAN; m * n];
                    sgemm(m, n, k, 1.0, &a, k, 1, &b, n, 1, 0.0, &mut c, n, 2);
                    c
                })
                .collect()
        });
        for c in outs {
            let d = c.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(d <= 1e-4, "max diff {d}");
        }
    }

    /// B packed once (both B layouts a weight comes in), with and without a bias, on one
    /// and several threads, against the f64 reference; C's padding is never written.
    #[test]
    fn prepacked_b_matches_reference() {
        let shapes: &[(usize, usize, usize)] = &[
            (1, 1, 1),
            (7, 13, 5),
            (13, 33, 7),
            (100, 1, 37),
            (1, 200, 3),
            (65, 97, 300),
            (130, 150, 70),
            (301, 67, 1100),
            (5, 600, 200),
            // Packed A over 4 MiB: two row blocks, each reading B once more.
            (130, 40, 8100),
            // Rows that fill every tile of a kernel (8, 12 or 6 rows): A is read in place
            // (two k slices, a partial column panel).
            (32, 100, 700),
            (36, 70, 530),
            (48, 33, 400),
        ];
        for &(m, n, k) in shapes {
            let a0 = fill(m * k, (m * 31 + k) as u64);
            let b0 = fill(k * n, (k * 17 + n) as u64 + 7);
            let bias: Vec<f32> = fill(n, 5).iter().map(|x| 4.0 * x).collect();
            let r = reference(m, n, k, &a0, &b0);
            for isa in Isa::all_supported() {
                let pl = PackedBLayout::for_isa(isa, k, n);
                assert!(pl.len() >= k * n);
                for lb in [Layout::RowMajor, Layout::ColMajor] {
                    let (b, rsb, csb) = layout(&b0, k, n, lb);
                    let mut packed = vec![f32::NAN; pl.len()];
                    pack_b(&pl, &b, rsb, csb, &mut packed).unwrap();
                    for threads in [1, 2, 3] {
                        for with_bias in [false, true] {
                            let ldc = n + 2;
                            let mut c = vec![f32::NAN; m * ldc];
                            let bv = with_bias.then_some(&bias[..]);
                            sgemm_prepacked(m, 0.5, &a0, k, 1, &pl, &packed, bv, &mut c, ldc, threads);
                            let tol = 1e-5 * (k as f64).sqrt();
                            for i in 0..m {
                                for j in 0..n {
                                    let add = if with_bias { bias[j] as f64 } else { 0.0 };
                                    let want = 0.5 * r.0[i * n + j] + add;
                                    let got = c[i * ldc + j] as f64;
                                    assert!(
                                        (got - want).abs() <= tol * (0.5 * r.1[i * n + j] + add.abs() + 1e-30),
                                        "{isa:?} m={m} n={n} k={k} {lb:?} threads={threads} bias={with_bias}: \
                                     C[{i},{j}] = {got}, want {want}"
                                    );
                                }
                                assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|x| x.is_nan()), "padding written");
                            }
                        }
                    }
                }
            }
        }
        assert!(PackedBLayout::new(3, 4).is_current());
    }

    #[test]
    fn prepacked_b_rejects_wrong_sizes() {
        let layout = PackedBLayout::new(10, 20);
        let b = fill(200, 1);
        assert!(pack_b(&layout, &b, 20, 1, &mut vec![0.0; layout.len() + 1]).is_err());
        assert!(pack_b(&layout, &b[..150], 20, 1, &mut vec![0.0; layout.len()]).is_err());
        // k = 0: C is the bias (or zero) without reading A or B.
        let l0 = PackedBLayout::new(0, 3);
        let mut c = [f32::NAN; 6];
        sgemm_prepacked(2, 1.0, &[], 1, 1, &l0, &[], Some(&[1.0, 2.0, 3.0]), &mut c, 3, 2);
        assert_eq!(c, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    }

    /// The 8-row AVX-512 tile is chosen where it saves work (the sweeps above run both:
    /// m = 7, 13, 100, 301 on 8 rows; 65, 130 on 12).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn eight_row_tiles_where_twelve_would_compute_empty_rows() {
        for (m, eight) in [(32, true), (128, true), (7, true), (301, true), (512, false), (36, false), (130, false)] {
            assert_eq!(x86::eight_rows(m), eight, "m = {m}");
        }
    }

    /// Every x86 kernel's register-transposing packing (a row-major A's panel, a transposed
    /// B's panel) packs exactly what the portable loops pack, for depths with and without
    /// a remainder of eight and four, and for partial panels (the portable path).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_packing_matches_the_portable_packing() {
        fn check<K: MicroKernel>(name: &str) {
            let (mr, nr) = (K::MR, K::NR);
            let (rows_total, k) = (mr * 2 + 3, 70);
            let a = fill(rows_total * k, 9);
            // A row-major (rsa = k, csa = 1); B transposed: element (p, j) at j * k + p.
            let p = Problem {
                m: rows_total,
                n: rows_total,
                k,
                alpha: 1.0,
                a: &a,
                rsa: k,
                csa: 1,
                b: &a,
                rsb: 1,
                csb: k,
                beta: 0.0,
                ldc: 1,
            };
            for (i0, p0, kc) in [(0, 0, 70), (mr, 3, 67), (mr + 3, 1, 8), (2, 60, 9), (1, 0, 5), (0, 66, 4)] {
                for rows in [mr, 3.min(mr)] {
                    let (mut got, mut want) = (vec![f32::NAN; mr * kc], vec![f32::NAN; mr * kc]);
                    K::pack_a(&p, i0, rows, p0, kc, &mut got);
                    pack_a_panel_dyn(&p, mr, i0, rows, p0, kc, &mut want);
                    assert_eq!(got, want, "{name} A: rows {i0}+{rows}, columns {p0}+{kc}");
                }
                if i0 + nr <= rows_total {
                    let (mut got, mut want) = (vec![f32::NAN; nr * kc], vec![f32::NAN; nr * kc]);
                    K::pack_b(&p, i0, nr, p0, kc, &mut got);
                    for (pp, d) in want.chunks_exact_mut(nr).enumerate() {
                        for (j, x) in d.iter_mut().enumerate() {
                            *x = a[(i0 + j) * k + p0 + pp];
                        }
                    }
                    assert_eq!(got, want, "{name} transposed B: columns {i0}+{nr}, rows {p0}+{kc}");
                }
            }
        }
        /// The portable A packing for a run-time MR (the kernels' three).
        fn pack_a_panel_dyn(p: &Problem<'_>, mr: usize, i0: usize, rows: usize, p0: usize, kc: usize, d: &mut [f32]) {
            match mr {
                6 => pack_a_panel::<6>(p, i0, rows, p0, kc, d),
                8 => pack_a_panel::<8>(p, i0, rows, p0, kc, d),
                12 => pack_a_panel::<12>(p, i0, rows, p0, kc, d),
                _ => unreachable!("no x86 kernel has {mr} rows"),
            }
        }
        if !Isa::Avx2.supported() {
            println!("SKIP x86 packing: this CPU has no AVX2+FMA");
            return;
        }
        check::<x86::Avx2>("avx2 6x16");
        if !Isa::Avx512.supported() {
            println!("SKIP x86 packing for the AVX-512 kernels: this CPU has no AVX-512F");
            return;
        }
        check::<x86::Avx512>("avx512 12x32");
        check::<x86::Avx512x8>("avx512 8x32");
    }

    #[test]
    fn even_block_splits() {
        assert_eq!(even_block(300, 256, 1), 150);
        assert_eq!(even_block(256, 256, 1), 256);
        assert_eq!(even_block(1, 256, 1), 1);
        assert_eq!(even_block(100, 144, 12), 108);
        assert_eq!(even_block(0, 144, 12), 12);
        assert_eq!(even_block(5000, 4096, 32), 2528);
    }
}
