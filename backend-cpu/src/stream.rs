//! Streams as in-order work queues served by one worker thread each, and events.

use crate::error::CpuError;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

pub type Job = Box<dyn FnOnce() -> Result<(), runtime::Error> + Send>;

#[derive(Default)]
struct Progress {
    submitted: u64,
    completed: u64,
    /// First failure since the last synchronisation.
    error: Option<runtime::Error>,
}

/// A user stream: jobs run in submission order on a dedicated worker thread.
pub struct WorkQueue {
    pub label: String,
    tx: Mutex<Option<Sender<Job>>>,
    state: Arc<(Mutex<Progress>, Condvar)>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl WorkQueue {
    /// A queue whose worker runs each job on its own thread; jobs choose their own
    /// thread pool (the device's, or the queue's single-thread one).
    pub fn new(label: String) -> Result<WorkQueue, CpuError> {
        let (tx, rx) = channel::<Job>();
        let state: Arc<(Mutex<Progress>, Condvar)> = Arc::default();
        let st = state.clone();
        let worker = std::thread::Builder::new()
            .name(label.clone())
            .spawn(move || {
                for job in rx {
                    let res = job();
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

    /// Queues a job; returns its position (1-based) in the stream.
    pub fn submit(&self, job: Job) -> Result<u64, CpuError> {
        let (m, _) = &*self.state;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            return Err(CpuError::WorkerGone(self.label.clone()));
        };
        tx.send(job).map_err(|_| CpuError::WorkerGone(self.label.clone()))?;
        g.submitted += 1;
        Ok(g.submitted)
    }

    /// Waits until every job submitted so far has run; returns (and clears) the first error.
    pub fn synchronize(&self) -> Result<(), runtime::Error> {
        let (m, cv) = &*self.state;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        let target = g.submitted;
        while g.completed < target {
            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        match g.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
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
