//! Shape subgraphs folded on the host.
//!
//! Exports compute reshape targets and position ids through chains such as
//! `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` or `Slice(position_ids, 0, seq)`. Once
//! the input shapes are known (npurt compiles a fused node per set of input shapes) every such
//! value is a constant: [`eval`] computes one node of such a chain from its inputs' values
//! (integers and bools, as i64) and a `Shape` from its input's dims. The folded values then
//! become attributes (a Reshape's shape) or constants (a Gather's indices) of the npurt graph.
//! The ops follow ONNX's definitions; anything outside them (a float value, an attribute not
//! known, a value larger than [`MAX_ELEMENTS`]) is a [`Decline`].

use super::{BOOL, Decline, decline};
use crate::graph::{Attr, NodeInfo};

/// The ONNX ops [`eval`] computes.
pub const FOLDED: [&str; 17] = [
    "Shape",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Slice",
    "Cast",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Equal",
    "Where",
    "Expand",
    "Range",
    "Identity",
    "ConstantOfShape",
];

/// The most elements a folded value may hold.
pub const MAX_ELEMENTS: usize = 1 << 16;

/// ONNX element types folded: int32, int64, bool.
pub const INTS: [i32; 3] = [6, 7, BOOL];

/// A value known on the host: ONNX element type, dims, and the elements as i64. `Send + Sync`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostValue {
    pub elem: i32,
    pub dims: Vec<usize>,
    pub data: Vec<i64>,
}

impl HostValue {
    fn new(elem: i32, dims: Vec<usize>, data: Vec<i64>) -> Result<HostValue, Decline> {
        if data.len() > MAX_ELEMENTS {
            return decline(format!("a folded value of {} elements (at most {MAX_ELEMENTS})", data.len()));
        }
        let data = match elem {
            BOOL => data.into_iter().map(|x| (x != 0) as i64).collect(),
            6 => data.into_iter().map(|x| x as i32 as i64).collect(),
            _ => data,
        };
        Ok(HostValue { elem, dims, data })
    }

    fn scalar_at(&self, i: usize) -> Result<i64, Decline> {
        self.data.get(i).copied().ok_or_else(|| Decline(format!("element {i} of a folded value of {:?}", self.dims)))
    }
}

fn attr_int(node: &NodeInfo, name: &str, default: i64) -> Result<i64, Decline> {
    match node.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Int(v)) => Ok(*v),
        Some(_) => decline(format!("attribute `{name}` is not an int")),
    }
}

fn only(node: &NodeInfo, known: &[&str]) -> Result<(), Decline> {
    match node.attrs.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => decline(format!("attribute `{k}` is not folded")),
        None => Ok(()),
    }
}

/// `axis` (negative from `rank`) as an index `<= rank` when `end_ok`, else `< rank`.
fn axis(a: i64, rank: usize) -> Result<usize, Decline> {
    let k = if a < 0 { a + rank as i64 } else { a };
    usize::try_from(k).ok().filter(|&k| k < rank).ok_or_else(|| Decline(format!("axis {a} for rank {rank}")))
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The numpy broadcast of `a` and `b`.
fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, Decline> {
    let n = a.len().max(b.len());
    let at = |d: &[usize], i: usize| if i + d.len() >= n { d[i + d.len() - n] } else { 1 };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => decline(format!("dims {x} and {y} do not broadcast")),
        })
        .collect()
}

/// `v`'s elements read at each index of `out` (broadcasting).
fn spread(v: &HostValue, out: &[usize]) -> Vec<i64> {
    let total: usize = out.iter().product();
    let off = out.len() - v.dims.len();
    let vs = strides(&v.dims);
    let os = strides(out);
    (0..total)
        .map(|flat| {
            let mut src = 0;
            for (k, (&d, &st)) in v.dims.iter().zip(&vs).enumerate() {
                let idx = (flat / os[k + off]) % out[k + off];
                src += if d == 1 { 0 } else { idx * st };
            }
            v.data[src]
        })
        .collect()
}

fn total(dims: &[usize]) -> Result<usize, Decline> {
    dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| Decline(format!("dims {dims:?} overflow")))
}

fn dims_of(v: &HostValue) -> Result<Vec<usize>, Decline> {
    v.data.iter().map(|&d| usize::try_from(d).map_err(|_| Decline(format!("dim {d}")))).collect()
}

/// Computes `node` on the host. `inputs[i]` is the value of input `i` (`None` when absent
/// or unknown); `shape` the dims of the first input, which a `Shape` reads instead of its
/// value. The result holds one value per output.
pub fn eval(node: &NodeInfo, inputs: &[Option<&HostValue>], shape: Option<&[usize]>) -> Result<HostValue, Decline> {
    if !node.is_onnx() || !FOLDED.contains(&node.op_type.as_str()) {
        return decline("not folded");
    }
    if node.outputs.len() != 1 {
        return decline("not one output");
    }
    let out_elem = node.outputs[0].as_ref().map_or(0, |v| v.elem);
    if node.op_type == "Shape" {
        only(node, &["start", "end"])?;
        let Some(d) = shape else { return decline("the input's dims are not known") };
        let r = d.len() as i64;
        let clamp = |x: i64| (if x < 0 { x + r } else { x }).clamp(0, r) as usize;
        let (s, e) = (clamp(attr_int(node, "start", 0)?), clamp(attr_int(node, "end", r)?));
        let data: Vec<i64> = d[s..e.max(s)].iter().map(|&x| x as i64).collect();
        return HostValue::new(7, vec![data.len()], data);
    }
    let x = |i: usize| -> Result<&HostValue, Decline> {
        inputs.get(i).copied().flatten().ok_or_else(|| Decline(format!("input {i} is not known on the host")))
    };
    if inputs.iter().flatten().any(|v| !INTS.contains(&v.elem)) || !INTS.contains(&out_elem) {
        return decline("not an integer or bool value");
    }
    match node.op_type.as_str() {
        "Identity" => Ok(x(0)?.clone()),
        "Cast" => {
            only(node, &["to", "saturate"])?;
            let to = attr_int(node, "to", 0)? as i32;
            if !INTS.contains(&to) {
                return decline(format!("Cast to element type {to}"));
            }
            HostValue::new(to, x(0)?.dims.clone(), x(0)?.data.clone())
        }
        "Add" | "Sub" | "Mul" | "Div" | "Equal" => {
            only(node, &[])?;
            let (a, b) = (x(0)?, x(1)?);
            let dims = broadcast(&a.dims, &b.dims)?;
            total(&dims)?;
            let (va, vb) = (spread(a, &dims), spread(b, &dims));
            let mut data = Vec::with_capacity(va.len());
            for (p, q) in va.into_iter().zip(vb) {
                data.push(match node.op_type.as_str() {
                    "Add" => p.wrapping_add(q),
                    "Sub" => p.wrapping_sub(q),
                    "Mul" => p.wrapping_mul(q),
                    "Equal" => (p == q) as i64,
                    // Integer division truncates, as ORT's CPU kernel.
                    _ => p.checked_div(q).ok_or_else(|| Decline("an integer division by 0".into()))?,
                });
            }
            HostValue::new(out_elem, dims, data)
        }
        "Where" => {
            only(node, &[])?;
            let (c, a, b) = (x(0)?, x(1)?, x(2)?);
            let dims = broadcast(&broadcast(&c.dims, &a.dims)?, &b.dims)?;
            total(&dims)?;
            let (vc, va, vb) = (spread(c, &dims), spread(a, &dims), spread(b, &dims));
            let data = vc.iter().zip(va).zip(vb).map(|((&c, p), q)| if c != 0 { p } else { q }).collect();
            HostValue::new(out_elem, dims, data)
        }
        "Expand" => {
            only(node, &[])?;
            let dims = broadcast(&x(0)?.dims, &dims_of(x(1)?)?)?;
            total(&dims)?;
            HostValue::new(out_elem, dims.clone(), spread(x(0)?, &dims))
        }
        "Gather" => gather(node, x(0)?, x(1)?, out_elem),
        "Unsqueeze" | "Squeeze" => squeeze(node, x(0)?, inputs.get(1).copied().flatten()),
        "Concat" => {
            only(node, &["axis"])?;
            let first = x(0)?;
            let k = axis(attr_int(node, "axis", 0)?, first.dims.len())?;
            let parts: Vec<&HostValue> = (0..inputs.len()).map(x).collect::<Result<_, _>>()?;
            let mut dims = first.dims.clone();
            dims[k] = 0;
            for p in &parts {
                let same = p.dims.len() == dims.len() && (0..dims.len()).all(|i| i == k || p.dims[i] == first.dims[i]);
                if !same {
                    return decline(format!("Concat of {:?} and {:?}", first.dims, p.dims));
                }
                dims[k] += p.dims[k];
            }
            let outer: usize = dims[..k].iter().product();
            let mut data = Vec::with_capacity(total(&dims)?);
            for o in 0..outer {
                for p in &parts {
                    let chunk: usize = p.dims[k..].iter().product();
                    data.extend_from_slice(&p.data[o * chunk..(o + 1) * chunk]);
                }
            }
            HostValue::new(out_elem, dims, data)
        }
        "Slice" => slice(node, inputs),
        "ConstantOfShape" => constant_of_shape(node, x(0)?, out_elem),
        "Range" => {
            only(node, &[])?;
            let (s, l, d) = (x(0)?.scalar_at(0)?, x(1)?.scalar_at(0)?, x(2)?.scalar_at(0)?);
            if d == 0 {
                return decline("Range with delta 0");
            }
            let n = ((l - s) as f64 / d as f64).ceil().max(0.0) as usize;
            if n > MAX_ELEMENTS {
                return decline(format!("Range of {n} elements"));
            }
            HostValue::new(out_elem, vec![n], (0..n as i64).map(|i| s + i * d).collect())
        }
        other => decline(format!("{other} is not folded")),
    }
}

/// ONNX ConstantOfShape: `value`'s one element (a tensor attribute) at every index of the
/// shape its input gives; without `value` a float 0, which is not folded.
fn constant_of_shape(node: &NodeInfo, shape: &HostValue, out_elem: i32) -> Result<HostValue, Decline> {
    only(node, &["value"])?;
    let one = |elem: i32, b: &Option<Vec<u8>>| {
        b.as_deref().and_then(|b| crate::graph::ints_of(elem, b)).filter(|v| v.len() == 1).map(|v| v[0])
    };
    let v = match node.attrs.get("value") {
        Some(Attr::Tensor { elem, bytes }) if *elem == out_elem && one(*elem, bytes).is_some() => {
            one(*elem, bytes).unwrap_or(0)
        }
        Some(Attr::Tensor { elem, .. }) if *elem != out_elem => {
            return decline(format!("`value` of element type {elem} for an output of {out_elem}"));
        }
        Some(_) => return decline("attribute `value` is not one integer or bool"),
        None => return decline("no `value`: a float 0"),
    };
    let dims = dims_of(shape)?;
    let n = total(&dims)?;
    if n > MAX_ELEMENTS {
        return decline(format!("a folded value of {n} elements (at most {MAX_ELEMENTS})"));
    }
    HostValue::new(out_elem, dims, vec![v; n])
}

fn gather(node: &NodeInfo, data: &HostValue, idx: &HostValue, out_elem: i32) -> Result<HostValue, Decline> {
    only(node, &["axis"])?;
    let k = axis(attr_int(node, "axis", 0)?, data.dims.len())?;
    let n = data.dims[k] as i64;
    let outer: usize = data.dims[..k].iter().product();
    let inner: usize = data.dims[k + 1..].iter().product();
    let mut dims = data.dims[..k].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&data.dims[k + 1..]);
    let mut out = Vec::with_capacity(total(&dims)?);
    for o in 0..outer {
        for &i in &idx.data {
            let j = if i < 0 { i + n } else { i };
            if !(0..n).contains(&j) {
                return decline(format!("Gather index {i} out of range for dim {n}"));
            }
            let at = (o * n as usize + j as usize) * inner;
            out.extend_from_slice(&data.data[at..at + inner]);
        }
    }
    HostValue::new(out_elem, dims, out)
}

fn squeeze(node: &NodeInfo, x: &HostValue, axes_in: Option<&HostValue>) -> Result<HostValue, Decline> {
    let axes: Option<Vec<i64>> = if node.since_version >= 13 {
        only(node, &[])?;
        axes_in.map(|v| v.data.clone())
    } else {
        only(node, &["axes"])?;
        match node.attrs.get("axes") {
            Some(Attr::Ints(v)) => Some(v.clone()),
            None => None,
            Some(_) => return decline("attribute `axes` is not a list of ints"),
        }
    };
    let dims: Vec<usize> = if node.op_type == "Unsqueeze" {
        let Some(axes) = axes else { return decline("Unsqueeze without axes") };
        let rank = x.dims.len() + axes.len();
        let at: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Result<_, _>>()?;
        let mut rest = x.dims.iter();
        (0..rank).map(|i| if at.contains(&i) { 1 } else { rest.next().copied().unwrap_or(1) }).collect()
    } else {
        match axes {
            None => x.dims.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let at: Vec<usize> = axes.iter().map(|&a| axis(a, x.dims.len())).collect::<Result<_, _>>()?;
                if at.iter().any(|&k| x.dims[k] != 1) {
                    return decline("Squeeze of a dim that is not 1");
                }
                x.dims.iter().enumerate().filter(|(i, _)| !at.contains(i)).map(|(_, &d)| d).collect()
            }
        }
    };
    HostValue::new(x.elem, dims, x.data.clone())
}

/// ONNX Slice (opset 10 on: starts, ends, axes, steps as inputs).
fn slice(node: &NodeInfo, inputs: &[Option<&HostValue>]) -> Result<HostValue, Decline> {
    only(node, &[])?;
    if node.since_version < 10 {
        return decline("Slice before opset 10");
    }
    let get = |i: usize| inputs.get(i).copied().flatten();
    let (Some(x), Some(starts), Some(ends)) = (get(0), get(1), get(2)) else {
        return decline("Slice operands not known on the host");
    };
    let r = x.dims.len();
    let axes: Vec<usize> = match get(3) {
        Some(a) => a.data.iter().map(|&k| axis(k, r)).collect::<Result<_, _>>()?,
        None => (0..starts.data.len()).collect(),
    };
    let steps: Vec<i64> = get(4).map_or_else(|| vec![1; axes.len()], |s| s.data.clone());
    if starts.data.len() != axes.len() || ends.data.len() != axes.len() || steps.len() != axes.len() {
        return decline("Slice operands of different lengths");
    }
    // Per axis: the first index and the step and count taken.
    let mut first = vec![0i64; r];
    let mut step = vec![1i64; r];
    let mut dims = x.dims.clone();
    for (k, &a) in axes.iter().enumerate() {
        let (d, st) = (x.dims[a] as i64, steps[k]);
        if st == 0 {
            return decline("Slice step 0");
        }
        let fix = |v: i64, lo: i64, hi: i64| (if v < 0 { v + d } else { v }).clamp(lo, hi);
        let (s, e) = if st > 0 {
            (fix(starts.data[k], 0, d), fix(ends.data[k], 0, d))
        } else {
            (fix(starts.data[k], 0, d - 1), fix(ends.data[k], -1, d - 1))
        };
        let (s128, e128, st128) = (s as i128, e as i128, st as i128);
        let n = if st > 0 {
            (e128 - s128 + st128 - 1).div_euclid(st128)
        } else {
            (s128 - e128 - st128 - 1).div_euclid(-st128)
        };
        first[a] = s;
        step[a] = st;
        dims[a] = n.max(0) as usize;
    }
    let n = total(&dims)?;
    let xs = strides(&x.dims);
    let os = strides(&dims);
    let mut data = Vec::with_capacity(n);
    for flat in 0..n {
        let mut src = 0i64;
        for a in 0..r {
            let i = ((flat / os[a]) % dims[a]) as i64;
            src += (first[a] + i * step[a]) * xs[a] as i64;
        }
        data.push(x.data[src as usize]);
    }
    HostValue::new(x.elem, dims, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ValueMeta;

    fn node(op: &str, out_elem: i32, attrs: &[(&str, Attr)]) -> NodeInfo {
        NodeInfo {
            node: std::ptr::null(),
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            since_version: 13,
            inputs: vec![],
            outputs: vec![Some(ValueMeta {
                name: "y".into(),
                elem: out_elem,
                dims: None,
                symbols: vec![],
                constant: false,
                data: None,
                handle: std::ptr::null(),
            })],
            attrs: attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        }
    }

    fn v(dims: &[usize], data: &[i64]) -> HostValue {
        HostValue { elem: 7, dims: dims.to_vec(), data: data.to_vec() }
    }

    #[test]
    fn the_position_id_chain_of_an_export_folds() {
        // Shape -> Gather(1) -> Unsqueeze(0) -> Slice(position_ids, 0, seq, axis 1).
        let s = eval(&node("Shape", 7, &[]), &[None], Some(&[2, 5])).unwrap();
        assert_eq!(s, v(&[2], &[2, 5]));
        let g = eval(&node("Gather", 7, &[("axis", Attr::Int(0))]), &[Some(&s), Some(&v(&[], &[1]))], None).unwrap();
        assert_eq!(g, v(&[], &[5]));
        let u = eval(&node("Unsqueeze", 7, &[]), &[Some(&g), Some(&v(&[1], &[0]))], None).unwrap();
        assert_eq!(u, v(&[1], &[5]));
        let pos = v(&[1, 8], &[0, 1, 2, 3, 4, 5, 6, 7]);
        let one = v(&[1], &[1]);
        let sl =
            eval(&node("Slice", 7, &[]), &[Some(&pos), Some(&v(&[1], &[0])), Some(&u), Some(&one), Some(&one)], None)
                .unwrap();
        assert_eq!(sl, v(&[1, 5], &[0, 1, 2, 3, 4]));
        // Negative index, shape start/end, concat, negative-step slice.
        let g = eval(&node("Gather", 7, &[]), &[Some(&s), Some(&v(&[1], &[-1]))], None).unwrap();
        assert_eq!(g, v(&[1], &[5]));
        let c =
            eval(&node("Concat", 7, &[("axis", Attr::Int(0))]), &[Some(&g), Some(&v(&[2], &[-1, 4]))], None).unwrap();
        assert_eq!(c, v(&[3], &[5, -1, 4]));
        let rev = eval(
            &node("Slice", 7, &[]),
            &[
                Some(&v(&[4], &[0, 1, 2, 3])),
                Some(&v(&[1], &[-1])),
                Some(&v(&[1], &[i64::MIN])),
                None,
                Some(&v(&[1], &[-2])),
            ],
            None,
        )
        .unwrap();
        assert_eq!(rev, v(&[2], &[3, 1]));
    }

    #[test]
    fn arithmetic_broadcasts_and_where_selects() {
        let a = v(&[2, 1], &[6, -7]);
        let b = v(&[3], &[1, 2, 4]);
        let d = eval(&node("Div", 7, &[]), &[Some(&a), Some(&b)], None).unwrap();
        assert_eq!(d, v(&[2, 3], &[6, 3, 1, -7, -3, -1]), "truncating");
        let e = eval(&node("Equal", BOOL, &[]), &[Some(&d), Some(&v(&[], &[3]))], None).unwrap();
        assert_eq!(e.data, vec![0, 1, 0, 0, 0, 0]);
        let w = eval(&node("Where", 7, &[]), &[Some(&e), Some(&v(&[], &[9])), Some(&d)], None).unwrap();
        assert_eq!(w.data, vec![6, 9, 1, -7, -3, -1]);
        assert!(eval(&node("Div", 7, &[]), &[Some(&a), Some(&v(&[], &[0]))], None).is_err());
        let x = eval(&node("Expand", 7, &[]), &[Some(&v(&[1], &[4])), Some(&v(&[1], &[3]))], None).unwrap();
        assert_eq!(x, v(&[3], &[4, 4, 4]));
        let r = eval(&node("Range", 7, &[]), &[Some(&v(&[], &[0])), Some(&v(&[], &[5])), Some(&v(&[], &[2]))], None);
        assert_eq!(r.unwrap(), v(&[3], &[0, 2, 4]));
    }

    #[test]
    fn floats_and_unknown_inputs_are_not_folded() {
        let f = HostValue { elem: 1, dims: vec![1], data: vec![0] };
        assert!(eval(&node("Add", 1, &[]), &[Some(&f), Some(&f)], None).is_err());
        assert!(eval(&node("Add", 7, &[]), &[Some(&v(&[1], &[1])), None], None).is_err());
        assert!(eval(&node("Shape", 7, &[]), &[None], None).is_err());
        assert!(eval(&node("Conv", 7, &[]), &[], None).is_err());
    }

    #[test]
    fn constant_of_shape_folds_an_integer_value() {
        let one = || Attr::Tensor { elem: 7, bytes: Some(1i64.to_le_bytes().to_vec()) };
        let c = eval(&node("ConstantOfShape", 7, &[("value", one())]), &[Some(&v(&[2], &[2, 3]))], None).unwrap();
        assert_eq!(c, v(&[2, 3], &[1; 6]));
        // No value (a float 0), a float value, a value of another type than the output's, a
        // negative dim, too many elements.
        let shape = v(&[1], &[3]);
        assert!(eval(&node("ConstantOfShape", 1, &[]), &[Some(&shape)], None).is_err());
        let f = Attr::Tensor { elem: 1, bytes: Some(1f32.to_le_bytes().to_vec()) };
        assert!(eval(&node("ConstantOfShape", 1, &[("value", f)]), &[Some(&shape)], None).is_err());
        let b = Attr::Tensor { elem: BOOL, bytes: Some(vec![1]) };
        assert!(eval(&node("ConstantOfShape", 7, &[("value", b)]), &[Some(&shape)], None).is_err());
        assert!(eval(&node("ConstantOfShape", 7, &[("value", one())]), &[Some(&v(&[1], &[-1]))], None).is_err());
        let big = v(&[2], &[1 << 20, 1 << 20]);
        assert!(eval(&node("ConstantOfShape", 7, &[("value", one())]), &[Some(&big)], None).is_err());
    }
}
