//! `npurt_tensor`: tensors from the pool, host copies in and out, what a tensor is.

use crate::error::{CResult, Fail, guard, npurt_status};
use crate::ffi::{out_ptr, shape_arg, slice_arg, write};
use crate::handles::{Kind, Object, get, get_opt, release};
use crate::runtime::{device_index, npurt_runtime};
use crate::types::{dtype_from_c, dtype_to_c, npurt_dtype};
use npurt::{DType, Tensor, bf16, f16};
use std::ffi::c_void;
use std::sync::Arc;

/// A tensor: a device buffer with a dtype and a shape. Opaque; made by
/// `npurt_tensor_new`, `npurt_tensor_from_host`, `npurt_execute` or `npurt_graph_run`,
/// freed by `npurt_tensor_free`. Send and Sync (a `Tensor`).
pub struct npurt_tensor {
    pub(crate) t: Tensor,
}

impl Object for npurt_tensor {
    const KIND: Kind = Kind::Tensor;
}

/// Hands a tensor to C.
pub(crate) fn into_handle(t: Tensor) -> CResult<*mut npurt_tensor> {
    crate::handles::insert(npurt_tensor { t })
}

/// Hands tensors to C, each with its output slot; all or none (on failure the handles
/// already made are released again).
pub(crate) fn into_handles(ts: Vec<(usize, Tensor)>) -> CResult<Vec<(usize, *mut npurt_tensor)>> {
    let mut made = Vec::with_capacity(ts.len());
    for (i, t) in ts {
        match into_handle(t) {
            Ok(h) => made.push((i, h)),
            Err(e) => {
                for (_, h) in made {
                    drop(release(h, "output"));
                }
                return Err(e);
            }
        }
    }
    Ok(made)
}

/// The tensors behind `n` handles, none NULL.
///
/// # Safety
/// `p` is NULL (only when `n` is 0) or points to `n` pointers.
pub(crate) unsafe fn tensor_list(
    p: *const *const npurt_tensor,
    n: usize,
    what: &str,
) -> CResult<Vec<Arc<npurt_tensor>>> {
    // SAFETY: as the caller guarantees.
    let ptrs = unsafe { slice_arg(p, n, what) }?;
    ptrs.iter().enumerate().map(|(i, &t)| get(t, &format!("{what}[{i}]"))).collect()
}

/// The tensors behind `n` output slots, each NULL (`None`) or a live tensor.
///
/// # Safety
/// `p` is NULL (only when `n` is 0) or points to `n` pointers.
pub(crate) unsafe fn output_slots(
    p: *mut *mut npurt_tensor,
    n: usize,
    what: &str,
) -> CResult<Vec<Option<Arc<npurt_tensor>>>> {
    // SAFETY: as the caller guarantees.
    let ptrs = unsafe { slice_arg(p.cast_const(), n, what) }?;
    ptrs.iter().enumerate().map(|(i, &t)| get_opt(t, &format!("{what}[{i}]"))).collect()
}

/// Makes an uninitialised tensor of `dtype` and `shape` (`rank` dimensions, each at least
/// 0) on `device`, from that device's pool.
///
/// # Safety
/// `shape` is NULL (only when `rank` is 0) or points to
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
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        out_ptr(out, "out")?;
        let dtype = dtype_from_c(dtype)?;
        // SAFETY: `shape` holds `rank` values (the caller's contract).
        let dims = unsafe { shape_arg(shape, rank) }?;
        let d = device_index(rt, device)?;
        let t = rt.empty(dtype, dims, d)?;
        let h = into_handle(t)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, h) };
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
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
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
        let h = into_handle(t)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, h) };
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
/// `dst` is NULL (only when `nbytes` is 0) or writable for
/// `nbytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_tensor_to_host(t: *const npurt_tensor, dst: *mut c_void, nbytes: usize) -> npurt_status {
    guard(|| {
        let t = get(t, "tensor")?;
        let t = &t.t;
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
/// Each out-pointer is NULL or writable (`shape` for
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
        let t = get(t, "tensor")?;
        let t = &t.t;
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

/// Frees a tensor handle (NULL is accepted: `NPURT_OK`). Its buffer returns to the pool
/// once the work queued on it, and the calls other threads are making with it, are done.
/// A handle already freed, or not a tensor, is `NPURT_ERR_INVALID_HANDLE`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_tensor_free(t: *mut npurt_tensor) -> npurt_status {
    guard(|| {
        drop(release(t, "tensor")?);
        Ok(())
    })
}
