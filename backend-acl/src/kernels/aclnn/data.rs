//! Data movement: aclnnPermute (`aclnnop/aclnn_permute.h`), aclnnCat (`aclnn_cat.h`),
//! aclnnSlice (`aclnn_slice.h`), aclnnExpand (`aclnn_expand.h`), aclnnInplaceCopy
//! (`aclnnop/aclnn_copy.h`), aclnnIndexSelect (`aclnnop/aclnn_index_select.h`), and the
//! unaligned device-to-device byte copy made of aclnnInplaceCopy.

use super::call::BResult;
use super::call::{Call, View, align512};
use crate::error::AclBackendError;
use crate::stream::StreamRec;
use acl_sys::Api;
use acl_sys::result::aclnn as nn;
use runtime::DType;

pub(super) fn permute(c: &mut Call, x: &View, perm: &[usize], out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    let dims = c.ints(&p)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::permute_get_workspace_size(c.api, tx, dims, to) };
    c.run(p1, nn::permute)
}

/// The inputs joined along `axis` (aclnnCat over a tensor list). Not for recordings: the
/// list's descriptors are patched by list position, which [`super::Recorded`] does not
/// track (see [`super::repeatable`]).
pub(super) fn cat(c: &mut Call, ins: &[View], axis: usize, out: &View) -> BResult<()> {
    let list = c.tensor_list(ins)?;
    let to = c.output(out)?;
    // SAFETY: a live tensor list and descriptor owned by `c`.
    let p1 = unsafe { nn::cat_get_workspace_size(c.api, list, axis as i64, to) };
    c.run(p1, nn::cat)
}

/// A resolved Slice with positive steps and a non-empty window: one aclnnSlice per axis
/// it cuts (a single full-axis aclnnSlice, a copy, when it cuts none), the partial results
/// in two alternating scratch buffers.
pub(super) fn slice(c: &mut Call, x: &View, w: &[runtime::op::SliceAxis], out: &View) -> BResult<()> {
    let cut: Vec<usize> =
        (0..w.len()).filter(|&a| !(w[a].start == 0 && w[a].step == 1 && w[a].len == x.dims[a])).collect();
    if cut.is_empty() {
        let d = x.dims.first().copied().unwrap_or(1) as i64;
        return slice_axis(c, x, 0, (0, d, 1), out);
    }
    let mut shapes = Vec::with_capacity(cut.len());
    let mut dims = x.dims.clone();
    for &a in &cut {
        dims[a] = w[a].len;
        shapes.push(dims.clone());
    }
    let es = x.dtype.size();
    let half = shapes[..cut.len() - 1].iter().map(|s| align512(s.iter().product::<usize>() * es)).max().unwrap_or(0);
    let base = if half > 0 { c.scratch(2 * half)? } else { 0 };
    let mut cur = x.clone();
    for (i, &a) in cut.iter().enumerate() {
        let dst = if i + 1 == cut.len() {
            out.clone()
        } else {
            View::contiguous(base + ((i % 2) * half) as u64, x.dtype, &shapes[i])
        };
        let s = w[a];
        // The element after the last one taken: never past the axis.
        let end = s.start as i64 + (s.len as i64 - 1) * s.step + 1;
        slice_axis(c, &cur, a, (s.start as i64, end, s.step), &dst)?;
        cur = dst;
    }
    Ok(())
}

fn slice_axis(c: &mut Call, x: &View, dim: usize, (start, end, step): (i64, i64, i64), out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::slice_get_workspace_size(c.api, tx, dim as i64, start, end, step, to) };
    c.run(p1, nn::slice)
}

/// x broadcast to the output's dims (aclnnExpand).
pub(super) fn expand(c: &mut Call, x: &View, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let size: Vec<i64> = out.dims.iter().map(|&d| d as i64).collect();
    let size = c.ints(&size)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::expand_get_workspace_size(c.api, tx, size, to) };
    c.run(p1, nn::expand)
}

/// Not for recordings: CANN does not allow repeatable executors for in-place copies
/// (`aclSetAclOpExecutorRepeatable`, `aclnn/acl_meta.h`), so the ops composed of it are one-shot
/// in frozen plans too (see [`repeatable`]).
pub(super) fn inplace_copy(c: &mut Call, dst: &View, src: &View) -> BResult<()> {
    if c.recording() {
        return Err(AclBackendError::BadRequest(format!(
            "{}: aclnnInplaceCopy cannot have a repeatable executor",
            c.op
        )));
    }
    let (td, ts) = (c.output(dst)?, c.tensor(src)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::inplace_copy_get_workspace_size(c.api, td, ts) };
    c.run(p1, nn::inplace_copy)
}

/// `out = x.index_select(axis, index)` (aclnnIndexSelect; `index` 1-D, in [0, n)).
pub(super) fn index_select(c: &mut Call, x: &View, axis: usize, index: &View, out: &View) -> BResult<()> {
    let ni = index.dims.iter().product::<usize>();
    let mut od = x.dims[..axis].to_vec();
    od.push(ni);
    od.extend_from_slice(&x.dims[axis + 1..]);
    let (td, ti, to) = (c.tensor(x)?, c.tensor(index)?, c.output(&out.reshaped(&od))?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::index_select_get_workspace_size(c.api, td, axis as i64, ti, to) };
    c.run(p1, nn::index_select)
}

/// Device-to-device bytes through aclnnInplaceCopy on u8 views (for unaligned copies):
/// `src` and `dst` are (32-byte aligned base, byte offset).
pub(crate) fn byte_copy(api: &Api, rec: &StreamRec, src: (u64, u64), dst: (u64, u64), bytes: usize) -> BResult<()> {
    let mut c = Call::new(api, rec, "Copy", None);
    let view = |(base, offset): (u64, u64)| View {
        base,
        dtype: DType::U8,
        dims: vec![bytes],
        strides: vec![1],
        offset: offset as usize,
        operand: None,
    };
    let (s, d) = (view(src), view(dst));
    inplace_copy(&mut c, &d, &s)?;
    rec.queued("Copy", 0);
    Ok(())
}
