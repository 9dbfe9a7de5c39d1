//! Set-up shared by the tests that drive the built libacl_emu.so through acl-sys's result
//! layer (attention.rs, decoder_ops.rs, incre_flash.rs, masking.rs, rms_norm.rs): a bound
//! device with one 64 KiB allocation and a stream, descriptors made over it and destroyed
//! at the end, copies in and out, phase 2 with the workspace at offset 32 KiB, and the
//! emulator's control handle. Each test file uses a part.
#![allow(dead_code)]

use acl_sys::codes::*;
use acl_sys::result::{self as r, aclnn};
use acl_sys::*;
use npurt_test_support::emu::{Emu, emu_or_skip, fake_toolkit};
use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

/// Byte offset of the workspace in the allocation.
pub const WS: usize = 32 << 10;

/// A bound device with one allocation (64 KiB), a stream, and the descriptors and tensor
/// lists made over it (destroyed by [`close`](Dev::close)). Neither `Send` nor `Sync`
/// (raw handles; one test thread).
pub struct Dev {
    pub api: Api,
    pub base: *mut c_void,
    pub stream: aclrtStream,
    descs: RefCell<Vec<*mut aclTensor>>,
    lists: RefCell<Vec<*mut aclTensorList>>,
}

impl Dev {
    /// The emulator as `soc` (`None`: the SoC it has) with no injected failure, and a
    /// device on it; `None` (a printed SKIP) when the emulator was not built.
    pub fn open(tag: &str, soc: Option<&str>) -> Option<(Dev, Ctl)> {
        let emu = emu_or_skip(tag)?;
        let tk = fake_toolkit(tag, &emu);
        let ctl = Ctl(Emu::open(&emu));
        let how = soc.map_or_else(|| "fail=".to_string(), |s| format!("soc={s};fail="));
        assert_eq!(ctl.configure(&how), 0, "configure the emulator: {how}");
        let api = Api::load(&LoadConfig { lib_dir: Some(tk.join("lib64")), no_system_loader: true }).expect("load");
        // SAFETY: no configuration file.
        match unsafe { r::init(&api, null()) } {
            Ok(()) => {}
            Err(e) if e.code() == Some(ACL_ERROR_REPEAT_INITIALIZE) => {}
            Err(e) => panic!("{e}"),
        }
        r::set_device(&api, 0).unwrap();
        let base = r::malloc(&api, 64 << 10, ACL_MEM_MALLOC_HUGE_FIRST).unwrap();
        let stream = r::create_stream(&api).unwrap();
        Some((Dev { api, base, stream, descs: RefCell::default(), lists: RefCell::default() }, ctl))
    }

    pub fn at(&self, off: usize) -> *mut c_void {
        (self.base as usize + off) as *mut c_void
    }

    /// A contiguous tensor descriptor of `dims` at byte offset `off` of the allocation.
    pub fn tensor(&self, dims: &[i64], dt: aclDataType, off: usize) -> *mut aclTensor {
        self.strided(dims, &[], dt, off)
    }

    /// A tensor descriptor of `dims` with `strides` (contiguous when empty) at byte `off`.
    pub fn strided(&self, dims: &[i64], strides: &[i64], dt: aclDataType, off: usize) -> *mut aclTensor {
        let mut st = vec![1i64; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            st[i] = st[i + 1] * dims[i + 1];
        }
        let st = if strides.is_empty() { st } else { strides.to_vec() };
        let n = dims.len() as u64;
        // SAFETY: the arrays hold `n` values; the address lies inside the allocation.
        let t = unsafe {
            aclnn::create_tensor(
                &self.api,
                dims.as_ptr(),
                n,
                dt,
                st.as_ptr(),
                0,
                ACL_FORMAT_ND,
                dims.as_ptr(),
                n,
                self.at(off),
            )
        }
        .unwrap();
        self.descs.borrow_mut().push(t);
        t
    }

    /// A tensor list of `members` (descriptors of this device), which it then owns: they
    /// go with it.
    pub fn list(&self, members: &[*mut aclTensor]) -> *mut aclTensorList {
        let ptrs: Vec<*const aclTensor> = members.iter().map(|m| m.cast_const()).collect();
        // SAFETY: live descriptors, each in no other list.
        let l = unsafe { aclnn::create_tensor_list(&self.api, ptrs.as_ptr(), ptrs.len() as u64) }.unwrap();
        self.descs.borrow_mut().retain(|t| !members.contains(t));
        self.lists.borrow_mut().push(l);
        l
    }

    pub fn put<T: Copy>(&self, off: usize, v: &[T]) {
        let n = std::mem::size_of_val(v);
        // SAFETY: `v` is `n` readable bytes; the device range lies inside the allocation.
        unsafe { r::memcpy(&self.api, self.at(off), n, v.as_ptr().cast(), n, ACL_MEMCPY_HOST_TO_DEVICE) }.unwrap();
    }

    pub fn get<T: Copy + Default>(&self, off: usize, n: usize) -> Vec<T> {
        let mut v = vec![T::default(); n];
        let b = std::mem::size_of_val(v.as_slice());
        // SAFETY: the stream is synchronised first; `v` is `b` writable bytes.
        unsafe {
            r::synchronize_stream(&self.api, self.stream).unwrap();
            r::memcpy(&self.api, v.as_mut_ptr().cast(), b, self.at(off), b, ACL_MEMCPY_DEVICE_TO_HOST).unwrap();
        }
        v
    }

    /// `n` fp16 values at `off`, widened.
    pub fn get_f16(&self, off: usize, n: usize) -> Vec<f32> {
        self.get::<u16>(off, n).into_iter().map(|b| half::f16::from_bits(b).to_f32()).collect()
    }

    pub fn scalar<T: Copy>(&self, mut v: T, dt: aclDataType) -> *mut aclScalar {
        // SAFETY: `v` is a readable value of `dt`, copied by the call.
        unsafe { aclnn::create_scalar(&self.api, (&mut v as *mut T).cast(), dt) }.unwrap()
    }

    pub fn dims(&self, v: &[i64]) -> *mut aclIntArray {
        // SAFETY: `v` holds `v.len()` values, copied by the call.
        unsafe { aclnn::create_int_array(&self.api, v.as_ptr(), v.len() as u64) }.unwrap()
    }

    /// Phase 2 of `(ws, executor)` on the stream, with the workspace at [`WS`].
    pub fn launch(
        &self,
        run: unsafe fn(&Api, *mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> Result<(), AclError>,
        (ws, ex): (u64, *mut aclOpExecutor),
    ) -> Result<(), AclError> {
        assert!(ws <= WS as u64);
        let w = if ws == 0 { null_mut() } else { self.at(WS) };
        // SAFETY: a fresh executor; the workspace is device memory of `ws` bytes.
        unsafe { run(&self.api, w, ws, ex, self.stream) }
    }

    /// Releases an executor phase 2 did not consume.
    pub fn drop_executor(&self, ex: *mut aclOpExecutor) {
        // SAFETY: a live executor from phase 1, never launched.
        unsafe {
            aclnn::set_executor_repeatable(&self.api, ex).unwrap();
            aclnn::destroy_executor(&self.api, ex).unwrap();
        }
    }

    /// Waits for the stream, then destroys an executor made repeatable (launched or not).
    pub fn drop_repeatable(&self, ex: *mut aclOpExecutor) {
        // SAFETY: a live repeatable executor from phase 1; no launch of it is still queued.
        unsafe {
            r::synchronize_stream(&self.api, self.stream).unwrap();
            aclnn::destroy_executor(&self.api, ex).unwrap();
        }
    }

    /// Waits for the stream, then destroys the lists, the descriptors, the stream and the
    /// allocation, and resets the device.
    pub fn close(self) {
        // SAFETY: everything queued is finished before anything it used goes; each object once.
        unsafe {
            r::synchronize_stream(&self.api, self.stream).unwrap();
            for l in self.lists.take() {
                aclnn::destroy_tensor_list(&self.api, l).unwrap();
            }
            for t in self.descs.take() {
                aclnn::destroy_tensor(&self.api, t).unwrap();
            }
            r::destroy_stream(&self.api, self.stream).unwrap();
            r::free(&self.api, self.base).unwrap();
            r::reset_device(&self.api, 0).unwrap();
        }
    }
}

/// The emulator's control handle. Dropped (a failed test included), it puts back the SoC
/// the process started with (`ACL_EMU_SOC`, else the 910A) and clears the injected
/// failures, so that a later test of the binary that names no SoC sees the emulator's own.
pub struct Ctl(Emu);

impl std::ops::Deref for Ctl {
    type Target = Emu;
    fn deref(&self) -> &Emu {
        &self.0
    }
}

impl Drop for Ctl {
    fn drop(&mut self) {
        let soc = std::env::var("ACL_EMU_SOC").ok().filter(|v| !v.trim().is_empty());
        let _ = self.0.configure(&format!("soc={};fail=", soc.as_deref().unwrap_or("Ascend910A")));
    }
}
