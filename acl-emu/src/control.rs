//! The emulator's own control symbols: `aclEmuConfigure` (devices, memory, SoC, workspace
//! size and fault-injection rules at run time), `aclEmuCounters` (outstanding objects),
//! `aclEmuCallCount` (calls of a symbol), and `aclEmuGetRunCounters` /
//! `aclEmuResetRunCounters` (what a run did: aclnn phases, copies, allocations,
//! synchronisations, and its modelled device time).

use crate::error::{Fail, fail};
use crate::ffi::{put, status};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::emu::EmuCounters;
use acl_sys::fns::aclEmuRunCounters;
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Reconfigures the emulator: `key=value;...` with keys `devices`, `memory`, `soc`,
/// `fail`, `workspace`, `compute` (0: model only). Call counts are reset (the run counters too when the change is
/// structural). Changing devices, memory or the SoC
/// requires that nothing is outstanding (returns ACL_ERROR_INVALID_PARAM otherwise).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuConfigure(spec: *const c_char) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        if spec.is_null() {
            return fail(ACL_ERROR_INVALID_PARAM, "spec is NULL");
        }
        // SAFETY: C contract: a NUL-terminated string.
        let s = unsafe { CStr::from_ptr(spec) }.to_string_lossy().into_owned();
        let mut t = lock(&emu().t);
        let mut cfg = t.cfg.clone();
        cfg.apply(&s).map_err(|e| Fail(ACL_ERROR_INVALID_PARAM, format!("aclEmuConfigure: {e}")))?;
        let structural = cfg.devices != t.cfg.devices || cfg.capacity != t.cfg.capacity || cfg.soc != t.cfg.soc;
        if structural {
            let c = t.counters();
            let busy = c.device_allocations + c.host_allocations + c.streams + c.events + c.executors + c.descriptors;
            if busy > 0 {
                return fail(ACL_ERROR_INVALID_PARAM, format!("aclEmuConfigure: {busy} objects outstanding ({c:?})"));
            }
            let initialized = t.initialized;
            let refs = std::mem::take(&mut t.device_refs);
            let mut nt = Tables::new(cfg)?;
            nt.initialized = initialized;
            nt.device_refs = refs.into_iter().filter(|(d, _)| (*d as usize) < nt.mem.len()).collect();
            let old = std::mem::replace(&mut *t, nt);
            // Dropping the old default streams joins their workers, whose queued jobs lock
            // the tables: only after unlocking.
            drop(t);
            drop(old);
        } else {
            t.cfg = cfg;
            t.calls.clear();
        }
        Ok(())
    })))
}

/// Writes the outstanding-object counters (`size` must be `sizeof(EmuCounters)`, the
/// record of `acl_sys::emu`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuCounters(out: *mut EmuCounters, size: usize) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        let want = std::mem::size_of::<EmuCounters>();
        if size != want {
            return fail(
                ACL_ERROR_INVALID_PARAM,
                format!("aclEmuCounters: the record is {want} bytes, the caller's is {size}"),
            );
        }
        let c = lock(&emu().t).counters();
        // SAFETY: C contract: NULL or writable for `size` bytes (checked equal to the record's).
        unsafe { put(out, c) }
    })))
}

/// How many times `name` was called since the last configuration.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuCallCount(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: C contract: a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    lock(&emu().t).calls.get(&n).copied().unwrap_or(0)
}

/// Writes the run counters (`size` must be `sizeof(aclEmuRunCounters)`): aclnn phase-1
/// and phase-2 calls, copies and their bytes, allocations, synchronisations, replays and
/// the modelled times since the last [`aclEmuResetRunCounters`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuGetRunCounters(counters: *mut aclEmuRunCounters, size: usize) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        let want = std::mem::size_of::<aclEmuRunCounters>();
        if size != want {
            return fail(
                ACL_ERROR_INVALID_PARAM,
                format!("aclEmuGetRunCounters: the record is {want} bytes, the caller's is {size}"),
            );
        }
        let c = lock(&emu().t).run_counters();
        // SAFETY: C contract: NULL or writable for `size` bytes (checked equal to the record's).
        unsafe { put(counters, c) }
    })))
}

/// Zeroes the run counters and restarts the modelled elapsed time at the latest modelled
/// instant (work queued from now on starts no earlier).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuResetRunCounters() -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        lock(&emu().t).reset_run();
        Ok(())
    })))
}
