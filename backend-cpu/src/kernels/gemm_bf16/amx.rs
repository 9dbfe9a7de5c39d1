//! The AMX tile path: x packed into tile-ready blocks while it is rounded to bf16, and
//! 32 × 32 output blocks that stay in four accumulator tiles over the whole k (up to
//! [`KC_AMX`] k-pairs), stored straight to the output or through a scratch block and an
//! epilogue.
//!
//! Packed x ([`pack_rows`]): per block of [`AMX_MR`] rows and per step of [`AMX_KP`]
//! k-pairs, 32 rows of 16 words (2 KiB, contiguous), so that the two x tiles of a step are
//! two loads of stride 64 bytes from one place. Rows past `m` are zero.

use super::epilogue::{Epilogue, finish_row, tune};
use super::packed::{AMX_KP, AMX_MR, NR};
use std::arch::asm;
use std::arch::x86_64::_mm_prefetch;

/// The tile configuration of this thread for as long as it lives: eight tiles of
/// 16 rows × 64 bytes (0–3 accumulators, 4–5 x rows, 6–7 panel halves). Neither Send
/// nor Sync: the configuration belongs to the thread that made it.
pub struct Tiles(std::marker::PhantomData<*const ()>);

#[repr(C, align(64))]
struct Config([u8; 64]);

impl Tiles {
    /// # Safety
    /// The OS must have enabled AMX for this process (`features::amx_bf16`).
    pub unsafe fn configure() -> Tiles {
        // SAFETY: the caller's contract.
        unsafe { load_config() };
        Tiles(std::marker::PhantomData)
    }
}

/// Loads the one tile configuration npurt's AMX kernels use (bf16 and int8 alike): palette
/// 1, eight tiles of 16 rows × 64 bytes. Nothing releases it; see [`Tiles`] for a scope
/// that does.
///
/// # Safety
/// The OS must have enabled AMX for this process (`features::amx_bf16`).
pub unsafe fn load_config() {
    let mut cfg = Config([0; 64]);
    cfg.0[0] = 1; // palette 1
    for t in 0..8 {
        cfg.0[16 + 2 * t] = 64; // bytes per row (u16, little-endian)
        cfg.0[48 + t] = 16; // rows
    }
    // SAFETY: `cfg` is a valid 64-byte palette-1 configuration, 64-byte aligned; AMX is
    // enabled (the caller's contract).
    unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: tiles were configured by `configure` on this thread (a `Tiles` is
        // neither Send nor shared).
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Words of packed x for `rows` rows of `kp` k-pairs (`kp % AMX_KP == 0`).
pub fn packed_len(rows: usize, kp: usize) -> usize {
    rows.div_ceil(AMX_MR) * AMX_MR * kp
}

/// Packs rows `r0..r1` of the block-padded row range (rows at or past `m` are zero) of
/// `x` (`m` rows of `k` f32, `k.div_ceil(2) == kp`, `kp % AMX_KP == 0`) into their places
/// in the packed x at `dst` (all blocks, [`packed_len`]`(m, kp)` words), rounded to bf16.
/// Each row's places are its own: threads may pack different rows at the same time.
///
/// # Safety
/// `dst` is valid for writes of [`packed_len`]`(m, kp)` words; `r1 <= m.div_ceil(AMX_MR) *
/// AMX_MR`; no one else reads or writes rows `r0..r1`'s places during the call.
pub unsafe fn pack_rows(x: &[f32], m: usize, k: usize, (r0, r1): (usize, usize), kp: usize, dst: *mut u32, bf16: bool) {
    for i in r0..r1 {
        // Row `i`'s place in step `s` of its block: `at + s * AMX_MR * AMX_KP` words.
        let (b, r) = (i / AMX_MR, i % AMX_MR);
        let at = b * AMX_MR * kp + r * AMX_KP;
        let row = if i < m { &x[i * k..(i + 1) * k] } else { &[][..] };
        // Whole steps straight from the row to their places.
        let done = match bf16 {
            // SAFETY: AVX-512-BF16 (the caller's `bf16`); step `s < kp / AMX_KP` of row `i`
            // lies within `packed_len(m, kp)` words and is row `i`'s alone (contract).
            true => unsafe { super::x86::to_pairs_strided(row, dst.add(at), AMX_MR * AMX_KP) },
            false => 0,
        };
        // The rest (a partial last step, rows past `m`, no AVX-512-BF16) through a step buffer.
        for s in done..kp / AMX_KP {
            let mut step = [0u32; AMX_KP];
            let src = &row[(s * 2 * AMX_KP).min(row.len())..((s + 1) * 2 * AMX_KP).min(row.len())];
            super::convert::to_pairs(src, &mut step[..src.len().div_ceil(2)], bf16);
            // SAFETY: as above, for step `s`.
            unsafe { std::ptr::copy_nonoverlapping(step.as_ptr(), dst.add(at + s * AMX_MR * AMX_KP), AMX_KP) };
        }
    }
}

/// `c[32 × 32] = (load_c ? c : 0) + a · panel` over `kc` k-pairs: a packed x block
/// (`kc` steps of 32 rows × 16 words, see [`pack_rows`]) times a slice of a packed panel
/// (`kc * NR` words); what `ahead` names (panel data and output rows the next passes
/// read and write) is prefetched, an equal share after each step.
///
/// # Safety
/// Tiles configured on this thread ([`Tiles::configure`]); `kc % 16 == 0`, `kc > 0`; `a`
/// and `panel` hold the words above; `c` holds 32 rows of stride `ldc` with 32 columns
/// each.
pub unsafe fn block(kc: usize, a: *const u32, panel: *const u32, ahead: &Ahead, c: *mut f32, ldc: usize, load_c: bool) {
    let sc = ldc * 4;
    // SAFETY (every tile load and store below): each touches 16 rows of 64 bytes at
    // the given stride, inside `a`, `panel` or `c` by the contract above; prefetches
    // do not fault.
    unsafe {
        let (c1, c2, c3) = (c.add(16), c.add(16 * ldc), c.add(16 * ldc + 16));
        if load_c {
            asm!(
                "tileloadd tmm0, [{c0} + {s}*1]",
                "tileloadd tmm1, [{c1} + {s}*1]",
                "tileloadd tmm2, [{c2} + {s}*1]",
                "tileloadd tmm3, [{c3} + {s}*1]",
                c0 = in(reg) c, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
                options(nostack, readonly)
            );
        } else {
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        }
        let steps = kc / AMX_KP;
        // Bytes of the panel data and output lines to prefetch per step: all of them
        // over the steps.
        let step_bytes = ahead.panel_bytes.div_ceil(steps).next_multiple_of(64);
        let out_lines = 2 * ahead.out_rows;
        let step_lines = out_lines.div_ceil(steps);
        let prefetch = |s: usize| {
            let end = ((s + 1) * step_bytes).min(ahead.panel_bytes);
            let mut o = s * step_bytes;
            while o < end {
                _mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(ahead.panel.wrapping_add(o).cast::<i8>());
                o += 64;
            }
            for l in s * step_lines..((s + 1) * step_lines).min(out_lines) {
                let line = ahead.out.wrapping_add((l / 2) * ahead.out_ldc + (l % 2) * 16);
                _mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(line.cast::<i8>());
            }
        };
        let (sa, sb) = (AMX_KP * 4, NR * 4);
        // Software-pipelined: each source tile is reloaded for the next step right after
        // the last product of this step that reads it, so that the tile unit, which runs
        // in order, never waits for a whole step's loads before its first product.
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            a0 = in(reg) a, a1 = in(reg) a.add(16 * AMX_KP),
            b0 = in(reg) panel, b1 = in(reg) panel.add(16),
            sa = in(reg) sa, sb = in(reg) sb,
            options(nostack, readonly)
        );
        for s in 1..steps {
            let a0 = a.add(s * AMX_MR * AMX_KP);
            let b0 = panel.add(s * AMX_KP * NR);
            asm!(
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                a0 = in(reg) a0, a1 = in(reg) a0.add(16 * AMX_KP),
                b0 = in(reg) b0, b1 = in(reg) b0.add(16),
                sa = in(reg) sa, sb = in(reg) sb,
                options(nostack, readonly)
            );
            prefetch(s - 1);
        }
        asm!(
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            options(nostack, nomem)
        );
        prefetch(steps - 1);
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) c, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
            options(nostack)
        );
    }
}

/// What [`block`] prefetches while its products run: `panel_bytes` bytes from `panel`
/// into L2 (panel data read by a later pass) and `out_rows` rows of 32 f32 at `out`
/// (stride `out_ldc`) for writing (the output block of the next pass). Prefetches do not
/// fault: any address will do. Neither Send nor Sync (raw pointers), built per pass.
pub struct Ahead {
    pub panel: *const u8,
    pub panel_bytes: usize,
    pub out: *const f32,
    pub out_ldc: usize,
    pub out_rows: usize,
}

impl Ahead {
    /// Nothing to prefetch.
    pub const NONE: Ahead =
        Ahead { panel: std::ptr::null(), panel_bytes: 0, out: std::ptr::null(), out_ldc: 0, out_rows: 0 };
}

/// Most k-pairs per pass over a task's blocks: up to this depth (k ≤ 1024) a block's
/// accumulators stay in their tiles over the whole k; deeper products run in slices of
/// equal depth, at most this, their partial sums kept in the output between slices.
pub const KC_AMX: usize = 512;
/// Panels per group: the group's slice of the weight (`GROUP * slice * 128` bytes) stays in
/// L2 while every row block of the task passes over it.
pub const GROUP: usize = 4;

/// The k-pairs of one pass over a task's blocks for a product of `kp` k-pairs: the whole
/// k, or slices of equal depth, at most [`KC_AMX`].
pub fn slice_depth(kp: usize) -> usize {
    let max = match tune(0) {
        0 => KC_AMX,
        v => v,
    };
    kp.div_ceil(kp.div_ceil(max)).div_ceil(AMX_KP) * AMX_KP
}

/// A 32 × 32 block of f32 at stride [`NR`], 64-byte aligned: where the tiles store.
#[repr(C, align(64))]
struct Scratch([f32; AMX_MR * NR]);

/// Rows `rows` × columns `cols` of `s` (stride `NR`) written to `c` (stride `ldc`), with
/// `c`'s earlier values added where `add` says so, then `bias` (`cols` values) where given.
///
/// # Safety
/// AVX-512F; `c` holds `rows` rows of stride `ldc` with `cols <= NR` columns each, valid
/// for reads and writes; `rows <= AMX_MR`; `bias`, where given, holds `cols` values.
#[target_feature(enable = "avx512f")]
unsafe fn store(s: &Scratch, c: *mut f32, ldc: usize, rows: usize, cols: usize, add: bool, bias: Option<*const f32>) {
    use std::arch::x86_64::*;
    let m0: __mmask16 = if cols >= 16 { 0xffff } else { ((1u32 << cols) - 1) as u16 };
    let m1: __mmask16 = if cols >= 32 {
        0xffff
    } else if cols > 16 {
        ((1u32 << (cols - 16)) - 1) as u16
    } else {
        0
    };
    // SAFETY: `bias` holds `cols` values (contract), masked.
    let (b0, b1) = match bias {
        Some(b) => unsafe { (_mm512_maskz_loadu_ps(m0, b), _mm512_maskz_loadu_ps(m1, b.add(16))) },
        None => (_mm512_setzero_ps(), _mm512_setzero_ps()),
    };
    for r in 0..rows {
        // SAFETY: row `r < rows` of `s` (32 × 32) and of `c` (contract), masked to `cols`.
        unsafe {
            let (src, dst) = (s.0.as_ptr().add(r * NR), c.add(r * ldc));
            let (mut v0, mut v1) = (_mm512_load_ps(src), _mm512_load_ps(src.add(16)));
            if add {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, dst));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, dst.add(16)));
            }
            if bias.is_some() {
                v0 = _mm512_add_ps(v0, b0);
                v1 = _mm512_add_ps(v1, b1);
            }
            _mm512_mask_storeu_ps(dst, m0, v0);
            _mm512_mask_storeu_ps(dst.add(16), m1, v1);
        }
    }
}

/// Rows `rows` × columns `cols` of `c` (stride `ldc`) into `s` (stride `NR`).
///
/// # Safety
/// As for [`store`], reads only.
#[target_feature(enable = "avx512f")]
unsafe fn load(s: &mut Scratch, c: *const f32, ldc: usize, rows: usize, cols: usize) {
    use std::arch::x86_64::*;
    let m0: __mmask16 = if cols >= 16 { 0xffff } else { ((1u32 << cols) - 1) as u16 };
    let m1: __mmask16 = if cols >= 32 {
        0xffff
    } else if cols > 16 {
        ((1u32 << (cols - 16)) - 1) as u16
    } else {
        0
    };
    for r in 0..rows {
        // SAFETY: row `r` of `c` masked to `cols` (contract) and of `s`.
        unsafe {
            let (src, dst) = (c.add(r * ldc), s.0.as_mut_ptr().add(r * NR));
            _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, src));
            _mm512_store_ps(dst.add(16), _mm512_maskz_loadu_ps(m1, src.add(16)));
        }
    }
}

/// One task of the product: rows `r0..r1` of `c` (row stride `n`) times panels `p0..p1`,
/// `a` the task's rows packed by [`pack_rows`]. Per group of [`GROUP`] panels and slice of
/// k (the whole k up to [`KC_AMX`] k-pairs; for a deeper k every group under one slice
/// before the next), each row block meets each panel of the group (its x slice from L1 or
/// L2) and prefetches its share of the panel data of the next (group, slice). Every
/// block that needs only its sums (see [`Out::pass`]) is stored straight to `c`; the others
/// go through a 32 × 32 scratch block in L1: the tiles store there, and the epilogue (`ep`,
/// its GELU on `isa`) writes it to `c` with vector stores. Each pass prefetches the output
/// lines of the pass after it. After a slice that is not the last, `c` holds the partial
/// sums, loaded back for the next.
///
/// # Safety
/// Tiles configured on this thread; AVX-512F; `kp % 16 == 0`, `kp > 0`; `data` the packed
/// weight (`n.div_ceil(NR) * kp * NR` words); `c` points to the whole `[m × n]` output with
/// `r1 <= m`, valid for reads and writes, whose (rows `r0..r1` × panels `p0..p1`) block no
/// one else reads or writes during the call (other tasks may write other blocks at the
/// same time: `c` is a raw pointer so that no two tasks hold a reference to the same memory).
#[allow(clippy::too_many_arguments)]
pub unsafe fn task(
    kp: usize,
    n: usize,
    a: &[u32],
    data: &[u32],
    c: *mut f32,
    (r0, r1): (usize, usize),
    (p0, p1): (usize, usize),
    ep: Epilogue<'_>,
    isa: crate::Isa,
) {
    debug_assert!(a.len() >= packed_len(r1 - r0, kp));
    let panels = n.div_ceil(NR);
    debug_assert!(p1 <= panels && data.len() >= panels * kp * NR);
    let blocks = (r1 - r0).div_ceil(AMX_MR);
    let mut scratch = Scratch([0.0; AMX_MR * NR]);
    let out = Out { c, n, ep, isa };
    let slice = slice_depth(kp);
    // The (group, slice) units in the order they run: per group its slices, or, where k
    // has several slices, per slice every group, so that the slice of x (every row block's)
    // stays in L2 while the groups' panel slices stream past it.
    let (groups, slices) = ((p0..p1).step_by(GROUP), (0..kp).step_by(slice));
    let units: Vec<(usize, usize)> = if kp > slice && tune(6) == 0 {
        slices.flat_map(|k0| groups.clone().map(move |g0| (g0, k0))).collect()
    } else {
        groups.flat_map(|g0| slices.clone().map(move |k0| (g0, k0))).collect()
    };
    for (u, &(g0, k0)) in units.iter().enumerate() {
        let g1 = (g0 + GROUP).min(p1);
        let kc = slice.min(kp - k0);
        for b in 0..blocks {
            let i0 = r0 + b * AMX_MR;
            let ab = a[b * AMX_MR * kp + k0 * AMX_MR..].as_ptr();
            for pi in g0..g1 {
                let panel = data[pi * kp * NR + k0 * NR..].as_ptr();
                // The row blocks bring the panel data of the next unit, at this panel's
                // place in its group, towards L2, each its share of it (so that the
                // requests to memory are spread over the whole unit's products).
                let (spread, at) = match tune(5) {
                    0 => (blocks, b),
                    _ => (1, b),
                };
                let (next, bytes) = match units.get(u + 1) {
                    Some(&(ng0, nk0)) if at < spread && ng0 + (pi - g0) < (ng0 + GROUP).min(p1) => {
                        let np = ng0 + (pi - g0);
                        (data[np * kp * NR + nk0 * NR..].as_ptr(), slice.min(kp - nk0) * NR * 4)
                    }
                    _ => (std::ptr::null(), 0),
                };
                let share = bytes.div_ceil(spread).next_multiple_of(64);
                let off = (at * share).min(bytes);
                let after = match pi + 1 < g1 {
                    true => Some((i0, pi + 1)),
                    false => (b + 1 < blocks).then_some((i0 + AMX_MR, g0)),
                };
                let mut ahead = out.ahead(after, r1);
                ahead.panel = next.cast::<u8>().wrapping_add(off);
                ahead.panel_bytes = share.min(bytes - off);
                let pass = Pass { kc, k0, kp, i0, rows: AMX_MR.min(r1 - i0), pi };
                // SAFETY: `ab` holds `kc` steps of 32 rows and `panel` `kc * NR` words;
                // the block (i0, pi) lies in this task's part of `c` (contract).
                unsafe { out.pass(&mut scratch, &pass, ab, panel, &ahead) };
            }
        }
    }
}

/// Where a task's blocks go: the output (`n` columns, raw: see [`task`]) and its epilogue.
struct Out<'a> {
    c: *mut f32,
    n: usize,
    ep: Epilogue<'a>,
    isa: crate::Isa,
}

/// One pass of a 32 × 32 block over a slice of k: k-pairs `k0..k0 + kc` of `kp`, the
/// block's first row `i0` (`rows` of them in the output) and its panel `pi`.
struct Pass {
    kc: usize,
    k0: usize,
    kp: usize,
    i0: usize,
    rows: usize,
    pi: usize,
}

impl Out<'_> {
    /// Prefetches for the output block at (row `i0`, panel `pi`) where one comes next
    /// (rows up to `r1`), nothing else.
    fn ahead(&self, next: Option<(usize, usize)>, r1: usize) -> Ahead {
        match next {
            Some((i0, pi)) if tune(4) == 0 => Ahead {
                out: self.c.wrapping_add(i0 * self.n + pi * NR).cast_const(),
                out_ldc: self.n,
                out_rows: AMX_MR.min(r1 - i0),
                ..Ahead::NONE
            },
            _ => Ahead::NONE,
        }
    }

    /// Runs `p` straight between the tiles and the output or through `scratch`: the
    /// partial sums of earlier slices loaded from the
    /// output, the tiles' products over the slice (prefetching `next`), then back to the
    /// output, with the epilogue after the last slice.
    ///
    /// # Safety
    /// Tiles configured on this thread; AVX-512F; `ab` holds `p.kc` steps of 32 rows,
    /// `panel` `p.kc * NR` words; the block (rows `p.i0..p.i0 + p.rows`, panel `p.pi`) of
    /// the output is the caller's alone to read and write; `self.ep.bias` has `n` values.
    unsafe fn pass(&self, scratch: &mut Scratch, p: &Pass, ab: *const u32, panel: *const u32, ahead: &Ahead) {
        let (first, last) = (p.k0 == 0, p.k0 + p.kc >= p.kp);
        let (n, ep) = (self.n, self.ep);
        let cols = NR.min(n - p.pi * NR);
        // SAFETY: (rows × cols) from (i0, pi * NR) lies in the caller's block (contract).
        let cb = unsafe { self.c.add(p.i0 * n + p.pi * NR) };
        // A whole block whose pass needs nothing but the sums (not the first slice where
        // earlier output is added, not the last where the bias or GELU is applied) goes
        // straight between the tiles and the output: the same sums as through the scratch
        // block, without its round trip.
        let plain = (!first || !ep.acc) && (!last || (ep.bias.is_none() && !ep.gelu));
        if plain && p.rows == AMX_MR && cols == NR && tune(2) != 2 {
            // SAFETY: tiles configured; `ab`, `panel` (contract); `cb` holds 32 rows of
            // stride `n` with 32 columns each (a whole block of the caller's).
            return unsafe { block(p.kc, ab, panel, ahead, cb, n, !first) };
        }
        if !first && tune(2) != 1 {
            // SAFETY: AVX-512F (contract); `cb` as above.
            unsafe { load(scratch, cb, n, p.rows, cols) };
        }
        // SAFETY: tiles configured; `ab`, `panel` (contract); `next` is only prefetched;
        // the scratch block is 32 rows of 32 columns at stride NR.
        unsafe { block(p.kc, ab, panel, ahead, scratch.0.as_mut_ptr(), NR, !first) };
        if tune(2) == 1 {
            return;
        }
        let bias = ep.bias.filter(|_| last).map(|b| b[p.pi * NR..].as_ptr());
        // SAFETY: AVX-512F (contract); `cb` as above; `bias` has `n` values.
        unsafe { store(scratch, cb, n, p.rows, cols, first && ep.acc, bias) };
        if last && ep.gelu {
            for r in 0..p.rows {
                // SAFETY: row `r` of the block at `cb`, `cols` columns: the caller's alone
                // (contract), no other reference to it is live.
                let row = unsafe { std::slice::from_raw_parts_mut(cb.add(r * n), cols) };
                finish_row(self.isa, row, None, true);
            }
        }
    }
}
