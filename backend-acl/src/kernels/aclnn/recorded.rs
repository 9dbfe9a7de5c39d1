//! Recorded executors for frozen plans: one op's repeatable executors, in launch order,
//! with their descriptors and memory, the tensors whose addresses follow the launch
//! operands from run to run, and their release.

use crate::error::AclBackendError;
use crate::stream::StreamRec;
use acl_sys::result::aclnn as nn;
use acl_sys::{AclError, Api, aclIntArray, aclOpExecutor, aclScalar, aclTensor, aclTensorList, aclrtStream};
use std::ffi::c_void;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// Phase 2 of every operator: `(workspace, workspaceSize, executor, stream)`.
pub(super) type Phase2 = unsafe fn(&Api, *mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> Result<(), AclError>;

/// Destroys descriptors (each once; a failed destroy released nothing and is retried
/// once) that no executor or pending call uses any more.
pub(super) fn destroy_descriptors(
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

/// A repeatable executor of a recorded op: its phase 2 and the workspace it asked for.
pub(super) struct Exec {
    pub(super) ex: *mut aclOpExecutor,
    pub(super) ws: u64,
    pub(super) p2: Phase2,
}

/// An operator tensor that views a launch operand: it follows the operand's address.
pub(super) struct Patch {
    /// Index into [`Recorded::execs`].
    pub(super) exec: usize,
    pub(super) output: bool,
    /// Over the operator's input (or output) tensors, in the order of its C prototype.
    pub(super) index: usize,
    pub(super) tensor: *mut aclTensor,
    /// The launch operand (inputs first, then outputs).
    pub(super) operand: usize,
    /// The address the executor holds.
    pub(super) addr: u64,
    /// A member of a tensor list: the list and the member's index (set through
    /// `aclSetDynamicInputTensorAddr` with `index` as the IR input index).
    pub(super) list: Option<(*mut aclTensorList, usize)>,
}

/// One op's repeatable executors, in launch order, with everything they use: their
/// descriptors (which must outlive them: `aclDestroyAclOpExecutor`, `aclnn/acl_meta.h`) and the device memory of the
/// op's constants (its intermediates are in the stream's [`Intermediates`], which the
/// plan keeps). Released by [`Recorded::release`] once no queued work uses it.
pub(crate) struct Recorded {
    op: &'static str,
    /// The stream it was recorded on (its intermediates are that stream's).
    stream: *const StreamRec,
    pub(super) execs: Vec<Exec>,
    pub(super) patches: Vec<Patch>,
    pub(super) tensors: Vec<*mut aclTensor>,
    pub(super) scalars: Vec<*mut aclScalar>,
    pub(super) arrays: Vec<*mut aclIntArray>,
    /// Tensor lists, each owning its member descriptors (not in `tensors`).
    pub(super) lists: Vec<*mut aclTensorList>,
    /// aclrtMalloc blocks of its constants (outside the allocation table): (address, bytes).
    pub(super) mem: Vec<(u64, usize)>,
}

// SAFETY: the handles are host objects of the aclnn library, usable from any thread;
// a `Recorded` is only reached through its owner's mutex, one thread at a time.
unsafe impl Send for Recorded {}

impl Recorded {
    pub(super) fn new(op: &'static str, stream: &StreamRec) -> Recorded {
        Recorded {
            op,
            stream,
            execs: Vec::new(),
            patches: Vec::new(),
            tensors: Vec::new(),
            scalars: Vec::new(),
            arrays: Vec::new(),
            lists: Vec::new(),
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
    /// `addr(operand)` (`aclSetInputTensorAddr` / `aclSetOutputTensorAddr`, a list's member
    /// `aclSetDynamicInputTensorAddr`, only where it
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
            // descriptor given to it at position `index` of its phase 1 (or, for a list's
            // member, `p.list` the live list given there, which holds it); `a` is a 32-byte
            // aligned device address the caller validated to hold the operand.
            // SAFETY: as above; that memory stays allocated while queued work uses it (M2).
            let r = unsafe {
                if let Some((list, member)) = p.list {
                    nn::set_dynamic_input_tensor_addr(api, ex, p.index, member, list, a as *mut c_void)
                } else if p.output {
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
        for l in self.lists.drain(..) {
            // SAFETY: created by aclCreateTensorList, destroyed once with the descriptors it
            // owns; the executors that used it are gone and no queued work uses it (caller).
            let _ = unsafe { nn::destroy_tensor_list(api, l) };
        }
        destroy_descriptors(api, &mut self.tensors, &mut self.scalars, &mut self.arrays);
        for (p, _) in self.mem.drain(..) {
            if let Err(e) = crate::memory::free(api, p) {
                log::error!("acl: {}: freeing its memory: {e}", self.op);
            }
        }
    }
}
