//! Rope's validation and its cos/sin tables ([`rope_tables`]).

use super::table::{AttentionLayout, TensorMeta};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::size;

/// Checks Rope's operands (x, cos, sin, positions) and gives its output meta: x's dtype
/// and shape.
pub(super) fn infer_rope(op: &'static str, ins: &[TensorMeta], layout: AttentionLayout) -> Result<Vec<TensorMeta>> {
    let (x, cos, sin, pos) = (&ins[0], &ins[1], &ins[2], &ins[3]);
    if !x.dtype.is_float() {
        return Err(Error::invalid(op, format!("x must be a float tensor, got {x}")));
    }
    if x.shape.rank() != 4 {
        let axes = match layout {
            AttentionLayout::Bnsd => "[B, H, S, D]",
            AttentionLayout::Bsnd => "[B, S, H, D]",
        };
        return Err(Error::invalid(op, format!("x must be {axes} ({}), got {x}", layout.name())));
    }
    let [b, _, s, d] = layout.bhsd(x.shape.dims());
    if !d.is_multiple_of(2) {
        return Err(Error::invalid(op, format!("the head dim D of x must be even, got {x}")));
    }
    for (name, t) in [("cos", cos), ("sin", sin)] {
        if t.dtype != DType::F32 && t.dtype != x.dtype {
            return Err(Error::invalid(op, format!("{name} must be f32 or {} like x, got {t}", x.dtype)));
        }
        if t.shape.rank() != 2 || t.shape.dims()[1] != d / 2 {
            return Err(Error::invalid(op, format!("{name} must be [P, D/2] = [P, {}], got {t}", d / 2)));
        }
    }
    if cos.shape != sin.shape || cos.dtype != sin.dtype {
        return Err(Error::invalid(op, format!("cos and sin differ: cos is {cos}, sin is {sin}")));
    }
    if !matches!(pos.dtype, DType::I32 | DType::I64) {
        return Err(Error::invalid(op, format!("positions must be i32 or i64, got {pos}")));
    }
    if pos.shape != Shape::from([b, s]) {
        return Err(Error::invalid(op, format!("positions must be [B, S] = [{b}, {s}], got {pos}")));
    }
    Ok(vec![TensorMeta { dtype: x.dtype, shape: x.shape.clone() }])
}

/// The cos and sin tables of Rope, each `[max_positions, head_dim / 2]` row-major:
/// `inv_freq_i = theta^(-2i / head_dim)`, angle `p · inv_freq_i`, computed in f64 and
/// stored as f32. An odd `head_dim` gives tables of `head_dim / 2` (rounded down)
/// columns, which Rope then refuses; [`try_rope_tables`] checks its arguments first.
pub fn rope_tables(theta: f64, head_dim: usize, max_positions: usize) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv: Vec<f64> = (0..half).map(|i| theta.powf(-2.0 * i as f64 / head_dim as f64)).collect();
    let n = half.saturating_mul(max_positions);
    let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for p in 0..max_positions {
        for &f in &inv {
            let a = p as f64 * f;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    (cos, sin)
}

/// [`rope_tables`] after checking its arguments: `theta` finite and above 1, `head_dim`
/// even and non-zero, and the tables' size within bounds ([`crate::size`]).
pub fn try_rope_tables(theta: f64, head_dim: usize, max_positions: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    if !theta.is_finite() || theta <= 1.0 {
        return Err(Error::invalid("Rope", format!("rope theta must be finite and above 1, got {theta}")));
    }
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(Error::invalid("Rope", format!("the head dim must be even and non-zero, got {head_dim}")));
    }
    size::bytes("the rope tables", &[2, max_positions, head_dim / 2], DType::F32)
        .map_err(|e| Error::invalid("Rope", e.to_string()))?;
    Ok(rope_tables(theta, head_dim, max_positions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Op;

    fn m(dt: DType, s: &[usize]) -> TensorMeta {
        TensorMeta::new(dt, s)
    }

    #[test]
    fn tables_follow_the_formula() {
        let (c, s) = rope_tables(10000.0, 4, 3);
        assert_eq!((c.len(), s.len()), (6, 6));
        // Position 0 does not turn; pair 1 of position 2 turns by 2 / 100.
        assert_eq!((&c[..2], &s[..2]), (&[1.0f32, 1.0][..], &[0.0f32, 0.0][..]));
        assert_eq!(c[5], (0.02f64).cos() as f32);
        assert_eq!(s[5], (0.02f64).sin() as f32);
        assert!(try_rope_tables(1e4, 3, 8).is_err());
        assert!(try_rope_tables(f64::NAN, 4, 8).is_err());
        assert!(try_rope_tables(1e4, 4, usize::MAX).is_err());
        assert_eq!(try_rope_tables(1e4, 4, 3).unwrap(), (c, s));
    }

    #[test]
    fn rope_checks_its_operands() {
        let rope = |layout| Op::Rope { interleaved: false, layout };
        let ok = [m(DType::F16, &[2, 3, 5, 8]), m(DType::F32, &[9, 4]), m(DType::F32, &[9, 4]), m(DType::I64, &[2, 5])];
        assert_eq!(rope(AttentionLayout::Bnsd).infer(&ok).unwrap()[0], ok[0]);
        let bsnd = [ok[0].clone(), ok[1].clone(), ok[2].clone(), m(DType::I32, &[2, 3])];
        assert_eq!(rope(AttentionLayout::Bsnd).infer(&bsnd).unwrap()[0], ok[0]);
        let bad = |i: usize, t: TensorMeta| {
            let mut v = ok.to_vec();
            v[i] = t;
            rope(AttentionLayout::Bnsd).infer(&v).unwrap_err().to_string()
        };
        assert!(bad(0, m(DType::F32, &[2, 3, 5, 7])).contains("even"));
        assert!(bad(0, m(DType::I32, &[2, 3, 5, 8])).contains("float"));
        assert!(bad(1, m(DType::F32, &[9, 8])).contains("[P, D/2]"));
        assert!(bad(2, m(DType::BF16, &[9, 4])).contains("sin must be f32 or f16"));
        assert!(bad(2, m(DType::F32, &[7, 4])).contains("differ"));
        assert!(bad(3, m(DType::F32, &[2, 5])).contains("i32 or i64"));
        assert!(bad(3, m(DType::I32, &[5, 2])).contains("[B, S]"));
    }
}
