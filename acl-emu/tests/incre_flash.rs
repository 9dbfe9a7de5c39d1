//! aclnnIncreFlashAttentionV4 over the built libacl_emu.so, paged form, driven through
//! acl-sys's result layer: what it computes (the lengths through the mask), a recorded
//! executor following a moved cache through aclSetDynamicInputTensorAddr (and refusing a
//! member it does not hold), the docs' checks, and no kernel on the 910 (561003).

use acl_sys::codes::*;
use acl_sys::result::aclnn;
use acl_sys::*;
use npurt_test_support::emu::serial;
use std::ptr::null;

mod common;
use common::{Dev, WS};

/// Byte offsets in the one allocation: q `[1, 1, 32]`, the caches `[2, 16, 16]` (a second
/// value cache too), the table `[1, 2]`, the mask `[1, 1, 1, 32]`, the output, the workspace.
const Q: usize = 0;
const KC: usize = 1024;
const VC: usize = 2048;
const VC2: usize = 5120;
const BT: usize = 3072;
const MASK: usize = 3584;
const OUT: usize = 4096;

/// The operands: keys 0 (every score 0, so the weights are uniform over the unmasked
/// positions), values of slot `16 + i` all `(i + 1) · k` (`k` 1 in the first value cache,
/// 10 in the second), the table `[1, 0]` and the mask hiding positions 3 and on.
fn fill(d: &Dev) {
    let h = |x: f32| half::f16::from_f32(x).to_bits();
    d.put(Q, &[h(0.5); 32]);
    d.put(KC, &[0u16; 512]);
    for (off, k) in [(VC, 1.0), (VC2, 10.0)] {
        let v: Vec<u16> =
            (0..512).map(|e| (e / 16) as f32).map(|s| if s >= 16.0 { h((s - 15.0) * k) } else { h(-7.0) }).collect();
        d.put(off, &v);
    }
    d.put(BT, &[1i32, 0]);
    let mask: Vec<u8> = (0..32).map(|p| u8::from(p >= 3)).collect();
    d.put(MASK, &mask);
}

/// Phase 1's result and the key and value lists (for the setter).
type Made = (Result<(u64, *mut aclOpExecutor), AclError>, [*mut aclTensorList; 2]);

/// Phase 1 with `block_size`.
fn phase1(d: &Dev, block_size: i64) -> Made {
    let q = d.tensor(&[1, 1, 32], ACL_FLOAT16, Q);
    let (kc, vc) = (d.tensor(&[2, 16, 16], ACL_FLOAT16, KC), d.tensor(&[2, 16, 16], ACL_FLOAT16, VC));
    let bt = d.tensor(&[1, 2], ACL_INT32, BT);
    let mask = d.tensor(&[1, 1, 1, 32], ACL_BOOL, MASK);
    let out = d.tensor(&[1, 1, 32], ACL_FLOAT16, OUT);
    let (kl, vl) = (d.list(&[kc]), d.list(&[vc]));
    // SAFETY: live descriptors and lists; the lengths are copied; NULL for the optional
    // inputs the form does not use; the layout is NUL-terminated.
    unsafe {
        let lens = aclnn::create_int_array(&d.api, [32i64].as_ptr(), 1).unwrap();
        let n = null();
        let p1 = aclnn::incre_flash_attention_v4_get_workspace_size(
            &d.api,
            q,
            kl,
            vl,
            n,
            mask,
            lens,
            n,
            n,
            n,
            n,
            n,
            n,
            n,
            bt,
            n,
            2,
            1.0,
            c"BSH".as_ptr().cast_mut(),
            1,
            block_size,
            0,
            out,
        );
        aclnn::destroy_int_array(&d.api, lens).unwrap();
        (p1, [kl, vl])
    }
}

#[test]
fn the_paged_form_attends_the_unmasked_positions_and_follows_a_moved_cache() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("ifa-b2", Some("Ascend910B2")) else { return };
    fill(&d);
    let (p1, lists) = phase1(&d, 16);
    let (ws, ex) = p1.unwrap();
    assert!(ws as usize <= (64 << 10) - WS);
    // SAFETY: a fresh executor, made repeatable before its first launch, destroyed once; the
    // workspace is device memory of `ws` bytes; the second value cache lies in the allocation.
    unsafe {
        aclnn::set_executor_repeatable(&d.api, ex).unwrap();
        aclnn::incre_flash_attention_v4(&d.api, d.at(WS), ws, ex, d.stream).unwrap();
        // Positions 0, 1, 2 of block 1, equally weighted: (1 + 2 + 3) / 3 for both heads.
        assert_eq!(d.get_f16(OUT, 32), vec![2.0; 32]);
        for (ir, rel) in [(0, 0), (2, 1), (1, 1)] {
            let e = aclnn::set_dynamic_input_tensor_addr(&d.api, ex, ir, rel, lists[1], d.at(VC2)).unwrap_err();
            assert_eq!(e.code(), Some(ACLNN_ERR_PARAM_INVALID), "irIndex {ir}, relativeIndex {rel}: {e}");
        }
        aclnn::set_dynamic_input_tensor_addr(&d.api, ex, 2, 0, lists[1], d.at(VC2)).unwrap();
        aclnn::incre_flash_attention_v4(&d.api, d.at(WS), ws, ex, d.stream).unwrap();
        assert_eq!(d.get_f16(OUT, 32), vec![20.0; 32], "the moved value cache");
        aclnn::destroy_executor(&d.api, ex).unwrap();
    }
    assert_eq!(ctl.calls("aclnnIncreFlashAttentionV4"), 2);
    d.close();
}

#[test]
fn the_docs_checks_hold_and_the_910_has_no_kernel() {
    let _one = serial();
    for (soc, block_size, code) in
        [("Ascend910B2", 8, ACLNN_ERR_PARAM_INVALID), ("Ascend910A", 16, ACLNN_ERR_INNER_FIND_KERNEL_ERROR)]
    {
        let Some((d, _ctl)) = Dev::open(&format!("ifa-{soc}-{block_size}"), Some(soc)) else { return };
        fill(&d);
        let (p1, _lists) = phase1(&d, block_size);
        let e = p1.map(|_| ()).unwrap_err();
        assert_eq!(e.code(), Some(code), "{soc}, blockSize {block_size}: {e}");
        d.close();
    }
}
