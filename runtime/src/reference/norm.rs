//! The root-mean-square norms and the gated activation of decoder LLMs, in f64: RmsNorm,
//! AddRmsNorm (two outputs: the normalised sum and the sum) and SwiGlu. Also the helpers
//! the host tiers share with them: rounding a sum to the operands' dtype, so that every
//! tier normalises the same residual it passes on.

use super::math::silu_f64;
use super::operands::{In, Out, load_f64, store_f64};
use crate::dtype::DType;
use crate::kernel::{KernelError, KernelResult};
use half::{bf16, f16};

/// `v` rounded to `dtype` (a float dtype) and widened back.
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v as f32 as f64,
    }
}

/// `x / sqrt(mean(x²) + eps) * w` per row of `d`, in f64 (the sum of squares of f32
/// values cannot overflow there). A row holding ±inf or NaN (its mean square is not
/// finite) is NaN throughout, as LayerNorm's rows are, so that every tier and the
/// compositions of other backends agree on it.
pub fn rms_rows(x: &[f64], d: usize, w: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    if d == 0 {
        return out;
    }
    for (row, o) in x.chunks(d).zip(out.chunks_mut(d)) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        if !ms.is_finite() {
            o.fill(f64::NAN);
            continue;
        }
        let inv = 1.0 / (ms + eps).sqrt();
        for i in 0..d {
            o[i] = row[i] * inv * w.map_or(1.0, |w| w[i]);
        }
    }
    out
}

fn last(x: &In) -> usize {
    x.dims.last().copied().unwrap_or(1)
}

/// RmsNorm: x and an optional weight.
pub fn rms_norm(ins: &[In], outs: &mut [Out], eps: f32) -> KernelResult {
    let x = load_f64(&ins[0])?;
    let w = ins.get(1).map(load_f64).transpose()?;
    let v = rms_rows(&x, last(&ins[0]), w.as_deref(), eps as f64);
    store_f64(&mut outs[0], &v)
}

/// AddRmsNorm: output 1 is `x + residual` rounded once to the dtype; output 0 is the
/// RmsNorm of that rounded sum (the value passed on), times the weight.
pub fn add_rms_norm(ins: &[In], outs: &mut [Out], eps: f32) -> KernelResult {
    if outs.len() != 2 {
        return Err(KernelError::Internal(format!("AddRmsNorm has 2 outputs, got {}", outs.len())));
    }
    let (x, r, w) = (load_f64(&ins[0])?, load_f64(&ins[1])?, load_f64(&ins[2])?);
    let dt = outs[1].dtype;
    let sum: Vec<f64> = x.iter().zip(&r).map(|(a, b)| round_to(dt, a + b)).collect();
    store_f64(&mut outs[1], &sum)?;
    let v = rms_rows(&sum, last(&ins[0]), Some(&w), eps as f64);
    store_f64(&mut outs[0], &v)
}

/// SwiGlu: `silu(gate) * up`, gate and up the two halves of x's last axis (gate first)
/// or two inputs.
pub fn swiglu(ins: &[In], outs: &mut [Out]) -> KernelResult {
    let x = load_f64(&ins[0])?;
    let v: Vec<f64> = match ins.get(1) {
        Some(up) => x.iter().zip(load_f64(up)?).map(|(&g, u)| silu_f64(g) * u).collect(),
        None => {
            let n = last(&ins[0]) / 2;
            if n == 0 {
                Vec::new()
            } else {
                x.chunks(2 * n).flat_map(|row| (0..n).map(move |i| silu_f64(row[i]) * row[n + i])).collect()
            }
        }
    };
    store_f64(&mut outs[0], &v)
}
