//! `npurt_embedder`: sentence embeddings from a sentence-transformers model directory.

use crate::error::{Fail, guard, guard_void, npurt_status};
use crate::ffi::{handle, out_ptr, slice_arg, str_arg, write};
use crate::runtime::npurt_runtime;
use npurt::embed::Embedder;
use std::ffi::{CStr, c_char};
use std::sync::Mutex;

/// A sentence embedder: tokenizer, BERT encoder, pooling and normalisation of one model.
/// Opaque; made by `npurt_embedder_new`, freed by `npurt_embedder_free`. Calls on one
/// embedder from several threads take turns.
pub struct npurt_embedder {
    e: Mutex<Embedder>,
}

/// Opens a sentence-transformers model directory (`config.json`, `model.safetensors`,
/// `tokenizer.json`, and the pooling / normalisation modules when present).
///
/// # Safety
/// `rt` is NULL or a live runtime; `model_dir` NULL or NUL-terminated; `out` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_embedder_new(
    rt: *mut npurt_runtime,
    model_dir: *const c_char,
    out: *mut *mut npurt_embedder,
) -> npurt_status {
    guard(|| {
        // SAFETY: `rt` is NULL or live (the caller's contract).
        let rt = &unsafe { handle(rt, "runtime") }?.rt;
        // SAFETY: NUL-terminated or NULL (the caller's contract).
        let dir = unsafe { str_arg(model_dir, "model_dir") }?;
        out_ptr(out, "out")?;
        let e = Embedder::from_dir(rt, dir)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, Box::into_raw(Box::new(npurt_embedder { e: Mutex::new(e) }))) };
        Ok(())
    })
}

/// Embeds `n` texts (UTF-8, NUL-terminated) into `out`, row after row: `n * dim` floats,
/// each row L2-normalised when the model normalises. A size query: `*dim` (when `dim`
/// is not NULL) is set to the embedding dimension in every case where the embedder is
/// valid; with `out == NULL` or `out_len == 0` nothing runs and `NPURT_OK` is returned;
/// with `out_len < n * dim` (counted in floats), `NPURT_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `e` is NULL or a live embedder; `texts` holds `n` pointers to NUL-terminated strings
/// (NULL only when `n` is 0); `out` NULL or writable for `out_len` floats; `dim` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_embed(
    e: *mut npurt_embedder,
    texts: *const *const c_char,
    n: usize,
    out: *mut f32,
    out_len: usize,
    dim: *mut usize,
) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let h = unsafe { handle(e, "embedder") }?;
        let mut emb = h.e.lock().unwrap_or_else(|p| p.into_inner());
        let d = emb.dimension();
        if !dim.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { write(dim, d) };
        }
        if out.is_null() || out_len == 0 {
            return Ok(());
        }
        let need = n.checked_mul(d).ok_or_else(|| Fail::arg(format!("{n} texts x {d} floats overflow")))?;
        if out_len < need {
            return Err(Fail::arg(format!("out_len is {out_len} floats, {n} texts x {d} = {need} needed")));
        }
        // SAFETY: `texts` holds `n` pointers (the caller's contract).
        let ptrs = unsafe { slice_arg(texts, n, "texts") }?;
        let mut strs = Vec::with_capacity(n);
        for (i, &p) in ptrs.iter().enumerate() {
            if p.is_null() {
                return Err(Fail::arg(format!("texts[{i}] is NULL")));
            }
            // SAFETY: non-NULL and NUL-terminated (the caller's contract).
            let s = unsafe { CStr::from_ptr(p) };
            strs.push(s.to_str().map_err(|err| Fail::arg(format!("texts[{i}] is not UTF-8: {err}")))?);
        }
        if n == 0 {
            return Ok(());
        }
        let rows = emb.embed(&strs)?;
        let mut flat = Vec::with_capacity(need);
        for r in &rows {
            if r.len() != d {
                return Err(Fail::new(
                    crate::error::NPURT_ERR_INTERNAL,
                    format!("a row has {} floats, not {d}", r.len()),
                ));
            }
            flat.extend_from_slice(r);
        }
        // SAFETY: `out` is writable for `out_len >= need == flat.len()` floats.
        unsafe { std::ptr::copy_nonoverlapping(flat.as_ptr(), out, flat.len()) };
        Ok(())
    })
}

/// Frees an embedder (NULL is accepted).
///
/// # Safety
/// `e` is NULL or an embedder not yet freed; no other thread uses it during or after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_embedder_free(e: *mut npurt_embedder) {
    if e.is_null() {
        return;
    }
    guard_void("npurt_embedder_free", || {
        // SAFETY: came from Box::into_raw in npurt_embedder_new; freed once.
        drop(unsafe { Box::from_raw(e) });
    });
}
