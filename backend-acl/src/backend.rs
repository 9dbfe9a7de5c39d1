//! [`AclBackend`]: its start and teardown, and the `runtime::Backend` methods, which
//! delegate to [`crate::memory`], [`crate::stream`] and [`crate::kernels`].

use crate::AclConfig;
use crate::device::{self, Dev};
use crate::error::{AclBackendError, Unavailable};
use crate::frozen::{self, FrozenRun};
use crate::kernels::{self, Table};
use crate::memory;
use crate::probe;
use crate::stream::{self, DEFAULT_STREAM};
use acl_sys::Api;
use runtime::backend::allocations::{BadAddress, overlaps};
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// The Ascend backend.
pub struct AclBackend {
    api: Arc<Api>,
    devs: Vec<Dev>,
    table: Table,
    /// Distinguishes the thread bindings of backends alive at once.
    instance: u64,
}

static INSTANCES: AtomicU64 = AtomicU64::new(1);

impl AclBackend {
    /// Loads CANN, initialises ACL and opens every visible device. Any reason it
    /// cannot is [`AclBackendError::Unavailable`] ("Ascend not available: ...").
    pub fn new(cfg: AclConfig) -> BResult<AclBackend> {
        let api = probe::load(cfg.lib_dir.clone())?;
        let count = probe::device_count(&api)?;
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let mut b = AclBackend { api, devs: Vec::new(), table: Table::default(), instance };
        for d in 0..count as i32 {
            match Dev::open(&b.api, instance, d) {
                Ok(dev) => b.devs.push(dev),
                Err(e) => {
                    // `b` drops here: devices opened so far are closed.
                    return Err(Unavailable::OpenDevice { device: d, source: Box::new(e) }.into());
                }
            }
        }
        let flash =
            b.api.aclnnFlashAttentionScoreGetWorkspaceSize().is_ok() && b.api.aclnnFlashAttentionScore().is_ok();
        b.table = Table::build(b.soc(), &cfg, flash);
        log::info!(
            "acl: {} device(s), SoC {}, libraries from {} ({})",
            b.devs.len(),
            b.soc(),
            b.api.origin(),
            b.api.libraries().join(", ")
        );
        Ok(b)
    }

    /// The SoC of device 0.
    pub fn soc(&self) -> &str {
        self.devs.first().map_or("", |d| d.soc.as_str())
    }

    /// Where the CANN libraries were loaded from.
    pub fn library_origin(&self) -> String {
        self.api.origin().to_string()
    }

    /// acl-emu's run counters and modelled clock; `None` over a real CANN host.
    pub fn emulator(&self) -> Option<crate::emulator::Emulator> {
        crate::emulator::Emulator::probe(&self.api)
    }

    fn dev(&self, d: usize) -> BResult<&Dev> {
        self.devs.get(d).ok_or(AclBackendError::NoDevice(d))
    }

    /// Device `d`, with the calling thread bound to it.
    fn bind(&self, d: usize) -> BResult<&Dev> {
        let dev = self.dev(d)?;
        dev.bind(&self.api, self.instance)?;
        Ok(dev)
    }
}

impl Drop for AclBackend {
    fn drop(&mut self) {
        for dev in std::mem::take(&mut self.devs) {
            match dev.bind(&self.api, self.instance) {
                Ok(()) => dev.close(&self.api),
                Err(e) => log::error!("acl:{}: cannot bind the device for its teardown: {e}", dev.id),
            }
        }
        device::unbind(self.instance);
        // aclFinalize is deliberately not called: it is process-wide, other users of ACL
        // may remain, and CANN forbids calling it from destructors (`aclFinalize`, `acl/acl.h`).
    }
}

impl std::fmt::Debug for AclBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AclBackend({} device(s), {})", self.devs.len(), self.soc())
    }
}

// SAFETY: every method checks addresses against the device's allocation table (M1);
// frees synchronise streams with queued work first and stream buffers are only
// released after synchronising their stream (M2); launches refuse overlapping outputs
// (M3); unknown stream/event ids are errors (M4); ACL failures become values (M5).
// Frozen plans pin their fixed operands for their life, check the per-run ones on every
// run, and release their own device objects only after synchronising their streams.
// Device memory is never dereferenced on the host: it moves only through aclrtMemcpy.
unsafe impl Backend for AclBackend {
    fn name(&self) -> &'static str {
        "acl"
    }
    fn device_count(&self) -> usize {
        self.devs.len()
    }
    fn device_info(&self, device: usize) -> Result<DeviceInfo> {
        Ok(self.dev(device)?.info.clone())
    }
    fn memory_free(&self, device: usize) -> Option<u64> {
        self.bind(device).ok()?;
        memory::free_bytes(&self.api)
    }

    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        memory::check_request(bytes, align)?;
        let dev = self.bind(device)?;
        memory::alloc(&self.api, &dev.allocs, device, bytes, align)
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let dev = self.bind(device)?;
        if dev.allocs.locate(ptr.0, 0) != Ok(ptr.0) {
            return Err(
                AclBackendError::from(BadAddress { device: format!("acl:{device}"), addr: ptr.0, len: 0 }).into()
            );
        }
        // aclrtFree does not wait for queued kernels (`aclrtFree`, `acl/acl_rt.h`): drain first (M2).
        dev.drain(&self.api);
        Ok(memory::free_block(&dev.allocs, ptr)?)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let dev = self.bind(device)?;
        Ok(memory::copy_to_device(&self.api, &dev.allocs, src, dst)?)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        let dev = self.bind(device)?;
        let rec = dev.stream(stream)?;
        stream::sync(&self.api, &rec)?;
        if dst.is_empty() {
            return Ok(());
        }
        Ok(memory::copy_to_host(&self.api, &dev.allocs, src, dst)?)
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let dev = self.bind(device)?;
        if overlaps((src.0, bytes), (dst.0, bytes)) {
            return Err(AclBackendError::BadRequest("device copy ranges overlap".into()).into());
        }
        let sb = dev.allocs.locate(src.0, bytes).map_err(AclBackendError::from)?;
        let db = dev.allocs.locate(dst.0, bytes).map_err(AclBackendError::from)?;
        let rec = dev.stream(stream)?;
        if src.0.is_multiple_of(64) && dst.0.is_multiple_of(64) {
            memory::d2d_async(&self.api, src.0, dst.0, bytes, rec.raw())?;
            rec.mark_dirty();
            return Ok(());
        }
        // Unaligned: a byte-typed aclnnInplaceCopy from aligned bases with element offsets.
        Ok(kernels::byte_copy(&self.api, &rec, (sb, src.0 - sb), (db, dst.0 - db), bytes)?)
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let dev = self.bind(device)?;
        dev.allocs.locate(dst.0, bytes).map_err(AclBackendError::from)?;
        let rec = dev.stream(stream)?;
        match memory::memset_async(&self.api, dst.0, value, bytes, rec.raw()) {
            Ok(()) => rec.mark_dirty(),
            Err(AclBackendError::Call { err, .. }) if err.is_missing() => {
                log::debug!("acl-sys: optional symbol unavailable: {err}");
                stream::sync(&self.api, &rec)?;
                memory::memset(&self.api, dst.0, value, bytes)?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
    fn map_host(&self, _device: usize, _ptr: DevicePtr, _len: usize, _f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        Ok(false)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        DEFAULT_STREAM
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        let dev = self.bind(device)?;
        let id = dev.next_id();
        let rec = stream::create(&self.api, format!("acl:{device}/stream{id}"))?;
        stream::lock(&dev.streams).insert(id, Arc::new(rec));
        Ok(StreamId(id))
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        if stream == DEFAULT_STREAM {
            return Ok(());
        }
        let dev = self.bind(device)?;
        let rec = stream::lock(&dev.streams).remove(&stream.0).ok_or(AclBackendError::NoStream(stream.0, device))?;
        Ok(stream::destroy(&self.api, &rec)?)
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        let dev = self.bind(device)?;
        let rec = dev.stream(stream)?;
        stream::sync(&self.api, &rec)
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        let dev = self.bind(device)?;
        let mut first = Ok(());
        for r in dev.all_streams() {
            if let Err(e) = stream::sync(&self.api, &r)
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        let dev = self.bind(device)?;
        let rec = stream::create_event(&self.api)?;
        let id = dev.next_id();
        dev.add_event(id, rec);
        Ok(EventId(id))
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        let dev = self.bind(device)?;
        let rec = dev.take_event(event)?;
        if let Err(e) = stream::destroy_event(&self.api, rec.raw()) {
            dev.add_event(event.0, rec);
            return Err(AclBackendError::from(e).into());
        }
        Ok(())
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        let dev = self.bind(device)?;
        let (h, _) = dev.event(event)?;
        let rec = dev.stream(stream)?;
        stream::record(&self.api, h as acl_sys::aclrtEvent, &rec)?;
        dev.set_recorded(event);
        Ok(())
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        let dev = self.bind(device)?;
        let (h, recorded) = dev.event(event)?;
        if !recorded {
            return Ok(()); // an event never recorded counts as complete
        }
        let rec = dev.stream(stream)?;
        Ok(stream::wait(&self.api, &rec, h as acl_sys::aclrtEvent)?)
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        let dev = self.bind(device)?;
        let (h, recorded) = dev.event(event)?;
        if !recorded {
            return Ok(true);
        }
        match stream::query(&self.api, h as acl_sys::aclrtEvent)? {
            Some(done) => Ok(done),
            None => {
                self.synchronize_event(device, event)?;
                Ok(true)
            }
        }
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        let dev = self.bind(device)?;
        let (h, recorded) = dev.event(event)?;
        if !recorded {
            return Ok(());
        }
        Ok(stream::synchronize_event(&self.api, h as acl_sys::aclrtEvent)?)
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        let dev = self.bind(device)?;
        let (a, ra) = dev.event(start)?;
        let (b, rb) = dev.event(end)?;
        if !ra || !rb {
            return Err(AclBackendError::BadRequest("elapsed time needs two recorded events".into()).into());
        }
        Ok(stream::elapsed(&self.api, a as acl_sys::aclrtEvent, b as acl_sys::aclrtEvent)?)
    }

    /// f16: the Cube computes in fp16 (the 910 has no f32 or bf16 path on it; the 910B
    /// computes f32 at a fraction of its fp16 rate).
    fn auto_precision(&self, _device: usize) -> runtime::Precision {
        runtime::Precision::F16
    }

    fn kernels(&self) -> &[KernelInfo] {
        self.table.infos()
    }
    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        kernels::launch(&self.api, self.instance, &self.devs, device, &self.table, kernel, &args, stream)
    }

    /// Checks the launches once and pins their fixed operands; each aclnn node's
    /// executors are recorded at its first run and reused after, and each run's launches
    /// are captured and replayed where `capture` allows (see `crate::frozen`).
    fn freeze(
        &self,
        device: usize,
        launches: &[runtime::FrozenLaunch],
        capture: runtime::GraphCapture,
    ) -> Result<Option<runtime::Frozen>> {
        frozen::freeze(&self.api, self.instance, &self.devs, device, &self.table, launches, capture)
    }

    fn launch_frozen(
        &self,
        device: usize,
        frozen: &runtime::Frozen,
        nodes: std::ops::Range<usize>,
        addrs: &[DevicePtr],
        first_seq: u64,
        stream: StreamId,
    ) -> Result<()> {
        let run = FrozenRun { device, frozen, nodes, addrs, first_seq, stream };
        frozen::launch(&self.api, self.instance, &self.devs, &self.table, run)
    }

    fn frozen_bytes(&self, frozen: &runtime::Frozen) -> usize {
        frozen::bytes(frozen)
    }

    /// A captured plan's run: staged, recorded once, then replayed (see `crate::frozen`).
    fn launch_frozen_run(&self, device: usize, frozen: &runtime::Frozen, run: runtime::FrozenRun<'_>) -> Result<bool> {
        frozen::launch_run(&self.api, self.instance, &self.devs, &self.table, device, frozen, run)
    }
}
