//! The conformance cases of Rope and of Attention's causal and grouped-query forms, which
//! [`crate::conformance`] adds to its random, extreme and error cases.
//!
//! Attention: grouped-query 4:1 and 2:1 in both layouts; causal with as many queries as
//! keys (the lower triangle), with a past (more keys than queries: prefill after a cached
//! prefix, or a decode step), and with more queries than keys (the first rows see no key
//! and are 0); over 128 query rows, so that the CPU's fast tier works in several blocks,
//! both by block and by head with K and V packed. Rope: rotate-half and interleaved, both
//! layouts, positions i32 and i64 (repeated, out of order), tables f32 or x's dtype.
//!
//! The suite passes its vector of cases and its maker of one case, so that this module
//! does not import the suite that imports it.

use crate::rng::Rng;
use runtime::{AttentionLayout, DType, Op};

/// Inputs of a case: dtype, shape and values of each.
pub type Inputs = Vec<(DType, Vec<usize>, Vec<f64>)>;

/// Makes one case of the suite from the op, its inputs and its longest accumulation (for
/// the tolerance).
pub type Make<C> = fn(Op, Inputs, usize) -> C;

/// Takes one case.
type Push<'a> = &'a mut dyn FnMut(Op, Inputs, usize);

/// Values in [-2, 2) of `n` elements.
fn vals(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| (rng.below(4001) as f64 - 2000.0) / 1000.0).collect()
}

fn operand(rng: &mut Rng, dt: DType, shape: Vec<usize>) -> (DType, Vec<usize>, Vec<f64>) {
    let n = shape.iter().product();
    (dt, shape, vals(rng, n))
}

/// The random cases of Attention (causal, grouped-query) and Rope for float dtype `f`.
pub fn cases<C>(v: &mut Vec<C>, mk: Make<C>, f: DType, seed: u64) {
    let out: Push<'_> = &mut |op, i, a| v.push(mk(op, i, a));
    let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    attention(&mut *out, f, &mut rng);
    rope(out, f, &mut rng);
}

fn attention(out: Push<'_>, f: DType, rng: &mut Rng) {
    // (B, H, H_kv, S, T, D, causal): GQA 4:1 and 2:1, causal square, with a past, with
    // more queries than keys; 140 and 300 query rows span several 128-row blocks.
    let shapes = [
        (2, 4, 1, 5, 7, 4, false),
        (1, 4, 2, 9, 9, 8, false),
        (1, 2, 2, 9, 9, 4, true),
        (2, 4, 1, 6, 11, 4, true),
        (1, 2, 1, 1, 9, 8, true),
        (1, 4, 2, 7, 3, 4, true),
        (1, 4, 2, 140, 140, 8, true),
        (1, 8, 2, 300, 300, 4, true),
        (1, 2, 1, 130, 200, 4, true),
    ];
    for (b, h, hkv, s, t, d, causal) in shapes {
        for layout in [AttentionLayout::Bnsd, AttentionLayout::Bsnd] {
            let (q, k) = (layout.dims([b, h, s, d]).to_vec(), layout.dims([b, hkv, t, d]).to_vec());
            let mut inputs = vec![operand(rng, f, q), operand(rng, f, k.clone()), operand(rng, f, k)];
            if s % 2 == 1 {
                // An additive mask still adds on top of the causal one.
                inputs.push(operand(rng, f, vec![b, 1, 1, t]));
            }
            out(Op::Attention { scale: None, layout, causal }, inputs, t * d);
        }
    }
}

fn rope(out: Push<'_>, f: DType, rng: &mut Rng) {
    // (B, H, S, D, P)
    for (b, h, s, d, p) in [(1, 1, 1, 2, 1), (2, 3, 5, 8, 16), (1, 4, 7, 6, 9), (2, 2, 33, 64, 40), (1, 1, 0, 4, 3)] {
        for layout in [AttentionLayout::Bnsd, AttentionLayout::Bsnd] {
            for (interleaved, table_dt, pos_dt) in
                [(false, DType::F32, DType::I64), (true, f, DType::I32), (true, DType::F32, DType::I64)]
            {
                let x = operand(rng, f, layout.dims([b, h, s, d]).to_vec());
                let (cos, sin) = runtime::op::rope_tables(500.0, d, p, runtime::op::RopeScaling::None);
                let table = |v: Vec<f32>| (table_dt, vec![p, d / 2], v.into_iter().map(f64::from).collect());
                let positions: Vec<f64> = (0..b * s).map(|_| rng.below(p) as f64).collect();
                let inputs = vec![x, table(cos), table(sin), (pos_dt, vec![b, s], positions)];
                out(Op::Rope { interleaved, layout }, inputs, 2);
            }
        }
    }
}

/// Extreme cases: a causal row ignores a NaN or infinite key it does not see, and one that
/// sees no key is 0 whatever V holds.
pub fn extreme_cases<C>(v: &mut Vec<C>, mk: Make<C>, f: DType) {
    let out: Push<'_> = &mut |op, i, a| v.push(mk(op, i, a));
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    // q [1, 1, 3, 2] over k, v [1, 1, 2, 2]: T - S = -1, so query 0 sees nothing, query 1
    // key 0, query 2 both; key 1 is NaN, so only query 2 is NaN.
    let ins = vec![
        (f, vec![1, 1, 3, 2], vec![0.5, -1.0, 1.0, 0.25, -0.5, 0.75]),
        (f, vec![1, 1, 2, 2], vec![0.25, 0.5, nan, 1.0]),
        (f, vec![1, 1, 2, 2], vec![inf, -2.0, 0.5, 3.0]),
    ];
    let op = |layout| Op::Attention { scale: None, layout, causal: true };
    out(op(AttentionLayout::Bnsd), ins.clone(), 4);
    // The same in tokens-first dims (one head: the same bytes).
    let bsnd = ins.into_iter().map(|(dt, s, v)| (dt, vec![s[0], s[2], s[1], s[3]], v)).collect();
    out(op(AttentionLayout::Bsnd), bsnd, 4);
    // Rope passes ±inf and NaN through its products: 0 · inf is NaN.
    let x = vec![inf, 1.0, nan, -0.0];
    let rope = |interleaved| Op::Rope { interleaved, layout: AttentionLayout::Bnsd };
    for interleaved in [false, true] {
        let inputs = vec![
            (f, vec![1, 1, 1, 4], x.clone()),
            (DType::F32, vec![2, 2], vec![1.0, 1.0, 0.0, 0.5]),
            (DType::F32, vec![2, 2], vec![0.0, 0.0, 1.0, -0.5]),
            (DType::I32, vec![1, 1], vec![1.0]),
        ];
        out(rope(interleaved), inputs, 2);
    }
}

/// Cases every tier must refuse: Rope positions outside `[0, P)` (for a float `f`).
pub fn error_cases<C>(v: &mut Vec<C>, mk: Make<C>, f: DType) {
    if !f.is_float() {
        return;
    }
    let out: Push<'_> = &mut |op, i, a| v.push(mk(op, i, a));
    for (pt, bad) in [(DType::I64, 3.0), (DType::I64, -1.0), (DType::I32, i32::MIN as f64), (DType::I64, 2f64.powi(62))]
    {
        out(
            Op::Rope { interleaved: false, layout: AttentionLayout::Bsnd },
            vec![
                (f, vec![1, 2, 1, 4], vec![1.0; 8]),
                (DType::F32, vec![3, 2], vec![1.0; 6]),
                (DType::F32, vec![3, 2], vec![0.0; 6]),
                (pt, vec![1, 2], vec![0.0, bad]),
            ],
            2,
        );
    }
}
