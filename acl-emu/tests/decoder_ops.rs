//! aclnnTriu and aclnnRotaryPositionEmbedding over the built libacl_emu.so, driven
//! through acl-sys's result layer: what they compute, the checks phase 1 makes, the fused
//! rotary operator refused on the 910 (no kernel, 561003) as CANN refuses it, and both
//! counted per call.

use acl_sys::codes::*;
use acl_sys::result::{self as r, aclnn};
use acl_sys::*;
use npurt_test_support::emu::serial;

mod common;
use common::Dev;

#[test]
fn triu_keeps_the_upper_triangle_of_a_broadcast_one() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("dec-triu", Some("Ascend910A")) else { return };
    d.put(0, &[1u8]);
    // A 1 broadcast to [3, 4] through zero strides; diagonal 2 (T - S + 1 for S 3, T 4).
    let one = d.strided(&[3, 4], &[0, 0], ACL_BOOL, 0);
    let out = d.tensor(&[3, 4], ACL_BOOL, 512);
    let bad = d.tensor(&[3, 4], ACL_FLOAT, 1024);
    // SAFETY: live descriptors over the allocation; the executor is launched once.
    unsafe {
        d.launch(aclnn::triu, aclnn::triu_get_workspace_size(&d.api, one, 2, out).unwrap()).unwrap();
        let e = aclnn::triu_get_workspace_size(&d.api, one, 0, bad).unwrap_err();
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
    }
    assert_eq!(d.get::<u8>(512, 12), [0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(ctl.calls("aclnnTriu"), 1);
    d.close();
}

/// `[x1, x2]` of one token, D = 4, with cos 0.5 and sin 0.25 everywhere.
fn rotary(soc: &str, tag: &str) -> Option<(Result<Vec<f32>, i32>, u64)> {
    let _one = serial();
    let (d, ctl) = Dev::open(tag, Some(soc))?;
    d.put(0, &[1.0f32, 2.0, 3.0, 4.0]);
    d.put(512, &[0.5f32; 4]);
    d.put(1024, &[0.25f32; 4]);
    let x = d.tensor(&[1, 1, 1, 4], ACL_FLOAT, 0);
    let (c, s) = (d.tensor(&[1, 1, 1, 4], ACL_FLOAT, 512), d.tensor(&[1, 1, 1, 4], ACL_FLOAT, 1024));
    let out = d.tensor(&[1, 1, 1, 4], ACL_FLOAT, 1536);
    let half = d.tensor(&[1, 1, 1, 4], ACL_FLOAT16, 2048);
    // SAFETY: live descriptors over the allocation; the executor is launched once.
    let r = unsafe {
        // A cos of another dtype than x is invalid on every SoC.
        let e = aclnn::rotary_position_embedding_get_workspace_size(&d.api, x, half, s, 0, out).unwrap_err();
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
        match aclnn::rotary_position_embedding_get_workspace_size(&d.api, x, c, s, 0, out) {
            Ok(p1) => {
                d.launch(aclnn::rotary_position_embedding, p1).unwrap();
                Ok(d.get::<f32>(1536, 4))
            }
            Err(e) => Err(e.code().unwrap_or(0)),
        }
    };
    let n = ctl.calls("aclnnRotaryPositionEmbeddingGetWorkspaceSize");
    d.close();
    Some((r, n))
}

#[test]
fn rotary_position_embedding_rotates_half_on_atlas_a2() {
    let Some((r, n)) = rotary("Ascend910B2", "dec-rope-b2") else { return };
    // y = x·cos + [-x2, x1]·sin: [0.5 - 0.75, 1 - 1, 1.5 + 0.25, 2 + 0.5].
    assert_eq!(r, Ok(vec![-0.25, 0.0, 1.75, 2.5]));
    assert_eq!(n, 2, "both phase-1 calls are counted");
}

#[test]
fn rotary_position_embedding_has_no_kernel_on_the_910() {
    let Some((r, _)) = rotary("Ascend910A", "dec-rope-910a") else { return };
    assert_eq!(r, Err(ACLNN_ERR_INNER_FIND_KERNEL_ERROR));
}

/// aclnnScatterNdUpdate on the 910A: rows of a `[4, 2]` var replaced by index (`[2, 1]`
/// indices), in place; an index past var fails the launch (the stream's AI Core exception)
/// with nothing written.
#[test]
fn scatter_nd_update_writes_rows_by_index_on_the_910() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("dec-scatter-nd", Some("Ascend910A")) else { return };
    d.put(0, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    d.put(512, &[3i32, 1]);
    d.put(1024, &[10.0f32, 11.0, 12.0, 13.0]);
    let var = d.tensor(&[4, 2], ACL_FLOAT, 0);
    let idx = d.tensor(&[2, 1], ACL_INT32, 512);
    let upd = d.tensor(&[2, 2], ACL_FLOAT, 1024);
    let short = d.tensor(&[1, 2], ACL_FLOAT, 1024);
    // SAFETY: live descriptors over the allocation; each executor is launched once.
    unsafe {
        // updates must be indices[..-1] ++ var[K..].
        let e = aclnn::scatter_nd_update_get_workspace_size(&d.api, var, idx, short).unwrap_err();
        assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "{e}");
        d.launch(aclnn::scatter_nd_update, aclnn::scatter_nd_update_get_workspace_size(&d.api, var, idx, upd).unwrap())
            .unwrap();
    }
    assert_eq!(d.get::<f32>(0, 8), [0.0, 1.0, 12.0, 13.0, 4.0, 5.0, 10.0, 11.0]);
    assert_eq!(ctl.calls("aclnnScatterNdUpdate"), 1);
    d.put(512, &[4i32, 0]);
    // SAFETY: as above.
    let e = unsafe {
        d.launch(aclnn::scatter_nd_update, aclnn::scatter_nd_update_get_workspace_size(&d.api, var, idx, upd).unwrap())
            .unwrap();
        r::synchronize_stream(&d.api, d.stream).unwrap_err()
    };
    assert_eq!(e.code(), Some(ACL_ERROR_RT_AICORE_EXCEPTION), "{e}");
    // The error was reported: the stream runs on, and var kept its rows.
    assert_eq!(d.get::<f32>(0, 8), [0.0, 1.0, 12.0, 13.0, 4.0, 5.0, 10.0, 11.0]);
    d.close();
}

/// The bits of `x` in fp16.
fn h(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The key and value caches' fp16 bits.
type Caches = (Vec<u16>, Vec<u16>);

/// aclnnScatterPaKvCache (cacheMode "Norm") with fp16 caches `[2, 2, 1, 2]` and two tokens:
/// `Ok(key cache, value cache)` after the launch, or the phase-1 code.
fn pa_kv_cache(soc: &str, tag: &str, dt: aclDataType) -> Option<Result<Caches, i32>> {
    let _one = serial();
    let (d, _ctl) = Dev::open(tag, Some(soc))?;
    d.put(0, &[0u16; 8]);
    d.put(512, &[0u16; 8]);
    d.put(1024, &[h(1.0), h(2.0), h(3.0), h(4.0)]);
    d.put(1536, &[h(5.0), h(6.0), h(7.0), h(8.0)]);
    d.put(2048, &[3i64, 0]);
    let (kc, vc) = (d.tensor(&[2, 2, 1, 2], dt, 0), d.tensor(&[2, 2, 1, 2], dt, 512));
    let (k, v) = (d.tensor(&[2, 1, 2], dt, 1024), d.tensor(&[2, 1, 2], dt, 1536));
    let slots = d.tensor(&[2], ACL_INT64, 2048);
    let (n, np, na) = (std::ptr::null(), std::ptr::null_mut(), std::ptr::null());
    // SAFETY: live descriptors over the allocation; NULL for the optional inputs and modes
    // but the cache mode, a NUL-terminated string; the executor is launched once.
    let r = unsafe {
        let p1 = aclnn::scatter_pa_kv_cache_get_workspace_size(
            &d.api,
            k,
            kc,
            slots,
            v,
            vc,
            n,
            n,
            n,
            c"Norm".as_ptr().cast_mut(),
            np,
            na,
            na,
        );
        match p1 {
            Ok(p1) => {
                d.launch(aclnn::scatter_pa_kv_cache, p1).unwrap();
                Ok((d.get::<u16>(0, 8), d.get::<u16>(512, 8)))
            }
            Err(e) => Err(e.code().unwrap_or(0)),
        }
    };
    d.close();
    Some(r)
}

#[test]
fn scatter_pa_kv_cache_writes_both_caches_by_slot_on_atlas_a2() {
    let Some(r) = pa_kv_cache("Ascend910B2", "dec-pa-kv-b2", ACL_FLOAT16) else { return };
    let (k, v) = r.unwrap();
    // Token 0 to slot 3 (block 1, offset 1), token 1 to slot 0.
    assert_eq!(k, [h(3.0), h(4.0), 0, 0, 0, 0, h(1.0), h(2.0)]);
    assert_eq!(v, [h(7.0), h(8.0), 0, 0, 0, 0, h(5.0), h(6.0)]);
}

#[test]
fn scatter_pa_kv_cache_refuses_float_and_the_910() {
    let Some(r) = pa_kv_cache("Ascend910B2", "dec-pa-kv-f32", ACL_FLOAT) else { return };
    assert_eq!(r, Err(ACLNN_ERR_PARAM_INVALID), "FLOAT caches are not listed on A2/A3");
    let Some(r) = pa_kv_cache("Ascend910A", "dec-pa-kv-910a", ACL_FLOAT16) else { return };
    assert_eq!(r, Err(ACLNN_ERR_INNER_FIND_KERNEL_ERROR), "no kernel on the 910");
}
