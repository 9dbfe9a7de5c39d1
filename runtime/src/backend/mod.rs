//! The contract every backend implements.
//!
//! # Safety contract
//!
//! [`Backend`] is an `unsafe trait`: its methods are safe to call, and an implementation
//! promises that **no sequence of calls to them can cause undefined behaviour**, whatever
//! the arguments. In particular an implementation must:
//!
//! * **(M1) check every address.** A [`DevicePtr`] range named by a copy, memset, launch
//!   or host mapping must lie inside one live allocation of that device; otherwise the
//!   call returns an error and touches nothing.
//! * **(M2) keep queued memory alive.** Memory named by queued work stays allocated until
//!   that work has finished, even if [`Backend::free`] is called earlier (the free is
//!   deferred). The runtime additionally never reuses such memory before an event says
//!   the work is done, so deferral is a safety net, not the normal path.
//! * **(M3) reject overlapping outputs.** A launch whose output operands overlap each
//!   other or an input is refused (the runtime validates this first, with a clearer
//!   message). The one exception is an op's in-place pair ([`Op::in_place`]): that input
//!   and output are one memory, which [`LaunchArgs::validate`] checks and then reports
//!   once, as the output.
//! * **(M4) own its handles.** Unknown or destroyed stream and event ids give an error.
//! * **(M5) never panic across the call.** Driver and kernel failures become
//!   [`crate::Error`] values (reported at the next synchronisation when asynchronous).
//! * **(M6) check every launch against its op.** A launch runs only when its operands
//!   are what the op's shape inference and the kernel's support predicate accept: as
//!   many as the op takes, outputs of exactly the dtypes and shapes [`Op::infer`] gives,
//!   dense outputs (and dense inputs, except for `Copy`), layouts whose extents fit the
//!   address space. [`LaunchArgs::validate`] checks all of this for every backend and
//!   returns the operands' byte ranges for the (M1) check.
//!
//! With these rules the runtime crate needs no `unsafe` code at all; every `unsafe` block
//! lives in a backend, next to the memory it reasons about.

pub mod allocations;

use crate::config::{GraphCapture, Precision};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{KernelInfo, KernelQuery, Unit};
use crate::op::{Op, TensorMeta};
use crate::shape::Layout;
use crate::size::MAX_BYTES;
use std::cell::RefCell;
use std::time::Duration;

/// An address in a device's memory space. On host-memory backends it is a host address;
/// elsewhere it is opaque and must never be dereferenced by the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    pub const NULL: DevicePtr = DevicePtr(0);
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// A stream handle issued by a backend (unique per device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

/// An event handle issued by a backend (unique per device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub u64);

/// A hardware unit and its nominal peak rates, for utilisation figures.
#[derive(Clone, Debug)]
pub struct UnitInfo {
    pub unit: Unit,
    /// Peak floating-point operations per second.
    pub peak_flops: f64,
    /// Peak bytes per second the unit can stream.
    pub peak_bytes_per_s: f64,
    /// How the peak was obtained (e.g. "cores x clock x FMA width").
    pub source: String,
}

/// What a device is.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub memory_bytes: u64,
    pub units: Vec<UnitInfo>,
    /// Device memory is host memory: zero-copy host views are possible.
    pub host_shared: bool,
    /// Smallest alignment every allocation honours.
    pub min_alignment: usize,
}

/// An operand of a launch: where its buffer starts and how its elements sit in it.
#[derive(Clone, Debug)]
pub struct TensorArg {
    pub ptr: DevicePtr,
    pub dtype: DType,
    pub layout: std::sync::Arc<Layout>,
}

impl TensorArg {
    pub fn meta(&self) -> TensorMeta {
        TensorMeta { dtype: self.dtype, shape: self.layout.shape.clone() }
    }

    /// The bytes this operand reaches, `(first byte, length)`: from `ptr` plus the layout's
    /// offset up to the largest element its strides reach (length 0 when it has no
    /// element). Every product and sum is checked; an error names the layout's fault.
    pub fn byte_range(&self) -> std::result::Result<(u64, usize), String> {
        let l = &*self.layout;
        let es = self.dtype.size();
        if l.strides.len() != l.shape.rank() {
            return Err(format!("{} strides for {} dimensions", l.strides.len(), l.shape.rank()));
        }
        let overflow = || format!("offset {} and strides {:?} reach past the address space", l.offset, l.strides);
        let start = l
            .offset
            .checked_mul(es)
            .filter(|&o| o <= MAX_BYTES)
            .and_then(|o| self.ptr.0.checked_add(o as u64))
            .ok_or_else(overflow)?;
        if l.shape.dims().contains(&0) {
            return Ok((start, 0));
        }
        let mut last = 0usize;
        for (&d, &s) in l.shape.dims().iter().zip(&l.strides) {
            last = (d - 1).checked_mul(s).and_then(|x| last.checked_add(x)).ok_or_else(overflow)?;
        }
        let len =
            last.checked_add(1).and_then(|n| n.checked_mul(es)).filter(|&n| n <= MAX_BYTES).ok_or_else(overflow)?;
        start.checked_add(len as u64).ok_or_else(overflow)?;
        Ok((start, len))
    }
}

/// What a backend derived once from a node's constant inputs when a graph was compiled
/// (a weight packed for its matrix kernel, say); handed back with every launch of that
/// node. Kernels check what they get (type and shape) and ignore what does not fit.
#[derive(Clone)]
pub struct Prepacked(pub std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for Prepacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepacked(..)")
    }
}

/// What [`Backend::prepack`] made of a node's constant inputs.
#[derive(Debug)]
pub struct Prepack {
    /// Handed back in [`LaunchArgs::prepacked`] on every launch of the node.
    pub prepacked: Prepacked,
    /// Constant inputs the kernel reads in another layout when it gets `prepacked`: (input
    /// index, the constant's bytes in that layout, as many as the original). The runtime
    /// stores these bytes on the device instead of the constant's own, so the weight is held
    /// once. Where it cannot (the constant has another reader, or the length differs) it
    /// drops the whole `Prepack` and the node runs as if nothing had been prepared.
    pub relayout: Vec<(usize, Vec<u8>)>,
}

impl Prepack {
    /// Prepared data that leaves the constants as they are.
    pub fn new(data: std::sync::Arc<dyn std::any::Any + Send + Sync>) -> Prepack {
        Prepack { prepacked: Prepacked(data), relayout: Vec::new() }
    }
}

/// Everything a kernel launch needs; owned so that a queued launch can outlive the call.
#[derive(Clone, Debug)]
pub struct LaunchArgs {
    pub op: Op,
    pub inputs: Vec<TensorArg>,
    pub outputs: Vec<TensorArg>,
    /// Scratch memory of at least [`Backend::workspace_size`] bytes, if that was non-zero.
    pub workspace: Option<(DevicePtr, usize)>,
    /// Submission sequence number, reported with asynchronous errors.
    pub seq: u64,
    /// Intra-op thread budget for this launch (0 = the whole device). The graph
    /// scheduler lowers it when several nodes run at once, so they share the cores
    /// instead of oversubscribing them.
    pub threads: usize,
    /// From [`Backend::prepack`] when the launch is a compiled graph's node.
    pub prepacked: Option<Prepacked>,
}

impl LaunchArgs {
    /// Checks this launch of `kernel` against its op (rule M6) and returns the byte range
    /// of every operand (inputs, then outputs; see [`TensorArg::byte_range`]) for the
    /// backend to check against its allocations (M1) and for overlaps (M3). The input of
    /// an in-place pair ([`Op::in_place`]) must be exactly its output's memory, and its
    /// range is returned empty at its address: the memory is the output's, checked,
    /// pinned and passed to the kernel once (so M3 holds for every other operand).
    ///
    /// Pass the backend's own description of the kernel (looked up by `id` and `name` in
    /// its table), not the caller's copy: its support predicate is called. A predicate
    /// must depend only on the query (and the hardware): signatures that passed lately are
    /// remembered per thread and not inferred again. The workspace is not checked here.
    /// Errors are [`Error::Invalid`] naming the op and the operand.
    pub fn validate(&self, kernel: &KernelInfo) -> Result<Vec<(u64, usize)>> {
        let op = self.op.name();
        if kernel.op != self.op.kind() {
            return Err(Error::invalid(op, format!("kernel {} implements {}", kernel.name, kernel.op)));
        }
        let mut ranges = Vec::with_capacity(self.inputs.len() + self.outputs.len());
        let dense_inputs = !matches!(self.op, Op::Copy);
        for (j, a) in self.inputs.iter().enumerate() {
            ranges.push(operand_range(op, "input", j, a, dense_inputs)?);
        }
        for (j, a) in self.outputs.iter().enumerate() {
            ranges.push(operand_range(op, "output", j, a, true)?);
        }
        // An in-place pair is one memory: the input's range is left empty (at its
        // address), so that its bytes are checked, pinned and passed once, as the output.
        for &(i, o) in self.op.in_place() {
            let (Some(a), Some(b)) = (self.inputs.get(i), self.outputs.get(o)) else { continue };
            if a.ptr != b.ptr || a.dtype != b.dtype || *a.layout != *b.layout {
                return Err(Error::invalid(op, format!("output {o} must be input {i}'s memory (updated in place)")));
            }
            ranges[i].1 = 0;
        }
        let passed = |c: &RefCell<Passed>| c.try_borrow().is_ok_and(|p| p.iter().any(|s| s.matches(kernel, self)));
        if !PASSED.with(passed) {
            let signature = self.check_signature(kernel)?;
            PASSED.with(|c| {
                if let Ok(mut p) = c.try_borrow_mut() {
                    if p.len() == PASSED_MAX {
                        p.pop();
                    }
                    p.insert(0, signature);
                }
            });
        }
        Ok(ranges)
    }

    /// The op's shape inference and the kernel's predicate on this launch's dtypes and
    /// shapes; the signature that passed.
    fn check_signature(&self, kernel: &KernelInfo) -> Result<Signature> {
        let op = self.op.name();
        let ins: Vec<TensorMeta> = self.inputs.iter().map(TensorArg::meta).collect();
        let outs = self.op.infer(&ins)?;
        if outs.len() != self.outputs.len() {
            return Err(Error::invalid(op, format!("expects {} outputs, got {}", outs.len(), self.outputs.len())));
        }
        for (i, (m, a)) in outs.iter().zip(&self.outputs).enumerate() {
            if m.dtype != a.dtype || m.shape != a.layout.shape {
                return Err(Error::invalid(op, format!("output {i} must be {m}, got {}", a.meta())));
            }
        }
        (kernel.supports)(&KernelQuery { op: &self.op, inputs: &ins, outputs: &outs }).map_err(|why| {
            Error::invalid(
                op,
                format!("kernel {} does not accept {}: {why}", kernel.name, crate::kernel::signature(&ins)),
            )
        })?;
        Ok(Signature { supports: kernel.supports as usize, kernel: kernel.op, op: self.op.clone(), ins, outs })
    }
}

/// The byte range of operand `j` of `op`, which must be dense when `dense` is set.
#[inline]
fn operand_range(op: &'static str, what: &str, j: usize, a: &TensorArg, dense: bool) -> Result<(u64, usize)> {
    let r = a.byte_range().map_err(|e| Error::invalid(op, format!("{what} {j} ({}): {e}", a.meta())))?;
    if dense && !a.layout.is_contiguous() {
        return Err(Error::invalid(op, format!("{what} {j} ({}) must be contiguous", a.meta())));
    }
    Ok(r)
}

/// Dtypes and shapes of a launch that passed [`LaunchArgs::check_signature`] for a
/// kernel (its kind and support predicate). The check is a pure function of these, so a
/// launch equal in all of them passes too.
struct Signature {
    supports: usize,
    kernel: crate::op::OpKind,
    op: Op,
    ins: Vec<TensorMeta>,
    outs: Vec<TensorMeta>,
}

impl Signature {
    fn matches(&self, kernel: &KernelInfo, args: &LaunchArgs) -> bool {
        let same = |m: &[TensorMeta], a: &[TensorArg]| {
            m.len() == a.len() && m.iter().zip(a).all(|(m, a)| m.dtype == a.dtype && m.shape == a.layout.shape)
        };
        self.kernel == kernel.op
            && self.supports == kernel.supports as usize
            && self.op == args.op
            && same(&self.ins, &args.inputs)
            && same(&self.outs, &args.outputs)
    }
}

/// Signatures that passed lately on this thread, newest first: eager code launches the
/// same few over and over, and inference allocates.
type Passed = Vec<Signature>;
const PASSED_MAX: usize = 16;

thread_local! {
    static PASSED: RefCell<Passed> = const { RefCell::new(Vec::new()) };
}

/// A compiled graph's node handed to [`Backend::freeze`]: the kernel and launch it runs on
/// every run, except that some operands change address from run to run (the graph's
/// inputs and outputs).
#[derive(Clone, Debug)]
pub struct FrozenLaunch {
    pub kernel: KernelInfo,
    /// The launch as it runs; the `ptr` of every patched operand is a placeholder.
    /// `seq` is ignored (each launch gets its number when it is queued).
    pub args: LaunchArgs,
    /// `(operand, slot)`: operand `operand` (inputs first, then outputs) starts at
    /// `addrs[slot]` of the run (see [`Backend::launch_frozen`]); its layout is the one in
    /// `args`.
    pub patches: Vec<(usize, usize)>,
    /// The graph node's name, for errors.
    pub label: String,
    /// The stream every run of the plan queues it on (through
    /// [`launch_frozen`](Backend::launch_frozen) or a whole-run step): a backend may
    /// prepare per-stream state for it at [`freeze`](Backend::freeze) time.
    pub stream: StreamId,
}

/// One step of a frozen run, in submission order ([`Backend::launch_frozen_run`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrozenStep {
    /// Launches `nodes` of the plan go to stream `stream`, in order.
    Launch { stream: usize, nodes: std::ops::Range<usize> },
    /// Event `event` is recorded on stream `stream`.
    Record { stream: usize, event: usize },
    /// Stream `stream` waits for event `event` (recorded by an earlier step).
    Wait { stream: usize, event: usize },
}

/// A whole frozen run handed to [`Backend::launch_frozen_run`].
#[derive(Clone, Copy, Debug)]
pub struct FrozenRun<'a> {
    pub steps: &'a [FrozenStep],
    /// The run's streams by index; the run starts and ends on `streams[0]`.
    pub streams: &'a [StreamId],
    /// The run's events by index.
    pub events: &'a [EventId],
    /// Per-run addresses, as for [`Backend::launch_frozen`].
    pub addrs: &'a [DevicePtr],
    pub first_seq: u64,
}

/// A host buffer lent to a device by [`Backend::with_host_ranges`]. `Send + Sync` as
/// the slices it holds.
#[derive(Debug)]
pub enum HostRange<'a> {
    /// Only read by the work that names it (a run's input).
    Read(&'a [u8]),
    /// Written, and possibly read, by the work that names it (a run's output).
    Write(&'a mut [u8]),
}

impl HostRange<'_> {
    /// The range's first byte and length.
    pub fn span(&self) -> (u64, usize) {
        match self {
            HostRange::Read(b) => (b.as_ptr() as u64, b.len()),
            HostRange::Write(b) => (b.as_ptr() as u64, b.len()),
        }
    }
    pub fn writable(&self) -> bool {
        matches!(self, HostRange::Write(_))
    }
}

/// What a backend made of a compiled graph's launches in [`Backend::freeze`]; handed back
/// on every run.
#[derive(Clone)]
pub struct Frozen(pub std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for Frozen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Frozen(..)")
    }
}

/// One compute backend and its devices. Object safe: the runtime holds `Arc<dyn Backend>`.
///
/// # Safety
///
/// Every method is safe to call with any arguments: an implementation upholds rules M1 to
/// M6 of the [module documentation](self) for whatever safe code passes it.
#[allow(unsafe_code)] // declaring the contract; implementations live in the backends
pub unsafe trait Backend: Send + Sync {
    /// Short name: `cpu`, `cuda`, `acl`.
    fn name(&self) -> &'static str;
    fn device_count(&self) -> usize;
    fn device_info(&self, device: usize) -> Result<DeviceInfo>;

    /// Allocates `bytes` (> 0) aligned to `align` (a power of two).
    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr>;
    /// Returns an allocation (deferred while queued work still uses it, see (M2)).
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()>;
    /// Copies host bytes to device memory, synchronously.
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()>;
    /// Copies device memory to host bytes, synchronously (after work queued on `stream`).
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()>;
    /// Queues a device-to-device copy on `stream`.
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()>;
    /// Queues a fill of `bytes` bytes with `value` on `stream`.
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()>;
    /// Runs `f` on the bytes `ptr .. ptr + len` in place, without copying, when the
    /// device shares host memory; `Ok(false)` (and `f` not called) otherwise. Waits for
    /// queued work first. The allocation stays alive for the duration of the call.
    fn map_host(&self, device: usize, ptr: DevicePtr, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<bool>;

    /// The stream work goes to when the user names none. Synchronous on the CPU.
    fn default_stream(&self, device: usize) -> StreamId;
    fn create_stream(&self, device: usize) -> Result<StreamId>;
    /// Waits for the stream's work, then destroys it.
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()>;
    /// Waits for all work queued on `stream`; returns the first error raised by it since
    /// the last synchronisation.
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()>;
    /// Waits for all work on all streams of the device; returns the first pending error of
    /// any of them without clearing it, so that the stream's own synchronisation (its
    /// owner's) still reports it.
    fn synchronize_device(&self, device: usize) -> Result<()>;

    fn create_event(&self, device: usize) -> Result<EventId>;
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()>;
    /// Marks the point of `stream` reached once all previously queued work is done.
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()>;
    /// Work queued on `stream` after this call starts only once `event` has completed.
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()>;
    /// True when the event has completed (an event never recorded counts as complete).
    fn query_event(&self, device: usize, event: EventId) -> Result<bool>;
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()>;
    /// Time between two completed events.
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration>;

    /// Bytes of device memory currently free according to the system/driver, if known.
    fn memory_free(&self, _device: usize) -> Option<u64> {
        None
    }

    /// How many streams a compiled graph's balanced schedule should use at most on
    /// `device` (`Scheduling::Balanced`), or `None` for no limit of the backend's (the
    /// default). A backend whose kernels already spread over all of the device says 1:
    /// a second stream then only adds hand-offs between streams.
    fn graph_streams(&self, _device: usize) -> Option<usize> {
        None
    }

    /// Why products with `dtype` weights (a compiled graph's `bf16` / `f16` precision) run
    /// slower on `device` than in f32 — the hardware feature it lacks, e.g. "this CPU has
    /// no AVX-512-BF16 or AMX-BF16" — or `None` when they run natively or the backend does
    /// not say (the default).
    fn slow_precision(&self, _device: usize, _dtype: DType) -> Option<String> {
        None
    }

    /// What a compiled graph's [`Precision::Auto`] means on `device`: the precision its
    /// matrix products run well in. The default is f32 (the CPU and CUDA, whose f32
    /// products run at full speed); a backend whose matrix unit computes in a narrower
    /// type says so (Ascend: f16, the Cube's type).
    fn auto_precision(&self, _device: usize) -> Precision {
        Precision::F32
    }

    /// The device time `kernel` would take running `op` on operands of these metas on
    /// `device`, by the backend's own model of the device, or `None` where it has none
    /// (the default). A compiled graph's fusion asks it to choose between a fused op and
    /// the ops it replaces (`Optimizations::hardware_mapping`): it fuses unless the model
    /// says the fused form is slower. Ascend models each aclnn call a kernel makes as
    /// acl-emu does (docs/ASCEND.md, "The mapping follows the modelled cost").
    fn modelled_cost(
        &self,
        _device: usize,
        _kernel: &KernelInfo,
        _op: &Op,
        _inputs: &[TensorMeta],
        _outputs: &[TensorMeta],
    ) -> Option<Duration> {
        None
    }

    /// Every implementation this backend offers.
    fn kernels(&self) -> &[KernelInfo];
    /// Called once per node when a graph is compiled, with the host bytes of the node's
    /// constant inputs (`None` where an input is computed at run time) and the kernel the
    /// node will run. What it returns comes back in [`LaunchArgs::prepacked`] on every
    /// launch of the node, and may ask for constants to be stored in another layout (see
    /// [`Prepack::relayout`]); a kernel given a `Prepacked` reads such inputs in that
    /// layout. The default prepares nothing.
    fn prepack(
        &self,
        _kernel: &KernelInfo,
        _op: &Op,
        _inputs: &[TensorMeta],
        _constants: &[Option<&[u8]>],
    ) -> Result<Option<Prepack>> {
        Ok(None)
    }
    /// For a compiled graph's `int8` precision ([`Precision::Int8`]): what the backend
    /// prepares for a Linear node (f32 x, a constant f32 weight `[N, K]`) so that `kernel`
    /// runs it as a dynamic int8 product, handed back in [`LaunchArgs::prepacked`] as
    /// [`prepack`](Self::prepack)'s is. `Ok(None)` (the default) where the backend has no
    /// int8 product on `device` or declines this node: the node is then prepared by
    /// `prepack` and runs in f32.
    fn prepack_int8(
        &self,
        _device: usize,
        _kernel: &KernelInfo,
        _op: &Op,
        _inputs: &[TensorMeta],
        _constants: &[Option<&[u8]>],
    ) -> Result<Option<Prepack>> {
        Ok(None)
    }
    /// Why `device` has no int8 products (the warning of a graph compiled in `int8` that
    /// runs in f32), or `None` when it has them. The default names the backend.
    fn int8_missing(&self, _device: usize) -> Option<String> {
        Some(format!("the {} backend has no int8 products", self.name()))
    }
    /// Scratch bytes the kernel needs for this launch.
    fn workspace_size(&self, _kernel: &KernelInfo, _args: &LaunchArgs) -> usize {
        0
    }
    /// Queues `kernel` on `stream` (runs it before returning on a synchronous stream).
    /// Errors that can be detected before queueing are returned; later ones surface at
    /// the next synchronisation of the stream. `args` may be anything safe code can
    /// build: the implementation checks them with [`LaunchArgs::validate`] (M6).
    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()>;

    /// Called once when a graph is compiled, with its nodes' launches in the order they
    /// will be queued. A backend that can check the launches' fixed operands once here,
    /// and keep them valid for as long as the returned value lives, returns
    /// `Some`; the runtime then queues the nodes with [`launch_frozen`](Self::launch_frozen)
    /// instead of one [`launch`](Self::launch) each. `None` (the default) makes the runtime
    /// queue copies of the launches through [`launch_batch`](Self::launch_batch).
    ///
    /// The safety contract does not loosen: whatever `Frozen` and addresses
    /// `launch_frozen` later receives, every operand range it touches must lie in a live
    /// allocation (M1) kept alive while queued (M2) and outputs must not overlap (M3).
    /// The usual way is to validate and pin the fixed operands here, for the life of the
    /// `Frozen`, and only the patched ones per call.
    ///
    /// `capture` says whether the backend may record the launches of a run once and
    /// replay them on later runs ([`GraphCapture`]); a backend without capture ignores it.
    /// With [`GraphCapture::On`], a run that cannot be captured fails instead of running
    /// node by node.
    fn freeze(&self, _device: usize, _launches: &[FrozenLaunch], _capture: GraphCapture) -> Result<Option<Frozen>> {
        Ok(None)
    }

    /// Queues launches `nodes` (indices into the slice given to
    /// [`freeze`](Self::freeze)) on `stream`, in order, as one submission: the patched
    /// operands take their addresses from `addrs` and launch `nodes.start + i` gets
    /// sequence number `first_seq + i`. Errors found before queueing are returned and
    /// nothing is queued; later ones behave as for [`launch`](Self::launch). Only called
    /// with a value this backend returned from `freeze`; the default refuses.
    fn launch_frozen(
        &self,
        _device: usize,
        _frozen: &Frozen,
        _nodes: std::ops::Range<usize>,
        _addrs: &[DevicePtr],
        _first_seq: u64,
        _stream: StreamId,
    ) -> Result<()> {
        Err(crate::error::Error::Unsupported(format!("{}: no frozen launches on this backend", self.name())))
    }

    /// Queues a whole run of a plan from [`freeze`](Self::freeze): the steps, in order,
    /// with the dependencies they state. `Ok(false)` (the default) leaves the run to the
    /// runtime, which then queues each step itself (launches through
    /// [`launch_frozen`](Self::launch_frozen)). A backend that takes it (to replay a
    /// captured run, say) returns `Ok(true)` once the run's work is queued so that it ends
    /// on `streams[0]`: later work on `streams[0]` sees every output written, and the
    /// graph's inputs and outputs may be read and written by `streams[0]` as well as by
    /// the streams of their steps. The events need not be recorded.
    fn launch_frozen_run(&self, _device: usize, _frozen: &Frozen, _run: FrozenRun<'_>) -> Result<bool> {
        Ok(false)
    }

    /// Device bytes the backend holds for a plan from [`freeze`](Self::freeze) beyond the
    /// graph's arena (recorded executors' own buffers, workspaces, staging), as made so
    /// far (a plan makes them in its first runs); 0 (the default) when it holds none.
    fn frozen_bytes(&self, _frozen: &Frozen) -> usize {
        0
    }

    /// Lends host buffers npurt did not allocate (an application's inputs and outputs) to
    /// `device` while `f` runs, so that a run can read and write them in place. Each
    /// non-empty range is recorded in the device's allocation table as a lent range
    /// ([`allocations::AllocTable::lend`]: giving it back frees nothing); copies,
    /// launches and host mappings may name it like an allocation (M1, M2), except that a
    /// [`HostRange::Read`] range is never written (a launch output, copy or fill
    /// destination, or host mapping over it is refused). `f` gets each range's address
    /// (`DevicePtr::NULL` for an empty one), in order.
    ///
    /// Before returning, whether `f` succeeded, failed or panicked, the backend waits for
    /// every launch still using a range (queued by `f` and not synchronised), then removes
    /// the ranges: once the call returns nothing refers to the buffers, and work
    /// naming their addresses later is refused (M1). A tensor made over them inside `f`
    /// must not be used after it. Errors: a range that overlaps an allocation, a live loan
    /// or another range of the call (nothing is lent then); `f`'s error. Only a device whose memory is host memory can lend; the default
    /// refuses with [`Error::Unsupported`] (device backends stage through copies).
    fn with_host_ranges(
        &self,
        _device: usize,
        _ranges: &mut [HostRange<'_>],
        _f: &mut dyn FnMut(&[DevicePtr]) -> Result<()>,
    ) -> Result<()> {
        Err(Error::Unsupported(format!("{} devices cannot use host buffers in place", self.name())))
    }

    /// Queues several launches at once (one submission). The default queues them one by
    /// one; backends with a cheaper bulk path override it.
    fn launch_batch(&self, device: usize, launches: Vec<(KernelInfo, LaunchArgs)>, stream: StreamId) -> Result<()> {
        for (k, a) in launches {
            self.launch(device, &k, a, stream)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Tier, UnitClass};
    use std::sync::Arc;

    fn any(_: &KernelQuery<'_>) -> std::result::Result<(), String> {
        Ok(())
    }
    fn f32_only(q: &KernelQuery<'_>) -> std::result::Result<(), String> {
        if q.inputs.iter().all(|m| m.dtype == DType::F32) { Ok(()) } else { Err("f32 only".into()) }
    }
    fn kernel(op: crate::op::OpKind, supports: crate::kernel::SupportFn) -> KernelInfo {
        let unit = Unit { class: UnitClass::Vector, label: "test" };
        KernelInfo { name: "test.kernel".into(), op, tier: Tier::Reference, unit, supports, id: 0 }
    }
    fn arg(ptr: u64, dtype: DType, dims: &[usize]) -> TensorArg {
        TensorArg { ptr: DevicePtr(ptr), dtype, layout: Arc::new(Layout::contiguous(dims.to_vec())) }
    }
    fn launch(op: Op, inputs: Vec<TensorArg>, outputs: Vec<TensorArg>) -> LaunchArgs {
        LaunchArgs { op, inputs, outputs, workspace: None, seq: 1, threads: 0, prepacked: None }
    }
    fn invalid(r: Result<Vec<(u64, usize)>>, needle: &str) {
        match r {
            Err(Error::Invalid { msg, .. }) => assert!(msg.contains(needle), "{msg:?} does not say {needle:?}"),
            other => panic!("expected an invalid-launch error saying {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_well_formed_launch_gives_the_operand_ranges() {
        let add = kernel(crate::op::OpKind::Add, any);
        let a = launch(
            Op::Add,
            vec![arg(0x1000, DType::F32, &[2, 3]), arg(0x2000, DType::F32, &[3])],
            vec![arg(0x3000, DType::F32, &[2, 3])],
        );
        assert_eq!(a.validate(&add).unwrap(), vec![(0x1000, 24), (0x2000, 12), (0x3000, 24)]);
        // A strided, offset input of Copy: from its first element to the last it reaches.
        let mut x = arg(0x1000, DType::F16, &[3, 2]);
        x.layout = Arc::new(Layout { shape: crate::shape::Shape::new(vec![3, 2]), strides: vec![1, 4], offset: 2 });
        let copy = launch(Op::Copy, vec![x], vec![arg(0x4000, DType::F16, &[3, 2])]);
        let r = copy.validate(&kernel(crate::op::OpKind::Copy, any)).unwrap();
        assert_eq!(r[0], (0x1004, (2 + 4 + 1) * 2));
        // Empty operands reach no byte.
        let e = launch(Op::Relu, vec![arg(0x10, DType::F32, &[0, 4])], vec![arg(0x20, DType::F32, &[0, 4])]);
        assert_eq!(e.validate(&kernel(crate::op::OpKind::Relu, any)).unwrap(), vec![(0x10, 0), (0x20, 0)]);
    }

    #[test]
    fn launches_that_do_not_match_their_op_are_refused() {
        let add = kernel(crate::op::OpKind::Add, any);
        let x = || arg(0x1000, DType::F32, &[4]);
        invalid(launch(Op::Add, vec![x()], vec![x()]).validate(&add), "expects 2 inputs, got 1");
        invalid(launch(Op::Add, vec![x(), x()], vec![]).validate(&add), "expects 1 outputs, got 0");
        invalid(launch(Op::Add, vec![x(), x()], vec![x(), x()]).validate(&add), "expects 1 outputs, got 2");
        let wide = arg(0x1000, DType::F32, &[8]);
        invalid(launch(Op::Add, vec![x(), x()], vec![wide]).validate(&add), "output 0 must be f32 [4]");
        let f16 = arg(0x1000, DType::F16, &[4]);
        invalid(launch(Op::Add, vec![x(), x()], vec![f16]).validate(&add), "output 0 must be f32 [4]");
        let relu = kernel(crate::op::OpKind::Relu, any);
        invalid(launch(Op::Relu, vec![], vec![x()]).validate(&relu), "expects 1 input");
        invalid(launch(Op::Relu, vec![x(), x(), x(), x()], vec![x(); 8]).validate(&relu), "expects 1 input");
        // MatMul with mismatched inner dimensions.
        let mm = kernel(crate::op::OpKind::MatMul, any);
        let (a, b) = (arg(0x1000, DType::F32, &[2, 3]), arg(0x2000, DType::F32, &[4, 5]));
        let r =
            launch(Op::MatMul { trans_a: false, trans_b: false }, vec![a, b], vec![arg(0x3000, DType::F32, &[2, 5])]);
        assert!(matches!(r.validate(&mm), Err(Error::Invalid { op: "MatMul", .. })));
        // The kernel of another op, and a signature the kernel does not accept.
        invalid(launch(Op::Relu, vec![x()], vec![x()]).validate(&add), "implements Add");
        let relu_f32 = kernel(crate::op::OpKind::Relu, f32_only);
        let h = || arg(0x1000, DType::F16, &[4]);
        invalid(launch(Op::Relu, vec![h()], vec![h()]).validate(&relu_f32), "does not accept f16 [4]: f32 only");
    }

    #[test]
    fn signatures_that_passed_lately_are_matched_exactly() {
        let (any_relu, f32_relu) = (kernel(crate::op::OpKind::Relu, any), kernel(crate::op::OpKind::Relu, f32_only));
        let h = |n: usize| arg(0x1000, DType::F16, &[n]);
        let ok = launch(Op::Relu, vec![h(4)], vec![h(4)]);
        for _ in 0..2 {
            ok.validate(&any_relu).unwrap();
        }
        // The same dtypes and shapes, judged by another predicate.
        invalid(ok.validate(&f32_relu), "f32 only");
        // Another output shape, dtype or op attribute is checked afresh.
        invalid(launch(Op::Relu, vec![h(4)], vec![h(5)]).validate(&any_relu), "output 0 must be f16 [4]");
        let f32_out = arg(0x1000, DType::F32, &[4]);
        invalid(launch(Op::Relu, vec![h(4)], vec![f32_out]).validate(&any_relu), "output 0 must be f16 [4]");
        let sm = kernel(crate::op::OpKind::Softmax, any);
        let x = || arg(0x1000, DType::F32, &[2, 3]);
        launch(Op::Softmax { axis: 1 }, vec![x()], vec![x()]).validate(&sm).unwrap();
        let far = launch(Op::Softmax { axis: 2 }, vec![x()], vec![x()]);
        assert!(matches!(far.validate(&sm), Err(Error::Invalid { op: "Softmax", .. })));
        // Addresses and layouts are checked on every launch, matched or not.
        let mut strided = h(4);
        strided.layout = Arc::new(Layout { shape: crate::shape::Shape::new(vec![4]), strides: vec![3], offset: 0 });
        invalid(launch(Op::Relu, vec![strided], vec![h(4)]).validate(&any_relu), "must be contiguous");
        let past = TensorArg { ptr: DevicePtr(u64::MAX - 4), ..h(4) };
        invalid(launch(Op::Relu, vec![past], vec![h(4)]).validate(&any_relu), "past the address space");
    }

    #[test]
    fn layouts_are_checked_before_anything_reads_them() {
        let relu = kernel(crate::op::OpKind::Relu, any);
        let with = |strides: Vec<usize>, offset: usize, ptr: u64| {
            let x = TensorArg {
                ptr: DevicePtr(ptr),
                dtype: DType::F32,
                layout: Arc::new(Layout { shape: crate::shape::Shape::new(vec![4]), strides, offset }),
            };
            launch(Op::Relu, vec![x], vec![arg(0x100, DType::F32, &[4])])
        };
        invalid(with(vec![], 0, 0x1000).validate(&relu), "0 strides for 1 dimensions");
        invalid(with(vec![1], usize::MAX / 2, 0x1000).validate(&relu), "past the address space");
        invalid(with(vec![usize::MAX / 2], 0, 0x1000).validate(&relu), "past the address space");
        invalid(with(vec![1], 0, u64::MAX - 8).validate(&relu), "past the address space");
        // Non-Copy kernels read dense inputs; every output is dense.
        invalid(with(vec![2], 0, 0x1000).validate(&relu), "input 0 (f32 [4]) must be contiguous");
        let mut y = arg(0x100, DType::F32, &[4]);
        y.layout = Arc::new(Layout { shape: crate::shape::Shape::new(vec![4]), strides: vec![0], offset: 0 });
        let copy = launch(Op::Copy, vec![arg(0x1000, DType::F32, &[4])], vec![y]);
        invalid(copy.validate(&kernel(crate::op::OpKind::Copy, any)), "output 0 (f32 [4]) must be contiguous");
    }
}
