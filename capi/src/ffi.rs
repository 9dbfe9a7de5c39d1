//! Checked conversions of the raw arguments C passes: pointers, strings, arrays, shapes,
//! dtypes; and the writes into C buffers.

use crate::error::{CResult, Fail};
use std::ffi::{CStr, c_char};

/// Checks that an out-pointer is not NULL.
pub(crate) fn out_ptr<T>(p: *mut T, what: &str) -> CResult<()> {
    if p.is_null() { Err(Fail::arg(format!("{what} is NULL"))) } else { Ok(()) }
}

/// Writes `v` through an out-pointer already checked with [`out_ptr`].
///
/// # Safety
/// `p` is non-NULL, aligned and writable for one `T`.
pub(crate) unsafe fn write<T>(p: *mut T, v: T) {
    // SAFETY: guaranteed by the caller; `write` does not read or drop the old value.
    unsafe { p.write(v) }
}

/// A NUL-terminated UTF-8 string that must not be NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> CResult<&'a str> {
    // SAFETY: guaranteed by the caller.
    unsafe { opt_str_arg(p, what) }?.ok_or_else(|| Fail::arg(format!("{what} is NULL")))
}

/// A NUL-terminated UTF-8 string, or `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn opt_str_arg<'a>(p: *const c_char, what: &str) -> CResult<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's guarantee.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|e| Fail::arg(format!("{what} is not UTF-8: {e}")))
}

/// `n` elements at `p`; `p` may be NULL only when `n` is 0.
///
/// # Safety
/// `p` is NULL or points to `n` initialised, aligned `T`s valid for `'a`.
pub(crate) unsafe fn slice_arg<'a, T>(p: *const T, n: usize, what: &str) -> CResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::arg(format!("{what} is NULL but its count is {n}")));
    }
    if n > isize::MAX as usize / size_of::<T>().max(1) {
        return Err(Fail::arg(format!("{what}: count {n} is too large")));
    }
    // SAFETY: non-NULL, `n` elements valid for 'a by the caller's guarantee; the total
    // size fits isize (checked above).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The most dimensions a shape may have.
pub(crate) const MAX_RANK: usize = 64;

/// A shape from `rank` int64 dimensions, each at least 0.
///
/// # Safety
/// As [`slice_arg`].
pub(crate) unsafe fn shape_arg(p: *const i64, rank: usize) -> CResult<Vec<usize>> {
    if rank > MAX_RANK {
        return Err(Fail::arg(format!("rank {rank} exceeds the most supported ({MAX_RANK})")));
    }
    // SAFETY: guaranteed by the caller.
    let dims = unsafe { slice_arg(p, rank, "shape") }?;
    dims.iter()
        .enumerate()
        .map(|(i, &d)| {
            usize::try_from(d).map_err(|_| Fail::arg(format!("shape: dimension {i} is {d} (must be at least 0)")))
        })
        .collect()
}

/// Copies `text` with a terminating NUL into `buf` of `len` bytes, as the size queries do:
/// `*needed` (when not NULL) is set to `text.len() + 1` in every case; `buf == NULL` or
/// `len == 0` is a query (Ok, nothing written); a buffer too small is an error.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes; `needed` is NULL or writable.
pub(crate) unsafe fn write_text(text: &str, buf: *mut c_char, len: usize, needed: *mut usize) -> CResult {
    let need = text.len() + 1;
    if !needed.is_null() {
        // SAFETY: non-NULL and writable by the caller's guarantee.
        unsafe { write(needed, need) };
    }
    if buf.is_null() || len == 0 {
        return Ok(());
    }
    if len < need {
        return Err(Fail::arg(format!("buffer of {len} bytes is too small: {need} needed")));
    }
    // SAFETY: `buf` is writable for `len >= need` bytes; the source is a distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// Copies `text` into a fixed C array, truncated to fit with a terminating NUL.
pub(crate) fn fill_chars(dst: &mut [c_char], text: &str) {
    let n = text.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&text.as_bytes()[..n]) {
        *d = b as c_char;
    }
    for d in dst.iter_mut().skip(n) {
        *d = 0;
    }
}
