//! The f32 math the fast tier's kernels share: branch-free `exp`, `tanh` and `erf`
//! approximations that vectorise inside the SIMD loops that call them, and row softmax
//! compiled per ISA (AVX-512, AVX2+FMA, baseline) and dispatched on the detected one.

use crate::features::Isa;

/// The clamp keeps `k = round(x log2 e)` in [-126, 128]: results below 2^-125 (x under
/// about -86.99, where the exact result is at most 2.4e-38) are 0, results from
/// `ln(f32::MAX)` = 88.7228 on overflow to +inf as the exact result does.
const EXP_LO: f32 = -87.5;
const EXP_HI: f32 = 89.0;

/// `a * b + c`, as one fused instruction where `FMA` (callers compiled with the FMA target
/// feature pass true), else a multiply and an add: a fused multiply-add without the
/// instruction is a library call, far slower than the two.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `e^x` to within a few ulp, branch-free so loops vectorise: range reduction by
/// `ln 2`, a degree-6 polynomial, and exponent assembly. Exact at the ends: `e^-inf = 0`,
/// `e^x = +inf` from `ln(f32::MAX)` on, NaN stays NaN. Fused multiply-adds where `FMA`.
#[inline(always)]
pub fn exp_approx<const FMA: bool>(x: f32) -> f32 {
    let m = madd::<FMA>;
    let x = x.clamp(EXP_LO, EXP_HI);
    // Nearest-even rounding and no float-to-int cast: both map to vector instructions
    // (`round()` and `as i32` would leave the loop scalar).
    let k = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = m(-k, 1.428_606_8e-6, m(-k, 0.693_145_75, x));
    // 2 e^r (every coefficient doubled: exact), times 2^(k-1), so that k = 128 (results
    // up to f32::MAX) needs no exponent 255, and k = -126 gives exponent 0, i.e. 0.
    let p = m(r, 0.002_777_778, 0.016_666_668);
    let p = m(r, p, 0.083_333_336);
    let p = m(r, p, 0.333_333_34);
    let p = m(r, p, 1.0);
    let p = m(r, p, 2.0);
    let p2 = m(r, p, 2.0);
    // 2^(k-1) from its biased exponent k + 126 in [0, 254]: adding 2^23 to an integral
    // float puts the integer in the low mantissa bits.
    let bits = ((k + 126.0 + 8_388_608.0).to_bits().wrapping_sub(0x4B00_0000)) << 23;
    p2 * f32::from_bits(bits)
}

/// `tanh x` through `exp`: `1 - 2 / (e^{2x} + 1)`, exact at the saturated ends. Fused
/// multiply-adds where `FMA`.
#[inline(always)]
pub fn tanh_approx<const FMA: bool>(x: f32) -> f32 {
    let m = madd::<FMA>;
    let x = x.clamp(-9.0, 9.0);
    // Near zero, the odd Taylor series: avoids the cancellation of the exp form. Both
    // forms are computed and one selected, so that loops stay vectorised.
    let x2 = x * x;
    let p = m(x2, 0.021_869_488, -0.053_968_254);
    let p = m(x2, p, 0.133_333_33);
    let p = m(x2, p, -0.333_333_34);
    let small = x * m(x2, p, 1.0);
    let large = 1.0 - 2.0 / (exp_approx::<FMA>(2.0 * x) + 1.0);
    if x.abs() < 0.1 { small } else { large }
}

/// The logistic function `1 / (1 + e^-x)` from `e = e^-|x|`: `1 / (1 + e)` for `x >= 0`,
/// `e / (1 + e)` below, so the left tail keeps its relative accuracy and neither end
/// overflows (0 at `-inf`, 1 at `+inf`, NaN stays NaN). Both forms are computed and one
/// selected, so loops stay vectorised.
#[inline(always)]
pub fn sigmoid_approx<const FMA: bool>(x: f32) -> f32 {
    let e = exp_approx::<FMA>(-x.abs());
    let d = 1.0 + e;
    if x >= 0.0 { 1.0 / d } else { e / d }
}

/// `erf x` with the Abramowitz–Stegun 7.1.26-style rational form refined to ~1e-7
/// absolute error (computed in f32 with a polynomial in `t = 1/(1+p|x|)`). Fused
/// multiply-adds where `FMA`.
#[inline(always)]
pub fn erf_approx<const FMA: bool>(x: f32) -> f32 {
    let m = madd::<FMA>;
    // For small |x| a Taylor series is more accurate than the rational form; both are
    // computed and one selected (branch-free, so loops stay vectorised).
    let a = x.abs();
    let x2 = x * x;
    let s = m(x2, 0.005_223_778, -0.026_866_17);
    let s = m(x2, s, 0.112_837_9);
    let s = m(x2, s, -0.376_126_4);
    let small = x * m(x2, s, std::f32::consts::FRAC_2_SQRT_PI);
    let large = (1.0 - erfc_rational::<FMA>(a)).copysign(x);
    if a < 0.5 { small } else { large }
}

/// GELU, the exact (erf) form `x/2 · (1 + erf(x/√2))`, as `x · (1 - c)` for `x >= 0` and
/// `x · c` below it, where `c = erfc(|x|/√2) / 2` comes from the rational form of
/// [`erf_approx`]. Two things differ from going through [`erf_approx`]: there is no
/// cancellation in `1 + erf` for negative `x` (`c` is computed directly), and there is no
/// Taylor branch. The form's ~1e-7 absolute error in erf is ~1e-7 relative in GELU near 0.
/// ±inf give what the formula gives in IEEE arithmetic: NaN at -inf, +inf at +inf. Fused
/// multiply-adds where `FMA`.
#[inline(always)]
pub fn gelu_erf_approx<const FMA: bool>(x: f32) -> f32 {
    let c = 0.5 * erfc_rational::<FMA>(x.abs() * std::f32::consts::FRAC_1_SQRT_2);
    x * if x >= 0.0 { 1.0 - c } else { c }
}

/// `erfc a` for `a >= 0` (or NaN): the Abramowitz–Stegun 7.1.26-style rational form
/// `t·q(t)·e^{-a²}`, `t = 1/(1+p·a)`, shared by [`erf_approx`] and [`gelu_erf_approx`].
#[inline(always)]
fn erfc_rational<const FMA: bool>(a: f32) -> f32 {
    let m = madd::<FMA>;
    let t = 1.0 / m(0.327_591_1, a, 1.0);
    let q = m(t, 1.061_405_4, -1.453_152_1);
    let q = m(t, q, 1.421_413_7);
    let q = m(t, q, -0.284_496_74);
    let q = m(t, q, 0.254_829_6);
    t * q * exp_approx::<FMA>(-a * a)
}

/// `row = softmax(row + mask)` in place, as attention needs it: a row masked out
/// entirely (every value -inf, no NaN) becomes zeros and the call returns true; a row
/// with NaN or +inf becomes NaN. The mask is `(values, stride)`; stride 0 broadcasts one
/// value over the row.
pub fn softmax_in_place(isa: Isa, row: &mut [f32], mask: Option<(&[f32], usize)>) -> bool {
    softmax_dispatch(isa, row, mask, 0.0)
}

/// ONNX `Softmax` of one row in place: a row with NaN, +inf or only -inf is NaN
/// throughout (`exp(x - max)` with `max` not finite), as in ONNX's reference and PyTorch.
pub fn softmax_onnx(isa: Isa, row: &mut [f32]) {
    softmax_dispatch(isa, row, None, f32::NAN);
}

/// `masked_fill` is what a row whose maximum is -inf becomes (unless it holds a NaN);
/// returns true when the row was filled with it.
fn softmax_dispatch(isa: Isa, row: &mut [f32], mask: Option<(&[f32], usize)>, masked_fill: f32) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn avx512(row: &mut [f32], mask: Option<(&[f32], usize)>, fill: f32) -> bool {
            softmax_body(row, mask, fill, |row, mx| {
                // SAFETY: this function's target features include AVX-512F.
                unsafe { avx512::exp_sum(row, mx) }
            })
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(row: &mut [f32], mask: Option<(&[f32], usize)>, fill: f32) -> bool {
            softmax_body(row, mask, fill, exp_sum::<true>)
        }
        match isa {
            // SAFETY: `Isa::Avx512` is only chosen when AVX-512F and FMA were detected on
            // this CPU at run time (features.rs).
            Isa::Avx512 => return unsafe { avx512(row, mask, masked_fill) },
            // SAFETY: `Isa::Avx2Fma` is only chosen when AVX2 and FMA were detected.
            Isa::Avx2Fma => return unsafe { avx2(row, mask, masked_fill) },
            Isa::Scalar => {}
        }
    }
    softmax_body(row, mask, masked_fill, exp_sum::<false>)
}

const LANES: usize = 16;

/// A whole chunk as an array, so that each step over it is one vector operation.
#[inline(always)]
fn lanes(c: &mut [f32]) -> &mut [f32; LANES] {
    c.try_into().expect("a chunk of LANES")
}

/// `a`'s lanes folded pairwise with `f`: a tree of vector operations instead of a chain
/// of 16 scalar ones.
#[inline(always)]
fn lanes_fold(mut a: [f32; LANES], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            a[l] = f(a[l], a[l + w]);
        }
        w /= 2;
    }
    a[0]
}

/// The larger of two lanes, NaN ignored where the other is a number (`>` is false for NaN).
#[inline(always)]
fn max_lane(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

/// Adds the mask (one value per element, or one for the row) and returns the row's
/// maximum, NaN ignored: one pass.
#[inline(always)]
fn add_mask_and_max(row: &mut [f32], mask: Option<(&[f32], usize)>) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let full = row.len() / LANES * LANES;
    let (body, tail) = row.split_at_mut(full);
    let max_into = |acc: &mut [f32; LANES], c: &[f32; LANES]| {
        for l in 0..LANES {
            acc[l] = max_lane(acc[l], c[l]);
        }
    };
    match mask {
        Some((m, 1)) => {
            for (c, mc) in body.chunks_exact_mut(LANES).zip(m.chunks_exact(LANES)) {
                let (c, mc): (_, &[f32; LANES]) = (lanes(c), mc.try_into().expect("a chunk of LANES"));
                // Both read before the row is written: the mask may not alias the row as
                // far as the compiler knows, and this keeps the step one vector add.
                let mut v = *c;
                for l in 0..LANES {
                    v[l] += mc[l];
                }
                *c = v;
                max_into(&mut acc, c);
            }
            tail.iter_mut().zip(&m[full..]).for_each(|(x, &a)| *x += a);
        }
        Some((m, _)) => {
            let a = m[0];
            for c in body.chunks_exact_mut(LANES) {
                let c = lanes(c);
                for x in c.iter_mut() {
                    *x += a;
                }
                max_into(&mut acc, c);
            }
            tail.iter_mut().for_each(|x| *x += a);
        }
        None => body.chunks_exact_mut(LANES).for_each(|c| max_into(&mut acc, lanes(c))),
    }
    tail.iter().copied().fold(lanes_fold(acc, max_lane), f32::max)
}

#[inline(always)]
fn softmax_body(
    row: &mut [f32],
    mask: Option<(&[f32], usize)>,
    masked_fill: f32,
    exp_sum: impl FnOnce(&mut [f32], f32) -> f32,
) -> bool {
    // The max ignores NaN; a NaN element then makes its exp, the sum and the row NaN,
    // and a +inf max gives exp(inf - inf) = NaN likewise.
    let mx = add_mask_and_max(row, mask);
    if mx == f32::NEG_INFINITY {
        // Only -inf and NaN: NaN if any NaN, else the row is masked out entirely.
        let nan = row.iter().any(|x| x.is_nan());
        row.fill(if nan { f32::NAN } else { masked_fill });
        return !nan && masked_fill == 0.0;
    }
    let inv = 1.0 / exp_sum(row, mx);
    row.iter_mut().for_each(|x| *x *= inv);
    false
}

/// `row[i] = e^(row[i] - mx)` and their sum, through [`exp_approx`] (vectorised by the
/// compiler, fused multiply-adds where `FMA`).
#[inline(always)]
fn exp_sum<const FMA: bool>(row: &mut [f32], mx: f32) -> f32 {
    let mut sums = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            c[l] = exp_approx::<FMA>(c[l] - mx);
            sums[l] += c[l];
        }
    }
    let mut total = lanes_fold(sums, |a, b| a + b);
    for x in chunks.into_remainder() {
        *x = exp_approx::<FMA>(*x - mx);
        total += *x;
    }
    total
}

/// The exponentials of a softmax in AVX-512 instructions (the attention kernels' rows).
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use std::arch::x86_64::*;

    /// `e^x` for 16 lanes of `x <= 0`: `2^n · e^r` with `r` in ±ln2/2, `2^n` applied by
    /// `vscalefps` (no clamping at the top, no exponent assembly). NaN stays NaN; -inf, and
    /// every `x` below about -104 (where `e^x` is under half the smallest subnormal), give
    /// exactly 0, as a masked key must weigh. `SIX`: the degree-6 Taylor polynomial of
    /// [`exp_approx`](super::exp_approx) (relative error about 2e-7, the f32 attention's);
    /// else degree 5 (about 3e-6, enough for probabilities rounded to bf16).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn exp16<const SIX: bool>(x: __m512) -> __m512 {
        // `max` returns its second operand where one is NaN: x's NaN passes through.
        let xc = _mm512_max_ps(_mm512_set1_ps(-110.0), x);
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
            xc,
            _mm512_set1_ps(std::f32::consts::LOG2_E),
        ));
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), xc);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm512_set1_ps(if SIX { 1.0 / 720.0 } else { 1.0 / 120.0 });
        if SIX {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / 120.0));
        }
        for c in [1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        _mm512_scalef_ps(p, n)
    }

    /// `row[i] = e^(row[i] - mx)` and their sum, `mx` the row's maximum (so every
    /// argument is `<= 0`, or NaN where the row holds NaN or +inf).
    ///
    /// # Safety
    /// The CPU supports AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn exp_sum(row: &mut [f32], mx: f32) -> f32 {
        let (n, mv) = (row.len(), _mm512_set1_ps(mx));
        let mut sum = _mm512_setzero_ps();
        let mut i = 0;
        while i < n {
            let k = ((1u32 << (n - i).min(16)) - 1) as __mmask16;
            // SAFETY: the lanes in `k` lie inside `row` (`i < n`, at most `n - i` lanes).
            unsafe {
                let p = row.as_mut_ptr().add(i);
                let e = exp16::<true>(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p), mv));
                _mm512_mask_storeu_ps(p, k, e);
                sum = _mm512_mask_add_ps(sum, k, sum, e);
            }
            i += 16;
        }
        _mm512_reduce_add_ps(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(row: &[f32], mask: &[f32]) -> Vec<f32> {
        let x: Vec<f64> = row.iter().zip(mask).map(|(&a, &b)| a as f64 + b as f64).collect();
        let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            return vec![0.0; row.len()];
        }
        let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| (v / s) as f32).collect()
    }

    /// The AVX-512 exponentials against f64 over the arguments a softmax gives them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_exp16_is_within_its_stated_error() {
        use std::arch::x86_64::*;
        if crate::features::get().isa != Isa::Avx512 {
            println!("skipped: this CPU has no AVX-512F");
            return;
        }
        let mut xs: Vec<f32> = (0..=20_000).map(|i| -(i as f32) * 0.005).collect();
        xs.extend([-0.0, -86.9, -87.5, -103.0, -103.9, -104.0, -110.0, -1e30, f32::NEG_INFINITY, f32::NAN]);
        xs.resize(xs.len().next_multiple_of(16), 0.0);
        for (six, tol) in [(true, 3e-7), (false, 4e-6)] {
            let mut got = vec![0f32; xs.len()];
            for (x, g) in xs.chunks_exact(16).zip(got.chunks_exact_mut(16)) {
                // SAFETY: AVX-512F was detected; 16 floats in each chunk.
                unsafe {
                    let v = _mm512_loadu_ps(x.as_ptr());
                    let e = if six { avx512::exp16::<true>(v) } else { avx512::exp16::<false>(v) };
                    _mm512_storeu_ps(g.as_mut_ptr(), e);
                }
            }
            for (&x, &g) in xs.iter().zip(&got) {
                let want = (x as f64).exp();
                if x.is_nan() {
                    assert!(g.is_nan(), "e^NaN gave {g}");
                } else if x < -104.0 {
                    assert_eq!(g, 0.0, "e^{x} must be exactly 0");
                } else if want >= f32::MIN_POSITIVE as f64 {
                    let rel = ((g as f64 - want) / want).abs();
                    assert!(rel <= tol, "six={six}: e^{x} = {g}, want {want} (relative error {rel:.2e})");
                } else {
                    // Subnormal results: a few of their ulps (1.4e-45 each) off at most.
                    assert!((g as f64 - want).abs() <= 1e-43, "e^{x} = {g}, want {want}");
                }
            }
        }
    }

    #[test]
    fn softmax_matches_f64_on_every_isa_and_length() {
        let isas = [Isa::Scalar, crate::features::get().isa];
        for n in [1, 7, 16, 17, 33, 512, 515] {
            let row: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.7).collect();
            let mask: Vec<f32> = (0..n).map(|i| if i % 5 == 4 { f32::NEG_INFINITY } else { 0.0 }).collect();
            for isa in isas {
                let mut a = row.clone();
                softmax_in_place(isa, &mut a, Some((&mask, 1)));
                for (x, y) in a.iter().zip(naive(&row, &mask)) {
                    assert!((x - y).abs() < 1e-6, "n={n} {isa:?}: {x} vs {y}");
                }
                let mut b = row.clone();
                softmax_in_place(isa, &mut b, Some((&[f32::NEG_INFINITY], 0)));
                assert!(b.iter().all(|&x| x == 0.0), "a row masked out entirely is zeros");
            }
        }
    }
}
