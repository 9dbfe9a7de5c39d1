//! Row scatters into a tensor in place: aclnnScatterNdUpdate (every SoC CANN's API
//! reference lists: the 910 family, Atlas A2/A3 and inference; FLOAT16, FLOAT32 and BOOL on
//! the 910, with BFLOAT16, INT64 and INT8 on A2/A3) and aclnnScatterPaKvCache (the paged KV
//! cache write of Atlas A2/A3; its docs list no support for the Atlas training SoCs, the
//! 910 family: phase 1 fails there with 561003, no kernel).
//!
//! aclnnScatterNdUpdate's phase 1 checks var 1-D to 8-D of a listed dtype, updates of
//! var's dtype and of shape `indices[..-1] ++ var[K..]`, indices INT32 or INT64 of at least
//! 2 dims with `K = indices[-1]` in `1..=rank(var)`. aclnnScatterPaKvCache's checks the
//! documented case 2 (cacheMode NULL or "Norm", scatterMode NULL or "None", no compression
//! inputs): key and value `[N, H, D]`, caches `[NB, BS, H, D]` of key's dtype (FLOAT16 or
//! BFLOAT16: the docs exclude FLOAT on A2/A3), slotMapping INT32 or INT64 `[N]`. Both run
//! on the stream with their indices checked before anything is written
//! ([`Kernel::ScatterNd`], [`Kernel::PaKvCache`]).

use crate::aclnn::basics::{desc, ex, finish, phase2};
use crate::descriptors::{Kernel, Src, TensorDesc};
use crate::error::{R, fail};
use crate::ffi::{guard, h};
use crate::state::Tables;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::{CStr, c_char};

phase2!(aclnnScatterNdUpdate, aclnnScatterPaKvCache);

fn tensor(t: &Tables, p: *const aclTensor, what: &str) -> R<(u64, TensorDesc)> {
    let k = h(p.cast());
    Ok((k, desc(t, k, what)?))
}

fn invalid<T>(op: &str, msg: String) -> R<T> {
    fail(ACLNN_ERR_PARAM_INVALID, format!("{op}: {msg}"))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnScatterNdUpdateGetWorkspaceSize(
    varRef: *mut aclTensor,
    indices: *const aclTensor,
    updates: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    const OP: &str = "aclnnScatterNdUpdate";
    guard("aclnnScatterNdUpdateGetWorkspaceSize", |t| {
        let (hv, vd) = tensor(t, varRef, "varRef")?;
        let (hi, id) = tensor(t, indices, "indices")?;
        let (hu, ud) = tensor(t, updates, "updates")?;
        let listed: &[aclDataType] = if t.cfg.is_910() {
            &[ACL_FLOAT16, ACL_FLOAT, ACL_BOOL]
        } else {
            &[ACL_FLOAT16, ACL_FLOAT, ACL_BOOL, ACL_BF16, ACL_INT64]
        };
        if !listed.contains(&vd.dtype) || ud.dtype != vd.dtype {
            return invalid(OP, format!("varRef {} and updates {} must be one listed dtype", vd.dtype.0, ud.dtype.0));
        }
        if ![ACL_INT32, ACL_INT64].contains(&id.dtype) {
            return invalid(OP, format!("indices data type {} is not INT32 or INT64", id.dtype.0));
        }
        if !(1..=8).contains(&vd.dims.len()) || id.dims.len() < 2 {
            return invalid(
                OP,
                format!("varRef must be 1-D to 8-D ({:?}), indices at least 2-D ({:?})", vd.dims, id.dims),
            );
        }
        let inputs = vec![Src::Tensor(hv, vd.clone()), Src::Tensor(hi, id), Src::Tensor(hu, ud)];
        let e = ex(OP, Kernel::ScatterNd, inputs, vec![(hv, vd)], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// `p` is NULL or equal to one of `allowed`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn mode_is(p: *const c_char, allowed: &[&str]) -> bool {
    if p.is_null() {
        return true;
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().is_ok_and(|s| allowed.contains(&s))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnScatterPaKvCacheGetWorkspaceSize(
    key: *const aclTensor,
    keyCacheRef: *mut aclTensor,
    slotMapping: *const aclTensor,
    value: *const aclTensor,
    valueCacheRef: *mut aclTensor,
    compressLensOptional: *const aclTensor,
    compressSeqOffsetOptional: *const aclTensor,
    seqLensOptional: *const aclTensor,
    cacheModeOptional: *mut c_char,
    scatterModeOptional: *mut c_char,
    _stridesOptional: *const aclIntArray,
    _offsetsOptional: *const aclIntArray,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    const OP: &str = "aclnnScatterPaKvCache";
    guard("aclnnScatterPaKvCacheGetWorkspaceSize", |t| {
        let (hk, kd) = tensor(t, key, "key")?;
        let (hkc, kcd) = tensor(t, keyCacheRef, "keyCacheRef")?;
        let (hs, sd) = tensor(t, slotMapping, "slotMapping")?;
        let (hv, vd) = tensor(t, value, "value")?;
        let (hvc, vcd) = tensor(t, valueCacheRef, "valueCacheRef")?;
        // SAFETY: C contract: the modes are NULL or NUL-terminated strings.
        let norm = unsafe { mode_is(cacheModeOptional, &["Norm"]) && mode_is(scatterModeOptional, &["None"]) };
        let compressed =
            !compressLensOptional.is_null() || !compressSeqOffsetOptional.is_null() || !seqLensOptional.is_null();
        if !norm || compressed {
            return invalid(OP, "only cacheMode \"Norm\", scatterMode \"None\" and no compression are emulated".into());
        }
        if ![ACL_FLOAT16, ACL_BF16].contains(&kd.dtype) || [&kcd, &vd, &vcd].iter().any(|d| d.dtype != kd.dtype) {
            return invalid(
                OP,
                format!("key, value and the caches must be one of FLOAT16, BFLOAT16 (key {})", kd.dtype.0),
            );
        }
        if ![ACL_INT32, ACL_INT64].contains(&sd.dtype) {
            return invalid(OP, format!("slotMapping data type {} is not INT32 or INT64", sd.dtype.0));
        }
        let (k, kc, v, vc) = (&kd.dims, &kcd.dims, &vd.dims, &vcd.dims);
        let fits = k.len() == 3
            && v.len() == 3
            && kc.len() == 4
            && vc.len() == 4
            && k[..2] == v[..2]
            && kc[..3] == vc[..3]
            && kc[2] == k[1]
            && kc[3] == k[2]
            && vc[3] == v[2]
            && sd.dims.as_slice() == [k[0]];
        if !fits {
            return invalid(
                OP,
                format!("key {k:?}, value {v:?}, caches {kc:?} / {vc:?}, slots {:?}: not case 2 (Norm)", sd.dims),
            );
        }
        if !t.cfg.is_a2_or_a3() {
            return fail(
                ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                format!("{OP} has no kernel for {} (not the Atlas training SoCs)", t.cfg.soc),
            );
        }
        let inputs = vec![
            Src::Tensor(hk, kd),
            Src::Tensor(hkc, kcd.clone()),
            Src::Tensor(hs, sd),
            Src::Tensor(hv, vd),
            Src::Tensor(hvc, vcd.clone()),
        ];
        let e = ex(OP, Kernel::PaKvCache, inputs, vec![(hkc, kcd), (hvc, vcd)], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
