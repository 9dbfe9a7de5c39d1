//! aclnn basics: tensor, scalar, int-array and tensor-list descriptors, executors (repeatable or
//! one-shot), and the helpers every operator's phase 1 and phase 2 share.

use crate::descriptors::{Executor, Kernel, Src, TensorDesc};
use crate::error::{Fail, R, fail};
use crate::ffi::{guard, guard_handle, h, put, read_array};
use crate::ops;
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::c_void;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateTensor(
    viewDims: *const i64,
    viewDimsNum: u64,
    dataType: aclDataType,
    stride: *const i64,
    offset: i64,
    format: aclFormat,
    _storageDims: *const i64,
    _storageDimsNum: u64,
    tensorData: *mut c_void,
) -> *mut aclTensor {
    guard_handle("aclCreateTensor", |t| {
        if viewDimsNum > 8 {
            return fail(ACLNN_ERR_PARAM_INVALID, "more than 8 dims");
        }
        if format.name().is_none() {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("unknown format {}", format.0));
        }
        // SAFETY: C contract: the arrays hold viewDimsNum values (stride may be NULL).
        let dims = unsafe { read_array(viewDims, viewDimsNum) }?;
        let strides = if stride.is_null() {
            let mut s = vec![1i64; dims.len()];
            for i in (0..dims.len().saturating_sub(1)).rev() {
                s[i] = s[i + 1] * dims[i + 1].max(1);
            }
            s
        } else {
            // SAFETY: as above.
            unsafe { read_array(stride, viewDimsNum) }?
        };
        let d = TensorDesc { dims, strides, offset, dtype: dataType, addr: h(tensorData) };
        let hd = emu().handle(TAG_TENSOR);
        t.tensors.insert(hd, d);
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyTensor(tensor: *const aclTensor) -> aclnnStatus {
    guard("aclDestroyTensor", |t| {
        if tensor.is_null() {
            return Ok(());
        }
        t.tensors
            .remove(&h(tensor.cast()))
            .map(|_| ())
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclTensor".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateScalar(value: *mut c_void, dataType: aclDataType) -> *mut aclScalar {
    guard_handle("aclCreateScalar", |t| {
        if value.is_null() {
            return fail(ACLNN_ERR_PARAM_NULLPTR, "value is NULL");
        }
        // SAFETY: C contract: `value` points to a host value of `dataType`.
        let v = unsafe {
            match dataType {
                ACL_FLOAT => (value as *const f32).read_unaligned() as f64,
                ACL_DOUBLE => (value as *const f64).read_unaligned(),
                ACL_FLOAT16 => half::f16::from_bits((value as *const u16).read_unaligned()).to_f64(),
                ACL_INT32 => (value as *const i32).read_unaligned() as f64,
                ACL_INT64 => (value as *const i64).read_unaligned() as f64,
                ACL_INT8 => (value as *const i8).read_unaligned() as f64,
                ACL_UINT8 => (value as *const u8).read_unaligned() as f64,
                _ => return fail(ACLNN_ERR_PARAM_INVALID, format!("scalar type {} not emulated", dataType.0)),
            }
        };
        let hd = emu().handle(TAG_SCALAR);
        t.scalars.insert(hd, (dataType, v));
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyScalar(scalar: *const aclScalar) -> aclnnStatus {
    guard("aclDestroyScalar", |t| {
        if scalar.is_null() {
            return Ok(());
        }
        t.scalars
            .remove(&h(scalar.cast()))
            .map(|_| ())
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclScalar".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray {
    guard_handle("aclCreateIntArray", |t| {
        // SAFETY: C contract: `value` holds `size` values.
        let v = unsafe { read_array(value, size) }?;
        let hd = emu().handle(TAG_INTARRAY);
        t.int_arrays.insert(hd, v);
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyIntArray(array: *const aclIntArray) -> aclnnStatus {
    guard("aclDestroyIntArray", |t| {
        if array.is_null() {
            return Ok(());
        }
        t.int_arrays
            .remove(&h(array.cast()))
            .map(|_| ())
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclIntArray".into()))
    })
}

/// A list of known tensors, which it then owns (`aclDestroyTensorList` destroys them too,
/// as CANN documents); a tensor already in a list is refused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateTensorList(value: *const *const aclTensor, size: u64) -> *mut aclTensorList {
    guard_handle("aclCreateTensorList", |t| {
        // SAFETY: C contract: `value` holds `size` pointers.
        let v: Vec<u64> = unsafe { read_array(value, size) }?.into_iter().map(|p| h(p.cast())).collect();
        for (i, k) in v.iter().enumerate() {
            if !t.tensors.contains_key(k) {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("value[{i}]: unknown aclTensor {k:#x}"));
            }
            if v[..i].contains(k) || t.tensor_lists.values().any(|l| l.contains(k)) {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("value[{i}]: aclTensor {k:#x} is already in a list"));
            }
        }
        let hd = emu().handle(TAG_TENSORLIST);
        t.tensor_lists.insert(hd, v);
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyTensorList(array: *const aclTensorList) -> aclnnStatus {
    guard("aclDestroyTensorList", |t| {
        if array.is_null() {
            return Ok(());
        }
        let v = t
            .tensor_lists
            .remove(&h(array.cast()))
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclTensorList".into()))?;
        for k in v {
            t.tensors.remove(&k);
        }
        Ok(())
    })
}

/// The tensors of the list behind handle `h`, as inputs.
pub(crate) fn tensor_list(t: &Tables, hd: u64, what: &str) -> R<Vec<Src>> {
    if hd == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, format!("{what} is NULL"));
    }
    let v = t
        .tensor_lists
        .get(&hd)
        .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("{what}: unknown aclTensorList")))?;
    v.iter().map(|&k| Ok(Src::Tensor(k, desc(t, k, what)?))).collect()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclSetAclOpExecutorRepeatable(executor: *mut aclOpExecutor) -> aclnnStatus {
    guard("aclSetAclOpExecutorRepeatable", |t| match t.executors.get_mut(&h(executor.cast())) {
        Some(e) => {
            e.repeatable = true;
            Ok(())
        }
        None => fail(ACLNN_ERR_INNER_NULLPTR, "executor is NULL or unknown"),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyAclOpExecutor(executor: *mut aclOpExecutor) -> aclnnStatus {
    guard("aclDestroyAclOpExecutor", |t| {
        let k = h(executor.cast());
        match t.executors.get(&k) {
            Some(e) if e.repeatable => {
                t.executors.remove(&k);
                Ok(())
            }
            Some(_) => fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyAclOpExecutor on an executor that is not repeatable"),
            None => fail(ACLNN_ERR_INNER_NULLPTR, "executor is NULL or unknown"),
        }
    })
}

// ---------------------------------------------------------------- operator helpers ----

/// The tensor descriptor behind handle `h` (`what` names the argument in errors).
pub(crate) fn desc(t: &Tables, h: u64, what: &str) -> R<TensorDesc> {
    if h == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, format!("{what} is NULL"));
    }
    t.tensors.get(&h).cloned().ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("{what}: unknown aclTensor {h:#x}")))
}

/// The value of the scalar behind handle `h`.
pub(crate) fn scalar(t: &Tables, h: u64, what: &str) -> R<f64> {
    if h == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, format!("{what} is NULL"));
    }
    t.scalars.get(&h).map(|s| s.1).ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("{what}: unknown aclScalar")))
}

/// The values of the int array behind handle `h`.
pub(crate) fn int_array(t: &Tables, h: u64, what: &str) -> R<Vec<i64>> {
    if h == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, format!("{what} is NULL"));
    }
    t.int_arrays.get(&h).cloned().ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("{what}: unknown aclIntArray")))
}

/// A one-shot executor for `phase2` computing `kernel` (a runtime `Op` or a
/// [`Kernel`]), asking for `ws` workspace bytes.
pub(crate) fn ex(
    phase2: &'static str,
    kernel: impl Into<Kernel>,
    inputs: Vec<Src>,
    outputs: Vec<(u64, TensorDesc)>,
    ws: u64,
) -> Executor {
    Executor {
        phase2,
        kernel: kernel.into(),
        inputs,
        outputs,
        workspace: ws,
        repeatable: false,
        device: 0,
        fp16_compute: false,
        index_check: None,
    }
}

/// An input operand from a tensor handle.
pub(crate) fn tsrc(t: &Tables, p: *const aclTensor, what: &str) -> R<Src> {
    let k = h(p.cast());
    Ok(Src::Tensor(k, desc(t, k, what)?))
}

/// An output operand from a tensor handle: (handle, descriptor).
pub(crate) fn tout(t: &Tables, p: *const aclTensor, what: &str) -> R<(u64, TensorDesc)> {
    let k = h(p.cast());
    Ok((k, desc(t, k, what)?))
}

/// Writes the phase-1 results.
///
/// # Safety
/// Both pointers are NULL or writable.
pub(crate) unsafe fn finish(t: &mut Tables, e: Executor, ws: *mut u64, exec: *mut *mut aclOpExecutor) -> R<()> {
    if ws.is_null() || exec.is_null() {
        return fail(ACLNN_ERR_PARAM_NULLPTR, "workspaceSize or executor is NULL");
    }
    let size = e.workspace;
    let k = ops::create(t, e)?;
    // SAFETY: non-NULL (checked) and writable per this function's contract.
    unsafe {
        put(ws, size)?;
        put(exec, k as usize as *mut aclOpExecutor)
    }
}

/// Exports the phase-2 entry point `aclnnX(workspace, workspaceSize, executor, stream)`
/// of each operator named: it launches the executor its phase 1 made.
macro_rules! phase2 {
    ($($name:ident),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            workspace: *mut ::std::ffi::c_void,
            workspaceSize: u64,
            executor: *mut ::acl_sys::aclOpExecutor,
            stream: ::acl_sys::aclrtStream,
        ) -> ::acl_sys::aclnnStatus {
            $crate::ffi::guard(stringify!($name), |t| {
                $crate::ops::launch(
                    t,
                    stringify!($name),
                    $crate::ffi::h(workspace),
                    workspaceSize,
                    $crate::ffi::h(executor.cast()),
                    $crate::ffi::h(stream),
                )
            })
        }
    )*};
}
pub(crate) use phase2;
