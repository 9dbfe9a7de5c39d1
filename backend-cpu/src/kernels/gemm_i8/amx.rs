//! The AMX-INT8 block: 32 × 32 i32 outputs in four accumulator tiles over the whole
//! (padded) k, `tdpbssd` on s8 rows of x and s8 panel halves.

use super::pack::{KSTEP, NR};
use std::arch::asm;

/// Most k-bytes per pass over a group of panels: a 32-row block of x's slice (16 KiB) stays
/// in L1 while it meets the group's slices (16 KiB each, from L2).
pub const KC: usize = 512;
/// Panels per group: their partial sums live in 4 KiB blocks between the k-slices.
pub const GROUP: usize = 4;

/// The k-bytes of each slice for `kp` padded k-bytes: equal slices of whole steps, at most
/// [`KC`] (`kp` itself when it is no more).
pub fn slice(kp: usize) -> usize {
    if kp <= KC {
        return kp.max(KSTEP);
    }
    let n = kp.div_ceil(KC);
    kp.div_ceil(n).div_ceil(KSTEP) * KSTEP
}

/// 32 × 32 i32 sums, 64-byte aligned (one tile store of 16 rows per half). Send and Sync
/// (plain integers).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Block(pub [i32; 32 * NR]);

/// `c[32 × 32] = (load ? c : 0) + a · panel` in i32 over `kc` k-bytes: `a` 32 rows of s8
/// x (row stride `lda` bytes), `panel` a packed panel's slice (`kc / 4` rows of `NR · 4`
/// bytes); `c` is 32 rows of 32 i32 (stride 128 bytes).
///
/// # Safety
/// Tiles configured on this thread (`gemm_bf16::Tiles`); `kc % KSTEP == 0`; `a` holds 32 rows
/// of `lda ≥ kc` bytes, `panel` `kc · NR` bytes and `c` 1024 i32.
pub unsafe fn block(kc: usize, a: *const u8, lda: usize, panel: *const u8, c: *mut i32, load: bool) {
    let sb = NR * 4;
    let sc = NR * 4;
    // SAFETY (every tile load and store below): each touches 16 rows of 64 bytes at the
    // given stride, inside `a`, `panel` or `c` by the contract above.
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
        for s in 0..kc / KSTEP {
            let a0 = a.add(s * KSTEP);
            // 16 groups of 4 k-bytes per step, 128 bytes each.
            let b0 = panel.add(s * 16 * sb);
            asm!(
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbssd tmm0, tmm4, tmm6",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tdpbssd tmm1, tmm4, tmm7",
                "tdpbssd tmm2, tmm5, tmm6",
                "tdpbssd tmm3, tmm5, tmm7",
                a0 = in(reg) a0, a1 = in(reg) a0.add(16 * lda),
                b0 = in(reg) b0, b1 = in(reg) b0.add(64),
                sa = in(reg) lda, sb = in(reg) sb,
                options(nostack, readonly)
            );
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
