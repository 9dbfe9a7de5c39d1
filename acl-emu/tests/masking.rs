//! aclnnAmax, aclnnEqScalar and aclnnInplaceMaskedFillScalar over the built libacl_emu.so,
//! driven through acl-sys's result layer as the backend will drive them: finding the
//! rows of attention scores that are all -inf (every key masked) and zeroing them, the
//! checks phase 1 makes, the protocol, and fault injection on each of the six symbols.

use acl_sys::codes::*;
use acl_sys::result::aclnn;
use acl_sys::*;
use npurt_test_support::emu::serial;
use std::ffi::c_void;
use std::ptr::null;

mod common;
use common::Dev;

const NEG: f32 = f32::NEG_INFINITY;

fn code(r: Result<impl Sized, AclError>) -> Option<i32> {
    r.err().and_then(|e| e.code())
}

#[test]
fn fully_masked_rows_are_found_and_zeroed() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("masking-rows", None) else { return };
    let api = &d.api;
    // Scores: a normal row, a fully masked row, a NaN row, a row ending in NaN.
    let scores = [1.0, NEG, 3.0, NEG, NEG, NEG, f32::NAN, 1.0, NEG, 1.0, 2.0, f32::NAN];
    d.put(0, &scores);
    let x = d.tensor(&[4, 3], ACL_FLOAT, 0);
    let rowmax = d.tensor(&[4, 1], ACL_FLOAT, 512);
    let mask = d.tensor(&[4, 1], ACL_BOOL, 1024);
    let probs = d.tensor(&[4, 3], ACL_FLOAT, 1536);
    let last = d.dims(&[-1]);
    let neg = d.scalar(NEG, ACL_FLOAT);
    let zero = d.scalar(0.0f32, ACL_FLOAT);
    // SAFETY: live descriptors over the allocation; each executor is launched once.
    unsafe {
        let p1 = aclnn::amax_get_workspace_size(api, x, last, true, rowmax).unwrap();
        assert!(p1.0 > 0, "aclnnAmax asks for a workspace, as the reductions do");
        d.launch(aclnn::amax, p1).unwrap();
        let p1 = aclnn::eq_scalar_get_workspace_size(api, rowmax, neg, mask).unwrap();
        d.launch(aclnn::eq_scalar, p1).unwrap();
    }
    let m: Vec<f32> = d.get(512, 4);
    assert_eq!(m[..2], [3.0, NEG]);
    assert!(m[2].is_nan() && m[3].is_nan(), "NaN propagates through aclnnAmax: {m:?}");
    assert_eq!(d.get::<u8>(1024, 4), [0, 1, 0, 0]);
    // Softmax of the scores: the fully masked row is NaN there, and must become 0.
    let nan = f32::NAN;
    d.put(1536, &[0.1f32, 0.2, 0.7, nan, nan, nan, nan, nan, nan, nan, nan, nan]);
    // SAFETY: as above.
    unsafe {
        let p1 = aclnn::inplace_masked_fill_scalar_get_workspace_size(api, probs, mask, zero).unwrap();
        d.launch(aclnn::inplace_masked_fill_scalar, p1).unwrap();
    }
    let p: Vec<f32> = d.get(1536, 12);
    assert_eq!(p[..6], [0.1, 0.2, 0.7, 0.0, 0.0, 0.0]);
    assert!(p[6..].iter().all(|v| v.is_nan()), "rows with NaN keep it: {p:?}");

    // Integers: exact, keepDim false, several dims; EqScalar into a float out.
    d.put(4096, &[1i64, 5, 7, -2]);
    let xi = d.tensor(&[2, 2], ACL_INT64, 4096);
    let oi = d.tensor(&[2], ACL_INT64, 4608);
    let all = d.tensor(&[], ACL_INT64, 5120);
    let eqf = d.tensor(&[2, 2], ACL_FLOAT16, 5632);
    let first = d.dims(&[0]);
    let none = d.dims(&[]);
    let seven = d.scalar(7i32, ACL_INT32);
    // SAFETY: as above.
    unsafe {
        d.launch(aclnn::amax, aclnn::amax_get_workspace_size(api, xi, first, false, oi).unwrap()).unwrap();
        d.launch(aclnn::amax, aclnn::amax_get_workspace_size(api, xi, none, false, all).unwrap()).unwrap();
        d.launch(aclnn::eq_scalar, aclnn::eq_scalar_get_workspace_size(api, xi, seven, eqf).unwrap()).unwrap();
    }
    assert_eq!(d.get::<i64>(4608, 2), [7, 5]);
    assert_eq!(d.get::<i64>(5120, 1), [7]);
    let h: Vec<u16> = d.get(5632, 4);
    assert_eq!(h, [0, 0, 0x3c00, 0], "1.0 in fp16 where the element is 7");

    for n in ["aclnnAmaxGetWorkspaceSize", "aclnnAmax", "aclnnEqScalar", "aclnnInplaceMaskedFillScalar"] {
        assert!(ctl.calls(n) > 0, "{n} is counted");
    }
    // SAFETY: the scalars and arrays are no longer used.
    unsafe {
        for sc in [neg, zero, seven] {
            aclnn::destroy_scalar(api, sc).unwrap();
        }
        for a in [last, first, none] {
            aclnn::destroy_int_array(api, a).unwrap();
        }
    }
    d.close();
    let c = ctl.counters();
    assert_eq!((c.executors, c.descriptors), (0, 0), "{c:?}");
}

#[test]
fn phase_one_checks_operands_as_ops_math_does() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("masking-checks", None) else { return };
    let (api, s) = (&d.api, d.stream);
    let x = d.tensor(&[4, 3], ACL_FLOAT, 0);
    let row = d.tensor(&[4, 1], ACL_FLOAT, 512);
    let row_h = d.tensor(&[4, 1], ACL_FLOAT16, 512);
    let flat = d.tensor(&[4], ACL_FLOAT, 512);
    let wide = d.tensor(&[4, 2], ACL_BOOL, 1024);
    let mask = d.tensor(&[4, 1], ACL_BOOL, 1024);
    let mask_u8 = d.tensor(&[4, 1], ACL_UINT8, 1024);
    let mask_big = d.tensor(&[2, 4, 3], ACL_BOOL, 1024);
    let x_u8 = d.tensor(&[4, 3], ACL_UINT8, 1536);
    let x_bf = d.tensor(&[4, 3], ACL_BF16, 1536);
    let row_bf = d.tensor(&[4, 1], ACL_BF16, 2048);
    let last = d.dims(&[-1]);
    let twice = d.dims(&[1, -1]);
    let beyond = d.dims(&[2]);
    let neg = d.scalar(NEG, ACL_FLOAT);
    let inv = ACLNN_ERR_PARAM_INVALID;
    // SAFETY: live descriptors (or NULL where a NULL is the point).
    unsafe {
        assert_eq!(code(aclnn::amax_get_workspace_size(api, x, last, true, row_h)), Some(inv), "out dtype");
        assert_eq!(code(aclnn::amax_get_workspace_size(api, x, beyond, true, row)), Some(inv), "dim range");
        assert_eq!(code(aclnn::amax_get_workspace_size(api, x, twice, true, row)), Some(inv), "repeated dim");
        assert_eq!(code(aclnn::amax_get_workspace_size(api, x, last, true, flat)), Some(inv), "keepDim shape");
        assert_eq!(code(aclnn::amax_get_workspace_size(api, x, null(), true, row)), Some(ACLNN_ERR_PARAM_NULLPTR));
        assert_eq!(code(aclnn::amax_get_workspace_size(api, x_bf, last, true, row_bf)), Some(inv), "no BF16 on 910A");
        assert_eq!(code(aclnn::eq_scalar_get_workspace_size(api, row, neg, wide)), Some(inv), "out shape");
        assert_eq!(code(aclnn::eq_scalar_get_workspace_size(api, row, null(), mask)), Some(ACLNN_ERR_PARAM_NULLPTR));
        let fill = |s, m| aclnn::inplace_masked_fill_scalar_get_workspace_size(api, s, m, neg);
        assert_eq!(code(fill(x, mask_u8)), Some(inv), "mask must be BOOL");
        assert_eq!(code(fill(x, wide)), Some(inv), "mask does not broadcast");
        assert_eq!(code(fill(x, mask_big)), Some(inv), "mask broadcasts beyond selfRef");
        assert_eq!(code(fill(x_u8, mask)), Some(inv), "no UINT8 selfRef");

        // The protocol, as for every operator.
        let (ws, ex) = aclnn::amax_get_workspace_size(api, x, last, true, row).unwrap();
        assert_eq!(code(aclnn::amax(api, d.at(32 << 10), ws - 1, ex, s)), Some(inv), "workspace too small");
        assert_eq!(code(aclnn::eq_scalar(api, d.at(32 << 10), ws, ex, s)), Some(inv), "another op's phase 2");
        d.launch(aclnn::amax, (ws, ex)).unwrap();
        assert_eq!(code(d.launch(aclnn::amax, (ws, ex))), Some(ACLNN_ERR_INNER_NULLPTR), "one-shot launched twice");
        let p1 = aclnn::eq_scalar_get_workspace_size(api, row, neg, mask).unwrap();
        assert_eq!(p1.0, 0);
        d.drop_executor(p1.1);
        aclnn::destroy_scalar(api, neg).unwrap();
        for a in [last, twice, beyond] {
            aclnn::destroy_int_array(api, a).unwrap();
        }
    }
    d.close();
    assert_eq!(ctl.counters().executors, 0);
}

#[test]
fn each_new_symbol_fails_when_told_and_names_itself() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("masking-faults", None) else { return };
    let api = &d.api;
    let x = d.tensor(&[2, 3], ACL_FLOAT, 0);
    let row = d.tensor(&[2, 1], ACL_FLOAT, 512);
    let mask = d.tensor(&[2, 1], ACL_BOOL, 1024);
    let last = d.dims(&[-1]);
    let neg = d.scalar(NEG, ACL_FLOAT);
    type Phase1<'a> = Box<dyn Fn() -> Result<(u64, *mut aclOpExecutor), AclError> + 'a>;
    type Phase2 = unsafe fn(&Api, *mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> Result<(), AclError>;
    let ops: [(&str, Phase1, Phase2); 3] = [
        (
            "aclnnAmax",
            // SAFETY: live descriptors.
            Box::new(|| unsafe { aclnn::amax_get_workspace_size(api, x, last, true, row) }),
            aclnn::amax,
        ),
        (
            "aclnnEqScalar",
            // SAFETY: live descriptors.
            Box::new(|| unsafe { aclnn::eq_scalar_get_workspace_size(api, row, neg, mask) }),
            aclnn::eq_scalar,
        ),
        (
            "aclnnInplaceMaskedFillScalar",
            // SAFETY: live descriptors.
            Box::new(|| unsafe { aclnn::inplace_masked_fill_scalar_get_workspace_size(api, x, mask, neg) }),
            aclnn::inplace_masked_fill_scalar,
        ),
    ];
    for (name, phase1, phase2) in &ops {
        let p1 = format!("{name}GetWorkspaceSize");
        assert_eq!(ctl.configure(&format!("fail={p1}:1:507899")), 0);
        let e = phase1().unwrap_err();
        assert_eq!((e.code(), e.call()), (Some(507899), Some(p1.as_str())), "{e}");
        assert_eq!(ctl.calls(&p1), 1);
        // The second call is not injected.
        let (ws, ex) = phase1().unwrap();
        d.drop_executor(ex);
        assert_eq!(ctl.configure(&format!("fail={name}:1:507899")), 0);
        let (ws2, ex) = phase1().unwrap();
        assert_eq!(ws, ws2);
        let e = d.launch(*phase2, (ws, ex)).unwrap_err();
        assert_eq!((e.code(), e.call()), (Some(507899), Some(*name)), "{e}");
        // The failed launch never reached the stream: the executor is still unconsumed.
        d.drop_executor(ex);
    }
    assert_eq!(ctl.configure("fail="), 0);
    drop(ops);
    // SAFETY: no longer used.
    unsafe {
        aclnn::destroy_scalar(api, neg).unwrap();
        aclnn::destroy_int_array(api, last).unwrap();
    }
    d.close();
    let c = ctl.counters();
    assert_eq!((c.executors, c.descriptors), (0, 0), "{c:?}");
}
