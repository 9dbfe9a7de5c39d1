//! Building an op from its kind and `key=value` attributes.

use super::table::{AttentionLayout, GeluApprox, Op, OpKind};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// A number attribute, `d` when absent.
fn parse<T: std::str::FromStr>(op: &'static str, k: &str, v: Option<String>, d: T) -> Result<T> {
    match v {
        None => Ok(d),
        Some(s) => s.trim().parse().map_err(|_| Error::invalid(op, format!("attribute {k}={s:?} is malformed"))),
    }
}

/// A flag as ONNX writes it (`0` / `1`) or as a word (`true` / `false`).
fn flag(op: &'static str, k: &str, v: Option<String>, d: bool) -> Result<bool> {
    match v.as_deref().map(str::trim) {
        None => Ok(d),
        Some("1" | "true") => Ok(true),
        Some("0" | "false") => Ok(false),
        Some(s) => Err(Error::invalid(op, format!("attribute {k}={s:?} is malformed (0, 1, true or false)"))),
    }
}

/// Attention's and Rope's `layout` (bnsd when absent).
fn layout(op: &'static str, v: Option<String>) -> Result<AttentionLayout> {
    match v {
        Some(v) => AttentionLayout::parse(&v)
            .ok_or_else(|| Error::invalid(op, format!("attribute layout={v:?} is not bnsd or bsnd"))),
        None => Ok(AttentionLayout::Bnsd),
    }
}

/// A comma list of numbers.
fn list<T: std::str::FromStr>(op: &'static str, k: &str, v: &str) -> Result<Vec<T>> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| Error::invalid(op, format!("attribute {k}: {s:?} is not a number"))))
        .collect()
}

/// KvCacheWrite (no attributes) or PagedAttention (`scale`, default 1/sqrt(D)).
fn paged_op(kind: OpKind, scale: Option<String>) -> Result<Op> {
    let op = kind.name();
    match (kind, scale) {
        (OpKind::PagedAttention, s) => {
            Ok(Op::PagedAttention { scale: s.map(|v| parse(op, "scale", Some(v), 1.0)).transpose()? })
        }
        (_, Some(_)) => Err(Error::invalid(op, "unknown attribute \"scale\"")),
        (_, None) => Ok(Op::KvCacheWrite),
    }
}

/// Builds an op from its kind and `key=value` attributes (the CLI and model loaders use
/// this). Unknown keys are errors, and so is a key given twice ("given twice", naming it);
/// missing keys take the defaults shown.
///
/// | op | attributes (default) |
/// |---|---|
/// | MatMul | `trans_a` (false), `trans_b` (false) |
/// | Gemm | `trans_a`, `trans_b`, `alpha` (1), `beta` (1) |
/// | GELU, BiasGelu | `approx` = `erf` \| `tanh` (erf) |
/// | Softmax | `axis` (-1) |
/// | LayerNorm, AddLayerNorm | `eps` (1e-5) |
/// | Permute/Transpose | `perm` (comma list; default reverses the axes) |
/// | Reshape | `shape` (comma list, one -1 allowed) |
/// | Concat | `axis` (required; negative counts from the end) |
/// | Slice | `starts`, `ends` (required), `axes` (empty = the first ones), `steps` (empty = 1) |
/// | Expand | `shape` (required, comma list) |
/// | Gather/Embedding | `axis` (0) |
/// | Cast | `to` (f32) |
/// | ReduceSum, ReduceMean | `axes` (comma list; empty = all), `keepdims` (true, as ONNX) |
/// | Scale | `factor` (1) |
/// | Attention | `scale` (1/sqrt(D)), `layout` = `bnsd` \| `bsnd` (bnsd), `causal` (false) |
/// | Rope | `interleaved` (false: rotate-half), `layout` = `bnsd` \| `bsnd` (bnsd) |
/// | PagedAttention | `scale` (1/sqrt(D)) |
pub fn op_from_attrs(kind: OpKind, attrs: &[(String, String)], rank_hint: usize) -> Result<Op> {
    let op = kind.name();
    for (i, (k, v)) in attrs.iter().enumerate() {
        if let Some((_, first)) = attrs[..i].iter().find(|(key, _)| key == k) {
            return Err(Error::invalid(op, format!("attribute {k:?} is given twice ({k}={first:?} and {k}={v:?})")));
        }
    }
    let mut used = vec![false; attrs.len()];
    let mut get = |k: &str| -> Option<String> {
        attrs.iter().enumerate().find(|(_, (key, _))| key == k).map(|(i, (_, v))| {
            used[i] = true;
            v.clone()
        })
    };
    let approx = |v: Option<String>| -> Result<GeluApprox> {
        match v.as_deref() {
            None | Some("erf") => Ok(GeluApprox::Erf),
            Some("tanh") => Ok(GeluApprox::Tanh),
            Some(o) => Err(Error::invalid(op, format!("approx must be erf or tanh, got {o:?}"))),
        }
    };
    let built = match kind {
        OpKind::MatMul => Op::MatMul {
            trans_a: flag(op, "trans_a", get("trans_a"), false)?,
            trans_b: flag(op, "trans_b", get("trans_b"), false)?,
        },
        OpKind::Gemm => Op::Gemm {
            trans_a: flag(op, "trans_a", get("trans_a"), false)?,
            trans_b: flag(op, "trans_b", get("trans_b"), false)?,
            alpha: parse(op, "alpha", get("alpha"), 1.0)?,
            beta: parse(op, "beta", get("beta"), 1.0)?,
        },
        OpKind::Linear => Op::Linear,
        OpKind::LinearGelu => Op::LinearGelu,
        OpKind::Add => Op::Add,
        OpKind::Sub => Op::Sub,
        OpKind::Mul => Op::Mul,
        OpKind::Div => Op::Div,
        OpKind::Pow => Op::Pow,
        OpKind::Equal => Op::Equal,
        OpKind::Where => Op::Where,
        OpKind::Slice => {
            let req =
                |k: &str, v: Option<String>| v.ok_or_else(|| Error::invalid(op, format!("needs attribute {k}=...")));
            let starts = list(op, "starts", &req("starts", get("starts"))?)?;
            let ends = list(op, "ends", &req("ends", get("ends"))?)?;
            let axes = match get("axes") {
                Some(v) => list(op, "axes", &v)?,
                None => Vec::new(),
            };
            let steps = match get("steps") {
                Some(v) => list(op, "steps", &v)?,
                None => Vec::new(),
            };
            Op::Slice { starts, ends, axes, steps }
        }
        OpKind::Expand => Op::Expand {
            shape: list(op, "shape", &get("shape").ok_or_else(|| Error::invalid(op, "needs attribute shape=..."))?)?,
        },
        OpKind::Concat => Op::Concat {
            axis: parse(
                op,
                "axis",
                Some(get("axis").ok_or_else(|| Error::invalid(op, "needs attribute axis=..."))?),
                0,
            )?,
        },
        OpKind::Relu => Op::Relu,
        OpKind::Gelu => Op::Gelu(approx(get("approx"))?),
        OpKind::BiasGelu => Op::BiasGelu(approx(get("approx"))?),
        OpKind::Tanh => Op::Tanh,
        OpKind::Erf => Op::Erf,
        OpKind::Exp => Op::Exp,
        OpKind::Sqrt => Op::Sqrt,
        OpKind::Neg => Op::Neg,
        OpKind::Sigmoid => Op::Sigmoid,
        OpKind::Softmax => Op::Softmax { axis: parse(op, "axis", get("axis"), -1)? },
        OpKind::LayerNorm => Op::LayerNorm { eps: parse(op, "eps", get("eps"), 1e-5)? },
        OpKind::AddLayerNorm => Op::AddLayerNorm { eps: parse(op, "eps", get("eps"), 1e-5)? },
        OpKind::Silu | OpKind::SwiGlu | OpKind::RmsNorm | OpKind::AddRmsNorm => decoder_op(kind, op, &mut get)?,
        OpKind::Permute => Op::Permute {
            perm: match get("perm") {
                Some(v) => list(op, "perm", &v)?,
                None => (0..rank_hint).rev().collect(),
            },
        },
        OpKind::Reshape => Op::Reshape {
            shape: list(op, "shape", &get("shape").ok_or_else(|| Error::invalid(op, "needs attribute shape=..."))?)?,
        },
        OpKind::Gather => Op::Gather { axis: parse(op, "axis", get("axis"), 0)? },
        OpKind::Cast => {
            let to = get("to").unwrap_or_else(|| "f32".into());
            Op::Cast { to: DType::parse(&to).ok_or_else(|| Error::invalid(op, format!("unknown dtype {to:?}")))? }
        }
        OpKind::ReduceSum | OpKind::ReduceMean => {
            let axes = match get("axes") {
                Some(v) => list(op, "axes", &v)?,
                None => Vec::new(),
            };
            let keepdims = flag(op, "keepdims", get("keepdims"), true)?;
            if kind == OpKind::ReduceSum { Op::ReduceSum { axes, keepdims } } else { Op::ReduceMean { axes, keepdims } }
        }
        OpKind::Scale => Op::Scale { factor: parse(op, "factor", get("factor"), 1.0)? },
        OpKind::Copy => Op::Copy,
        OpKind::Attention => Op::Attention {
            scale: match get("scale") {
                Some(v) => Some(parse(op, "scale", Some(v), 1.0)?),
                None => None,
            },
            layout: layout(op, get("layout"))?,
            causal: flag(op, "causal", get("causal"), false)?,
        },
        OpKind::Rope => decoder_op(kind, op, &mut get)?,
        OpKind::KvCacheWrite | OpKind::PagedAttention => paged_op(kind, get("scale"))?,
    };
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(Error::invalid(op, format!("unknown attribute {:?}", attrs[i].0)));
    }
    Ok(built)
}

/// The decoder-LLM ops: RmsNorm and AddRmsNorm with `eps` (1e-5), Silu and SwiGlu with no
/// attribute, Rope with `interleaved` (false) and `layout` (bnsd).
fn decoder_op(kind: OpKind, op: &'static str, get: &mut dyn FnMut(&str) -> Option<String>) -> Result<Op> {
    Ok(match kind {
        OpKind::Silu => Op::Silu,
        OpKind::SwiGlu => Op::SwiGlu,
        OpKind::Rope => Op::Rope {
            interleaved: flag(op, "interleaved", get("interleaved"), false)?,
            layout: layout(op, get("layout"))?,
        },
        OpKind::RmsNorm => Op::RmsNorm { eps: parse(op, "eps", get("eps"), 1e-5)? },
        _ => Op::AddRmsNorm { eps: parse(op, "eps", get("eps"), 1e-5)? },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_keep_dims_unless_told_otherwise_as_onnx() {
        let op = op_from_attrs(OpKind::ReduceSum, &[], 2).unwrap();
        assert!(matches!(op, Op::ReduceSum { keepdims: true, .. }), "{op:?}");
        let attrs = [("keepdims".to_string(), "0".to_string())];
        let op = op_from_attrs(OpKind::ReduceMean, &attrs, 2).unwrap();
        assert!(matches!(op, Op::ReduceMean { keepdims: false, .. }), "{op:?}");
    }

    #[test]
    fn a_repeated_attribute_is_given_twice_not_unknown() {
        let attrs = [("axis".to_string(), "0".to_string()), ("axis".to_string(), "1".to_string())];
        let e = op_from_attrs(OpKind::Softmax, &attrs, 2).unwrap_err().to_string();
        assert!(e.contains("\"axis\" is given twice"), "{e}");
        assert!(!e.contains("unknown"), "{e}");
        // Also for a key the op does not know: the repetition is what is reported.
        let attrs = [("zz".to_string(), "0".to_string()), ("zz".to_string(), "0".to_string())];
        let e = op_from_attrs(OpKind::Relu, &attrs, 2).unwrap_err().to_string();
        assert!(e.contains("\"zz\" is given twice"), "{e}");
    }
}
