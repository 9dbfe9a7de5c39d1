//! Element selection and data movement shared by every host tier (the reference tier, the
//! CPU backend's generic and fast tiers, the Ascend backend's host tier and acl-emu), so
//! that all of them give the same bytes: `Where`, `Concat`, `Slice`, `Expand`. Whole elements are moved, never
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

/// Element offsets of x (of `dims`, contiguous) that a resolved Slice takes, in output
/// order.
pub fn slice_sources(dims: &[usize], w: &[crate::op::SliceAxis]) -> Vec<usize> {
    let st = crate::shape::Shape::new(dims.to_vec()).contiguous_strides();
    let base: usize = w.iter().zip(&st).map(|(a, s)| a.start * s).sum();
    let out: Vec<usize> = w.iter().map(|a| a.len).collect();
    let mut v = Vec::with_capacity(numel(&out));
    crate::shape::for_each_index(&out, |_, idx| {
        let off = idx.iter().zip(w).zip(&st).map(|((&i, a), &s)| i as i64 * a.step * s as i64).sum::<i64>();
        v.push((base as i64 + off) as usize);
    });
    v
}

/// ONNX Slice with constant starts, ends, axes and steps ([`crate::op::resolve_slice`]).
pub fn slice(x: &In, o: &mut Out, starts: &[i64], ends: &[i64], axes: &[isize], steps: &[i64]) -> KernelResult {
    let w = crate::op::resolve_slice(x.dims, starts, ends, axes, steps).map_err(KernelError::Internal)?;
    if w.iter().all(|a| a.step == 1) && x.dtype == o.dtype && w.len() == x.dims.len() {
        return slice_runs(x, o, &w);
    }
    let src = slice_sources(x.dims, &w);
    if src.len() != o.numel() {
        return Err(KernelError::Internal("Slice: the output does not match the window".into()));
    }
    super::operands::move_elements(x, o, &src);
    Ok(())
}

/// A Slice of unit steps, as runs of whole bytes: the axes after the last one the window
/// cuts are whole, so each index of the axes up to it starts one contiguous run (a window
/// of the last axis: one run per row). Same result as the element-wise form, without an
/// offset per element.
fn slice_runs(x: &In, o: &mut Out, w: &[crate::op::SliceAxis]) -> KernelResult {
    let es = x.dtype.size();
    let mismatch = || KernelError::Internal("Slice: the output does not match the window".into());
    if numel(&w.iter().map(|a| a.len).collect::<Vec<_>>()) * es != o.bytes.len() {
        return Err(mismatch());
    }
    let Some(cut) = w.iter().zip(x.dims).rposition(|(a, &d)| a.len != d) else {
        o.bytes.copy_from_slice(x.bytes.get(..o.bytes.len()).ok_or_else(mismatch)?);
        return Ok(());
    };
    let st = crate::shape::Shape::new(x.dims.to_vec()).contiguous_strides();
    let run = w[cut].len * st[cut] * es;
    let base: usize = w.iter().zip(&st).map(|(a, s)| a.start * s).sum();
    let outer: Vec<usize> = w[..cut].iter().map(|a| a.len).collect();
    let mut at = 0;
    let mut bad = false;
    crate::shape::for_each_index(&outer, |_, idx| {
        let from = (base + idx.iter().zip(&st).map(|(i, s)| i * s).sum::<usize>()) * es;
        match x.bytes.get(from..from + run) {
            Some(src) => o.bytes[at..at + run].copy_from_slice(src),
            None => bad = true,
        }
        at += run;
    });
    if bad { Err(mismatch()) } else { Ok(()) }
}

/// x broadcast to the output's dims (ONNX Expand).
pub fn expand(x: &In, o: &mut Out) -> KernelResult {
    if x.dims.len() > o.dims.len() || x.dtype != o.dtype {
        return Err(KernelError::Internal("Expand: the output does not hold x broadcast".into()));
    }
    let src = gather_offsets(o.dims, &broadcast_strides(x.dims, o.dims));
    super::operands::move_elements(x, o, &src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// Every window of unit steps (runs) equals the element-wise form, on a 3-D tensor.
    #[test]
    fn slice_runs_equal_the_elementwise_form() {
        let dims = [3usize, 4, 5];
        let st = crate::shape::Shape::new(dims.to_vec()).contiguous_strides();
        let x: Vec<u8> = (0..60u8).flat_map(|v| [v, 0, 0, v.wrapping_mul(3)]).collect();
        let xin = In { dtype: DType::F32, dims: &dims, strides: &st, bytes: &x };
        let windows: [(&[i64], &[i64], &[isize]); 6] = [
            (&[1], &[3], &[2]),
            (&[0], &[2], &[0]),
            (&[1, 2], &[3, 4], &[1, 2]),
            (&[0, 0, 0], &[3, 4, 5], &[0, 1, 2]),
            (&[2], &[2], &[1]),
            (&[-2], &[100], &[-1]),
        ];
        for (starts, ends, axes) in windows {
            let w = crate::op::resolve_slice(&dims, starts, ends, axes, &[]).unwrap();
            let n: usize = w.iter().map(|a| a.len).product();
            let (mut fast, mut each) = (vec![0u8; n * 4], vec![0u8; n * 4]);
            let odims: Vec<usize> = w.iter().map(|a| a.len).collect();
            slice(&xin, &mut Out { dtype: DType::F32, dims: &odims, bytes: &mut fast }, starts, ends, axes, &[])
                .unwrap();
            super::super::operands::move_elements(
                &xin,
                &mut Out { dtype: DType::F32, dims: &odims, bytes: &mut each },
                &slice_sources(&dims, &w),
            );
            assert_eq!(fast, each, "window {starts:?}..{ends:?} on axes {axes:?}");
        }
    }
}
