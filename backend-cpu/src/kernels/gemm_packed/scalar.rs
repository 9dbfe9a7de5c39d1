//! The portable 4×8 micro-kernel (plain `f32` arrays; compiled on every target).

use super::layout::{ATile, Blocking, CTile, MicroKernel, Problem, impl_packing, pack_a_panel, pack_b_panel};

/// Portable 4×8 kernel.
pub(super) struct ScalarKernel;

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
        for (i, row) in acc.iter_mut().enumerate() {
            let ai = a(i, p);
            for (x, &bj) in row.iter_mut().zip(bv) {
                *x += ai * bj;
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
