//! Bad input for every op gets a typed error naming the op, never a panic.

mod common;

use npurt::{DType, Error, GeluApprox, Op, OpKind, RuntimeConfig, Tensor};
use runtime::Runtime;

fn t(rt: &Runtime, d: DType, s: &[usize]) -> Tensor {
    rt.zeros(d, s.to_vec(), 0).expect("alloc")
}

/// One invalid call per op: the op and the (wrong) input signatures.
fn invalid_calls() -> Vec<(Op, Vec<(DType, Vec<usize>)>)> {
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
        (Op::Add, vec![(F32, vec![2, 3]), (F32, vec![4])]),
        (Op::Sub, vec![(F32, vec![2]), (I32, vec![2])]),
        (Op::Mul, vec![(U8, vec![2]), (U8, vec![2])]),
        (Op::Div, vec![(F32, vec![3])]),
        (Op::Relu, vec![(I32, vec![3])]),
        (Op::Gelu(GeluApprox::Erf), vec![(I64, vec![3])]),
        (Op::Tanh, vec![(F32, vec![3]), (F32, vec![3])]),
        (Op::Erf, vec![(U8, vec![3])]),
        (Op::Exp, vec![]),
        (Op::Sqrt, vec![(I32, vec![1])]),
        (Op::Softmax { axis: 2 }, vec![(F32, vec![3, 4])]),
        (Op::LayerNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![3]), (F32, vec![4])]),
        (Op::LayerNorm { eps: -1.0 }, vec![(F32, vec![2, 4]), (F32, vec![4]), (F32, vec![4])]),
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
            Op::Attention { scale: None },
            vec![(F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 3, 5]), (F32, vec![1, 2, 3, 4])],
        ),
        (
            Op::Attention { scale: None },
            vec![(F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 3, 4]), (I64, vec![1, 1, 1, 3])],
        ),
        (
            Op::Attention { scale: None },
            vec![(F32, vec![1, 2, 3, 4]), (F32, vec![1, 2, 5, 4]), (F32, vec![1, 2, 5, 4]), (U8, vec![1, 1, 1, 4])],
        ),
        (Op::BiasGelu(GeluApprox::Tanh), vec![(F32, vec![2, 4]), (F32, vec![2])]),
        (Op::AddLayerNorm { eps: 1e-5 }, vec![(F32, vec![2, 4]), (F32, vec![2, 3]), (F32, vec![4]), (F32, vec![4])]),
    ]
}

test_on_every_backend!(every_op_rejects_bad_input, |b| {
    let rt = common::runtime(&b);
    let calls = invalid_calls();
    let mut covered = std::collections::BTreeSet::new();
    for (op, sig) in calls {
        let ins: Vec<Tensor> = sig.iter().map(|(d, s)| t(&rt, *d, s)).collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        match rt.run(&op, &refs) {
            Err(Error::Invalid { op: name, msg }) => {
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

test_on_every_backend!(error_message_names_shapes, |b| {
    let rt = common::runtime(&b);
    let a = t(&rt, DType::F32, &[1024, 1024]);
    let c = t(&rt, DType::F32, &[512, 512]);
    let e = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &c]).unwrap_err();
    assert_eq!(e.to_string(), "MatMul: inner dimensions differ: a is [1024, 1024], b is [512, 512]");
});

test_on_every_backend!(outputs_are_validated, |b| {
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

test_on_every_backend!(aliasing_is_rejected, |b| {
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

test_on_every_backend!(devices_and_runtimes_are_checked, |b| {
    let rt = common::runtime(&b);
    let other = common::runtime(&b);
    let x = t(&rt, DType::F32, &[3]);
    let y = t(&other, DType::F32, &[3]);
    let e = rt.run(&Op::Add, &[&x, &y]).unwrap_err();
    assert!(matches!(e, Error::Invalid { op: "Add", .. }), "{e}");
    assert!(matches!(rt.zeros(DType::F32, [2], 99), Err(Error::Device(_))));
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
    let mut cfg = RuntimeConfig::default();
    cfg.max_streams = 0;
    assert!(matches!(npurt::Runtime::with_config(cfg), Err(Error::Config(_))));
    let cfg = RuntimeConfig { backend: Some("tpu".into()), ..RuntimeConfig::default() };
    assert!(matches!(npurt::Runtime::with_config(cfg), Err(Error::Config(_))));
}

type F16 = npurt::f16;
