//! The AMX tile path.

use super::packed::{AMX_KP, NR};
use std::arch::asm;

/// The tile configuration of this thread for as long as it lives: eight tiles of
/// 16 rows × 64 bytes (0–3 accumulators, 4–5 x rows, 6–7 panel halves).
pub struct Tiles(());

#[repr(C, align(64))]
struct Config([u8; 64]);

impl Tiles {
    /// # Safety
    /// The OS must have enabled AMX for this process (`features::amx_bf16`).
    pub unsafe fn configure() -> Tiles {
        let mut cfg = Config([0; 64]);
        cfg.0[0] = 1; // palette 1
        for t in 0..8 {
            cfg.0[16 + 2 * t] = 64; // bytes per row (u16, little-endian)
            cfg.0[48 + t] = 16; // rows
        }
        // SAFETY: `cfg` is a valid 64-byte palette-1 configuration, 64-byte aligned;
        // AMX is enabled (the caller's contract).
        unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
        Tiles(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: tiles were configured by `configure` on this thread (a `Tiles` is
        // neither Send nor shared: it lives on the stack of `block`).
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// `c[32 × 32] (+)= a[32 rows × kc pairs] · panel[kc pairs × 32]`.
///
/// # Safety
/// Tiles configured on this thread ([`Tiles::configure`]); `kc % 16 == 0`; `a` holds
/// 32 rows of stride `lda` words with `kc` words each; `panel` `kc * NR` words; `c` 32
/// rows of stride `ldc` with 32 columns each.
pub unsafe fn block(kc: usize, a: &[u32], lda: usize, panel: &[u32], c: &mut [f32], ldc: usize, load_c: bool) {
    debug_assert!(kc.is_multiple_of(AMX_KP) && a.len() >= 31 * lda + kc && panel.len() >= kc * NR);
    debug_assert!(c.len() >= 31 * ldc + 32);
    let (sa, sb, sc) = (lda * 4, NR * 4, ldc * 4);
    let c0 = c.as_mut_ptr();
    // SAFETY (every tile load and store below): each touches 16 rows of 64 bytes at
    // the given stride, inside `a`, `panel` or `c` by the contract above.
    unsafe {
        let (c1, c2, c3) = (c0.add(16), c0.add(16 * ldc), c0.add(16 * ldc + 16));
        if load_c {
            asm!(
                "tileloadd tmm0, [{c0} + {s}*1]",
                "tileloadd tmm1, [{c1} + {s}*1]",
                "tileloadd tmm2, [{c2} + {s}*1]",
                "tileloadd tmm3, [{c3} + {s}*1]",
                c0 = in(reg) c0, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
                options(nostack, readonly)
            );
        } else {
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        }
        let (a0, a1, b) = (a.as_ptr(), a.as_ptr().add(16 * lda), panel.as_ptr());
        for p in (0..kc).step_by(AMX_KP) {
            asm!(
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a0.add(p), a1 = in(reg) a1.add(p),
                b0 = in(reg) b.add(p * NR), b1 = in(reg) b.add(p * NR + 16),
                sa = in(reg) sa, sb = in(reg) sb,
                options(nostack, readonly)
            );
        }
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) c0, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
            options(nostack)
        );
    }
}
