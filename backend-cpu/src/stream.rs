//! Streams as in-order work queues served by one worker thread each, and events.
//!
//! A job that fails, by returning an error or by panicking, completes as failed: the
//! worker catches the panic, keeps the first failure for the next [`WorkQueue::synchronize`]
//! as [`runtime::Error::Async`] (op, stream, submission number and message) and goes on
//! with the next job, so the stream stays usable and events recorded after the failed job
//! are still reached.

use crate::error::CpuError;
use crate::pool::JoinedPool;
use runtime::StreamId;
use runtime::error::panic_message;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// The id of every device's default (synchronous) stream.
pub const DEFAULT_STREAM: StreamId = StreamId(0);

pub type Job = Box<dyn FnOnce() -> Result<(), runtime::Error> + Send>;

/// The op name given to a failed job submitted without one.
pub const UNNAMED_JOB: &str = "queued job";

/// A job with what its failure is reported as.
struct Queued {
    job: Job,
    op: &'static str,
    /// Submission number reported with a failure.
    seq: u64,
}

#[derive(Default)]
struct Progress {
    submitted: u64,
    completed: u64,
    /// First failure since the last synchronisation.
    error: Option<runtime::Error>,
    /// The worker thread has exited; nothing queued will run any more.
    stopped: bool,
}

/// A user stream: jobs run in submission order on a dedicated worker thread.
pub struct WorkQueue {
    pub label: String,
    tx: Mutex<Option<Sender<Queued>>>,
    state: Arc<(Mutex<Progress>, Condvar)>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

/// A user stream: its queue and a one-thread pool for launches whose thread budget is 1
/// (so concurrent graph nodes do not oversubscribe the cores).
pub(crate) struct UserStream {
    pub(crate) queue: WorkQueue,
    pub(crate) solo: Arc<JoinedPool>,
}

impl UserStream {
    /// User stream `id` of device `device`, with its worker thread and one-thread pool.
    pub(crate) fn new(device: usize, id: u64) -> Result<UserStream, CpuError> {
        let queue = WorkQueue::new(format!("cpu:{device}/stream{id}"))?;
        let solo = JoinedPool::new(1, move |_| format!("npurt-cpu{device}-s{id}"), None)?;
        Ok(UserStream { queue, solo: Arc::new(solo) })
    }
}

/// Runs one job; a panic or an error becomes the job's [`runtime::Error::Async`].
fn run_job(q: Queued, stream: &str) -> Result<(), runtime::Error> {
    let Queued { job, op, seq } = q;
    match catch_unwind(AssertUnwindSafe(job)) {
        Ok(Ok(())) => Ok(()),
        // Already names its op, stream and submission.
        Ok(Err(e @ runtime::Error::Async { .. })) => Err(e),
        Ok(Err(e)) => {
            Err(runtime::Error::Async { op: op.to_string(), stream: stream.to_string(), seq, source: Arc::new(e) })
        }
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            // Dropping the payload runs foreign code too; a panic there must not stop the worker.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            log::error!("{op} (submission #{seq}) on {stream} panicked: {msg}");
            let source = Arc::new(CpuError::JobPanicked(msg));
            Err(runtime::Error::Async { op: op.to_string(), stream: stream.to_string(), seq, source })
        }
    }
}

/// Marks the queue stopped when the worker thread exits, however it exits, so that
/// `synchronize` never waits for jobs that will not run.
struct Stopped(Arc<(Mutex<Progress>, Condvar)>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let (m, cv) = &*self.0;
        m.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
        cv.notify_all();
    }
}

impl WorkQueue {
    /// A queue whose worker runs each job on its own thread; jobs choose their own
    /// thread pool (the device's, or the queue's single-thread one).
    pub fn new(label: String) -> Result<WorkQueue, CpuError> {
        let (tx, rx) = channel::<Queued>();
        let state: Arc<(Mutex<Progress>, Condvar)> = Arc::default();
        let st = state.clone();
        let stream = label.clone();
        let worker = std::thread::Builder::new()
            .name(label.clone())
            .spawn(move || {
                let _stopped = Stopped(st.clone());
                for q in rx {
                    let res = run_job(q, &stream);
                    let (m, cv) = &*st;
                    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(e) = res {
                        g.error.get_or_insert(e);
                    }
                    g.completed += 1;
                    cv.notify_all();
                }
            })
            .map_err(|e| CpuError::WorkerGone(format!("{label}: {e}")))?;
        Ok(WorkQueue { label, tx: Mutex::new(Some(tx)), state, worker: Mutex::new(Some(worker)) })
    }

    /// Queues a job; returns its position (1-based) in the stream. A failure of the job
    /// that names no op is reported as [`UNNAMED_JOB`] with this position.
    pub fn submit(&self, job: Job) -> Result<u64, CpuError> {
        self.enqueue(job, UNNAMED_JOB, None)
    }

    /// Queues a job that runs `op`, submission `seq` of the runtime; a failure of the job
    /// that names no op (a panic, or an error other than [`runtime::Error::Async`]) is
    /// reported with these. Returns the job's position (1-based) in the stream.
    pub fn submit_op(&self, op: &'static str, seq: u64, job: Job) -> Result<u64, CpuError> {
        self.enqueue(job, op, Some(seq))
    }

    fn enqueue(&self, job: Job, op: &'static str, seq: Option<u64>) -> Result<u64, CpuError> {
        let (m, _) = &*self.state;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            return Err(CpuError::WorkerGone(self.label.clone()));
        };
        let position = g.submitted + 1;
        tx.send(Queued { job, op, seq: seq.unwrap_or(position) })
            .map_err(|_| CpuError::WorkerGone(self.label.clone()))?;
        g.submitted = position;
        Ok(position)
    }

    /// Waits until every job submitted so far has run; returns (and clears) the first
    /// error. Never waits for a worker that has stopped: jobs it will not run are
    /// reported as failed.
    pub fn synchronize(&self) -> Result<(), runtime::Error> {
        let (m, cv) = &*self.state;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        let target = g.submitted;
        while g.completed < target && !g.stopped {
            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(e) = g.error.take() {
            return Err(e);
        }
        if g.completed < target {
            let seq = g.completed + 1;
            // Reported once: the lost jobs count as done.
            g.completed = target;
            return Err(runtime::Error::Async {
                op: UNNAMED_JOB.to_string(),
                stream: self.label.clone(),
                seq,
                source: Arc::new(CpuError::WorkerGone(self.label.clone())),
            });
        }
        Ok(())
    }

    /// Waits like [`synchronize`](Self::synchronize) but leaves the error in place: the
    /// caller learns that the stream failed, and whoever synchronises the stream itself
    /// still gets the error (a device-wide wait must not take it from a stream's owner).
    pub fn wait_all(&self) -> Result<(), runtime::Error> {
        let (m, cv) = &*self.state;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        let target = g.submitted;
        while g.completed < target && !g.stopped {
            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(e) = &g.error {
            return Err(e.clone());
        }
        if g.completed < target {
            return Err(runtime::Error::Async {
                op: UNNAMED_JOB.to_string(),
                stream: self.label.clone(),
                seq: g.completed + 1,
                source: Arc::new(CpuError::WorkerGone(self.label.clone())),
            });
        }
        Ok(())
    }

    /// Stops accepting work, lets the worker drain and joins it.
    pub fn shutdown(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[derive(Default)]
struct EventState {
    /// Bumped by every record.
    recorded: u64,
    /// Highest record generation reached.
    reached: u64,
    time: Option<Instant>,
}

/// An event: a generation counter reached when the stream gets past the record point.
#[derive(Default)]
pub struct CpuEvent {
    state: Mutex<EventState>,
    cv: Condvar,
}

impl CpuEvent {
    /// Starts a new record; returns the generation to complete.
    pub fn begin_record(&self) -> u64 {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        g.recorded += 1;
        g.recorded
    }
    /// Records a generation whose completion `submit` queues (it is given the
    /// generation). When `submit` fails the event is left as it was, so that nothing
    /// waits for a generation no stream will reach; until it returns, waiters see the
    /// event as it was before.
    pub fn record_with<E>(&self, submit: impl FnOnce(u64) -> Result<(), E>) -> Result<(), E> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let generation = g.recorded + 1;
        submit(generation)?;
        g.recorded = generation;
        Ok(())
    }
    /// Records a generation reached at once (a record on a synchronous stream).
    pub fn record_now(&self) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        g.recorded += 1;
        g.reached = g.recorded;
        g.time = Some(Instant::now());
        self.cv.notify_all();
    }
    /// Marks generation `gen` reached now.
    pub fn complete(&self, generation: u64) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if generation > g.reached {
            g.reached = generation;
            g.time = Some(Instant::now());
        }
        self.cv.notify_all();
    }
    /// The generation a waiter registered now must see.
    pub fn target(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).recorded
    }
    pub fn is_complete(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        g.reached >= g.recorded
    }
    /// Blocks until generation `target` is reached.
    pub fn wait_for(&self, target: u64) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while g.reached < target {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
    /// When the latest record was reached, if it was.
    pub fn time(&self) -> Option<Instant> {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if g.reached >= g.recorded && g.recorded > 0 { g.time } else { None }
    }
}
