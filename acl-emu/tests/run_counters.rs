//! The run counters (`aclEmuGetRunCounters` / `aclEmuResetRunCounters`) and the modelled
//! clock, driven through acl-sys (its `result` layer) over the built libacl_emu.so, as the
//! backend sees them. The expected modelled durations come from the emulator's own model
//! (`acl_emu::model`), computed here for the same operands.

use acl_emu::model::{CopyDir, Soc};
use acl_sys::fns::aclEmuRunCounters;
use acl_sys::result::{self, aclnn, emulator};
use acl_sys::*;
use runtime::{DType, Op, TensorMeta};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The emulator is one per process: the tests of this binary take turns.
fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

/// The emulator loaded through acl-sys from a fake toolkit directory, initialised, with
/// device 0 bound to the calling thread; `None` (printed) when the library is absent.
fn api(test: &str) -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    let api = API
        .get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            let deps = exe.parent()?;
            let lib =
                [deps.join("libacl_emu.so"), deps.parent()?.join("libacl_emu.so")].into_iter().find(|p| p.is_file())?;
            let dir = npurt_test_support::scratch::dir("acl-emu-counters");
            for n in ["libascendcl.so", "libnnopbase.so", "libopapi.so"] {
                let _ = std::fs::remove_file(dir.join(n));
                std::os::unix::fs::symlink(&lib, dir.join(n)).ok()?;
            }
            let api = Api::load(&LoadConfig { lib_dir: Some(dir), no_system_loader: true }).expect("load emulator");
            // SAFETY: no configuration file.
            match unsafe { result::init(&api, std::ptr::null()) } {
                Ok(()) => {}
                Err(e) if e.code() == Some(codes::ACL_ERROR_REPEAT_INITIALIZE) => {}
                Err(e) => panic!("aclInit: {e}"),
            }
            Some(api)
        })
        .as_ref();
    match api {
        Some(a) => {
            result::set_device(a, 0).expect("aclrtSetDevice");
            Some(a)
        }
        None => {
            eprintln!("SKIP {test}: libacl_emu.so not found next to the test binary");
            None
        }
    }
}

fn counters(api: &Api) -> aclEmuRunCounters {
    emulator::get_run_counters(api).expect("aclEmuGetRunCounters")
}

/// A contiguous ND tensor descriptor of `dims` at `addr`.
fn tensor(api: &Api, dims: &[i64], dt: aclDataType, addr: u64) -> *mut aclTensor {
    // SAFETY: `dims` is readable for the call; the address is device memory the caller
    // keeps allocated while the descriptor is used.
    unsafe {
        aclnn::create_tensor(
            api,
            dims.as_ptr(),
            dims.len() as u64,
            dt,
            std::ptr::null(),
            0,
            ACL_FORMAT_ND,
            dims.as_ptr(),
            dims.len() as u64,
            addr as *mut c_void,
        )
    }
    .expect("aclCreateTensor")
}

fn meta(dims: &[usize]) -> TensorMeta {
    TensorMeta::new(DType::F16, dims.to_vec())
}

/// Modelled milliseconds of `ps` picoseconds, and whether `ms` (an f32 from the emulator) is it.
fn close(ms: f32, ps: u64) -> bool {
    let want = ps as f64 / 1e9;
    ((ms as f64) - want).abs() <= want * 1e-5 + 1e-9
}

/// A device buffer of `bytes`, freed on drop.
struct Dev<'a>(&'a Api, *mut c_void);

impl<'a> Dev<'a> {
    fn new(api: &'a Api, bytes: usize) -> Dev<'a> {
        Dev(api, result::malloc(api, bytes, ACL_MEM_MALLOC_HUGE_FIRST).expect("aclrtMalloc"))
    }
    fn at(&self, offset: usize) -> u64 {
        self.1 as u64 + offset as u64
    }
}

impl Drop for Dev<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`, freed once, after the streams using it were synchronised.
        let _ = unsafe { result::free(self.0, self.1) };
    }
}

/// Queues `relu` over `n` f16 values at `x` into `y` on `s`: one phase 1 and one phase 2.
///
/// # Safety
/// `x` and `y` are device ranges of `2 n` bytes that stay allocated until `s` has run it.
unsafe fn relu(api: &Api, n: i64, x: u64, y: u64, s: aclrtStream) {
    let (tx, ty) = (tensor(api, &[n], ACL_FLOAT16, x), tensor(api, &[n], ACL_FLOAT16, y));
    // SAFETY: live descriptors; no workspace (relu asks for none); per this function's contract.
    unsafe {
        let (ws, ex) = aclnn::relu_get_workspace_size(api, tx, ty).expect("phase 1");
        assert_eq!(ws, 0);
        aclnn::relu(api, null_mut(), 0, ex, s).expect("phase 2");
        aclnn::destroy_tensor(api, tx).unwrap();
        aclnn::destroy_tensor(api, ty).unwrap();
    }
}

/// Queues an f16 `[m, m] x [m, m]` product (a, b, out at `base`, `base + 2m²`, `base +
/// 4m²`, the workspace at `ws`) on `s`.
///
/// # Safety
/// The ranges are device memory that stays allocated until `s` has run it.
unsafe fn matmul(api: &Api, m: i64, base: u64, ws: u64, s: aclrtStream) {
    let sz = (2 * m * m) as u64;
    let d = [m, m];
    let (a, b, o) = (
        tensor(api, &d, ACL_FLOAT16, base),
        tensor(api, &d, ACL_FLOAT16, base + sz),
        tensor(api, &d, ACL_FLOAT16, base + 2 * sz),
    );
    // SAFETY: live descriptors, a workspace as large as asked for; this function's contract.
    unsafe {
        let (n, ex) = aclnn::matmul_get_workspace_size(api, a, b, o, 0).expect("phase 1");
        assert!(n <= 1 << 16, "workspace of {n} bytes");
        aclnn::matmul(api, ws as *mut c_void, n, ex, s).expect("phase 2");
        for t in [a, b, o] {
            aclnn::destroy_tensor(api, t).unwrap();
        }
    }
}

fn soc() -> Soc {
    // The emulator's default SoC (ACL_EMU_SOC is not set by these tests).
    Soc::of(&std::env::var("ACL_EMU_SOC").unwrap_or_else(|_| "Ascend910A".into()))
}

fn relu_ps(n: usize) -> u64 {
    soc().kernel(&Op::Relu, &[meta(&[n])], &[meta(&[n])], false).ps
}

fn matmul_ps(m: usize) -> u64 {
    let op = Op::MatMul { trans_a: false, trans_b: false };
    soc().kernel(&op, &[meta(&[m, m]), meta(&[m, m])], &[meta(&[m, m])], false).ps
}

#[test]
fn counters_move_as_the_calls_made_and_reset_to_zero() {
    let _one = serial();
    let Some(api) = api("counters_move_as_the_calls_made_and_reset_to_zero") else { return };
    emulator::reset_run_counters(api).unwrap();
    assert_eq!(counters(api), aclEmuRunCounters::default(), "a reset zeroes everything");

    let buf = Dev::new(api, 1 << 20);
    let ws = Dev::new(api, 1 << 16);
    let mut pinned: *mut c_void = null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { api.aclrtMallocHost().unwrap()(&mut pinned, 8192) }, 0);
    let c = counters(api);
    assert_eq!((c.allocations, c.allocated_bytes), (3, (1 << 20) + (1 << 16) + 8192));
    let s = result::create_stream(api).unwrap();

    let host = vec![0u8; 4096];
    let mut back = vec![0u8; 4096];
    // SAFETY: the device ranges are inside `buf`; the host buffers are live for the calls;
    // `pinned` is 8192 bytes of aclrtMallocHost memory that outlives the stream's work.
    unsafe {
        result::memcpy(api, buf.1, 4096, host.as_ptr().cast(), 4096, ACL_MEMCPY_HOST_TO_DEVICE).unwrap();
        result::memcpy_async(api, buf.at(8192) as *mut c_void, 1024, pinned, 1024, ACL_MEMCPY_HOST_TO_DEVICE, s)
            .unwrap();
        relu(api, 1024, buf.at(0), buf.at(4096), s);
        matmul(api, 16, buf.at(16384), ws.at(0), s);
        result::memcpy_async(
            api,
            buf.at(65536) as *mut c_void,
            2048,
            buf.at(0) as *const c_void,
            2048,
            ACL_MEMCPY_DEVICE_TO_DEVICE,
            s,
        )
        .unwrap();
        result::memcpy_async(api, pinned, 512, buf.at(0) as *const c_void, 512, ACL_MEMCPY_DEVICE_TO_HOST, s).unwrap();
        result::synchronize_stream(api, s).unwrap();
        result::memcpy(
            api,
            back.as_mut_ptr().cast(),
            4096,
            buf.at(4096) as *const c_void,
            4096,
            ACL_MEMCPY_DEVICE_TO_HOST,
        )
        .unwrap();
    }
    // A failed phase 1 is a call too; a rejected copy is not a copy.
    let bad = tensor(api, &[3], ACL_BF16, buf.at(0));
    // SAFETY: live descriptors; the call fails (BF16 on the 910) without queuing anything.
    assert!(unsafe { aclnn::relu_get_workspace_size(api, bad, bad) }.is_err() || soc().bf16);
    // SAFETY: the count exceeds destMax: refused before anything is read.
    assert!(unsafe { result::memcpy(api, buf.1, 1, host.as_ptr().cast(), 2, ACL_MEMCPY_HOST_TO_DEVICE) }.is_err());
    // SAFETY: a live descriptor, destroyed once.
    unsafe { aclnn::destroy_tensor(api, bad) }.unwrap();

    let c = counters(api);
    assert_eq!((c.phase1_calls, c.phase2_calls), (3, 2), "one phase 1 and one phase 2 per op, plus the failed phase 1");
    assert_eq!((c.h2d_copies, c.h2d_bytes), (2, 4096 + 1024));
    assert_eq!((c.d2h_copies, c.d2h_bytes), (2, 512 + 4096));
    assert_eq!((c.d2d_copies, c.d2d_bytes), (1, 2048));
    assert_eq!(c.synchronizations, 1);
    assert_eq!(c.replays, 0, "nothing was captured");
    assert!(c.modelled_ns > 0 && c.modelled_cube_ns > 0 && c.modelled_vector_ns > 0 && c.modelled_copy_ns > 0, "{c:?}");

    emulator::reset_run_counters(api).unwrap();
    assert_eq!(counters(api), aclEmuRunCounters::default(), "a reset zeroes everything");
    // SAFETY: the stream is idle and not used again; the pinned buffer is freed once.
    unsafe {
        result::destroy_stream(api, s).unwrap();
        assert_eq!(api.aclrtFreeHost().unwrap()(pinned), 0);
    }
    // A synchronous copy costs its bytes over PCIe plus the fixed cost, on the host's clock.
    // SAFETY: inside `buf`; the host buffer is live.
    unsafe { result::memcpy(api, buf.1, 4096, host.as_ptr().cast(), 4096, ACL_MEMCPY_HOST_TO_DEVICE) }.unwrap();
    assert_eq!(counters(api).modelled_ns, soc().copy(CopyDir::HostToDevice, 4096).ps / 1000);
}

#[test]
fn a_record_of_the_wrong_size_is_refused() {
    let _one = serial();
    let Some(api) = api("a_record_of_the_wrong_size_is_refused") else { return };
    let f = api.aclEmuGetRunCounters().unwrap();
    let mut c = aclEmuRunCounters::default();
    // SAFETY: a valid record; the size passed is smaller than it, so nothing is written.
    let code = unsafe { f(&mut c, 8) };
    assert_eq!(code, codes::ACL_ERROR_INVALID_PARAM);
    assert_eq!(c, aclEmuRunCounters::default());
}

#[test]
fn an_objects_record_of_the_wrong_size_is_refused() {
    use acl_sys::emu::EmuCounters;
    let mut c = EmuCounters::default();
    // SAFETY: a valid record; the size passed is smaller than it, so nothing is written.
    let code = unsafe { acl_emu::aclEmuCounters(&mut c, 8) };
    assert_eq!(code, codes::ACL_ERROR_INVALID_PARAM);
    assert_eq!(c, EmuCounters::default());
    // SAFETY: a valid, writable record of the size passed.
    assert_eq!(unsafe { acl_emu::aclEmuCounters(&mut c, std::mem::size_of::<EmuCounters>()) }, 0);
}

#[test]
fn kernels_on_one_stream_add_up_and_streams_advance_independently() {
    let _one = serial();
    let Some(api) = api("kernels_on_one_stream_add_up_and_streams_advance_independently") else { return };
    let buf = Dev::new(api, 1 << 20);
    let ws = Dev::new(api, 1 << 16);
    let (s1, s2) = (result::create_stream(api).unwrap(), result::create_stream(api).unwrap());
    let ev: Vec<aclrtEvent> = (0..6).map(|_| result::create_event(api).unwrap()).collect();
    let elapsed = |a: usize, b: usize| {
        // SAFETY: live events, recorded and completed (the streams were synchronised).
        unsafe { result::event_elapsed_time(api, ev[a], ev[b]) }.unwrap()
    };
    let (m, n) = (128usize, 1024usize);
    let (mm, rl) = (matmul_ps(m), relu_ps(n));
    assert!(mm > rl, "the product ({mm} ps) is the longer kernel here (relu {rl} ps)");

    // One stream: e0, product, e1, relu, e2.
    emulator::reset_run_counters(api).unwrap();
    // SAFETY: the ranges are inside `buf` / `ws` (the product's three 32 KiB operands at
    // 0, relu's at 128 KiB and 256 KiB), which outlive the synchronisation below.
    unsafe {
        result::record_event(api, ev[0], s1).unwrap();
        matmul(api, m as i64, buf.at(0), ws.at(0), s1);
        result::record_event(api, ev[1], s1).unwrap();
        relu(api, n as i64, buf.at(128 << 10), buf.at(256 << 10), s1);
        result::record_event(api, ev[2], s1).unwrap();
        result::synchronize_stream(api, s1).unwrap();
    }
    assert!(close(elapsed(0, 1), mm), "product: {} ms, modelled {mm} ps", elapsed(0, 1));
    assert!(close(elapsed(1, 2), rl), "relu: {} ms, modelled {rl} ps", elapsed(1, 2));
    assert!(close(elapsed(0, 2), mm + rl), "two kernels on one stream add up: {} ms", elapsed(0, 2));
    assert!(elapsed(2, 0) < 0.0, "backwards is negative");
    assert_eq!(counters(api).modelled_ns, (mm + rl) / 1000);

    // Two streams: the product on s1 and relu on s2 overlap; the run lasts the longer one.
    emulator::reset_run_counters(api).unwrap();
    // SAFETY: as above.
    unsafe {
        result::record_event(api, ev[0], s1).unwrap();
        result::record_event(api, ev[3], s2).unwrap();
        matmul(api, m as i64, buf.at(0), ws.at(0), s1);
        relu(api, n as i64, buf.at(128 << 10), buf.at(256 << 10), s2);
        result::record_event(api, ev[1], s1).unwrap();
        result::record_event(api, ev[4], s2).unwrap();
        // s2 then waits for the product and runs relu again: it starts where s1 ended.
        result::stream_wait_event(api, s2, ev[1]).unwrap();
        relu(api, n as i64, buf.at(128 << 10), buf.at(384 << 10), s2);
        result::record_event(api, ev[5], s2).unwrap();
        result::synchronize_stream(api, s1).unwrap();
        result::synchronize_stream(api, s2).unwrap();
    }
    assert!(close(elapsed(0, 1), mm), "s1 alone: {} ms", elapsed(0, 1));
    assert!(close(elapsed(3, 4), rl), "s2 advances independently of s1: {} ms", elapsed(3, 4));
    assert!(close(elapsed(0, 3), 0), "both streams start at the reset");
    assert!(close(elapsed(1, 5), rl), "after the wait s2 continues from the event: {} ms", elapsed(1, 5));
    assert!(close(elapsed(3, 5), mm + rl), "s2's end is the event's time plus relu: {} ms", elapsed(3, 5));
    assert_eq!(counters(api).modelled_ns, (mm + rl) / 1000, "the run lasts until the last stream's end");

    // SAFETY: idle streams and events, destroyed once.
    unsafe {
        for e in ev {
            result::destroy_event(api, e).unwrap();
        }
        result::destroy_stream(api, s1).unwrap();
        result::destroy_stream(api, s2).unwrap();
    }
}

/// f16 values as bytes, and back.
fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect()
}
fn f16_values(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
}

// A capture records the launches without running them; each replay runs them again on the
// data then in place, counts one replay and costs the replay's modelled time; the capture
// protocol is checked with CANN's codes; work other than aclnn launches is refused on a
// stream being captured, and a capture ends with its stream.
#[test]
fn captured_launches_replay_in_order() {
    let _one = serial();
    let Some(api) = api("captured_launches_replay_in_order") else { return };
    let buf = Dev::new(api, 1 << 16);
    let s = result::create_stream(api).unwrap();
    let (x, y, z) = (buf.at(0), buf.at(4096), buf.at(8192));
    let put = |at: u64, v: &[f32]| {
        let b = f16_bytes(v);
        // SAFETY: `at` is inside `buf` with room for `b`; the host buffer is live for the call.
        unsafe {
            result::memcpy(api, at as *mut c_void, b.len(), b.as_ptr().cast(), b.len(), ACL_MEMCPY_HOST_TO_DEVICE)
        }
        .unwrap();
    };
    let get = |at: u64| {
        let mut b = vec![0u8; 8];
        // SAFETY: as above, device to host.
        unsafe { result::memcpy(api, b.as_mut_ptr().cast(), 8, at as *const c_void, 8, ACL_MEMCPY_DEVICE_TO_HOST) }
            .unwrap();
        f16_values(&b)
    };
    let code = |r: Result<(), AclError>| r.err().and_then(|e| e.code());
    put(x, &[-1.0, 2.0, -3.0, 4.0]);
    put(y, &[9.0; 4]);
    put(z, &[9.0; 4]);
    // SAFETY (this block): `s` is a live stream; every range is inside `buf`, which
    // outlives the stream's work; instances are destroyed once.
    unsafe {
        let cap = |st| result::capture::capture_begin(api, st, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
        assert_eq!(code(cap(null_mut())), Some(codes::ACL_ERROR_INVALID_PARAM), "the default stream");
        let bad_mode = result::capture::capture_begin(api, s, aclmdlRICaptureMode(7));
        assert_eq!(code(bad_mode), Some(codes::ACL_ERROR_INVALID_PARAM));
        assert_eq!(code(result::capture::capture_end(api, s).map(drop)), Some(codes::ACL_ERROR_RT_STREAM_NOT_CAPTURED));
        cap(s).unwrap();
        assert_eq!(code(cap(s)), Some(codes::ACL_ERROR_RT_STREAM_CAPTURED), "captured twice");
        let (st, ri) = result::capture::capture_get_info(api, s).unwrap();
        assert_eq!(st, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
        assert!(!ri.is_null());
        relu(api, 4, x, y, s);
        relu(api, 4, y, z, s);
        let copy =
            result::memcpy_async(api, z as *mut c_void, 8, x as *const c_void, 8, ACL_MEMCPY_DEVICE_TO_DEVICE, s);
        assert_eq!(code(copy), Some(codes::ACL_ERROR_RT_FEATURE_NOT_SUPPORT), "only aclnn launches are captured");
        let ri = result::capture::capture_end(api, s).unwrap();
        result::synchronize_stream(api, s).unwrap();
        assert_eq!((get(y), get(z)), (vec![9.0; 4], vec![9.0; 4]), "captured, not run");
        let st = result::capture::capture_get_info(api, s).unwrap().0;
        assert_eq!(st, ACL_MODEL_RI_CAPTURE_STATUS_NONE);

        emulator::reset_run_counters(api).unwrap();
        result::capture::execute_async(api, ri, s).unwrap();
        result::synchronize_stream(api, s).unwrap();
        let c = counters(api);
        assert_eq!((get(y), get(z)), (vec![0.0, 2.0, 0.0, 4.0], vec![0.0, 2.0, 0.0, 4.0]));
        assert_eq!((c.replays, c.phase1_calls, c.phase2_calls), (1, 0, 0), "{c:?}");
        let launch = acl_emu::model::REPLAYED_LAUNCH_PS + relu_ps(4) - acl_emu::model::LAUNCH_PS;
        let want = acl_emu::model::REPLAY_PS + 2 * launch;
        assert!(c.modelled_ns.abs_diff(want / 1000) <= 1, "modelled {} ns, want {} ns", c.modelled_ns, want / 1000);
        // A replay reads the data in place at its turn, in order.
        put(x, &[5.0, -6.0, 7.0, -8.0]);
        result::capture::execute_async(api, ri, s).unwrap();
        result::synchronize_stream(api, s).unwrap();
        assert_eq!(get(z), vec![5.0, 0.0, 7.0, 0.0]);
        assert_eq!(counters(api).replays, 2);
        result::capture::destroy(api, ri).unwrap();
        let again = result::capture::destroy(api, ri);
        assert_eq!(code(again), Some(codes::ACL_ERROR_RT_PARAM_INVALID), "destroyed twice");
        assert_eq!(code(result::capture::execute_async(api, ri, s)), Some(codes::ACL_ERROR_RT_PARAM_INVALID));
        // A stream that waits on an event recorded in the capture joins it; the capture ends
        // only once it has joined back. Its work replays in order with the first stream's.
        let (s2, fork, join) = (
            result::create_stream(api).unwrap(),
            result::create_event(api).unwrap(),
            result::create_event(api).unwrap(),
        );
        put(x, &[-1.0, 2.0, -3.0, 4.0]);
        cap(s).unwrap();
        result::record_event(api, fork, s).unwrap();
        result::stream_wait_event(api, s2, fork).unwrap();
        assert_eq!(result::capture::capture_get_info(api, s2).unwrap().0, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
        relu(api, 4, x, y, s2);
        assert_eq!(code(result::capture::capture_end(api, s).map(drop)), Some(codes::ACL_ERROR_RT_STREAM_UNJOINED));
        assert_eq!(result::capture::capture_get_info(api, s2).unwrap().0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
        cap(s).unwrap();
        result::record_event(api, fork, s).unwrap();
        result::stream_wait_event(api, s2, fork).unwrap();
        relu(api, 4, x, y, s2);
        result::record_event(api, join, s2).unwrap();
        result::stream_wait_event(api, s, join).unwrap();
        relu(api, 4, y, z, s);
        let ri = result::capture::capture_end(api, s).unwrap();
        put(z, &[9.0; 4]);
        result::capture::execute_async(api, ri, s).unwrap();
        result::synchronize_stream(api, s).unwrap();
        assert_eq!(get(z), vec![0.0, 2.0, 0.0, 4.0], "the joined stream's relu ran before the first stream's");
        result::capture::destroy(api, ri).unwrap();
        result::destroy_stream(api, s2).unwrap();
        result::destroy_event(api, fork).unwrap();
        result::destroy_event(api, join).unwrap();
        // A capture ends with its stream.
        let s2 = result::create_stream(api).unwrap();
        cap(s2).unwrap();
        relu(api, 4, x, y, s2);
        result::destroy_stream(api, s2).unwrap();
        result::destroy_stream(api, s).unwrap();
    }
}
