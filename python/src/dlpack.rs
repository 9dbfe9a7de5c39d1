//! DLPack export: a `dltensor` capsule over a tensor's host memory.
//!
//! The capsule owns a clone of the tensor (so its memory stays allocated) until the
//! consumer calls the deleter, or until the capsule is collected unconsumed.

use npurt::{DType, Tensor};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{CStr, c_void};

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

/// DLPack 1.0's versioned record (`dltensor_versioned` capsules); flags 0: writable.
#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What the capsule keeps alive: the tensor and the shape and strides arrays.
struct Holder {
    managed: DLManagedTensor,
    versioned: DLManagedTensorVersioned,
    _tensor: Tensor,
    _shape: Vec<i64>,
    _strides: Vec<i64>,
}

const NAME: &CStr = c"dltensor";
const NAME_VERSIONED: &CStr = c"dltensor_versioned";
/// `kDLCPU`.
pub(crate) const DEVICE_CPU: i32 = 1;

fn dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::F32 => (2, 32),
        DType::F16 => (2, 16),
        DType::BF16 => (4, 16),
        DType::I32 => (0, 32),
        DType::I64 => (0, 64),
        DType::U8 => (1, 8),
    };
    DLDataType { code, bits, lanes: 1 }
}

unsafe extern "C" fn deleter(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` is the `managed` field of a `Holder` leaked by `capsule`, whose
    // `manager_ctx` is that holder; the deleter runs once (DLPack's contract), so the
    // box is reclaimed exactly once. Dropping it only releases runtime memory (no GIL).
    unsafe { drop(Box::from_raw((*m).manager_ctx.cast::<Holder>())) }
}

unsafe extern "C" fn deleter_versioned(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: as `deleter`, for the `versioned` field of the leaked holder.
    unsafe { drop(Box::from_raw((*m).manager_ctx.cast::<Holder>())) }
}

unsafe extern "C" fn capsule_destructor_versioned(cap: *mut ffi::PyObject) {
    // SAFETY: as `capsule_destructor`, for `dltensor_versioned` capsules.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, NAME_VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
            deleter_versioned(m);
        }
    }
}

unsafe extern "C" fn capsule_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed. A consumer renames a
    // capsule it took (`used_dltensor`) and owns the tensor then; only an unconsumed one
    // (still named `dltensor`) is freed here. `PyCapsule_IsValid` sets no error.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()).cast::<DLManagedTensor>();
            deleter(m);
        }
    }
}

fn dl_tensor(t: &Tensor, addr: usize, shape: &mut [i64], strides: &mut [i64]) -> DLTensor {
    DLTensor {
        data: addr as *mut c_void,
        device: DLDevice { device_type: DEVICE_CPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype: dl_dtype(t.dtype()),
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    }
}

/// A DLPack capsule for `t`, whose elements start at host address `addr`: a DLPack 1.0
/// `dltensor_versioned` one when `versioned`, else a legacy `dltensor` one.
pub(crate) fn capsule<'py>(py: Python<'py>, t: &Tensor, addr: usize, versioned: bool) -> PyResult<Bound<'py, PyAny>> {
    let mut shape: Vec<i64> = t.dims().iter().map(|&d| d as i64).collect();
    let mut strides: Vec<i64> = t.layout().strides.iter().map(|&s| s as i64).collect();
    let h = Box::new(Holder {
        managed: DLManagedTensor {
            dl_tensor: dl_tensor(t, addr, &mut shape, &mut strides),
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter),
        },
        versioned: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter_versioned),
            flags: 0,
            dl_tensor: dl_tensor(t, addr, &mut shape, &mut strides),
        },
        _tensor: t.clone(),
        _shape: shape,
        _strides: strides,
    });
    // The vectors' heap buffers do not move when the vectors move into the holder.
    let raw = Box::into_raw(h);
    // SAFETY: `raw` is a valid, leaked `Holder`; its `managed` field lives as long as the
    // holder, which the deleter (called by the consumer or the capsule destructor) frees.
    unsafe {
        (*raw).managed.manager_ctx = raw.cast::<c_void>();
        (*raw).versioned.manager_ctx = raw.cast::<c_void>();
        let cap = if versioned {
            let m: *mut DLManagedTensorVersioned = &raw mut (*raw).versioned;
            ffi::PyCapsule_New(m.cast::<c_void>(), NAME_VERSIONED.as_ptr(), Some(capsule_destructor_versioned))
        } else {
            let m: *mut DLManagedTensor = &raw mut (*raw).managed;
            ffi::PyCapsule_New(m.cast::<c_void>(), NAME.as_ptr(), Some(capsule_destructor))
        };
        if cap.is_null() {
            drop(Box::from_raw(raw));
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap))
    }
}
