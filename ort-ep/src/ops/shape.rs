//! ONNX ops that npurt runs as a reshape (`Unsqueeze`, `Squeeze`, `Flatten`), and the 1-D
//! operands of `MatMul`, which ONNX promotes by a reshape on each side.

use runtime::{Op, TensorMeta};

use super::base::{Attrs, Decline, decline};
use crate::graph::{Attr, NodeInfo};

/// The axes of an Unsqueeze or Squeeze: the second input from opset 13 on (a constant, or a
/// value folded on the host), the `axes` attribute before. `None` when absent (a Squeeze of
/// every 1).
fn axes(node: &NodeInfo, a: &Attrs<'_>) -> Result<Option<Vec<i64>>, Decline> {
    if node.since_version >= 13 {
        a.only(&[])?;
        return match node.inputs.get(1).and_then(Option::as_ref) {
            None => Ok(None),
            Some(v) => match &v.data {
                Some(d) => Ok(Some(d.clone())),
                None => decline(format!("the axes {:?} are not a constant", v.name)),
            },
        };
    }
    a.only(&["axes"])?;
    match a.map.get("axes") {
        None => Ok(None),
        Some(Attr::Ints(v)) => Ok(Some(v.clone())),
        Some(_) => decline("attribute `axes` is not a list of ints"),
    }
}

/// `axis` (negative counting from `rank`) as an index below `rank`.
fn norm(axis: i64, rank: usize) -> Result<usize, Decline> {
    let r = rank as i64;
    let k = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&k) { Ok(k as usize) } else { decline(format!("axis {axis} is out of range for rank {rank}")) }
}

/// Unsqueeze, Squeeze or Flatten as npurt's Reshape to the output shape they make of the
/// first input's static dims.
pub fn reshape_like(node: &NodeInfo, a: &Attrs<'_>, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    let Some(x) = first else { return decline("no input") };
    let dims = x.shape.dims();
    let out: Vec<usize> = match node.op_type.as_str() {
        "Unsqueeze" => {
            let Some(axes) = axes(node, a)? else { return decline("Unsqueeze without axes") };
            let rank = dims.len() + axes.len();
            let mut at: Vec<usize> = axes.iter().map(|&k| norm(k, rank)).collect::<Result<_, _>>()?;
            at.sort_unstable();
            if at.windows(2).any(|w| w[0] == w[1]) {
                return decline(format!("repeated axes {axes:?}"));
            }
            let mut rest = dims.iter();
            (0..rank).map(|i| if at.contains(&i) { 1 } else { rest.next().copied().unwrap_or(1) }).collect()
        }
        "Squeeze" => match axes(node, a)? {
            None => dims.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let at: Vec<usize> = axes.iter().map(|&k| norm(k, dims.len())).collect::<Result<_, _>>()?;
                if let Some(&k) = at.iter().find(|&&k| dims[k] != 1) {
                    return decline(format!("Squeeze of axis {k} whose dim is {}", dims[k]));
                }
                dims.iter().enumerate().filter(|(i, _)| !at.contains(i)).map(|(_, &d)| d).collect()
            }
        },
        "Flatten" => {
            a.only(&["axis"])?;
            let axis = a.int("axis", 1)?;
            let k = if axis == dims.len() as i64 { dims.len() } else { norm(axis, dims.len().max(1))? };
            let outer: usize = dims[..k].iter().product();
            let inner: usize = dims[k..].iter().product();
            vec![outer, inner]
        }
        other => return decline(format!("{other} is not a reshape")),
    };
    let shape: Result<Vec<isize>, Decline> =
        out.iter().map(|&d| isize::try_from(d).map_err(|_| Decline(format!("dim {d}")))).collect();
    Ok(Op::Reshape { shape: shape? })
}

/// Reshapes wrapped around a `MatMul` with a 1-D operand (ONNX promotes `[K]` on the left to
/// `[1, K]` and on the right to `[K, 1]`, and drops the added dim from the product): the
/// per-operand shapes, the output's shape, and the operands' metas as the MatMul sees them.
#[allow(clippy::type_complexity)]
pub fn promote_matmul(
    op: &Op,
    inputs: &[TensorMeta],
) -> Result<(Vec<Option<Vec<isize>>>, Option<Vec<isize>>, Vec<TensorMeta>), Decline> {
    let is_matmul = matches!(op, Op::MatMul { trans_a: false, trans_b: false });
    if !is_matmul || inputs.len() != 2 || inputs.iter().all(|m| m.shape.rank() != 1) {
        return Ok((Vec::new(), None, inputs.to_vec()));
    }
    let (a, b) = (&inputs[0], &inputs[1]);
    let mut shaped = inputs.to_vec();
    let mut pre = vec![None, None];
    if a.shape.rank() == 1 {
        let k = a.shape.dims()[0];
        shaped[0] = TensorMeta::new(a.dtype, [1, k]);
        pre[0] = Some(vec![1, k as isize]);
    }
    if b.shape.rank() == 1 {
        let k = b.shape.dims()[0];
        shaped[1] = TensorMeta::new(b.dtype, [k, 1]);
        pre[1] = Some(vec![k as isize, 1]);
    }
    let out = op.infer(&shaped).map_err(|e| Decline(format!("npurt refuses it: {e}")))?;
    let Some(out) = out.first() else { return decline("MatMul gives no output") };
    let mut dims: Vec<isize> = out.shape.dims().iter().map(|&d| d as isize).collect();
    // The product is [..., M, N]: M came from a 1-D `a`, N from a 1-D `b`.
    let m_at = dims.len().saturating_sub(2);
    if b.shape.rank() == 1 {
        dims.pop();
    }
    if a.shape.rank() == 1 && m_at < dims.len() {
        dims.remove(m_at);
    }
    Ok((pre, Some(dims), shaped))
}
