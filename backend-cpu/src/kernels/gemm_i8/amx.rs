//! The AMX-INT8 block: 32 × 32 i32 outputs in four accumulator tiles over the whole
//! (padded) k, `tdpbssd` on a tile-ready block of s8 x rows and s8 panel halves, the tile
//! loads software-pipelined and the next panel prefetched into L2 while it runs.

use super::pack::{GROUP_ROWS, KSTEP, NR};
use std::arch::asm;
use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};

/// Panels per group: the group's panel slices (`GROUP · slice · 32` bytes) stay in L2
/// while every row block of the task passes over them; the first row block prefetches what
/// the group reads next.
pub const GROUP: usize = 4;

/// Most k-bytes per pass over a group of panels: up to this depth (every BERT shape) a
/// block's sums stay in the tiles over the whole k, its x block read from L2 for each
/// panel of the group (measured no slower than slices of 1024 bytes at k = 3072); deeper
/// products run in equal slices of at most this, their sums parked between slices.
pub const KC: usize = 4096;

/// The k-bytes of each pass for `kp` padded k-bytes: `kp` itself up to [`KC`], else equal
/// slices of whole steps, at most [`KC`].
pub fn slice(kp: usize) -> usize {
    kp.div_ceil(kp.div_ceil(KC).max(1)).div_ceil(KSTEP) * KSTEP
}

/// 32 × 32 i32 sums, 64-byte aligned (one tile store of 16 rows per half). Send and Sync
/// (plain integers).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Block(pub [i32; 32 * NR]);

/// `c[32 × 32] = (load ? c : 0) + a · panel` in i32 over `kc` k-bytes: `a` a tile-ready
/// block of 32 rows of s8 x (per step of [`KSTEP`] k-bytes, 32 rows of 64 bytes:
/// `pack::QuantisedX`'s blocked form), `panel` a packed panel's slice (`kc / 4` rows of
/// `NR · 4` bytes); `c` 32 rows of 32 i32 (stride 128 bytes). `next`, when not null, is
/// where panel data read soon after starts: `kc · NR` bytes of it are prefetched into L2,
/// a step's worth per step.
///
/// # Safety
/// Tiles configured on this thread (`gemm_bf16::Tiles`); `kc % KSTEP == 0`, `kc > 0`; `a`
/// holds `32 · kc` bytes, `panel` `kc · NR` bytes and `c` 1024 i32.
pub unsafe fn block(kc: usize, a: *const u8, panel: *const u8, next: *const u8, c: *mut i32, load: bool) {
    let (sa, sb, sc) = (64usize, NR * 4, NR * 4);
    // Bytes of x and of the panel per step.
    let (step_a, step_b) = (GROUP_ROWS * KSTEP, KSTEP * NR);
    let steps = kc / KSTEP;
    // SAFETY (every tile load and store below): each touches 16 rows of 64 bytes at the
    // given stride, inside `a`, `panel` or `c` by the contract above; prefetches do not
    // fault.
    unsafe {
        if load {
            asm!(
                "tileloadd tmm0, [{c0} + {s}*1]",
                "tileloadd tmm1, [{c1} + {s}*1]",
                "tileloadd tmm2, [{c2} + {s}*1]",
                "tileloadd tmm3, [{c3} + {s}*1]",
                c0 = in(reg) c, c1 = in(reg) c.add(16), c2 = in(reg) c.add(16 * NR), c3 = in(reg) c.add(16 * NR + 16),
                s = in(reg) sc,
                options(nostack, readonly)
            );
        } else {
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        }
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            a0 = in(reg) a, a1 = in(reg) a.add(16 * 64),
            b0 = in(reg) panel, b1 = in(reg) panel.add(64),
            sa = in(reg) sa, sb = in(reg) sb,
            options(nostack, readonly)
        );
        // Software-pipelined: each source tile is reloaded for the next step right after
        // the last product of this step that reads it (the tile unit runs in order).
        for s in 1..steps {
            let a0 = a.add(s * step_a);
            let b0 = panel.add(s * step_b);
            asm!(
                "tdpbssd tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm4, tmm7",
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tdpbssd tmm2, tmm5, tmm6",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tdpbssd tmm3, tmm5, tmm7",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                a0 = in(reg) a0, a1 = in(reg) a0.add(16 * 64),
                b0 = in(reg) b0, b1 = in(reg) b0.add(64),
                sa = in(reg) sa, sb = in(reg) sb,
                options(nostack, readonly)
            );
            if !next.is_null() {
                prefetch(next.wrapping_add((s - 1) * step_b), step_b);
            }
        }
        asm!(
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            options(nostack, nomem)
        );
        if !next.is_null() {
            prefetch(next.wrapping_add((steps - 1) * step_b), step_b);
        }
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) c, c1 = in(reg) c.add(16), c2 = in(reg) c.add(16 * NR), c3 = in(reg) c.add(16 * NR + 16),
            s = in(reg) sc,
            options(nostack)
        );
    }
}

/// Brings `len` bytes from `p` towards L2 (a hint: never faults).
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    for o in (0..len).step_by(64) {
        // SAFETY: a prefetch reads nothing architecturally and does not fault.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(o).cast()) };
    }
}
