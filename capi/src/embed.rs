//! `npurt_embedder`: sentence embeddings from a sentence-transformers model directory.

use crate::error::{CResult, Fail, NPURT_ERR_INTERNAL, guard, npurt_status};
use crate::ffi::{out_ptr, slice_arg, str_arg, write};
use crate::handles::{Kind, Object, get, insert, release};
use crate::runtime::npurt_runtime;
use npurt::embed::Embedder;
use std::ffi::{CStr, c_char};
use std::sync::Mutex;

/// A sentence embedder: tokenizer, BERT encoder, pooling and normalisation of one model.
/// Opaque; made by `npurt_embedder_new`, freed by `npurt_embedder_free`. Calls on one
/// embedder from several threads take turns. Send and Sync (the embedder is behind a
/// `Mutex`).
pub struct npurt_embedder {
    e: Mutex<Embedder>,
}

impl Object for npurt_embedder {
    const KIND: Kind = Kind::Embedder;
}

/// Opens a sentence-transformers model directory (`config.json`, `model.safetensors`,
/// `tokenizer.json`, and the pooling / normalisation modules when present).
///
/// # Safety
/// `model_dir` NULL or NUL-terminated; `out` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_embedder_new(
    rt: *mut npurt_runtime,
    model_dir: *const c_char,
    out: *mut *mut npurt_embedder,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        // SAFETY: NUL-terminated or NULL (the caller's contract).
        let dir = unsafe { str_arg(model_dir, "model_dir") }?;
        out_ptr(out, "out")?;
        let e = Embedder::from_dir(rt, dir)?;
        let h = insert(npurt_embedder { e: Mutex::new(e) })?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, h) };
        Ok(())
    })
}

/// Embeds `n` texts (UTF-8, NUL-terminated) into `out`, row after row: `n * dim` floats,
/// each row L2-normalised (by the model's Normalize module, or here when the model has
/// none). `texts` is checked first (NULL only when `n` is 0, no entry NULL, each UTF-8);
/// then, as a size query, `*dim` (when `dim` is not NULL) is set to the embedding
/// dimension in exactly three cases: `out == NULL` or `out_len == 0` (nothing runs,
/// `NPURT_OK`), `out_len < n * dim` counted in floats (`NPURT_ERR_INVALID_ARGUMENT`), and
/// success. Any other failure leaves `*dim` and `out` untouched.
///
/// # Safety
/// `texts` holds `n` pointers to NUL-terminated strings
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
        let h = get(e, "embedder")?;
        // SAFETY: `texts` holds `n` pointers (the caller's contract).
        let strs = unsafe { text_list(texts, n) }?;
        let mut emb = h.e.lock().unwrap_or_else(|p| p.into_inner());
        let d = emb.dimension();
        let set_dim = || {
            if !dim.is_null() {
                // SAFETY: non-NULL and writable by the caller's contract.
                unsafe { write(dim, d) };
            }
        };
        if out.is_null() || out_len == 0 {
            set_dim();
            return Ok(());
        }
        let need = n.checked_mul(d).ok_or_else(|| Fail::arg(format!("{n} texts x {d} floats overflow")))?;
        if out_len < need {
            set_dim();
            return Err(Fail::arg(format!("out_len is {out_len} floats, {n} texts x {d} = {need} needed")));
        }
        let rows = if n == 0 { Vec::new() } else { emb.embed(&strs)? };
        let normalized = emb.normalizes();
        drop(emb);
        let mut flat = Vec::with_capacity(need);
        for r in &rows {
            if r.len() != d {
                return Err(Fail::new(NPURT_ERR_INTERNAL, format!("a row has {} floats, not {d}", r.len())));
            }
            let start = flat.len();
            flat.extend_from_slice(r);
            if !normalized {
                l2_normalize(&mut flat[start..]);
            }
        }
        // SAFETY: `out` is writable for `out_len >= need == flat.len()` floats.
        unsafe { std::ptr::copy_nonoverlapping(flat.as_ptr(), out, flat.len()) };
        set_dim();
        Ok(())
    })
}

/// The `n` texts behind `texts`, each checked (not NULL, UTF-8).
///
/// # Safety
/// `texts` is NULL (only when `n` is 0) or holds `n` pointers, each NULL or
/// NUL-terminated.
unsafe fn text_list<'a>(texts: *const *const c_char, n: usize) -> CResult<Vec<&'a str>> {
    // SAFETY: as the caller guarantees.
    let ptrs = unsafe { slice_arg(texts, n, "texts") }?;
    ptrs.iter()
        .enumerate()
        .map(|(i, &p)| {
            if p.is_null() {
                return Err(Fail::arg(format!("texts[{i}] is NULL")));
            }
            // SAFETY: non-NULL and NUL-terminated (the caller's contract).
            let s = unsafe { CStr::from_ptr(p) };
            s.to_str().map_err(|err| Fail::arg(format!("texts[{i}] is not UTF-8: {err}")))
        })
        .collect()
}

/// Scales `v` to unit L2 norm, as sentence-transformers' Normalize module does (a zero
/// row stays zero).
fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
}

/// Frees an embedder (NULL is accepted: `NPURT_OK`). A handle already freed, or not an
/// embedder, is `NPURT_ERR_INVALID_HANDLE`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_embedder_free(e: *mut npurt_embedder) -> npurt_status {
    guard(|| {
        drop(release(e, "embedder")?);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_scaled_to_unit_length() {
        let mut v = [3.0f32, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0f32; 3];
        l2_normalize(&mut z);
        assert_eq!(z, [0.0; 3]);
    }

    #[test]
    fn texts_are_checked_before_anything_runs() {
        let a = c"a";
        let ok = [a.as_ptr()];
        // SAFETY: one valid pointer.
        assert_eq!(unsafe { text_list(ok.as_ptr(), 1) }.unwrap(), ["a"]);
        // SAFETY: NULL with a count of 0 is allowed.
        assert!(unsafe { text_list(std::ptr::null(), 0) }.unwrap().is_empty());
        // SAFETY: NULL with a count is refused before anything is read.
        let e = unsafe { text_list(std::ptr::null(), 2) }.unwrap_err();
        assert!(e.msg.contains("texts is NULL"), "{}", e.msg);
        let with_null = [a.as_ptr(), std::ptr::null()];
        // SAFETY: two pointers, the second NULL (refused).
        let e = unsafe { text_list(with_null.as_ptr(), 2) }.unwrap_err();
        assert_eq!(e.msg, "texts[1] is NULL");
    }
}
