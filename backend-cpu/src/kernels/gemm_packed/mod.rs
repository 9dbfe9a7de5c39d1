//! Packed, register-blocked single-precision GEMM (BLIS / GotoBLAS style).
//!
//! `C = alpha * A·B + beta * C` for arbitrary (positive) row/column strides of `A` and `B`
//! and a row-major `C`.
//!
//! # Structure
//!
//! * **Micro-kernels** compute one `MR×NR` tile of `C` from a packed `MR×kc` panel of `A`
//!   and a packed `kc×NR` panel of `B`, keeping the whole tile in vector registers:
//!   * `avx512-fma`: 12×32 (24 zmm accumulators) with 10×32 (20) short tiles read from
//!     the same 12-row panels where 12 does not divide the rows (32 rows: 12, 10, 10; 128:
//!     9 × 12 + 2 × 10), and 8×32 (16) where no such cut is exact and 8 divides better
//!     than 12 (7 or 301 rows),
//!   * `avx2-fma`: 6×16 (12 ymm accumulators, the classic BLIS Haswell shape), and 5×16
//!     (10) short tiles read from the same 6-row panels where 6 does not divide the rows
//!     of a row block (32 rows: 6, 6, 5, 5, 5, 5 rather than 36 computed; `RowPlan`),
//!   * `scalar`: 4×8 plain `f32` arrays (portable; compiled on every target).
//!
//!   The kernel is the one of the instruction-set path the backend selected
//!   ([`Sgemm::isa`]: the widest detected, or the one `NPURT_CPU_ISA` /
//!   `CpuConfig::isa` forces); a generic (non `target-cpu=native`) build still gets the
//!   SIMD kernels.
//! * **Blocking**: the rows of A are cut into row blocks of at most `MC` rows whose packed
//!   panels (`MR` tall, every `KC`-deep slice of k) fit a bound (4 MiB with B prepacked,
//!   16 MiB with B packed per call); N is cut into `NC`-wide column blocks. An item (a column
//!   block × a row range of one row block) runs every k slice of its tile: its A panels come
//!   from the row block's packed A, shared by all items and packed lazily (the first item
//!   that needs a panel packs it, so A is packed once per product); its B panels are packed
//!   into a thread-private `KC×NC` buffer (meant to live in L2) or read from the prepacked B;
//!   the macro-kernel then runs every A micro-panel (`MR×KC`) against one B micro-panel
//!   after the other (AVX-512; the AVX2 kernel, whose B micro-panel stays in L1, sweeps
//!   the B micro-panels per chunk of A micro-panels instead). The first A micro-panel's
//!   pass over each B micro-panel runs the kernel's streaming form
//!   (`MicroKernel::run_streaming`): it prefetches B 8 KiB ahead of its
//!   loads, into the next panel, so that a prepacked weight read from memory (every layer's
//!   weights in a model, once per run) arrives while the FMAs run rather than after each
//!   4 KiB page's hardware-prefetch restart (one thread, B from a 256 MiB buffer, thread
//!   CPU time on Sapphire Rapids: 32 rows +32 %, 128 rows +12 %). The next few A
//!   micro-panels each prefetch a part of the next B micro-panel into L2
//!   (`MicroKernel::run_prefetching`), so that of an item's panels only the first is
//!   fetched while a tile waits (Emerald Rapids, the same measurement: +5–15 % more).
//!   Packing pads partial panels with zeros, so micro-kernels always run on full
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
//! Files: `operands.rs` the description of one product ([`Sgemm`]) that every caller
//! fills; `entry.rs` its checks and the dispatch to a micro-kernel (the one entry point,
//! reached through `kernels::blas::sgemm`); `paths.rs` each instruction-set path's
//! micro-kernels and blocking; `packed_b.rs` B packed once ([`PackedBLayout`],
//! [`pack_b`]); `layout.rs` the problem, the blocking, the micro-kernel contract and the
//! packing; `scalar.rs` the portable micro-kernel; `x86.rs` the AVX2 and AVX-512
//! micro-kernels; `driver.rs` the loop nest, the shared packed A and the buffers;
//! `rate.rs` the kernels' own speed, in cache and with B from memory
//! (`npurt bench peak --kernels`).

mod driver;
mod entry;
mod layout;
mod operands;
mod packed_b;
mod paths;
mod rate;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

pub(crate) use entry::{run, run_bf16_pairs};
pub use operands::{BMatrix, Sgemm, Strided};
pub use packed_b::{PackedBLayout, pack_b};
pub use rate::{KernelRate, kernel_rates};
