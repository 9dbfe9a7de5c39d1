//! The rayon pool of a device (and of a user stream's one-thread launches), whose
//! threads are joined when it is dropped and may be pinned to CPUs of their own.

use crate::error::{CpuError, lock};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A rayon pool whose threads are joined when it is dropped. Dropping a rayon pool only
/// tells its threads to exit; a backend that is dropped must not leave threads behind
/// (a short C program that frees its runtime and returns would still see them exiting).
///
/// `Send + Sync`, like the pool it dereferences to. The last owner drops it; if that is
/// one of its own threads (a job holding the last reference), that thread is not joined
/// (it exits once the job returns).
pub(crate) struct JoinedPool {
    pool: ManuallyDrop<rayon::ThreadPool>,
    threads: Vec<JoinHandle<()>>,
}

impl JoinedPool {
    /// A pool of `threads` threads named by `name`, thread `i` pinned to `cpus[i]` when
    /// given (a thread that cannot be pinned runs unpinned, logged at debug level).
    pub(crate) fn new(
        threads: usize,
        name: impl Fn(usize) -> String + 'static,
        cpus: Option<Vec<usize>>,
    ) -> Result<JoinedPool, CpuError> {
        let handles: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let sink = handles.clone();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(name)
            .spawn_handler(move |t| {
                let mut b = std::thread::Builder::new();
                if let Some(n) = t.name() {
                    b = b.name(n.to_string());
                }
                if let Some(size) = t.stack_size() {
                    b = b.stack_size(size);
                }
                let cpu = cpus.as_ref().and_then(|c| c.get(t.index())).copied();
                let h = b.spawn(move || {
                    if let Some(cpu) = cpu
                        && let Err(e) = crate::affinity::pin_current(cpu)
                    {
                        log::debug!("cpu: a pool thread could not be pinned to CPU {cpu}: {e}");
                    }
                    t.run()
                })?;
                lock(&sink).push(h);
                Ok(())
            })
            .build()
            .map_err(|e| CpuError::BadRequest(format!("thread pool: {e}")))?;
        let threads = std::mem::take(&mut *lock(&handles));
        Ok(JoinedPool { pool: ManuallyDrop::new(pool), threads })
    }
}

impl std::ops::Deref for JoinedPool {
    type Target = rayon::ThreadPool;
    fn deref(&self) -> &rayon::ThreadPool {
        &self.pool
    }
}

impl Drop for JoinedPool {
    fn drop(&mut self) {
        // SAFETY: the pool is dropped once, here, and not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.pool) };
        let me = std::thread::current().id();
        for h in self.threads.drain(..) {
            if h.thread().id() != me && h.join().is_err() {
                log::warn!("cpu: a pool thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of this process's threads (Linux: /proc/self/task/*/comm).
    fn thread_names() -> Option<Vec<String>> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        Some(tasks.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok()).collect())
    }

    #[test]
    fn a_dropped_pool_has_joined_its_threads() {
        let Some(before) = thread_names() else {
            println!("skipped: no /proc/self/task to list threads on this system");
            return;
        };
        assert!(!before.iter().any(|n| n.starts_with("jp-test-")));
        // A thread-local whose destructor counts: it runs as its thread exits, before a
        // join of that thread returns.
        static EXITED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        struct CountsExit;
        impl Drop for CountsExit {
            fn drop(&mut self) {
                EXITED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        thread_local! { static GUARD: std::cell::RefCell<Option<CountsExit>> = const { std::cell::RefCell::new(None) }; }
        let pool = JoinedPool::new(3, |i| format!("jp-test-{i}"), None).unwrap();
        // Every thread runs once: each has started (and named itself) by then.
        let ran = pool.broadcast(|c| {
            GUARD.with(|g| *g.borrow_mut() = Some(CountsExit));
            c.index()
        });
        assert_eq!(ran.len(), 3);
        let during = thread_names().unwrap_or_default();
        assert_eq!(during.iter().filter(|n| n.starts_with("jp-test-")).count(), 3, "{during:?}");
        assert_eq!(EXITED.load(std::sync::atomic::Ordering::SeqCst), 0);
        drop(pool);
        // Joined: every thread has exited by the time drop returns, not merely been told to.
        assert_eq!(EXITED.load(std::sync::atomic::Ordering::SeqCst), 3);
        // The kernel drops an exited thread's /proc entry a moment after the join wakes
        // (the tid is cleared before the task is released): the names go, shortly.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let after = thread_names().unwrap_or_default();
            if !after.iter().any(|n| n.starts_with("jp-test-")) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{after:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn pinned_workers_run_on_their_cpus() {
        let Some(cpus) = crate::affinity::allowed_cpus() else {
            println!("skipped: the allowed CPUs cannot be asked on this system");
            return;
        };
        let pool = JoinedPool::new(cpus.len(), |i| format!("jp-pin-{i}"), Some(cpus.clone())).unwrap();
        let seen = pool.broadcast(|c| (c.index(), crate::affinity::allowed_cpus()));
        for (i, allowed) in seen {
            assert_eq!(allowed, Some(vec![cpus[i]]), "worker {i}");
        }
    }
}
