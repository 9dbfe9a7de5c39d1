//! Streams: creation, destruction, synchronization, status and waits on events.

use crate::error::{Fail, R, fail};
use crate::ffi::{guard, guard_unlocked, h, put};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::sync::atomic::Ordering;

fn create_stream(t: &mut Tables, out: *mut aclrtStream) -> R<()> {
    let d = t.current()?;
    let hd = emu().handle(TAG_STREAM);
    let s = EmuStream::new(d, format!("acl-emu:{d}/stream{hd:#x}"))?;
    // SAFETY: C contract: `out` is NULL or writable (checked by `put`).
    unsafe { put(out, hd as usize as aclrtStream) }?;
    t.streams.insert(hd, s);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError {
    guard("aclrtCreateStream", |t| create_stream(t, stream))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, priority: u32, flag: u32) -> aclError {
    guard("aclrtCreateStreamWithConfig", |t| {
        if priority != 0 {
            log::debug!("acl-emu: stream priority {priority} ignored (reserved)");
        }
        if flag & !0x3f != 0 {
            return fail(ACL_ERROR_INVALID_PARAM, format!("unknown stream flags {flag:#x}"));
        }
        create_stream(t, stream)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStream(stream: aclrtStream) -> aclError {
    guard_unlocked("aclrtDestroyStream", || {
        let s = {
            let mut t = lock(&emu().t);
            // A capture this stream began ends with it; what it recorded is dropped.
            super::capture::stream_destroyed(&mut t, h(stream));
            t.streams.remove(&h(stream)).ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, "unknown stream".into()))?
        };
        let _ = s.synchronize();
        s.shutdown();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError {
    guard_unlocked("aclrtSynchronizeStream", || {
        let s = lock(&emu().t).stream(h(stream))?;
        let r = s.synchronize();
        lock(&emu().t).timeline.host_waits(s.clock.load(Ordering::Relaxed));
        r
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) -> aclError {
    guard("aclrtStreamQuery", |t| {
        let s = t.stream(h(stream))?;
        let v = if s.is_idle() { ACL_STREAM_STATUS_COMPLETE } else { ACL_STREAM_STATUS_NOT_READY };
        // SAFETY: C contract: `status` is NULL or writable.
        unsafe { put(status, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError {
    guard("aclrtStreamWaitEvent", |t| {
        let ev = t.event(h(event))?;
        let s = t.stream(h(stream))?;
        if super::capture::wait_event(t, h(stream), h(event))? {
            return Ok(()); // recorded in a capture (see `capture`)
        }
        let (target, at) = {
            let g = lock(&ev.state);
            (g.recorded, g.modelled_ps)
        };
        s.submit(Box::new(move || {
            ev.wait_for(target);
            Ok(())
        }))?;
        if let Some(at) = at.filter(|_| target > 0) {
            t.timeline.wait_on(&s.clock, at);
        }
        Ok(())
    })
}
