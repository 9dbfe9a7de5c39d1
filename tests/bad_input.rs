//! Bad input for every op gets a typed error naming the op, never a panic.

mod common;

use npurt::{DType, Error, GeluApprox, Op, OpKind, RuntimeConfig, Tensor};
use runtime::Runtime;

fn t(rt: &Runtime, d: DType, s: &[usize]) -> Tensor {
    rt.zeros(d, s.to_vec(), 0).expect("alloc")
}

/// One invalid call per op: the op and the (wrong) input signatures.
fn invalid_calls() -> Vec<InvalidCall> {
    use DType::*;
    let mm = Op::MatMul { trans_a: false, trans_b: false };
    vec![
        (mm.clone(), vec![(F32, vec![1024, 1024]), (F32, vec![512, 512])]),
        (mm.clone(), vec![(F32, vec![4])]),
        (mm.clone(), vec![(F32, vec![2, 3]), (F16, vec![3, 2])]),
        (mm, vec![(I64, vec![2, 3]), (I64, vec![3, 2])]),
        (Op::MatMul { trans_a: false, trans_b: false }, vec![(F32, vec![2, 2, 3]), (F32, vec![3, 3, 4])]),
        (
            Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0 },
            vec![(F32, vec![2, 3]), (F32, vec![3, 4]), (F32, vec![3])],
        ),
        (Op::Linear, vec![(F32, vec![2, 3]), (F32, vec![4, 5])]),
        (Op::Linear, vec![(F32, vec![2, 3]), (F32, vec![4, 3]), (F32, vec![3])]),
        (Op::LinearGelu, vec![(F32, vec![2, 3]), (F32, vec![4, 3])]),
        (Op::LinearGelu, vec![(F32, vec![2, 3]), (F32, vec![4, 3]), (F32, vec![3])]),
        (Op::Add, vec![(F32, vec![2, 3]), (F32, vec![4])]),
        (Op::Sub, vec![(F32, vec![2]), (I32, vec![2])]),
        (Op::Mul, vec![(U8, vec![2]), (I32, vec![2])]),
        (Op::Div, vec![(F32, vec![3])]),
        (Op::Relu, vec![(I32, vec![3])]),
        (Op::Gelu(GeluApprox::Erf), vec![(I64, vec![3])]),
        (Op::Tanh, vec![(F32, vec![3]), (F32, vec![3])]),
        (Op::Erf, vec![(U8, vec![3])]),
        (Op::Exp, vec![]),
        (Op::Sqrt, vec![(I32, vec![1])]),
        (Op::Neg, vec![(I64, vec![2])]),
        (Op::Pow, vec![(I32, vec![2]), (I32, vec![2])]),
        (Op::Equal, vec![(F32, vec![2]), (I32, vec![2])]),
        (Op::Equal, vec![(U8, vec![2, 3]), (U8, vec![4])]),
        (Op::Pow, vec![(F32, vec![2]), (F16, vec![2])]),
        (Op::Where, vec![(F32, vec![2]), (F32, vec![2]), (F32, vec![2])]),
        (Op::Where, vec![(U8, vec![2]), (F32, vec![2]), (I64, vec![2])]),
        (Op::Where, vec![(U8, vec![3]), (F32, vec![2, 3]), (F32, vec![4, 1])]),
        (Op::Where, vec![(U8, vec![2]), (F32, vec![2])]),
        (Op::Concat { axis: 2 }, vec![(F32, vec![2, 3])]),
        (Op::Concat { axis: 0 }, vec![(F32, vec![2, 3]), (F32, vec![2, 4])]),
        (Op::Concat { axis: -1 }, vec![(F32, vec![2, 3]), (I32, vec![2, 3])]),
        (Op::Concat { axis: 0 }, vec![(F32, vec![2, 3]), (F32, vec![3])]),
        (Op::Concat { axis: 0 }, vec![(F32, vec![])]),
        (Op::Concat { axis: 0 }, vec![]),
        (Op::Concat { axis: 0 }, vec![(F32, vec![1]); 65]),
        (Op::Slice { starts: vec![0], ends: vec![2], axes: vec![0], steps: vec![0] }, vec![(F32, vec![4])]),
        (Op::Slice { starts: vec![0, 1], ends: vec![2], axes: vec![], steps: vec![] }, vec![(F32, vec![4, 4])]),
        (Op::Slice { starts: vec![0], ends: vec![2], axes: vec![2], steps: vec![] }, vec![(F32, vec![4, 4])]),
        (Op::Slice { starts: vec![0, 0], ends: vec![2, 2], axes: vec![1, -1], steps: vec![] }, vec![(F32, vec![4, 4])]),
        (Op::Slice { starts: vec![0], ends: vec![1], axes: vec![], steps: vec![] }, vec![(F32, vec![])]),
        (Op::Expand { shape: vec![4] }, vec![(F32, vec![2, 3])]),
        (Op::Expand { shape: vec![2, 3] }, vec![(F32, vec![3, 2])]),
        (Op::Sigmoid, vec![(U8, vec![2])]),
        (Op::Softmax { axis: 2 }, vec![(F32, vec![3, 4])]),
        (Op::LayerNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![3]), (F32, vec![4])]),
        (Op::LayerNorm { eps: -1.0 }, vec![(F32, vec![2, 4]), (F32, vec![4]), (F32, vec![4])]),
        (Op::RmsNorm { eps: 1e-5 }, vec![(I32, vec![2, 4])]),
        (Op::RmsNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![2])]),
        (Op::RmsNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F16, vec![4])]),
        (Op::RmsNorm { eps: f32::NAN }, vec![(F32, vec![2, 4])]),
        (Op::RmsNorm { eps: 1e-5 }, vec![(F32, vec![])]),
        (Op::AddRmsNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![1, 4]), (F32, vec![4])]),
        (Op::AddRmsNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![2, 4])]),
        (Op::AddRmsNorm { eps: 1e-5 }, vec![(BF16, vec![2, 4]), (BF16, vec![2, 4]), (BF16, vec![3])]),
        (Op::Silu, vec![(I64, vec![2])]),
        (Op::SwiGlu, vec![(F32, vec![2, 5])]),
        (Op::SwiGlu, vec![(F32, vec![])]),
        (Op::SwiGlu, vec![(F32, vec![2, 4]), (F32, vec![2, 2])]),
        (Op::SwiGlu, vec![(F32, vec![2, 4]), (F16, vec![2, 4])]),
        (Op::SwiGlu, vec![(U8, vec![2, 4])]),
        (Op::Permute { perm: vec![0, 0] }, vec![(F32, vec![2, 3])]),
        (Op::Reshape { shape: vec![5, -1] }, vec![(F32, vec![2, 3])]),
        (Op::Reshape { shape: vec![-1, -1] }, vec![(F32, vec![2, 3])]),
        (Op::Gather { axis: 0 }, vec![(F32, vec![4, 2]), (F32, vec![3])]),
        (Op::Gather { axis: 2 }, vec![(F32, vec![4, 2]), (I64, vec![3])]),
        (Op::Cast { to: F16 }, vec![]),
        (Op::ReduceSum { axes: vec![3], keepdims: false }, vec![(F32, vec![2, 3])]),
        (Op::ReduceMean { axes: vec![0, 0], keepdims: false }, vec![(F32, vec![2, 3])]),
        (Op::Scale { factor: f32::NAN }, vec![(F32, vec![2])]),
        (Op::Copy, vec![(F32, vec![2]), (F32, vec![2])]),
        (
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false },
            vec![(F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 3, 5]), (F32, vec![1, 2, 3, 4])],
        ),
        (
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false },
            vec![(F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 3, 4]), (I64, vec![1, 1, 1, 3])],
        ),
        (
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false },
            vec![(F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 5, 4]), (F32, vec![1, 2, 5, 4]), (U8, vec![1, 1, 1, 4])],
        ),
        (
            // Grouped-query: k's 3 heads do not divide q's 4.
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: true },
            vec![(F32, vec![1, 4, 3, 4]), (F32, vec![1, 3, 3, 4]), (F32, vec![1, 3, 3, 4])],
        ),
        (
            // An odd head dim.
            Op::Rope { interleaved: false, layout: npurt::AttentionLayout::Bnsd },
            vec![(F32, vec![1, 2, 3, 5]), (F32, vec![4, 2]), (F32, vec![4, 2]), (I64, vec![1, 3])],
        ),
        (
            // Float positions.
            Op::Rope { interleaved: true, layout: npurt::AttentionLayout::Bsnd },
            vec![(F32, vec![1, 3, 2, 4]), (F32, vec![4, 2]), (F32, vec![4, 2]), (F32, vec![1, 3])],
        ),
        (Op::BiasGelu(GeluApprox::Tanh), vec![(F32, vec![2, 4]), (F32, vec![2])]),
        (Op::AddLayerNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![2, 3]), (F32, vec![4]), (F32, vec![4])]),
    ]
}

/// An op and the (wrong) input signatures of one invalid call.
type InvalidCall = (Op, Vec<(DType, Vec<usize>)>);

/// Invalid calls of the paged KV cache's ops.
fn paged_invalid_calls() -> Vec<InvalidCall> {
    use DType::*;
    vec![
        (
            Op::KvCacheWrite,
            vec![
                (F32, vec![4, 2, 1, 8]),
                (F32, vec![4, 2, 1, 8]),
                (F32, vec![3, 2, 8]),
                (F32, vec![3, 2, 8]),
                (I32, vec![3]),
            ],
        ),
        (
            Op::KvCacheWrite,
            vec![
                (F32, vec![4, 2, 1, 8]),
                (F32, vec![4, 2, 1, 8]),
                (F32, vec![3, 1, 8]),
                (F32, vec![3, 1, 8]),
                (F32, vec![3]),
            ],
        ),
        (
            Op::KvCacheWrite,
            vec![
                (I32, vec![4, 2, 1, 8]),
                (I32, vec![4, 2, 1, 8]),
                (I32, vec![3, 1, 8]),
                (I32, vec![3, 1, 8]),
                (I32, vec![3]),
            ],
        ),
        (
            Op::PagedAttention { scale: None },
            vec![
                (F32, vec![2, 3, 8]),
                (F32, vec![4, 2, 2, 8]),
                (F32, vec![4, 2, 2, 8]),
                (I32, vec![2, 2]),
                (I32, vec![2]),
            ],
        ),
        (
            Op::PagedAttention { scale: None },
            vec![
                (F32, vec![2, 4, 8]),
                (F32, vec![4, 2, 2, 8]),
                (F32, vec![4, 2, 2, 8]),
                (I64, vec![2, 2]),
                (I32, vec![2]),
            ],
        ),
        (
            Op::PagedAttention { scale: Some(f32::NAN) },
            vec![
                (F32, vec![2, 4, 8]),
                (F32, vec![4, 2, 2, 8]),
                (F32, vec![4, 2, 2, 8]),
                (I32, vec![2, 2]),
                (I32, vec![2]),
            ],
        ),
    ]
}

on_every_backend!(every_op_rejects_bad_input, |b| {
    let rt = common::runtime(&b);
    let calls = invalid_calls().into_iter().chain(paged_invalid_calls());
    let mut covered = std::collections::BTreeSet::new();
    for (op, sig) in calls {
        let ins: Vec<Tensor> = sig.iter().map(|(d, s)| t(&rt, *d, s)).collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        match rt.run(&op, &refs) {
            Err(Error::Invalid { op: name, msg, .. }) => {
                assert_eq!(name, op.name(), "error names the op");
                assert!(!msg.is_empty());
                covered.insert(op.kind());
            }
            other => panic!("{op:?} on {sig:?}: expected Error::Invalid, got {other:?}"),
        }
    }
    let missing: Vec<OpKind> = OpKind::ALL.into_iter().filter(|k| !covered.contains(k)).collect();
    assert!(missing.is_empty(), "ops without a bad-input case: {missing:?}");
});

on_every_backend!(error_message_names_shapes, |b| {
    let rt = common::runtime(&b);
    let a = t(&rt, DType::F32, &[1024, 1024]);
    let c = t(&rt, DType::F32, &[512, 512]);
    let e = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &c]).unwrap_err();
    assert_eq!(e.to_string(), "MatMul: inner dimensions differ: a is [1024, 1024], b is [512, 512]");
});

on_every_backend!(outputs_are_validated, |b| {
    let rt = common::runtime(&b);
    let x = t(&rt, DType::F32, &[4, 4]);
    let wrong_shape = t(&rt, DType::F32, &[4, 5]);
    let wrong_dtype = t(&rt, DType::F16, &[4, 4]);
    for out in [&wrong_shape, &wrong_dtype] {
        let e = rt.execute(&Op::Relu, &[&x], &[out]).unwrap_err();
        assert!(matches!(e, Error::Invalid { op: "ReLU", .. }), "{e}");
    }
    // Too many outputs.
    let y = t(&rt, DType::F32, &[4, 4]);
    assert!(matches!(rt.execute(&Op::Relu, &[&x], &[&y, &y]), Err(Error::Invalid { .. })));
    // A non-contiguous output.
    let tr = y.transpose(0, 1).unwrap();
    assert!(matches!(rt.execute(&Op::Relu, &[&x], &[&tr]), Err(Error::Invalid { .. })));
});

on_every_backend!(aliasing_is_rejected, |b| {
    let rt = common::runtime(&b);
    let x = t(&rt, DType::F32, &[8]);
    let e = rt.execute(&Op::Relu, &[&x], &[&x]).unwrap_err();
    assert!(e.to_string().contains("overlaps input 0"), "{e}");
    let v = x.reshape(&[2, 4]).unwrap();
    let w = t(&rt, DType::F32, &[2, 4]);
    let v2 = x.reshape(&[2, 4]).unwrap();
    let e = rt.execute(&Op::Add, &[&v2, &w], &[&v]).unwrap_err();
    assert!(matches!(e, Error::Invalid { op: "Add", .. }), "{e}");
    let ok = t(&rt, DType::F32, &[2, 4]);
    rt.execute(&Op::Add, &[&w, &w], &[&ok]).expect("distinct output is fine");
});

// An in-place op (KvCacheWrite) takes its caches as its outputs, exactly: the same tensor,
// or a separate one (the input is copied in first); any other overlap is still refused.
on_every_backend!(in_place_pairs_are_the_only_aliasing_allowed, |b| {
    let rt = common::runtime(&b);
    let kc = t(&rt, DType::F32, &[2, 2, 1, 2]);
    let vc = t(&rt, DType::F32, &[2, 2, 1, 2]);
    let k = rt.from_slice(&[1f32, 2.0], vec![1, 1, 2], 0).unwrap();
    let slots = rt.from_slice(&[3i32], vec![1], 0).unwrap();
    let ins = [&kc, &vc, &k, &k, &slots];
    match rt.execute(&Op::KvCacheWrite, &ins, &[&kc, &vc]) {
        Err(Error::NoKernel { .. }) => {
            eprintln!("SKIP {}: no KvCacheWrite kernel", b.name());
            return;
        }
        r => {
            r.expect("the caches as their own outputs");
        }
    }
    let got: Vec<f32> = kc.to_ndarray::<f32>().unwrap().iter().copied().collect();
    assert_eq!(got, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]);
    // Outputs swapped, or one cache twice: overlaps outside the declared pairs.
    let e = rt.execute(&Op::KvCacheWrite, &ins, &[&vc, &kc]).unwrap_err();
    assert!(e.to_string().contains("overlaps input"), "{e}");
    let e = rt.execute(&Op::KvCacheWrite, &ins, &[&kc, &kc]).unwrap_err();
    assert!(e.to_string().contains("outputs 0 and 1 overlap"), "{e}");
    // Separate outputs: the inputs are left as they were.
    let fresh = t(&rt, DType::F32, &[2, 2, 1, 2]);
    let slot0 = rt.from_slice(&[0i32], vec![1], 0).unwrap();
    let outs = rt.run(&Op::KvCacheWrite, &[&kc, &fresh, &k, &k, &slot0]).unwrap();
    let o0: Vec<f32> = outs[0].to_ndarray::<f32>().unwrap().iter().copied().collect();
    assert_eq!(o0, [1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]);
    assert_eq!(kc.to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<_>>(), got);
});

on_every_backend!(devices_and_runtimes_are_checked, |b| {
    let rt = common::runtime(&b);
    let other = common::runtime(&b);
    let x = t(&rt, DType::F32, &[3]);
    let y = t(&other, DType::F32, &[3]);
    let e = rt.run(&Op::Add, &[&x, &y]).unwrap_err();
    assert!(matches!(e, Error::Invalid { op: "Add", .. }), "{e}");
    assert!(matches!(rt.zeros(DType::F32, [2], 99), Err(Error::Device { device: Some(99), .. })));
});

#[test]
fn out_of_memory_is_typed_and_carries_stats() {
    let mut cfg = RuntimeConfig::default();
    cfg.pool.limit_bytes = Some(4 << 20);
    let rt = npurt::Runtime::with_config(cfg).unwrap();
    let keep = rt.empty(DType::F32, [512, 1024], 0).unwrap(); // 2 MiB
    match rt.empty(DType::F32, [1024, 1024], 0) {
        Err(Error::OutOfMemory { requested, stats, .. }) => {
            assert_eq!(requested, 4 << 20);
            assert!(stats.total_bytes <= 4 << 20);
            assert!(stats.in_use_bytes >= 2 << 20);
            assert_eq!(stats.limit_bytes, Some(4 << 20));
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    drop(keep);
    // After the drop the cache is released and the request fits.
    rt.empty(DType::F32, [1024, 1024], 0).expect("fits after release-and-retry");
}

#[test]
fn runtime_failures_are_errors_not_panics() {
    let rt = npurt::Runtime::with_config(RuntimeConfig::default()).unwrap();
    let data = rt.zeros(DType::F32, [4, 2], 0).unwrap();
    let idx = rt.from_slice(&[0i64, 7], [2], 0).unwrap();
    let e = rt.run(&Op::Gather { axis: 0 }, &[&data, &idx]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    // Wrong element type on the host side.
    assert!(matches!(data.to_ndarray::<F16>(), Err(Error::Invalid { .. })));
    // Invalid configuration values.
    let cfg = RuntimeConfig { max_streams: 0, ..RuntimeConfig::default() };
    assert!(matches!(npurt::Runtime::with_config(cfg), Err(Error::Config(_))));
    let cfg = RuntimeConfig { backend: Some("tpu".into()), ..RuntimeConfig::default() };
    assert!(matches!(npurt::Runtime::with_config(cfg), Err(Error::Config(_))));
}

type F16 = npurt::f16;

// ---- sizes derived from user input ----

use npurt::TensorMeta;
use npurt::npy;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor};

fn is_overflow<T: std::fmt::Debug>(r: npurt::Result<T>) -> bool {
    matches!(r, Err(Error::Overflow { .. }))
}

#[test]
fn allocation_rejects_shapes_whose_size_overflows() {
    let rt = npurt::Runtime::with_config(RuntimeConfig::default()).unwrap();
    // 2 * 2^63 elements wraps to 0 and (2^62 + 1) * 4 * 4 bytes to 16.
    let e = rt.empty(DType::F32, [2, 1 << 63], 0).unwrap_err();
    assert_eq!(e.to_string(), "size overflow: tensor [2, 9223372036854775808] of f32 needs more than isize::MAX bytes");
    assert!(is_overflow(rt.empty(DType::F32, [(1 << 62) + 1, 4], 0)));
    assert!(is_overflow(rt.zeros(DType::F32, [1 << 62], 0)), "2^64 bytes");
    assert!(is_overflow(rt.zeros(DType::I64, [1 << 32, 1 << 32], 0)));
    assert!(is_overflow(rt.from_slice::<f32>(&[], [1 << 32, 1 << 32], 0)));
    assert!(is_overflow(rt.from_slice::<f32>(&[], [1 << 62, 0, 1 << 62], 0)), "a zero dim does not excuse the others");
    let one = ndarray::Array1::<f32>::zeros(1);
    let wide = one.broadcast(ndarray::IxDyn(&[1 << 31, 1 << 31])).expect("ndarray accepts 2^62 elements");
    assert!(is_overflow(rt.from_ndarray(&wide, 0)));
    // Sizes that fit still work, empty ones included.
    assert_eq!(rt.zeros(DType::F32, [0, 1 << 40], 0).unwrap().nbytes(), 0);
    assert_eq!(rt.from_slice(&[1f32, 2., 3.], [3], 0).unwrap().nbytes(), 12);
}

#[test]
fn views_and_reshapes_check_their_bounds() {
    let rt = npurt::Runtime::with_config(RuntimeConfig::default()).unwrap();
    let buf = rt.zeros(DType::U8, [64], 0).unwrap();
    // byte_offset + bytes wraps past usize::MAX.
    let e = buf.view_bytes(usize::MAX - 3, DType::F32, [4]).unwrap_err();
    assert!(matches!(e, Error::Invalid { op: "Tensor", .. }), "{e}");
    assert!(is_overflow(buf.view_bytes(0, DType::F32, [2, 1 << 63])));
    assert!(is_overflow(buf.view_bytes(0, DType::F32, [(1 << 62) + 1, 4])));
    assert!(buf.view_bytes(61, DType::F32, [1]).is_err(), "misaligned");
    assert!(buf.view_bytes(1 << 40, DType::F32, [1]).is_err(), "past the end of the buffer");
    assert_eq!(buf.view_bytes(60, DType::F32, [1]).unwrap().dims(), &[1]);
    assert_eq!(buf.view_bytes(64, DType::F32, [0]).unwrap().numel(), 0);
    let empty = rt.zeros(DType::F32, [0], 0).unwrap();
    let e = empty.reshape(&[1 << 62, 0, 1 << 62]).unwrap_err();
    assert!(matches!(&e, Error::Invalid { op: "Reshape", msg, .. } if msg.contains("size overflow")), "{e}");
    let e = rt.run(&Op::Reshape { shape: vec![1 << 62, 0, 1 << 62] }, &[&empty]).unwrap_err();
    assert!(matches!(e, Error::Invalid { op: "Reshape", .. }), "{e}");
    assert_eq!(empty.reshape(&[4, 0, 2]).unwrap().dims(), &[4, 0, 2]);
}

#[test]
fn inferred_shapes_whose_size_overflows_are_invalid() {
    use DType::*;
    let m = |d: DType, s: &[usize]| TensorMeta::new(d, s);
    let mm = Op::MatMul { trans_a: false, trans_b: false };
    let cases: Vec<(Op, Vec<TensorMeta>, &str)> = vec![
        (Op::Add, vec![m(F32, &[1 << 32, 1]), m(F32, &[1, 1 << 32])], "output 0"),
        (Op::Mul, vec![m(F16, &[1 << 40, 1, 1]), m(F16, &[1 << 30, 1])], "output 0"),
        (mm.clone(), vec![m(F32, &[1 << 40, 1]), m(F32, &[1, 1 << 40])], "output 0"),
        (mm, vec![m(F32, &[1 << 31, 1, 2, 3]), m(F32, &[1 << 31, 3, 2])], "output 0"),
        (Op::Linear, vec![m(F32, &[1 << 40, 1]), m(F32, &[1 << 40, 1])], "output 0"),
        (Op::Gather { axis: 0 }, vec![m(F32, &[4, 1 << 30]), m(I64, &[1 << 40])], "output 0"),
        (
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false },
            vec![m(F32, &[1, 1, 1 << 33, 1]), m(F32, &[1, 1, 1 << 33, 1]), m(F32, &[1, 1, 1 << 33, 1])],
            "scores",
        ),
        (Op::Relu, vec![m(F32, &[2, 1 << 63])], "x [2, 9223372036854775808]"),
        (Op::Add, vec![m(F32, &[3]), m(F32, &[(1 << 62) + 1, 4])], "b [4611686018427387905, 4]"),
    ];
    for (op, ins, names) in cases {
        match op.infer(&ins) {
            Err(Error::Invalid { op: name, msg, .. }) => {
                assert_eq!(name, op.name());
                assert!(msg.starts_with("size overflow: ") && msg.contains(names), "{op:?}: {msg}");
            }
            other => panic!("{op:?} on {ins:?}: expected Error::Invalid, got {other:?}"),
        }
    }
    // Cost functions saturate instead of overflowing.
    let (a, b) = (m(F16, &[1 << 28, 1 << 28]), m(F16, &[1 << 28, 1 << 28]));
    let mm = Op::MatMul { trans_a: false, trans_b: false };
    let o = mm.infer(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(mm.flops(&[a, b], &o), u64::MAX);
    let huge = m(F32, &[2, 1 << 63]);
    assert_eq!(Op::Add.bytes(&[huge.clone(), huge.clone()], std::slice::from_ref(&huge)), u64::MAX);
    let q = m(F32, &[1 << 20, 1 << 20, 1 << 20, 1 << 20]);
    assert_eq!(
        Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false }
            .flops(&[q.clone(), q.clone(), q.clone()], &[q]),
        u64::MAX
    );
    assert_eq!(Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false }.flops(&[], &[]), 0);
}

#[test]
fn graphs_check_the_sizes_of_inputs_constants_and_nodes() {
    // A constant whose element count wraps to the length of its (empty) data.
    assert!(is_overflow(HostTensor::from_vec([1 << 32, 1 << 32], Vec::<f32>::new())));
    assert!(HostTensor::from_vec([2, 2], vec![0f32; 3]).is_err());
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [1 << 32, 1]);
    let b = g.input("b", DType::F32, [1, 1 << 32]);
    let e = g.op("sum", Op::Add, &[a, b]).unwrap_err();
    assert!(e.to_string().contains("node \"sum\"") && e.to_string().contains("size overflow"), "{e}");

    let rt = npurt::Runtime::with_config(RuntimeConfig::default()).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 1 << 63]);
    g.output(x);
    let e = g.validate().unwrap_err();
    assert!(matches!(&e, Error::Invalid { op: "Graph", msg, .. } if msg.contains("input \"x\"")), "{e}");
    assert!(CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0)).is_err());

    // A constant whose bytes do not match its shape.
    let mut g = Graph::new();
    let short = HostTensor { dtype: DType::F32, shape: [4].into(), bytes: vec![0u8; 3].into() };
    let c = g.constant("w", short);
    let y = g.op("relu", Op::Relu, &[c]).unwrap();
    g.output(y);
    let e = g.validate().unwrap_err();
    assert!(e.to_string().contains("constant \"w\""), "{e}");
    let wide = HostTensor { dtype: DType::F32, shape: [1 << 62].into(), bytes: Vec::new().into() };
    let mut g = Graph::new();
    let c = g.constant("big", wide);
    g.output(c);
    assert!(g.validate().unwrap_err().to_string().contains("size overflow"));
}

/// A version 1.0 `.npy` file with this header text and data.
fn npy_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&(header.len() as u16).to_le_bytes());
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn npy_shapes_and_data_lengths_are_checked() {
    // The product wraps to 0, which 0 bytes of data used to satisfy.
    let f = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", &[]);
    let e = npy::parse(&f, "big.npy").unwrap_err();
    assert!(matches!(&e, Error::Overflow { what } if what.contains("big.npy")), "{e}");
    let f = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }\n", &[]);
    assert!(is_overflow(npy::parse(&f, "f64.npy")));
    let hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
    assert_eq!(npy::parse(&npy_file(hdr, &[0; 24]), "ok.npy").unwrap().shape, vec![2, 3]);
    for len in [20, 28] {
        let e = npy::parse(&npy_file(hdr, &vec![0; len]), "len.npy").unwrap_err();
        assert!(matches!(&e, Error::Format { context: m, .. } if m.contains("needs 24")), "{len} bytes: {e}");
    }
    // Writing checks the same.
    let a = npy::NpyArray { dtype: DType::F32, shape: vec![2, 3], data: vec![0; 20] };
    assert!(npy::to_bytes(&a).is_err());
}

#[test]
fn npy_header_is_parsed_as_a_dict() {
    let parse = |h: &str, data: &[u8]| npy::parse(&npy_file(h, data), "h.npy");
    // Any key order, double quotes, spacing, a Python 2 long.
    let a = parse("{\"shape\": ( 2 , 1L ), \"fortran_order\" : False, \"descr\": \"<i4\"}  \n", &[0; 8]).unwrap();
    assert_eq!((a.dtype, a.shape), (DType::I32, vec![2, 1]));
    assert_eq!(parse("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", &[7]).unwrap().data, vec![7]);
    let f64s: Vec<u8> = [1.5f64, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let a = parse("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", &f64s).unwrap();
    assert_eq!(a.data, [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    let bad = [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4\\', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
        "'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
    ];
    for h in bad {
        let e = parse(h, &[0; 8]).unwrap_err();
        assert!(matches!(&e, Error::Format { context: m, .. } if m.starts_with("h.npy: bad header")), "{h}: {e}");
    }
    assert!(parse("{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}", &[0; 8]).is_err());
    assert!(parse("{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", &[0; 8]).is_err());
    // Truncated headers.
    assert!(npy::parse(b"\x93NUMPY\x01\x00\xff\x00{}", "t.npy").is_err());
    assert!(npy::parse(b"\x93NUMPY\x02\x00\x01", "t.npy").is_err());
}
