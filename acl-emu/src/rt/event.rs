//! Events: creation, recording on a stream, status, synchronization and elapsed time.
//! A record takes the stream's modelled instant, so the elapsed time between two events
//! is modelled device time (`crate::clock`), not the host's.

use crate::error::{Fail, R, fail};
use crate::ffi::{guard, guard_unlocked, h, put};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;

fn create_event(t: &mut Tables, out: *mut aclrtEvent) -> R<()> {
    t.current()?;
    let hd = emu().handle(TAG_EVENT);
    // SAFETY: C contract: `out` is NULL or writable (checked by `put`).
    unsafe { put(out, hd as usize as aclrtEvent) }?;
    t.events.insert(hd, Default::default());
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    guard("aclrtCreateEvent", |t| create_event(t, event))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    guard("aclrtCreateEventWithFlag", |t| {
        if flag & !0x7f != 0 {
            return fail(ACL_ERROR_INVALID_PARAM, format!("unknown event flags {flag:#x}"));
        }
        create_event(t, event)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyEvent(event: aclrtEvent) -> aclError {
    guard("aclrtDestroyEvent", |t| {
        t.events.remove(&h(event)).map(|_| ()).ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, "unknown event".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    guard("aclrtRecordEvent", |t| {
        let ev = t.event(h(event))?;
        let s = t.stream(h(stream))?;
        if super::capture::record_event(t, h(stream), h(event)).is_some() {
            return Ok(()); // recorded in the stream's capture (see `capture`)
        }
        let generation = {
            let mut g = lock(&ev.state);
            g.recorded += 1;
            g.recorded
        };
        let done = ev.clone();
        s.submit(Box::new(move || {
            done.complete(generation);
            Ok(())
        }))?;
        let at = t.timeline.mark(&s.clock);
        lock(&ev.state).modelled_ps = Some(at);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) -> aclError {
    guard("aclrtQueryEventStatus", |t| {
        let ev = t.event(h(event))?;
        let g = lock(&ev.state);
        let v = if g.reached >= g.recorded {
            ACL_EVENT_RECORDED_STATUS_COMPLETE
        } else {
            ACL_EVENT_RECORDED_STATUS_NOT_READY
        };
        // SAFETY: C contract: `status` is NULL or writable.
        unsafe { put(status, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    guard_unlocked("aclrtSynchronizeEvent", || {
        let ev = lock(&emu().t).event(h(event))?;
        let target = lock(&ev.state).recorded;
        ev.wait_for(target);
        let at = lock(&ev.state).modelled_ps;
        if let Some(at) = at {
            lock(&emu().t).timeline.host_waits(at);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) -> aclError {
    guard("aclrtEventElapsedTime", |t| {
        // Modelled timestamps, picoseconds.
        let time = |e: aclrtEvent| -> R<u64> {
            let ev = t.event(h(e))?;
            let g = lock(&ev.state);
            match g.modelled_ps {
                Some(x) if g.reached >= g.recorded && g.recorded > 0 => Ok(x),
                _ => fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "event not recorded or not complete"),
            }
        };
        let (a, b) = (time(startEvent)?, time(endEvent)?);
        let v = (b as f64 - a as f64) / 1e9;
        // SAFETY: C contract: `ms` is NULL or writable.
        unsafe { put(ms, v as f32) }
    })
}
