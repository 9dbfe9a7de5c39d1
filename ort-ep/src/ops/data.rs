//! ONNX ops that move elements in the data path (`Where`, `Concat`, `Slice`, `Expand`, `Split`)
//! and the reductions (`ReduceSum`, `ReduceMean`) as npurt's ops of the same names, their index
//! inputs (a Slice's starts, an Expand's shape, a Split's sizes, a reduction's axes) read from
//! constants or values folded on the host and made attributes.

use runtime::graph::HostTensor;
use runtime::{DType, Op, OpKind, Shape, TensorMeta};

use super::base::{Attrs, Decline, decline, operand_dtype};
use crate::graph::{Attr, NodeInfo, elem_size};

/// The values of input `i` of `node`: a constant or a value folded on the host (`None` when
/// the input is absent).
fn values(node: &NodeInfo, i: usize, what: &str) -> Result<Option<Vec<i64>>, Decline> {
    match node.inputs.get(i).and_then(Option::as_ref) {
        None => Ok(None),
        Some(v) => match &v.data {
            Some(d) => Ok(Some(d.clone())),
            None => decline(format!("the {what} {:?} are not a constant nor folded on the host", v.name)),
        },
    }
}

/// ONNX Slice (opset 10 on: starts, ends, axes, steps as inputs) as npurt's Slice, whose
/// resolution (`runtime::op::resolve_slice`) follows ONNX Slice-13, which has the semantics of
/// opset 10 on.
pub fn slice(node: &NodeInfo, a: &Attrs<'_>) -> Result<Op, Decline> {
    a.only(&[])?;
    let (Some(starts), Some(ends)) = (values(node, 1, "starts")?, values(node, 2, "ends")?) else {
        return decline("no starts or ends");
    };
    let axes = values(node, 3, "axes")?.unwrap_or_default();
    let axes: Result<Vec<isize>, Decline> =
        axes.iter().map(|&k| isize::try_from(k).map_err(|_| Decline(format!("axis {k}")))).collect();
    let steps = values(node, 4, "steps")?.unwrap_or_default();
    Ok(Op::Slice { starts, ends, axes: axes?, steps })
}

/// ONNX ReduceSum or ReduceMean (opset 11 on: negative axes) as npurt's: `axes` an attribute
/// (ReduceSum before 13, ReduceMean before 18) or an input from then on, a constant or
/// folded value; no axes reduces every axis, as npurt's empty list does. `keepdims` as ONNX's
/// (default 1). `noop_with_empty_axes` = 1 with no axes (the input unchanged) is declined.
pub fn reduce(node: &NodeInfo, a: &Attrs<'_>, kind: OpKind) -> Result<Op, Decline> {
    let input_since = if kind == OpKind::ReduceSum { 13 } else { 18 };
    let axes = if node.since_version >= input_since {
        a.only(&["keepdims", "noop_with_empty_axes"])?;
        values(node, 1, "axes")?.unwrap_or_default()
    } else {
        a.only(&["keepdims", "axes"])?;
        match a.map.get("axes") {
            None => Vec::new(),
            Some(Attr::Ints(v)) => v.clone(),
            Some(_) => return decline("attribute `axes` is not a list of ints"),
        }
    };
    if axes.is_empty() && a.flag("noop_with_empty_axes")? {
        return decline("noop_with_empty_axes with no axes (the input unchanged)");
    }
    let axes: Vec<isize> =
        axes.iter().map(|&k| isize::try_from(k).map_err(|_| Decline(format!("axis {k}")))).collect::<Result<_, _>>()?;
    let keepdims = match a.int("keepdims", 1)? {
        0 => false,
        1 => true,
        v => return decline(format!("attribute `keepdims` = {v}")),
    };
    Ok(if kind == OpKind::ReduceSum { Op::ReduceSum { axes, keepdims } } else { Op::ReduceMean { axes, keepdims } })
}

/// ONNX Expand (opset 8 on; the same semantics as 13) as npurt's, the shape a constant or
/// folded value with no negative entry.
pub fn expand(node: &NodeInfo, a: &Attrs<'_>) -> Result<Op, Decline> {
    a.only(&[])?;
    Ok(Op::Expand { shape: shape_at(node, 1)? })
}

/// The dims input `i` of `node` gives: a constant or folded value with no negative entry.
fn shape_at(node: &NodeInfo, i: usize) -> Result<Vec<usize>, Decline> {
    let Some(shape) = values(node, i, "shape")? else { return decline("no shape") };
    shape.iter().map(|&d| usize::try_from(d).map_err(|_| Decline(format!("shape entry {d}")))).collect()
}

/// ONNX Concat (opset 4 on, `axis` required) as npurt's.
pub fn concat(a: &Attrs<'_>) -> Result<Op, Decline> {
    a.only(&["axis"])?;
    match a.map.get("axis") {
        Some(Attr::Int(k)) => Ok(Op::Concat { axis: isize::try_from(*k).map_err(|_| Decline(format!("axis {k}")))? }),
        _ => decline("no integer attribute `axis`"),
    }
}

/// ONNX Split as one npurt Slice of the first input per output, the sizes from the `split`
/// attribute (opset < 13), the `split` input (13 on: a constant or folded value), else
/// `num_outputs` (18 on: chunks of `ceil(d / n)`, the last one smaller), else equal parts of
/// the axis (which must divide evenly).
pub fn split(node: &NodeInfo, a: &Attrs<'_>, x: Option<&TensorMeta>) -> Result<Vec<Op>, Decline> {
    let Some(x) = x else { return decline("no input") };
    let sizes = if node.since_version >= 13 {
        a.only(&["axis", "num_outputs"])?;
        values(node, 1, "split sizes")?
    } else {
        a.only(&["axis", "split"])?;
        match a.map.get("split") {
            None => None,
            Some(Attr::Ints(v)) => Some(v.clone()),
            Some(_) => return decline("attribute `split` is not a list of ints"),
        }
    };
    let n = node.outputs.len();
    if n == 0 || node.outputs.iter().any(Option::is_none) {
        return decline("an output is missing");
    }
    let rank = x.shape.rank() as i64;
    let axis = a.int("axis", 0)?;
    let k = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&k) {
        return decline(format!("attribute `axis` = {axis} for rank {rank}"));
    }
    let d = x.shape.dims()[k as usize] as i64;
    let sizes = match sizes {
        Some(s) => s,
        None => match a.map.get("num_outputs") {
            Some(_) => {
                let m = a.int("num_outputs", 0)?;
                if m != n as i64 || m < 1 {
                    return decline(format!("num_outputs = {m} for {n} output(s)"));
                }
                let chunk = (d + m - 1) / m;
                let last = d - chunk * (m - 1);
                if last < 1 {
                    return decline(format!("{m} chunks of {chunk} leave no last chunk of the axis's {d}"));
                }
                let mut s = vec![chunk; n - 1];
                s.push(last);
                s
            }
            None if d % n as i64 == 0 => vec![d / n as i64; n],
            None => return decline(format!("the axis's {d} does not split into {n} equal parts")),
        },
    };
    let total = sizes.iter().try_fold(0i64, |t, &s| if s < 0 { None } else { t.checked_add(s) });
    if sizes.len() != n || total != Some(d) {
        return decline(format!("split sizes {sizes:?} for {n} output(s) of the axis's {d}"));
    }
    let mut at = 0i64;
    let mut out = Vec::with_capacity(n);
    for s in sizes {
        out.push(Op::Slice { starts: vec![at], ends: vec![at + s], axes: vec![k as isize], steps: Vec::new() });
        at += s;
    }
    Ok(out)
}

/// ONNX ConstantOfShape (opset 9 on) as npurt's Expand of its `value` (a one-element tensor
/// attribute of one of npurt's dtypes or bool, bf16 aside; none is an f32 0), a 0-d constant, to
/// the shape, a constant or folded value with no negative entry: the op and the constant.
pub fn constant_of_shape(node: &NodeInfo, a: &Attrs<'_>) -> Result<(Op, HostTensor), Decline> {
    a.only(&["value"])?;
    let (elem, bytes) = match a.map.get("value") {
        None => (1, 0f32.to_le_bytes().to_vec()),
        Some(Attr::Tensor { elem, bytes: Some(b) }) if elem_size(*elem) == Some(b.len()) => (*elem, b.clone()),
        Some(_) => return decline("attribute `value` is not one element of a fixed-width type"),
    };
    let dtype = match operand_dtype(elem) {
        Some(d) if d.size() == bytes.len() && d != DType::BF16 => d,
        _ => return decline(format!("`value` of ONNX element type {elem} (claimed: npurt's dtypes but bf16)")),
    };
    if node.outputs.len() != 1 {
        return decline("not one output");
    }
    let op = Op::Expand { shape: shape_at(node, 0)? };
    Ok((op, HostTensor { dtype, shape: Shape::from(Vec::<usize>::new()), bytes: bytes.into() }))
}
