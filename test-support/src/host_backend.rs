//! A minimal backend for the runtime's own tests: memory is a table of host buffers at
//! made-up addresses, every stream runs its work at once (in call order), and every op
//! is the core's reference kernel (`runtime::reference`). It has no SIMD, no threads and
//! no driver, so a pool or stream test of the runtime depends on nothing but the runtime.
//! Wrap it in [`crate::gate::Gate`] to hold user streams back ("work still queued").
//!
//! Addresses are never dereferenced: they are keys into the table, handed out from a
//! bump pointer and never reused, so a use after free is an error naming the address,
//! never a read of someone else's bytes. Frees go through the runtime's
//! [`AllocTable`], like every real backend's.
//!
//! `Send + Sync`: every method takes `&self`; the buffers, streams and events sit behind
//! one lock each, and concurrent calls are serialised per table.

use runtime::backend::allocations::{AllocTable, BadAddress, Release, overlapping_output};
use runtime::kernel::{KernelQuery, KernelTable};
use runtime::reference::{In, Out};
use runtime::{
    Backend, DeviceInfo, DevicePtr, Error, EventId, KernelInfo, LaunchArgs, Result, StreamId, Tier, Unit, UnitClass,
    UnitInfo,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The backend's name in errors and reports.
pub const NAME: &str = "host";
/// The one unit every kernel runs on.
pub const UNIT: Unit = Unit { class: UnitClass::Scalar, label: "host-reference" };
const BASE: u64 = 0x1000_0000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The buffers of one device, by base address.
#[derive(Default)]
struct Buffers {
    map: BTreeMap<u64, Vec<u8>>,
}

impl Buffers {
    /// The buffer holding `addr .. addr + len` and the offset of `addr` in it.
    fn find(&mut self, addr: u64, len: usize) -> Option<(&mut Vec<u8>, usize)> {
        let (&base, buf) = self.map.range_mut(..=addr).next_back()?;
        let off = (addr - base) as usize;
        (off.checked_add(len)? <= buf.len()).then_some((buf, off))
    }
    fn read(&mut self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.find(addr, len).map(|(b, o)| b[o..o + len].to_vec())
    }
    fn write(&mut self, addr: u64, bytes: &[u8]) -> bool {
        match self.find(addr, bytes.len()) {
            Some((b, o)) => {
                b[o..o + bytes.len()].copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
}

/// Gives a freed block's buffer back (drops it) once the table releases it.
struct Drop_ {
    buffers: Arc<Mutex<Buffers>>,
    used: Arc<AtomicU64>,
}

impl Release for Drop_ {
    type Record = ();
    fn release(&self, base: u64, size: usize, _record: ()) {
        lock(&self.buffers).map.remove(&base);
        self.used.fetch_sub(size as u64, Ordering::Relaxed);
    }
}

/// The kernel every entry of the table runs.
type Kernel = fn(&runtime::Op, &[In], &mut [Out]) -> runtime::KernelResult;

fn any(_: &KernelQuery<'_>) -> std::result::Result<(), String> {
    Ok(())
}

/// An event: when its latest record ran, if it has.
#[derive(Default, Clone, Copy)]
struct EventState {
    at: Option<Instant>,
}

/// The minimal backend. See the module documentation.
pub struct HostBackend {
    capacity: u64,
    used: Arc<AtomicU64>,
    next_addr: AtomicU64,
    buffers: Arc<Mutex<Buffers>>,
    table: Arc<AllocTable<Drop_>>,
    kernels: KernelTable<Kernel>,
    streams: Mutex<HashSet<u64>>,
    events: Mutex<HashMap<u64, EventState>>,
    next_id: AtomicU64,
    /// Failures of work run on a user stream, reported at its next synchronisation.
    pending: Mutex<HashMap<u64, Error>>,
}

impl HostBackend {
    /// One device of `capacity` bytes.
    pub fn new(capacity: u64) -> HostBackend {
        let buffers = Arc::new(Mutex::new(Buffers::default()));
        let used = Arc::new(AtomicU64::new(0));
        let release = Drop_ { buffers: buffers.clone(), used: used.clone() };
        let mut kernels = KernelTable::new();
        for kind in runtime::OpKind::ALL {
            kernels.add(kind, Tier::Reference, UNIT, UNIT.label, any, runtime::reference::run as Kernel);
        }
        HostBackend {
            capacity,
            used,
            next_addr: AtomicU64::new(BASE),
            buffers,
            table: Arc::new(AllocTable::new("host:0", release)),
            kernels,
            streams: Mutex::new(HashSet::new()),
            events: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// [`HostBackend::new`] with 8 GiB, behind an `Arc` as the runtime takes it.
    pub fn shared() -> Arc<dyn Backend> {
        Arc::new(HostBackend::new(8 << 30))
    }

    /// Bytes allocated and not yet released.
    pub fn allocated_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn device(&self, device: usize) -> Result<()> {
        if device == 0 { Ok(()) } else { Err(Error::device(format!("host backend has no device {device}"))) }
    }
    fn stream(&self, device: usize, s: StreamId) -> Result<()> {
        self.device(device)?;
        if s == self.default_stream(0) || lock(&self.streams).contains(&s.0) {
            Ok(())
        } else {
            Err(Error::device(format!("host:0 has no stream {}", s.0)))
        }
    }
    fn bad(e: BadAddress) -> Error {
        Error::backend(NAME, e)
    }
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        lock(&self.buffers).read(addr, len).ok_or_else(|| Self::bad(BadAddress { device: "host:0".into(), addr, len }))
    }
    fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        if lock(&self.buffers).write(addr, bytes) {
            Ok(())
        } else {
            Err(Self::bad(BadAddress { device: "host:0".into(), addr, len: bytes.len() }))
        }
    }

    /// Runs one launch: reads the operands, runs the reference kernel, writes the outputs.
    fn run(&self, kernel: &KernelInfo, args: &LaunchArgs) -> Result<()> {
        let (info, imp) = self
            .kernels
            .resolve(kernel)
            .ok_or_else(|| Error::backend_msg(NAME, format!("kernel {} is not a host kernel", kernel.name)))?;
        let ranges = args.validate(info)?;
        if let Some(i) = overlapping_output(&ranges, args.inputs.len(), |_| false) {
            return Err(Error::backend_msg(NAME, format!("{}: output {i} overlaps another operand", args.op.name())));
        }
        let mut in_bytes = Vec::with_capacity(args.inputs.len());
        for (a, r) in args.inputs.iter().zip(&ranges) {
            // Each input's bytes from its first element, as `In` expects.
            let start = a.ptr.0 + (a.layout.offset * a.dtype.size()) as u64;
            let len = (r.0 + r.1 as u64).saturating_sub(start) as usize;
            in_bytes.push(if r.1 == 0 { Vec::new() } else { self.read(start, len)? });
        }
        let ins: Vec<In> = args
            .inputs
            .iter()
            .zip(&in_bytes)
            .map(|(a, b)| In { dtype: a.dtype, dims: a.layout.dims(), strides: &a.layout.strides, bytes: b })
            .collect();
        // An in-place output starts from the memory's current elements (the op updates it).
        let mut out_bytes: Vec<Vec<u8>> = Vec::with_capacity(args.outputs.len());
        for (k, o) in args.outputs.iter().enumerate() {
            let len = o.layout.numel() * o.dtype.size();
            let start = o.ptr.0 + (o.layout.offset * o.dtype.size()) as u64;
            let in_place = args.op.in_place().iter().any(|p| p.1 == k);
            out_bytes.push(if in_place && len > 0 { self.read(start, len)? } else { vec![0u8; len] });
        }
        {
            let mut outs: Vec<Out> = args
                .outputs
                .iter()
                .zip(out_bytes.iter_mut())
                .map(|(o, b)| Out { dtype: o.dtype, dims: o.layout.dims(), bytes: b })
                .collect();
            imp(&args.op, &ins, &mut outs).map_err(|e| Error::backend(NAME, e))?;
        }
        for (o, b) in args.outputs.iter().zip(&out_bytes) {
            if !b.is_empty() {
                self.write(o.ptr.0 + (o.layout.offset * o.dtype.size()) as u64, b)?;
            }
        }
        Ok(())
    }
}

impl Default for HostBackend {
    fn default() -> Self {
        HostBackend::new(8 << 30)
    }
}

// SAFETY: the contract's rules hold without any unsafe code: addresses are table keys
// that are never dereferenced; every copy, fill and launch checks its ranges against the
// live buffers (M1/M3) and frees go through `AllocTable` (M2); work runs in call order on
// the calling thread, so a stream's work is complete when the call returns (M4/M5).
unsafe impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        NAME
    }
    fn device_count(&self) -> usize {
        1
    }
    fn device_info(&self, device: usize) -> Result<DeviceInfo> {
        self.device(device)?;
        Ok(DeviceInfo {
            name: "host reference device".into(),
            memory_bytes: self.capacity,
            units: vec![UnitInfo {
                unit: UNIT,
                peak_flops: 1e9,
                peak_bytes_per_s: 1e9,
                source: "nominal (test backend)".into(),
            }],
            host_shared: false,
            min_alignment: 64,
        })
    }

    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        self.device(device)?;
        let oom = |why: &str| Error::OutOfMemory {
            device: format!("host:0 ({why})"),
            requested: bytes,
            stats: Box::default(),
            source: None,
        };
        let align = align.max(64);
        if !align.is_power_of_two() {
            return Err(Error::Config(format!("alignment {align} is not a power of two")));
        }
        let size = bytes.max(1);
        let used = self.used.fetch_add(size as u64, Ordering::Relaxed).saturating_add(size as u64);
        if used > self.capacity {
            self.used.fetch_sub(size as u64, Ordering::Relaxed);
            return Err(oom("capacity"));
        }
        let span = (size as u64).checked_add(align as u64).ok_or_else(|| oom("address space"))?;
        let start = self.next_addr.fetch_add(span, Ordering::Relaxed);
        let base = start.div_ceil(align as u64) * align as u64;
        let mut buf = Vec::new();
        if buf.try_reserve_exact(size).is_err() {
            self.used.fetch_sub(size as u64, Ordering::Relaxed);
            return Err(oom("host memory"));
        }
        buf.resize(size, 0xCD);
        lock(&self.buffers).map.insert(base, buf);
        self.table.insert(base, size, ()).map_err(Self::bad)?;
        Ok(DevicePtr(base))
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        self.device(device)?;
        self.table.free(ptr.0).map_err(Self::bad)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        self.device(device)?;
        if src.is_empty() {
            return Ok(());
        }
        self.write(dst.0, src)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        self.synchronize_stream(device, stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        dst.copy_from_slice(&self.read(src.0, dst.len())?);
        Ok(())
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        self.stream(device, stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let b = self.read(src.0, bytes)?;
        self.write(dst.0, &b)
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        self.stream(device, stream)?;
        if bytes == 0 {
            return Ok(());
        }
        self.write(dst.0, &vec![value; bytes])
    }
    fn map_host(&self, device: usize, _ptr: DevicePtr, _len: usize, _f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.device(device)?;
        Ok(false)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        StreamId(0)
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        self.device(device)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.streams).insert(id);
        Ok(StreamId(id))
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.device(device)?;
        if stream == self.default_stream(0) {
            return Ok(());
        }
        lock(&self.pending).remove(&stream.0);
        if lock(&self.streams).remove(&stream.0) {
            Ok(())
        } else {
            Err(Error::device(format!("host:0 has no stream {}", stream.0)))
        }
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.stream(device, stream)?;
        match lock(&self.pending).remove(&stream.0) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        self.device(device)?;
        let mut p = lock(&self.pending);
        let first = p.keys().min().copied();
        match first.and_then(|k| p.remove(&k)) {
            Some(e) => {
                p.clear();
                Err(e)
            }
            None => Ok(()),
        }
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        self.device(device)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.events).insert(id, EventState::default());
        Ok(EventId(id))
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        self.device(device)?;
        lock(&self.events)
            .remove(&event.0)
            .map(|_| ())
            .ok_or_else(|| Error::device(format!("host:0 has no event {}", event.0)))
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        self.stream(device, stream)?;
        let mut ev = lock(&self.events);
        let e = ev.get_mut(&event.0).ok_or_else(|| Error::device(format!("host:0 has no event {}", event.0)))?;
        e.at = Some(Instant::now());
        Ok(())
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        self.stream(device, stream)?;
        // Work runs at once: the event's work is done.
        lock(&self.events)
            .contains_key(&event.0)
            .then_some(())
            .ok_or_else(|| Error::device(format!("host:0 has no event {}", event.0)))
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        self.device(device)?;
        lock(&self.events)
            .contains_key(&event.0)
            .then_some(true)
            .ok_or_else(|| Error::device(format!("host:0 has no event {}", event.0)))
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        self.query_event(device, event).map(|_| ())
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        self.device(device)?;
        let ev = lock(&self.events);
        let at = |e: EventId| -> Result<Instant> {
            ev.get(&e.0)
                .ok_or_else(|| Error::device(format!("host:0 has no event {}", e.0)))?
                .at
                .ok_or_else(|| Error::device(format!("event {} was never recorded", e.0)))
        };
        Ok(at(end)?.saturating_duration_since(at(start)?))
    }

    fn kernels(&self) -> &[KernelInfo] {
        self.kernels.infos()
    }
    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        self.stream(device, stream)?;
        match self.run(kernel, &args) {
            Ok(()) => Ok(()),
            // A default-stream launch reports at once; a user stream's at its next sync.
            Err(e) if stream == self.default_stream(0) => Err(e),
            Err(e) => {
                let op = args.op.name().to_string();
                let err = Error::Async {
                    op,
                    stream: format!("{NAME}:0/stream{}", stream.0),
                    seq: args.seq,
                    source: Arc::new(e),
                };
                lock(&self.pending).entry(stream.0).or_insert(err);
                Ok(())
            }
        }
    }
}
