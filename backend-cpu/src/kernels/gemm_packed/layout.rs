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

    /// [`run`](Self::run) that also prefetches into L2, one cache line every other k
    /// step, the `kc / 2` lines (`kc · 8` floats) from `next` on: a part of the B
    /// micro-panel the macro-kernel multiplies next, fetched while this tile computes
    /// ([`macro_kernel`](super::driver::macro_kernel)).
    ///
    /// # Safety
    /// As [`run`](Self::run); `next` is only prefetched, never read.
    unsafe fn run_prefetching(kc: usize, a: ATile, b: *const f32, c: CTile, next: *const f32) {
        let _ = next;
        // SAFETY: the same contract.
        unsafe { Self::run(kc, a, b, c) }
    }

    /// The height of the kernel's short tile, 0 where it has none: that many rows (fewer
    /// than `MR`) computed from the first rows of an `MR`-row A tile, so that a row count
    /// `MR` does not divide is cut into tiles of `MR` and `SHORT_ROWS` rows ([`RowPlan`])
    /// rather than computing empty rows.
    const SHORT_ROWS: usize = 0;

    /// [`run`](Self::run) (or [`run_streaming`](Self::run_streaming) where `streaming`)
    /// for the first [`SHORT_ROWS`](Self::SHORT_ROWS) rows of the A tile only: C's tile is
    /// `SHORT_ROWS × NR`. An in-place A needs only those rows. Kernels without a short
    /// tile compute the whole tile into a stack tile and write those rows. A non-null
    /// `next` is prefetched as [`run_prefetching`](Self::run_prefetching) does (by the
    /// kernels that have a short tile).
    ///
    /// # Safety
    /// As [`run`](Self::run), with `SHORT_ROWS` rows in place of `MR` for `c` (and for an
    /// in-place `a`); a packed `a` is a whole `MR`-row panel.
    unsafe fn run_short(kc: usize, a: ATile, b: *const f32, c: CTile, streaming: bool, next: *const f32) {
        let _ = next;
        // SAFETY: the same contract, `SHORT_ROWS` rows.
        unsafe { run_partial::<Self>(kc, a, b, c, (Self::SHORT_ROWS, Self::NR), streaming) }
    }

    /// [`pack_a_panel`] with `MR = Self::MR`.
    fn pack_a(p: &Problem<'_>, i0: usize, rows: usize, p0: usize, kc: usize, dst: &mut [f32]);
    /// [`pack_b_panel`] with `NR = Self::NR`.
    fn pack_b(p: &Problem<'_>, j0: usize, cols: usize, p0: usize, kc: usize, dst: &mut [f32]);
}

/// The largest `MR × NR` tile of every kernel (AVX-512's 12×32 and 8×32 fit).
pub(super) const MAX_TILE: usize = 16 * 32;

/// `K`'s tile computed into a stack tile, of which the `rows × cols` corner is written to
/// `c` (with its alpha, beta and bias): the edge tiles of C. Where `rows` is at most
/// [`MicroKernel::SHORT_ROWS`], the short kernel computes it (an in-place A is read only
/// in those rows).
///
/// # Safety
/// As [`MicroKernel::run`] (or `run_streaming` where `streaming`), with `rows × cols`
/// (at most `MR × NR`) in place of the tile's size for `c` and its bias, and for an
/// in-place `a` `rows` rows (at least `SHORT_ROWS` of them where `rows <= SHORT_ROWS`,
/// `MR` otherwise).
pub(super) unsafe fn run_partial<K: MicroKernel + ?Sized>(
    kc: usize,
    a: ATile,
    b: *const f32,
    c: CTile,
    (rows, cols): (usize, usize),
    streaming: bool,
) {
    const { assert!(K::MR * K::NR <= MAX_TILE) };
    debug_assert!(rows <= K::MR && cols <= K::NR);
    let mut tile = [0.0f32; MAX_TILE];
    let t = CTile { c: tile.as_mut_ptr(), ldc: K::NR, alpha: 1.0, beta: 0.0, bias: std::ptr::null() };
    // SAFETY: `tile` holds MR×NR floats at row stride NR (beta = 0: not read); the A and B
    // operands are the caller's. The short kernel writes SHORT_ROWS rows of it and reads
    // SHORT_ROWS rows of an in-place A.
    unsafe {
        if K::SHORT_ROWS > 0 && rows <= K::SHORT_ROWS {
            K::run_short(kc, a, b, t, streaming, std::ptr::null())
        } else if streaming {
            K::run_streaming(kc, a, b, t)
        } else {
            K::run(kc, a, b, t)
        }
    }
    let CTile { c, ldc, alpha, beta, bias } = c;
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: a non-null bias holds `cols` floats (the contract).
            let add = if bias.is_null() { 0.0 } else { unsafe { *bias.add(j) } };
            let v = alpha * tile[i * K::NR + j] + add;
            // SAFETY: (i, j) lies in the caller's `rows × cols` region of C.
            unsafe {
                let dst = c.add(i * ldc + j);
                *dst = if beta == 0.0 { v } else { v + beta * *dst };
            }
        }
    }
}

/// How the rows of a row block (or of one item's part of it) are cut into A tiles: first
/// `full` tiles of `MR` rows, then tiles of the kernel's `SHORT_ROWS`, every tile's A
/// panel `MR` rows tall (a short one zero-padded). With no short tile, or where no such
/// cut exists, every tile is `MR` rows but the last (which may be partial). 32 rows on a
/// 6-row kernel with 5-row short tiles: 6, 6, 5, 5, 5, 5 rather than six tiles of 6 (36
/// rows computed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RowPlan {
    mr: usize,
    short: usize,
    /// Tiles of `mr` rows, before the short ones.
    full: usize,
    tiles: usize,
    rows: usize,
}

impl RowPlan {
    /// The tiles of `rows` rows for a kernel of `mr` rows and `short`-row short tiles (0: none).
    pub(super) fn new(rows: usize, mr: usize, short: usize) -> RowPlan {
        let tiles = rows.div_ceil(mr);
        // rows = full·mr + (tiles − full)·short, with 0 <= full <= tiles.
        if short > 0 && short < mr && !rows.is_multiple_of(mr) && rows >= tiles * short {
            let extra = rows - tiles * short;
            if extra.is_multiple_of(mr - short) && extra / (mr - short) <= tiles {
                return RowPlan { mr, short, full: extra / (mr - short), tiles, rows };
            }
        }
        RowPlan::uniform(rows, mr)
    }

    /// Tiles of `mr` rows only (the last may be partial).
    pub(super) fn uniform(rows: usize, mr: usize) -> RowPlan {
        let tiles = rows.div_ceil(mr);
        RowPlan { mr, short: 0, full: tiles, tiles, rows }
    }

    /// The number of tiles.
    pub(super) fn tiles(&self) -> usize {
        self.tiles
    }

    /// The rows of all tiles.
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// The first row of tile `q` (`q <= tiles`: `start(tiles)` is `rows`).
    pub(super) fn start(&self, q: usize) -> usize {
        if q >= self.tiles {
            self.rows
        } else if q <= self.full {
            q * self.mr
        } else {
            self.full * self.mr + (q - self.full) * self.short
        }
    }

    /// The rows of tile `q`.
    pub(super) fn height(&self, q: usize) -> usize {
        self.start(q + 1) - self.start(q)
    }

    /// Whether every tile is `MR` or `SHORT_ROWS` rows (none partial): an A read in place
    /// has all the rows its tiles read.
    pub(super) fn exact(&self) -> bool {
        self.rows == self.full * self.mr + (self.tiles - self.full) * self.short
    }

    /// The plan of tiles `q0..q1` (rows from `start(q0)`).
    pub(super) fn sub(&self, q0: usize, q1: usize) -> RowPlan {
        debug_assert!(q0 <= q1 && q1 <= self.tiles);
        RowPlan {
            mr: self.mr,
            short: self.short,
            full: self.full.clamp(q0, q1) - q0,
            tiles: q1 - q0,
            rows: self.start(q1) - self.start(q0),
        }
    }
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
