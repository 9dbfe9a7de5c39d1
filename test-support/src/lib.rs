//! Helpers shared by the tests of npurt's crates, so that no test copies them.
//!
//! * [`emu`] — the acl-emu harness: find the emulator library, lay out a fake CANN
//!   toolkit whose libraries are the emulator, and call its control functions
//!   (configuration, fault injection, counters of live objects).

pub mod emu;
