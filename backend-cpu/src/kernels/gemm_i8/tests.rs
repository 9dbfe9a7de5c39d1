use super::pack::{q8, row_scale};
use super::*;

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Every path this CPU runs (the scalar one always), printing the ones it cannot.
fn paths() -> Vec<Path> {
    let f = crate::features::get();
    let mut v = vec![Path::Scalar];
    for p in [Path::Vnni, Path::Amx] {
        if p.available(f) {
            v.push(p);
        } else {
            println!("SKIP int8 path {}: not available on this CPU", p.name());
        }
    }
    v
}

const SHAPES: [(usize, usize, usize); 9] = [
    (1, 1, 1),
    (1, 5, 3),
    (3, 33, 5),
    (17, 31, 67),
    (33, 65, 130),
    (32, 64, 64),
    (8, 40, 256),
    (64, 96, 200),
    (45, 70, 768),
];

fn run(path: Path, m: usize, x: &[f32], w: &PackedI8, bias: Option<&[f32]>, threads: usize) -> Vec<f32> {
    let mut c = vec![f32::NAN; m * w.n];
    linear(crate::features::get(), path, m, x, w, bias, &mut c, threads).unwrap();
    c
}

/// Integer operands whose rows reach ±127 quantise with scale 1: the outputs are the exact
/// integer sums (all below 2^24, so exact in f32), on every path, 1 and 2 threads.
#[test]
fn integer_operands_give_the_exact_sums() {
    for (m, n, k) in SHAPES {
        let int = |len: usize, seed: u64| -> Vec<f32> {
            values(len, seed).iter().map(|v| (v * 127.0).round().clamp(-127.0, 127.0)).collect()
        };
        let (mut x, mut w) = (int(m * k, 1), int(n * k, 2));
        // Each row's largest magnitude exactly 127 (scale 1).
        for i in 0..m {
            x[i * k + i % k] = if i % 2 == 0 { 127.0 } else { -127.0 };
        }
        for j in 0..n {
            w[j * k + (j * 7) % k] = 127.0;
        }
        let bias: Vec<f32> = (0..n).map(|j| j as f32 - 3.0).collect();
        let packed = PackedI8::quantise(&w, n, k).unwrap().unwrap();
        for path in paths() {
            for threads in [1, 2] {
                let c = run(path, m, &x, &packed, Some(&bias), threads);
                for i in 0..m {
                    for j in 0..n {
                        let exact: i64 =
                            (0..k).map(|t| x[i * k + t] as i64 * w[j * k + t] as i64).sum::<i64>() + bias[j] as i64;
                        assert_eq!(c[i * n + j], exact as f32, "{path:?} {m}x{n}x{k} t{threads} at ({i}, {j})");
                    }
                }
            }
        }
    }
}

/// Random operands: every path gives the same bits (one i32 sum, one dequantisation), the
/// f64 product of the quantised values to f32 rounding, and the f32 product within the
/// quantisation error.
#[test]
fn random_operands_match_the_quantised_reference() {
    // k past one AMX k-slice (5000), in uneven slices; and m past the blocks of one group.
    for (m, n, k) in SHAPES.into_iter().chain([(20, 40, 2100), (70, 200, 1030), (33, 40, 5000)]) {
        let (x, w, bias) = (values(m * k, 3), values(n * k, 4), values(n, 5));
        let packed = PackedI8::quantise(&w, n, k).unwrap().unwrap();
        let q = |v: &[f32]| -> (Vec<i32>, f64) {
            let (s, inv) = row_scale(v).unwrap();
            (v.iter().map(|a| q8(*a, inv) as i32).collect(), s as f64)
        };
        let first = run(Path::Scalar, m, &x, &packed, Some(&bias), 1);
        for i in 0..m {
            let (qx, sx) = q(&x[i * k..(i + 1) * k]);
            for j in 0..n {
                let (qw, sw) = q(&w[j * k..(j + 1) * k]);
                let sum: i64 = qx.iter().zip(&qw).map(|(a, b)| (*a * *b) as i64).sum();
                let want = sum as f64 * sx * sw + bias[j] as f64;
                let got = first[i * n + j] as f64;
                let mag = qx.iter().zip(&qw).map(|(a, b)| (*a * *b).abs() as f64).sum::<f64>() * sx * sw;
                assert!((got - want).abs() <= 1e-6 * (mag + 1.0), "{m}x{n}x{k} ({i}, {j}): {got} vs {want}");
                let f: f64 = (0..k).map(|t| x[i * k + t] as f64 * w[j * k + t] as f64).sum::<f64>() + bias[j] as f64;
                // Each product's error is at most half a step of either operand.
                let bound = (0..k)
                    .map(|t| (x[i * k + t].abs() as f64 * sw + w[j * k + t].abs() as f64 * sx) * 0.5 + sx * sw * 0.25)
                    .sum::<f64>();
                assert!((got - f).abs() <= bound + 1e-5, "{m}x{n}x{k} ({i}, {j}): {got} vs f32 {f} (bound {bound})");
            }
        }
        for path in paths() {
            for threads in [1, 2] {
                let c = run(path, m, &x, &packed, Some(&bias), threads);
                let same = c.iter().zip(&first).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{path:?} {m}x{n}x{k} with {threads} threads differs from the scalar path");
            }
        }
    }
}

/// A row of x with NaN or inf gives a NaN row; a zero row gives the bias; no bias is 0.
#[test]
fn non_finite_and_zero_rows() {
    let (m, n, k) = (4, 40, 70);
    let mut x = values(m * k, 6);
    x[3] = f32::NAN;
    x[k + 5] = f32::INFINITY;
    x[2 * k..3 * k].fill(0.0);
    let w = values(n * k, 7);
    let bias = values(n, 8);
    let packed = PackedI8::quantise(&w, n, k).unwrap().unwrap();
    for path in paths() {
        let c = run(path, m, &x, &packed, Some(&bias), 2);
        assert!(c[..2 * n].iter().all(|v| v.is_nan()), "{path:?}: rows with NaN / inf");
        assert_eq!(&c[2 * n..3 * n], &bias[..], "{path:?}: zero row");
        assert!(c[3 * n..].iter().all(|v| v.is_finite()), "{path:?}: finite row");
        let c = run(path, m, &x, &packed, None, 1);
        assert!(c[2 * n..3 * n].iter().all(|v| *v == 0.0), "{path:?}: zero row without bias");
    }
}

/// A weight with ±inf or NaN is not quantised; k past `MAX_K` and short weights are errors.
#[test]
fn weights_that_cannot_be_quantised() {
    let mut w = values(6, 9);
    w[4] = f32::INFINITY;
    assert!(PackedI8::quantise(&w, 2, 3).unwrap().is_none());
    w[4] = f32::NAN;
    assert!(PackedI8::quantise(&w, 2, 3).unwrap().is_none());
    assert!(PackedI8::quantise(&w, 3, 3).is_err());
    assert!(PackedI8::quantise(&[], 1, MAX_K + 1).is_err());
    assert!(PackedI8::quantise(&[], usize::MAX, 2).is_err());
}

/// Short operands and a path the CPU lacks are errors, not panics.
#[test]
fn bad_operands_are_errors() {
    let f = crate::features::get();
    let packed = PackedI8::quantise(&values(12, 10), 3, 4).unwrap().unwrap();
    let mut c = vec![0f32; 6];
    assert!(linear(f, Path::Scalar, 2, &values(7, 1), &packed, None, &mut c, 1).is_err());
    assert!(linear(f, Path::Scalar, 2, &values(8, 1), &packed, None, &mut c[..5], 1).is_err());
    assert!(linear(f, Path::Scalar, 2, &values(8, 1), &packed, Some(&[1.0, 2.0]), &mut c, 1).is_err());
    for p in [Path::Amx, Path::Vnni] {
        if !p.available(f) {
            let e = linear(f, p, 2, &values(8, 1), &packed, None, &mut c, 1).unwrap_err();
            assert!(matches!(e, KernelError::MissingFeature(_)), "{e}");
        }
    }
    // Forced below AVX-512: no VNNI, and `missing` says why.
    if let Ok(f2) = crate::features::forced(crate::features::Isa::Avx2Fma) {
        assert!(!Path::Vnni.available(f2));
        assert_eq!(Path::best(f2).is_none(), missing(f2).is_some());
    }
}

/// A request for a unit that the detected features lack is refused, whatever the request
/// claims (`CpuFeatures`' fields are public); the scalar path is never refused.
#[test]
fn units_the_cpu_lacks_are_refused_not_run() {
    use crate::features::{CpuFeatures, Isa};
    let base = crate::features::get().clone();
    let with = |amx: bool, vnni: bool| {
        let mut detected: Vec<&'static str> = base.detected.iter().copied().filter(|d| *d != "avx512vnni").collect();
        if vnni {
            detected.push("avx512vnni");
        }
        CpuFeatures { isa: Isa::Avx512, amx_int8: amx, detected, ..base.clone() }
    };
    let refused = |r: Result<(), KernelError>| matches!(r, Err(KernelError::MissingFeature(_)));
    // Detected without AMX-INT8 and VNNI: both requests are refused, scalar is not.
    let none = with(false, false);
    assert!(refused(check_units(Path::Amx, &with(true, true), &none)));
    assert!(refused(check_units(Path::Vnni, &with(true, true), &none)));
    assert!(check_units(Path::Scalar, &with(true, true), &none).is_ok());
    // Detected with them: a request that does not claim them is refused too.
    assert!(refused(check_units(Path::Amx, &with(false, true), &with(true, true))));
    if pack::has_avx512bw() {
        assert!(check_units(Path::Amx, &with(true, true), &with(true, true)).is_ok());
        assert!(check_units(Path::Vnni, &with(false, true), &with(false, true)).is_ok());
        assert!(refused(check_units(Path::Vnni, &with(true, false), &with(true, true))));
    } else {
        println!("SKIP the accepted VNNI case: this CPU has no AVX-512BW");
    }
    // Through `linear`: a hand-built claim of a unit this CPU lacks is an error.
    let packed = PackedI8::quantise(&values(64 * 64, 11), 64, 64).unwrap().unwrap();
    let mut c = vec![0f32; 32 * 64];
    for p in [Path::Amx, Path::Vnni] {
        if p.available(&base) {
            println!("this CPU has {}: its refusal is checked with the units above only", p.name());
            continue;
        }
        let e = linear(&with(true, true), p, 32, &values(32 * 64, 1), &packed, None, &mut c, 1).unwrap_err();
        assert!(matches!(e, KernelError::MissingFeature(_)), "{e}");
    }
}

/// The quantised x is kept by each thread between products: a later product with fewer,
/// finite rows or a shorter k finds nothing of an earlier one (its NaN rows, its bytes),
/// and k = 0 gives the bias on every path.
#[test]
fn a_reused_buffer_holds_nothing_of_the_last_product() {
    for path in paths() {
        let (m, n, k) = (40, 64, 200);
        let mut x = values(m * k, 12);
        x[k + 3] = f32::NAN;
        let packed = PackedI8::quantise(&values(n * k, 13), n, k).unwrap().unwrap();
        let c = run(path, m, &x, &packed, None, 1);
        assert!(c[n..2 * n].iter().all(|v| v.is_nan()), "{path:?}: the NaN row");
        // Fewer rows, shorter k, all finite, on the same thread.
        let (m2, k2) = (3, 70);
        let (x2, w2) = (values(m2 * k2, 14), values(n * k2, 15));
        let packed2 = PackedI8::quantise(&w2, n, k2).unwrap().unwrap();
        let got = run(path, m2, &x2, &packed2, None, 1);
        let want = run(Path::Scalar, m2, &x2, &packed2, None, 1);
        assert!(got.iter().all(|v| v.is_finite()), "{path:?}: no stale NaN row");
        assert_eq!(got, want, "{path:?}: the same sums as the scalar path");
        // k = 0: every output is its bias.
        let empty = PackedI8::quantise(&[], n, 0).unwrap().unwrap();
        let bias = values(n, 16);
        let c = run(path, 2, &[], &empty, Some(&bias), 1);
        assert_eq!(&c[..n], &bias[..], "{path:?}: k = 0");
        assert_eq!(&c[n..], &bias[..], "{path:?}: k = 0");
    }
}

/// The quantiser's vector code gives `q8`'s bytes (ties to even, saturation) in both
/// layouts, with and without the offset, the bytes past k zero (or 128).
#[test]
fn quantised_bytes_are_q8s() {
    let (m, k) = (3, 150);
    let kp = pack::padded_k(k);
    let mut x = values(m * k, 17);
    for (t, v) in x.iter_mut().enumerate().take(k) {
        // Row 0: scale 1 (largest 127), halves to round to even, both signs.
        *v = (t as f32 - 75.0) + 0.5;
    }
    x[0] = 127.0;
    for blocked in [false, true] {
        for offset in [false, true] {
            let mut q = pack::QuantisedX::default();
            let rows = if blocked { 32 } else { m };
            q.quantise(&x, (m, k, kp), rows, blocked, offset, 1);
            let data = bytes(&q.data);
            for i in 0..m {
                let (_, inv) = row_scale(&x[i * k..(i + 1) * k]).unwrap();
                for t in 0..kp {
                    let want =
                        if t < k { q8(x[i * k + t], inv) as u8 } else { 0 }.wrapping_add(if offset { 128 } else { 0 });
                    let at = if blocked { (t / 64) * 2048 + i * 64 + t % 64 } else { i * kp + t };
                    assert_eq!(data[at], want, "row {i} byte {t} blocked {blocked} offset {offset}");
                }
            }
        }
    }
}
