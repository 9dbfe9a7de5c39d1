//! `npurt_tensor`: tensors from the pool, host copies in and out, what a tensor is.

use crate::error::{CResult, Fail, guard, guard_void, npurt_status};
use crate::ffi::{handle, out_ptr, shape_arg, slice_arg, write};
use crate::runtime::{device_index, npurt_runtime};
use crate::types::{dtype_from_c, dtype_to_c, npurt_dtype};
use npurt::{DType, Tensor, bf16, f16};
use std::ffi::c_void;

/// A tensor: a device buffer with a dtype and a shape. Opaque; made by
/// `npurt_tensor_new`, `npurt_tensor_from_host`, `npurt_execute` or `npurt_graph_run`,
/// freed by `npurt_tensor_free`.
pub struct npurt_tensor {
    pub(crate) t: Tensor,
}

/// Hands a tensor to C.
pub(crate) fn into_handle(t: Tensor) -> *mut npurt_tensor {
    Box::into_raw(Box::new(npurt_tensor { t }))
}

/// The tensors behind `n` handles, none NULL.
///
/// # Safety
/// `p` is NULL (only when `n` is 0) or points to `n` pointers, each NULL or a live tensor.
pub(crate) unsafe fn tensor_list<'a>(p: *const *const npurt_tensor, n: usize, what: &str) -> CResult<Vec<&'a Tensor>> {
    // SAFETY: as the caller guarantees.
    let ptrs = unsafe { slice_arg(p, n, what) }?;
    ptrs.iter()
        .enumerate()
        // SAFETY: each entry is NULL or a live tensor (the caller's contract).
        .map(|(i, &t)| unsafe { handle(t, &format!("{what}[{i}]")) }.map(|h| &h.t))
        .collect()
}

/// Makes an uninitialised tensor of `dtype` and `shape` (`rank` dimensions, each at least
/// 0) on `device`, from that device's pool.
///
/// # Safety
/// `rt` is NULL or a live runtime; `shape` is NULL (only when `rank` is 0) or points to
/// `rank` values; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_tensor_new(
    rt: *mut npurt_runtime,
    dtype: npurt_dtype,
    shape: *const i64,
    rank: usize,
    device: i32,
    out: *mut *mut npurt_tensor,
) -> npurt_status {
    guard(|| {
        // SAFETY: `rt` is NULL or live (the caller's contract).
        let rt = &unsafe { handle(rt, "runtime") }?.rt;
        out_ptr(out, "out")?;
        let dtype = dtype_from_c(dtype)?;
        // SAFETY: `shape` holds `rank` values (the caller's contract).
        let dims = unsafe { shape_arg(shape, rank) }?;
        let d = device_index(rt, device)?;
        let t = rt.empty(dtype, dims, d)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, into_handle(t)) };
        Ok(())
    })
}

/// Makes a tensor on `device` holding a copy of `data`: `nbytes` little-endian element
/// bytes, which must equal the tensor's size (element count x element size).
///
/// # Safety
/// As `npurt_tensor_new`; `data` is NULL (only when `nbytes` is 0) or readable for
/// `nbytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_tensor_from_host(
    rt: *mut npurt_runtime,
    dtype: npurt_dtype,
    shape: *const i64,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
    device: i32,
    out: *mut *mut npurt_tensor,
) -> npurt_status {
    guard(|| {
        // SAFETY: `rt` is NULL or live (the caller's contract).
        let rt = &unsafe { handle(rt, "runtime") }?.rt;
        out_ptr(out, "out")?;
        let dtype = dtype_from_c(dtype)?;
        // SAFETY: `shape` holds `rank` values (the caller's contract).
        let dims = unsafe { shape_arg(shape, rank) }?;
        // SAFETY: `data` is readable for `nbytes` bytes (the caller's contract).
        let bytes = unsafe { slice_arg(data.cast::<u8>(), nbytes, "data") }?;
        let d = device_index(rt, device)?;
        let want = npurt::Shape::from(dims.clone()).checked_bytes("tensor", dtype)?;
        if want != nbytes {
            return Err(Fail::arg(format!("nbytes is {nbytes} but a {dtype} {dims:?} tensor holds {want} bytes")));
        }
        let t = rt.empty(dtype, dims, d)?;
        t.copy_from_bytes(bytes)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, into_handle(t)) };
        Ok(())
    })
}

/// The tensor's elements as little-endian bytes, in row-major order.
fn host_bytes(t: &Tensor) -> CResult<Vec<u8>> {
    fn get<T: npurt::Element>(t: &Tensor) -> CResult<Vec<u8>> {
        let a = t.to_ndarray::<T>()?;
        let v: Vec<T> = a.iter().copied().collect();
        Ok(bytemuck::cast_slice(&v).to_vec())
    }
    match t.dtype() {
        DType::F32 => get::<f32>(t),
        DType::F16 => get::<f16>(t),
        DType::BF16 => get::<bf16>(t),
        DType::I32 => get::<i32>(t),
        DType::I64 => get::<i64>(t),
        DType::U8 => get::<u8>(t),
    }
}

/// Waits for the queued work that writes the tensor, then copies its elements to `dst`
/// (`nbytes` must equal the tensor's size). Failures of that queued work are reported here.
///
/// # Safety
/// `t` is NULL or a live tensor; `dst` is NULL (only when `nbytes` is 0) or writable for
/// `nbytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_tensor_to_host(t: *const npurt_tensor, dst: *mut c_void, nbytes: usize) -> npurt_status {
    guard(|| {
        // SAFETY: `t` is NULL or live (the caller's contract).
        let t = &unsafe { handle(t, "tensor") }?.t;
        if t.nbytes() != nbytes {
            return Err(Fail::arg(format!(
                "nbytes is {nbytes} but the {} {:?} tensor holds {} bytes",
                t.dtype(),
                t.dims(),
                t.nbytes()
            )));
        }
        if nbytes == 0 {
            return Ok(());
        }
        out_ptr(dst, "dst")?;
        let bytes = host_bytes(t)?;
        // SAFETY: `dst` is non-NULL and writable for `nbytes == bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>(), bytes.len()) };
        Ok(())
    })
}

/// What a tensor is. Each out-pointer may be NULL (not wanted): `*dtype`; `*rank` (the
/// number of dimensions); `shape[0..rank]` when `shape` is not NULL, which needs
/// `max_rank >= rank` (else `NPURT_ERR_INVALID_ARGUMENT` and nothing written: pass
/// `shape == NULL` to learn the rank first);
/// `*data_ptr`, the device address of the first element.
///
/// # Safety
/// `t` is NULL or a live tensor; each out-pointer is NULL or writable (`shape` for
/// `max_rank` values).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_tensor_info(
    t: *const npurt_tensor,
    dtype: *mut npurt_dtype,
    shape: *mut i64,
    max_rank: usize,
    rank: *mut usize,
    data_ptr: *mut u64,
) -> npurt_status {
    guard(|| {
        // SAFETY: `t` is NULL or live (the caller's contract).
        let t = &unsafe { handle(t, "tensor") }?.t;
        // SAFETY: every out-pointer is NULL or writable (the caller's contract).
        unsafe { write_meta(t.dtype(), t.dims(), dtype, shape, max_rank, rank) }?;
        if !data_ptr.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { write(data_ptr, t.data_ptr()) };
        }
        Ok(())
    })
}

/// Writes a dtype and dims through the optional out-pointers of the info queries.
///
/// # Safety
/// Each pointer is NULL or writable (`shape` for `max_rank` values).
pub(crate) unsafe fn write_meta(
    dt: DType,
    dims: &[usize],
    dtype: *mut npurt_dtype,
    shape: *mut i64,
    max_rank: usize,
    rank: *mut usize,
) -> CResult {
    if !shape.is_null() && max_rank < dims.len() {
        return Err(Fail::arg(format!("max_rank is {max_rank} but the shape has {} dimensions", dims.len())));
    }
    if !rank.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { write(rank, dims.len()) };
    }
    if !dtype.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { write(dtype, dtype_to_c(dt)) };
    }
    if !shape.is_null() {
        for (i, &d) in dims.iter().enumerate() {
            // SAFETY: `i < dims.len() <= max_rank`, writable by the caller's contract.
            unsafe { write(shape.add(i), d as i64) };
        }
    }
    Ok(())
}

/// Frees a tensor handle (NULL is accepted). Its buffer returns to the pool once the
/// work queued on it is done.
///
/// # Safety
/// `t` is NULL or a tensor not yet freed; no other thread uses it during or after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_tensor_free(t: *mut npurt_tensor) {
    if t.is_null() {
        return;
    }
    guard_void("npurt_tensor_free", || {
        // SAFETY: `t` came from Box::into_raw (into_handle) and is freed once.
        drop(unsafe { Box::from_raw(t) });
    });
}
