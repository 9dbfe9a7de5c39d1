//! Helpers shared by the tests of npurt's crates, so that no test copies them.
//!
//! * [`cli`] — where the `npurt` binary is, for tests outside its package.
//! * [`conformance`] — the conformance suite: every op × dtype × tier against the
//!   reference tier, run by each backend's tests ([`conformance_rope`]: its cases of
//!   Rope and of causal and grouped-query Attention).
//! * [`emu`] — the acl-emu harness: find the emulator library, lay out a fake CANN
//!   toolkit whose libraries are the emulator, and call its control functions
//!   (configuration, fault injection, counters of live objects).
//! * [`gate`] — a wrapper backend that holds user streams blocked, so "work still
//!   queued" is a deterministic state.
//! * [`graphs`] — graphs the tests of several crates build.
//! * [`host_backend`] — a minimal backend (host buffers, reference kernels, work run at
//!   once) for the runtime's own pool and stream tests.
//! * [`per_backend!`] — one `#[test]` per backend (`cpu`, `acl_emu`, `cuda`) for a case
//!   written once, over a backend maker the test crate provides.
//! * [`require`] — `NPURT_TEST_REQUIRE`: backends whose absence fails a test instead of
//!   skipping it.
//! * [`rng`] — a deterministic generator for randomised tests.
//! * [`scratch`] — scratch directories of a test process, removed when it exits.
//! * [`finishes_within`] — a deadlock fails the test instead of hanging the run.

pub mod cli;
pub mod conformance;
pub mod conformance_paged;
pub mod conformance_rope;
pub mod decoder_cases;
pub mod emu;
pub mod gate;
pub mod graphs;
pub mod host_backend;
pub mod per_backend;
pub mod require;
pub mod rng;
pub mod scratch;

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on its own thread and fails if it has not returned within `secs` seconds, so
/// that a deadlock fails the test instead of hanging the run.
pub fn finishes_within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            h.join().expect("the guarded thread");
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => panic!("{what}: returned nothing"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hung (no progress for {secs} s)"),
    }
}
