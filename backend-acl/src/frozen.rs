//! Frozen plans: a compiled graph's launches for one run arena, checked once
//! (`Backend::freeze`), and their runs (`Backend::launch_frozen`), with aclnn executors
//! reused from run to run.
//!
//! Each node runs one of three ways:
//! * **reused** (every aclnn op but those composed of aclnnInplaceCopy): when the plan is
//!   frozen (at compile time for a graph's first arena), its operators' phase 1 runs once,
//!   over the arena's addresses and temporary buffers for the graph's inputs and outputs,
//!   and each executor is made repeatable ([`kernels::record`]); every run then points the
//!   tensors that view the graph's inputs and outputs (the patched operands) at this run's
//!   addresses, where they changed (`aclSetInputTensorAddr` / `aclSetOutputTensorAddr`),
//!   and calls phase 2. No run makes a phase-1 call;
//! * **one-shot** (Reshape and Copy, composed of aclnnInplaceCopy, which CANN excludes
//!   from repeatable executors): the eager path on this run's addresses, phase 1 included;
//! * **host**: the host reference tier on this run's addresses.
//!
//! What a plan holds on the device — executors, their descriptors (which must outlive
//! them), the recorded ops' constants, per stream the plan ran on one workspace and one
//! chain of intermediates ([`Intermediates`], at addresses fixed for the executors'
//! life; nodes of one stream run in order and share them, nodes on different streams may
//! run at once and never do, so a recorded node only launches on its stream), and the
//! pins of the fixed operands (arena and constants) — belongs to the plan,
//! one per arena, so concurrent runs (different arenas) never share an executor. It is
//! released when the plan is dropped, after synchronising every stream the plan queued
//! work on that is still alive (a destroyed stream was synchronised by its destruction),
//! or at the device's teardown if that comes first ([`DeviceOwned`]).

mod capture;

use crate::device::{Binding, Device, DeviceOwned};
use crate::error::AclBackendError;
use crate::kernels::{self, Impl, Recorded, Table};
use crate::memory::{self, AclRelease, Intermediates};
use crate::stream::{self, Buf, StreamRec, lock};
use acl_sys::Api;
use runtime::backend::allocations::{Pins, overlapping_output};
use runtime::{DevicePtr, Frozen, FrozenLaunch, FrozenStep, GraphCapture, LaunchArgs, StreamId};
use std::sync::{Arc, Mutex, Weak};

type BResult<T> = std::result::Result<T, AclBackendError>;

/// How a node runs (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    Reused,
    OneShot,
    Host,
}

/// One launch of the plan.
struct Node {
    way: Way,
    /// FP32 products on the 910's Cube in FP16 (warned about once).
    fp16_compute: bool,
    /// The kernel's implementation (how its aclnn operators are put together).
    imp: Impl,
    /// The launch as frozen: patched operands at address 0.
    args: LaunchArgs,
    /// Operand byte ranges (inputs, then outputs); a patched operand's start is its offset
    /// from its per-run address.
    ranges: Vec<(u64, usize)>,
    /// The address slot of each patched operand.
    slot: Vec<Option<usize>>,
    /// Some output has an element (otherwise the node runs nothing).
    runs: bool,
    /// The graph node's name, for errors.
    label: String,
    /// The stream its runs queue it on (it is recorded for that stream).
    stream: StreamId,
}

impl Node {
    /// The address of patched operand `j` in a run with slot addresses `addrs`.
    fn addr(&self, j: usize, addrs: &[DevicePtr]) -> u64 {
        match self.slot.get(j).copied().flatten() {
            Some(k) => addrs[k].0,
            None => {
                let n_in = self.args.inputs.len();
                let a = if j < n_in { &self.args.inputs[j] } else { &self.args.outputs[j - n_in] };
                a.ptr.0
            }
        }
    }

    /// The launch with this run's addresses.
    fn args_at(&self, addrs: &[DevicePtr], seq: u64) -> LaunchArgs {
        let mut a = self.args.clone();
        a.seq = seq;
        let n_in = a.inputs.len();
        for (j, k) in self.slot.iter().enumerate() {
            if let Some(k) = k {
                let t = if j < n_in { &mut a.inputs[j] } else { &mut a.outputs[j - n_in] };
                t.ptr = addrs[*k];
            }
        }
        a
    }

    /// The operand ranges in a run with slot addresses `addrs` (in `out`).
    fn ranges_at(&self, addrs: &[DevicePtr], out: &mut Vec<(u64, usize)>) {
        out.clear();
        out.extend_from_slice(&self.ranges);
        for (j, k) in self.slot.iter().enumerate() {
            if let Some(k) = k {
                // No overflow: the launch located `addrs[k] .. + extent`, which covers
                // `offset + len` of every operand patched from slot k.
                out[j].0 += addrs[*k].0;
            }
        }
    }
}

/// What a plan holds on the device; released once.
struct Held {
    /// Per node, its recorded executors once it has run (reused nodes).
    recorded: Vec<Option<Recorded>>,
    /// The recorded nodes' workspace on each stream they ran on.
    workspaces: Vec<(Arc<StreamRec>, Mutex<Buf>)>,
    /// The recorded nodes' intermediates on each stream they ran on.
    intermediates: Vec<(Arc<StreamRec>, Intermediates)>,
    /// Streams the plan queued work on.
    used: Vec<Arc<StreamRec>>,
    /// Captured runs of nodes and their staging buffers.
    capture: capture::Captures,
    _pins: Pins<AclRelease>,
}

impl Held {
    /// Releases everything; no queued work uses any of it (the caller synchronised the
    /// streams, or the device's teardown drained them), the thread is bound to the device.
    fn release(self, api: &Api) {
        let (mut execs, mut bytes) = (0, 0);
        for r in self.recorded.into_iter().flatten() {
            let (e, b) = r.size();
            execs += e;
            bytes += b;
            r.release(api);
        }
        let mut ws = 0;
        for (_, m) in self.workspaces {
            let b = m.into_inner().unwrap_or_else(|p| p.into_inner());
            if b.ptr != 0 {
                ws += b.size;
                if let Err(e) = memory::free(api, b.ptr) {
                    log::error!("acl: freeing a frozen plan's workspace: {e}");
                }
            }
        }
        let mut inter = 0;
        for (_, i) in self.intermediates {
            inter += i.bytes();
            i.release(api);
        }
        let staged = self.capture.release(api);
        log::debug!(
            "acl: frozen plan released: {execs} executors, {bytes} bytes of its own memory, {inter} of \
             intermediates, {ws} of workspace, {staged} of capture staging"
        );
    }
}

impl Held {
    /// Device bytes held: recorded ops' own memory, intermediates, workspaces, capture
    /// staging.
    fn bytes(&self) -> usize {
        let own: usize = self.recorded.iter().flatten().map(|r| r.size().1).sum();
        let inter: usize = self.intermediates.iter().map(|(_, i)| i.bytes()).sum();
        let ws: usize = self.workspaces.iter().map(|(_, m)| lock(m).size).sum();
        own + inter + ws + self.capture.staged_bytes()
    }
}

/// Device bytes a plan holds beyond the graph's arena ([`runtime::Backend::frozen_bytes`]).
pub(crate) fn bytes(frozen: &Frozen) -> usize {
    let Some(fz) = frozen.0.downcast_ref::<AclFrozen>() else { return 0 };
    lock(&fz.shared.held).as_ref().map_or(0, Held::bytes)
}

/// The part of a plan the device can reach at its teardown.
struct Shared {
    held: Mutex<Option<Held>>,
}

impl DeviceOwned for Shared {
    fn release(&self, api: &Api) {
        let mut g = lock(&self.held);
        if let Some(h) = g.take() {
            h.release(api);
        }
    }
}

/// The Ascend backend's form of a compiled graph's launches (one per arena).
pub(crate) struct AclFrozen {
    /// The backend instance and device it was made for.
    instance: u64,
    device: usize,
    nodes: Vec<Node>,
    /// Per address slot: the bytes its operands reach from the run's address, and
    /// whether an aclnn node reads it (32-byte alignment).
    slots: Vec<(usize, bool)>,
    shared: Arc<Shared>,
    api: Arc<Api>,
    binding: Binding,
}

impl Drop for AclFrozen {
    fn drop(&mut self) {
        // Held while releasing: a concurrent device teardown waits, then finds nothing.
        let mut g = lock(&self.shared.held);
        let Some(held) = g.take() else { return };
        if let Err(e) = self.binding.bind(&self.api) {
            log::error!("acl: releasing a frozen plan: {e}");
        }
        for r in &held.used {
            stream::sync_if_live(&self.api, r);
        }
        held.release(&self.api);
    }
}

fn bad(msg: String) -> AclBackendError {
    AclBackendError::BadRequest(msg)
}

/// Checks every launch in full (as `kernels::launch` does; patched operands by their
/// offsets), pins the fixed operands' allocations for the plan's life, decides how each
/// node runs, and records the reused nodes' executors ([`record_all`]): phase 1 runs
/// here, once, not in any run.
pub(crate) fn freeze(
    api: &Arc<Api>,
    instance: u64,
    devs: &[Device],
    device: usize,
    table: &Table,
    launches: &[FrozenLaunch],
    capture: GraphCapture,
) -> runtime::Result<Option<Frozen>> {
    let dev = devs.get(device).ok_or(AclBackendError::NoDevice(device))?;
    let mut nodes = Vec::with_capacity(launches.len());
    let mut fixed: Vec<(u64, usize)> = Vec::new();
    let mut slots: Vec<(usize, bool)> = Vec::new();
    for l in launches {
        let name = &l.kernel.name;
        let (info, imp) =
            table.resolve(&l.kernel).ok_or_else(|| bad(format!("kernel {name} is not an Ascend kernel")))?;
        let args = &l.args;
        let ranges = args.validate(info)?;
        let n_in = args.inputs.len();
        let operand = |j: usize| if j < n_in { &args.inputs[j] } else { &args.outputs[j - n_in] };
        let mut slot = vec![None; ranges.len()];
        for &(j, k) in &l.patches {
            if j >= ranges.len() || slot[j].is_some() {
                return Err(bad(format!("{name}: bad patch of operand {j}")).into());
            }
            if operand(j).ptr != DevicePtr::NULL {
                return Err(bad(format!("{name}: patched operand {j} has an address")).into());
            }
            slot[j] = Some(k);
            let (off, len) = ranges[j];
            let end = usize::try_from(off)
                .ok()
                .and_then(|o| o.checked_add(len))
                .ok_or_else(|| bad(format!("{name}: operand {j} is out of range")))?;
            if slots.len() <= k {
                slots.resize(k + 1, (0, false));
            }
            slots[k].0 = slots[k].0.max(end);
            slots[k].1 |= imp != Impl::Host;
        }
        for (j, r) in ranges.iter().enumerate() {
            if slot[j].is_some() || r.1 == 0 {
                continue;
            }
            let a = operand(j).ptr.0;
            if imp != Impl::Host && !a.is_multiple_of(32) {
                return Err(AclBackendError::Unaligned { what: "operand base", addr: a, align: 32 }.into());
            }
            fixed.push(*r);
        }
        if let Some(i) = overlapping_output(&ranges, n_in, |j| slot[j].is_some()) {
            return Err(bad(format!("{}: output {i} overlaps another operand", args.op.name())).into());
        }
        let way = match imp {
            Impl::Host => Way::Host,
            _ if kernels::repeatable(&args.op) => Way::Reused,
            _ => Way::OneShot,
        };
        let runs = args.outputs.iter().any(|o| o.layout.numel() > 0);
        let fp16_compute = imp == Impl::AclnnFp16Compute;
        let stream = l.stream;
        nodes.push(Node {
            way,
            fp16_compute,
            imp,
            args: args.clone(),
            ranges,
            slot,
            runs,
            label: l.label.clone(),
            stream,
        });
    }
    let host_node = nodes.iter().find(|n| n.way == Way::Host && n.runs).map(|n| n.label.as_str());
    let capture = capture::Captures::new(api, capture, host_node)?;
    let pins = dev.allocs.pin(&fixed).map_err(AclBackendError::from)?;
    let recorded = nodes.iter().map(|_| None).collect();
    let held =
        Held { recorded, workspaces: Vec::new(), intermediates: Vec::new(), used: Vec::new(), capture, _pins: pins };
    let shared = Arc::new(Shared { held: Mutex::new(Some(held)) });
    let weak: Weak<Shared> = Arc::downgrade(&shared);
    dev.adopt(weak);
    let fz = AclFrozen { instance, device, nodes, slots, shared, api: api.clone(), binding: dev.binding(instance) };
    // On failure `fz` is dropped, which releases whatever was recorded.
    record_all(api, instance, dev, table, &fz)?;
    Ok(Some(Frozen(Arc::new(fz))))
}

/// Records every reused node of a new plan on the stream its runs use, so that no run
/// makes a phase-1 call. The patched operands (the graph's inputs and outputs) have no
/// address yet: the executors are recorded over temporary device buffers of each slot's
/// extent, freed right after (phase 1 queues nothing), and every run points them at its
/// own addresses first ([`Recorded::patch`]).
fn record_all(api: &Api, instance: u64, dev: &Device, table: &Table, fz: &AclFrozen) -> BResult<()> {
    if !fz.nodes.iter().any(|n| n.way == Way::Reused && n.runs) {
        return Ok(());
    }
    dev.bind(api, instance)?;
    struct Temp<'a>(&'a Api, Vec<DevicePtr>);
    impl Drop for Temp<'_> {
        fn drop(&mut self) {
            for p in self.1.iter().filter(|p| **p != DevicePtr::NULL) {
                if let Err(e) = memory::free(self.0, p.0) {
                    log::error!("acl: freeing a temporary buffer of a frozen plan: {e}");
                }
            }
        }
    }
    let mut temp = Temp(api, Vec::with_capacity(fz.slots.len()));
    for &(extent, on_device) in &fz.slots {
        let p = if on_device { DevicePtr(memory::malloc(api, Some("freeze"), extent)?) } else { DevicePtr::NULL };
        temp.1.push(p);
    }
    let mut g = lock(&fz.shared.held);
    let held = g.as_mut().ok_or_else(|| bad("the frozen plan was released with its device".into()))?;
    for (idx, n) in fz.nodes.iter().enumerate() {
        if n.way != Way::Reused || !n.runs {
            continue;
        }
        let rec = dev.stream(n.stream)?;
        let inter = per_stream(&mut held.intermediates, &rec);
        let recorded =
            kernels::record(api, &rec, n.imp.mapping(table.is_910()), &n.args_at(&temp.1, 0), inter).map_err(|e| {
                AclBackendError::InNode { node: format!("{:?}", n.label), source: Box::new(e.in_op(n.args.op.name())) }
            })?;
        let r = held.recorded[idx].insert(recorded);
        r.keep_patches(|j| n.slot.get(j).is_some_and(Option::is_some));
    }
    Ok(())
}

/// The entry of `rec`'s stream in a plan's per-stream list, made (empty) if missing.
fn per_stream<'a, T: Default>(list: &'a mut Vec<(Arc<StreamRec>, T)>, rec: &Arc<StreamRec>) -> &'a mut T {
    let i = match list.iter().position(|(s, _)| Arc::ptr_eq(s, rec)) {
        Some(i) => i,
        None => {
            list.push((rec.clone(), T::default()));
            list.len() - 1
        }
    };
    &mut list[i].1
}

/// The plan behind `frozen`, checked to be this backend's and device's, and the device.
fn plan<'a>(
    frozen: &'a Frozen,
    instance: u64,
    devs: &'a [Device],
    device: usize,
) -> BResult<(&'a AclFrozen, &'a Device)> {
    let fz =
        frozen.0.downcast_ref::<AclFrozen>().ok_or_else(|| bad("not a frozen plan of the Ascend backend".into()))?;
    if fz.instance != instance || fz.device != device {
        return Err(bad("the frozen plan belongs to another backend or device".into()));
    }
    Ok((fz, devs.get(device).ok_or(AclBackendError::NoDevice(device))?))
}

/// Checks a run's addresses for launches `nodes` (M1: inside live allocations, 32-byte
/// aligned where aclnn reads them; M3: outputs overlap nothing).
fn check_addrs(fz: &AclFrozen, dev: &Device, nodes: std::ops::Range<usize>, addrs: &[DevicePtr]) -> BResult<()> {
    if nodes.start > nodes.end || nodes.end > fz.nodes.len() || addrs.len() < fz.slots.len() {
        return Err(bad("frozen launch: node range or address table does not fit the plan".into()));
    }
    for (&(len, aligned), a) in fz.slots.iter().zip(addrs) {
        if len == 0 {
            continue;
        }
        dev.allocs.locate(a.0, len)?;
        if aligned && !a.0.is_multiple_of(32) {
            return Err(AclBackendError::Unaligned { what: "operand base", addr: a.0, align: 32 });
        }
    }
    let mut ranges = Vec::new();
    for n in &fz.nodes[nodes] {
        if n.slot.iter().all(Option::is_none) {
            continue;
        }
        n.ranges_at(addrs, &mut ranges);
        if let Some(i) = overlapping_output(&ranges, n.args.inputs.len(), |_| false) {
            return Err(bad(format!("{}: output {i} overlaps another operand", n.args.op.name())));
        }
    }
    Ok(())
}

/// Runs launches `nodes` of a plan on `stream` with slot addresses `addrs`: checks the
/// per-run addresses, then queues each node its way.
pub(crate) fn launch(
    api: &Api,
    instance: u64,
    devs: &[Device],
    table: &Table,
    run: RecordedRun<'_>,
) -> runtime::Result<()> {
    let RecordedRun { device, frozen, nodes, addrs, first_seq, stream } = run;
    let (fz, dev) = plan(frozen, instance, devs, device)?;
    check_addrs(fz, dev, nodes.clone(), addrs)?;
    dev.bind(api, instance)?;
    let rec = dev.stream(stream)?;
    let mut g = lock(&fz.shared.held);
    let held = g.as_mut().ok_or_else(|| bad("the frozen plan was released with its device".into()))?;
    if !held.used.iter().any(|r| Arc::ptr_eq(r, &rec)) {
        held.used.push(rec.clone());
    }
    let Held { recorded, workspaces, .. } = held;
    run_nodes(api, table.is_910(), fz, (recorded, workspaces), &rec, nodes, addrs, first_seq)?;
    Ok(())
}

/// A whole run of a plan ([`runtime::Backend::launch_frozen_run`]): taken when the plan is
/// captured (see [`capture`]), left to the runtime (`Ok(false)`) otherwise.
pub(crate) fn launch_run(
    api: &Api,
    instance: u64,
    devs: &[Device],
    table: &Table,
    device: usize,
    frozen: &Frozen,
    run: runtime::FrozenRun<'_>,
) -> runtime::Result<bool> {
    let (fz, dev) = plan(frozen, instance, devs, device)?;
    if !lock(&fz.shared.held).as_ref().is_some_and(|h| h.capture.enabled()) {
        return Ok(false);
    }
    check_addrs(fz, dev, 0..fz.nodes.len(), run.addrs)?;
    for st in run.steps {
        let (s, e) = match st {
            FrozenStep::Launch { stream, nodes } => {
                if nodes.start > nodes.end || nodes.end > fz.nodes.len() {
                    return Err(bad("frozen run: a step's node range does not fit the plan".into()).into());
                }
                (*stream, None)
            }
            FrozenStep::Record { stream, event } | FrozenStep::Wait { stream, event } => (*stream, Some(*event)),
        };
        if s >= run.streams.len() || e.is_some_and(|e| e >= run.events.len()) {
            return Err(bad("frozen run: a step names a stream or event the run does not have".into()).into());
        }
    }
    dev.bind(api, instance)?;
    let recs: Vec<Arc<StreamRec>> = run.streams.iter().map(|s| dev.stream(*s)).collect::<BResult<_>>()?;
    let mut g = lock(&fz.shared.held);
    let held = g.as_mut().ok_or_else(|| bad("the frozen plan was released with its device".into()))?;
    for r in &recs {
        if !held.used.iter().any(|u| Arc::ptr_eq(u, r)) {
            held.used.push(r.clone());
        }
    }
    let Held { recorded, workspaces, capture, .. } = held;
    let mut steps = RunSteps {
        api,
        is_910: table.is_910(),
        fz,
        dev,
        reuse: (recorded, workspaces),
        recs: &recs,
        events: run.events,
        first_seq: run.first_seq,
    };
    let touches = || {
        let mut t = Vec::new();
        for n in fz.nodes.iter().filter(|n| n.runs) {
            for (j, k) in n.slot.iter().enumerate() {
                // No overflow: `freeze` checked `offset + len` of every patched operand.
                let end = n.ranges[j].0 as usize + n.ranges[j].1;
                t.extend(k.map(|k| (k, end, j < n.args.inputs.len())));
            }
        }
        t
    };
    let label = fz.nodes.first().map_or("", |n| n.label.as_str());
    let whole =
        capture::WholeRun { dev, recs: &recs, steps: run.steps, addrs: run.addrs, first_seq: run.first_seq, label };
    Ok(capture::run(api, capture, whole, &touches, &mut steps)?)
}

/// The plan's side of a whole run's steps.
struct RunSteps<'a> {
    api: &'a Api,
    is_910: bool,
    fz: &'a AclFrozen,
    dev: &'a Device,
    reuse: Reuse<'a>,
    recs: &'a [Arc<StreamRec>],
    events: &'a [runtime::EventId],
    first_seq: u64,
}

impl capture::Steps for RunSteps<'_> {
    fn launch(&mut self, stream: usize, nodes: std::ops::Range<usize>, addrs: &[DevicePtr]) -> BResult<()> {
        let reuse = (&mut *self.reuse.0, &mut *self.reuse.1);
        let seq = self.first_seq + nodes.start as u64;
        run_nodes(self.api, self.is_910, self.fz, reuse, &self.recs[stream], nodes, addrs, seq)
    }
    fn record(&mut self, stream: usize, event: usize) -> BResult<()> {
        let id = self.events[event];
        let (h, _) = self.dev.event(id)?;
        stream::record(self.api, h as acl_sys::aclrtEvent, &self.recs[stream])?;
        self.dev.set_recorded(id);
        Ok(())
    }
    fn wait(&mut self, stream: usize, event: usize) -> BResult<()> {
        let (h, recorded) = self.dev.event(self.events[event])?;
        if recorded {
            stream::wait(self.api, &self.recs[stream], h as acl_sys::aclrtEvent)?;
        }
        Ok(())
    }
}

/// A plan's executors and workspaces, as [`run_nodes`] uses them.
type Reuse<'a> = (&'a mut Vec<Option<Recorded>>, &'a mut Vec<(Arc<StreamRec>, Mutex<Buf>)>);

/// Queues launches `nodes` of the plan on the stream of `rec`, each its way, with slot
/// addresses `addrs`; a failure names the node.
#[allow(clippy::too_many_arguments)]
fn run_nodes(
    api: &Api,
    is_910: bool,
    fz: &AclFrozen,
    reuse: Reuse<'_>,
    rec: &Arc<StreamRec>,
    nodes: std::ops::Range<usize>,
    addrs: &[DevicePtr],
    first_seq: u64,
) -> BResult<()> {
    let (recorded, workspaces) = reuse;
    for (i, idx) in nodes.enumerate() {
        let n = &fz.nodes[idx];
        if !n.runs {
            continue;
        }
        let seq = first_seq + i as u64;
        let op = n.args.op.name();
        if n.fp16_compute {
            kernels::warn_fp16_compute(op);
        }
        let r = match n.way {
            Way::Host => kernels::run_host(api, rec, &n.args_at(addrs, seq)),
            Way::OneShot => kernels::run_aclnn(api, rec, n.imp.mapping(is_910), &n.args_at(addrs, seq)),
            Way::Reused => reused(api, rec, (&mut *recorded, &mut *workspaces), idx, n, addrs),
        };
        r.map_err(|e| AclBackendError::InNode { node: format!("{:?}", n.label), source: Box::new(e.in_op(op)) })?;
        if n.way != Way::Host {
            rec.queued(op, seq);
        }
    }
    Ok(())
}

/// A range of a frozen plan's nodes to launch on one stream (the arguments of
/// [`launch`]); the runtime's record of a whole run is `runtime::FrozenRun`.
pub(crate) struct RecordedRun<'a> {
    pub device: usize,
    pub frozen: &'a Frozen,
    pub nodes: std::ops::Range<usize>,
    pub addrs: &'a [DevicePtr],
    pub first_seq: u64,
    pub stream: StreamId,
}

/// A reused node (recorded when the plan was frozen): patched to this run's addresses and
/// launched with the plan's workspace for this stream.
fn reused(api: &Api, rec: &Arc<StreamRec>, reuse: Reuse<'_>, idx: usize, n: &Node, addrs: &[DevicePtr]) -> BResult<()> {
    let (recorded, workspaces) = reuse;
    let Some(r) = &mut recorded[idx] else { return Err(bad(format!("{}: not recorded", n.label))) };
    // Its intermediates are shared with the nodes of the stream it was recorded for: on
    // another stream it could run at the same time as one of them.
    if !r.recorded_on(rec) {
        return Err(bad(format!("{}: launched on another stream than the one it was recorded for", n.label)));
    }
    let ws = workspace(api, n.args.op.name(), workspaces, rec, r.workspace() as usize)?;
    r.patch(api, |j| n.addr(j, addrs))?;
    r.launch(api, rec, ws)
}

/// The plan's workspace on the stream of `rec`, of at least `bytes` (grown after
/// synchronising that stream, which may still run the plan's earlier nodes with it).
fn workspace(
    api: &Api,
    op: &'static str,
    workspaces: &mut Vec<(Arc<StreamRec>, Mutex<Buf>)>,
    rec: &Arc<StreamRec>,
    bytes: usize,
) -> BResult<u64> {
    stream::buffer(api, op, rec, per_stream(workspaces, rec), bytes)
}
