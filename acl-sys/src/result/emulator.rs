//! The emulator's own calls (acl-emu only; a real CANN host exports neither symbol, so
//! both give [`AclError::Missing`] there, which callers read as "no counters").

use super::check;
use crate::fns::aclEmuRunCounters;
use crate::{AclError, Api};

/// `aclEmuGetRunCounters(&counters, sizeof counters)`: what the emulator counted and
/// modelled since its last reset.
pub fn get_run_counters(api: &Api) -> Result<aclEmuRunCounters, AclError> {
    let f = api.aclEmuGetRunCounters()?;
    let mut c = aclEmuRunCounters::default();
    // SAFETY: a valid, writable record of exactly the size passed.
    let code = unsafe { f(&mut c, std::mem::size_of::<aclEmuRunCounters>()) };
    check(api, "aclEmuGetRunCounters", code)?;
    Ok(c)
}

/// `aclEmuResetRunCounters()`: zeroes the counters and restarts the modelled elapsed time.
pub fn reset_run_counters(api: &Api) -> Result<(), AclError> {
    let f = api.aclEmuResetRunCounters()?;
    // SAFETY: no arguments.
    let code = unsafe { f() };
    check(api, "aclEmuResetRunCounters", code)
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn counters(out: *mut aclEmuRunCounters, size: usize) -> i32 {
        if size != std::mem::size_of::<aclEmuRunCounters>() {
            return crate::codes::ACL_ERROR_INVALID_PARAM;
        }
        // SAFETY: the layer passes a valid out-pointer of that size.
        unsafe { (*out).phase2_calls = 7 };
        0
    }

    #[test]
    fn counters_come_back_and_a_real_host_has_none() {
        let api = Api::for_tests();
        // The test program exports no emulator symbol: as on a real CANN host.
        assert!(get_run_counters(&api).unwrap_err().is_missing());
        assert!(reset_run_counters(&api).unwrap_err().is_missing());
        // The emulator's: a fresh table (a resolution, missing or not, is cached).
        let api = Api::for_tests();
        assert!(api.slots.aclEmuGetRunCounters.set(Ok(counters)).is_ok());
        assert_eq!(get_run_counters(&api).unwrap().phase2_calls, 7);
    }
}
