//! The modelled timeline: one clock per stream (kept in the stream, an `AtomicU64` of
//! picoseconds changed only under the emulator's lock), the host's clock, and the
//! instant of the last reset of the run counters.
//!
//! Work queued on a stream starts when both the stream and the host have reached it (the
//! host issues it at its current modelled instant) and moves the stream's clock by its
//! cost. A stream waiting on an event moves to the event's timestamp; the host moves to
//! what it synchronises with; a synchronous copy runs on the host's clock. Streams
//! advance independently. The elapsed modelled time is the latest instant any clock
//! reached, from the last reset.

use crate::model::{Cost, Unit};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    host: u64,
    /// The latest instant any clock has reached.
    horizon: u64,
    /// The instant of the last reset.
    base: u64,
    /// Modelled busy time since the reset: Cube, Vector, copies and fills.
    pub cube_ps: u64,
    pub vector_ps: u64,
    pub copy_ps: u64,
    /// The kernels' roofline bounds since the reset, summed over streams
    /// ([`Cost::bound_ps`]).
    pub roofline_ps: u64,
}

impl Timeline {
    fn busy(&mut self, c: Cost) {
        let slot = match c.unit {
            Unit::Cube => &mut self.cube_ps,
            Unit::Vector => &mut self.vector_ps,
            Unit::Copy => &mut self.copy_ps,
        };
        *slot = slot.saturating_add(c.ps);
        self.roofline_ps = self.roofline_ps.saturating_add(c.bound_ps);
    }

    fn reach(&mut self, t: u64) {
        self.horizon = self.horizon.max(t);
    }

    /// Queues `cost` on the stream whose clock is `stream`; its modelled (start, end).
    pub fn run_on(&mut self, stream: &AtomicU64, cost: Cost) -> (u64, u64) {
        let start = stream.load(Ordering::Relaxed).max(self.host);
        let end = start.saturating_add(cost.ps);
        stream.store(end, Ordering::Relaxed);
        self.busy(cost);
        self.reach(end);
        (start, end)
    }

    /// The instant work queued now on the stream starts.
    pub fn start_of(&self, stream: &AtomicU64) -> u64 {
        stream.load(Ordering::Relaxed).max(self.host)
    }

    /// Work on the stream that ends at `end` (a replay, whose span the caller worked
    /// out), keeping its units busy for `busy`.
    pub fn run_until(&mut self, stream: &AtomicU64, end: u64, busy: &[Cost]) {
        let end = end.max(self.start_of(stream));
        stream.store(end, Ordering::Relaxed);
        for c in busy {
            self.busy(*c);
        }
        self.reach(end);
    }

    /// A point on the stream (an event record): the instant the stream reaches it.
    pub fn mark(&mut self, stream: &AtomicU64) -> u64 {
        self.run_on(stream, Cost { ps: 0, unit: Unit::Copy, bound_ps: 0 }).1
    }

    /// The stream waits for an event recorded at `at`.
    pub fn wait_on(&mut self, stream: &AtomicU64, at: u64) {
        let t = stream.load(Ordering::Relaxed).max(self.host).max(at);
        stream.store(t, Ordering::Relaxed);
        self.reach(t);
    }

    /// The host waits until `at` (a stream's clock or an event's timestamp).
    pub fn host_waits(&mut self, at: u64) {
        self.host = self.host.max(at);
        self.reach(self.host);
    }

    /// Synchronous work on the host's clock (`aclrtMemcpy`, `aclrtMemset`).
    pub fn host_runs(&mut self, cost: Cost) {
        self.host = self.host.saturating_add(cost.ps);
        self.busy(cost);
        self.reach(self.host);
    }

    /// Starts a new measurement at the latest instant reached: every clock behind it is
    /// treated as there (work issued from now on starts no earlier).
    pub fn reset(&mut self) {
        self.host = self.host.max(self.horizon);
        self.horizon = self.host;
        self.base = self.host;
        self.cube_ps = 0;
        self.vector_ps = 0;
        self.copy_ps = 0;
        self.roofline_ps = 0;
    }

    /// Modelled time from the last reset to the latest instant reached, picoseconds.
    pub fn elapsed_ps(&self) -> u64 {
        self.horizon - self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(ps: u64) -> Cost {
        Cost { ps, unit: Unit::Vector, bound_ps: ps / 2 }
    }

    #[test]
    fn streams_advance_independently_and_meet_at_events_and_synchronisations() {
        let mut t = Timeline::default();
        let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
        assert_eq!(t.run_on(&a, cost(10)), (0, 10));
        assert_eq!(t.run_on(&a, cost(5)), (10, 15));
        assert_eq!(t.run_on(&b, cost(3)), (0, 3), "another stream starts at 0");
        let e = t.mark(&a);
        assert_eq!(e, 15);
        t.wait_on(&b, e);
        assert_eq!(t.run_on(&b, cost(1)), (15, 16));
        assert_eq!(t.elapsed_ps(), 16);
        // After the host synchronises with a stream, new work starts no earlier.
        t.host_waits(b.load(Ordering::Relaxed));
        let c = AtomicU64::new(0);
        assert_eq!(t.run_on(&c, cost(2)), (16, 18));
        t.host_runs(Cost { ps: 4, unit: Unit::Copy, bound_ps: 0 });
        assert_eq!(t.elapsed_ps(), 20);
        assert_eq!((t.vector_ps, t.copy_ps), (21, 4));
        // Halves of 10, 5, 3, 1 and 2 ps, rounded down: 5 + 2 + 1 + 1 (the 1 ps kernel adds 0).
        assert_eq!(t.roofline_ps, 9, "the kernels' bounds");
        t.reset();
        assert_eq!((t.elapsed_ps(), t.vector_ps), (0, 0));
        assert_eq!(t.run_on(&a, cost(7)), (20, 27), "a reset starts every stream at the latest instant");
        assert_eq!(t.elapsed_ps(), 7);
    }
}
