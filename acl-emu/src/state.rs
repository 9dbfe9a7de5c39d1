//! The emulated devices: device memory (reserved, inaccessible address space translated
//! to host buffers), streams as asynchronous in-order queues, events, the tables of live
//! objects with the outstanding-object counters, the run counters and the modelled
//! timeline, and the per-thread device and error text.

use crate::clock::Timeline;
use crate::config::Config;
use crate::descriptors::{Executor, TensorDesc};
use crate::error::{Fail, R, fail};
use crate::model::{Cost, Soc};
use acl_sys::codes::*;
use acl_sys::emu::EmuCounters;
use acl_sys::fns::aclEmuRunCounters;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

/// Locks `m`, ignoring poisoning (a panicking emulated kernel must not wedge the tables).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------- device memory ----

/// One device's memory: a reserved range of address space with no access rights
/// (so a host dereference of a device pointer faults), and host buffers behind it.
pub struct DevMem {
    pub base: u64,
    pub capacity: u64,
    pub used: u64,
    /// address -> (size, backing)
    pub allocs: BTreeMap<u64, (u64, Box<[u8]>)>,
}

impl DevMem {
    fn new(capacity: u64) -> R<DevMem> {
        let len = capacity.max(1 << 20) as usize;
        // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's choice;
        // it aliases nothing and is only ever unmapped by `Drop` with the same length.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, format!("cannot reserve {len} bytes of address space"));
        }
        Ok(DevMem { base: p as u64, capacity, used: 0, allocs: BTreeMap::new() })
    }

    fn reserved_len(&self) -> usize {
        self.capacity.max(1 << 20) as usize
    }

    /// First fit, 512-byte aligned addresses (aclrtMalloc promises 64).
    pub fn alloc(&mut self, size: u64) -> R<u64> {
        // `aclrtMalloc` (`acl/acl_rt.h`): size rounded up to 32, plus 32.
        let charged = size.div_ceil(32) * 32 + 32;
        if self.used + charged > self.capacity {
            return fail(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                format!("out of device memory: {size} bytes requested, {} of {} in use", self.used, self.capacity),
            );
        }
        let align = 512u64;
        let mut cursor = self.base;
        let end = self.base + self.reserved_len() as u64;
        for (&a, (s, _)) in &self.allocs {
            if a >= cursor + charged {
                break;
            }
            cursor = (a + s).div_ceil(align) * align;
        }
        if cursor + charged > end {
            return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "device address space fragmented");
        }
        let buf = vec![0xCDu8; charged as usize].into_boxed_slice();
        self.allocs.insert(cursor, (charged, buf));
        self.used += charged;
        Ok(cursor)
    }

    pub fn free(&mut self, addr: u64) -> R<()> {
        match self.allocs.remove(&addr) {
            Some((s, _)) => {
                self.used -= s;
                Ok(())
            }
            None => fail(ACL_ERROR_INVALID_PARAM, format!("{addr:#x} is not an allocation start of this device")),
        }
    }

    /// The allocation holding `addr .. addr + len`: (start, size).
    pub fn find(&self, addr: u64, len: u64) -> Option<(u64, u64)> {
        let (&a, (s, _)) = self.allocs.range(..=addr).next_back()?;
        (addr.checked_add(len)? <= a + s).then_some((a, *s))
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + self.reserved_len() as u64
    }

    pub fn bytes(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let (a, _) = self.find(addr, len)?;
        let (_, buf) = self.allocs.get(&a)?;
        let o = (addr - a) as usize;
        buf.get(o..o + len as usize)
    }

    pub fn bytes_mut(&mut self, addr: u64, len: u64) -> Option<&mut [u8]> {
        let (a, _) = self.find(addr, len)?;
        let (_, buf) = self.allocs.get_mut(&a)?;
        let o = (addr - a) as usize;
        buf.get_mut(o..o + len as usize)
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation made in `new`; nothing dereferences it.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.reserved_len()) };
    }
}

// ---------------------------------------------------------------- streams, events ----

pub type Job = Box<dyn FnOnce() -> R<()> + Send>;

#[derive(Default)]
pub struct Progress {
    pub submitted: u64,
    pub completed: u64,
    pub error: Option<Fail>,
}

/// An asynchronous in-order queue served by one worker thread.
pub struct EmuStream {
    pub device: i32,
    tx: Mutex<Option<Sender<Job>>>,
    pub state: Arc<(Mutex<Progress>, Condvar)>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// The stream's modelled clock, picoseconds (changed only with the tables locked).
    pub clock: AtomicU64,
    /// Being captured (`aclmdlRICaptureBegin`): aclnn launches are recorded instead of
    /// queued, and any other stream-ordered work is refused.
    pub capturing: std::sync::atomic::AtomicBool,
}

impl EmuStream {
    pub fn new(device: i32, label: String) -> R<Arc<EmuStream>> {
        let (tx, rx) = channel::<Job>();
        let state: Arc<(Mutex<Progress>, Condvar)> = Arc::default();
        let st = state.clone();
        let worker = std::thread::Builder::new()
            .name(label)
            .spawn(move || {
                for job in rx {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).unwrap_or_else(|payload| {
                        let what = runtime::error::panic_message(payload.as_ref());
                        // Dropping the payload may panic as well; that must not stop the worker.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
                        fail(ACL_ERROR_RT_AICORE_EXCEPTION, format!("emulated kernel panicked: {what}"))
                    });
                    let (m, cv) = &*st;
                    let mut g = lock(m);
                    if let Err(e) = r {
                        g.error.get_or_insert(e);
                    }
                    g.completed += 1;
                    cv.notify_all();
                }
            })
            .map_err(|e| Fail(ACL_ERROR_RT_NO_STREAM_RESOURCE, format!("cannot start a stream thread: {e}")))?;
        Ok(Arc::new(EmuStream {
            device,
            tx: Mutex::new(Some(tx)),
            state,
            worker: Mutex::new(Some(worker)),
            clock: AtomicU64::new(0),
            capturing: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn submit(&self, job: Job) -> R<()> {
        if self.capturing.load(Ordering::Relaxed) {
            return fail(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "the stream is being captured: acl-emu captures aclnn launches only",
            );
        }
        let (m, _) = &*self.state;
        let mut g = lock(m);
        let tx = lock(&self.tx);
        let Some(tx) = tx.as_ref() else { return fail(ACL_ERROR_RT_STREAM_CONTEXT, "stream is being destroyed") };
        tx.send(job).map_err(|_| Fail(ACL_ERROR_RT_INTERNAL_ERROR, "stream worker is gone".into()))?;
        g.submitted += 1;
        Ok(())
    }

    /// Waits for everything submitted so far; the first asynchronous error (cleared).
    pub fn synchronize(&self) -> R<()> {
        let (m, cv) = &*self.state;
        let mut g = lock(m);
        let target = g.submitted;
        while g.completed < target {
            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        match g.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn is_idle(&self) -> bool {
        let g = lock(&self.state.0);
        g.completed >= g.submitted
    }

    pub fn shutdown(&self) {
        lock(&self.tx).take();
        if let Some(h) = lock(&self.worker).take() {
            let _ = h.join();
        }
    }
}

impl Drop for EmuStream {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[derive(Default)]
pub struct EventState {
    pub recorded: u64,
    pub reached: u64,
    /// Modelled timestamp of the latest record, picoseconds.
    pub modelled_ps: Option<u64>,
}

#[derive(Default)]
pub struct EmuEvent {
    pub state: Mutex<EventState>,
    pub cv: Condvar,
}

impl EmuEvent {
    pub fn complete(&self, generation: u64) {
        let mut g = lock(&self.state);
        if generation > g.reached {
            g.reached = generation;
        }
        self.cv.notify_all();
    }
    pub fn wait_for(&self, target: u64) {
        let mut g = lock(&self.state);
        while g.reached < target {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

// ---------------------------------------------------------------- the emulator ----

/// One aclnn launch recorded by a capture: the executor as it was at the launch (a copy,
/// so that a one-shot executor consumed by the launch replays too), its workspace and
/// its modelled cost as a plain launch.
#[derive(Clone)]
pub struct Captured {
    pub exec: Executor,
    pub ws: u64,
    pub ws_size: u64,
    pub cost: Cost,
}

/// What a capture records, in submission order. `lane`: the captured stream it was
/// queued on (0: the stream the capture began on); `token`: an event record inside the
/// capture, which later waits name.
#[derive(Clone)]
pub enum Task {
    /// Boxed: the other variants are two words.
    Kernel {
        lane: usize,
        launch: Box<Captured>,
    },
    Record {
        lane: usize,
        token: usize,
    },
    Wait {
        lane: usize,
        token: usize,
    },
}

/// A capture in progress: the streams it has drawn in (lanes; the first began it), what
/// they recorded, and the token of each event recorded inside it (its latest record).
pub struct Capturing {
    pub device: i32,
    pub lanes: Vec<u64>,
    pub tasks: Vec<Task>,
    pub tokens: usize,
    pub events: HashMap<u64, usize>,
}

/// A model runtime instance: what one capture recorded, for one device.
pub struct Model {
    pub device: i32,
    pub tasks: Vec<Task>,
    pub lanes: usize,
    pub tokens: usize,
}

pub struct Tables {
    pub cfg: Config,
    pub soc_c: CString,
    pub mem: Vec<DevMem>,
    pub host: HashMap<u64, std::alloc::Layout>,
    pub streams: HashMap<u64, Arc<EmuStream>>,
    /// Default (NULL) stream of each device, created on first use.
    pub default_streams: HashMap<i32, Arc<EmuStream>>,
    pub events: HashMap<u64, Arc<EmuEvent>>,
    pub executors: HashMap<u64, Executor>,
    pub consumed: HashSet<u64>,
    pub tensors: HashMap<u64, TensorDesc>,
    pub scalars: HashMap<u64, (acl_sys::aclDataType, f64)>,
    pub int_arrays: HashMap<u64, Vec<i64>>,
    /// Tensor lists: the tensor handles each owns (destroyed with it).
    pub tensor_lists: HashMap<u64, Vec<u64>>,
    pub calls: HashMap<String, u64>,
    /// Streams being captured, with the capture each belongs to (the instance handle
    /// `aclmdlRICaptureEnd` will hand out).
    pub captures: HashMap<u64, u64>,
    /// Captures in progress, by that handle.
    pub capturing: HashMap<u64, Capturing>,
    /// Model runtime instances (`aclmdlRI`) by handle.
    pub models: HashMap<u64, Model>,
    pub initialized: bool,
    /// aclrtSetDevice reference counts.
    pub device_refs: HashMap<i32, u64>,
    /// The modelled figures of the configured SoC.
    pub soc: Soc,
    /// The modelled clocks (host, horizon, last reset) and busy times.
    pub timeline: Timeline,
    /// Calls, copies, allocations... since the last `aclEmuResetRunCounters` (the modelled
    /// times are filled in from `timeline` when read).
    pub run: aclEmuRunCounters,
}

pub struct Emu {
    pub t: Mutex<Tables>,
    next: AtomicU64,
}

thread_local! {
    /// Device bound to this thread (aclrtSetDevice / aclrtSetCurrentContext).
    pub static CURRENT: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
    /// Pending error text, and the buffer last handed out by aclGetRecentErrMsg.
    pub static ERRMSG: RefCell<(Option<CString>, Option<CString>)> = const { RefCell::new((None, None)) };
}

pub fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    ERRMSG.with(|e| e.borrow_mut().0 = Some(c));
}

pub fn emu() -> &'static Emu {
    static E: OnceLock<Emu> = OnceLock::new();
    E.get_or_init(|| {
        let cfg = Config::from_env();
        let t = Tables::new(cfg).unwrap_or_else(|e| {
            log::error!("acl-emu: {}; starting with no devices", e.1);
            Tables::new(Config { devices: 0, ..Config::default() }).unwrap_or_else(|_| Tables::empty(Config::default()))
        });
        Emu { t: Mutex::new(t), next: AtomicU64::new(1) }
    })
}

/// Handles are opaque, never-dereferenced values: a tag in the high bits and a serial.
pub const TAG_STREAM: u64 = 0x5700_0000_0000;
pub const TAG_EVENT: u64 = 0xE700_0000_0000;
pub const TAG_EXEC: u64 = 0xEC00_0000_0000;
pub const TAG_TENSOR: u64 = 0x7E00_0000_0000;
pub const TAG_SCALAR: u64 = 0x5C00_0000_0000;
pub const TAG_INTARRAY: u64 = 0x1A00_0000_0000;
pub const TAG_TENSORLIST: u64 = 0x7100_0000_0000;
pub const TAG_CONTEXT: u64 = 0xC700_0000_0000;
pub const TAG_MODEL: u64 = 0x3D00_0000_0000;

impl Emu {
    pub fn handle(&self, tag: u64) -> u64 {
        tag | (self.next.fetch_add(1, Ordering::Relaxed) << 4)
    }
}

impl Tables {
    fn empty(cfg: Config) -> Tables {
        Tables {
            soc_c: CString::new(cfg.soc.clone()).unwrap_or_default(),
            soc: Soc::of(&cfg.soc),
            timeline: Timeline::default(),
            run: aclEmuRunCounters::default(),
            cfg,
            mem: Vec::new(),
            host: HashMap::new(),
            streams: HashMap::new(),
            default_streams: HashMap::new(),
            events: HashMap::new(),
            executors: HashMap::new(),
            consumed: HashSet::new(),
            tensors: HashMap::new(),
            scalars: HashMap::new(),
            int_arrays: HashMap::new(),
            tensor_lists: HashMap::new(),
            calls: HashMap::new(),
            captures: HashMap::new(),
            capturing: HashMap::new(),
            models: HashMap::new(),
            initialized: false,
            device_refs: HashMap::new(),
        }
    }

    pub fn new(cfg: Config) -> R<Tables> {
        let mut t = Tables::empty(cfg);
        for _ in 0..t.cfg.devices {
            t.mem.push(DevMem::new(t.cfg.capacity)?);
        }
        Ok(t)
    }

    /// The objects held now (`aclEmuCounters`).
    pub fn counters(&self) -> EmuCounters {
        EmuCounters {
            device_allocations: self.mem.iter().map(|m| m.allocs.len() as u64).sum(),
            host_allocations: self.host.len() as u64,
            streams: self.streams.len() as u64,
            events: self.events.len() as u64,
            executors: self.executors.len() as u64,
            descriptors: (self.tensors.len() + self.scalars.len() + self.int_arrays.len() + self.tensor_lists.len())
                as u64,
            device_bytes: self.mem.iter().map(|m| m.used).sum(),
            device_refs: self.device_refs.values().sum(),
            models: self.models.len() as u64,
        }
    }

    /// What was counted and modelled since the last reset.
    pub fn run_counters(&self) -> aclEmuRunCounters {
        let ns = |ps: u64| ps / 1000;
        aclEmuRunCounters {
            modelled_ns: ns(self.timeline.elapsed_ps()),
            modelled_cube_ns: ns(self.timeline.cube_ps),
            modelled_vector_ns: ns(self.timeline.vector_ps),
            modelled_copy_ns: ns(self.timeline.copy_ps),
            modelled_roofline_ns: ns(self.timeline.roofline_ps),
            ..self.run
        }
    }

    /// Zeroes the run counters; the modelled elapsed time restarts from the latest instant.
    pub fn reset_run(&mut self) {
        self.run = aclEmuRunCounters::default();
        self.timeline.reset();
    }

    /// Counts a call (in the run counters too: aclnn phase 1 and 2, synchronisations) and
    /// applies the fault rules.
    pub fn enter(&mut self, name: &str) -> R<()> {
        if let Some(op) = name.strip_prefix("aclnn").filter(|op| !matches!(*op, "Init" | "Finalize")) {
            if op.ends_with("GetWorkspaceSize") {
                self.run.phase1_calls += 1;
            } else {
                self.run.phase2_calls += 1;
            }
        } else if name.starts_with("aclrtSynchronize") {
            self.run.synchronizations += 1;
        }
        let n = self.calls.entry(name.to_string()).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some(r) = self.cfg.faults.iter().find(|r| r.symbol == name && r.nth == n) {
            return fail(r.code, format!("acl-emu: injected fault: call #{n} of {name} fails with {}", r.code));
        }
        Ok(())
    }

    pub fn device_of_addr(&self, addr: u64) -> Option<usize> {
        self.mem.iter().position(|m| m.contains(addr))
    }

    /// Device bound to the calling thread.
    pub fn current(&self) -> R<i32> {
        match CURRENT.with(|c| c.get()) {
            Some(d) if (d as usize) < self.mem.len() => Ok(d),
            Some(d) => fail(ACL_ERROR_RT_CONTEXT_NULL, format!("device {d} was reset or does not exist")),
            None => fail(ACL_ERROR_RT_CONTEXT_NULL, "no device is set on this thread (call aclrtSetDevice)"),
        }
    }

    pub fn stream(&mut self, handle: u64) -> R<Arc<EmuStream>> {
        if handle == 0 {
            let d = self.current()?;
            if let Some(s) = self.default_streams.get(&d) {
                return Ok(s.clone());
            }
            let s = EmuStream::new(d, format!("acl-emu:{d}/default"))?;
            self.default_streams.insert(d, s.clone());
            return Ok(s);
        }
        self.streams
            .get(&handle)
            .cloned()
            .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, format!("unknown stream {handle:#x}")))
    }

    pub fn event(&self, handle: u64) -> R<Arc<EmuEvent>> {
        self.events
            .get(&handle)
            .cloned()
            .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, format!("unknown event {handle:#x}")))
    }

    /// `(device, allocation start)` of a device range, or an error naming it.
    pub fn check_range(&self, addr: u64, len: u64, what: &str) -> R<usize> {
        let Some(d) = self.device_of_addr(addr) else {
            return fail(ACL_ERROR_RT_PARAM_INVALID, format!("{what} {addr:#x} is not device memory"));
        };
        if len > 0 && self.mem[d].find(addr, len).is_none() {
            return fail(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("{what} {addr:#x}+{len} is not inside a live allocation of device {d}"),
            );
        }
        Ok(d)
    }

    pub fn is_pinned_host(&self, addr: u64, len: u64) -> bool {
        self.host.iter().any(|(&a, l)| addr >= a && addr + len <= a + l.size() as u64)
    }
}
