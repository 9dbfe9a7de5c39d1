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
//!   message).
//! * **(M4) own its handles.** Unknown or destroyed stream and event ids give an error.
//! * **(M5) never panic across the call.** Driver and kernel failures become
//!   [`crate::Error`] values (reported at the next synchronisation when asynchronous).
//!
//! With these rules the runtime crate needs no `unsafe` code at all; every `unsafe` block
//! lives in a backend, next to the memory it reasons about.

use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::{KernelInfo, Unit};
use crate::op::{Op, TensorMeta};
use crate::shape::Layout;
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
    /// Waits for all work on all streams of the device.
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
    /// Scratch bytes the kernel needs for this launch.
    fn workspace_size(&self, _kernel: &KernelInfo, _args: &LaunchArgs) -> usize {
        0
    }
    /// Queues `kernel` on `stream` (runs it before returning on a synchronous stream).
    /// Errors that can be detected before queueing are returned; later ones surface at
    /// the next synchronisation of the stream.
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
    fn freeze(&self, _device: usize, _launches: &[FrozenLaunch]) -> Result<Option<Frozen>> {
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
        Err(crate::error::Error::Backend { backend: self.name(), msg: "no frozen launches on this backend".into() })
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
