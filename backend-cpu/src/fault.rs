//! Faults injected into launches for tests of failure handling
//! ([`CpuBackend::inject_fault`](crate::CpuBackend::inject_fault)).

use crate::error::lock;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What an injected fault makes a launch do when it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The kernel panics (with a message naming the kernel).
    Panic,
    /// The kernel returns an error.
    Error,
}

struct FaultRule {
    prefix: String,
    nth: u64,
    seen: u64,
    fault: Fault,
}

/// The faults armed with [`CpuBackend::inject_fault`](crate::CpuBackend::inject_fault);
/// one relaxed load per launch when none is.
#[derive(Default)]
pub(crate) struct Faults {
    armed: AtomicBool,
    rules: Mutex<Vec<FaultRule>>,
}

impl Faults {
    /// Makes the `nth` launch (1-based, counted from now) of a kernel whose name starts
    /// with `prefix` fail with `fault`.
    pub(crate) fn arm(&self, prefix: &str, nth: u64, fault: Fault) {
        let mut rules = lock(&self.rules);
        rules.push(FaultRule { prefix: prefix.to_string(), nth: nth.max(1), seen: 0, fault });
        self.armed.store(true, Ordering::Release);
    }

    /// Whether any fault is armed.
    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// The fault a launch of `kernel` being queued now gets; counts it against every rule.
    pub(crate) fn take(&self, kernel: &str) -> Option<Fault> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut rules = lock(&self.rules);
        let mut hit = None;
        rules.retain_mut(|r| {
            if !kernel.starts_with(r.prefix.as_str()) {
                return true;
            }
            r.seen += 1;
            if r.seen < r.nth {
                return true;
            }
            hit.get_or_insert(r.fault);
            false
        });
        if rules.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
        hit
    }
}
