//! Element selection and data movement shared by every host tier (the reference tier, the
//! CPU backend's generic and fast tiers, the Ascend backend's host tier and acl-emu), so
//! that all of them give the same bytes: `Where`, `Concat`. Whole elements are moved, never
//! converted, so every dtype is exact.

use super::operands::{In, Out, broadcast_strides, gather_offsets, numel};
use crate::kernel::{KernelError, KernelResult};

/// Copies element `from` of `x` to element `to` of `o` (same dtype).
fn put(o: &mut Out, to: usize, x: &In, from: usize) {
    let es = x.dtype.size();
    o.bytes[to * es..(to + 1) * es].copy_from_slice(&x.bytes[from * es..(from + 1) * es]);
}

/// `condition ? x : y` (ONNX Where) with the three operands broadcast to the output: a
/// u8 condition, non-zero meaning true.
pub fn select(c: &In, x: &In, y: &In, o: &mut Out) -> KernelResult {
    if x.dtype != o.dtype || y.dtype != o.dtype {
        return Err(KernelError::Internal("Where: x, y and the output differ in dtype".into()));
    }
    let od = o.dims.to_vec();
    let oc = gather_offsets(&od, &broadcast_strides(c.dims, &od));
    let ox = gather_offsets(&od, &broadcast_strides(x.dims, &od));
    let oy = gather_offsets(&od, &broadcast_strides(y.dims, &od));
    for (i, ((&ci, &xi), &yi)) in oc.iter().zip(&ox).zip(&oy).enumerate() {
        if c.bytes[ci] != 0 {
            put(o, i, x, xi);
        } else {
            put(o, i, y, yi);
        }
    }
    Ok(())
}

/// The inputs joined along `axis` (negative counts from the end): per index of the axes
/// before it, each input's block in turn.
pub fn concat(ins: &[In], o: &mut Out, axis: isize) -> KernelResult {
    let od = o.dims.to_vec();
    let ax = crate::shape::Shape::new(od.clone())
        .axis(axis)
        .ok_or_else(|| KernelError::Internal(format!("Concat: axis {axis} out of range")))?;
    let es = o.dtype.size();
    let (outer, inner) = (numel(&od[..ax]), numel(&od[ax + 1..]));
    let row = od[ax] * inner * es;
    let mut at = 0;
    for x in ins {
        if x.dtype != o.dtype || x.dims.len() != od.len() {
            return Err(KernelError::Internal("Concat: an input differs from the output in dtype or rank".into()));
        }
        let w = x.dims[ax] * inner * es;
        for r in 0..outer {
            o.bytes[r * row + at..r * row + at + w].copy_from_slice(&x.bytes[r * w..(r + 1) * w]);
        }
        at += w;
    }
    Ok(())
}
