//! The conformance cases of the decoder-LLM ops (Silu, RmsNorm, AddRmsNorm, SwiGlu), as
//! `(op, inputs, accumulation)` specs that [`crate::conformance`] turns into its cases. Their
//! random operands come from a stream of their own, so that adding them left the other
//! generators' operands as they were.

use runtime::{DType, Op};

/// An op, its inputs (dtype, shape, values) and its longest accumulation.
pub type Spec = (Op, Vec<(DType, Vec<usize>, Vec<f64>)>, usize);

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

/// Uniform values in [-2, 2) from a xorshift stream.
struct Values(u64);

impl Values {
    fn take(&mut self, f: DType, shape: &[usize]) -> (DType, Vec<usize>, Vec<f64>) {
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                -2.0 + 4.0 * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect();
        (f, shape.to_vec(), v)
    }
}

/// Silu on shapes from a scalar to past a vector width; RmsNorm (with and without its
/// weight), AddRmsNorm (both outputs) and SwiGlu (one input of twice the width, and gate
/// and up apart) on rows from 0 to 896 wide.
pub fn random(f: DType, seed: u64) -> Vec<Spec> {
    let mut r = Values(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let mut out = Vec::new();
    for s in [vec![], vec![0], vec![1], vec![7], vec![3, 17], vec![2, 3, 33], vec![1031]] {
        out.push((Op::Silu, vec![r.take(f, &s)], 1));
    }
    for s in [vec![1], vec![5], vec![3, 7], vec![2, 3, 19], vec![4, 0], vec![2, 1, 65], vec![3, 896]] {
        let d = *s.last().unwrap_or(&1);
        for eps in [1e-5, 1e-2] {
            out.push((Op::RmsNorm { eps }, vec![r.take(f, &s), r.take(f, &[d])], d));
        }
        out.push((Op::RmsNorm { eps: 1e-6 }, vec![r.take(f, &s)], d));
        out.push((Op::AddRmsNorm { eps: 1e-5 }, vec![r.take(f, &s), r.take(f, &s), r.take(f, &[d])], d));
        let mut wide = s.clone();
        if let Some(l) = wide.last_mut() {
            *l *= 2;
        }
        out.push((Op::SwiGlu, vec![r.take(f, &wide)], 1));
        out.push((Op::SwiGlu, vec![r.take(f, &s), r.take(f, &s)], 1));
    }
    out
}

/// Silu on the unary ops' special values; SwiGlu on them as gates against the same
/// reversed as ups, in both forms.
pub fn extreme_gates(f: DType, specials: &[f64]) -> Vec<Spec> {
    let n = specials.len();
    let ups: Vec<f64> = specials.iter().rev().copied().collect();
    let joined: Vec<f64> = specials.iter().chain(&ups).copied().collect();
    vec![
        (Op::Silu, vec![(f, vec![n], specials.to_vec())], 1),
        (Op::SwiGlu, vec![(f, vec![1, 2 * n], joined)], 1),
        (Op::SwiGlu, vec![(f, vec![n], specials.to_vec()), (f, vec![n], ups)], 1),
    ]
}

/// RmsNorm on rows whose naive f32 sum of squares overflows (`big`), tiny rows, inf, NaN and
/// a zero row (NaN with eps 0: `0 * inf`); AddRmsNorm on the sums `sum_a + sum_a'` that
/// overflow the dtype (`sum_a'`: its finite values, 1 for the others).
pub fn extreme_rms(f: DType, big: f64, mid: f64, sum_a: &[f64]) -> Vec<Spec> {
    let tiny = if f == DType::F16 { 1e-4 } else { 1e-30 };
    let rows: Vec<f64> = vec![
        big, big, -big, 1.0, INF, 1.0, 2.0, 3.0, NAN, 1.0, 2.0, 3.0, mid, -mid, mid, -mid, 0.0, 0.0, -0.0, 0.0, tiny,
        -tiny, tiny, tiny,
    ];
    let w = vec![1.0, 2.0, 0.5, -1.0];
    let mut out = Vec::new();
    for eps in [1e-5, 0.0] {
        out.push((Op::RmsNorm { eps }, vec![(f, vec![6, 4], rows.clone()), (f, vec![4], w.clone())], 4));
        out.push((Op::RmsNorm { eps }, vec![(f, vec![6, 4], rows.clone())], 4));
    }
    let sum_b: Vec<f64> = sum_a.iter().map(|v| if v.is_finite() { *v } else { 1.0 }).collect();
    out.push((
        Op::AddRmsNorm { eps: 1e-5 },
        vec![(f, vec![2, 4], sum_a.to_vec()), (f, vec![2, 4], sum_b), (f, vec![4], w)],
        4,
    ));
    out
}
