//! Descriptors and the two-phase call: a [`Call`] owns the aclnn objects of one op
//! (tensor, scalar and int-array descriptors) and runs each operator's phase 1, then either
//! its phase 2 with the stream's workspace (one-shot) or keeps the executor, made
//! repeatable, in a [`Recorded`] (recording). A [`View`] is what a descriptor describes.

use super::recorded::{Exec, Patch, Phase2, Recorded, destroy_descriptors};
use crate::error::AclBackendError;
use crate::memory::Intermediates;
use crate::stream::{self, StreamRec};
use acl_sys::result::aclnn as nn;
use acl_sys::{AclError, Api, aclDataType, aclIntArray, aclOpExecutor, aclScalar, aclTensor, aclTensorList};
use runtime::{DType, TensorArg};
use std::ffi::c_void;

/// The op mappings' result.
pub(super) type BResult<T> = std::result::Result<T, AclBackendError>;

pub(super) fn acl_dtype(d: DType) -> aclDataType {
    match d {
        DType::F32 => acl_sys::ACL_FLOAT,
        DType::F16 => acl_sys::ACL_FLOAT16,
        DType::BF16 => acl_sys::ACL_BF16,
        DType::I32 => acl_sys::ACL_INT32,
        DType::I64 => acl_sys::ACL_INT64,
        DType::U8 => acl_sys::ACL_UINT8,
    }
}

/// A tensor of the operator being put together: its descriptor, whether it is an output,
/// the launch operand it views with that operand's address, and, for a member of a tensor
/// list, the list and the member's index in it (the list takes one input position).
type Pending = (*mut aclTensor, bool, Option<(usize, u64)>, Option<(*mut aclTensorList, usize)>);

/// One op's aclnn objects; destroyed (after phase 2 returned) when dropped, unless
/// recorded ([`Call::finish`]).
pub(super) struct Call<'a> {
    pub(super) api: &'a Api,
    pub(super) rec: &'a StreamRec,
    pub(super) op: &'static str,
    tensors: Vec<*mut aclTensor>,
    scalars: Vec<*mut aclScalar>,
    arrays: Vec<*mut aclIntArray>,
    /// Tensor lists, each owning its descriptors (not in `tensors`); a recording keeps
    /// them ([`Call::finish`]) and patches their members.
    lists: Vec<*mut aclTensorList>,
    /// The tensors of the operator being put together.
    pending: Vec<Pending>,
    /// Recording (see the module documentation), with the stream's intermediates;
    /// `None`: one-shot.
    recording: Option<(Recorded, &'a mut Intermediates)>,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        // A recording that failed: its executors go first (they use the descriptors).
        if let Some((r, _)) = self.recording.take() {
            r.release(self.api);
        }
        for l in self.lists.drain(..) {
            // SAFETY: created by aclCreateTensorList and destroyed once, with the
            // descriptors it owns; no call still to return uses it (phase 2 has returned).
            let _ = unsafe { nn::destroy_tensor_list(self.api, l) };
        }
        destroy_descriptors(self.api, &mut self.tensors, &mut self.scalars, &mut self.arrays);
    }
}

/// A view: base address, dims, strides and offset in elements.
#[derive(Clone)]
pub(super) struct View {
    pub(super) base: u64,
    pub(super) dtype: DType,
    pub(super) dims: Vec<usize>,
    pub(super) strides: Vec<usize>,
    pub(super) offset: usize,
    /// The launch operand this views (inputs first, then outputs); `None` for
    /// intermediates. Derived views keep it: their base is the operand's.
    pub(super) operand: Option<usize>,
}

impl View {
    pub(super) fn of(a: &TensorArg) -> View {
        View {
            base: a.ptr.0,
            dtype: a.dtype,
            dims: a.layout.dims().to_vec(),
            strides: a.layout.strides.clone(),
            offset: a.layout.offset,
            operand: None,
        }
    }
    /// Launch operand `j` (inputs first, then outputs).
    pub(super) fn operand(a: &TensorArg, j: usize) -> View {
        View { operand: Some(j), ..View::of(a) }
    }
    pub(super) fn contiguous(base: u64, dtype: DType, dims: &[usize]) -> View {
        View {
            base,
            dtype,
            dims: dims.to_vec(),
            strides: runtime::Shape::new(dims.to_vec()).contiguous_strides(),
            offset: 0,
            operand: None,
        }
    }
    /// Same memory, new dims (the operand is contiguous).
    pub(super) fn reshaped(&self, dims: &[usize]) -> View {
        View { dims: dims.to_vec(), strides: runtime::Shape::new(dims.to_vec()).contiguous_strides(), ..self.clone() }
    }
    /// Swaps the last two dims (a transposed view, no copy).
    pub(super) fn t(&self, yes: bool) -> View {
        let mut v = self.clone();
        let r = v.dims.len();
        if yes && r >= 2 {
            v.dims.swap(r - 2, r - 1);
            v.strides.swap(r - 2, r - 1);
        }
        v
    }
}

impl<'a> Call<'a> {
    pub(super) fn new(
        api: &'a Api,
        rec: &'a StreamRec,
        op: &'static str,
        record: Option<&'a mut Intermediates>,
    ) -> Call<'a> {
        Call {
            api,
            rec,
            op,
            tensors: Vec::new(),
            scalars: Vec::new(),
            arrays: Vec::new(),
            lists: Vec::new(),
            pending: Vec::new(),
            recording: record.map(|i| (Recorded::new(op, rec), i)),
        }
    }

    fn err(&self, e: AclError) -> AclBackendError {
        AclBackendError::call(Some(self.op), e)
    }

    pub(super) fn recording(&self) -> bool {
        self.recording.is_some()
    }

    /// The recorded executors with their descriptors (which the `Call` no longer destroys).
    pub(super) fn finish(mut self) -> Option<Recorded> {
        let (mut r, _) = self.recording.take()?;
        r.tensors = std::mem::take(&mut self.tensors);
        r.scalars = std::mem::take(&mut self.scalars);
        r.arrays = std::mem::take(&mut self.arrays);
        r.lists = std::mem::take(&mut self.lists);
        Some(r)
    }

    /// `bytes` of device memory for an intermediate, 512-byte aligned: the stream's scratch
    /// buffer (one-shot: one buffer per composition, requested once), or, recording, the
    /// plan's intermediates of the stream (fixed for the executors' life).
    pub(super) fn scratch(&mut self, bytes: usize) -> BResult<u64> {
        match &mut self.recording {
            None => stream::buffer(self.api, self.op, self.rec, &self.rec.scratch, bytes),
            Some((_, inter)) => inter.take(self.api, self.op, bytes),
        }
    }

    /// A recording's own device copy of `bytes` (a constant its operators read).
    pub(super) fn upload(&mut self, bytes: &[u8]) -> BResult<u64> {
        let Some((r, _)) = &mut self.recording else {
            return Err(AclBackendError::BadRequest(format!(
                "{}: constants are only uploaded when recording",
                self.op
            )));
        };
        let p = crate::memory::malloc(self.api, Some(self.op), bytes.len())?;
        r.mem.push((p, bytes.len().max(1)));
        // The block is new: no queued work uses it.
        crate::memory::h2d(self.api, bytes, p)?;
        Ok(p)
    }

    /// An input tensor of the operator being put together.
    pub(super) fn tensor(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_dtype(v.dtype), false)
    }

    /// An output tensor of the operator being put together.
    pub(super) fn output(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_dtype(v.dtype), true)
    }

    /// An input tensor of bools (`ACL_BOOL`) over `v`'s u8 storage.
    pub(super) fn bool_tensor(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_sys::ACL_BOOL, false)
    }

    /// An output tensor of bools (`ACL_BOOL`) over `v`'s u8 storage.
    pub(super) fn bool_output(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_sys::ACL_BOOL, true)
    }

    /// A NULL optional tensor of the operator being put together: it takes its place in
    /// the prototype's count of inputs (or outputs), as the address setters count them.
    pub(super) fn absent(&mut self, output: bool) -> *mut aclTensor {
        self.pending.push((std::ptr::null_mut(), output, None, None));
        std::ptr::null_mut()
    }

    /// A tensor of ACL dtype `dt` over `v`.
    fn descriptor(&mut self, v: &View, dt: aclDataType, output: bool) -> BResult<*mut aclTensor> {
        let dims: Vec<i64> = v.dims.iter().map(|&d| d as i64).collect();
        let strides: Vec<i64> = v.strides.iter().map(|&s| s as i64).collect();
        let n: usize = v.dims.iter().product();
        let span = if n == 0 {
            0
        } else {
            v.offset + v.dims.iter().zip(&v.strides).map(|(d, s)| (d - 1) * s).sum::<usize>() + 1
        };
        let storage = [span as i64];
        // SAFETY: `dims` and `strides` hold the same number of elements and, like
        // `storage`, live across the call, which copies them; `base` is a validated,
        // 32-byte aligned device address (never dereferenced on the host).
        let t = unsafe {
            nn::create_tensor(
                self.api,
                dims.as_ptr(),
                dims.len() as u64,
                dt,
                strides.as_ptr(),
                v.offset as i64,
                acl_sys::ACL_FORMAT_ND,
                storage.as_ptr(),
                1,
                v.base as *mut c_void,
            )
        }
        .map_err(|e| self.err(e))?;
        self.tensors.push(t);
        self.pending.push((t, output, v.operand.map(|j| (j, v.base)), None));
        Ok(t)
    }

    pub(super) fn scalar_f32(&mut self, v: f32) -> BResult<*mut aclScalar> {
        self.scalar_raw((&v as *const f32).cast_mut().cast(), acl_sys::ACL_FLOAT)
    }
    fn scalar_i64(&mut self, v: i64) -> BResult<*mut aclScalar> {
        self.scalar_raw((&v as *const i64).cast_mut().cast(), acl_sys::ACL_INT64)
    }
    pub(super) fn scalar_for(&mut self, d: DType, v: f64) -> BResult<*mut aclScalar> {
        if d.is_int() { self.scalar_i64(v as i64) } else { self.scalar_f32(v as f32) }
    }
    fn scalar_raw(&mut self, p: *mut c_void, dt: aclDataType) -> BResult<*mut aclScalar> {
        // SAFETY: `p` points to a live host value of type `dt`, copied by the call.
        let s = unsafe { nn::create_scalar(self.api, p, dt) }.map_err(|e| self.err(e))?;
        self.scalars.push(s);
        Ok(s)
    }
    pub(super) fn ints(&mut self, v: &[i64]) -> BResult<*mut aclIntArray> {
        // SAFETY: `v` is live across the call, which copies it.
        let a = unsafe { nn::create_int_array(self.api, v.as_ptr(), v.len() as u64) }.map_err(|e| self.err(e))?;
        self.arrays.push(a);
        Ok(a)
    }

    /// A tensor list of descriptors of `views` (inputs), which then belong to the list.
    pub(super) fn tensor_list(&mut self, views: &[View]) -> BResult<*mut aclTensorList> {
        let ts: Vec<*const aclTensor> =
            views.iter().map(|v| self.tensor(v).map(|t| t.cast_const())).collect::<BResult<_>>()?;
        // SAFETY: `ts` are live descriptors just created by this call, in no other list.
        let l = unsafe { nn::create_tensor_list(self.api, ts.as_ptr(), ts.len() as u64) }.map_err(|e| self.err(e))?;
        // The list destroys them now.
        self.tensors.retain(|t| !ts.contains(&t.cast_const()));
        self.lists.push(l);
        // Its members are the last pending tensors: one input position, patched by member.
        let first = self.pending.len() - ts.len();
        for (k, p) in self.pending[first..].iter_mut().enumerate() {
            p.3 = Some((l, k));
        }
        Ok(l)
    }

    /// Phase 1's result `p1`, then (one-shot) the workspace and phase 2 `p2` on the
    /// stream, or (recording) the executor made repeatable and kept with `p2`.
    pub(super) fn run(&mut self, p1: Result<(u64, *mut aclOpExecutor), AclError>, p2: Phase2) -> BResult<()> {
        let pending = std::mem::take(&mut self.pending);
        let (ws, ex) = p1.map_err(|e| self.err(e))?;
        if self.recording.is_some() {
            return self.keep(ws, ex, p2, pending);
        }
        let wptr = match stream::buffer(self.api, self.op, self.rec, &self.rec.workspace, ws as usize) {
            Ok(p) => p,
            Err(e) => {
                discard(self.api, ex);
                return Err(e);
            }
        };
        // SAFETY: `ex` came from phase 1 just above and is used once; the workspace holds
        // at least `ws` bytes and stays allocated until the stream has run (it is only
        // replaced after synchronising the stream); the descriptors' memory lives as long.
        if let Err(e) = unsafe { p2(self.api, wptr as *mut c_void, ws, ex, self.rec.raw()) } {
            // A failed launch may leave the executor alive; releasing it is harmless
            // when it was consumed (the repeatable call then fails and nothing is destroyed).
            discard(self.api, ex);
            return Err(self.err(e));
        }
        Ok(())
    }

    /// Recording: makes `ex` repeatable and keeps it, noting which of its tensors
    /// (`pending`, in the order of the operator's C prototype, NULL optional ones included)
    /// view launch operands.
    fn keep(&mut self, ws: u64, ex: *mut aclOpExecutor, p2: Phase2, pending: Vec<Pending>) -> BResult<()> {
        // SAFETY: `ex` is a live executor from phase 1, never launched
        // (`aclSetAclOpExecutorRepeatable`, `aclnn/acl_meta.h`: right after phase 1).
        if let Err(e) = unsafe { nn::set_executor_repeatable(self.api, ex) } {
            discard(self.api, ex);
            return Err(self.err(e));
        }
        let Some((r, _)) = self.recording.as_mut() else { return Ok(()) };
        let exec = r.execs.len();
        r.execs.push(Exec { ex, ws, p2 });
        let (mut inputs, mut outputs) = (0, 0);
        for (tensor, output, operand, list) in pending {
            let n = if output { &mut outputs } else { &mut inputs };
            // A list's later members share its position.
            if matches!(list, Some((_, k)) if k > 0) {
                *n -= 1;
            }
            let index = *n;
            *n += 1;
            if let Some((operand, addr)) = operand {
                r.patches.push(Patch { exec, output, index, tensor, operand, addr, list });
            }
        }
        Ok(())
    }
}

/// An executor whose phase 2 will not run: made repeatable and destroyed, the one
/// documented way to release it (`aclDestroyAclOpExecutor`, `aclnn/acl_meta.h`).
fn discard(api: &Api, ex: *mut aclOpExecutor) {
    if ex.is_null() {
        return;
    }
    // SAFETY: `ex` is a live executor from phase 1 that was never launched.
    if unsafe { nn::set_executor_repeatable(api, ex) }.is_ok() {
        // SAFETY: made repeatable just above; destroyed once.
        let _ = unsafe { nn::destroy_executor(api, ex) };
    }
}

pub(super) fn align512(n: usize) -> usize {
    n.div_ceil(512) * 512
}
