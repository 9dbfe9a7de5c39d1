//! The cost of one execution of an op: floating-point operations and bytes moved.

use super::table::{Op, TensorMeta};

impl Op {
    /// A matrix product (MatMul, Gemm, Linear, fused Attention): the ops an NPU runs on its
    /// matrix unit (Ascend's Cube), every other op on its vector units.
    pub fn is_matrix_product(&self) -> bool {
        matches!(self, Op::MatMul { .. } | Op::Gemm { .. } | Op::Linear | Op::LinearGelu | Op::Attention { .. })
    }

    /// Floating-point operations of one execution (a multiply-add counts as 2); saturates
    /// at `u64::MAX`.
    pub fn flops(&self, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> u64 {
        let p = |xs: &[u64]| xs.iter().fold(1u64, |a, &x| a.saturating_mul(x));
        let on = outputs.first().map_or(0, |o| o.shape.numel() as u64);
        let inner = |i: usize, trans: bool| -> u64 {
            inputs.get(i).map_or(0, |t| {
                let s = &t.shape;
                if s.rank() < 2 {
                    s.last() as u64
                } else if trans {
                    s.0[s.rank() - 2] as u64
                } else {
                    s.0[s.rank() - 1] as u64
                }
            })
        };
        match self {
            Op::MatMul { trans_a, .. } => p(&[2, on, inner(0, *trans_a)]),
            Op::Gemm { trans_a, .. } => p(&[2, on, inner(0, *trans_a)]).saturating_add(p(&[2, on])),
            Op::Linear => p(&[2, on, inner(0, false)]).saturating_add(on),
            // The product, its bias and GELU (as BiasGelu counts it).
            Op::LinearGelu => p(&[2, on, inner(0, false)]).saturating_add(p(&[9, on])),
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Equal | Op::Where | Op::Relu | Op::Neg | Op::Scale { .. } => on,
            Op::Gelu(_) | Op::BiasGelu(_) | Op::LayerNorm { .. } => p(&[8, on]),
            Op::Tanh | Op::Erf | Op::Exp | Op::Sqrt | Op::Sigmoid => p(&[4, on]),
            Op::Pow => p(&[8, on]),
            Op::Softmax { .. } => p(&[5, on]),
            Op::AddLayerNorm { .. } => p(&[9, on]),
            // Square-and-add, scale, weight; AddRmsNorm adds the sum; SiLU is a sigmoid
            // and a product, SwiGlu one more product.
            Op::RmsNorm { .. } => p(&[4, on]),
            Op::AddRmsNorm { .. } => p(&[5, on]),
            Op::Silu => p(&[5, on]),
            Op::SwiGlu => p(&[6, on]),
            // Per output element: two products and a sum.
            Op::Rope { .. } => p(&[3, on]),
            Op::ReduceSum { .. } | Op::ReduceMean { .. } => inputs.first().map_or(0, |t| t.shape.numel() as u64),
            Op::Attention { layout, causal, .. } => {
                let (Some(q), Some(k)) = (inputs.first().map(|t| &t.shape), inputs.get(1).map(|t| &t.shape)) else {
                    return 0;
                };
                if q.rank() != 4 || k.rank() != 4 {
                    return 0;
                }
                let ([b, h, s, d], [_, _, t, _]) = (layout.bhsd(&q.0), layout.bhsd(&k.0));
                let dv = outputs.first().map_or(d, |o| o.shape.last());
                // Causal: the scores a query row sees, summed over the rows (the keys
                // it does not see are skipped, not computed).
                let seen = if *causal { causal_pairs(s, t) } else { p(&[s as u64, t as u64]) };
                let scores = p(&[b as u64, h as u64, seen]);
                p(&[2, scores, (d as u64).saturating_add(dv as u64)]).saturating_add(p(&[5, scores]))
            }
            // Per query head: context · D products for the scores and as many for the
            // values, at most every slot of the cache (the lengths are known at run time).
            Op::PagedAttention { .. } => {
                let (Some(q), Some(c)) = (inputs.first().map(|t| &t.shape), inputs.get(1).map(|t| &t.shape)) else {
                    return 0;
                };
                let ctx = inputs
                    .get(3)
                    .map_or(0, |t| t.shape.numel() as u64)
                    .saturating_mul(*c.0.get(1).unwrap_or(&0) as u64);
                p(&[4, q.numel() as u64, ctx.saturating_add(1)])
            }
            Op::KvCacheWrite
            | Op::Permute { .. }
            | Op::Reshape { .. }
            | Op::Gather { .. }
            | Op::Cast { .. }
            | Op::Copy
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::Expand { .. } => 0,
        }
    }

    /// Bytes read and written by one execution, counting each operand once; saturates at
    /// `u64::MAX`.
    pub fn bytes(&self, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> u64 {
        let sum = |ts: &mut dyn Iterator<Item = &TensorMeta>| ts.fold(0u64, |a, t| a.saturating_add(t.bytes() as u64));
        let read = match self {
            // Gather reads only the selected rows.
            Op::Gather { .. } => sum(&mut inputs.get(1).into_iter().chain(outputs.first())),
            // The rows written, their slots, and as many bytes written as read.
            Op::KvCacheWrite => return sum(&mut inputs[2.min(inputs.len())..].iter()).saturating_mul(2),
            _ => sum(&mut inputs.iter()),
        };
        read.saturating_add(sum(&mut outputs.iter()))
    }
}

/// The (query, key) pairs a causal attention of `s` queries over `t` keys computes:
/// query `i` sees keys `0..=i + t - s` (bottom-right aligned), clamped to `0..t`.
pub(crate) fn causal_pairs(s: usize, t: usize) -> u64 {
    (0..s).fold(0u64, |a, i| {
        let seen = (i as i128 + t as i128 - s as i128 + 1).clamp(0, t as i128) as u64;
        a.saturating_add(seen)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn m(s: &[usize]) -> TensorMeta {
        TensorMeta::new(DType::F32, s)
    }

    #[test]
    fn flops_of_gemm() {
        let op = Op::MatMul { trans_a: false, trans_b: false };
        let i = [m(&[512, 1024]), m(&[1024, 4096])];
        let o = op.infer(&i).unwrap();
        assert_eq!(op.flops(&i, &o), 2 * 512 * 1024 * 4096);
    }

    #[test]
    fn causal_attention_counts_the_scores_it_computes() {
        // Square: the lower triangle with its diagonal; a past of 2 keys adds 2 per row;
        // more queries than keys leaves the first rows empty.
        assert_eq!(causal_pairs(4, 4), 10);
        assert_eq!(causal_pairs(2, 4), 7);
        assert_eq!(causal_pairs(4, 2), 3);
        let full = Op::Attention { scale: None, layout: Default::default(), causal: false };
        let causal = Op::Attention { scale: None, layout: Default::default(), causal: true };
        let i = [m(&[1, 2, 128, 64]), m(&[1, 2, 128, 64]), m(&[1, 2, 128, 64])];
        let o = full.infer(&i).unwrap();
        assert!(causal.flops(&i, &o) * 19 / 10 < full.flops(&i, &o));
    }
}
