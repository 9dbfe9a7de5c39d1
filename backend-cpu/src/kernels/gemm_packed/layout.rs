//! What the GEMM's parts share: the problem, the cache blocking, the micro-kernel
//! contract ([`MicroKernel`]), and the packing of A and B into the micro-kernels' panels.

// ---------------------------------------------------------------------------------------------
// Problem description and blocking
// ---------------------------------------------------------------------------------------------

/// One product `C = alpha * A·B + beta * C`: its dimensions and scalars, A and B with
/// their strides, and C's row stride (see [`Sgemm`](super::Sgemm)).
pub(super) struct Problem<'a> {
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) alpha: f32,
    pub(super) a: &'a [f32],
    pub(super) rsa: usize,
    pub(super) csa: usize,
    pub(super) b: &'a [f32],
    pub(super) rsb: usize,
    pub(super) csb: usize,
    pub(super) beta: f32,
    pub(super) ldc: usize,
}

/// Cache-blocking sizes (upper bounds; actual blocks are split evenly below them).
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocking {
    pub(super) mc: usize,
    pub(super) kc: usize,
    pub(super) nc: usize,
}

/// Where a micro-kernel reads the `MR` rows of A of one tile, `kc` columns deep.
#[derive(Clone, Copy)]
pub(super) enum ATile {
    /// A packed panel: `kc` columns of `MR` floats, one after the other.
    Packed(*const f32),
    /// A row-major A read in place (no packing where its rows fill the tile): row 0,
    /// column 0 of `MR` rows `lda` floats apart.
    InPlace { a: *const f32, lda: usize },
}

/// The C side of one micro-kernel call.
#[derive(Clone, Copy)]
pub(super) struct CTile {
    /// Row 0, column 0 of the `MR × NR` tile; rows `ldc` floats apart.
    pub(super) c: *mut f32,
    pub(super) ldc: usize,
    pub(super) alpha: f32,
    /// 0: C is not read.
    pub(super) beta: f32,
    /// Null, or `NR` floats (one per column) added to every row.
    pub(super) bias: *const f32,
}

/// A register-blocked micro-kernel.
pub(super) trait MicroKernel {
    const MR: usize;
    const NR: usize;
    const BLOCKING: Blocking;
    /// The macro-kernel's loop order. `false`: one A micro-panel stays in L1 while the B
    /// micro-panels stream from L2 (`NR` floats per k step). `true`: one B micro-panel
    /// (`kc × NR`) stays in L1 while the A micro-panels stream from L2 (`MR` floats per k
    /// step), for kernels whose B panel fits L1 beside the A stream and whose B stream
    /// would cost more L2 bandwidth per FMA than A's (AVX2's 6×16: 64 bytes of B per 12
    /// FMAs against 24 of A).
    const B_PANEL_IN_L1: bool = false;

    /// `C[0..MR, 0..NR] = alpha * Σ_p A[p] ⊗ B[p] + beta * C + bias` (C not read when
    /// `beta == 0`; `bias`, one value per column, added to every row when not null).
    ///
    /// # Safety
    /// * the CPU supports the kernel's target features;
    /// * `a` is valid for reads of its tile ([`ATile`]), `b` (a packed panel: `kc` rows of
    ///   `NR` floats) for `kc*NR` floats;
    /// * `c.c` is valid for reads and writes of rows `0..MR`, columns `0..NR` at row stride
    ///   `c.ldc`, and no other thread accesses that tile concurrently;
    /// * `c.bias` is null or valid for reads of `NR` floats.
    unsafe fn run(kc: usize, a: ATile, b: *const f32, c: CTile);

    /// [`run`](Self::run) for the first tile that reads a B micro-panel, which may come
    /// from memory (a prepacked weight, read once per product): the SIMD kernels also
    /// prefetch B a few KiB ahead of their loads, past the panel's end into the next one,
    /// so that the next panel's misses overlap this one's FMAs rather than waiting on the
    /// hardware prefetcher, which stops at every 4 KiB page.
    ///
    /// # Safety
    /// As [`run`](Self::run).
    unsafe fn run_streaming(kc: usize, a: ATile, b: *const f32, c: CTile) {
        // SAFETY: the same contract.
        unsafe { Self::run(kc, a, b, c) }
    }

    /// [`pack_a_panel`] with `MR = Self::MR`.
    fn pack_a(p: &Problem<'_>, i0: usize, rows: usize, p0: usize, kc: usize, dst: &mut [f32]);
    /// [`pack_b_panel`] with `NR = Self::NR`.
    fn pack_b(p: &Problem<'_>, j0: usize, cols: usize, p0: usize, kc: usize, dst: &mut [f32]);
}

/// Implements the packing methods of [`MicroKernel`] for concrete `MR`/`NR`.
macro_rules! impl_packing {
    ($mr:expr, $nr:expr) => {
        fn pack_a(p: &Problem<'_>, i0: usize, rows: usize, p0: usize, kc: usize, dst: &mut [f32]) {
            pack_a_panel::<$mr>(p, i0, rows, p0, kc, dst)
        }
        fn pack_b(p: &Problem<'_>, j0: usize, cols: usize, p0: usize, kc: usize, dst: &mut [f32]) {
            pack_b_panel::<$nr>(p, j0, cols, p0, kc, dst)
        }
    };
}
pub(super) use impl_packing;

/// Minimum slice length for a `rows×cols` strided matrix (None on overflow).
pub(super) fn min_len(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(rs)?.checked_add((cols - 1).checked_mul(cs)?)?.checked_add(1)
}

/// Even split of `len` into blocks of at most `max`, each a multiple of `align` (except
/// possibly the last). Returns the block size (>= 1).
pub(super) fn even_block(len: usize, max: usize, align: usize) -> usize {
    let max = max.max(align);
    let nblocks = len.div_ceil(max).max(1);
    len.div_ceil(nblocks).next_multiple_of(align).max(align)
}

// ---------------------------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------------------------

/// Packs rows `i0..i0+rows` (rows <= MR), columns `p0..p0+kc` of A into one MR-panel:
/// `dst[p*MR + i] = A[i0+i, p0+p]`, zero for `i >= rows`.
pub(super) fn pack_a_panel<const MR: usize>(
    p: &Problem<'_>,
    i0: usize,
    rows: usize,
    p0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let dst = &mut dst[..kc * MR];
    let (a, rsa, csa) = (p.a, p.rsa, p.csa);
    if rows == MR && csa == 1 {
        // Row-major A: MR sequential read streams, one contiguous MR-vector written per p.
        let base = i0 * rsa + p0;
        let src: [&[f32]; MR] = std::array::from_fn(|i| &a[base + i * rsa..][..kc]);
        for (pp, d) in dst.chunks_exact_mut(MR).enumerate() {
            for i in 0..MR {
                d[i] = src[i][pp];
            }
        }
    } else if rsa == 1 {
        // Column-major A (transposed view): each packed row is a contiguous copy.
        for (pp, d) in dst.chunks_exact_mut(MR).enumerate() {
            let s = &a[(p0 + pp) * csa + i0..][..rows];
            d[..rows].copy_from_slice(s);
            d[rows..].fill(0.0);
        }
    } else {
        for (pp, d) in dst.chunks_exact_mut(MR).enumerate() {
            let col = (p0 + pp) * csa;
            for (i, x) in d.iter_mut().enumerate() {
                *x = if i < rows { a[(i0 + i) * rsa + col] } else { 0.0 };
            }
        }
    }
}

/// Packs columns `j0..j0+cols` (cols <= NR), rows `p0..p0+kc` of B into one NR-panel:
/// `dst[p*NR + j] = B[p0+p, j0+j]`, zero for `j >= cols`.
pub(super) fn pack_b_panel<const NR: usize>(
    p: &Problem<'_>,
    j0: usize,
    cols: usize,
    p0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let dst = &mut dst[..kc * NR];
    let (b, rsb, csb) = (p.b, p.rsb, p.csb);
    if csb == 1 {
        // Row-major B: each packed row is a contiguous copy.
        for (pp, d) in dst.chunks_exact_mut(NR).enumerate() {
            let s = &b[(p0 + pp) * rsb + j0..][..cols];
            d[..cols].copy_from_slice(s);
            d[cols..].fill(0.0);
        }
    } else if rsb == 1 {
        // Column-major B (transposed view): NR sequential read streams.
        if cols == NR {
            let base = p0 + j0 * csb;
            let src: [&[f32]; NR] = std::array::from_fn(|j| &b[base + j * csb..][..kc]);
            for (pp, d) in dst.chunks_exact_mut(NR).enumerate() {
                for j in 0..NR {
                    d[j] = src[j][pp];
                }
            }
        } else {
            for (pp, d) in dst.chunks_exact_mut(NR).enumerate() {
                for (j, x) in d.iter_mut().enumerate() {
                    *x = if j < cols { b[p0 + pp + (j0 + j) * csb] } else { 0.0 };
                }
            }
        }
    } else {
        for (pp, d) in dst.chunks_exact_mut(NR).enumerate() {
            let row = (p0 + pp) * rsb;
            for (j, x) in d.iter_mut().enumerate() {
                *x = if j < cols { b[row + (j0 + j) * csb] } else { 0.0 };
            }
        }
    }
}
