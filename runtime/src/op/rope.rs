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

/// How a model scales its rotary frequencies: the `rope_type` of a Hugging Face
/// `config.json` (`rope_scaling`, or `rope_parameters` as transformers >= 5 writes it),
/// computed as transformers' `modeling_rope_utils` computes the same type. `Send + Sync`,
/// plain data.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum RopeScaling {
    /// `default`: `inv_freq_i = theta^(-2i / head_dim)`.
    #[default]
    None,
    /// `linear` (position interpolation): every inverse frequency divided by `factor`.
    Linear { factor: f64 },
    /// `llama3` (Llama 3.1 and later): wavelengths (`2π / inv_freq`) shorter than
    /// `original_max_position_embeddings / high_freq_factor` keep their frequency, those
    /// longer than `original_max_position_embeddings / low_freq_factor` are divided by
    /// `factor`, and those between are interpolated between the two by
    /// `s = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)`:
    /// `(1 - s) · inv / factor + s · inv`.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: f64 },
    /// `yarn`: pair `i` blends `inv` (extrapolation) and `inv / factor` (interpolation) by a
    /// ramp over the pairs between the correction dims of `beta_fast` and `beta_slow`
    /// rotations in `original_max_position_embeddings` positions
    /// (`head_dim · ln(original / (2π · rotations)) / (2 ln theta)`, floored and ceiled
    /// when `truncate`), and cos and sin are multiplied by `attention_factor`. The
    /// defaults of the config's optional keys (`beta_fast` 32, `beta_slow` 1, `truncate`
    /// true, the attention factor from `mscale`) are resolved by whoever parses it.
    Yarn {
        factor: f64,
        original_max_position_embeddings: f64,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: f64,
        truncate: bool,
    },
}

impl RopeScaling {
    /// Checks the parameters: every one finite and positive, for `llama3`
    /// `high_freq_factor > low_freq_factor` (the interpolation divides by their
    /// difference), for `yarn` `beta_fast >= beta_slow`.
    pub fn validate(&self) -> Result<()> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::invalid("Rope", format!("rope scaling: {name} must be finite and positive, got {v}")))
            }
        };
        let ordered = |(hi, h): (&str, f64), (lo, l): (&str, f64)| {
            if h > l || (hi == "beta_fast" && h == l) {
                Ok(())
            } else {
                Err(Error::invalid("Rope", format!("rope scaling: {hi} ({h}) must exceed {lo} ({l})")))
            }
        };
        match *self {
            RopeScaling::None => Ok(()),
            RopeScaling::Linear { factor } => positive("factor", factor),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                positive("factor", factor)?;
                positive("low_freq_factor", low_freq_factor)?;
                positive("high_freq_factor", high_freq_factor)?;
                positive("original_max_position_embeddings", original_max_position_embeddings)?;
                ordered(("high_freq_factor", high_freq_factor), ("low_freq_factor", low_freq_factor))
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate: _,
            } => {
                positive("factor", factor)?;
                positive("original_max_position_embeddings", original_max_position_embeddings)?;
                positive("beta_fast", beta_fast)?;
                positive("beta_slow", beta_slow)?;
                positive("attention_factor", attention_factor)?;
                ordered(("beta_fast", beta_fast), ("beta_slow", beta_slow))
            }
        }
    }

    /// What cos and sin are multiplied by: `yarn`'s attention factor, else 1.
    pub fn attention_factor(&self) -> f64 {
        match *self {
            RopeScaling::Yarn { attention_factor, .. } => attention_factor,
            _ => 1.0,
        }
    }
}

/// The inverse frequencies of Rope's `head_dim / 2` pairs: `theta^(-2i / head_dim)`, then
/// `scaling` applied, in f64.
pub fn rope_inv_freq(theta: f64, head_dim: usize, scaling: RopeScaling) -> Vec<f64> {
    let dim = head_dim as f64;
    let base = (0..head_dim / 2).map(|i| theta.powf(-2.0 * i as f64 / dim));
    match scaling {
        RopeScaling::None => base.collect(),
        RopeScaling::Linear { factor } => base.map(|inv| inv / factor).collect(),
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings: old } => {
            base.map(|inv| {
                let wavelength = 2.0 * std::f64::consts::PI / inv;
                if wavelength < old / high_freq_factor {
                    inv
                } else if wavelength > old / low_freq_factor {
                    inv / factor
                } else {
                    let s = (old / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
                    (1.0 - s) * inv / factor + s * inv
                }
            })
            .collect()
        }
        RopeScaling::Yarn { factor, original_max_position_embeddings: old, beta_fast, beta_slow, truncate, .. } => {
            // The pairs between the correction dims of the two rotation counts, once.
            let corr =
                |rotations: f64| dim * (old / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
            let (mut low, mut high) = (corr(beta_fast), corr(beta_slow));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
            if low == high {
                high += 0.001;
            }
            base.enumerate()
                .map(|(i, inv)| {
                    let interpolated = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    inv / factor * interpolated + inv * (1.0 - interpolated)
                })
                .collect()
        }
    }
}

/// The cos and sin tables of Rope, each `[max_positions, head_dim / 2]` row-major: angle
/// `p · inv_freq_i` with the inverse frequencies of [`rope_inv_freq`], times the scaling's
/// [`attention_factor`](RopeScaling::attention_factor), computed in f64 and stored as f32. An odd `head_dim` gives tables of `head_dim / 2` (rounded down)
/// columns, which Rope then refuses; [`try_rope_tables`] checks its arguments first.
pub fn rope_tables(theta: f64, head_dim: usize, max_positions: usize, scaling: RopeScaling) -> (Vec<f32>, Vec<f32>) {
    let inv = rope_inv_freq(theta, head_dim, scaling);
    let mscale = scaling.attention_factor();
    let n = inv.len().saturating_mul(max_positions);
    let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for p in 0..max_positions {
        for &f in &inv {
            let a = p as f64 * f;
            cos.push((a.cos() * mscale) as f32);
            sin.push((a.sin() * mscale) as f32);
        }
    }
    (cos, sin)
}

/// [`rope_tables`] after checking its arguments: `theta` finite and above 1, `head_dim`
/// even and non-zero, `scaling` valid ([`RopeScaling::validate`]), and the tables' size
/// within bounds ([`crate::size`]).
pub fn try_rope_tables(
    theta: f64,
    head_dim: usize,
    max_positions: usize,
    scaling: RopeScaling,
) -> Result<(Vec<f32>, Vec<f32>)> {
    if !theta.is_finite() || theta <= 1.0 {
        return Err(Error::invalid("Rope", format!("rope theta must be finite and above 1, got {theta}")));
    }
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(Error::invalid("Rope", format!("the head dim must be even and non-zero, got {head_dim}")));
    }
    scaling.validate()?;
    size::bytes("the rope tables", &[2, max_positions, head_dim / 2], DType::F32)
        .map_err(|e| Error::invalid("Rope", e.to_string()))?;
    Ok(rope_tables(theta, head_dim, max_positions, scaling))
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
        let none = RopeScaling::None;
        let (c, s) = rope_tables(10000.0, 4, 3, none);
        assert_eq!((c.len(), s.len()), (6, 6));
        // Position 0 does not turn; pair 1 of position 2 turns by 2 / 100.
        assert_eq!((&c[..2], &s[..2]), (&[1.0f32, 1.0][..], &[0.0f32, 0.0][..]));
        assert_eq!(c[5], (0.02f64).cos() as f32);
        assert_eq!(s[5], (0.02f64).sin() as f32);
        assert!(try_rope_tables(1e4, 3, 8, none).is_err());
        assert!(try_rope_tables(f64::NAN, 4, 8, none).is_err());
        assert!(try_rope_tables(1e4, 4, usize::MAX, none).is_err());
        assert_eq!(try_rope_tables(1e4, 4, 3, none).unwrap(), (c, s));
    }

    #[test]
    fn scaled_frequencies_follow_their_rope_type() {
        // head_dim 16, theta 500000: wavelengths 2π · 500000^(i/8) = 6.3, 32.5, 168, ...
        let plain = rope_inv_freq(5e5, 16, RopeScaling::None);
        let linear = rope_inv_freq(5e5, 16, RopeScaling::Linear { factor: 4.0 });
        for (l, p) in linear.iter().zip(&plain) {
            assert_eq!(*l, p / 4.0);
        }
        // Original context 64: below a wavelength of 16 unchanged, above 64 divided by 8,
        // between (pair 1, 32.5) interpolated.
        let llama3 = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64.0,
        };
        let scaled = rope_inv_freq(5e5, 16, llama3);
        assert_eq!(scaled[0], plain[0]);
        for i in 2..8 {
            assert_eq!(scaled[i], plain[i] / 8.0, "pair {i}");
        }
        let wavelength = 2.0 * std::f64::consts::PI / plain[1];
        let s = (64.0 / wavelength - 1.0) / 3.0;
        assert!(s > 0.0 && s < 1.0, "pair 1 lies between the two wavelengths: {s}");
        assert!((scaled[1] - ((1.0 - s) * plain[1] / 8.0 + s * plain[1])).abs() < 1e-15);
        assert!(scaled[1] < plain[1] && scaled[1] > plain[1] / 8.0);
        let (c, _) = rope_tables(5e5, 16, 3, llama3);
        assert_eq!(c[8 + 2], (scaled[2]).cos() as f32, "position 1, pair 2");
        // Invalid parameters are refused by name.
        let bad = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 1.0,
            original_max_position_embeddings: 64.0,
        };
        assert!(try_rope_tables(5e5, 16, 8, bad).unwrap_err().to_string().contains("high_freq_factor"));
        let bad = RopeScaling::Linear { factor: f64::NAN };
        assert!(try_rope_tables(5e5, 16, 8, bad).unwrap_err().to_string().contains("factor"));
        assert!(try_rope_tables(5e5, 16, 8, llama3).is_ok());
        // yarn, head_dim 16, theta 1e6, original context 64: correction dims -0.66 and
        // 1.34, truncated to 0 and 2: pair 0 keeps its frequency, pair 1 is half way,
        // pairs 2.. are divided by the factor; cos and sin scaled by the attention factor.
        let yarn = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position_embeddings: 64.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: 1.25,
            truncate: true,
        };
        let (plain, scaled) = (rope_inv_freq(1e6, 16, RopeScaling::None), rope_inv_freq(1e6, 16, yarn));
        assert_eq!(scaled[0], plain[0]);
        assert!((scaled[1] - (plain[1] / 4.0 + plain[1]) / 2.0).abs() < 1e-15);
        for i in 2..8 {
            assert_eq!(scaled[i], plain[i] / 4.0, "pair {i}");
        }
        let (c, s) = rope_tables(1e6, 16, 2, yarn);
        assert_eq!((c[0], s[0]), (1.25, 0.0));
        assert_eq!(c[8 + 3], ((scaled[3]).cos() * 1.25) as f32);
        let bad = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position_embeddings: 64.0,
            beta_fast: 0.5,
            beta_slow: 1.0,
            attention_factor: 1.25,
            truncate: true,
        };
        assert!(try_rope_tables(1e6, 16, 8, bad).unwrap_err().to_string().contains("beta_fast"));
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
