//! The packed GEMM against an f64 reference, on every path this CPU runs.

use super::entry::run_blocked;
use super::layout::{Blocking, MicroKernel, Problem, RowPlan, even_block, min_len, pack_a_panel};
use super::operands::{BMatrix, Sgemm, Strided};
use super::packed_b::{PackedBLayout, pack_b};
use super::paths::{all_supported, kernel_name, supported};
#[cfg(target_arch = "x86_64")]
use super::x86;
use crate::features::{self, Isa};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The product through the one entry point, on `isa`, B strided.
#[allow(clippy::too_many_arguments)]
fn sgemm_on(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    (a, rsa, csa): (&[f32], usize, usize),
    (b, rsb, csb): (&[f32], usize, usize),
    beta: f32,
    (c, ldc): (&mut [f32], usize),
    threads: usize,
    blocking: Option<Blocking>,
) {
    let a = Strided { data: a, rs: rsa, cs: csa };
    let b = BMatrix::Strided(Strided { data: b, rs: rsb, cs: csb });
    run_blocked(Sgemm { isa, m, n, k, alpha, a, b, beta, bias: None, c, ldc, threads }, blocking);
}

/// [`sgemm_on`] on the path the CPU features select (no blocking override).
#[allow(clippy::too_many_arguments)]
fn sgemm(
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
    let isa = features::get().isa;
    sgemm_on(isa, (m, n, k), alpha, (a, rsa, csa), (b, rsb, csb), beta, (c, ldc), threads, None);
}

/// The product with B packed once by [`pack_b`] in `layout`, on the layout's path.
#[allow(clippy::too_many_arguments)]
fn sgemm_prepacked(
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
    let isa = Isa::ALL.into_iter().find(|&i| layout.is_for(i)).expect("a layout is for one path");
    let (n, k) = (layout.n, layout.k);
    let a = Strided { data: a, rs: rsa, cs: csa };
    let b = BMatrix::Packed { layout, data: b };
    run_blocked(Sgemm { isa, m, n, k, alpha, a, b, beta: 0.0, bias, c, ldc, threads }, None);
}

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
    sgemm_on(isa, (m, n, k), alpha, (&a, rsa, csa), (&b, rsb, csb), beta, (&mut c, ldc), threads, blk);

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
    let isa = features::get().isa;
    assert!(supported(isa));
    assert!(["avx512-fma", "avx2-fma", "scalar"].contains(&kernel_name(isa)));
    assert_eq!(all_supported()[0], isa);
}

#[test]
fn all_kernels_default_blocking() {
    for isa in all_supported() {
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
    for isa in all_supported() {
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
    for isa in all_supported() {
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
        for isa in all_supported() {
            let pl = PackedBLayout::for_cpu(isa, k, n);
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
    let isa = features::get().isa;
    assert!(PackedBLayout::for_cpu(isa, 3, 4).is_for(isa));
}

#[test]
fn prepacked_b_rejects_wrong_sizes() {
    let layout = PackedBLayout::for_cpu(features::get().isa, 10, 20);
    let b = fill(200, 1);
    assert!(pack_b(&layout, &b, 20, 1, &mut vec![0.0; layout.len() + 1]).is_err());
    assert!(pack_b(&layout, &b[..150], 20, 1, &mut vec![0.0; layout.len()]).is_err());
    // k = 0: C is the bias (or zero) without reading A or B.
    let l0 = PackedBLayout::for_cpu(features::get().isa, 0, 3);
    let mut c = [f32::NAN; 6];
    sgemm_prepacked(2, 1.0, &[], 1, 1, &l0, &[], Some(&[1.0, 2.0, 3.0]), &mut c, 3, 2);
    assert_eq!(c, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
}

/// The 8-row AVX-512 tile is chosen where it saves work and no cut into 12- and 10-row
/// tiles is exact (the sweeps above run both: m = 7, 13, 301 on 8 rows; 65 on 12, with a
/// partial tile; 100, 130 on 12 and 10).
#[cfg(target_arch = "x86_64")]
#[test]
fn eight_row_tiles_where_twelve_would_compute_empty_rows() {
    for (m, eight) in
        [(32, false), (128, false), (7, true), (301, true), (512, false), (36, false), (130, false), (8, true)]
    {
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
    if !supported(Isa::Avx2Fma) {
        println!("SKIP x86 packing: this CPU has no AVX2+FMA");
        return;
    }
    check::<x86::Avx2>("avx2 6x16");
    if !supported(Isa::Avx512) {
        println!("SKIP x86 packing for the AVX-512 kernels: this CPU has no AVX-512F");
        return;
    }
    check::<x86::Avx512>("avx512 12x32");
    check::<x86::Avx512x8>("avx512 8x32");
}

/// A row plan's tiles cover its rows in order, each `MR` or `SHORT_ROWS` tall where the
/// plan is exact (only the last may be shorter otherwise), with no more tiles than MR-row
/// tiles alone; a sub-plan is the same tiles from its first row.
#[test]
fn row_plans_cover_their_rows() {
    assert_eq!((0..6).map(|q| RowPlan::new(32, 6, 5).height(q)).collect::<Vec<_>>(), [6, 6, 5, 5, 5, 5]);
    assert!(!RowPlan::new(13, 6, 5).exact(), "13 rows: 3 tiles of 5 or 6 hold 15 to 18");
    for (mr, short) in [(6, 5), (6, 0), (8, 0), (12, 0), (4, 0)] {
        for rows in 1..200 {
            let plan = RowPlan::new(rows, mr, short);
            assert_eq!((plan.rows(), plan.tiles(), plan.start(0)), (rows, rows.div_ceil(mr), 0));
            for q in 0..plan.tiles() {
                let h = plan.height(q);
                let last = q + 1 == plan.tiles();
                assert!(h == mr || (h == short && plan.exact()) || (last && h < mr), "{rows}/{mr}/{short}: {q} {h}");
                assert_eq!(plan.start(q + 1), plan.start(q) + h);
            }
            assert_eq!(plan.start(plan.tiles()), rows);
            assert_eq!(plan.exact(), rows % mr == 0 || (short > 0 && plan.height(plan.tiles() - 1) == short));
            // 6- and 5-row tiles cut every row count from 20 up exactly.
            assert!(plan.exact() || short != 5 || rows < 20, "{rows} rows");
            for (q0, q1) in
                [(0, plan.tiles()), (1, plan.tiles()), (0, plan.tiles() / 2), (plan.tiles() / 3, plan.tiles())]
            {
                if q0 > q1 || q1 > plan.tiles() {
                    continue;
                }
                let sub = plan.sub(q0, q1);
                assert_eq!(sub.tiles(), q1 - q0);
                for q in 0..=sub.tiles() {
                    assert_eq!(sub.start(q), plan.start(q0 + q) - plan.start(q0), "{rows}/{mr}/{short} sub {q0}..{q1}");
                }
            }
        }
    }
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
