//! `Backend` for Huawei Ascend NPUs over the CANN libraries (through `acl-sys`).
//!
//! * Devices: count, SoC name (matched on the whole string), memory, cube/vector cores
//!   and nominal peaks per SoC; the calling thread is bound to a device automatically
//!   (`aclrtSetCurrentContext` with the device's context) before every ACL call.
//! * Memory: `aclrtMalloc` under the runtime's pool, every address checked against an
//!   allocation table (contract rule M1) and 32-byte aligned for aclnn; frees wait for
//!   streams with queued work (M2). Host copies are synchronous `aclrtMemcpy` from
//!   pageable memory (the facts sheet's rule: async copies only from pinned buffers).
//! * Streams (`aclrtCreateStreamWithConfig`, falling back to `aclrtCreateStream`),
//!   events, device synchronisation; each stream owns a workspace and a scratch buffer.
//! * Kernels: every op of the table through aclnn two-phase calls (tier `fast`,
//!   units Cube / Vector / Scalar), and a host reference tier (backend-cpu's reference
//!   kernels on copies) that is the ground truth and the implementation chosen for what
//!   the SoC cannot run (BF16, aclnnExp, AddLayerNorm... on the 910).

#![allow(clippy::too_many_arguments)]

pub mod error;
mod kernels;

pub use error::AclBackendError;

use acl_sys::{Api, LoadConfig, aclrtContext, aclrtEvent, aclrtStream};
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId, UnitInfo};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// The id of every device's default stream (an explicit ACL stream made at start-up).
pub const DEFAULT_STREAM: StreamId = StreamId(0);

/// How FP32 matrix products are run where the Cube has no FP32 path (Atlas training).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp32Matmul {
    /// Decline FP32 on the Cube: the host reference tier runs it (exact, slow).
    Exact,
    /// `cubeMathType = 1`: the 910 computes FP32 inputs as FP16 (reported in the kernel name).
    Fp16,
}

/// Configuration of the Ascend backend.
#[derive(Clone, Debug)]
pub struct AclConfig {
    /// Directory holding the CANN libraries; `None` = discovery (see `acl_sys::search_dirs`).
    pub lib_dir: Option<PathBuf>,
    pub fp32_matmul: Fp32Matmul,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig { lib_dir: None, fp32_matmul: Fp32Matmul::Exact }
    }
}

impl AclConfig {
    /// Defaults overridden by `NPURT_ACL_LIB_DIR` and `NPURT_ACL_FP32_MATMUL`
    /// (`exact` | `fp16`).
    pub fn from_env() -> BResult<AclConfig> {
        let mut c = AclConfig::default();
        if let Some(d) = std::env::var_os("NPURT_ACL_LIB_DIR").filter(|d| !d.is_empty()) {
            c.lib_dir = Some(d.into());
        }
        if let Ok(v) = std::env::var("NPURT_ACL_FP32_MATMUL") {
            c.fp32_matmul = match v.trim() {
                "exact" | "" => Fp32Matmul::Exact,
                "fp16" => Fp32Matmul::Fp16,
                o => {
                    return Err(AclBackendError::BadRequest(format!(
                        "NPURT_ACL_FP32_MATMUL must be exact or fp16, got {o:?}"
                    )));
                }
            };
        }
        Ok(c)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A device buffer owned by the backend (workspace / scratch of a stream).
#[derive(Default)]
pub(crate) struct Buf {
    pub ptr: u64,
    pub size: usize,
}

pub(crate) struct StreamRec {
    pub handle: usize,
    /// Work was queued since the last successful synchronisation.
    pub dirty: AtomicBool,
    /// An error found by a synchronisation made on the stream's behalf (e.g. by `free`),
    /// reported at its next synchronisation.
    pub pending: Mutex<Option<runtime::Error>>,
    pub workspace: Mutex<Buf>,
    pub scratch: Mutex<Buf>,
    /// (op, submission) queued since the last synchronisation, named by async errors.
    pub inflight: Mutex<Vec<(&'static str, u64)>>,
    pub label: String,
}

impl StreamRec {
    pub fn raw(&self) -> aclrtStream {
        self.handle as aclrtStream
    }
}

struct EventRec {
    handle: usize,
    recorded: bool,
}

pub(crate) struct Dev {
    pub id: i32,
    ctx: usize,
    pub soc: String,
    pub info: DeviceInfo,
    /// user address -> (raw aclrtMalloc address, usable bytes)
    allocs: Mutex<BTreeMap<u64, (u64, usize)>>,
    pub streams: Mutex<HashMap<u64, Arc<StreamRec>>>,
    events: Mutex<HashMap<u64, EventRec>>,
    next_id: AtomicU64,
}

/// The Ascend backend.
pub struct AclBackend {
    pub(crate) api: Arc<Api>,
    pub(crate) devs: Vec<Dev>,
    pub(crate) cfg: AclConfig,
    table: kernels::Table,
    instance: u64,
}

static INSTANCES: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (backend instance, device) the calling thread is bound to.
    static BOUND: Cell<(u64, i32)> = const { Cell::new((0, -1)) };
}

/// The SoC families the facts sheet distinguishes (matched on the whole name).
pub fn is_910_family(soc: &str) -> bool {
    matches!(soc, "Ascend910A" | "Ascend910B" | "Ascend910ProA" | "Ascend910ProB" | "Ascend910PremiumA")
}

/// (cube cores, vector cores, cube MHz) from the platform ini files (facts §F).
fn soc_figures(soc: &str) -> Option<(u32, u32, f64)> {
    Some(match soc {
        "Ascend910A" => (32, 0, 1000.0),
        "Ascend910B" => (30, 0, 900.0),
        "Ascend910ProA" => (32, 0, 1100.0),
        "Ascend910ProB" => (30, 0, 1150.0),
        "Ascend910PremiumA" => (32, 0, 1220.0),
        "Ascend910B1" => (24, 48, 1850.0),
        "Ascend910B2" | "Ascend910B2C" => (24, 48, 1800.0),
        "Ascend910B3" => (20, 40, 1800.0),
        "Ascend910B4" => (20, 40, 1500.0),
        _ => return None,
    })
}

/// Symbols without which the backend cannot work.
const REQUIRED: &[&str] = &[
    "aclInit",
    "aclGetRecentErrMsg",
    "aclrtSetDevice",
    "aclrtResetDevice",
    "aclrtGetDeviceCount",
    "aclrtGetSocName",
    "aclrtGetCurrentContext",
    "aclrtSetCurrentContext",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtSynchronizeStream",
    "aclrtSynchronizeDevice",
    "aclrtStreamWaitEvent",
    "aclrtCreateEvent",
    "aclrtDestroyEvent",
    "aclrtRecordEvent",
    "aclrtSynchronizeEvent",
    "aclrtEventElapsedTime",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtGetMemInfo",
    "aclrtMemcpy",
    "aclrtMemcpyAsync",
    "aclrtMemset",
    "aclCreateTensor",
    "aclDestroyTensor",
    "aclCreateScalar",
    "aclDestroyScalar",
    "aclCreateIntArray",
    "aclDestroyIntArray",
    "aclnnMatmulGetWorkspaceSize",
    "aclnnMatmul",
    "aclnnAddGetWorkspaceSize",
    "aclnnAdd",
];

impl AclBackend {
    /// Loads CANN, initialises ACL and opens every visible device. Any reason it
    /// cannot is [`AclBackendError::Unavailable`] ("Ascend not available: ...").
    pub fn new(cfg: AclConfig) -> BResult<AclBackend> {
        let unavailable = |m: String| AclBackendError::Unavailable(m);
        let api = Api::load(&LoadConfig { lib_dir: cfg.lib_dir.clone(), no_system_loader: false })
            .map_err(|e| unavailable(e.to_string()))?;
        for k in [acl_sys::LibKind::NnOpBase, acl_sys::LibKind::OpApi] {
            api.library_status(k).map_err(|e| unavailable(e.to_string()))?;
        }
        api.require(REQUIRED).map_err(|e| unavailable(e.to_string()))?;
        let api = Arc::new(api);
        let sym = |e: acl_sys::LoadError| unavailable(e.to_string());
        let init = api.aclInit().map_err(sym)?;
        // SAFETY: aclInit(NULL) = no configuration file.
        let code = unsafe { init(std::ptr::null()) };
        if code != acl_sys::codes::ACL_ERROR_REPEAT_INITIALIZE {
            api.check("aclInit", code).map_err(|e| unavailable(e.to_string()))?;
        }
        let mut count = 0u32;
        let gdc = api.aclrtGetDeviceCount().map_err(sym)?;
        // SAFETY: `count` is a valid out-pointer.
        let code = unsafe { gdc(&mut count) };
        api.check("aclrtGetDeviceCount", code).map_err(|e| unavailable(format!("no usable device: {e}")))?;
        if count == 0 {
            return Err(unavailable("no Ascend device is visible (aclrtGetDeviceCount = 0)".into()));
        }
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let mut b = AclBackend { api, devs: Vec::new(), table: kernels::Table::default(), instance, cfg };
        for d in 0..count as i32 {
            match b.open_device(d) {
                Ok(dev) => b.devs.push(dev),
                Err(e) => {
                    // `b` drops here: devices opened so far are closed.
                    return Err(unavailable(format!("opening device {d}: {e}")));
                }
            }
        }
        let soc = b.devs[0].soc.clone();
        b.table = kernels::Table::build(&soc, &b.cfg);
        log::info!(
            "acl: {} device(s), SoC {soc}, libraries from {} ({})",
            b.devs.len(),
            b.api.origin(),
            b.api.libraries().join(", ")
        );
        Ok(b)
    }

    fn open_device(&self, d: i32) -> BResult<Dev> {
        let api = &self.api;
        let sd = api.aclrtSetDevice().map_err(|e| AclBackendError::Symbol { op: None, err: e })?;
        // SAFETY: plain integer argument.
        api.check("aclrtSetDevice", unsafe { sd(d) }).map_err(|e| AclBackendError::call(None, e))?;
        let r = (|| {
            let mut ctx: aclrtContext = std::ptr::null_mut();
            let gc = api.aclrtGetCurrentContext().map_err(|e| AclBackendError::Symbol { op: None, err: e })?;
            // SAFETY: valid out-pointer.
            api.check("aclrtGetCurrentContext", unsafe { gc(&mut ctx) }).map_err(|e| AclBackendError::call(None, e))?;
            BOUND.with(|b| b.set((self.instance, d)));
            let gs = api.aclrtGetSocName().map_err(|e| AclBackendError::Symbol { op: None, err: e })?;
            // SAFETY: no arguments; returns NULL or a library-owned NUL-terminated string.
            let p = unsafe { gs() };
            if p.is_null() {
                let why = api.recent_error_message().unwrap_or_default();
                return Err(AclBackendError::BadRequest(format!("aclrtGetSocName returned NULL: {why}")));
            }
            // SAFETY: non-NULL, NUL-terminated, copied at once.
            let soc = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            let (mut free, mut total) = (0usize, 0usize);
            let mi = api.aclrtGetMemInfo().map_err(|e| AclBackendError::Symbol { op: None, err: e })?;
            // SAFETY: valid out-pointers.
            api.check("aclrtGetMemInfo", unsafe { mi(acl_sys::ACL_HBM_MEM, &mut free, &mut total) })
                .map_err(|e| AclBackendError::call(None, e))?;
            let info = self.describe(d, &soc, total as u64);
            let dev = Dev {
                id: d,
                ctx: ctx as usize,
                soc,
                info,
                allocs: Mutex::new(BTreeMap::new()),
                streams: Mutex::new(HashMap::new()),
                events: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
            };
            let s = self.raw_create_stream(format!("acl:{d}/default"))?;
            lock(&dev.streams).insert(DEFAULT_STREAM.0, Arc::new(s));
            Ok(dev)
        })();
        if r.is_err() {
            if let Ok(rd) = api.aclrtResetDevice() {
                // SAFETY: undoes the aclrtSetDevice above.
                let _ = unsafe { rd(d) };
            }
        }
        r
    }

    fn describe(&self, d: i32, soc: &str, total: u64) -> DeviceInfo {
        let api = &self.api;
        let mut ai_cores = 0i64;
        let mut vec_cores = 0i64;
        if let Some(f) = api.optional(api.aclrtGetDeviceInfo()) {
            // SAFETY: valid out-pointers, plain integer arguments.
            unsafe {
                f(d as u32, acl_sys::ACL_DEV_ATTR_CUBE_CORE_NUM, &mut ai_cores);
                f(d as u32, acl_sys::ACL_DEV_ATTR_VECTOR_CORE_NUM, &mut vec_cores);
            }
        } else if let Some(f) = api.optional(api.aclGetDeviceCapability()) {
            // SAFETY: as above.
            unsafe {
                f(d as u32, acl_sys::ACL_DEVICE_INFO_AI_CORE_NUM, &mut ai_cores);
                f(d as u32, acl_sys::ACL_DEVICE_INFO_VECTOR_CORE_NUM, &mut vec_cores);
            }
        }
        let (cube, vector, mhz, src) = match soc_figures(soc) {
            Some((c, v, m)) => (
                if ai_cores > 0 { ai_cores as f64 } else { c as f64 },
                if vec_cores > 0 { vec_cores as f64 } else { v as f64 },
                m,
                format!("platform ini of {soc}: cores x 16x16x16 MAC x 2 x {m} MHz (nominal)"),
            ),
            None => (ai_cores.max(1) as f64, vec_cores as f64, 1000.0, format!("unknown SoC {soc}: 1 GHz assumed")),
        };
        let hz = mhz * 1e6;
        // Bandwidth is not stated by any Huawei file (facts §F): a labelled assumption.
        let bw = 1.0e12;
        let bw_note = "; HBM bandwidth unknown, 1 TB/s assumed";
        // 910: the vector unit sits inside each AI core (128 FP16 lanes).
        let vec_units = if vector > 0.0 { vector } else { cube };
        DeviceInfo {
            name: format!("{soc} (acl:{d})"),
            memory_bytes: total,
            units: vec![
                UnitInfo {
                    unit: kernels::CUBE,
                    peak_flops: cube * 4096.0 * 2.0 * hz,
                    peak_bytes_per_s: bw,
                    source: format!("{src}{bw_note}"),
                },
                UnitInfo {
                    unit: kernels::VECTOR,
                    peak_flops: vec_units * 128.0 * 2.0 * hz,
                    peak_bytes_per_s: bw,
                    source: format!("{vec_units} vector units x 128 FP16 lanes x 2 x {mhz} MHz{bw_note}"),
                },
                UnitInfo {
                    unit: kernels::SCALAR,
                    peak_flops: cube * hz,
                    peak_bytes_per_s: bw,
                    source: format!("{cube} scalar units x {mhz} MHz{bw_note}"),
                },
                UnitInfo {
                    unit: kernels::HOST,
                    peak_flops: 1e10,
                    peak_bytes_per_s: 1e9,
                    source: "host reference tier through PCIe copies (assumed 10 GFLOP/s, 1 GB/s)".into(),
                },
            ],
            host_shared: false,
            min_alignment: 64,
        }
    }

    /// The SoC of device 0.
    pub fn soc(&self) -> &str {
        self.devs.first().map_or("", |d| d.soc.as_str())
    }

    /// Where the CANN libraries were loaded from.
    pub fn library_origin(&self) -> String {
        self.api.origin().to_string()
    }

    pub(crate) fn dev(&self, d: usize) -> BResult<&Dev> {
        self.devs.get(d).ok_or(AclBackendError::NoDevice(d))
    }

    /// Binds the calling thread to device `d` (once per thread and device).
    pub(crate) fn bind(&self, d: usize) -> BResult<&Dev> {
        let dev = self.dev(d)?;
        if BOUND.with(|b| b.get()) != (self.instance, dev.id) {
            let f = self.sym(self.api.aclrtSetCurrentContext(), None)?;
            // SAFETY: `ctx` is the live default context of this device (made by
            // aclrtSetDevice in `open_device`, released only in Drop).
            let code = unsafe { f(dev.ctx as aclrtContext) };
            self.api.check("aclrtSetCurrentContext", code).map_err(|e| AclBackendError::call(None, e))?;
            BOUND.with(|b| b.set((self.instance, dev.id)));
        }
        Ok(dev)
    }

    pub(crate) fn sym<T>(&self, r: std::result::Result<T, acl_sys::LoadError>, op: Option<&'static str>) -> BResult<T> {
        r.map_err(|e| AclBackendError::Symbol { op, err: e })
    }

    pub(crate) fn check(&self, op: Option<&'static str>, call: &'static str, code: i32) -> BResult<()> {
        self.api.check(call, code).map_err(|e| AclBackendError::call(op, e))
    }

    /// A new ACL stream; `label` names it in errors (`acl:<device>/default`,
    /// `acl:<device>/stream<id>`, the runtime's names).
    fn raw_create_stream(&self, label: String) -> BResult<StreamRec> {
        let mut s: aclrtStream = std::ptr::null_mut();
        let code = match self.api.optional(self.api.aclrtCreateStreamWithConfig()) {
            // SAFETY: valid out-pointer; priority is reserved (0); FAST_LAUNCH is a documented flag.
            Some(f) => (unsafe { f(&mut s, 0, acl_sys::ACL_STREAM_FAST_LAUNCH) }, "aclrtCreateStreamWithConfig"),
            None => {
                let f = self.sym(self.api.aclrtCreateStream(), None)?;
                // SAFETY: valid out-pointer.
                (unsafe { f(&mut s) }, "aclrtCreateStream")
            }
        };
        self.check(None, code.1, code.0)?;
        Ok(StreamRec {
            handle: s as usize,
            dirty: AtomicBool::new(false),
            pending: Mutex::new(None),
            workspace: Mutex::new(Buf::default()),
            scratch: Mutex::new(Buf::default()),
            inflight: Mutex::new(Vec::new()),
            label,
        })
    }

    pub(crate) fn stream(&self, d: usize, s: StreamId) -> BResult<Arc<StreamRec>> {
        lock(&self.dev(d)?.streams).get(&s.0).cloned().ok_or(AclBackendError::NoStream(s.0, d))
    }

    fn sync_rec(&self, rec: &StreamRec) -> Result<()> {
        if let Some(e) = lock(&rec.pending).take() {
            return Err(e);
        }
        let f = self.sym(self.api.aclrtSynchronizeStream(), None)?;
        // SAFETY: a live stream of the bound device.
        let code = unsafe { f(rec.raw()) };
        let inflight = std::mem::take(&mut *lock(&rec.inflight));
        if let Err(e) = self.check(None, "aclrtSynchronizeStream", code) {
            let ops: Vec<&str> = inflight.iter().map(|(o, _)| *o).collect();
            return Err(runtime::Error::Async {
                op: if ops.is_empty() { "(no op)".into() } else { ops.join(", ") },
                stream: rec.label.clone(),
                seq: inflight.last().map_or(0, |x| x.1),
                msg: e.to_string(),
            });
        }
        rec.dirty.store(false, Ordering::Release);
        Ok(())
    }

    /// [`Self::sync_rec`] as a backend error (for internal callers).
    pub(crate) fn sync_rec_backend(&self, rec: &StreamRec) -> BResult<()> {
        self.sync_rec(rec).map_err(|e| AclBackendError::BadRequest(e.to_string()))
    }

    /// Synchronises every stream with queued work, keeping their errors for them.
    fn drain(&self, dev: &Dev) {
        let recs: Vec<Arc<StreamRec>> = lock(&dev.streams).values().cloned().collect();
        for r in recs {
            if r.dirty.load(Ordering::Acquire) {
                if let Err(e) = self.sync_rec(&r) {
                    lock(&r.pending).get_or_insert(e);
                }
            }
        }
    }

    /// Checks that `addr .. addr + len` lies in one live allocation: its (base, size).
    pub(crate) fn check_range(&self, d: usize, addr: u64, len: usize) -> BResult<(u64, usize)> {
        let dev = self.dev(d)?;
        let m = lock(&dev.allocs);
        let bad = AclBackendError::BadAddress { device: d, addr, len };
        let (&base, &(_, size)) = m.range(..=addr).next_back().ok_or(bad.clone())?;
        let end = addr.checked_add(len as u64).ok_or(bad.clone())?;
        if end > base + size as u64 {
            return Err(bad);
        }
        Ok((base, size))
    }

    pub(crate) fn raw_malloc(&self, op: Option<&'static str>, bytes: usize) -> BResult<u64> {
        let f = self.sym(self.api.aclrtMalloc(), op)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer, size > 0 (callers), a single documented policy value.
        let code = unsafe { f(&mut p, bytes.max(1), acl_sys::ACL_MEM_MALLOC_HUGE_FIRST) };
        self.check(op, "aclrtMalloc", code)?;
        Ok(p as u64)
    }

    /// `aclrtFree`, retried once (teardown must not leak on one transient failure).
    pub(crate) fn raw_free(&self, raw: u64) -> BResult<()> {
        let f = self.sym(self.api.aclrtFree(), None)?;
        // SAFETY: `raw` came from aclrtMalloc and no queued work uses it (callers drain first).
        let code = unsafe { f(raw as *mut c_void) };
        if code == 0 {
            return Ok(());
        }
        let first = self.check(None, "aclrtFree", code);
        log::warn!("acl: {}; retrying once", first.as_ref().err().map(|e| e.to_string()).unwrap_or_default());
        // SAFETY: as above; the first attempt failed, so the block is still ours.
        let code = unsafe { f(raw as *mut c_void) };
        self.check(None, "aclrtFree", code)
    }

    /// A per-stream buffer of at least `bytes` (grows after synchronising the stream).
    pub(crate) fn stream_buf(
        &self,
        op: &'static str,
        rec: &StreamRec,
        which: &Mutex<Buf>,
        bytes: usize,
    ) -> BResult<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        let mut b = lock(which);
        if b.size >= bytes {
            return Ok(b.ptr);
        }
        if b.ptr != 0 {
            // Work queued on the stream may still use the old buffer.
            if let Err(e) = self.sync_rec(rec) {
                lock(&rec.pending).get_or_insert(e);
            }
            self.raw_free(b.ptr)?;
            *b = Buf::default();
        }
        let size = bytes.next_power_of_two().max(64 << 10);
        let p = self.raw_malloc(Some(op), size)?;
        *b = Buf { ptr: p, size };
        Ok(p)
    }

    fn free_stream_bufs(&self, rec: &StreamRec) {
        for m in [&rec.workspace, &rec.scratch] {
            let mut b = lock(m);
            if b.ptr != 0 {
                if let Err(e) = self.raw_free(b.ptr) {
                    log::error!("acl: freeing a stream buffer: {e}");
                }
                *b = Buf::default();
            }
        }
    }

    fn destroy_stream_rec(&self, rec: &StreamRec) -> BResult<()> {
        let _ = self.sync_rec(rec);
        self.free_stream_bufs(rec);
        let f = self.sym(self.api.aclrtDestroyStream(), None)?;
        // SAFETY: a live stream, synchronised, no longer reachable from the tables.
        let mut code = unsafe { f(rec.raw()) };
        if code != 0 {
            log::warn!("acl: aclrtDestroyStream returned {code}; retrying once");
            // SAFETY: as above; the first attempt failed, so the stream is still live.
            code = unsafe { f(rec.raw()) };
        }
        self.check(None, "aclrtDestroyStream", code)
    }

    fn event_handle(&self, d: usize, e: EventId) -> BResult<(usize, bool)> {
        lock(&self.dev(d)?.events).get(&e.0).map(|r| (r.handle, r.recorded)).ok_or(AclBackendError::NoEvent(e.0, d))
    }

    pub(crate) fn kernels_table(&self) -> &kernels::Table {
        &self.table
    }
}

impl Drop for AclBackend {
    fn drop(&mut self) {
        for i in 0..self.devs.len() {
            if self.bind(i).is_err() {
                continue;
            }
            let dev = &self.devs[i];
            self.drain(dev);
            let events: Vec<EventRec> = lock(&dev.events).drain().map(|(_, v)| v).collect();
            if let Ok(f) = self.api.aclrtDestroyEvent() {
                for e in events {
                    // SAFETY: a live event of this device, unreachable after this.
                    let mut code = unsafe { f(e.handle as aclrtEvent) };
                    if code != 0 {
                        // SAFETY: as above.
                        code = unsafe { f(e.handle as aclrtEvent) };
                    }
                    if code != 0 {
                        log::error!("acl: aclrtDestroyEvent returned {code} at teardown");
                    }
                }
            }
            let streams: Vec<Arc<StreamRec>> = lock(&dev.streams).drain().map(|(_, v)| v).collect();
            for s in streams {
                if let Err(e) = self.destroy_stream_rec(&s) {
                    log::error!("acl: destroying a stream at teardown: {e}");
                }
            }
            let allocs: Vec<u64> = lock(&dev.allocs).values().map(|(raw, _)| *raw).collect();
            if !allocs.is_empty() {
                log::warn!("acl:{i}: {} allocation(s) still live at teardown; freeing them", allocs.len());
            }
            for raw in allocs {
                let _ = self.raw_free(raw);
            }
            lock(&self.devs[i].allocs).clear();
            if let Ok(f) = self.api.aclrtResetDevice() {
                // SAFETY: pairs the single aclrtSetDevice of `open_device`.
                let mut code = unsafe { f(dev.id) };
                if code != 0 {
                    log::warn!("acl: aclrtResetDevice({}) returned {code}; retrying once", dev.id);
                    // SAFETY: as above; the failed call dropped no reference.
                    code = unsafe { f(dev.id) };
                }
                if code != 0 {
                    log::error!("acl: aclrtResetDevice({}) returned {code}", dev.id);
                }
            }
        }
        BOUND.with(|b| {
            if b.get().0 == self.instance {
                b.set((0, -1))
            }
        });
        // aclFinalize is deliberately not called: it is process-wide, other users of ACL
        // may remain, and CANN forbids calling it from destructors (facts §A.1).
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
        let f = self.api.aclrtGetMemInfo().ok()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the thread is bound to the device.
        let code = unsafe { f(acl_sys::ACL_HBM_MEM, &mut free, &mut total) };
        (code == 0).then_some(free as u64)
    }

    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        if bytes == 0 || !align.is_power_of_two() {
            return Err(AclBackendError::BadRequest(format!("allocation of {bytes} bytes aligned to {align}")).into());
        }
        let dev = self.bind(device)?;
        // aclrtMalloc starts are 64-byte aligned; larger alignments over-allocate.
        let extra = if align > 64 { align } else { 0 };
        let total = bytes.checked_add(extra).ok_or_else(|| AclBackendError::BadRequest("size overflow".into()))?;
        let raw = self.raw_malloc(None, total).map_err(|e| match e.code() {
            Some(acl_sys::codes::ACL_ERROR_RT_MEMORY_ALLOCATION) | Some(acl_sys::codes::ACL_ERROR_RT_DEVICE_OOM) => {
                runtime::Error::Backend { backend: "acl", msg: format!("out of device memory on acl:{device}: {e}") }
            }
            _ => e.into(),
        })?;
        let user = if extra > 0 { raw.div_ceil(align as u64) * align as u64 } else { raw };
        lock(&dev.allocs).insert(user, (raw, bytes));
        Ok(DevicePtr(user))
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let dev = self.bind(device)?;
        let (raw, _) =
            *lock(&dev.allocs).get(&ptr.0).ok_or(AclBackendError::BadAddress { device, addr: ptr.0, len: 0 })?;
        // aclrtFree does not wait for queued kernels (facts §A.6): drain first (M2).
        self.drain(dev);
        self.raw_free(raw)?;
        lock(&dev.allocs).remove(&ptr.0);
        Ok(())
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind(device)?;
        self.check_range(device, dst.0, src.len())?;
        let f = self.sym(self.api.aclrtMemcpy(), None)?;
        // SAFETY: dst range validated (device memory); src is a live host slice of that length.
        let code = unsafe {
            f(dst.0 as *mut c_void, src.len(), src.as_ptr().cast(), src.len(), acl_sys::ACL_MEMCPY_HOST_TO_DEVICE)
        };
        Ok(self.check(None, "aclrtMemcpy", code)?)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        self.bind(device)?;
        let rec = self.stream(device, stream)?;
        self.sync_rec(&rec)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.check_range(device, src.0, dst.len())?;
        let f = self.sym(self.api.aclrtMemcpy(), None)?;
        // SAFETY: src range validated; dst is an exclusively borrowed host slice.
        let code = unsafe {
            f(dst.as_mut_ptr().cast(), dst.len(), src.0 as *const c_void, dst.len(), acl_sys::ACL_MEMCPY_DEVICE_TO_HOST)
        };
        Ok(self.check(None, "aclrtMemcpy", code)?)
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
        self.bind(device)?;
        if src.0 < dst.0 + bytes as u64 && dst.0 < src.0 + bytes as u64 {
            return Err(AclBackendError::BadRequest("device copy ranges overlap".into()).into());
        }
        let (sb, _) = self.check_range(device, src.0, bytes)?;
        let (db, _) = self.check_range(device, dst.0, bytes)?;
        let rec = self.stream(device, stream)?;
        if src.0 % 64 == 0 && dst.0 % 64 == 0 {
            let f = self.sym(self.api.aclrtMemcpyAsync(), None)?;
            // SAFETY: both ranges validated and 64-byte aligned (on-chip D2D rule).
            let code = unsafe {
                f(
                    dst.0 as *mut c_void,
                    bytes,
                    src.0 as *const c_void,
                    bytes,
                    acl_sys::ACL_MEMCPY_DEVICE_TO_DEVICE,
                    rec.raw(),
                )
            };
            self.check(None, "aclrtMemcpyAsync", code)?;
            rec.dirty.store(true, Ordering::Release);
            return Ok(());
        }
        // Unaligned: a byte-typed aclnnInplaceCopy from aligned bases with element offsets.
        Ok(kernels::byte_copy(self, device, &rec, (sb, src.0 - sb), (db, dst.0 - db), bytes)?)
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind(device)?;
        self.check_range(device, dst.0, bytes)?;
        let rec = self.stream(device, stream)?;
        match self.api.optional(self.api.aclrtMemsetAsync()) {
            Some(f) => {
                // SAFETY: range validated; the stream is live.
                let code = unsafe { f(dst.0 as *mut c_void, bytes, value as i32, bytes, rec.raw()) };
                self.check(None, "aclrtMemsetAsync", code)?;
                rec.dirty.store(true, Ordering::Release);
            }
            None => {
                self.sync_rec(&rec)?;
                let f = self.sym(self.api.aclrtMemset(), None)?;
                // SAFETY: range validated; earlier work on the stream has finished.
                let code = unsafe { f(dst.0 as *mut c_void, bytes, value as i32, bytes) };
                self.check(None, "aclrtMemset", code)?;
            }
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
        let id = dev.next_id.fetch_add(1, Ordering::Relaxed);
        let rec = self.raw_create_stream(format!("acl:{device}/stream{id}"))?;
        lock(&dev.streams).insert(id, Arc::new(rec));
        Ok(StreamId(id))
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        if stream == DEFAULT_STREAM {
            return Ok(());
        }
        let dev = self.bind(device)?;
        let rec = lock(&dev.streams).remove(&stream.0).ok_or(AclBackendError::NoStream(stream.0, device))?;
        Ok(self.destroy_stream_rec(&rec)?)
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.bind(device)?;
        let rec = self.stream(device, stream)?;
        self.sync_rec(&rec)
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        let dev = self.bind(device)?;
        let recs: Vec<Arc<StreamRec>> = lock(&dev.streams).values().cloned().collect();
        let mut first = Ok(());
        for r in recs {
            if let Err(e) = self.sync_rec(&r) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        let dev = self.bind(device)?;
        let mut e: aclrtEvent = std::ptr::null_mut();
        let (code, call) = match self.api.optional(self.api.aclrtCreateEventWithFlag()) {
            // SAFETY: valid out-pointer, documented flags (cross-stream wait + timestamps).
            Some(f) => (
                unsafe { f(&mut e, acl_sys::ACL_EVENT_SYNC | acl_sys::ACL_EVENT_TIME_LINE) },
                "aclrtCreateEventWithFlag",
            ),
            None => {
                let f = self.sym(self.api.aclrtCreateEvent(), None)?;
                // SAFETY: valid out-pointer.
                (unsafe { f(&mut e) }, "aclrtCreateEvent")
            }
        };
        self.check(None, call, code)?;
        let id = dev.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&dev.events).insert(id, EventRec { handle: e as usize, recorded: false });
        Ok(EventId(id))
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        let dev = self.bind(device)?;
        let rec = lock(&dev.events).remove(&event.0).ok_or(AclBackendError::NoEvent(event.0, device))?;
        let f = self.sym(self.api.aclrtDestroyEvent(), None)?;
        // SAFETY: a live event, now unreachable from the table (destroying a pending event is allowed).
        let code = unsafe { f(rec.handle as aclrtEvent) };
        if let Err(e) = self.check(None, "aclrtDestroyEvent", code) {
            lock(&dev.events).insert(event.0, rec);
            return Err(e.into());
        }
        Ok(())
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        let dev = self.bind(device)?;
        let (h, _) = self.event_handle(device, event)?;
        let rec = self.stream(device, stream)?;
        let f = self.sym(self.api.aclrtRecordEvent(), None)?;
        // SAFETY: live event and stream of the bound device.
        let code = unsafe { f(h as aclrtEvent, rec.raw()) };
        self.check(None, "aclrtRecordEvent", code)?;
        rec.dirty.store(true, Ordering::Release);
        if let Some(r) = lock(&dev.events).get_mut(&event.0) {
            r.recorded = true;
        }
        Ok(())
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        self.bind(device)?;
        let (h, recorded) = self.event_handle(device, event)?;
        if !recorded {
            return Ok(()); // an event never recorded counts as complete
        }
        let rec = self.stream(device, stream)?;
        let f = self.sym(self.api.aclrtStreamWaitEvent(), None)?;
        // SAFETY: live event (created with ACL_EVENT_SYNC where possible) and stream.
        let code = unsafe { f(rec.raw(), h as aclrtEvent) };
        self.check(None, "aclrtStreamWaitEvent", code)?;
        rec.dirty.store(true, Ordering::Release);
        Ok(())
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        self.bind(device)?;
        let (h, recorded) = self.event_handle(device, event)?;
        if !recorded {
            return Ok(true);
        }
        if let Some(f) = self.api.optional(self.api.aclrtQueryEventStatus()) {
            let mut st = acl_sys::ACL_EVENT_RECORDED_STATUS_NOT_READY;
            // SAFETY: live event, valid out-pointer.
            let code = unsafe { f(h as aclrtEvent, &mut st) };
            self.check(None, "aclrtQueryEventStatus", code)?;
            return Ok(st == acl_sys::ACL_EVENT_RECORDED_STATUS_COMPLETE);
        }
        if let Some(f) = self.api.optional(self.api.aclrtQueryEvent()) {
            let mut st = acl_sys::ACL_EVENT_STATUS_NOT_READY;
            // SAFETY: as above (the deprecated enum numbers COMPLETE as 0).
            let code = unsafe { f(h as aclrtEvent, &mut st) };
            self.check(None, "aclrtQueryEvent", code)?;
            return Ok(st == acl_sys::ACL_EVENT_STATUS_COMPLETE);
        }
        self.synchronize_event(device, event)?;
        Ok(true)
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        self.bind(device)?;
        let (h, recorded) = self.event_handle(device, event)?;
        if !recorded {
            return Ok(());
        }
        let f = self.sym(self.api.aclrtSynchronizeEvent(), None)?;
        // SAFETY: live event.
        let code = unsafe { f(h as aclrtEvent) };
        Ok(self.check(None, "aclrtSynchronizeEvent", code)?)
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        self.bind(device)?;
        let (a, ra) = self.event_handle(device, start)?;
        let (b, rb) = self.event_handle(device, end)?;
        if !ra || !rb {
            return Err(AclBackendError::BadRequest("elapsed time needs two recorded events".into()).into());
        }
        let f = self.sym(self.api.aclrtEventElapsedTime(), None)?;
        let mut ms = 0f32;
        // SAFETY: valid out-pointer first (the C order), two live events.
        let code = unsafe { f(&mut ms, a as aclrtEvent, b as aclrtEvent) };
        self.check(None, "aclrtEventElapsedTime", code)?;
        Ok(Duration::from_secs_f64((ms.max(0.0) as f64) / 1e3))
    }

    fn kernels(&self) -> &[KernelInfo] {
        &self.table.infos
    }
    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        kernels::launch(self, device, kernel, &args, stream)
    }
}
