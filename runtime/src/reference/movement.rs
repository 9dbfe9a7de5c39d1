//! Element selection and data movement shared by every host tier (the reference tier, the
//! CPU backend's generic and fast tiers, the Ascend backend's host tier and acl-emu), so
//! that all of them give the same bytes: `Where`. Whole elements are moved, never
//! converted, so every dtype is exact.

use super::operands::{In, Out, broadcast_strides, gather_offsets};
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
