//! The blocked loop nest around the micro-kernels: how a product is cut into work items,
//! where the packed panels of A and B come from, and the thread-cached packing buffers.
//!
//! One product is one parallel region. Its rows are cut into row blocks whose packed A
//! (every k slice) fits [`A_SHARED_MAX`] floats (or [`A_SHARED_MAX_PER_CALL`]); within a row block, items (a column block ×
//! a row range) are handed out from an atomic counter. A's panels are packed lazily into
//! one buffer shared by the items ([`SharedPanels`]): the first item that needs a panel packs
//! it, so A is packed once per product whatever the number of column blocks, and two
//! threads starting together pack different panels. B's panels are either packed per item
//! into a thread-private buffer (the per-call product) or read in place from a matrix
//! packed once ([`BPanels::Prepacked`]).

use super::layout::{ATile, Blocking, CTile, MicroKernel, Problem, RowPlan, even_block, run_partial};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use rayon::prelude::*;

// ---------------------------------------------------------------------------------------------
// Aligned, thread-cached packing buffers
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Align64([f32; 16]);

#[derive(Default)]
struct AlignedBuf {
    v: Vec<Align64>,
}

impl AlignedBuf {
    fn with_len(len: usize) -> Self {
        let mut b = AlignedBuf::default();
        b.ensure(len);
        b
    }

    fn ensure(&mut self, len: usize) {
        let chunks = len.div_ceil(16);
        if self.v.len() < chunks {
            self.v = vec![Align64([0.0; 16]); chunks];
        }
    }

    fn as_mut_slice(&mut self) -> &mut [f32] {
        let len = self.v.len() * 16;
        // SAFETY: `Align64` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align
        // 64), so the vector's storage is exactly `len` initialised, contiguous `f32`s; the
        // returned slice borrows `self` mutably, so it is the only live reference.
        unsafe { std::slice::from_raw_parts_mut(self.v.as_mut_ptr().cast::<f32>(), len) }
    }
}

thread_local! {
    static PACK_PRIVATE: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::default());
    static PACK_SHARED: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::default());
}

/// Runs `f` with a 64-byte aligned scratch slice of at least `len` floats, taken from the
/// thread-local cache `key` (or a fresh allocation if the cache is already in use, e.g. by a
/// re-entrant call on the same thread through rayon work stealing).
fn with_buf<R>(
    key: &'static std::thread::LocalKey<RefCell<AlignedBuf>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    let mut f = Some(f);
    let cached = key.try_with(|cell| {
        cell.try_borrow_mut().ok().map(|mut buf| {
            buf.ensure(len);
            (f.take().expect("called once"))(&mut buf.as_mut_slice()[..len])
        })
    });
    match cached {
        Ok(Some(r)) => r,
        _ => {
            let mut buf = AlignedBuf::with_len(len);
            (f.take().expect("called once"))(&mut buf.as_mut_slice()[..len])
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A packed once per product, shared by its items
// ---------------------------------------------------------------------------------------------

/// At most this many floats of packed A are held at once where B is prepacked (4 MiB): a
/// row block's panels for every k slice. BERT-Large's products (k ≤ 4096) fit 256 rows or
/// more per row block; each row block reads the packed B once more.
const A_SHARED_MAX: usize = 1 << 20;

/// The same where B is packed per call (16 MiB): each row block packs B once more, which
/// costs more than reading it, so row blocks are larger (512 rows at k = 4096).
const A_SHARED_MAX_PER_CALL: usize = 1 << 22;

const UNPACKED: u8 = 0;
const PACKING: u8 = 1;
const PACKED: u8 = 2;
const POISONED: u8 = 3;

/// The packed A panels of one row block, for every k slice, filled on first use.
///
/// Slice `s` (k rows `pc = s·kc_max ..`) holds `panels` MR-panels of `kc × MR` floats at
/// `pc · panels · MR`; each (slice, panel) has a state in `state`. Concurrent use: any
/// number of jobs may call [`SharedPanels::get`] at once; a panel is written by the one job
/// that claimed it, and read only after its state says it is packed (release/acquire).
struct SharedPanels<'a> {
    buf: *mut f32,
    len: usize,
    mr: usize,
    panels: usize,
    kc_max: usize,
    state: &'a [AtomicU8],
}

// The buffer outlives every job (jobs are joined before the owning `with_buf` returns).
// SAFETY: it is written only through disjoint panels, each by the job that won its claim,
// and read only after that panel's release store of `PACKED` was observed with acquire.
unsafe impl Sync for SharedPanels<'_> {}

/// Marks a claimed panel poisoned if its packing unwinds, so that waiters panic instead of
/// spinning forever.
struct ClaimGuard<'a>(&'a AtomicU8);

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if self.0.load(Ordering::Relaxed) == PACKING {
            self.0.store(POISONED, Ordering::Release);
        }
    }
}

impl SharedPanels<'_> {
    /// The packed panels `q0..q1` of the k slice starting at `pc` (depth `kc`), as one
    /// contiguous slice; panels no job has claimed yet are packed here with `pack(q, dst)`
    /// first, then those another job is packing are waited for.
    fn get(&self, q0: usize, q1: usize, pc: usize, kc: usize, pack: impl Fn(usize, &mut [f32])) -> &[f32] {
        let s = pc / self.kc_max;
        let panel_len = kc * self.mr;
        let base = pc * self.panels * self.mr;
        let state = &self.state[s * self.panels..(s + 1) * self.panels];
        for (q, st) in state.iter().enumerate().take(q1).skip(q0) {
            if st.compare_exchange(UNPACKED, PACKING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                let guard = ClaimGuard(st);
                let off = base + q * panel_len;
                assert!(off + panel_len <= self.len, "packed A panel outside its buffer");
                // SAFETY: the region `off..off+panel_len` is inside the buffer (asserted) and
                // belongs to panel `q` of slice `s` only; this job won its claim, so no other
                // job writes it, and none reads it before the `PACKED` store below.
                let dst = unsafe { std::slice::from_raw_parts_mut(self.buf.add(off), panel_len) };
                pack(q, dst);
                st.store(PACKED, Ordering::Release);
                std::mem::forget(guard);
            }
        }
        for st in &state[q0..q1] {
            let mut spins = 0u32;
            loop {
                match st.load(Ordering::Acquire) {
                    PACKED => break,
                    POISONED => panic!("sgemm: another job panicked while packing A"),
                    _ if spins < 128 => std::hint::spin_loop(),
                    _ => std::thread::yield_now(),
                }
                spins = spins.saturating_add(1);
            }
        }
        let (off, len) = (base + q0 * panel_len, (q1 - q0) * panel_len);
        assert!(off + len <= self.len, "packed A panels outside their buffer");
        // SAFETY: in bounds (asserted); every panel in the range is `PACKED` (observed with
        // acquire ordering above), so its writes are visible and none is written again.
        unsafe { std::slice::from_raw_parts(self.buf.add(off), len) }
    }
}

// ---------------------------------------------------------------------------------------------
// Driver
// ---------------------------------------------------------------------------------------------

/// Where a product's B panels come from.
#[derive(Clone, Copy)]
pub(super) enum BPanels<'a> {
    /// Packed per item from the problem's `b`, into a thread-private buffer.
    PerCall,
    /// Packed once by [`super::pack_b`]: slice after slice of at most `kc_max` rows, each of
    /// `n.div_ceil(NR)` panels.
    Prepacked(&'a [f32]),
    /// A bf16 weight in the bf16 product's k-pair panels (`[n.div_ceil(32)][kp][32]` words,
    /// the low half of a word the even k, the high half the odd one; `NR` is 32), widened to
    /// f32 per item into a thread-private buffer as B is packed per call (`kc_max` even).
    Bf16Pairs { words: &'a [u32], kp: usize },
}

/// Where an item's A micro-panels come from.
#[derive(Clone, Copy)]
pub(super) enum APanels<'a> {
    /// Packed panels of `kc × MR` floats, one after the other.
    Packed(&'a [f32]),
    /// A itself, row-major: the slice starts at the item's first row and k column, rows
    /// `lda` floats apart.
    InPlace { a: &'a [f32], lda: usize },
}

/// Raw pointer to C shared between worker jobs; each job writes a disjoint set of tiles.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: the pointer is only dereferenced inside `macro_kernel`, and tasks handed to different
// threads cover disjoint (row range × column range) regions of C, so there are no data races;
// the pointee outlives every job because jobs are joined before `drive` returns.
unsafe impl Send for CPtr {}
// SAFETY: see `Send` above; sharing `&CPtr` only shares the address.
unsafe impl Sync for CPtr {}

impl CPtr {
    /// Accessor (so closures capture the `Sync` wrapper, not the raw field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Work items per thread when B is prepacked, so that a thread the host delays costs at most
/// a fraction of the product: the others take its remaining items. Where B is packed per
/// call, every row range of a column block packs that block again, so the per-call product
/// has one item per thread.
const ITEMS_PER_THREAD_PREPACKED: usize = 4;

/// Blocked GEMM `C = alpha·A·B + beta·C (+ bias on the rows)` for kernel `K`, k cut into
/// slices of `kc_max`. Requires `m, n, k > 0`, `alpha != 0`, and the slice preconditions of
/// [`Sgemm`](super::Sgemm) (C's checked by the caller).
///
/// Loop nest: per row block (see the module), items of one column block (at most `NC`
/// wide, a multiple of `threads` of them when n allows) × one row range go to the jobs; an
/// item runs every k slice of its tile: its A panels from the shared lazily packed A, its B
/// panels packed into its own buffer (L2-resident) or read from the prepacked B, then the
/// macro-kernel (for every A micro-panel, L1-resident, sweep all B micro-panels).
///
/// # Safety
/// The CPU supports `K`'s target features; a [`BPanels::Prepacked`] slice holds
/// `k × n.div_ceil(NR) × NR` floats in [`super::PackedBLayout`] order for slices of `kc_max`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn drive<K: MicroKernel>(
    p: &Problem<'_>,
    blk: Blocking,
    kc_max: usize,
    b: BPanels<'_>,
    bias: Option<&[f32]>,
    c: &mut [f32],
    threads: usize,
) {
    let (m, n, k) = (p.m, p.n, p.k);
    let (mr, nr) = (K::MR, K::NR);
    let n_pad = n.div_ceil(nr) * nr;
    // Items per thread, the bound on the shared packed A, and whether items pack B.
    let (per_thread, a_max, packs_b) = match b {
        BPanels::PerCall => (1, A_SHARED_MAX_PER_CALL, true),
        BPanels::Prepacked(_) => (ITEMS_PER_THREAD_PREPACKED, A_SHARED_MAX, false),
        BPanels::Bf16Pairs { .. } => {
            assert!(nr == WIDEN_NR && kc_max.is_multiple_of(2), "bf16 pairs need 32-wide panels and even k slices");
            (1, A_SHARED_MAX_PER_CALL, true)
        }
    };
    let want = if threads > 1 { threads * per_thread } else { 1 };
    // Items split N first: an item reads its B block from memory once for all its rows,
    // and jobs that split the rows of one B block would each read it from memory (a
    // core's L2 does not feed the other's). Rows are split only where N has too few panels.
    let mut nb = n.div_ceil(blk.nc.max(nr));
    if threads > 1 {
        nb = nb.max(want).next_multiple_of(threads).min(n_pad / nr);
    }
    let ncb = n.div_ceil(nb).next_multiple_of(nr);
    let nb = n.div_ceil(ncb);
    // Row blocks: at most MC rows, and their packed A (every k slice) within A_SHARED_MAX.
    let fit = (a_max / k / mr * mr).max(mr);
    let rb_max = even_block(m, blk.mc.min(fit), mr);
    let rb_panels = rb_max.div_ceil(mr);
    let slices = k.div_ceil(kc_max);
    let b_len = if packs_b { ncb.min(n_pad) * kc_max } else { 0 };
    let cptr = CPtr(c.as_mut_ptr());
    // The tiles of a row block: MR rows, and the kernel's short tiles where MR does not
    // divide the rows (every row block but the last is a multiple of MR).
    let plan = |rows: usize| RowPlan::new(rows, mr, K::SHORT_ROWS);
    // A row-major A whose rows fill every tile is read in place: packing would copy it
    // once per product for no gain in the kernel (its MR rows stay in L1 as a packed
    // panel would; on Zen 4, row strides of 4 KiB multiples, k = 1024 and 4096, ran as
    // fast in place as packed). Where short tiles fill them, only while every item's A
    // tiles stay in L1 one at a time (fewer than `B_IN_L1_MIN_PANELS`): on Zen 3 (one
    // thread, alternated) 32 rows gained 4–7 % in place, 512 rows (A streamed from L2 in
    // the other order, rows 4 KiB apart) lost 5–15 %.
    let last_block = m - (m - 1) / rb_max * rb_max;
    let short_in_place = m.div_ceil(mr) < B_IN_L1_MIN_PANELS && plan(m.min(rb_max)).exact() && plan(last_block).exact();
    let in_place = p.csa == 1 && (m % mr == 0 || short_in_place);
    let a_len = if in_place { 0 } else { rb_panels * mr * k };
    let state: Vec<AtomicU8> = (0..rb_panels * slices).map(|_| AtomicU8::new(UNPACKED)).collect();

    with_buf(&PACK_SHARED, a_len, |abuf| {
        for r0 in (0..m).step_by(rb_max) {
            let rows = rb_max.min(m - r0);
            let block = plan(rows);
            let m_panels = block.tiles();
            if r0 > 0 {
                // The previous row block's jobs are joined: nobody reads these any more.
                state.iter().for_each(|s| s.store(UNPACKED, Ordering::Relaxed));
            }
            let shared =
                SharedPanels { buf: abuf.as_mut_ptr(), len: abuf.len(), mr, panels: m_panels, kc_max, state: &state };
            let ms = want.div_ceil(nb).min(m_panels).max(1);
            let panels_per = m_panels.div_ceil(ms);
            let ms = m_panels.div_ceil(panels_per);
            let items = nb * ms;
            let jobs = if threads > 1 { threads.min(items) } else { 1 };

            let run_item = |t: usize, bbuf: &mut [f32]| {
                // Row ranges vary fastest: jobs starting together pack different A panels.
                let (jb, ib) = (t / ms, t % ms);
                let j0 = jb * ncb;
                let cols = ncb.min(n - j0);
                let np = cols.div_ceil(nr);
                let q0 = ib * panels_per;
                let tiles = block.sub(q0, m_panels.min(q0 + panels_per));
                let i0 = block.start(q0);
                let irows = tiles.rows();
                for pc in (0..k).step_by(kc_max) {
                    let kc = kc_max.min(k - pc);
                    let apanels = if in_place {
                        let start = (r0 + i0) * p.rsa + pc;
                        APanels::InPlace { a: &p.a[start..start + (irows - 1) * p.rsa + kc], lda: p.rsa }
                    } else {
                        APanels::Packed(shared.get(q0, q0 + tiles.tiles(), pc, kc, |q, dst| {
                            K::pack_a(p, r0 + block.start(q), block.height(q), pc, kc, dst)
                        }))
                    };
                    let bpanels: &[f32] = match b {
                        BPanels::Prepacked(bp) => &bp[pc * n_pad + j0 * kc..][..np * kc * nr],
                        BPanels::PerCall => {
                            let dst = &mut bbuf[..np * kc * nr];
                            for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
                                K::pack_b(p, j0 + q * nr, nr.min(cols - q * nr), pc, kc, panel);
                            }
                            dst
                        }
                        BPanels::Bf16Pairs { words, kp } => {
                            let dst = &mut bbuf[..np * kc * nr];
                            for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
                                // Rows `pc..pc + kc` of panel `j0 / nr + q` (`pc` is even).
                                let src = &words[((j0 / nr + q) * kp + pc / 2) * nr..][..kc.div_ceil(2) * nr];
                                widen_pairs(src, kc, panel);
                            }
                            dst
                        }
                    };
                    let beta = if pc == 0 { p.beta } else { 1.0 };
                    let last = pc + kc >= k;
                    // The bf16 words read after this slice, fetched into L2 while it computes:
                    // this item's next slice, or after its last the first slice of the item
                    // this job most likely takes next (the counter hands items out in turn),
                    // as the word of its first panel's slice and its number of panels.
                    let next = match b {
                        BPanels::Bf16Pairs { words, kp } => {
                            let (t2, pc2) = if !last { (t, pc + kc) } else { (t + jobs, 0) };
                            (t2 < items).then(|| {
                                let j2 = t2 / ms * ncb;
                                (words, kp, (j2 / nr * kp + pc2 / 2) * nr, ncb.min(n - j2).div_ceil(nr))
                            })
                        }
                        _ => None,
                    };
                    // Two tiles per panel: each prefetches `kc / 2` lines, and a panel slice's
                    // words are `kc` lines. Addresses past the words are never formed.
                    let ahead = |q: usize| -> *const f32 {
                        let Some((words, kp, first, panels)) = next else { return std::ptr::null() };
                        let (panel, half) = (q / 2, q % 2);
                        if panel >= panels {
                            return std::ptr::null();
                        }
                        let at = first + panel * kp * nr + half * kc * 8;
                        words.get(at..).map_or(std::ptr::null(), |w| w.as_ptr().cast())
                    };
                    // `apanels` holds the A panels of `tiles` (rows `r0+i0..+irows`), `bpanels`
                    // the `np` B panels of columns `j0..j0+cols`, both of depth `kc`.
                    // SAFETY: `K` is supported (our precondition); that C region lies inside
                    // `c` (checked by the caller) and is written by this item only.
                    unsafe {
                        macro_kernel::<K, true>(
                            kc,
                            apanels,
                            tiles,
                            bpanels,
                            cols,
                            cptr.get().add((r0 + i0) * p.ldc + j0),
                            p.ldc,
                            p.alpha,
                            beta,
                            bias.filter(|_| last).map(|v| &v[j0..]),
                            matches!(b, BPanels::Prepacked(_)),
                            ahead,
                        )
                    };
                }
            };
            share_items(threads, items, &PACK_PRIVATE, b_len, run_item);
        }
    });
}

/// The panel width of [`BPanels::Bf16Pairs`]' words.
pub(super) const WIDEN_NR: usize = 32;

/// `dst[r][j]` (rows of [`WIDEN_NR`] floats) = the bf16 of row `r` of `src`'s k-pair rows
/// widened to f32: the low half of word `src[r / 2][j]` for even `r`, the high half for odd.
fn widen_pairs(src: &[u32], rows: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::features::get().isa == crate::features::Isa::Avx512 {
        // SAFETY: AVX-512F was detected.
        return unsafe { widen_pairs_avx512(src, rows, dst) };
    }
    widen_pairs_any(src, rows, dst)
}

/// [`widen_pairs`] compiled for AVX-512 (two loads, four shifts or masks, four stores per
/// pair of rows).
///
/// # Safety
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn widen_pairs_avx512(src: &[u32], rows: usize, dst: &mut [f32]) {
    widen_pairs_any(src, rows, dst)
}

#[inline(always)]
fn widen_pairs_any(src: &[u32], rows: usize, dst: &mut [f32]) {
    const W: usize = WIDEN_NR;
    let dst = &mut dst[..rows * W];
    for (pair, d) in src.chunks_exact(W).zip(dst.chunks_mut(2 * W)) {
        let (lo, hi) = d.split_at_mut(W.min(d.len()));
        for (o, w) in lo.iter_mut().zip(pair) {
            *o = f32::from_bits(w << 16);
        }
        for (o, w) in hi.iter_mut().zip(pair) {
            *o = f32::from_bits(w & 0xffff_0000);
        }
    }
}

/// Runs `work(item, scratch)` for every item in `0..items`: on the calling thread when
/// `threads <= 1`, otherwise on up to `threads` jobs of the current rayon pool that take
/// items from one atomic counter. Each job gets a scratch buffer of `len` floats from the
/// thread-local cache `key`.
fn share_items(
    threads: usize,
    items: usize,
    key: &'static std::thread::LocalKey<RefCell<AlignedBuf>>,
    len: usize,
    work: impl Fn(usize, &mut [f32]) + Sync,
) {
    if threads > 1 && items > 1 {
        let next = AtomicUsize::new(0);
        (0..threads.min(items)).into_par_iter().for_each(|_| {
            with_buf(key, len, |buf| {
                loop {
                    let t = next.fetch_add(1, Ordering::Relaxed);
                    if t >= items {
                        break;
                    }
                    work(t, buf);
                }
            })
        });
    } else {
        with_buf(key, len, |buf| (0..items).for_each(|t| work(t, buf)));
    }
}

/// The bytes of A one B micro-panel meets while it stays in L1 ([`MicroKernel::B_PANEL_IN_L1`]):
/// a quarter of a 1 MiB L2, beside the item's B block.
const A_L2_BYTES: usize = 256 << 10;

/// The fewest A micro-panels an item has for [`MicroKernel::B_PANEL_IN_L1`]'s order to be
/// taken: on Zen 4 (AVX2 path, alternated runs) it gained at m = 512 (BERT-Large s512:
/// 0.97) but lost at m = 128 and 32 (BERT-base s128: 1.06, MiniLM s32: 1.07), where the
/// item's few A panels are reused by too few B panels to be worth streaming (22 panels at
/// m = 128). 28 rather than 32 takes in the row blocks of 174 rows (29 panels) that a
/// k = 4096 product gets under [`A_SHARED_MAX`]: 512×4096×1024 prepacked 68–69 → 74 %
/// (6 rounds in each order).
pub(super) const B_IN_L1_MIN_PANELS: usize = 28;

/// Floats of the next B micro-panel one tile prefetches per k step of its depth `kc`
/// ([`MicroKernel::run_prefetching`]: a cache line every other step).
const NEXT_PANEL_PART: usize = 8;

/// Multiplies packed A (the tiles of `plan`, in MR-panels) by packed B (`cols` valid
/// columns in NR-panels) into C at `c` (row stride `ldc`). Where `STREAM` (the B panels
/// may come from memory), the first A tile meets each B micro-panel through
/// [`MicroKernel::run_streaming`]; every other tile runs [`MicroKernel::run`] (or the
/// short tile's [`MicroKernel::run_short`]). Where also `b_from_memory` (a prepacked
/// weight; the AVX-512 kernels), the B micro-panels are taken one after the other, each
/// against every A tile, the tiles after the first prefetching the next panel into L2
/// ([`MicroKernel::run_prefetching`]). Otherwise (the A-tile order) the `q`-th tile after
/// the first tile row (`q = (ip - 1) · panels + jp`) prefetches into L2 the `kc / 2` cache
/// lines from `ahead(q)` (none where it is null): what the caller reads after this call,
/// fetched while the tiles compute (the widened bf16 product passes the words of its next
/// k slice, which it would otherwise read from memory while no tile computes).
///
/// # Safety
/// `K` is supported by the CPU; `c` is valid for reads/writes of `plan.rows() × cols` at
/// stride `ldc` and not accessed concurrently; `apanels`/`bpack` hold `plan.tiles()` /
/// `ceil(cols/NR)` panels of depth `kc` (an in-place A: `plan.rows()` rows of `kc` floats,
/// every tile whole: [`RowPlan::exact`]); the addresses `ahead` gives are only prefetched,
/// never read.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) unsafe fn macro_kernel<K: MicroKernel, const STREAM: bool>(
    kc: usize,
    apanels: APanels<'_>,
    plan: RowPlan,
    bpack: &[f32],
    cols: usize,
    c: *mut f32,
    ldc: usize,
    alpha: f32,
    beta: f32,
    bias: Option<&[f32]>,
    b_from_memory: bool,
    ahead: impl Fn(usize) -> *const f32,
) {
    let (mr, nr) = (K::MR, K::NR);
    let rows = plan.rows();
    debug_assert!(bias.is_none_or(|b| b.len() >= cols));
    match apanels {
        APanels::Packed(ap) => assert!(ap.len() >= plan.tiles() * mr * kc, "packed A shorter than its panels"),
        APanels::InPlace { a, lda } => {
            assert!(plan.exact() && a.len() >= (rows - 1) * lda + kc, "in-place A out of bounds")
        }
    }
    debug_assert!(bpack.len() >= cols.div_ceil(nr) * nr * kc);
    // The A tile of panel `ip` (rows `plan.start(ip)..`): in bounds, asserted above.
    let a_tile = |ip: usize| match apanels {
        APanels::Packed(ap) => ATile::Packed(ap[ip * mr * kc..].as_ptr()),
        APanels::InPlace { a, lda } => ATile::InPlace { a: a[plan.start(ip) * lda..].as_ptr(), lda },
    };
    // The first tile of each B micro-panel meets it first, maybe from memory.
    let tile_op = |ip: usize, jp: usize, bp: &[f32], next: *const f32| {
        let first = STREAM && ip == 0;
        let (i, j) = (plan.start(ip), jp * nr);
        let b = bp.as_ptr();
        let (mv, nv) = (plan.height(ip), nr.min(cols - j));
        // SAFETY: (i, j) is inside the rows × cols region (i < rows, j < cols).
        let cij = unsafe { c.add(i * ldc + j) };
        let bias = bias.map_or(std::ptr::null(), |b| b[j..j + nv].as_ptr());
        let c = CTile { c: cij, ldc, alpha, beta, bias };
        // The A tile holds the tile's rows of `kc` (asserted above: a whole MR-panel, or in
        // place `mv` rows, MR or SHORT_ROWS of them, the plan being exact), `bp` a whole B
        // panel; the `mv × nv` tile of C is inside the region, which only this item writes;
        // a bias holds the tile's `nv` columns.
        // SAFETY: `K`'s features are this function's precondition; the operands as listed.
        unsafe {
            if nv == nr && mv == mr {
                if first {
                    K::run_streaming(kc, a_tile(ip), b, c)
                } else if !next.is_null() {
                    K::run_prefetching(kc, a_tile(ip), b, c, next)
                } else {
                    K::run(kc, a_tile(ip), b, c)
                }
            } else if nv == nr && mv == K::SHORT_ROWS {
                K::run_short(kc, a_tile(ip), b, c, first, next)
            } else {
                run_partial::<K>(kc, a_tile(ip), b, c, (mv, nv), first)
            }
        }
    };
    let b_panels = || bpack.chunks_exact(kc * nr).take(cols.div_ceil(nr)).enumerate();
    let a_panels = plan.tiles();
    if STREAM && b_from_memory && !K::B_PANEL_IN_L1 {
        // B may come from memory (a prepacked weight): each B micro-panel meets every A tile in
        // turn, and tiles 1, 2, … each prefetch into L2 a part of the next panel
        // ([`NEXT_PANEL_PART`]), so that only an item's first panel is fetched while a tile
        // waits on it. A-tile order (below) touched every panel in the first tile row: on
        // Emerald Rapids, one thread, B from a new place of a 256 MiB set each call, 128 × 288
        // ran at 142 GFLOP/s that way against 167 with B in cache, and at 160 this way. B
        // packed per call lies in L2 already, and there the other order wins (`bench peak
        // --kernels`, B in cache: 97 % of the one-thread peak that way, 89 % this way).
        let np = cols.div_ceil(nr);
        let parts = nr.div_ceil(NEXT_PANEL_PART);
        for (jp, bp) in b_panels() {
            for ip in 0..a_panels {
                let next = if (1..=parts).contains(&ip) && jp + 1 < np {
                    bpack[(jp + 1) * kc * nr + (ip - 1) * NEXT_PANEL_PART * kc..].as_ptr()
                } else {
                    std::ptr::null()
                };
                tile_op(ip, jp, bp, next);
            }
        }
        return;
    }
    // Chunks of A panels, each swept against every B micro-panel. One panel per chunk: that
    // A micro-panel stays in L1 while the B micro-panels stream from L2. Where B's panel is
    // kept in L1 instead, a chunk is the A panels of at most A_L2_BYTES, which stream from
    // L2 past each B micro-panel.
    let chunk =
        if K::B_PANEL_IN_L1 && a_panels >= B_IN_L1_MIN_PANELS { (A_L2_BYTES / 4 / (kc * mr)).max(1) } else { 1 };
    let np = cols.div_ceil(nr);
    for i0 in (0..a_panels).step_by(chunk) {
        for (jp, bp) in b_panels() {
            for ip in i0..a_panels.min(i0 + chunk) {
                let next = if ip > 0 { ahead((ip - 1) * np + jp) } else { std::ptr::null() };
                tile_op(ip, jp, bp, next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panels<'a>(buf: &'a mut [f32], state: &'a [AtomicU8], panels: usize) -> SharedPanels<'a> {
        SharedPanels { buf: buf.as_mut_ptr(), len: buf.len(), mr: 2, panels, kc_max: 3, state }
    }

    /// Four threads asking for overlapping panels: each panel is packed exactly once and
    /// every caller sees its contents.
    #[test]
    fn each_panel_is_packed_once_under_concurrent_use() {
        let (np, k) = (16, 6);
        let mut buf = vec![f32::NAN; np * 2 * k];
        let state: Vec<AtomicU8> = (0..np * 2).map(|_| AtomicU8::new(UNPACKED)).collect();
        let packs = AtomicUsize::new(0);
        let shared = panels(&mut buf, &state, np);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (shared, packs) = (&shared, &packs);
                s.spawn(move || {
                    for pc in [0, 3] {
                        let (q0, q1) = (t * 3, (t * 3 + 8).min(np));
                        let got = shared.get(q0, q1, pc, 3, |q, dst| {
                            packs.fetch_add(1, Ordering::Relaxed);
                            dst.fill((pc * 100 + q) as f32);
                        });
                        for (i, x) in got.iter().enumerate() {
                            assert_eq!(*x, (pc * 100 + q0 + i / 6) as f32);
                        }
                    }
                });
            }
        });
        // Panels 0..16 of both slices were asked for (t*3..t*3+8 for t < 4 covers 0..17).
        assert_eq!(packs.load(Ordering::Relaxed), 2 * np);
    }

    /// A packing that unwinds poisons its panel: a later caller panics instead of spinning.
    #[test]
    fn a_panicking_pack_poisons_its_panel() {
        let mut buf = vec![0.0f32; 2 * 2 * 3];
        let state: Vec<AtomicU8> = (0..2).map(|_| AtomicU8::new(UNPACKED)).collect();
        let shared = panels(&mut buf, &state, 2);
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.get(0, 2, 0, 3, |q, _| assert!(q != 1, "packing panel 1 fails"));
        }));
        assert!(first.is_err());
        assert_eq!(state[0].load(Ordering::Relaxed), PACKED);
        assert_eq!(state[1].load(Ordering::Relaxed), POISONED);
        let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.get(1, 2, 0, 3, |_, _| {});
        }));
        let msg = second.expect_err("a poisoned panel must panic");
        let msg = msg.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(msg.contains("another job panicked"), "{msg}");
    }
}
