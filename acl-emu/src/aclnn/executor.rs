//! New addresses for the tensors of a repeatable executor (`aclnn/acl_meta.h`; the rules
//! are in docs/ASCEND.md, "The two-phase aclnn call"):
//! `aclSetInputTensorAddr`, `aclSetOutputTensorAddr` and `aclSetTensorAddr`.
//!
//! The executor keeps its operands' descriptors by value (phase 1 copied them), and each
//! phase 2 queues a copy of the executor: a new address reaches the next phase 2, never
//! work already queued. The descriptor behind the handle gets the address too (the
//! documentation: "the device memory address recorded in the aclTensor is updated").
//!
//! Checks, with CANN's codes: the executor or the tensor NULL or unknown (561103); the
//! executor not made repeatable (161002); `addr` NULL (161001) or not 32-byte aligned
//! (161002); `index` out of range, or naming a tensor that was NULL at phase 1 (161002).
//! Stricter than CANN, so that tests catch a wrong index: `tensor` must be the descriptor
//! passed at that position in phase 1, and the view at `addr` must lie inside one live
//! allocation of the executor's device (161002).
//!
//! What `index` means in CANN (hicann/opbase, `acl_op_api.cpp`): the setters first store
//! `addr` in `tensor` itself; only the executors of generated single operators (nnopbase's
//! own, recognised by a magic number) then use `index`, counted over the prototype's input
//! (or output) tensors with NULL optional ones included and disabled ones skipped. The
//! executors of the op_api operators (composites such as aclnnFlashAttentionScore) ignore
//! `index` and see the new address through the tensor. The emulator checks every index as
//! the prototype position, NULL optional tensors included, which satisfies both.

use crate::descriptors::{Executor, Src, TensorDesc};
use crate::error::{Fail, R, fail};
use crate::ffi::{guard, h};
use crate::state::Tables;
use acl_sys::codes::*;
use acl_sys::{aclOpExecutor, aclTensor, aclTensorList, aclnnStatus};
use std::ffi::c_void;

/// Which tensors `index` counts.
#[derive(Clone, Copy)]
enum Side {
    Input,
    Output,
    /// Inputs, then outputs (`aclSetTensorAddr`).
    Both,
}

/// Where a tensor of the operator sits in the executor.
enum Slot {
    Input(usize),
    Output(usize),
}

/// The position in `ex.inputs` of each input tensor the operator's C prototype lists, in
/// the prototype's order; `None` for an optional tensor that was NULL at phase 1.
fn input_slots(ex: &Executor) -> Vec<Option<usize>> {
    match ex.phase2 {
        // aclnnAddmm(self, mat1, mat2, ...) is stored in Gemm's order [mat1, mat2, self].
        "aclnnAddmm" => vec![Some(2), Some(0), Some(1)],
        // aclnnAdds(self, other: aclScalar, ...): the stored fill is the scalar.
        "aclnnAdds" => vec![Some(0)],
        // aclnnFlashAttentionScore(query, key, value, realShiftOptional, dropMaskOptional,
        // paddingMaskOptional, attenMaskOptional, ...), stored as [q, k, v] or [q, k, v, pse];
        // the emulator takes none of the three masks.
        "aclnnFlashAttentionScore" => (0..7).map(|i| (i < ex.inputs.len().min(4)).then_some(i)).collect(),
        "aclnnIncreFlashAttentionV4" => crate::aclnn::incre_flash::input_slots(ex),
        _ => ex.inputs.iter().enumerate().map(|(i, s)| matches!(s, Src::Tensor(..)).then_some(i)).collect(),
    }
}

/// The position in `ex.outputs` of each output tensor of the C prototype, in its order;
/// `None` for one the executor does not hold (NULL at phase 1, or never written).
fn output_slots(ex: &Executor) -> Vec<Option<usize>> {
    match ex.phase2 {
        // (softmaxMaxOut, softmaxSumOut, softmaxOutOut, attentionOutOut), stored without the
        // reserved softmaxOutOut, which is never written.
        "aclnnFlashAttentionScore" if ex.outputs.len() == 3 => vec![Some(0), Some(1), None, Some(2)],
        "aclnnFlashAttentionScore" => vec![None; 4],
        _ => (0..ex.outputs.len()).map(Some).collect(),
    }
}

fn slot(ex: &Executor, side: Side, index: usize) -> R<Slot> {
    let (ins, outs) = (input_slots(ex), output_slots(ex));
    let (n_in, n_out) = (ins.len(), outs.len());
    let (input, i) = match side {
        Side::Input => (true, index),
        Side::Output => (false, index),
        Side::Both if index < n_in => (true, index),
        Side::Both => (false, index - n_in),
    };
    let count = if input { n_in } else { n_out };
    let what = if input { "input" } else { "output" };
    if i >= count {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("{what} index {i} is out of range: the operator has {count}"));
    }
    match (input, if input { ins[i] } else { outs[i] }) {
        (true, Some(p)) => Ok(Slot::Input(p)),
        (false, Some(p)) => Ok(Slot::Output(p)),
        (_, None) => fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("{what} {i} was NULL at phase 1 (or is never written): its address cannot be set"),
        ),
    }
}

fn set_addr(t: &mut Tables, side: Side, executor: u64, index: usize, tensor: u64, addr: u64) -> R<()> {
    if executor == 0 || tensor == 0 {
        return fail(ACLNN_ERR_INNER_NULLPTR, "executor or tensor is NULL");
    }
    let ex = t
        .executors
        .get(&executor)
        .ok_or_else(|| Fail(ACLNN_ERR_INNER_NULLPTR, format!("unknown executor {executor:#x}")))?;
    if !ex.repeatable {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("{}: the executor is not repeatable (call aclSetAclOpExecutorRepeatable first)", ex.phase2),
        );
    }
    if addr == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, "addr is NULL");
    }
    if !addr.is_multiple_of(32) {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("addr {addr:#x} is not 32-byte aligned"));
    }
    let at = slot(ex, side, index)?;
    let (held, desc): (u64, &TensorDesc) = match at {
        Slot::Input(p) => match &ex.inputs[p] {
            Src::Tensor(hd, d) => (*hd, d),
            Src::Fill(..) => return fail(ACLNN_ERR_PARAM_INVALID, format!("input {index} was NULL at phase 1")),
        },
        Slot::Output(p) => (ex.outputs[p].0, &ex.outputs[p].1),
    };
    if held != tensor {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("{}: aclTensor {tensor:#x} is not the tensor at index {index} ({held:#x})", ex.phase2),
        );
    }
    let moved = TensorDesc { addr, ..desc.clone() };
    let (s, e) = moved.span();
    if e > s {
        let inside = t.device_of_addr(s).is_some_and(|d| d as i32 == ex.device && t.mem[d].find(s, e - s).is_some());
        if !inside {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!(
                    "{}: bytes {s:#x}..{e:#x} are not inside one live allocation of device {}",
                    ex.phase2, ex.device
                ),
            );
        }
    }
    let ex = t.executors.get_mut(&executor).ok_or_else(|| Fail(ACLNN_ERR_INNER_NULLPTR, "executor vanished".into()))?;
    // The tensor moves wherever the executor holds it: an in-place operator
    // (aclnnInplaceMaskedFillScalar's selfRef) reads and writes the same descriptor.
    for s in &mut ex.inputs {
        if let Src::Tensor(hd, d) = s
            && *hd == tensor
        {
            d.addr = addr;
        }
    }
    for (hd, d) in &mut ex.outputs {
        if *hd == tensor {
            d.addr = addr;
        }
    }
    if let Some(d) = t.tensors.get_mut(&tensor) {
        d.addr = addr;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclSetInputTensorAddr(
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> aclnnStatus {
    guard("aclSetInputTensorAddr", |t| set_addr(t, Side::Input, h(executor.cast()), index, h(tensor.cast()), h(addr)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclSetOutputTensorAddr(
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> aclnnStatus {
    guard("aclSetOutputTensorAddr", |t| set_addr(t, Side::Output, h(executor.cast()), index, h(tensor.cast()), h(addr)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclSetTensorAddr(
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> aclnnStatus {
    guard("aclSetTensorAddr", |t| set_addr(t, Side::Both, h(executor.cast()), index, h(tensor.cast()), h(addr)))
}

/// `aclSetDynamicInputTensorAddr`: member `relativeIndex` of the tensor list given as input
/// `irIndex` (the operator's IR input index) moves to `addr`. The checks of the other
/// setters, with the list in place of the tensor: the list must be a live one whose member
/// at `relativeIndex` is the descriptor the executor holds there (161002), and only the
/// lists of the operators the emulator knows by position are accepted
/// (aclnnIncreFlashAttentionV4's key 1 and value 2, one member each).
fn set_dynamic(t: &mut Tables, executor: u64, ir_index: usize, relative: usize, list: u64, addr: u64) -> R<()> {
    if executor == 0 || list == 0 {
        return fail(ACLNN_ERR_INNER_NULLPTR, "executor or tensor list is NULL");
    }
    let ex = t
        .executors
        .get(&executor)
        .ok_or_else(|| Fail(ACLNN_ERR_INNER_NULLPTR, format!("unknown executor {executor:#x}")))?;
    let at = match ex.phase2 {
        "aclnnIncreFlashAttentionV4" => crate::aclnn::incre_flash::list_member(ir_index, relative),
        _ => None,
    };
    let Some(at) = at else {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("{}: input {ir_index} member {relative} is no tensor list member it holds", ex.phase2),
        );
    };
    let member = t.tensor_lists.get(&list).and_then(|l| l.get(relative).copied());
    let held = match ex.inputs.get(at) {
        Some(Src::Tensor(hd, _)) => *hd,
        _ => 0,
    };
    if member != Some(held) {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("{}: the list's member {relative} is not the tensor held at input {ir_index}", ex.phase2),
        );
    }
    move_held(t, executor, held, addr)
}

/// Moves tensor `held` of `executor` to `addr` after the checks of [`set_addr`] on the
/// address itself (repeatable, aligned, inside one live allocation of its device).
fn move_held(t: &mut Tables, executor: u64, held: u64, addr: u64) -> R<()> {
    let ex = t.executors.get(&executor).ok_or_else(|| Fail(ACLNN_ERR_INNER_NULLPTR, "executor vanished".into()))?;
    if !ex.repeatable {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("{}: the executor is not repeatable", ex.phase2));
    }
    if addr == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, "addr is NULL");
    }
    if !addr.is_multiple_of(32) {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("addr {addr:#x} is not 32-byte aligned"));
    }
    let desc = ex.inputs.iter().find_map(|s| match s {
        Src::Tensor(hd, d) if *hd == held => Some(d.clone()),
        _ => None,
    });
    let Some(desc) = desc else { return fail(ACLNN_ERR_PARAM_INVALID, "the tensor is not an input") };
    let moved = TensorDesc { addr, ..desc };
    let (s, e) = moved.span();
    let device = ex.device;
    if e > s && !t.device_of_addr(s).is_some_and(|d| d as i32 == device && t.mem[d].find(s, e - s).is_some()) {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("bytes {s:#x}..{e:#x} are not inside one live allocation of device {device}"),
        );
    }
    let ex = t.executors.get_mut(&executor).ok_or_else(|| Fail(ACLNN_ERR_INNER_NULLPTR, "executor vanished".into()))?;
    for s in &mut ex.inputs {
        if let Src::Tensor(hd, d) = s
            && *hd == held
        {
            d.addr = addr;
        }
    }
    if let Some(d) = t.tensors.get_mut(&held) {
        d.addr = addr;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclSetDynamicInputTensorAddr(
    executor: *mut aclOpExecutor,
    irIndex: usize,
    relativeIndex: usize,
    tensors: *mut aclTensorList,
    addr: *mut c_void,
) -> aclnnStatus {
    guard("aclSetDynamicInputTensorAddr", |t| {
        set_dynamic(t, h(executor.cast()), irIndex, relativeIndex, h(tensors.cast()), h(addr))
    })
}
