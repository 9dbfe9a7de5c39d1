//! [`AclBackend`] and its `runtime::Backend` methods, which delegate to
//! [`crate::memory`], [`crate::stream`], [`crate::kernels`] and [`crate::frozen`]; its
//! start and teardown are in [`crate::open`].

use crate::device::Device;
use crate::error::AclBackendError;
use crate::frozen::{self, RecordedRun};
use crate::kernels::{self, Table};
use crate::memory;
use crate::stream::{self, DEFAULT_STREAM};
use acl_sys::Api;
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId};
use std::sync::Arc;
use std::time::Duration;

/// The Ascend backend.
pub struct AclBackend {
    pub(crate) api: Arc<Api>,
    pub(crate) devs: Vec<Device>,
    pub(crate) table: Table,
    /// Distinguishes the thread bindings of backends alive at once.
    pub(crate) instance: u64,
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
    fn modelled_cost(
        &self,
        device: usize,
        kernel: &KernelInfo,
        op: &runtime::Op,
        inputs: &[runtime::TensorMeta],
        outputs: &[runtime::TensorMeta],
    ) -> Option<Duration> {
        let (_, imp) = self.table.resolve(kernel)?;
        crate::cost::SocModel::of(&self.devs.get(device)?.soc).kernel(imp, op, inputs, outputs)
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
        memory::check_block(&dev.allocs, device, ptr)?;
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
        let dev = self.dev(device)?;
        let Some(r) = memory::check_copy(&dev.allocs, src.0, dst.0, bytes)? else { return Ok(()) };
        dev.bind(&self.api, self.instance)?;
        let rec = dev.stream(stream)?;
        if memory::d2d(&self.api, rec.raw(), &r, |s, d| kernels::byte_copy(&self.api, &rec, s, d, bytes))? {
            rec.mark_dirty();
        }
        Ok(())
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
        let run = RecordedRun { device, frozen, nodes, addrs, first_seq, stream };
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
