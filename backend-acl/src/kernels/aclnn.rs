//! The aclnn tier: descriptors over the operands, the two phases of each operator, and
//! the composition of the ops aclnn has no single operator for.
//!
//! A [`Call`] owns the descriptors of one op and runs its operators one of two ways:
//! * one-shot ([`run`]: eager launches, and the nodes of frozen plans whose ops cannot
//!   reuse executors): phase 2 right after each phase 1, with the stream's workspace, and
//!   intermediates in the stream's scratch buffer; descriptors are destroyed when the
//!   `Call` drops, after phase 2 returned (they may go before the stream has run);
//! * recording ([`record`]: a frozen plan's node, at its first run): each executor is made
//!   repeatable (`aclSetAclOpExecutorRepeatable`) and kept with the descriptors in a
//!   [`Recorded`], intermediates come from the plan's [`Intermediates`] of the stream
//!   (fixed for the executors' life, shared with the stream's other recorded nodes),
//!   constants get device memory of the record's own, and every tensor that views a launch operand is noted with its
//!   executor and index, so that later runs only patch the addresses that changed
//!   ([`Recorded::patch`]) and call phase 2 ([`Recorded::launch`]).

use crate::error::AclBackendError;
use crate::memory::Intermediates;
use crate::stream::{self, StreamRec};
use acl_sys::result::aclnn as nn;
use acl_sys::{AclError, Api, aclDataType, aclIntArray, aclOpExecutor, aclScalar, aclTensor, aclrtStream};
use runtime::{DType, GeluApprox, LaunchArgs, Op, TensorArg};
use std::ffi::c_void;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// Phase 2 of every operator: `(workspace, workspaceSize, executor, stream)`.
type Phase2 = unsafe fn(&Api, *mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> Result<(), AclError>;

fn acl_dtype(d: DType) -> aclDataType {
    match d {
        DType::F32 => acl_sys::ACL_FLOAT,
        DType::F16 => acl_sys::ACL_FLOAT16,
        DType::BF16 => acl_sys::ACL_BF16,
        DType::I32 => acl_sys::ACL_INT32,
        DType::I64 => acl_sys::ACL_INT64,
        DType::U8 => acl_sys::ACL_UINT8,
    }
}

/// A repeatable executor of a recorded op: its phase 2 and the workspace it asked for.
struct Exec {
    ex: *mut aclOpExecutor,
    ws: u64,
    p2: Phase2,
}

/// An operator tensor that views a launch operand: it follows the operand's address.
struct Patch {
    /// Index into [`Recorded::execs`].
    exec: usize,
    output: bool,
    /// Over the operator's input (or output) tensors, in the order of its C prototype.
    index: usize,
    tensor: *mut aclTensor,
    /// The launch operand (inputs first, then outputs).
    operand: usize,
    /// The address the executor holds.
    addr: u64,
}

/// One op's repeatable executors, in launch order, with everything they use: their
/// descriptors (which must outlive them: `aclDestroyAclOpExecutor`, `aclnn/acl_meta.h`) and the device memory of the
/// op's constants (its intermediates are in the stream's [`Intermediates`], which the
/// plan keeps). Released by [`Recorded::release`] once no queued work uses it.
pub(crate) struct Recorded {
    op: &'static str,
    /// The stream it was recorded on (its intermediates are that stream's).
    stream: *const StreamRec,
    execs: Vec<Exec>,
    patches: Vec<Patch>,
    tensors: Vec<*mut aclTensor>,
    scalars: Vec<*mut aclScalar>,
    arrays: Vec<*mut aclIntArray>,
    /// aclrtMalloc blocks of its constants (outside the allocation table): (address, bytes).
    mem: Vec<(u64, usize)>,
}

// SAFETY: the handles are host objects of the aclnn library, usable from any thread;
// a `Recorded` is only reached through its owner's mutex, one thread at a time.
unsafe impl Send for Recorded {}

impl Recorded {
    fn new(op: &'static str, stream: &StreamRec) -> Recorded {
        Recorded {
            op,
            stream,
            execs: Vec::new(),
            patches: Vec::new(),
            tensors: Vec::new(),
            scalars: Vec::new(),
            arrays: Vec::new(),
            mem: Vec::new(),
        }
    }

    /// The workspace bytes the largest of its executors asked for (they run in order on one
    /// stream, so they share one workspace).
    pub(crate) fn workspace(&self) -> u64 {
        self.execs.iter().map(|e| e.ws).max().unwrap_or(0)
    }

    /// Whether it was recorded on `rec`: only there may it launch, since its intermediates
    /// are shared with that stream's other nodes.
    pub(crate) fn recorded_on(&self, rec: &StreamRec) -> bool {
        std::ptr::eq(self.stream, rec)
    }

    /// Executors, and bytes of device memory of its own.
    pub(crate) fn size(&self) -> (usize, usize) {
        (self.execs.len(), self.mem.iter().map(|m| m.1).sum())
    }

    /// Keeps only the patches of the operands `patched` says change from run to run.
    pub(crate) fn keep_patches(&mut self, patched: impl Fn(usize) -> bool) {
        self.patches.retain(|p| patched(p.operand));
    }

    /// Points every tensor that views an operand at the operand's address for this run,
    /// `addr(operand)` (`aclSetInputTensorAddr` / `aclSetOutputTensorAddr`, only where it
    /// changed). Each address is a validated, 32-byte aligned operand base.
    pub(crate) fn patch(&mut self, api: &Api, addr: impl Fn(usize) -> u64) -> BResult<()> {
        let op = self.op;
        for p in &mut self.patches {
            let a = addr(p.operand);
            if a == p.addr {
                continue;
            }
            let ex = self.execs[p.exec].ex;
            // `ex` is a live repeatable executor of this record and `p.tensor` the live
            // descriptor given to it at position `index` of its phase 1; `a` is a 32-byte
            // aligned device address the caller validated to hold the operand.
            // SAFETY: as above; that memory stays allocated while queued work uses it (M2).
            let r = unsafe {
                if p.output {
                    nn::set_output_tensor_addr(api, ex, p.index, p.tensor, a as *mut c_void)
                } else {
                    nn::set_input_tensor_addr(api, ex, p.index, p.tensor, a as *mut c_void)
                }
            };
            r.map_err(|e| AclBackendError::call(Some(op), e))?;
            p.addr = a;
        }
        Ok(())
    }

    /// Phase 2 of every executor, in order, on the stream, with the workspace at `ws`
    /// (at least [`workspace`](Self::workspace) bytes).
    pub(crate) fn launch(&self, api: &Api, rec: &StreamRec, ws: u64) -> BResult<()> {
        for e in &self.execs {
            let w = if e.ws == 0 { std::ptr::null_mut() } else { ws as *mut c_void };
            // SAFETY: `e.ex` is a live repeatable executor; its descriptors live as long as
            // this record; the workspace holds at least `e.ws` bytes and, like the record's
            // own memory, is released only after the streams that ran it are synchronised.
            unsafe { (e.p2)(api, w, e.ws, e.ex, rec.raw()) }
                .map_err(|err| AclBackendError::call(Some(self.op), err))?;
        }
        Ok(())
    }

    /// Destroys the executors, then the descriptors, and frees the memory. No queued work
    /// may use any of them any more (the caller synchronised the streams that ran them).
    pub(crate) fn release(mut self, api: &Api) {
        for e in self.execs.drain(..) {
            // SAFETY: made repeatable when recorded, destroyed once, no work queued with
            // it (caller); a failed destroy released nothing and is retried once.
            if unsafe { nn::destroy_executor(api, e.ex) }.is_err() {
                // SAFETY: as above.
                if let Err(err) = unsafe { nn::destroy_executor(api, e.ex) } {
                    log::error!("acl: {}: {err}", self.op);
                }
            }
        }
        destroy_descriptors(api, &mut self.tensors, &mut self.scalars, &mut self.arrays);
        for (p, _) in self.mem.drain(..) {
            if let Err(e) = crate::memory::free(api, p) {
                log::error!("acl: {}: freeing its memory: {e}", self.op);
            }
        }
    }
}

/// Destroys descriptors (each once; a failed destroy released nothing and is retried
/// once) that no executor or pending call uses any more.
fn destroy_descriptors(
    api: &Api,
    tensors: &mut Vec<*mut aclTensor>,
    scalars: &mut Vec<*mut aclScalar>,
    arrays: &mut Vec<*mut aclIntArray>,
) {
    for t in tensors.drain(..) {
        // SAFETY: created by aclCreateTensor and destroyed once; no call still to return,
        // and no executor still alive, uses it (descriptors may go before the sync).
        if unsafe { nn::destroy_tensor(api, t) }.is_err() {
            // SAFETY: as above.
            let _ = unsafe { nn::destroy_tensor(api, t) };
        }
    }
    for s in scalars.drain(..) {
        // SAFETY: as above, for scalars.
        if unsafe { nn::destroy_scalar(api, s) }.is_err() {
            // SAFETY: as above.
            let _ = unsafe { nn::destroy_scalar(api, s) };
        }
    }
    for a in arrays.drain(..) {
        // SAFETY: as above, for int arrays.
        if unsafe { nn::destroy_int_array(api, a) }.is_err() {
            // SAFETY: as above.
            let _ = unsafe { nn::destroy_int_array(api, a) };
        }
    }
}

/// A tensor of the operator being put together: its descriptor, whether it is an output,
/// and the launch operand it views with that operand's address.
type Pending = (*mut aclTensor, bool, Option<(usize, u64)>);

/// One op's aclnn objects; destroyed (after phase 2 returned) when dropped, unless
/// recorded ([`Call::finish`]).
struct Call<'a> {
    api: &'a Api,
    rec: &'a StreamRec,
    op: &'static str,
    tensors: Vec<*mut aclTensor>,
    scalars: Vec<*mut aclScalar>,
    arrays: Vec<*mut aclIntArray>,
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
        destroy_descriptors(self.api, &mut self.tensors, &mut self.scalars, &mut self.arrays);
    }
}

/// A view: base address, dims, strides and offset in elements.
#[derive(Clone)]
struct View {
    base: u64,
    dtype: DType,
    dims: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
    /// The launch operand this views (inputs first, then outputs); `None` for
    /// intermediates. Derived views keep it: their base is the operand's.
    operand: Option<usize>,
}

impl View {
    fn of(a: &TensorArg) -> View {
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
    fn operand(a: &TensorArg, j: usize) -> View {
        View { operand: Some(j), ..View::of(a) }
    }
    fn contiguous(base: u64, dtype: DType, dims: &[usize]) -> View {
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
    fn reshaped(&self, dims: &[usize]) -> View {
        View { dims: dims.to_vec(), strides: runtime::Shape::new(dims.to_vec()).contiguous_strides(), ..self.clone() }
    }
    /// Swaps the last two dims (a transposed view, no copy).
    fn t(&self, yes: bool) -> View {
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
    fn new(api: &'a Api, rec: &'a StreamRec, op: &'static str, record: Option<&'a mut Intermediates>) -> Call<'a> {
        Call {
            api,
            rec,
            op,
            tensors: Vec::new(),
            scalars: Vec::new(),
            arrays: Vec::new(),
            pending: Vec::new(),
            recording: record.map(|i| (Recorded::new(op, rec), i)),
        }
    }

    fn err(&self, e: AclError) -> AclBackendError {
        AclBackendError::call(Some(self.op), e)
    }

    fn recording(&self) -> bool {
        self.recording.is_some()
    }

    /// The recorded executors with their descriptors (which the `Call` no longer destroys).
    fn finish(mut self) -> Option<Recorded> {
        let (mut r, _) = self.recording.take()?;
        r.tensors = std::mem::take(&mut self.tensors);
        r.scalars = std::mem::take(&mut self.scalars);
        r.arrays = std::mem::take(&mut self.arrays);
        Some(r)
    }

    /// `bytes` of device memory for an intermediate, 512-byte aligned: the stream's scratch
    /// buffer (one-shot: one buffer per composition, requested once), or, recording, the
    /// plan's intermediates of the stream (fixed for the executors' life).
    fn scratch(&mut self, bytes: usize) -> BResult<u64> {
        match &mut self.recording {
            None => stream::buffer(self.api, self.op, self.rec, &self.rec.scratch, bytes),
            Some((_, inter)) => inter.take(self.api, self.op, bytes),
        }
    }

    /// A recording's own device copy of `bytes` (a constant its operators read).
    fn upload(&mut self, bytes: &[u8]) -> BResult<u64> {
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
    fn tensor(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_dtype(v.dtype), false)
    }

    /// An output tensor of the operator being put together.
    fn output(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_dtype(v.dtype), true)
    }

    /// An input tensor of bools (`ACL_BOOL`) over `v`'s u8 storage.
    fn bool_tensor(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_sys::ACL_BOOL, false)
    }

    /// An output tensor of bools (`ACL_BOOL`) over `v`'s u8 storage.
    fn bool_output(&mut self, v: &View) -> BResult<*mut aclTensor> {
        self.descriptor(v, acl_sys::ACL_BOOL, true)
    }

    /// A NULL optional tensor of the operator being put together: it takes its place in
    /// the prototype's count of inputs (or outputs), as the address setters count them.
    fn absent(&mut self, output: bool) -> *mut aclTensor {
        self.pending.push((std::ptr::null_mut(), output, None));
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
        self.pending.push((t, output, v.operand.map(|j| (j, v.base))));
        Ok(t)
    }

    fn scalar_f32(&mut self, v: f32) -> BResult<*mut aclScalar> {
        self.scalar_raw((&v as *const f32).cast_mut().cast(), acl_sys::ACL_FLOAT)
    }
    fn scalar_i64(&mut self, v: i64) -> BResult<*mut aclScalar> {
        self.scalar_raw((&v as *const i64).cast_mut().cast(), acl_sys::ACL_INT64)
    }
    fn scalar_for(&mut self, d: DType, v: f64) -> BResult<*mut aclScalar> {
        if d.is_int() { self.scalar_i64(v as i64) } else { self.scalar_f32(v as f32) }
    }
    fn scalar_raw(&mut self, p: *mut c_void, dt: aclDataType) -> BResult<*mut aclScalar> {
        // SAFETY: `p` points to a live host value of type `dt`, copied by the call.
        let s = unsafe { nn::create_scalar(self.api, p, dt) }.map_err(|e| self.err(e))?;
        self.scalars.push(s);
        Ok(s)
    }
    fn ints(&mut self, v: &[i64]) -> BResult<*mut aclIntArray> {
        // SAFETY: `v` is live across the call, which copies it.
        let a = unsafe { nn::create_int_array(self.api, v.as_ptr(), v.len() as u64) }.map_err(|e| self.err(e))?;
        self.arrays.push(a);
        Ok(a)
    }

    /// Phase 1's result `p1`, then (one-shot) the workspace and phase 2 `p2` on the
    /// stream, or (recording) the executor made repeatable and kept with `p2`.
    fn run(&mut self, p1: Result<(u64, *mut aclOpExecutor), AclError>, p2: Phase2) -> BResult<()> {
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
        for (tensor, output, operand) in pending {
            let n = if output { &mut outputs } else { &mut inputs };
            let index = *n;
            *n += 1;
            if let Some((operand, addr)) = operand {
                r.patches.push(Patch { exec, output, index, tensor, operand, addr });
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

fn cube_math(is_910: bool, d: DType) -> i8 {
    if d == DType::F32 && is_910 {
        acl_sys::cube_math::ALLOW_FP32_DOWN_PRECISION
    } else {
        acl_sys::cube_math::KEEP_DTYPE
    }
}

// Every operator below: the descriptors passed to phase 1 are owned by the `Call` and
// live until it drops, after phase 2 returned; optional outputs are NULL where the
// operator documents them so.

fn matmul(c: &mut Call, a: &View, bm: &View, out: &View, cube: i8) -> BResult<()> {
    let (ta, tb, to) = (c.tensor(a)?, c.tensor(bm)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::matmul_get_workspace_size(c.api, ta, tb, to, cube) };
    c.run(p1, nn::matmul)
}

fn addmm(c: &mut Call, bias: &View, a: &View, bm: &View, beta: f32, alpha: f32, out: &View, cube: i8) -> BResult<()> {
    let (tc, ta, tb, to) = (c.tensor(bias)?, c.tensor(a)?, c.tensor(bm)?, c.output(out)?);
    let (sb, sa) = (c.scalar_f32(beta)?, c.scalar_f32(alpha)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::addmm_get_workspace_size(c.api, tc, ta, tb, sb, sa, to, cube) };
    c.run(p1, nn::addmm)
}

fn add_sub(c: &mut Call, sub: bool, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    let al = c.scalar_for(x.dtype, 1.0)?;
    if sub {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::sub_get_workspace_size(c.api, tx, ty, al, to) };
        c.run(p1, nn::sub)
    } else {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::add_get_workspace_size(c.api, tx, ty, al, to) };
        c.run(p1, nn::add)
    }
}

fn mul_div(c: &mut Call, div: bool, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    if div {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::div_get_workspace_size(c.api, tx, ty, to) };
        c.run(p1, nn::div)
    } else {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::mul_get_workspace_size(c.api, tx, ty, to) };
        c.run(p1, nn::mul)
    }
}

fn muls(c: &mut Call, x: &View, factor: f32, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let s = c.scalar_f32(factor)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::muls_get_workspace_size(c.api, tx, s, to) };
    c.run(p1, nn::muls)
}

fn gelu(c: &mut Call, x: &View, approx: GeluApprox, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    match approx {
        GeluApprox::Tanh => {
            // SAFETY: live descriptors owned by `c`.
            let p1 = unsafe { nn::gelu_get_workspace_size(c.api, tx, to) };
            c.run(p1, nn::gelu)
        }
        GeluApprox::Erf => {
            // SAFETY: live descriptors owned by `c`; approximate 0 = erf.
            let p1 = unsafe { nn::gelu_v2_get_workspace_size(c.api, tx, 0, to) };
            c.run(p1, nn::gelu_v2)
        }
    }
}

/// Relu, Tanh, Erf, Exp or Sqrt.
fn unary(c: &mut Call, op: &Op, x: &View, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let (p1, p2): (_, Phase2) = match op {
        // SAFETY: live descriptors owned by `c`.
        Op::Relu => (unsafe { nn::relu_get_workspace_size(c.api, tx, to) }, nn::relu),
        // SAFETY: as above.
        Op::Tanh => (unsafe { nn::tanh_get_workspace_size(c.api, tx, to) }, nn::tanh),
        // SAFETY: as above.
        Op::Erf => (unsafe { nn::erf_get_workspace_size(c.api, tx, to) }, nn::erf),
        // SAFETY: as above.
        Op::Exp => (unsafe { nn::exp_get_workspace_size(c.api, tx, to) }, nn::exp),
        // SAFETY: as above.
        _ => (unsafe { nn::sqrt_get_workspace_size(c.api, tx, to) }, nn::sqrt),
    };
    c.run(p1, p2)
}

fn softmax(c: &mut Call, x: &View, axis: i64, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::softmax_get_workspace_size(c.api, tx, axis, to) };
    c.run(p1, nn::softmax)
}

fn layer_norm(c: &mut Call, x: &View, g: &View, be: &View, eps: f32, out: &View) -> BResult<()> {
    let d = *x.dims.last().unwrap_or(&0) as i64;
    let (tx, tg, tb, to) = (c.tensor(x)?, c.tensor(g)?, c.tensor(be)?, c.output(out)?);
    let ns = c.ints(&[d])?;
    let null = std::ptr::null_mut();
    // SAFETY: live descriptors owned by `c`; mean and rstd outputs are optional (NULL).
    let p1 = unsafe { nn::layer_norm_get_workspace_size(c.api, tx, ns, tg, tb, eps as f64, to, null, null) };
    c.run(p1, nn::layer_norm)
}

fn permute(c: &mut Call, x: &View, perm: &[usize], out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    let dims = c.ints(&p)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::permute_get_workspace_size(c.api, tx, dims, to) };
    c.run(p1, nn::permute)
}

fn cast(c: &mut Call, x: &View, to: DType, out: &View) -> BResult<()> {
    let (tx, tout) = (c.tensor(x)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::cast_get_workspace_size(c.api, tx, acl_dtype(to), tout) };
    c.run(p1, nn::cast)
}

fn reduce(c: &mut Call, mean: bool, x: &View, axes: &[i64], keep: bool, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let dims = c.ints(axes)?;
    let dt = acl_dtype(out.dtype);
    if mean {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::mean_get_workspace_size(c.api, tx, dims, keep, dt, to) };
        c.run(p1, nn::mean)
    } else {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::reduce_sum_get_workspace_size(c.api, tx, dims, keep, dt, to) };
        c.run(p1, nn::reduce_sum)
    }
}

/// Not for recordings: CANN does not allow repeatable executors for in-place copies
/// (`aclSetAclOpExecutorRepeatable`, `aclnn/acl_meta.h`), so the ops composed of it are one-shot
/// in frozen plans too (see [`repeatable`]).
fn inplace_copy(c: &mut Call, dst: &View, src: &View) -> BResult<()> {
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

/// The operands of a fused Attention.
struct Attention<'v> {
    q: &'v View,
    k: &'v View,
    v: &'v View,
    /// Additive, broadcast to the scores.
    mask: Option<&'v View>,
    scale: f32,
}

/// Where a composed Attention keeps its intermediates (contiguous).
struct AttentionScratch {
    /// Two score buffers `[B, H, S, T]`, used in turn.
    pair: [View; 2],
    /// The row maxima of the masked scores, `[B, H, S, 1]`.
    row_max: View,
    /// Whether a row's scores are all -inf, `[B, H, S, 1]` (bool over u8 storage).
    masked: View,
}

/// Attention composed of aclnn operators: `q · kᵀ` on the Cube (k transposed through its
/// strides, no copy), scaled (aclnnMuls), the mask added (aclnnAdd, broadcast), the
/// softmax over the last axis and the product with v into `out`. A row whose scores are
/// all -inf (every key masked) attends to nothing and is 0, where the softmax alone would
/// give NaN: its row maximum (aclnnAmax) equals -inf (aclnnEqScalar), and those rows of
/// `out` are zeroed (aclnnInplaceMaskedFillScalar). A row with a NaN or +inf score has a
/// NaN or +inf maximum and stays NaN.
fn attention(c: &mut Call, a: &Attention, sc: &AttentionScratch, out: &View, cube: i8) -> BResult<()> {
    let pair = &sc.pair;
    matmul(c, a.q, &a.k.t(true), &pair[0], cube)?;
    muls(c, &pair[0], a.scale, &pair[1])?;
    let mut cur = 1;
    if let Some(m) = a.mask {
        add_sub(c, false, &pair[1], m, &pair[0])?;
        cur = 0;
    }
    all_minus_inf(c, &pair[cur], &sc.row_max, &sc.masked)?;
    softmax(c, &pair[cur], -1, &pair[1 - cur])?;
    matmul(c, &pair[1 - cur], a.v, out, cube)?;
    zero_rows(c, out, &sc.masked)
}

/// `masked` (bool over u8, `[.., 1]`) = whether the last axis of `x` is all -inf: its
/// maximum `row_max` (`[.., 1]`, x's dtype; NaN propagates) through aclnnAmax, compared
/// with -inf through aclnnEqScalar.
fn all_minus_inf(c: &mut Call, x: &View, row_max: &View, masked: &View) -> BResult<()> {
    let (tx, tm) = (c.tensor(x)?, c.output(row_max)?);
    let last = c.ints(&[x.dims.len() as i64 - 1])?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::amax_get_workspace_size(c.api, tx, last, true, tm) };
    c.run(p1, nn::amax)?;
    let (tm, tb) = (c.tensor(row_max)?, c.bool_output(masked)?);
    let ninf = c.scalar_f32(f32::NEG_INFINITY)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::eq_scalar_get_workspace_size(c.api, tm, ninf, tb) };
    c.run(p1, nn::eq_scalar)
}

/// Zeroes the rows of `out` where `masked` (bool over u8, broadcast to `out`) is true
/// (aclnnInplaceMaskedFillScalar).
fn zero_rows(c: &mut Call, out: &View, masked: &View) -> BResult<()> {
    // `out` is read and written in place: the prototype lists it as the first input.
    let (to, tb) = (c.tensor(out)?, c.bool_tensor(masked)?);
    let zero = c.scalar_for(out.dtype, 0.0)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::inplace_masked_fill_scalar_get_workspace_size(c.api, to, tb, zero) };
    c.run(p1, nn::inplace_masked_fill_scalar)
}

/// `m` (broadcastable to `[B, H, S, T]`, at most 4-D) as a 4-D view: leading dims of 1.
fn rank4(m: &View) -> View {
    let pad = 4 - m.dims.len().min(4);
    let mut v = m.clone();
    v.dims = std::iter::repeat_n(1, pad).chain(m.dims.iter().copied()).collect();
    v.strides = std::iter::repeat_n(0, pad).chain(m.strides.iter().copied()).collect();
    v
}

/// The last dim of aclnnFlashAttentionScore's softmaxMax and softmaxSum (docs: `[B, N, Sq, 8]`).
const FA_STATS: usize = 8;

/// Attention as one aclnnFlashAttentionScore (Atlas A2/A3; layout BNSD, q, k, v as they
/// are, strides included), which computes `softmax(scaleValue * (pse + q·kᵀ)) · v`.
///
/// Its pse is added *before* the scale, where the op table's additive mask is added after
/// it. With a mask, q is scaled instead (aclnnMuls into scratch) and scaleValue is 1, so
/// the mask goes in as it is (no division by the scale that could overflow fp16: BERT's
/// -10000 over 1/8 is -80000), as a view broadcast through zero strides to one of the pse
/// shapes the operator takes, `[B or 1, H, S or 1, T]`. A query row whose keys are all
/// masked (-inf) is 0 on every backend, while the operator's docs do not say what it
/// writes there: such rows are found from the mask itself (its row maxima equal -inf,
/// aclnnAmax and aclnnEqScalar on the mask, not on the scores, which never exist here) and
/// zeroed (aclnnInplaceMaskedFillScalar). Its softmax row maxima and sums (FLOAT
/// `[B, H, S, 8]`) go to scratch; the reserved softmaxOut and the dropout, padding and
/// boolean attention masks are NULL.
fn flash_attention(c: &mut Call, a: &Attention, out: &View) -> BResult<()> {
    let (b, h, s, d) = (a.q.dims[0], a.q.dims[1], a.q.dims[2], a.q.dims[3]);
    let t = a.k.dims[2];
    let stats = [b, h, s, FA_STATS];
    let stat_bytes = align512(stats.iter().product::<usize>() * DType::F32.size());
    let m4 = a.mask.map(rank4);
    let rows = m4.as_ref().map_or(0, |m| m.dims[..3].iter().product::<usize>());
    let q_bytes = if a.mask.is_some() { align512(b * h * s * d * a.q.dtype.size()) } else { 0 };
    let row_bytes = align512(rows * a.q.dtype.size());
    let base = c.scratch(2 * stat_bytes + q_bytes + row_bytes + align512(rows))?;
    let max = View::contiguous(base, DType::F32, &stats);
    let sum = View::contiguous(base + stat_bytes as u64, DType::F32, &stats);
    let mut q = a.q.clone();
    let mut scale = a.scale;
    let mut pse = None;
    if let Some(m) = &m4 {
        let scaled = View::contiguous(base + 2 * stat_bytes as u64, a.q.dtype, &[b, h, s, d]);
        muls(c, a.q, a.scale, &scaled)?;
        (q, scale) = (scaled, 1.0);
        let mut p = m.clone();
        for (axis, full) in [(1, h), (3, t)] {
            if p.dims[axis] == 1 && full != 1 {
                (p.dims[axis], p.strides[axis]) = (full, 0);
            }
        }
        pse = Some(p);
    }
    let (tq, tk, tv) = (c.tensor(&q)?, c.tensor(a.k)?, c.tensor(a.v)?);
    let tp = match &pse {
        Some(p) => c.tensor(p)?,
        None => c.absent(false),
    };
    let (drop_mask, padding_mask, atten_mask) = (c.absent(false), c.absent(false), c.absent(false));
    let (tmax, tsum) = (c.output(&max)?, c.output(&sum)?);
    let softmax_out = c.absent(true);
    let to = c.output(out)?;
    let attrs = nn::FlashAttentionAttrs {
        scale_value: f64::from(scale),
        keep_prob: 1.0,
        // No sliding window (the defaults torch_npu passes; without an attention mask they
        // have no effect anyway).
        pre_tokens: i64::from(i32::MAX),
        next_tokens: i64::from(i32::MAX),
        head_num: h as i64,
        input_layout: c"BNSD",
        inner_precise: 0,
        sparse_mode: 0,
    };
    // SAFETY: live descriptors owned by `c`; NULL for the optional masks, the prefix and
    // the reserved softmaxOut, as the operator documents them.
    let p1 = unsafe {
        nn::flash_attention_score_get_workspace_size(
            c.api,
            tq,
            tk,
            tv,
            tp,
            drop_mask,
            padding_mask,
            atten_mask,
            std::ptr::null(),
            &attrs,
            tmax,
            tsum,
            softmax_out,
            to,
        )
    };
    c.run(p1, nn::flash_attention_score)?;
    let Some(m) = m4 else { return Ok(()) };
    let rd: Vec<usize> = m.dims[..3].iter().copied().chain([1]).collect();
    let row_max = View::contiguous(base + (2 * stat_bytes + q_bytes) as u64, m.dtype, &rd);
    let masked = View::contiguous(base + (2 * stat_bytes + q_bytes + row_bytes) as u64, DType::U8, &rd);
    all_minus_inf(c, &m, &row_max, &masked)?;
    zero_rows(c, out, &masked)
}

fn align512(n: usize) -> usize {
    n.div_ceil(512) * 512
}

/// `out = x.index_select(axis, index)` (aclnnIndexSelect; `index` 1-D, in [0, n)).
fn index_select(c: &mut Call, x: &View, axis: usize, index: &View, out: &View) -> BResult<()> {
    let ni = index.dims.iter().product::<usize>();
    let mut od = x.dims[..axis].to_vec();
    od.push(ni);
    od.extend_from_slice(&x.dims[axis + 1..]);
    let (td, ti, to) = (c.tensor(x)?, c.tensor(index)?, c.output(&out.reshaped(&od))?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::index_select_get_workspace_size(c.api, td, axis as i64, ti, to) };
    c.run(p1, nn::index_select)
}

/// `out = x + v` for a scalar `v` (aclnnAdds, alpha 1).
fn adds(c: &mut Call, x: &View, v: f64, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let (sv, one) = (c.scalar_for(x.dtype, v)?, c.scalar_for(x.dtype, 1.0)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::adds_get_workspace_size(c.api, tx, sv, one, to) };
    c.run(p1, nn::adds)
}

/// Gather along `axis` through IndexSelect, which needs indices in [0, n) where the op
/// table allows [-n, n). Both ways shift the indices by n (aclnnAdds) first.
///
/// One-shot: selects from the data laid twice along the axis (two aclnnInplaceCopy), in
/// the stream's scratch buffer. Recording: InplaceCopy cannot be repeatable, and the data
/// may change from run to run; instead the shifted indices select, from a constant
/// table `[0, 1, .., n-1, 0, 1, .., n-1]` uploaded once into the recording's memory,
/// the index in [0, n) (a first aclnnIndexSelect), which then selects from the data.
fn gather(c: &mut Call, x: &View, idx: &View, axis: usize, out: &View) -> BResult<()> {
    let n = x.dims[axis];
    let ni: usize = idx.dims.iter().product();
    let idx_bytes = align512(ni * idx.dtype.size());
    if c.recording() {
        let table: Vec<u8> = match idx.dtype {
            DType::I32 => (0..2 * n).flat_map(|j| ((j % n.max(1)) as i32).to_le_bytes()).collect(),
            DType::I64 => (0..2 * n).flat_map(|j| ((j % n.max(1)) as i64).to_le_bytes()).collect(),
            d => return Err(AclBackendError::BadRequest(format!("{}: {d} indices", c.op))),
        };
        let t = c.upload(&table)?;
        let s = c.scratch(2 * idx_bytes)?;
        let shifted = View::contiguous(s, idx.dtype, &[ni]);
        let wrapped = View::contiguous(s + idx_bytes as u64, idx.dtype, &[ni]);
        adds(c, &idx.reshaped(&[ni]), n as f64, &shifted)?;
        index_select(c, &View::contiguous(t, idx.dtype, &[2 * n]), 0, &shifted, &wrapped)?;
        return index_select(c, x, axis, &wrapped, out);
    }
    let mut d2 = x.dims.clone();
    d2[axis] = 2 * n;
    let data_bytes = align512(d2.iter().product::<usize>() * x.dtype.size());
    let s = c.scratch(data_bytes + idx_bytes)?;
    let doubled = View::contiguous(s, x.dtype, &d2);
    let mut half = doubled.clone();
    half.dims[axis] = n;
    inplace_copy(c, &half, x)?;
    half.offset = n * doubled.strides[axis];
    inplace_copy(c, &half, x)?;
    let shifted = View::contiguous(s + data_bytes as u64, idx.dtype, &[ni]);
    adds(c, &idx.reshaped(&[ni]), n as f64, &shifted)?;
    index_select(c, &doubled, axis, &shifted, out)
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

/// Whether a frozen plan may record `op`'s executors (make them repeatable): not the
/// ops composed of aclnnInplaceCopy (Reshape, Copy), which CANN excludes from repeatable
/// executors; those stay one-shot, with their phase 1 on every run.
pub(crate) fn repeatable(op: &Op) -> bool {
    !matches!(op, Op::Reshape { .. } | Op::Copy)
}

/// How [`compose`] maps an op onto aclnn operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// The SoC computes FP32 matrix products in FP16 (cubeMathType 1): the 910 family.
    pub is_910: bool,
    /// Attention as one `aclnnFlashAttentionScore` (kernel `attention.aclnn-flash.cube`,
    /// Atlas A2/A3) rather than composed of matrix products and a softmax.
    pub flash: bool,
}

/// Queues `args.op` on the stream as aclnn calls, one-shot.
pub(crate) fn run(api: &Api, rec: &StreamRec, how: Mapping, args: &LaunchArgs) -> BResult<()> {
    let mut c = Call::new(api, rec, args.op.name(), None);
    compose(&mut c, how, args)
}

/// Records `args.op`'s operators as repeatable executors (see the module documentation),
/// without launching them, on `rec`, the stream it will launch on, with its intermediates
/// in that stream's `intermediates` (rewound: this node may reuse what earlier nodes took).
pub(crate) fn record(
    api: &Api,
    rec: &StreamRec,
    how: Mapping,
    args: &LaunchArgs,
    intermediates: &mut Intermediates,
) -> BResult<Recorded> {
    let op = args.op.name();
    if !repeatable(&args.op) {
        return Err(AclBackendError::BadRequest(format!("{op}: no repeatable executors for this op")));
    }
    intermediates.rewind();
    let mut c = Call::new(api, rec, op, Some(intermediates));
    compose(&mut c, how, args)?;
    c.finish().ok_or_else(|| AclBackendError::BadRequest(format!("{op}: nothing recorded")))
}

/// `args.op` as aclnn operators on `c`.
fn compose(c: &mut Call, how: Mapping, args: &LaunchArgs) -> BResult<()> {
    let is_910 = how.is_910;
    let op = args.op.name();
    let n_in = args.inputs.len();
    let ins: Vec<View> = args.inputs.iter().enumerate().map(|(j, a)| View::operand(a, j)).collect();
    let out = View::operand(&args.outputs[0], n_in);
    let x = &ins[0];
    // A contiguous intermediate.
    let scratch = |c: &mut Call, dims: &[usize], dtype: DType| -> BResult<View> {
        let s = c.scratch(dims.iter().product::<usize>() * dtype.size())?;
        Ok(View::contiguous(s, dtype, dims))
    };
    match &args.op {
        Op::MatMul { trans_a, trans_b } => {
            matmul(c, &x.t(*trans_a), &ins[1].t(*trans_b), &out, cube_math(is_910, x.dtype))
        }
        Op::Gemm { trans_a, trans_b, alpha, beta } => {
            let (a, bm) = (x.t(*trans_a), ins[1].t(*trans_b));
            let cube = cube_math(is_910, x.dtype);
            match ins.get(2) {
                Some(bias) => addmm(c, bias, &a, &bm, *beta, *alpha, &out, cube),
                None if *alpha == 1.0 => matmul(c, &a, &bm, &out, cube),
                None => {
                    let tmp = scratch(c, &out.dims, out.dtype)?;
                    matmul(c, &a, &bm, &tmp, cube)?;
                    muls(c, &tmp, *alpha, &out)
                }
            }
        }
        Op::Linear if x.dtype == DType::F32 && ins[1].dtype == DType::F16 => {
            // An fp16 weight (precision f16): x (and the bias) cast to fp16 in the stream's
            // scratch buffer, the product on the Cube in fp16 (the Cube accumulates in
            // f32), the result cast back to f32.
            let k = *x.dims.last().unwrap_or(&0);
            let m = x.dims.iter().product::<usize>() / k.max(1);
            let n = ins[1].dims[0];
            let (xb, ob) = (align512(m * k * 2), align512(m * n * 2));
            let s = c.scratch(xb + ob + align512(n * 2))?;
            let x16 = View::contiguous(s, DType::F16, &[m, k]);
            let o16 = View::contiguous(s + xb as u64, DType::F16, &[m, n]);
            cast(c, &x.reshaped(&[m, k]), DType::F16, &x16)?;
            let w = ins[1].t(true);
            let keep = acl_sys::cube_math::KEEP_DTYPE;
            match ins.get(2) {
                Some(bias) => {
                    let b16 = View::contiguous(s + (xb + ob) as u64, DType::F16, &[n]);
                    cast(c, bias, DType::F16, &b16)?;
                    addmm(c, &b16, &x16, &w, 1.0, 1.0, &o16, keep)?;
                }
                None => matmul(c, &x16, &w, &o16, keep)?,
            }
            cast(c, &o16, DType::F32, &out.reshaped(&[m, n]))
        }
        Op::Linear => {
            let k = *x.dims.last().unwrap_or(&0);
            let m = x.dims.iter().product::<usize>() / k.max(1);
            let n = ins[1].dims[0];
            let a = x.reshaped(&[m, k]);
            let w = ins[1].t(true);
            let o = out.reshaped(&[m, n]);
            let cube = cube_math(is_910, x.dtype);
            match ins.get(2) {
                Some(bias) => addmm(c, bias, &a, &w, 1.0, 1.0, &o, cube),
                None => matmul(c, &a, &w, &o, cube),
            }
        }
        Op::Add | Op::Sub => add_sub(c, matches!(args.op, Op::Sub), x, &ins[1], &out),
        Op::Mul | Op::Div => mul_div(c, matches!(args.op, Op::Div), x, &ins[1], &out),
        Op::Relu | Op::Tanh | Op::Erf | Op::Exp | Op::Sqrt => unary(c, &args.op, x, &out),
        Op::Gelu(a) => gelu(c, x, *a, &out),
        Op::Scale { factor } => muls(c, x, *factor, &out),
        Op::Softmax { axis } => softmax(c, x, *axis as i64, &out),
        Op::LayerNorm { eps } => layer_norm(c, x, &ins[1], &ins[2], *eps, &out),
        Op::Permute { perm } => permute(c, x, perm, &out),
        Op::Reshape { .. } => inplace_copy(c, &out, &x.reshaped(&out.dims)),
        Op::Copy => inplace_copy(c, &out, x),
        Op::Cast { to } => cast(c, x, *to, &out),
        Op::ReduceSum { axes, keepdims } | Op::ReduceMean { axes, keepdims } => {
            let shape = runtime::Shape::new(x.dims.clone());
            let ax = runtime::op::normalise_axes(&shape, axes)
                .ok_or_else(|| AclBackendError::BadRequest(format!("{op}: bad axes {axes:?}")))?;
            let axv: Vec<i64> = ax.iter().map(|&a| a as i64).collect();
            reduce(c, matches!(args.op, Op::ReduceMean { .. }), x, &axv, *keepdims, &out)
        }
        Op::Gather { axis } => gather(c, x, &ins[1], *axis, &out),
        Op::BiasGelu(a) => {
            let tmp = scratch(c, &out.dims, out.dtype)?;
            add_sub(c, false, x, &ins[1], &tmp)?;
            gelu(c, &tmp, *a, &out)
        }
        Op::AddLayerNorm { eps } => {
            // aclnnAddLayerNorm is not available on the 910: Add then LayerNorm.
            let tmp = scratch(c, &out.dims, out.dtype)?;
            add_sub(c, false, x, &ins[1], &tmp)?;
            layer_norm(c, &tmp, &ins[2], &ins[3], *eps, &out)
        }
        Op::Attention { scale, .. } if how.flash => {
            let d = *x.dims.last().unwrap_or(&1);
            let scale = scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
            let parts = Attention { q: x, k: &ins[1], v: &ins[2], mask: ins.get(3), scale };
            flash_attention(c, &parts, &out)
        }
        Op::Attention { scale, .. } => {
            let d = *x.dims.last().unwrap_or(&1);
            let scale = scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
            let (b, h, s, t) = (x.dims[0], x.dims[1], x.dims[2], ins[1].dims[2]);
            let bytes = align512(b * h * s * t * x.dtype.size());
            let row_max = align512(b * h * s * x.dtype.size());
            let base = c.scratch(2 * bytes + row_max + align512(b * h * s))?;
            let sc = AttentionScratch {
                pair: [
                    View::contiguous(base, x.dtype, &[b, h, s, t]),
                    View::contiguous(base + bytes as u64, x.dtype, &[b, h, s, t]),
                ],
                row_max: View::contiguous(base + 2 * bytes as u64, x.dtype, &[b, h, s, 1]),
                masked: View::contiguous(base + (2 * bytes + row_max) as u64, DType::U8, &[b, h, s, 1]),
            };
            let parts = Attention { q: x, k: &ins[1], v: &ins[2], mask: ins.get(3), scale };
            attention(c, &parts, &sc, &out, cube_math(is_910, x.dtype))
        }
    }
}
