//! Which public types may cross or be shared between threads (checked at compile time), and
//! that the shared ones stay correct when used from several threads at once: one user
//! stream and its events fed by many threads, one tensor read by many threads, one runtime
//! allocating and freeing from many threads. (Concurrent runs of one compiled graph are
//! tests/concurrent.rs; the mixed workload is tests/soak.rs.)

use npurt::{Event, Op, RuntimeConfig, Stream, Tensor};
use runtime::Runtime;
use runtime::graph::{CompiledGraph, Graph};

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}

#[test]
fn the_shared_types_are_send_and_sync() {
    send_sync::<Runtime>();
    send_sync::<npurt::Runtime>();
    send_sync::<Tensor>();
    send_sync::<Stream>();
    send_sync::<Event>();
    send_sync::<CompiledGraph>();
    send_sync::<Graph>();
    send_sync::<runtime::Pool>();
    send_sync::<npurt::RuntimeConfig>();
    send_sync::<npurt::Error>();
    // The embedder caches compiled graphs per shape and takes `&mut self`: one per thread,
    // or behind a lock; it may move between threads.
    send::<npurt::embed::Embedder>();
}

fn runtime() -> Runtime {
    let b = npurt::cpu_backend(&RuntimeConfig::default()).expect("cpu backend");
    Runtime::with_backend(b, RuntimeConfig::default()).expect("runtime")
}

/// Four threads queue Scale chains on one user stream and record events after their own
/// work; every thread's result is its own input scaled, and the stream drains.
#[test]
fn one_stream_fed_from_many_threads() {
    let rt = runtime();
    let s = rt.stream(0).unwrap();
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (rt, s) = (&rt, &s);
            sc.spawn(move || {
                for i in 0..50 {
                    let v: Vec<f32> = (0..256).map(|k| (k + t * 1000 + i) as f32).collect();
                    let x = rt.from_slice(&v, [256], 0).unwrap();
                    let y = scale_on(rt, s, &x);
                    let ev = s.record().unwrap();
                    ev.synchronize().unwrap();
                    assert!(ev.query().unwrap());
                    let got = y.to_ndarray::<f32>().unwrap();
                    assert!(got.iter().zip(&v).all(|(g, w)| *g == w * 0.5), "thread {t} step {i}");
                }
            });
        }
    });
    s.synchronize().unwrap();
}

/// `Scale { 0.5 }` of `x`, queued on `s`.
fn scale_on(rt: &Runtime, s: &Stream, x: &Tensor) -> Tensor {
    let y = rt.empty(x.dtype(), x.shape().clone(), 0).unwrap();
    rt.execute_on(s, &Op::Scale { factor: 0.5 }, &[x], &[&y]).unwrap();
    y
}

/// One tensor read by eight threads at once while each allocates and frees its own: all
/// reads agree, and the pool ends with nothing in use.
#[test]
fn one_tensor_read_by_many_threads_and_the_pool_shared() {
    let rt = runtime();
    let v: Vec<f32> = (0..4096).map(|k| k as f32 - 2048.0).collect();
    let x = rt.from_slice(&v, [64, 64], 0).unwrap();
    std::thread::scope(|sc| {
        for t in 0..8 {
            let (rt, x, v) = (&rt, &x, &v);
            sc.spawn(move || {
                for i in 0..40 {
                    let y = rt.run(&Op::Relu, &[x]).unwrap().remove(0);
                    let got = y.to_ndarray::<f32>().unwrap();
                    assert!(got.iter().zip(v).all(|(g, w)| *g == w.max(0.0)), "thread {t} step {i}");
                    let scratch = rt.empty(npurt::DType::U8, [1 + (t * 977 + i * 131) % 70_000], 0).unwrap();
                    drop(scratch);
                }
            });
        }
    });
    drop(x);
    let st = rt.pool_stats(0).unwrap();
    assert_eq!(st.in_use_bytes, 0, "{st}");
}
