//! aclnnFlashAttentionScore over the built libacl_emu.so, driven through acl-sys's result
//! layer: what it computes (scaled scores plus pse, grouped key/value heads, a broadcast pse
//! view, the softmax statistics), the checks phase 1 makes (the 910 family has no kernel),
//! a repeatable executor's address setters with the prototype's indices, the modelled Cube
//! time, and fault injection on both symbols.

use acl_sys::codes::*;
use acl_sys::result::aclnn::{self, FlashAttentionAttrs};
use acl_sys::result::{self as r};
use acl_sys::*;
use npurt_test_support::emu::serial;
use std::ptr::{null, null_mut};

mod common;
use common::Dev;

const NEG: f32 = f32::NEG_INFINITY;

fn code(r: Result<impl Sized, AclError>) -> Option<i32> {
    r.err().and_then(|e| e.code())
}

fn attrs(scale: f64, heads: i64) -> FlashAttentionAttrs<'static> {
    FlashAttentionAttrs {
        scale_value: scale,
        keep_prob: 1.0,
        pre_tokens: i64::from(i32::MAX),
        next_tokens: i64::from(i32::MAX),
        head_num: heads,
        input_layout: c"BNSD",
        inner_precise: 0,
        sparse_mode: 0,
    }
}

/// The operands of one call: q, k, v, pse (or NULL), then softmaxMax, softmaxSum and the
/// attention output; the masks, prefix and softmaxOut are NULL.
#[derive(Clone, Copy)]
struct Fa {
    q: *mut aclTensor,
    k: *mut aclTensor,
    v: *mut aclTensor,
    pse: *mut aclTensor,
    max: *mut aclTensor,
    sum: *mut aclTensor,
    out: *mut aclTensor,
}

fn phase1(api: &Api, f: Fa, a: &FlashAttentionAttrs) -> Result<(u64, *mut aclOpExecutor), AclError> {
    let n = null();
    // SAFETY: live descriptors, NULL where the operator documents the parameter as optional
    // (or where a NULL is the point of the call).
    unsafe {
        aclnn::flash_attention_score_get_workspace_size(
            api,
            f.q,
            f.k,
            f.v,
            f.pse,
            n,
            n,
            n,
            null(),
            a,
            f.max,
            f.sum,
            n,
            f.out,
        )
    }
}

/// `softmax(scale * (pse + q·kᵀ)) · v` in f64 with the row maxima and sums; `pse(b, h, i, j)`.
#[allow(clippy::too_many_arguments)]
fn expected(
    (b, n1, n2, s, t, d, dv): (usize, usize, usize, usize, usize, usize, usize),
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pse: impl Fn(usize, usize, usize, usize) -> f64,
    scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut out, mut maxes, mut sums) = (Vec::new(), Vec::new(), Vec::new());
    for bi in 0..b {
        for h in 0..n1 {
            let g = bi * n2 + h / (n1 / n2);
            for i in 0..s {
                let qr = &q[((bi * n1 + h) * s + i) * d..][..d];
                let row: Vec<f64> = (0..t)
                    .map(|j| {
                        let kr = &k[(g * t + j) * d..][..d];
                        let dot: f64 = qr.iter().zip(kr).map(|(a, c)| f64::from(*a) * f64::from(*c)).sum();
                        scale * (pse(bi, h, i, j) + dot)
                    })
                    .collect();
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = row.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = p.iter().sum();
                for c in 0..dv {
                    out.push((0..t).map(|j| p[j] * f64::from(v[(g * t + j) * dv + c])).sum::<f64>() / sum);
                }
                maxes.push(m);
                sums.push(sum);
            }
        }
    }
    (out, maxes, sums)
}

fn close_to(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(*g);
        let ok = if w.is_nan() || w.is_infinite() {
            g.is_nan() == w.is_nan() && (w.is_nan() || g == *w)
        } else {
            (g - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}

fn vals(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 11) % 23) as f32 - 11.0) * 0.09).collect()
}

#[test]
fn computes_scaled_scores_plus_pse_with_grouped_heads() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("fa-compute", Some("Ascend910B2")) else { return };
    let (b, n1, n2, s, t, dh, dv) = (2usize, 2usize, 1usize, 3usize, 4usize, 2usize, 2usize);
    let i = |v: usize| v as i64;
    let (q, k, v) = (vals(b * n1 * s * dh, 1), vals(b * n2 * t * dh, 2), vals(b * n2 * t * dv, 3));
    // pse [B, N1, 1, T] read through a view with stride 0 over the heads: batch 0 masks one
    // key with -inf, batch 1 masks every key (its rows are 0 / 0 = NaN by the formula).
    let pse_rows = [0.0, -1.0, NEG, 0.5, NEG, NEG, NEG, NEG];
    d.put(0, &q);
    d.put(512, &k);
    d.put(1024, &v);
    d.put(1536, &pse_rows);
    let f = Fa {
        q: d.tensor(&[i(b), i(n1), i(s), i(dh)], ACL_FLOAT, 0),
        k: d.tensor(&[i(b), i(n2), i(t), i(dh)], ACL_FLOAT, 512),
        v: d.tensor(&[i(b), i(n2), i(t), i(dv)], ACL_FLOAT, 1024),
        pse: d.strided(&[i(b), i(n1), 1, i(t)], &[i(t), 0, i(t), 1], ACL_FLOAT, 1536),
        max: d.tensor(&[i(b), i(n1), i(s), 8], ACL_FLOAT, 2048),
        sum: d.tensor(&[i(b), i(n1), i(s), 8], ACL_FLOAT, 4096),
        out: d.tensor(&[i(b), i(n1), i(s), i(dv)], ACL_FLOAT, 6144),
    };
    r::emulator::reset_run_counters(&d.api).unwrap();
    let p1 = phase1(&d.api, f, &attrs(0.7, i(n1))).unwrap();
    assert!(p1.0 > 0, "the operator asks for a workspace");
    d.launch(aclnn::flash_attention_score, p1).unwrap();
    let pse = |bi: usize, _h: usize, _i: usize, j: usize| f64::from(pse_rows[bi * t + j]);
    let (out, maxes, sums) = expected((b, n1, n2, s, t, dh, dv), &q, &k, &v, pse, 0.7);
    close_to(&d.get::<f32>(6144, out.len()), &out, 1e-6, "attentionOut");
    let rep = |x: Vec<f64>| x.into_iter().flat_map(|m| [m; 8]).collect::<Vec<_>>();
    close_to(&d.get::<f32>(2048, maxes.len() * 8), &rep(maxes), 1e-6, "softmaxMax");
    close_to(&d.get::<f32>(4096, sums.len() * 8), &rep(sums), 1e-6, "softmaxSum");
    let half = b * n1 * s * dv / 2;
    assert!(d.get::<f32>(6144, 2 * half)[half..].iter().all(|x| x.is_nan()), "fully masked rows are 0/0");
    // Modelled as Cube work: 2·B·N·S·T·(D + Dv) + 5·B·N·S·T FLOPs, no Vector time.
    let c = r::emulator::get_run_counters(&d.api).unwrap();
    assert!(c.modelled_cube_ns > 0 && c.modelled_vector_ns == 0, "{c:?}");
    assert_eq!((c.phase1_calls, c.phase2_calls), (1, 1));
    d.close();
    let c = ctl.counters();
    assert_eq!((c.executors, c.descriptors), (0, 0), "{c:?}");
}

#[test]
fn a_repeatable_executor_moves_its_tensors_by_prototype_index() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("fa-repeat", Some("Ascend910B2")) else { return };
    let api = &d.api;
    let h = |v: &[f32]| v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect::<Vec<u16>>();
    let (q0, q1, k, v) = (vals(8, 1), vals(8, 4), vals(6, 2), vals(6, 3));
    let pse = [0.0f32, NEG, 0.25, -0.5, 0.0, 1.0];
    d.put(0, &h(&q0));
    d.put(256, &h(&q1));
    d.put(512, &h(&k));
    d.put(768, &h(&v));
    d.put(1024, &h(&pse));
    let f = Fa {
        q: d.tensor(&[1, 1, 4, 2], ACL_FLOAT16, 0),
        k: d.tensor(&[1, 1, 3, 2], ACL_FLOAT16, 512),
        v: d.tensor(&[1, 1, 3, 2], ACL_FLOAT16, 768),
        pse: d.strided(&[1, 1, 4, 3], &[0, 0, 0, 1], ACL_FLOAT16, 1024),
        max: d.tensor(&[1, 1, 4, 8], ACL_FLOAT, 2048),
        sum: d.tensor(&[1, 1, 4, 8], ACL_FLOAT, 2560),
        out: d.tensor(&[1, 1, 4, 2], ACL_FLOAT16, 3072),
    };
    let (ws, ex) = phase1(api, f, &attrs(0.5, 1)).unwrap();
    // SAFETY: a live executor right after phase 1; the descriptors are the ones given to
    // it at these prototype positions; the addresses are aligned device memory.
    unsafe {
        aclnn::set_executor_repeatable(api, ex).unwrap();
        d.launch(aclnn::flash_attention_score, (ws, ex)).unwrap();
        let first: Vec<u16> = d.get(3072, 8);
        // A new query (input 0) and output (output 3, after the reserved softmaxOutOut).
        aclnn::set_input_tensor_addr(api, ex, 0, f.q, d.at(256)).unwrap();
        aclnn::set_output_tensor_addr(api, ex, 3, f.out, d.at(3584)).unwrap();
        let inv = Some(ACLNN_ERR_PARAM_INVALID);
        assert_eq!(code(aclnn::set_output_tensor_addr(api, ex, 2, f.out, d.at(3584))), inv, "softmaxOut is never set");
        assert_eq!(code(aclnn::set_input_tensor_addr(api, ex, 4, f.pse, d.at(1024))), inv, "dropMask was NULL");
        assert_eq!(code(aclnn::set_input_tensor_addr(api, ex, 3, f.v, d.at(1024))), inv, "input 3 is the pse");
        aclnn::set_input_tensor_addr(api, ex, 3, f.pse, d.at(1024)).unwrap();
        d.launch(aclnn::flash_attention_score, (ws, ex)).unwrap();
        let pse_at = |_b: usize, _h: usize, _i: usize, j: usize| f64::from(pse[j]);
        let back = |v: Vec<f32>| h(&v).into_iter().map(|x| f64::from(half::f16::from_bits(x).to_f32())).collect();
        let shape = (1, 1, 1, 4, 3, 2, 2);
        let (q0h, q1h, kh, vh): (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) = (back(q0), back(q1), back(k), back(v));
        let f32s = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
        assert_eq!(d.get::<u16>(3072, 8), first, "the first output stays where it was");
        for (got, q) in [(first, &q0h), (d.get::<u16>(3584, 8), &q1h)] {
            let (want, _, _) = expected(shape, &f32s(q), &f32s(&kh), &f32s(&vh), pse_at, 0.5);
            let got: Vec<f32> = got.into_iter().map(|x| half::f16::from_bits(x).to_f32()).collect();
            close_to(&got, &want, 2e-3, "fp16 attentionOut");
        }
    }
    d.drop_repeatable(ex);
    d.close();
    let c = ctl.counters();
    assert_eq!((c.executors, c.descriptors), (0, 0), "{c:?}");
}

#[test]
fn phase_one_checks_as_the_op_api_and_docs_do() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("fa-checks", Some("Ascend910B2")) else { return };
    let api = &d.api;
    let t = |dims: &[i64], dt| d.tensor(dims, dt, 0);
    let ok = Fa {
        q: t(&[1, 2, 3, 4], ACL_FLOAT16),
        k: t(&[1, 2, 5, 4], ACL_FLOAT16),
        v: t(&[1, 2, 5, 4], ACL_FLOAT16),
        pse: null_mut(),
        max: t(&[1, 2, 3, 8], ACL_FLOAT),
        sum: t(&[1, 2, 3, 8], ACL_FLOAT),
        out: t(&[1, 2, 3, 4], ACL_FLOAT16),
    };
    let a = attrs(0.5, 2);
    let (inv, null_code) = (Some(ACLNN_ERR_PARAM_INVALID), Some(ACLNN_ERR_PARAM_NULLPTR));
    let with = |g: &dyn Fn(&mut Fa)| {
        let mut f = ok;
        g(&mut f);
        f
    };
    let p = |f: Fa, a: &FlashAttentionAttrs| code(phase1(api, f, a));
    assert_eq!(p(with(&|f| f.q = null_mut()), &a), null_code, "query");
    assert_eq!(p(with(&|f| f.max = null_mut()), &a), null_code, "softmaxMaxOut");
    assert_eq!(p(with(&|f| f.out = null_mut()), &a), null_code, "attentionOutOut");
    assert_eq!(p(with(&|f| f.k = t(&[1, 2, 5, 4], ACL_FLOAT)), &a), inv, "key dtype");
    assert_eq!(p(with(&|f| f.pse = t(&[1, 2, 3, 5], ACL_FLOAT)), &a), inv, "pse dtype");
    assert_eq!(p(ok, &FlashAttentionAttrs { head_num: 0, ..a }), inv, "headNum 0");
    assert_eq!(p(ok, &FlashAttentionAttrs { head_num: 1, ..a }), inv, "headNum is not N");
    assert_eq!(p(ok, &FlashAttentionAttrs { input_layout: c"BSND", ..a }), inv, "BSND is not emulated");
    assert_eq!(p(ok, &FlashAttentionAttrs { input_layout: c"BSH", ..a }), inv, "BSH with a 4-D query");
    let blind = FlashAttentionAttrs { input_layout: c"bnsd", ..a };
    d.drop_executor(phase1(api, ok, &blind).expect("the layout is case-blind").1);
    assert_eq!(p(with(&|f| f.k = t(&[1, 2, 5, 3], ACL_FLOAT16)), &a), inv, "D of q and k differ");
    assert_eq!(p(with(&|f| f.v = t(&[1, 2, 5, 6], ACL_FLOAT16)), &a), inv, "Dv above D");
    assert_eq!(p(with(&|f| f.v = t(&[1, 2, 4, 4], ACL_FLOAT16)), &a), inv, "k and v lengths");
    let q_i32 = with(&|f| {
        f.q = t(&[1, 2, 3, 4], ACL_INT32);
        f.k = f.q;
        f.v = f.q;
        f.out = f.q;
    });
    assert_eq!(p(q_i32, &a), inv, "INT32");
    assert_eq!(p(with(&|f| f.k = t(&[1, 3, 5, 4], ACL_FLOAT16)), &a), inv, "heads not a multiple of kv heads");
    assert_eq!(p(ok, &FlashAttentionAttrs { keep_prob: 0.0, ..a }), inv, "keepProb 0");
    assert_eq!(p(ok, &FlashAttentionAttrs { keep_prob: 0.9, ..a }), inv, "dropout");
    assert_eq!(p(ok, &FlashAttentionAttrs { sparse_mode: 7, ..a }), inv, "sparseMode");
    assert_eq!(p(ok, &FlashAttentionAttrs { inner_precise: 3, ..a }), inv, "innerPrecise");
    for (dims, what) in [
        (&[1, 2, 3][..], "3-D pse"),
        (&[2, 2, 3, 5], "pse batch"),
        (&[1, 1, 3, 5], "pse heads"),
        (&[1, 2, 2, 5], "pse rows"),
        (&[1, 2, 3, 4], "pse keys"),
    ] {
        assert_eq!(p(with(&|f| f.pse = t(dims, ACL_FLOAT16)), &a), inv, "{what}");
    }
    assert_eq!(p(with(&|f| f.max = t(&[1, 2, 3, 1], ACL_FLOAT)), &a), inv, "softmaxMax shape");
    assert_eq!(p(with(&|f| f.sum = t(&[1, 2, 3, 8], ACL_FLOAT16)), &a), inv, "softmaxSum dtype");
    assert_eq!(p(with(&|f| f.out = t(&[1, 2, 3, 4], ACL_FLOAT)), &a), inv, "out dtype");
    assert_eq!(p(with(&|f| f.out = t(&[1, 2, 3, 2], ACL_FLOAT16)), &a), inv, "out shape");
    let mask = t(&[3, 5], ACL_BOOL);
    // SAFETY: live descriptors.
    let masked = unsafe {
        let n = null();
        let o = ok;
        aclnn::flash_attention_score_get_workspace_size(
            api,
            o.q,
            o.k,
            o.v,
            n,
            n,
            n,
            mask,
            null(),
            &a,
            o.max,
            o.sum,
            n,
            o.out,
        )
    };
    assert_eq!(code(masked), inv, "the boolean attention mask is not emulated");
    // Accepted: every pse shape of the docs, grouped heads, bf16.
    for dims in [[1, 2, 3, 5], [1, 2, 1, 5]] {
        let (ws, ex) = phase1(api, with(&|f| f.pse = t(&dims, ACL_FLOAT16)), &a).unwrap();
        assert!(ws > 0);
        d.drop_executor(ex);
    }
    let gqa = with(&|f| {
        f.k = t(&[1, 1, 5, 4], ACL_FLOAT16);
        f.v = t(&[1, 1, 5, 2], ACL_FLOAT16);
        f.out = t(&[1, 2, 3, 2], ACL_FLOAT16);
    });
    d.drop_executor(phase1(api, gqa, &a).unwrap().1);
    // Every output empty: nothing to do, no workspace, whatever the rest says.
    let empty = Fa {
        q: t(&[1, 2, 0, 4], ACL_FLOAT16),
        max: t(&[1, 2, 0, 8], ACL_FLOAT),
        sum: t(&[1, 2, 0, 8], ACL_FLOAT),
        out: t(&[1, 2, 0, 4], ACL_FLOAT16),
        ..ok
    };
    let (ws, ex) = phase1(api, empty, &FlashAttentionAttrs { head_num: 5, ..a }).unwrap();
    assert_eq!(ws, 0);
    d.launch(aclnn::flash_attention_score, (ws, ex)).unwrap();
    d.close();
    assert_eq!(ctl.counters().executors, 0);
}

#[test]
fn the_910_family_has_no_kernel() {
    let _one = serial();
    // 561003 after the arguments were found valid; Atlas A2 parts have the kernel.
    for (soc, has) in [("Ascend910A", false), ("Ascend910B", false), ("Ascend910ProB", false), ("Ascend910B4", true)] {
        let Some((d, ctl)) = Dev::open("fa-socs", Some(soc)) else { return };
        let f = Fa {
            q: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 0),
            k: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 512),
            v: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 1024),
            pse: null_mut(),
            max: d.tensor(&[1, 1, 2, 8], ACL_FLOAT, 1536),
            sum: d.tensor(&[1, 1, 2, 8], ACL_FLOAT, 2048),
            out: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 2560),
        };
        let a = attrs(0.5, 1);
        let bad = FlashAttentionAttrs { head_num: 0, ..a };
        assert_eq!(code(phase1(&d.api, f, &bad)), Some(ACLNN_ERR_PARAM_INVALID), "{soc}: arguments first");
        match phase1(&d.api, f, &a) {
            Ok((_, ex)) if has => d.drop_executor(ex),
            r => assert_eq!(code(r), (!has).then_some(ACLNN_ERR_INNER_FIND_KERNEL_ERROR), "{soc}"),
        }
        d.close();
        assert_eq!(ctl.counters().executors, 0);
    }
}

#[test]
fn both_symbols_fail_when_told_and_name_themselves() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("fa-faults", Some("Ascend910B2")) else { return };
    let api = &d.api;
    let f = Fa {
        q: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 0),
        k: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 512),
        v: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 1024),
        pse: null_mut(),
        max: d.tensor(&[1, 1, 2, 8], ACL_FLOAT, 1536),
        sum: d.tensor(&[1, 1, 2, 8], ACL_FLOAT, 2048),
        out: d.tensor(&[1, 1, 2, 2], ACL_FLOAT16, 2560),
    };
    let a = attrs(0.5, 1);
    let p1 = "aclnnFlashAttentionScoreGetWorkspaceSize";
    assert_eq!(ctl.configure(&format!("fail={p1}:1:507899")), 0);
    let e = phase1(api, f, &a).unwrap_err();
    assert_eq!((e.code(), e.call()), (Some(507899), Some(p1)), "{e}");
    assert_eq!(ctl.calls(p1), 1);
    // The second call is not injected.
    let (ws, ex) = phase1(api, f, &a).unwrap();
    d.drop_executor(ex);
    assert_eq!(ctl.configure("fail=aclnnFlashAttentionScore:1:507899"), 0);
    let (ws2, ex) = phase1(api, f, &a).unwrap();
    assert_eq!(ws, ws2);
    let e = d.launch(aclnn::flash_attention_score, (ws, ex)).unwrap_err();
    assert_eq!((e.code(), e.call()), (Some(507899), Some("aclnnFlashAttentionScore")), "{e}");
    // The failed launch never reached the stream: the executor is still unconsumed.
    d.drop_executor(ex);
    assert_eq!(ctl.configure("fail="), 0);
    d.close();
    let c = ctl.counters();
    assert_eq!((c.executors, c.descriptors), (0, 0), "{c:?}");
}
