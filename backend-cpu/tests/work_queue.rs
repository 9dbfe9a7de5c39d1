//! Failing jobs on a CPU stream's work queue: a job that panics or returns an error
//! completes as failed, is reported once at the next synchronisation with op, stream and
//! submission number, and leaves the queue (and events behind it) working.

use backend_cpu::stream::{CpuEvent, UNNAMED_JOB, WorkQueue};
use npurt_test_support::finishes_within;
use runtime::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn queue(label: &str) -> Arc<WorkQueue> {
    Arc::new(WorkQueue::new(label.to_string()).expect("work queue"))
}

fn counter_job(n: &Arc<AtomicUsize>) -> backend_cpu::stream::Job {
    let n = n.clone();
    Box::new(move || {
        n.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

#[test]
fn a_panicking_job_is_reported_at_synchronize_and_the_queue_keeps_working() {
    let q = queue("cpu:0/stream7");
    let ran = Arc::new(AtomicUsize::new(0));
    assert_eq!(q.submit(counter_job(&ran)).unwrap(), 1);
    let seq = q.submit(Box::new(|| panic!("injected kernel fault"))).unwrap();
    assert_eq!(seq, 2);
    // Work queued behind the failed job still runs.
    q.submit(counter_job(&ran)).unwrap();
    let q2 = q.clone();
    match finishes_within(60, "synchronize after a panic", move || q2.synchronize()) {
        Err(Error::Async { op, stream, seq, source }) => {
            let msg = source.to_string();
            assert_eq!(op, UNNAMED_JOB);
            assert_eq!(stream, "cpu:0/stream7");
            assert_eq!(seq, 2, "the error names another submission");
            assert!(msg.contains("panicked") && msg.contains("injected kernel fault"), "{msg}");
        }
        other => panic!("expected an asynchronous error naming the panicking job, got {other:?}"),
    }
    assert_eq!(ran.load(Ordering::SeqCst), 2, "a job next to the failed one did not run");
    q.synchronize().expect("a failure is reported once");
    // The queue accepts and runs new work.
    q.submit(counter_job(&ran)).unwrap();
    q.synchronize().expect("a normal job after the failure");
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

#[test]
fn a_named_job_reports_its_op_and_runtime_submission_number() {
    let q = queue("cpu:1/stream3");
    let pos = q.submit_op("Gather", 41, Box::new(|| panic!("{} out of range", 99))).unwrap();
    assert_eq!(pos, 1, "the position in the stream");
    // A plain error (not already asynchronous) gets the job's name too.
    q.submit_op("Relu", 42, Box::new(|| Err(Error::backend_msg("cpu", "not reported")))).unwrap();
    let q2 = q.clone();
    let e = finishes_within(60, "synchronize", move || q2.synchronize()).unwrap_err();
    match &e {
        Error::Async { op, stream, seq, source } => {
            let msg = source.to_string();
            assert_eq!((op.as_str(), stream.as_str(), *seq), ("Gather", "cpu:1/stream3", 41));
            assert!(msg.contains("99 out of range"), "{msg}");
        }
        other => panic!("expected the Gather panic, got {other:?}"),
    }
    let text = e.to_string();
    assert!(text.contains("Gather") && text.contains("cpu:1/stream3") && text.contains("#41"), "{text}");
    // Only the first failure since the last synchronisation is kept.
    q.synchronize().expect("the second failure is not reported after the first");
    q.submit_op("Relu", 43, Box::new(|| Err(Error::backend_msg("cpu", "bad input")))).unwrap();
    match q.synchronize() {
        Err(Error::Async { op, stream, seq, source }) => {
            let msg = source.to_string();
            assert_eq!((op.as_str(), stream.as_str(), seq), ("Relu", "cpu:1/stream3", 43));
            assert!(msg.contains("bad input"), "{msg}");
        }
        other => panic!("expected the Relu error, got {other:?}"),
    }
}

#[test]
fn an_asynchronous_error_of_a_job_is_reported_as_it_is() {
    let q = queue("cpu:0/stream1");
    let own = Error::Async {
        op: "MatMul".into(),
        stream: "cpu:0/stream1".into(),
        seq: 9,
        source: Arc::new(runtime::Message("kernel: boom".into())),
    };
    let e = own.clone();
    q.submit_op("Add", 5, Box::new(move || Err(e))).unwrap();
    match q.synchronize() {
        Err(Error::Async { op, seq, source, .. }) => {
            let msg = source.to_string();
            assert_eq!((op.as_str(), seq, msg.as_str()), ("MatMul", 9, "kernel: boom"))
        }
        other => panic!("expected the job's own error, got {other:?}"),
    }
}

/// A panic payload whose destructor panics as well.
struct Bomb;
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("payload destructor");
    }
}

#[test]
fn a_panic_payload_that_panics_when_dropped_does_not_stop_the_worker() {
    let q = queue("cpu:0/stream2");
    q.submit(Box::new(|| std::panic::panic_any(Bomb))).unwrap();
    let q2 = q.clone();
    match finishes_within(60, "synchronize", move || q2.synchronize()) {
        Err(Error::Async { seq, source, .. }) => {
            let msg = source.to_string();
            assert_eq!(seq, 1);
            assert!(msg.contains("panicked"), "{msg}");
        }
        other => panic!("expected the panic, got {other:?}"),
    }
    let ran = Arc::new(AtomicUsize::new(0));
    q.submit(counter_job(&ran)).expect("the worker is still there");
    q.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn events_and_waits_behind_a_panicking_job_complete() {
    let producer = queue("cpu:0/stream1");
    let consumer = queue("cpu:0/stream2");
    let ev = Arc::new(CpuEvent::default());
    // Producer: a failing job, then the record of the event.
    producer.submit(Box::new(|| panic!("producer fault"))).unwrap();
    let generation = ev.begin_record();
    let e = ev.clone();
    producer
        .submit(Box::new(move || {
            e.complete(generation);
            Ok(())
        }))
        .unwrap();
    // Consumer: waits for the event, then does its own work.
    let target = ev.target();
    assert_eq!(target, generation);
    let e = ev.clone();
    consumer
        .submit(Box::new(move || {
            e.wait_for(target);
            Ok(())
        }))
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    consumer.submit(counter_job(&ran)).unwrap();
    let (c, p, e) = (consumer.clone(), producer.clone(), ev.clone());
    let (consumer_result, producer_result) = finishes_within(60, "a wait behind a failed job", move || {
        let c = c.synchronize();
        e.wait_for(e.target());
        (c, p.synchronize())
    });
    consumer_result.expect("the consumer itself did not fail");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(ev.is_complete() && ev.time().is_some(), "the event behind the failed job was not reached");
    match producer_result {
        Err(Error::Async { seq: 1, source, .. }) => assert!(source.to_string().contains("producer fault"), "{source}"),
        other => panic!("expected the producer's panic, got {other:?}"),
    }
}

#[test]
fn shutdown_after_a_panic_drains_and_later_submissions_fail_cleanly() {
    let q = queue("cpu:0/stream4");
    let ran = Arc::new(AtomicUsize::new(0));
    q.submit(Box::new(|| panic!("fault before shutdown"))).unwrap();
    q.submit(counter_job(&ran)).unwrap();
    let q2 = q.clone();
    finishes_within(60, "shutdown", move || q2.shutdown());
    assert_eq!(ran.load(Ordering::SeqCst), 1, "shutdown dropped queued work");
    assert!(matches!(q.synchronize(), Err(Error::Async { seq: 1, .. })));
    let e = q.submit(counter_job(&ran)).unwrap_err();
    assert!(e.to_string().contains("cpu:0/stream4"), "{e}");
    q.synchronize().expect("nothing more to report");
}
