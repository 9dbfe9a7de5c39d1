//! Tearing down with asynchronous work still queued: `aclrtResetDevice` and a structural
//! `aclEmuConfigure` drain the default stream without holding the emulator's tables
//! (which that work locks), and a panicking job is reported with its message. Driven
//! through the exported functions' Rust items.

use acl_emu::error::Fail;
use acl_emu::state::EmuStream;
use acl_emu::*;
use acl_sys::codes::*;
use acl_sys::*;
use npurt_test_support::finishes_within;
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::Mutex;

/// The emulator is one per process: tests that use its tables run one at a time.
static EMU: Mutex<()> = Mutex::new(());

/// Bytes of each queued fill: large enough that several are still queued when the call
/// under test comes.
const FILL: usize = 32 << 20;

/// Queues `n` fills of `FILL` bytes at `p` on the calling thread's default stream, the
/// k-th with value k (1-based); says whether work was still pending after the last.
///
/// # Safety
/// `p` is a device allocation of at least `FILL` bytes.
unsafe fn queue_fills(p: *mut c_void, n: i32) -> bool {
    for k in 1..=n {
        // SAFETY: the emulator's exported function, called with a live allocation.
        assert_eq!(unsafe { aclrtMemsetAsync(p, FILL, k, FILL, null_mut()) }, 0);
    }
    let mut status = ACL_STREAM_STATUS_COMPLETE;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { aclrtStreamQuery(null_mut(), &mut status) }, 0);
    let pending = status == ACL_STREAM_STATUS_NOT_READY;
    if !pending {
        eprintln!("note: the fills finished before the call under test; the race was not exercised this time");
    }
    pending
}

#[test]
fn resetting_a_device_with_work_queued_on_its_default_stream_drains_it_without_deadlock() {
    let _one = EMU.lock().unwrap_or_else(|p| p.into_inner());
    finishes_within(120, "aclrtResetDevice with queued fills", || {
        // SAFETY: the emulator's exported functions with the C API's arguments; every
        // pointer passed is valid for the call.
        unsafe {
            let r = aclInit(null());
            assert!(r == 0 || r == ACL_ERROR_REPEAT_INITIALIZE, "aclInit: {r}");
            assert_eq!(aclrtSetDevice(0), 0);
            let mut p: *mut c_void = null_mut();
            assert_eq!(aclrtMalloc(&mut p, FILL, ACL_MEM_MALLOC_HUGE_FIRST), 0);
            queue_fills(p, 8);
            // The last reset of the device drains its default stream.
            assert_eq!(aclrtResetDevice(0), 0);
            assert_eq!(aclrtSetDevice(0), 0);
            let mut host = vec![0u8; 4096];
            let (hp, n) = (host.as_mut_ptr() as *mut c_void, host.len());
            assert_eq!(aclrtMemcpy(hp, n, p, n, ACL_MEMCPY_DEVICE_TO_HOST), 0);
            assert!(host.iter().all(|&b| b == 8), "the reset did not wait for the queued fills");
            // The device's default stream works after the reset.
            assert_eq!(aclrtMemsetAsync(p, FILL, 9, 64, null_mut()), 0);
            assert_eq!(aclrtSynchronizeStream(null_mut()), 0);
            assert_eq!(aclrtMemcpy(hp, n, p, n, ACL_MEMCPY_DEVICE_TO_HOST), 0);
            assert!(host[..64].iter().all(|&b| b == 9) && host[64] == 8);
            assert_eq!(aclrtFree(p), 0);
            assert_eq!(aclrtResetDevice(0), 0);
        }
    });
}

#[test]
fn reconfiguring_with_work_queued_on_a_default_stream_does_not_deadlock() {
    let _one = EMU.lock().unwrap_or_else(|p| p.into_inner());
    finishes_within(120, "aclEmuConfigure with queued fills", || {
        // SAFETY: as above.
        unsafe {
            let r = aclInit(null());
            assert!(r == 0 || r == ACL_ERROR_REPEAT_INITIALIZE, "aclInit: {r}");
            assert_eq!(aclrtSetDevice(0), 0);
            let mut p: *mut c_void = null_mut();
            assert_eq!(aclrtMalloc(&mut p, FILL, ACL_MEM_MALLOC_HUGE_FIRST), 0);
            queue_fills(p, 4);
            // Many small fills behind the large ones: still queued when the emulator is
            // rebuilt, each locks the tables when it runs.
            for _ in 0..20_000 {
                assert_eq!(aclrtMemsetAsync(p, FILL, 1, 64, null_mut()), 0);
            }
            // Nothing is outstanding once the allocation is freed (fills still queued
            // behind it fail: their memory is gone), so the emulator may be rebuilt.
            assert_eq!(aclrtFree(p), 0);
            let spec = c"devices=2";
            assert_eq!(aclEmuConfigure(spec.as_ptr()), 0);
            let mut count = 0u32;
            assert_eq!(aclrtGetDeviceCount(&mut count), 0);
            assert_eq!(count, 2);
            assert_eq!(aclEmuConfigure(c"devices=1".as_ptr()), 0);
            assert_eq!(aclrtResetDevice(0), 0);
        }
    });
}

#[test]
fn a_panicking_job_is_reported_with_its_message_and_the_stream_keeps_working() {
    let s = EmuStream::new(0, "acl-emu:0/test".into()).expect("stream");
    s.submit(Box::new(|| panic!("index {} out of range", 17))).unwrap();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = ran.clone();
    s.submit(Box::new(move || {
        r.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }))
    .unwrap();
    let s2 = s.clone();
    match finishes_within(60, "synchronize after a panic", move || s2.synchronize()) {
        Err(Fail(code, msg)) => {
            assert_eq!(code, ACL_ERROR_RT_AICORE_EXCEPTION);
            assert!(msg.contains("emulated kernel panicked") && msg.contains("index 17 out of range"), "{msg}");
        }
        Ok(()) => panic!("the panic was not reported"),
    }
    assert!(ran.load(std::sync::atomic::Ordering::SeqCst), "the job behind the panic did not run");
    s.synchronize().expect("reported once");
    s.shutdown();
}
