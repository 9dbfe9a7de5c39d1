//! What an aclnn executor computes ([`Kernel`]): a runtime op (through
//! [`crate::compute`]), or one of the aclnn operators the runtime has no op for —
//! aclnnAmax, aclnnEqScalar, aclnnInplaceMaskedFillScalar — computed here.

use runtime::reference::operands::{
    broadcast_strides, gather_offsets, load_f64, load_i64, numel, store_f64, store_i64,
};
use runtime::reference::{In, Out};
use runtime::{DType, KernelError, KernelResult, Op, Shape, TensorMeta};

/// What an executor computes: a runtime op through the reference kernels, or one of the
/// aclnn operators the runtime has no op for, computed by the emulator itself
/// (this module; their aclnn entry points are in [`crate::aclnn::masking`]).
#[derive(Clone, Debug)]
pub enum Kernel {
    Op(Op),
    /// aclnnAmax: the maximum over `axes` (ascending, distinct, in range), NaN
    /// propagating; `keep` keeps them as 1.
    Amax {
        axes: Vec<usize>,
        keep: bool,
    },
    /// aclnnEqScalar: 1 where `self == value` (the scalar rounded to self's dtype), else
    /// 0, written as `out`.
    EqScalar {
        value: f64,
        out: DType,
    },
    /// aclnnInplaceMaskedFillScalar: `value` where the bool mask (broadcast to selfRef)
    /// is true. Inputs `[selfRef, mask]`, output `selfRef`.
    MaskedFill {
        value: f64,
    },
}

impl From<Op> for Kernel {
    fn from(op: Op) -> Kernel {
        Kernel::Op(op)
    }
}

impl Kernel {
    /// The outputs the inputs give, or why they are invalid.
    pub fn infer(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>, String> {
        match self {
            Kernel::Op(op) => op.infer(inputs).map_err(|e| e.to_string()),
            k => infer(k, inputs),
        }
    }

    /// Computes the kernel on contiguous inputs into contiguous outputs (a stream job).
    pub fn run(&self, ins: &[In], outs: &mut [Out]) -> KernelResult {
        match self {
            Kernel::Op(op) => crate::compute::run(op, ins, outs),
            k => run_other(k, ins, outs),
        }
    }
}

/// Output shapes of a non-`Op` kernel (phase 1), or why the operands do not fit.
fn infer(k: &Kernel, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>, String> {
    match (k, inputs) {
        (Kernel::Amax { axes, keep }, [x]) => {
            let dims: Vec<usize> = x
                .shape
                .dims()
                .iter()
                .enumerate()
                .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
                    (false, _) => Some(d),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            Ok(vec![TensorMeta::new(x.dtype, dims)])
        }
        (Kernel::EqScalar { out, .. }, [x]) => Ok(vec![TensorMeta::new(*out, x.shape.clone())]),
        (Kernel::MaskedFill { .. }, [s, m]) => match Shape::broadcast(&s.shape, &m.shape) {
            Some(b) if b == s.shape => Ok(vec![s.clone()]),
            _ => Err(format!("mask {:?} does not broadcast to selfRef {:?}", m.shape.dims(), s.shape.dims())),
        },
        _ => Err(format!("{} operands do not fit {k:?}", inputs.len())),
    }
}

/// Computes a non-`Op` kernel on contiguous inputs into contiguous outputs.
fn run_other(k: &Kernel, ins: &[In], outs: &mut [Out]) -> KernelResult {
    let n_outs = outs.len();
    let ([x, rest @ ..], [o]) = (ins, outs) else {
        return Err(KernelError::Internal(format!("{} inputs, {n_outs} outputs for {k:?}", ins.len())));
    };
    match (k, rest) {
        (Kernel::Amax { axes, .. }, []) => amax(x, axes, o),
        (Kernel::EqScalar { value, .. }, []) => {
            let eq: Vec<f64> = if x.dtype.is_float() {
                load_f64(x)?.into_iter().map(|a| f64::from(u8::from(a == *value))).collect()
            } else {
                // Integers and bools compare exactly; a value with a fraction equals none.
                let iv = (value.fract() == 0.0).then_some(*value as i64);
                load_i64(x)?.into_iter().map(|a| f64::from(u8::from(Some(a) == iv))).collect()
            };
            store_f64(o, &eq)
        }
        (Kernel::MaskedFill { value }, [m]) => {
            let es = x.dtype.size();
            let n = x.numel();
            o.bytes[..n * es].copy_from_slice(&x.bytes[..n * es]);
            let fill = le_bytes(x.dtype, *value);
            let at = gather_offsets(x.dims, &broadcast_strides(m.dims, x.dims));
            for (i, &mi) in at.iter().enumerate() {
                if m.bytes[mi] != 0 {
                    o.bytes[i * es..(i + 1) * es].copy_from_slice(&fill);
                }
            }
            Ok(())
        }
        _ => Err(KernelError::Internal(format!("{} inputs for {k:?}", ins.len()))),
    }
}

/// The maximum over `axes`: NaN wins (as torch.amax); integers and bools exactly.
fn amax(x: &In, axes: &[usize], o: &mut Out) -> KernelResult {
    // Each input element's position in the output: reduced axes get stride 0.
    let kept: Vec<usize> = x.dims.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let ks = Shape::new(kept.clone()).contiguous_strides();
    let map: Vec<usize> = (0..x.dims.len()).map(|i| if axes.contains(&i) { 0 } else { ks[i] }).collect();
    let at = gather_offsets(x.dims, &map);
    let m = numel(&kept);
    if x.dtype.is_int() {
        let mut acc = vec![i64::MIN; m];
        for (v, &j) in load_i64(x)?.into_iter().zip(&at) {
            acc[j] = acc[j].max(v);
        }
        store_i64(o, &acc)
    } else {
        let mut acc = vec![f64::NEG_INFINITY; m];
        for (v, &j) in load_f64(x)?.into_iter().zip(&at) {
            // Once NaN, `acc < v` is false for every v: NaN stays.
            if v.is_nan() || acc[j] < v {
                acc[j] = v;
            }
        }
        store_f64(o, &acc)
    }
}

/// One element of `dt` holding `v` (a bool holds `v != 0`).
fn le_bytes(dt: DType, v: f64) -> Vec<u8> {
    match dt {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::I64 => (v as i64).to_le_bytes().to_vec(),
        DType::U8 => vec![u8::from(v != 0.0)],
    }
}
