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
/// of the last axis: one run per row; a window of every whole axis: one run). Same result
/// as the element-wise form, without an offset per element. Any range of runs can be
/// copied on its own ([`SliceRuns::copy`]), so a tier may split the runs over threads.
pub struct SliceRuns {
    /// Byte offset in x of the first run, bytes per run.
    base: usize,
    run: usize,
    /// The window's lengths on the axes up to the cut, and x's byte strides there.
    outer: Vec<usize>,
    strides: Vec<usize>,
}

impl SliceRuns {
    /// The runs of the resolved window `w` (unit steps, one axis per dim of x, x's dtype
    /// the output's) for an output of `out_len` bytes; an output of another size is an error.
    pub fn new(x: &In, w: &[crate::op::SliceAxis], out_len: usize) -> Result<SliceRuns, KernelError> {
        let es = x.dtype.size();
        let st = crate::shape::Shape::new(x.dims.to_vec()).contiguous_strides();
        let cut = w.iter().zip(x.dims).rposition(|(a, &d)| a.len != d);
        let (run, outer) = match cut {
            Some(c) => (w[c].len * st[c] * es, w[..c].iter().map(|a| a.len).collect()),
            None => (numel(x.dims) * es, Vec::new()),
        };
        if numel(&outer).checked_mul(run) != Some(out_len) {
            return Err(KernelError::Internal("Slice: the output does not match the window".into()));
        }
        let base = w.iter().zip(&st).map(|(a, s)| a.start * s).sum::<usize>() * es;
        let strides = st[..outer.len()].iter().map(|s| s * es).collect();
        Ok(SliceRuns { base, run, outer, strides })
    }

    /// Bytes per run.
    pub fn run_bytes(&self) -> usize {
        self.run
    }

    /// Number of runs.
    pub fn runs(&self) -> usize {
        numel(&self.outer)
    }

    /// Copies runs `first..` of `x` into `chunk`, whole runs (`chunk.len()` a multiple of
    /// the run); a run outside `x` is an error.
    pub fn copy(&self, x: &[u8], first: usize, chunk: &mut [u8]) -> KernelResult {
        if self.run == 0 {
            return Ok(());
        }
        let mut idx = vec![0usize; self.outer.len()];
        let mut rem = first;
        for d in (0..self.outer.len()).rev() {
            idx[d] = rem % self.outer[d];
            rem /= self.outer[d];
        }
        for dst in chunk.chunks_mut(self.run) {
            let from = self.base + idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<usize>();
            let src = x
                .get(from..from + self.run)
                .ok_or_else(|| KernelError::Internal("Slice: the output does not match the window".into()))?;
            dst.copy_from_slice(src);
            for d in (0..self.outer.len()).rev() {
                idx[d] += 1;
                if idx[d] < self.outer[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }
}

fn slice_runs(x: &In, o: &mut Out, w: &[crate::op::SliceAxis]) -> KernelResult {
    SliceRuns::new(x, w, o.bytes.len())?.copy(x.bytes, 0, o.bytes)
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
