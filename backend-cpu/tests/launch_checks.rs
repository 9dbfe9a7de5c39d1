//! Launches straight through the CPU backend's `Backend` methods (safe code with any
//! arguments): operands that do not fit the op or the kernel are refused before anything
//! runs; a kernel that fails or panics (injected faults) is an error naming the op, the
//! stream and the submission number, on the default stream as on user streams, in
//! batches and in compiled graphs; an event record that cannot be queued leaves nothing
//! waiting.

use backend_cpu::{CpuBackend, CpuConfig, Fault};
use npurt_test_support::finishes_within;
use runtime::graph::{CompileOptions, CompiledGraph, Graph};
use runtime::{
    Backend, DType, DevicePtr, Error, FrozenLaunch, KernelInfo, LaunchArgs, Layout, Op, OpKind, Runtime, RuntimeConfig,
    StreamId, Task, Tensor, TensorArg,
};
use std::sync::Arc;

/// A runtime over a CPU backend that the test keeps a handle of (to inject faults).
fn runtime() -> (Arc<CpuBackend>, Runtime) {
    let cpu = Arc::new(
        CpuBackend::new(CpuConfig { devices: 1, threads: Some(2), ..CpuConfig::default() }).expect("cpu backend"),
    );
    let b: Arc<dyn Backend> = cpu.clone();
    (cpu, Runtime::with_backend(b, RuntimeConfig::default()).expect("runtime"))
}

fn arg(t: &Tensor) -> TensorArg {
    TensorArg { ptr: DevicePtr(t.data_ptr()), dtype: t.dtype(), layout: Arc::new(t.layout().clone()) }
}

/// `arg` with another shape (contiguous, at the same address).
fn arg_as(t: &Tensor, dims: &[usize]) -> TensorArg {
    TensorArg { ptr: DevicePtr(t.data_ptr()), dtype: t.dtype(), layout: Arc::new(Layout::contiguous(dims.to_vec())) }
}

fn launch(op: Op, inputs: Vec<TensorArg>, outputs: Vec<TensorArg>) -> LaunchArgs {
    LaunchArgs { op, inputs, outputs, workspace: None, seq: 900, threads: 1, prepacked: None }
}

fn kernels_of(b: &dyn Backend, kind: OpKind) -> Vec<KernelInfo> {
    let ks: Vec<KernelInfo> = b.kernels().iter().filter(|k| k.op == kind).cloned().collect();
    assert!(!ks.is_empty(), "the CPU backend has no {kind} kernel");
    ks
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().expect("read back").iter().copied().collect()
}

#[test]
fn launches_that_do_not_fit_their_op_are_refused_on_every_kernel_and_stream() {
    let (_cpu, rt) = runtime();
    let b = rt.backend().clone();
    let t = |n: usize| rt.from_slice(&vec![1f32; n], [n], 0).unwrap();
    let (x4, y8) = (t(4), rt.from_slice(&[7f32; 8], [8], 0).unwrap());
    let (a12, b12, c16) = (t(12), t(12), rt.from_slice(&[7f32; 16], [16], 0).unwrap());
    // An allocation of exactly 16 bytes, read as 32.
    let small = b.alloc(0, 16, 64).unwrap();
    let raw = |_bytes: usize, dims: &[usize]| TensorArg {
        ptr: small,
        dtype: DType::F32,
        layout: Arc::new(Layout::contiguous(dims.to_vec())),
    };
    let user = rt.stream(0).unwrap();
    let cases: Vec<(&str, OpKind, LaunchArgs)> = vec![
        ("Add with one input", OpKind::Add, launch(Op::Add, vec![arg(&x4)], vec![arg_as(&y8, &[4])])),
        ("ReLU with no input", OpKind::Relu, launch(Op::Relu, vec![], vec![arg_as(&y8, &[4])])),
        (
            "ReLU with 4 inputs and 8 outputs",
            OpKind::Relu,
            launch(Op::Relu, vec![arg(&x4); 4], (0..8).map(|_| arg_as(&y8, &[1])).collect()),
        ),
        (
            "MatMul with k 3 against 4",
            OpKind::MatMul,
            launch(
                Op::MatMul { trans_a: false, trans_b: false },
                vec![arg_as(&a12, &[4, 3]), arg_as(&b12, &[4, 3])],
                vec![arg_as(&c16, &[4, 3])],
            ),
        ),
        (
            "Softmax with a wider output",
            OpKind::Softmax,
            launch(Op::Softmax { axis: -1 }, vec![arg(&x4)], vec![arg_as(&y8, &[8])]),
        ),
        (
            "ReLU reading past its allocation",
            OpKind::Relu,
            launch(Op::Relu, vec![raw(16, &[8])], vec![arg_as(&y8, &[8])]),
        ),
        (
            "ReLU of a strided input",
            OpKind::Relu,
            launch(
                Op::Relu,
                vec![TensorArg {
                    ptr: DevicePtr(x4.data_ptr()),
                    dtype: DType::F32,
                    layout: Arc::new(Layout { shape: runtime::Shape::new(vec![2]), strides: vec![2], offset: 0 }),
                }],
                vec![arg_as(&y8, &[2])],
            ),
        ),
        (
            "ReLU writing f16 for f32",
            OpKind::Relu,
            launch(Op::Relu, vec![arg(&x4)], vec![TensorArg { dtype: DType::F16, ..arg_as(&y8, &[4]) }]),
        ),
    ];
    for (what, kind, args) in &cases {
        for k in kernels_of(b.as_ref(), *kind) {
            for stream in [b.default_stream(0), user.id()] {
                match b.launch(0, &k, args.clone(), stream) {
                    Err(Error::Invalid { .. } | Error::Backend { .. }) => {}
                    other => panic!("{what} on {} (stream {stream:?}): expected a refusal, got {other:?}", k.name),
                }
            }
        }
    }
    user.synchronize().expect("nothing was queued");
    assert_eq!(values(&y8), vec![7.0; 8], "a refused launch wrote its output");
    assert_eq!(values(&c16), vec![7.0; 16], "a refused launch wrote its output");
    // The exact reasons, on the reference kernels.
    let reason = |kind: OpKind, args: &LaunchArgs| {
        let k = kernels_of(b.as_ref(), kind).into_iter().find(|k| k.tier == runtime::Tier::Reference).unwrap();
        b.launch(0, &k, args.clone(), b.default_stream(0)).unwrap_err().to_string()
    };
    assert!(reason(OpKind::Add, &cases[0].2).contains("expects 2 inputs, got 1"));
    assert!(reason(OpKind::Relu, &cases[2].2).contains("expects 1 inputs, got 4"));
    assert!(reason(OpKind::Softmax, &cases[4].2).contains("output 0 must be f32 [4]"));
    assert!(reason(OpKind::Relu, &cases[5].2).contains("not inside a live allocation"));
    assert!(reason(OpKind::Relu, &cases[6].2).contains("must be contiguous"));
    b.free(0, small).unwrap();
}

#[test]
fn the_backends_own_kernel_description_decides_not_the_callers_copy() {
    let (_cpu, rt) = runtime();
    let b = rt.backend().clone();
    // The bf16 Linear accepts only a bf16 weight; a copy claiming to accept anything is
    // still held to the original's predicate.
    let Some(bf16) = b
        .kernels()
        .iter()
        .find(|&k| {
            k.op == OpKind::Linear && {
                let q = runtime::KernelQuery {
                    op: &Op::Linear,
                    inputs: &[
                        runtime::TensorMeta::new(DType::F32, [2, 4]),
                        runtime::TensorMeta::new(DType::F32, [3, 4]),
                    ],
                    outputs: &[runtime::TensorMeta::new(DType::F32, [2, 3])],
                };
                (k.supports)(&q).is_err()
            }
        })
        .cloned()
    else {
        panic!("expected a Linear kernel that refuses an f32 weight (the bf16 one)");
    };
    fn anything(_: &runtime::KernelQuery<'_>) -> Result<(), String> {
        Ok(())
    }
    let forged = KernelInfo { supports: anything, ..bf16 };
    let x = rt.from_slice(&[1f32; 8], [2, 4], 0).unwrap();
    let w = rt.from_slice(&[1f32; 12], [3, 4], 0).unwrap();
    let y = rt.from_slice(&[7f32; 6], [2, 3], 0).unwrap();
    let e = b.launch(0, &forged, launch(Op::Linear, vec![arg(&x), arg(&w)], vec![arg(&y)]), StreamId(0)).unwrap_err();
    assert!(matches!(&e, Error::Invalid { op: "Linear", msg, .. } if msg.contains("does not accept")), "{e:?}");
    assert_eq!(values(&y), vec![7.0; 6]);
    // A kernel of another op is refused as well.
    let relu = kernels_of(b.as_ref(), OpKind::Relu).remove(0);
    let e = b.launch(0, &relu, launch(Op::Linear, vec![arg(&x), arg(&w)], vec![arg(&y)]), StreamId(0)).unwrap_err();
    assert!(e.to_string().contains("implements ReLU"), "{e}");
}

#[test]
fn batches_and_frozen_plans_are_checked_in_full_before_anything_runs() {
    let (_cpu, rt) = runtime();
    let b = rt.backend().clone();
    let x = rt.from_slice(&[-1f32, 2., -3., 4.], [4], 0).unwrap();
    let y = rt.from_slice(&[7f32; 4], [4], 0).unwrap();
    let z = rt.from_slice(&[7f32; 8], [8], 0).unwrap();
    let relu = kernels_of(b.as_ref(), OpKind::Relu).remove(0);
    let good = launch(Op::Relu, vec![arg(&x)], vec![arg(&y)]);
    let bad = launch(Op::Relu, vec![arg(&x)], vec![arg(&z)]);
    let user = rt.stream(0).unwrap();
    for stream in [StreamId(0), user.id()] {
        let e = b.launch_batch(0, vec![(relu.clone(), good.clone()), (relu.clone(), bad.clone())], stream).unwrap_err();
        assert!(e.to_string().contains("output 0 must be f32 [4]"), "{e}");
    }
    user.synchronize().unwrap();
    assert_eq!(values(&y), vec![7.0; 4], "a batch with a bad launch ran its good one");
    let frozen = |args: &LaunchArgs, patches: Vec<(usize, usize)>| FrozenLaunch {
        kernel: relu.clone(),
        args: args.clone(),
        patches,
        label: "relu".into(),
        stream: StreamId(0),
    };
    let e = b.freeze(0, &[frozen(&good, vec![]), frozen(&bad, vec![])], runtime::GraphCapture::Auto).unwrap_err();
    assert!(e.to_string().contains("output 0 must be f32 [4]"), "{e}");
    // A patched operand is checked by its layout at freeze time too.
    let mut placeholder = bad.clone();
    placeholder.outputs[0].ptr = DevicePtr::NULL;
    let e = b.freeze(0, &[frozen(&placeholder, vec![(1, 0)])], runtime::GraphCapture::Auto).unwrap_err();
    assert!(e.to_string().contains("output 0 must be f32 [4]"), "{e}");
    // The good plan runs.
    let plan =
        b.freeze(0, &[frozen(&good, vec![])], runtime::GraphCapture::Auto).unwrap().expect("the CPU backend freezes");
    b.launch_frozen(0, &plan, 0..1, &[], 1, StreamId(0)).unwrap();
    assert_eq!(values(&y), vec![0., 2., 0., 4.]);
}

/// The asynchronous error of an injected fault: op, stream, submission, message.
fn expect_fault(r: runtime::Result<()>, op: &str, stream: &str, seq: Option<u64>, msg: &str) {
    match r {
        Err(Error::Async { op: o, stream: s, seq: q, source: m_src }) => {
            let m = m_src.to_string();
            assert_eq!((o.as_str(), s.as_str()), (op, stream), "{m}");
            if let Some(seq) = seq {
                assert_eq!(q, seq, "the error names another submission");
            }
            assert!(m.contains(msg), "{m:?} does not say {msg:?}");
        }
        other => panic!("expected {op} on {stream} to fail with {msg:?}, got {other:?}"),
    }
}

#[test]
fn a_panicking_kernel_on_the_default_stream_is_an_error_naming_op_and_stream() {
    let (cpu, rt) = runtime();
    let x = rt.from_slice(&[1f32, 2., 3., 4.], [4], 0).unwrap();
    let y = rt.empty(DType::F32, [4], 0).unwrap();
    // Through the runtime: the error comes back from `execute` itself.
    cpu.inject_fault("add.", 1, Fault::Panic);
    let e = rt.execute(&Op::Add, &[&x, &x], &[&y]).map(drop);
    expect_fault(e, "Add", "cpu:0/default", None, "panicked: injected fault in Add");
    let r = rt.execute(&Op::Add, &[&x, &x], &[&y]).expect("the next Add runs");
    assert_eq!(values(&y), vec![2., 4., 6., 8.]);
    assert!(r.seq > 0);
    // Straight through the backend, with the caller's submission number.
    let b = rt.backend().clone();
    let add = kernels_of(b.as_ref(), OpKind::Add).into_iter().find(|k| k.name.starts_with("add.reference")).unwrap();
    cpu.inject_fault("add.reference", 1, Fault::Panic);
    let args = launch(Op::Add, vec![arg(&x), arg(&x)], vec![arg(&y)]);
    let e = b.launch(0, &add, LaunchArgs { seq: 4242, ..args.clone() }, StreamId(0));
    expect_fault(e, "Add", "cpu:0/default", Some(4242), "add.reference");
    cpu.inject_fault("add.reference", 1, Fault::Error);
    let e = b.launch(0, &add, LaunchArgs { seq: 4243, ..args.clone() }, StreamId(0));
    expect_fault(e, "Add", "cpu:0/default", Some(4243), "injected fault");
    b.launch(0, &add, args, StreamId(0)).expect("the faults have fired");
}

#[test]
fn a_failing_kernel_on_a_user_stream_names_its_op_and_runtime_submission() {
    let (cpu, rt) = runtime();
    let s = rt.stream(0).unwrap();
    let x = rt.from_slice(&[1f32, -2., 3., -4.], [4], 0).unwrap();
    let (y, z) = (rt.empty(DType::F32, [4], 0).unwrap(), rt.empty(DType::F32, [4], 0).unwrap());
    cpu.inject_fault("relu.", 1, Fault::Panic);
    let (r1, r2) = {
        let _scope = rt.stream_scope(&s);
        (rt.execute(&Op::Relu, &[&x], &[&y]).unwrap(), rt.execute(&Op::Scale { factor: 2.0 }, &[&x], &[&z]).unwrap())
    };
    assert!(r2.seq > r1.seq);
    let s2 = s.clone();
    let r = finishes_within(60, "synchronize", move || s2.synchronize());
    expect_fault(r, "ReLU", &s.to_string(), Some(r1.seq), "panicked: injected fault in ReLU");
    assert_eq!(values(&z), vec![2., -4., 6., -8.], "the launch behind the failed one did not run");
    // Batches: one job, each failure named by its own launch.
    cpu.inject_fault("add.", 1, Fault::Error);
    let tasks = vec![
        Task { op: Op::Relu, inputs: vec![x.clone()], outputs: vec![y.clone()] },
        Task { op: Op::Add, inputs: vec![x.clone(), x.clone()], outputs: vec![z.clone()] },
    ];
    let reports = {
        let _scope = rt.stream_scope(&s);
        rt.execute_batch(&tasks).unwrap()
    };
    let s2 = s.clone();
    let r = finishes_within(60, "synchronize", move || s2.synchronize());
    expect_fault(r, "Add", &s.to_string(), Some(reports[1].seq), "injected fault");
    assert_eq!(values(&y), vec![1., 0., 3., 0.], "the good launch of the batch did not run");
    s.synchronize().expect("reported once");
}

#[test]
fn a_failing_node_of_a_compiled_graph_is_named_and_the_graph_runs_again() {
    let (cpu, rt) = runtime();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let r = g.op("relu", Op::Relu, &[x]).unwrap();
    let y = g.op("double", Op::Scale { factor: 2.0 }, &[r]).unwrap();
    g.output(y);
    let cg = Arc::new(CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0)).unwrap());
    let input = rt.from_slice(&[1f32, -2., 3., -4.], [4], 0).unwrap();
    assert_eq!(values(&cg.run(&[&input]).unwrap()[0]), vec![2., 0., 6., 0.]);
    for fault in [Fault::Panic, Fault::Error] {
        cpu.inject_fault("scale.", 1, fault);
        let e = finishes_within(60, "a failing graph run", {
            let (cg, input) = (cg.clone(), input.clone());
            move || cg.run(&[&input]).map(drop)
        });
        match e {
            Err(Error::Async { op, source, .. }) => {
                let msg = source.to_string();
                assert_eq!(op, "Scale", "{msg}");
                assert!(msg.contains("injected fault"), "{msg}");
            }
            other => panic!("expected the Scale node's failure, got {other:?}"),
        }
        assert_eq!(values(&cg.run(&[&input]).unwrap()[0]), vec![2., 0., 6., 0.], "the graph did not recover");
    }
}

#[test]
fn an_event_record_that_cannot_be_queued_leaves_nothing_waiting() {
    let (_cpu, rt) = runtime();
    let b = rt.backend().clone();
    let ev = b.create_event(0).unwrap();
    let e = b.record_event(0, ev, StreamId(999)).unwrap_err();
    assert!(e.to_string().contains("unknown stream 999"), "{e}");
    assert!(b.query_event(0, ev).unwrap(), "the refused record left the event pending");
    let s = b.create_stream(0).unwrap();
    let b2 = b.clone();
    finishes_within(60, "waits for an event whose record was refused", move || {
        b2.synchronize_event(0, ev).unwrap();
        b2.wait_event(0, s, ev).unwrap();
        b2.synchronize_stream(0, s).unwrap();
    });
    // Records that are queued still work, on both kinds of stream.
    b.record_event(0, ev, s).unwrap();
    b.synchronize_event(0, ev).unwrap();
    assert!(b.query_event(0, ev).unwrap());
    b.record_event(0, ev, StreamId(0)).unwrap();
    assert!(b.query_event(0, ev).unwrap());
    b.destroy_stream(0, s).unwrap();
    // A destroyed stream is refused the same way.
    assert!(b.record_event(0, ev, s).is_err());
    assert!(b.query_event(0, ev).unwrap());
    b.destroy_event(0, ev).unwrap();
}
