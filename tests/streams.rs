//! Streams and events through the runtime API: ordering, asynchrony, cross-stream waits,
//! events, asynchronous errors, batches, threads, scoped streams, stream limits and
//! several devices. Every case written with `on_every_backend!` is one test per backend
//! (`<case>::cpu`, `<case>::acl_emu`, `<case>::cuda`); a backend that is absent prints why.

mod common;

use npurt::ndarray::ArrayD;
use npurt::{Backend, DType, Error, Op, RuntimeConfig, Task, Tensor};
use npurt_test_support::per_backend::Runs;
use runtime::{DevicePtr, Runtime};
use std::sync::Arc;

fn ramp(n: usize, scale: f32, shift: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * scale + shift).collect()
}

fn host(t: &Tensor) -> ArrayD<f32> {
    t.to_ndarray::<f32>().expect("to_ndarray")
}

/// Element-wise closeness with a tolerance relative to the magnitude.
fn assert_close(got: &ArrayD<f32>, want: &ArrayD<f32>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes differ");
    let mut bad = 0;
    let mut first = None;
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        if (g - w).abs() > 1e-5 * w.abs().max(1.0) || g.is_nan() != w.is_nan() {
            bad += 1;
            first.get_or_insert((i, *g, *w));
        }
    }
    assert_eq!(bad, 0, "{what}: {bad} of {} elements differ, first (index, got, want) = {first:?}", got.len());
}

/// The raw bytes of a tensor's buffer, read without synchronising any user stream (a
/// copy on the default stream, which does not wait for user streams).
fn raw_f32(rt: &Runtime, t: &Tensor) -> Vec<f32> {
    let mut bytes = vec![0u8; t.nbytes()];
    let def = rt.backend().default_stream(0);
    rt.backend().copy_to_host(0, DevicePtr(t.data_ptr()), &mut bytes, def).unwrap();
    bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A chain of dependent ops; each step's input is dropped while the step may be queued.
fn chain(rt: &Runtime, x: &Tensor, w: &Tensor) -> Tensor {
    let mut y = x.clone();
    for i in 0..12 {
        let op = match i % 4 {
            0 => Op::Scale { factor: 1.5 },
            1 => Op::Add,
            2 => Op::Relu,
            _ => Op::Sub,
        };
        let ins: Vec<&Tensor> = match op {
            Op::Add | Op::Sub => vec![&y, x],
            _ => vec![&y],
        };
        y = rt.run(&op, &ins).unwrap().remove(0);
    }
    let y = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&y, w]).unwrap().remove(0);
    let y = rt.run(&Op::Softmax { axis: -1 }, &[&y]).unwrap().remove(0);
    rt.run(&Op::Scale { factor: 100.0 }, &[&y]).unwrap().remove(0)
}

// ---- 1. in-order execution ----

on_every_backend!(a_dependent_chain_on_a_user_stream_matches_the_default_stream, |b: Arc<dyn Backend>| {
    let rt = common::runtime(&b);
    let (m, k, n) = (64, 256, 128);
    let x = rt.from_slice(&ramp(m * k, 0.01, 0.1), [m, k], 0).unwrap();
    let w = rt.from_slice(&ramp(k * n, 0.001, 0.0), [k, n], 0).unwrap();
    let want = host(&chain(&rt, &x, &w));
    let s = rt.stream(0).unwrap();
    for round in 0..3 {
        let got = {
            let _scope = rt.stream_scope(&s);
            chain(&rt, &x, &w)
        };
        s.synchronize().unwrap();
        assert_close(&host(&got), &want, &format!("round {round}"));
    }
});

// ---- 2. execute returns before the work is done ----

on_every_backend!(execute_on_a_blocked_user_stream_returns_before_the_work_runs, |b: Arc<dyn Backend>| {
    let g = gate::Gate::new(b);
    let rt = Runtime::with_backend(g.clone(), RuntimeConfig::default()).unwrap();
    let s = rt.stream(0).unwrap();
    let n = 4096;
    let data = ramp(n, 1.0, 0.5);
    let x = rt.from_slice(&data, [n], 0).unwrap();
    let y = rt.zeros(DType::F32, [n], 0).unwrap();
    g.block(0, s.id());
    let r = rt.execute_on(&s, &Op::Scale { factor: 3.0 }, &[&x], &[&y]).unwrap();
    assert!(r.elapsed.is_none(), "a queued op reports no time");
    assert_eq!(&*r.stream, s.to_string().as_str());
    let ev = s.record().unwrap();
    assert!(!ev.query().unwrap(), "the event after the queued op completed while the stream is blocked");
    assert!(raw_f32(&rt, &y).iter().all(|v| *v == 0.0), "the output was written before the stream ran");
    g.open().unwrap();
    s.synchronize().unwrap();
    assert!(ev.query().unwrap());
    let want: Vec<f32> = data.iter().map(|v| v * 3.0).collect();
    assert_eq!(host(&y).as_slice().unwrap(), &want[..]);
});

on_every_backend!(execute_on_a_user_stream_is_asynchronous_and_correct, |b: Arc<dyn Backend>| {
    let rt = common::runtime(&b);
    let s = rt.stream(0).unwrap();
    let n = 256;
    let a = rt.from_slice(&ramp(n * n, 0.01, 0.0), [n, n], 0).unwrap();
    let out = rt.empty(DType::F32, [n, n], 0).unwrap();
    let r = rt.execute_on(&s, &Op::MatMul { trans_a: false, trans_b: true }, &[&a, &a], &[&out]).unwrap();
    assert!(r.elapsed.is_none());
    assert!(s.is_async());
    let want = rt.run(&Op::MatMul { trans_a: false, trans_b: true }, &[&a, &a]).unwrap().remove(0);
    // to_ndarray waits for the stream that writes `out`.
    assert_close(&host(&out), &host(&want), "async matmul");
});

// ---- 3. cross-stream wait ----

/// Runs `f` on its own thread and fails if it has not finished within `secs` seconds: a
/// hang guard for tests that can deadlock, so that they fail instead of hanging the run.
fn finishes_within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(()) => h.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The closure panicked: report its panic.
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: deadlocked (no progress for {secs} s)"),
    }
}

/// Producer: matmuls on `producer`; consumer: an Add on `consumer` after waiting for an
/// event recorded behind the producer's work. Returns (got, want).
fn producer_consumer(rt: &Runtime, producer: &runtime::Stream, consumer: &runtime::Stream, n: usize, wait_first: bool) {
    let a = rt.from_slice(&ramp(n * n, 0.01, 0.0), [n, n], 0).unwrap();
    let x = rt.from_slice(&ramp(n * n, 0.1, 1.0), [n, n], 0).unwrap();
    let mut p = a.clone();
    for _ in 0..4 {
        p = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&p, &a]).unwrap().remove(0);
    }
    let want = host(&rt.run(&Op::Add, &[&p, &x]).unwrap().remove(0));
    for round in 0..5 {
        let p = {
            let _scope = rt.stream_scope(producer);
            let mut p = a.clone();
            for _ in 0..4 {
                p = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&p, &a]).unwrap().remove(0);
            }
            p
        };
        let ev = producer.record().unwrap();
        if wait_first {
            producer.synchronize().unwrap();
            assert!(ev.query().unwrap());
        }
        consumer.wait(&ev).unwrap();
        let out = rt.empty(DType::F32, [n, n], 0).unwrap();
        rt.execute_on(consumer, &Op::Add, &[&p, &x], &[&out]).unwrap();
        consumer.synchronize().unwrap();
        // The consumer finished, so the producer's work it waited for did too.
        assert!(ev.query().unwrap(), "round {round}: the consumer finished before the event it waited for");
        // Read without synchronising the producer: only the wait orders the two.
        let got = ArrayD::from_shape_vec(vec![n, n], raw_f32(rt, &out)).unwrap();
        assert_close(&got, &want, &format!("round {round}"));
    }
}

on_every_backend!(a_consumer_reads_the_producer_output_after_waiting_for_its_event, |b: Arc<dyn Backend>| {
    // The producer is synchronised before the consumer waits: the wait is a no-op.
    let rt = common::runtime(&b);
    let producer = rt.stream(0).unwrap();
    let consumer = rt.stream(0).unwrap();
    producer_consumer(&rt, &producer, &consumer, 96, true);
});

// Regression test: before 485edfd the CPU backend ran `wait_event` jobs inside the shared
// rayon pool, and a pool worker blocked in one while the work it waited for needed it.
// Heavy on the emulator (about 8 s), where the CPU backend's pool is not involved; it ran
// on the CPU and CUDA backends before and still does.
fn busy_producer_runs() -> Runs {
    Runs::all().skip("acl_emu", "20 rounds of 192x192 matmul chains take about 8 s on the emulator")
}

on_every_backend!(a_consumer_stream_waits_for_a_busy_producer_stream, busy_producer_runs(), |b: Arc<dyn Backend>| {
    let name = b.name().to_string();
    finishes_within(120, &name, move || {
        let rt = common::runtime(&b);
        let producer = rt.stream(0).unwrap();
        let consumer = rt.stream(0).unwrap();
        for _ in 0..20 {
            producer_consumer(&rt, &producer, &consumer, 192, false);
        }
    });
});

/// Regression test: with one worker thread, a cross-stream wait run inside the pool
/// occupied the only worker and the producer never ran (see above).
#[test]
fn a_cross_stream_wait_with_one_worker_thread() {
    finishes_within(60, "threads = 1", || {
        let cfg = RuntimeConfig { threads: Some(1), ..RuntimeConfig::default() };
        let rt = npurt::Runtime::with_config(cfg).unwrap();
        let producer = rt.stream(0).unwrap();
        let consumer = rt.stream(0).unwrap();
        for _ in 0..5 {
            producer_consumer(&rt, &producer, &consumer, 384, false);
        }
    });
}

// ---- 4. events ----

on_every_backend!(events_query_synchronize_and_elapsed, |b: Arc<dyn Backend>| {
    let g = gate::Gate::new(b);
    let rt = Runtime::with_backend(g.clone(), RuntimeConfig::default()).unwrap();
    let s = rt.stream(0).unwrap();
    let never = rt.event(0).unwrap();
    assert!(never.query().unwrap(), "an event never recorded counts as complete");
    never.synchronize().unwrap();

    let n = 128;
    let a = rt.from_slice(&ramp(n * n, 0.01, 0.0), [n, n], 0).unwrap();
    let e0 = s.record().unwrap();
    let out = rt.empty(DType::F32, [n, n], 0).unwrap();
    rt.execute_on(&s, &Op::MatMul { trans_a: false, trans_b: false }, &[&a, &a], &[&out]).unwrap();
    let e1 = s.record().unwrap();
    s.synchronize().unwrap();
    assert!(e0.query().unwrap() && e1.query().unwrap(), "events before a synchronize are complete after it");
    let d = e1.elapsed_since(&e0).expect("elapsed between two completed events");
    assert!(d.as_secs_f64() >= 0.0);
    // An unrecorded event has no time.
    assert!(e1.elapsed_since(&never).is_err(), "elapsed from an event never recorded");
    assert!(never.elapsed_since(&e0).is_err(), "elapsed to an event never recorded");

    // Incomplete: recorded on a blocked stream.
    g.block(0, s.id());
    let e2 = s.record().unwrap();
    assert!(!e2.query().unwrap(), "an event behind blocked work reports complete");
    assert!(e2.elapsed_since(&e0).is_err(), "elapsed to an incomplete event");
    assert!(e0.elapsed_since(&e2).is_err(), "elapsed from an incomplete event");
    g.open().unwrap();
    e2.synchronize().unwrap();
    assert!(e2.query().unwrap());
    e2.elapsed_since(&e1).expect("elapsed once complete");

    // Re-recording an event moves it to the new end of the stream.
    e0.record(&s).unwrap();
    s.synchronize().unwrap();
    assert!(e0.query().unwrap());
    e0.elapsed_since(&e2).expect("elapsed after a re-record");

    // Recording on the default stream completes at once.
    let d0 = rt.default_stream(0).unwrap();
    let e3 = d0.record().unwrap();
    assert!(e3.query().unwrap());
});

// ---- 5. asynchronous errors ----

fn bad_gather(rt: &Runtime, s: &runtime::Stream) -> (runtime::ExecReport, Tensor) {
    let data = rt.from_slice(&ramp(12, 1.0, 0.0), [4, 3], 0).unwrap();
    // Validation sees dtypes and shapes only; index 99 is out of range for 4 rows.
    let idx = rt.from_slice(&[1i64, 99], [2], 0).unwrap();
    let out = rt.empty(DType::F32, [2, 3], 0).unwrap();
    let r = rt.execute_on(s, &Op::Gather { axis: 0 }, &[&data, &idx], &[&out]).expect("execute only queues the op");
    (r, out)
}

on_every_backend!(a_failure_of_queued_work_surfaces_at_the_next_synchronize, |b| {
    let rt = common::runtime(&b);
    let s = rt.stream(0).unwrap();
    let ok_before = rt.run(&Op::Relu, &[&rt.from_slice(&[1f32, -1.], [2], 0).unwrap()]).unwrap();
    drop(ok_before);
    let (r, _out) = bad_gather(&rt, &s);
    assert!(r.elapsed.is_none());
    match s.synchronize() {
        Err(Error::Async { op, stream, seq, source }) => {
            let msg = source.to_string();
            assert_eq!(op, "Gather");
            assert_eq!(seq, r.seq, "the error names another submission");
            assert_eq!(stream, s.to_string(), "the error names another stream");
            if b.name() == "acl" {
                // Ascend gathers through IndexSelect over the data laid twice (indices
                // shifted by the axis length): the device names its kernel, not the index.
                assert!(msg.contains("aclnnIndexSelect"), "{msg}");
            } else {
                assert!(msg.contains("99"), "{msg}");
            }
            let text = Error::Async { op, stream, seq, source }.to_string();
            assert!(text.contains(&format!("#{}", r.seq)), "{text}");
        }
        other => panic!("expected an asynchronous Gather error, got {other:?}"),
    }
    s.synchronize().expect("an asynchronous error is reported once");
    // The stream still works afterwards.
    let x = rt.from_slice(&[1f32, -2., 3.], [3], 0).unwrap();
    let y = {
        let _scope = rt.stream_scope(&s);
        rt.run(&Op::Relu, &[&x]).unwrap().remove(0)
    };
    s.synchronize().unwrap();
    assert_eq!(host(&y).as_slice().unwrap(), &[1., 0., 3.]);
    // The same op on the default stream fails at once, synchronously.
    let d = rt.default_stream(0).unwrap();
    let data = rt.from_slice(&ramp(12, 1.0, 0.0), [4, 3], 0).unwrap();
    let idx = rt.from_slice(&[99i64], [1], 0).unwrap();
    let out = rt.empty(DType::F32, [1, 3], 0).unwrap();
    assert!(rt.execute_on(&d, &Op::Gather { axis: 0 }, &[&data, &idx], &[&out]).is_err());
});

#[test]
fn an_asynchronous_error_names_the_stream_as_the_runtime_does() {
    // Device 1 of the backend is the runtime's device 0.
    let cfg = RuntimeConfig { cpu_devices: 2, devices: Some(vec![1]), ..RuntimeConfig::default() };
    let rt = npurt::Runtime::with_config(cfg).unwrap();
    let s = rt.stream(0).unwrap();
    let (r, _out) = bad_gather(&rt, &s);
    match s.synchronize() {
        Err(Error::Async { stream, seq, .. }) => {
            assert_eq!(seq, r.seq);
            assert_eq!(stream, s.to_string(), "error and report name the stream differently (report: {})", r.stream);
        }
        other => panic!("expected an asynchronous error, got {other:?}"),
    }
}

// ---- 6. batches ----

on_every_backend!(a_batch_on_a_user_stream_matches_one_by_one_execution, |b: Arc<dyn Backend>| {
    let rt = common::runtime(&b);
    let (m, k) = (32, 48);
    let x = rt.from_slice(&ramp(m * k, 0.1, 0.0), [m, k], 0).unwrap();
    let w = rt.from_slice(&ramp(k * k, 0.01, 0.2), [k, k], 0).unwrap();
    let make = |rt: &Runtime| -> Vec<Task> {
        let o1 = rt.empty(DType::F32, [m, k], 0).unwrap();
        let o2 = rt.empty(DType::F32, [m, k], 0).unwrap();
        let o3 = rt.empty(DType::F32, [m, k], 0).unwrap();
        let o4 = rt.empty(DType::F32, [m, k], 0).unwrap();
        vec![
            Task { op: Op::Scale { factor: -2.0 }, inputs: vec![x.clone()], outputs: vec![o1.clone()] },
            // Reads the previous task's output: order within the batch matters.
            Task { op: Op::Add, inputs: vec![o1, x.clone()], outputs: vec![o2.clone()] },
            Task {
                op: Op::MatMul { trans_a: false, trans_b: false },
                inputs: vec![o2, w.clone()],
                outputs: vec![o3.clone()],
            },
            Task { op: Op::Gelu(npurt::GeluApprox::Tanh), inputs: vec![o3], outputs: vec![o4] },
        ]
    };
    // One by one on the default stream.
    let serial = make(&rt);
    for t in &serial {
        let ins: Vec<&Tensor> = t.inputs.iter().collect();
        let outs: Vec<&Tensor> = t.outputs.iter().collect();
        let r = rt.execute(&t.op, &ins, &outs).unwrap();
        assert!(r.elapsed.is_some());
    }
    let s = rt.stream(0).unwrap();
    let batch = make(&rt);
    let reports = {
        let _scope = rt.stream_scope(&s);
        rt.execute_batch(&batch).unwrap()
    };
    assert_eq!(reports.len(), batch.len());
    for (i, r) in reports.iter().enumerate() {
        assert!(r.elapsed.is_none(), "task {i} of an async batch reports a time");
        assert_eq!(&*r.stream, s.to_string().as_str());
        assert_eq!(r.op, batch[i].op.name());
        if i > 0 {
            assert!(r.seq > reports[i - 1].seq, "submission numbers increase within a batch");
        }
    }
    s.synchronize().unwrap();
    for (i, (a, b)) in batch.iter().zip(&serial).enumerate() {
        assert_close(&host(&a.outputs[0]), &host(&b.outputs[0]), &format!("task {i}"));
    }
    // On the default stream a batch is synchronous and timed.
    let sync = make(&rt);
    let reports = rt.execute_batch(&sync).unwrap();
    assert!(reports.iter().all(|r| r.elapsed.is_some()));
    assert_close(&host(&sync[3].outputs[0]), &host(&serial[3].outputs[0]), "default-stream batch");
});

on_every_backend!(an_invalid_task_fails_the_whole_batch_before_anything_runs, |b: Arc<dyn Backend>| {
    let rt = common::runtime(&b);
    let s = rt.stream(0).unwrap();
    let x = rt.from_slice(&ramp(64, 1.0, 0.5), [8, 8], 0).unwrap();
    let y = rt.from_slice(&ramp(15, 1.0, 0.5), [3, 5], 0).unwrap();
    let o1 = rt.zeros(DType::F32, [8, 8], 0).unwrap();
    let o2 = rt.zeros(DType::F32, [8, 8], 0).unwrap();
    let tasks = vec![
        Task { op: Op::Scale { factor: 2.0 }, inputs: vec![x.clone()], outputs: vec![o1.clone()] },
        // Inner dimensions 8 and 3 differ.
        Task {
            op: Op::MatMul { trans_a: false, trans_b: false },
            inputs: vec![x.clone(), y.clone()],
            outputs: vec![o2.clone()],
        },
    ];
    let e = {
        let _scope = rt.stream_scope(&s);
        rt.execute_batch(&tasks).unwrap_err()
    };
    match &e {
        Error::Invalid { op, msg, .. } => {
            assert_eq!(*op, "MatMul");
            assert!(msg.contains("inner"), "{msg}");
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
    s.synchronize().unwrap();
    assert!(host(&o1).iter().all(|v| *v == 0.0), "the valid task of a rejected batch ran");
    // A task whose output has the wrong shape is rejected as well.
    let wrong = rt.zeros(DType::F32, [4, 4], 0).unwrap();
    let tasks = vec![
        Task { op: Op::Scale { factor: 2.0 }, inputs: vec![x.clone()], outputs: vec![o1.clone()] },
        Task { op: Op::Relu, inputs: vec![x.clone()], outputs: vec![wrong] },
    ];
    let e = {
        let _scope = rt.stream_scope(&s);
        rt.execute_batch(&tasks).unwrap_err()
    };
    assert!(matches!(e, Error::Invalid { op, .. } if op == Op::Relu.name()), "{e:?}");
    s.synchronize().unwrap();
    assert!(host(&o1).iter().all(|v| *v == 0.0), "the valid task of a rejected batch ran");
});

// ---- 7. threads ----

on_every_backend!(eight_threads_on_their_own_streams_match_serial_execution, |b: Arc<dyn Backend>| {
    let rt = common::runtime(&b);
    let (m, k, n) = (16, 64, 32);
    // Shared read-only inputs.
    let w = rt.from_slice(&ramp(k * n, 0.01, 0.0), [k, n], 0).unwrap();
    let bias = rt.from_slice(&ramp(n, 0.1, 0.05), [n], 0).unwrap();
    let work = |rt: &Runtime, x: &Tensor| -> Tensor {
        let mut y = x.clone();
        for _ in 0..3 {
            let h = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&y, &w]).unwrap().remove(0);
            let h = rt.run(&Op::Add, &[&h, &bias]).unwrap().remove(0);
            let h = rt.run(&Op::Relu, &[&h]).unwrap().remove(0);
            // Back to [m, k] for the next round.
            let h = rt.run(&Op::MatMul { trans_a: false, trans_b: true }, &[&h, &w]).unwrap().remove(0);
            y = rt.run(&Op::Softmax { axis: -1 }, &[&h]).unwrap().remove(0);
        }
        y
    };
    let inputs: Vec<Tensor> =
        (0..8).map(|t| rt.from_slice(&ramp(m * k, 0.01 * (t + 1) as f32, t as f32), [m, k], 0).unwrap()).collect();
    let serial: Vec<ArrayD<f32>> = inputs.iter().map(|x| host(&work(&rt, x))).collect();
    let parallel: Vec<ArrayD<f32>> = std::thread::scope(|sc| {
        let handles: Vec<_> = inputs
            .iter()
            .map(|x| {
                let rt = rt.clone();
                let work = &work;
                sc.spawn(move || {
                    let s = rt.stream(0).unwrap();
                    let mut last = None;
                    for _ in 0..4 {
                        let y = {
                            let _scope = rt.stream_scope(&s);
                            work(&rt, x)
                        };
                        last = Some(y);
                    }
                    s.synchronize().unwrap();
                    host(&last.unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker thread")).collect()
    });
    for (i, (p, s)) in parallel.iter().zip(&serial).enumerate() {
        assert_close(p, s, &format!("thread {i}"));
    }
    let st = rt.pool_stats(0).unwrap();
    assert_eq!(st.total_bytes, st.in_use_bytes + st.cached_bytes);
});

// ---- 8. scoped current stream ----

on_every_backend!(the_scoped_stream_is_current_until_the_guard_drops, |b: Arc<dyn Backend>| {
    let rt = common::runtime(&b);
    let x = rt.from_slice(&[1f32, -2., 3., -4.], [4], 0).unwrap();
    let y = rt.empty(DType::F32, [4], 0).unwrap();
    let def = rt.current_stream(0).unwrap();
    assert!(!def.is_async());
    let r = rt.execute(&Op::Relu, &[&x], &[&y]).unwrap();
    assert!(r.elapsed.is_some(), "the default stream is synchronous and timed");
    assert_eq!(&*r.stream, def.to_string().as_str());

    let s1 = rt.stream(0).unwrap();
    let s2 = rt.stream(0).unwrap();
    {
        let _g1 = rt.stream_scope(&s1);
        let cur = rt.current_stream(0).unwrap();
        assert_eq!(cur.id(), s1.id());
        assert!(cur.is_async());
        let r = rt.execute(&Op::Relu, &[&x], &[&y]).unwrap();
        assert!(r.elapsed.is_none(), "work on a scoped user stream is queued");
        assert_eq!(&*r.stream, s1.to_string().as_str());
        {
            let _g2 = rt.stream_scope(&s2);
            assert_eq!(rt.current_stream(0).unwrap().id(), s2.id());
            let r = rt.execute(&Op::Relu, &[&x], &[&y]).unwrap();
            assert_eq!(&*r.stream, s2.to_string().as_str());
            // A scope of another runtime does not change this one's current stream.
            let other = common::runtime(&b);
            let os = other.stream(0).unwrap();
            let _g3 = other.stream_scope(&os);
            assert_eq!(rt.current_stream(0).unwrap().id(), s2.id());
            assert_eq!(other.current_stream(0).unwrap().id(), os.id());
        }
        assert_eq!(rt.current_stream(0).unwrap().id(), s1.id(), "the inner scope did not restore the outer one");
        // Another thread has its own current stream.
        std::thread::scope(|sc| {
            sc.spawn(|| assert!(!rt.current_stream(0).unwrap().is_async(), "scopes leaked to another thread"));
        });
    }
    let cur = rt.current_stream(0).unwrap();
    assert!(!cur.is_async(), "the default stream is not current again");
    assert_eq!(cur.id(), def.id());
    let r = rt.execute(&Op::Relu, &[&x], &[&y]).unwrap();
    assert!(r.elapsed.is_some());
    assert_eq!(host(&y).as_slice().unwrap(), &[1., 0., 3., 0.]);
    // A scope for device 0 does not make it current for another device.
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
});

// ---- 9. max_streams ----

on_every_backend!(max_streams_limits_live_user_streams, |b: Arc<dyn Backend>| {
    let rt = Runtime::with_backend(b.clone(), RuntimeConfig { max_streams: 2, ..RuntimeConfig::default() }).unwrap();
    let s1 = rt.stream(0).unwrap();
    let s2 = rt.stream(0).unwrap();
    let e = rt.stream(0).unwrap_err();
    assert!(e.to_string().contains("max_streams"), "{e}");
    assert!(e.to_string().contains('2'), "{e}");
    // The default stream does not count and is always there.
    assert!(!rt.default_stream(0).unwrap().is_async());
    // A clone is the same stream, not a new one.
    let s1b = s1.clone();
    drop(s1);
    assert!(rt.stream(0).is_err(), "a clone kept the stream alive");
    drop(s1b);
    let s3 = rt.stream(0).expect("a stream slot frees when the last handle drops");
    assert_ne!(s3.id(), s2.id());
    assert!(rt.stream(0).is_err());
    // A stream held by a scope guard is alive while the guard lives.
    drop(s3);
    let s4 = rt.stream(0).unwrap();
    let g = rt.stream_scope(&s4);
    drop(s4);
    assert!(rt.stream(0).is_err(), "the current stream of a live scope was destroyed");
    drop(g);
    rt.stream(0).expect("the scope released its stream");
    // Zero is not a valid limit.
    let e = Runtime::with_backend(b, RuntimeConfig { max_streams: 0, ..RuntimeConfig::default() }).unwrap_err();
    assert!(e.to_string().contains("max_streams"), "{e}");
});

// ---- 10. several devices ----

#[test]
fn three_logical_devices() {
    let cfg = RuntimeConfig { cpu_devices: 3, ..RuntimeConfig::default() };
    let rt = npurt::Runtime::with_config(cfg).unwrap();
    assert_eq!(rt.device_count(), 3);
    let n = 64;
    let data = ramp(n, 1.0, 0.25);
    let x0 = rt.from_slice(&data, [n], 0).unwrap();
    let x1 = rt.from_slice(&data, [n], 1).unwrap();
    assert_eq!((x0.device(), x1.device()), (0, 1));
    let s1 = rt.stream(1).unwrap();
    assert_eq!(s1.device(), 1);
    let y1 = rt.empty(DType::F32, [n], 1).unwrap();
    let r = rt.execute_on(&s1, &Op::Scale { factor: 2.0 }, &[&x1], &[&y1]).unwrap();
    assert!(r.device.ends_with(":1"), "{}", r.device);
    s1.synchronize().unwrap();
    let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    assert_eq!(host(&y1).as_slice().unwrap(), &want[..]);
    // A scope of device 1 applies to work on device 1 only.
    {
        let _scope = rt.stream_scope(&s1);
        assert_eq!(rt.current_stream(1).unwrap().id(), s1.id());
        assert!(!rt.current_stream(0).unwrap().is_async());
        let z1 = rt.run(&Op::Relu, &[&x1]).unwrap().remove(0);
        assert_eq!(z1.device(), 1);
        let z0 = rt.run(&Op::Relu, &[&x0]).unwrap().remove(0);
        assert_eq!(z0.device(), 0);
        assert_eq!(host(&z1), host(&z0));
    }
    // Mixing devices in one op is a validation error naming the operand.
    let e = rt.run(&Op::Add, &[&x0, &x1]).unwrap_err();
    match &e {
        Error::Invalid { op, msg, .. } => {
            assert_eq!(*op, "Add");
            assert!(msg.contains("input 1"), "{msg}");
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
    // So is running device-1 tensors on a stream of device 0.
    let s0 = rt.stream(0).unwrap();
    let e = rt.execute_on(&s0, &Op::Scale { factor: 2.0 }, &[&x1], &[&y1]).unwrap_err();
    assert!(matches!(&e, Error::Invalid { msg, .. } if msg.contains("input 0")), "{e:?}");
    let y0 = rt.empty(DType::F32, [n], 0).unwrap();
    let e = rt.execute_on(&s1, &Op::Scale { factor: 2.0 }, &[&x1], &[&y0]).unwrap_err();
    assert!(matches!(&e, Error::Invalid { msg, .. } if msg.contains("output 0")), "{e:?}");
    // Copies between devices.
    let moved = rt.to_device(&y1, 2).unwrap();
    assert_eq!(moved.device(), 2);
    assert_eq!(host(&moved).as_slice().unwrap(), &want[..]);
    let back = rt.to_device(&moved, 0).unwrap();
    assert_eq!(host(&back).as_slice().unwrap(), &want[..]);
    // A strided view is copied densely.
    let m = rt.from_slice(&ramp(12, 1.0, 0.0), [3, 4], 0).unwrap();
    let mt = m.transpose(0, 1).unwrap();
    let mt1 = rt.to_device(&mt, 1).unwrap();
    assert_eq!(mt1.dims(), &[4, 3]);
    assert_eq!(host(&mt1), host(&mt));
    // Events and streams do not cross devices.
    let e0 = s0.record().unwrap();
    assert!(s1.wait(&e0).is_err());
    assert!(e0.record(&s1).is_err());
    let e1 = s1.record().unwrap();
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert!(e1.elapsed_since(&e0).is_err());
    // Device 3 does not exist.
    assert!(rt.stream(3).is_err());
    assert!(rt.from_slice(&data, [n], 3).is_err());
    // Each device has its own pool.
    assert!(rt.pool_stats(1).unwrap().in_use_bytes > 0);
    assert!(rt.pool_stats(2).unwrap().in_use_bytes > 0);
}

// ---- 11. a failing job does not hang its stream ----

/// `Add` launched straight through the backend: with one input it is refused before
/// anything runs; with two, an injected fault makes the kernel panic on the worker.
#[test]
fn a_panicking_kernel_on_a_user_stream_is_reported_and_the_stream_keeps_working() {
    let cpu = Arc::new(backend_cpu::CpuBackend::new(backend_cpu::CpuConfig::default()).expect("cpu backend"));
    let rt = Runtime::with_backend(cpu.clone(), RuntimeConfig::default()).expect("runtime");
    let b = rt.backend().clone();
    let Some(add) = b.kernels().iter().find(|k| k.name.starts_with("add.reference")).cloned() else {
        panic!(
            "the CPU backend has no reference Add kernel: {:?}",
            b.kernels().iter().map(|k| k.name.clone()).collect::<Vec<_>>()
        )
    };
    let s = rt.stream(0).unwrap();
    let x = rt.from_slice(&[1f32, 2., 3., 4.], [4], 0).unwrap();
    let out = rt.empty(DType::F32, [4], 0).unwrap();
    let arg = |t: &Tensor| runtime::TensorArg {
        ptr: DevicePtr(t.data_ptr()),
        dtype: t.dtype(),
        layout: Arc::new(runtime::Layout::contiguous(t.dims().to_vec())),
    };
    let args = runtime::LaunchArgs {
        op: Op::Add,
        inputs: vec![arg(&x)],
        outputs: vec![arg(&out)],
        workspace: None,
        seq: 777,
        threads: 1,
        prepacked: None,
    };
    let e = b.launch(0, &add, args.clone(), s.id()).unwrap_err();
    assert!(matches!(&e, Error::Invalid { op: "Add", msg, .. } if msg.contains("expects 2 inputs")), "{e:?}");
    cpu.inject_fault(&add.name, 1, backend_cpu::Fault::Panic);
    let args = runtime::LaunchArgs { inputs: vec![arg(&x), arg(&x)], ..args };
    b.launch(0, &add, args, s.id()).expect("the launch is only queued");
    // Work queued behind the failed job: an event and a stream waiting for it.
    let ev = s.record().unwrap();
    let s2 = rt.stream(0).unwrap();
    s2.wait(&ev).unwrap();
    let y2 = {
        let _scope = rt.stream_scope(&s2);
        rt.run(&Op::Scale { factor: 2.0 }, &[&x]).unwrap().remove(0)
    };
    let (sa, s2a) = (s.clone(), s2.clone());
    let (r, r2) = sync_within(60, move || (sa.synchronize(), s2a.synchronize()));
    match r {
        Err(Error::Async { op, stream, seq, source }) => {
            let msg = source.to_string();
            assert_eq!(stream, s.to_string(), "the error names another stream");
            assert!(msg.contains("panicked"), "{msg}");
            // Named by the launch when the backend passes it on, else by its place in the stream.
            match op.as_str() {
                "Add" => assert_eq!(seq, 777),
                o => assert_eq!((o, seq), (backend_cpu::stream::UNNAMED_JOB, 1)),
            }
        }
        other => panic!("expected the panic as an asynchronous error, got {other:?}"),
    }
    r2.expect("the waiting stream did not fail");
    assert!(ev.query().unwrap(), "the event behind the failed job was not reached");
    assert_eq!(host(&y2).as_slice().unwrap(), &[2., 4., 6., 8.]);
    s.synchronize().expect("the failure is reported once");
    // The stream still runs work.
    let y = {
        let _scope = rt.stream_scope(&s);
        rt.run(&Op::Relu, &[&rt.from_slice(&[-1f32, 5.], [2], 0).unwrap()]).unwrap().remove(0)
    };
    s.synchronize().unwrap();
    assert_eq!(host(&y).as_slice().unwrap(), &[0., 5.]);
}

fn cpu_runtime() -> Runtime {
    let b = npurt::cpu_backend(&RuntimeConfig::default()).expect("cpu backend");
    Runtime::with_backend(b, RuntimeConfig::default()).expect("runtime")
}

/// Runs `f` on its own thread; fails (instead of hanging) if it has not returned in `secs` s.
fn sync_within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let slot = Arc::new(std::sync::Mutex::new(None));
    let out = slot.clone();
    finishes_within(secs, "synchronize", move || {
        *out.lock().unwrap() = Some(f());
    });
    let v = slot.lock().unwrap().take();
    v.expect("the guarded closure returned")
}

#[test]
fn events_and_streams_of_another_runtime_are_rejected_without_hanging() {
    // Two runtimes, each over a CPU backend of its own.
    let (a, b) = (cpu_runtime(), cpu_runtime());
    let sb = b.stream(0).unwrap();
    let ea = a.default_stream(0).unwrap().record().unwrap();
    let e = ea.record(&sb).unwrap_err();
    assert!(matches!(&e, Error::Device { msg: m, stream: Some(_), .. } if m.contains("another")), "{e:?}");
    let e = sb.wait(&ea).unwrap_err();
    assert!(matches!(&e, Error::Device { msg: m, stream: Some(_), .. } if m.contains("another runtime")), "{e:?}");
    let eb = sb.record().unwrap();
    assert!(eb.elapsed_since(&ea).is_err());
    // The refused record left the event as it was: waiting for it returns.
    let r = sync_within(60, move || ea.synchronize().and_then(|_| ea.query()));
    assert!(r.unwrap(), "the event of the refused record is not complete");
    sb.synchronize().unwrap();
}

use common::gate;
