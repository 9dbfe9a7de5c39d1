//! The runtime's streams, events and asynchronous errors, against the minimal host
//! backend of the test-support crate (wrapped in its gate where "work still queued"
//! must be a state, not a race). What every real backend must also do is tested per
//! backend by the facade's `tests/streams.rs`.

use npurt_test_support::gate::Gate;
use npurt_test_support::host_backend::HostBackend;
use runtime::{Backend, DType, Error, Op, Runtime, RuntimeConfig, Tensor};
use std::sync::Arc;

fn gated() -> (Arc<Gate>, Runtime) {
    let g = Gate::new(HostBackend::shared());
    let rt = Runtime::with_backend(g.clone(), RuntimeConfig::default()).expect("runtime");
    (g, rt)
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().expect("to_ndarray").iter().copied().collect()
}

#[test]
fn queued_work_runs_in_order_and_is_visible_after_synchronize() {
    let (g, rt) = gated();
    let s = rt.stream(0).unwrap();
    let x = rt.from_slice(&[1f32, -2., 3., -4.], [4], 0).unwrap();
    let y = rt.empty(DType::F32, [4], 0).unwrap();
    let z = rt.empty(DType::F32, [4], 0).unwrap();
    g.block(0, s.id());
    let r1 = rt.execute_on(&s, &Op::Relu, &[&x], &[&y]).unwrap();
    let r2 = rt.execute_on(&s, &Op::Scale { factor: 10.0 }, &[&y], &[&z]).unwrap();
    assert!(r1.elapsed.is_none() && r2.elapsed.is_none(), "queued work has no time yet");
    assert!(r2.seq > r1.seq, "submission numbers grow: {} then {}", r1.seq, r2.seq);
    assert_eq!(g.held(), 2, "both launches are still queued");
    g.open().unwrap();
    s.synchronize().unwrap();
    assert_eq!(values(&z), [10., 0., 30., 0.]);
}

#[test]
fn a_failed_launch_on_a_user_stream_is_reported_at_its_synchronize_with_its_submission() {
    let (_g, rt) = gated();
    let s = rt.stream(0).unwrap();
    let data = rt.from_slice(&[1f32, 2., 3., 4., 5., 6.], [3, 2], 0).unwrap();
    let idx = rt.from_slice(&[0i64, 7], [2], 0).unwrap();
    let out = rt.empty(DType::F32, [2, 2], 0).unwrap();
    let r = rt.execute_on(&s, &Op::Gather { axis: 0 }, &[&data, &idx], &[&out]).expect("validation passes");
    match s.synchronize() {
        Err(Error::Async { op, stream, seq, source }) => {
            assert_eq!(op, "Gather");
            assert_eq!(seq, r.seq);
            assert_eq!(stream, s.to_string(), "the runtime names the stream as it prints it");
            assert!(source.to_string().contains('7'), "{source}");
        }
        other => panic!("expected Error::Async, got {other:?}"),
    }
    // Reported once: the stream is usable again.
    s.synchronize().expect("the failure was reported once");
    let y = rt.empty(DType::F32, [3, 2], 0).unwrap();
    rt.execute_on(&s, &Op::Relu, &[&data], &[&y]).unwrap();
    s.synchronize().unwrap();
    assert_eq!(values(&y), [1., 2., 3., 4., 5., 6.]);
}

#[test]
fn an_event_behind_held_work_is_incomplete_and_a_waiting_stream_follows_it() {
    let (g, rt) = gated();
    let (producer, consumer) = (rt.stream(0).unwrap(), rt.stream(0).unwrap());
    let x = rt.from_slice(&[2f32; 8], [8], 0).unwrap();
    let y = rt.empty(DType::F32, [8], 0).unwrap();
    let z = rt.empty(DType::F32, [8], 0).unwrap();
    g.block(0, producer.id());
    rt.execute_on(&producer, &Op::Scale { factor: 3.0 }, &[&x], &[&y]).unwrap();
    let done = producer.record().unwrap();
    assert!(!done.query().unwrap(), "an event behind held work reports complete");
    consumer.wait(&done).unwrap();
    rt.execute_on(&consumer, &Op::Add, &[&y, &x], &[&z]).unwrap();
    assert!(g.is_blocked(0, consumer.id()), "a stream waiting for a held event is held too");
    g.open().unwrap();
    done.synchronize().unwrap();
    assert!(done.query().unwrap());
    consumer.synchronize().unwrap();
    assert_eq!(values(&z), [8f32; 8]);
}

#[test]
fn default_stream_work_and_records_are_complete_on_return() {
    let (_g, rt) = gated();
    let d = rt.default_stream(0).unwrap();
    assert!(!d.is_async());
    let z = rt.zeros(DType::F32, [16], 0).unwrap();
    let e = d.record().unwrap();
    assert!(e.query().unwrap(), "an event recorded on the default stream is complete at once");
    assert_eq!(values(&z), [0f32; 16]);
    let y = rt.empty(DType::F32, [16], 0).unwrap();
    let r = rt.execute(&Op::Scale { factor: 2.0 }, &[&z], &[&y]).unwrap();
    assert!(r.elapsed.is_some(), "default-stream work is timed on return");
    assert_eq!(values(&y), [0f32; 16]);
}

#[test]
fn scopes_nest_restore_and_stay_on_their_thread() {
    let (_g, rt) = gated();
    let (s1, s2) = (rt.stream(0).unwrap(), rt.stream(0).unwrap());
    assert!(!rt.current_stream(0).unwrap().is_async());
    {
        let _a = rt.stream_scope(&s1);
        {
            let _b = rt.stream_scope(&s2);
            assert_eq!(rt.current_stream(0).unwrap().id(), s2.id());
        }
        assert_eq!(rt.current_stream(0).unwrap().id(), s1.id());
        std::thread::scope(|t| {
            t.spawn(|| assert!(!rt.current_stream(0).unwrap().is_async(), "a scope leaked to another thread"));
        });
        // A panic inside a scope unwinds its guard.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _c = rt.stream_scope(&s2);
            panic!("inside a scope");
        }));
        assert!(caught.is_err());
        assert_eq!(rt.current_stream(0).unwrap().id(), s1.id(), "the panicking scope was not restored");
    }
    assert!(!rt.current_stream(0).unwrap().is_async());
}

#[test]
fn max_streams_counts_live_user_streams_only() {
    let b: Arc<dyn Backend> = HostBackend::shared();
    let rt = Runtime::with_backend(b, RuntimeConfig { max_streams: 1, ..RuntimeConfig::default() }).unwrap();
    let s = rt.stream(0).unwrap();
    let e = rt.stream(0).unwrap_err();
    assert!(e.to_string().contains("max_streams"), "{e}");
    drop(s);
    rt.stream(0).expect("the slot frees when the last handle drops");
}
