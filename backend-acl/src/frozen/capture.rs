//! Graph capture of a frozen plan: a whole run — every stream's launches and the event
//! records and waits between them — recorded once into a model runtime instance
//! (`aclmdlRICaptureBegin` / `aclmdlRICaptureEnd`) and replayed on later runs with one
//! `aclmdlRIExecuteAsync`.
//!
//! A replay reads and writes the addresses its launches had when they were recorded, but
//! a graph's inputs and outputs move from run to run. So the plan owns a *staging* buffer
//! per address slot: every run copies the inputs from this run's addresses into staging
//! (device to device, on the run's first stream, before the work), the launches use
//! staging only, and the outputs are copied out after the work. The copies stay outside
//! the capture.
//!
//! The run starts and ends on its first stream (the *origin*): the other streams wait for
//! an event recorded on the origin after the copies in (the *fork*), and the origin waits
//! for an event recorded on each of them at the end (the *joins*). In a capture, the fork
//! draws the other streams into the capture and the joins bring them back, as CANN
//! requires before `aclmdlRICaptureEnd`.
//!
//! Runs go:
//! 1. **warm-up**: the steps run as queued work, on staging; this records each node's
//!    executors and sizes the workspaces, which may allocate and synchronise (not allowed
//!    while capturing);
//! 2. **capture**: the same steps recorded on the origin's capture, then one replay;
//! 3. **replay**: every later run, one `aclmdlRIExecuteAsync` on the origin.
//!
//! A plan is captured when [`GraphCapture`] allows it, the runtime exports the capture
//! symbols and no node runs on the host tier (host work cannot be recorded). With
//! `Auto`, a capture or replay that fails turns capture off for the plan, with one log
//! line, and the run goes node by node; with `On` the failure is the run's error.

use crate::device::Device;
use crate::error::AclBackendError;
use crate::kernels;
use crate::memory;
use crate::stream::{self, StreamRec};
use acl_sys::{ACL_MODEL_RI_CAPTURE_MODE_RELAXED, Api, aclmdlRI, aclrtEvent, result};
use runtime::backend::allocations::CopyRanges;
use runtime::{DevicePtr, FrozenStep, GraphCapture};
use std::ops::Range;
use std::sync::Arc;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// Whether the runtime exports every capture symbol; the first missing one otherwise.
fn missing_symbol(api: &Api) -> Option<&'static str> {
    let have = [
        ("aclmdlRICaptureBegin", api.aclmdlRICaptureBegin().is_ok()),
        ("aclmdlRICaptureEnd", api.aclmdlRICaptureEnd().is_ok()),
        ("aclmdlRIExecuteAsync", api.aclmdlRIExecuteAsync().is_ok()),
        ("aclmdlRIDestroy", api.aclmdlRIDestroy().is_ok()),
    ];
    have.iter().find(|(_, ok)| !ok).map(|(s, _)| *s)
}

/// One address slot of the plan, staged.
struct Stage {
    slot: usize,
    /// The staging buffer (aclrtMalloc'd, so 64-byte aligned).
    ptr: u64,
    /// Bytes copied in before the run (some node reads them) and out after (some node
    /// writes them).
    copy_in: usize,
    copy_out: usize,
}

/// Where the plan's runs stand (see the module documentation).
enum Phase {
    WarmUp,
    Capture,
    Replay(usize),
}

/// A plan's capture.
pub(super) struct Captures {
    mode: GraphCapture,
    /// Why the plan is not captured (`None`: it is).
    off: Option<String>,
    /// Made at the first captured run.
    stages: Option<Vec<Stage>>,
    phase: Phase,
    /// Fork and join events (the fork first), made as the streams need them.
    events: Vec<usize>,
}

impl Captures {
    /// Decides at freeze time whether the plan may be captured. `On` with a plan that
    /// cannot be is an error.
    pub(super) fn new(api: &Api, mode: GraphCapture, host_node: Option<&str>) -> BResult<Captures> {
        let off = match (mode, missing_symbol(api), host_node) {
            (GraphCapture::Off, ..) => Some("graph capture is off".to_string()),
            (_, Some(sym), _) => Some(format!("this CANN runtime has no {sym}")),
            (_, None, Some(node)) => Some(format!("node {node:?} runs on the host tier, which cannot be captured")),
            _ => None,
        };
        if let (GraphCapture::On, Some(why)) = (mode, &off) {
            return Err(AclBackendError::BadRequest(format!("graph capture is on, but {why}")));
        }
        if let (GraphCapture::Auto, Some(why)) = (mode, &off) {
            log::debug!("acl: compiled graph not captured: {why}");
        }
        Ok(Captures { mode, off, stages: None, phase: Phase::WarmUp, events: Vec::new() })
    }

    pub(super) fn enabled(&self) -> bool {
        self.off.is_none()
    }

    /// Turns capture off for the plan after `e` (mode `Auto`), or hands `e` back (`On`).
    fn give_up(&mut self, e: AclBackendError) -> BResult<()> {
        if self.mode == GraphCapture::On {
            return Err(e);
        }
        log::warn!("acl: graph capture failed ({e}); this compiled graph runs node by node from now on");
        self.off = Some(format!("capture failed: {e}"));
        Ok(())
    }

    /// Bytes of the staging buffers made so far.
    pub(super) fn staged_bytes(&self) -> usize {
        self.stages.iter().flatten().map(|s| s.copy_in.max(s.copy_out)).sum()
    }

    /// Destroys the recorded instance and frees staging buffers and events; the caller
    /// synchronised every stream that used them. Returns the staging bytes.
    pub(super) fn release(self, api: &Api) -> usize {
        if let Phase::Replay(ri) = self.phase {
            // SAFETY: an instance made by aclmdlRICaptureEnd, destroyed once (a second
            // attempt only after the first failed); its replays are done.
            let destroy = || unsafe { result::capture::destroy(api, ri as aclmdlRI) };
            if let Err(e) = destroy() {
                log::warn!("acl: destroying a captured graph: {e}; retrying once");
                if let Err(e) = destroy() {
                    log::error!("acl: destroying a captured graph: {e}");
                }
            }
        }
        for e in self.events {
            if let Err(e) = stream::destroy_event(api, e as aclrtEvent) {
                log::error!("acl: destroying a capture's event: {e}");
            }
        }
        let mut staged = 0;
        for s in self.stages.into_iter().flatten() {
            staged += s.copy_in.max(s.copy_out);
            if let Err(e) = memory::free(api, s.ptr) {
                log::error!("acl: freeing a capture's staging buffer: {e}");
            }
        }
        staged
    }
}

/// Where the plan's nodes reach through the address slots: `(slot, bytes from the slot's
/// address, read)`, one per patched operand (`read`: an input).
pub(super) type Touches = Vec<(usize, usize, bool)>;

/// What a run's steps do, queued as they say (the plan's side of a run).
pub(super) trait Steps {
    /// Queues launches `nodes` on stream `stream` of the run with slot addresses `addrs`.
    fn launch(&mut self, stream: usize, nodes: Range<usize>, addrs: &[DevicePtr]) -> BResult<()>;
    /// Records the run's event `event` on stream `stream`.
    fn record(&mut self, stream: usize, event: usize) -> BResult<()>;
    /// Stream `stream` waits for the run's event `event`.
    fn wait(&mut self, stream: usize, event: usize) -> BResult<()>;
}

/// A whole run of the plan, as [`run`] takes it.
pub(super) struct WholeRun<'a> {
    pub dev: &'a Device,
    /// The run's streams; the first is the origin.
    pub recs: &'a [Arc<StreamRec>],
    pub steps: &'a [FrozenStep],
    pub addrs: &'a [DevicePtr],
    pub first_seq: u64,
    /// The first node's name, for errors.
    pub label: &'a str,
}

/// Queues a whole run through the plan's capture; `Ok(false)` when the plan is not
/// captured (nothing was queued: the caller runs the steps itself). `touches` says which
/// slots the plan reads and writes (asked once).
pub(super) fn run(
    api: &Api,
    caps: &mut Captures,
    run: WholeRun<'_>,
    touches: &dyn Fn() -> Touches,
    steps: &mut dyn Steps,
) -> BResult<bool> {
    let WholeRun { dev, recs, steps: plan, addrs, first_seq, label } = run;
    let Some(origin) = recs.first() else { return Ok(false) };
    if !caps.enabled() {
        return Ok(false);
    }
    if caps.stages.is_none() {
        match stages(api, touches()) {
            Ok(s) => caps.stages = Some(s),
            Err(e) => {
                caps.give_up(e)?;
                return Ok(false);
            }
        }
    }
    while caps.events.len() < recs.len() {
        match stream::create_event(api) {
            Ok(e) => caps.events.push(e.handle),
            Err(e) => {
                caps.give_up(e)?;
                return Ok(false);
            }
        }
    }
    let stages = caps.stages.as_deref().unwrap_or_default();
    let mut staged = addrs.to_vec();
    for s in stages {
        if s.copy_in > 0 {
            copy(api, dev, origin, addrs[s.slot].0, s.ptr, s.copy_in)?;
        }
        staged[s.slot] = DevicePtr(s.ptr);
    }
    let events = caps.events.clone();
    let mut body = || queue(api, recs, &events, plan, &staged, steps);
    let what = |e: AclBackendError| AclBackendError::InNode {
        node: format!("{label:?} (and the rest of the graph, captured)"),
        source: Box::new(e),
    };
    match caps.phase {
        Phase::WarmUp => {
            body()?;
            caps.phase = Phase::Capture;
        }
        Phase::Capture => match record(api, origin, &mut body) {
            Ok(ri) => {
                caps.phase = Phase::Replay(ri);
                if let Err(e) = replay(api, origin, ri, first_seq) {
                    caps.give_up(what(e))?;
                    body()?;
                }
            }
            Err(Recording::Node(e)) => return Err(e),
            Err(Recording::Capture(e)) => {
                caps.give_up(what(e))?;
                // Nothing of the run ran: run it now, node by node.
                body()?;
            }
        },
        Phase::Replay(ri) => {
            if let Err(e) = replay(api, origin, ri, first_seq) {
                caps.give_up(what(e))?;
                body()?;
            }
        }
    }
    for s in caps.stages.as_deref().unwrap_or_default() {
        if s.copy_out > 0 {
            copy(api, dev, origin, s.ptr, addrs[s.slot].0, s.copy_out)?;
        }
    }
    Ok(true)
}

/// The run's work: the fork, the steps, the joins.
fn queue(
    api: &Api,
    recs: &[Arc<StreamRec>],
    events: &[usize],
    plan: &[FrozenStep],
    staged: &[DevicePtr],
    steps: &mut dyn Steps,
) -> BResult<()> {
    let (origin, others) = recs.split_first().expect("a run has a stream");
    if !others.is_empty() {
        stream::record(api, events[0] as aclrtEvent, origin)?;
        for r in others {
            stream::wait(api, r, events[0] as aclrtEvent)?;
        }
    }
    for st in plan {
        match st {
            FrozenStep::Launch { stream, nodes } => steps.launch(*stream, nodes.clone(), staged)?,
            FrozenStep::Record { stream, event } => steps.record(*stream, *event)?,
            FrozenStep::Wait { stream, event } => steps.wait(*stream, *event)?,
        }
    }
    for (r, e) in others.iter().zip(&events[1..]) {
        stream::record(api, *e as aclrtEvent, r)?;
        stream::wait(api, origin, *e as aclrtEvent)?;
    }
    Ok(())
}

/// How a capture failed: in a node's own call (the run's error whatever the mode), or
/// in the capture itself.
enum Recording {
    Node(AclBackendError),
    Capture(AclBackendError),
}

/// Records the run on the origin's capture: begin, the work, end.
fn record(api: &Api, origin: &StreamRec, body: &mut dyn FnMut() -> BResult<()>) -> Result<usize, Recording> {
    // RELAXED: other threads (other arenas' runs, uploads) keep using the synchronous
    // calls while this stream is captured; this thread makes none until the end.
    // SAFETY: a live stream of the bound device, not being captured (a plan's runs are
    // serialised by its lock).
    unsafe { result::capture::capture_begin(api, origin.raw(), ACL_MODEL_RI_CAPTURE_MODE_RELAXED) }
        .map_err(|e| Recording::Capture(e.into()))?;
    let r = body();
    // SAFETY: the stream this thread began capturing above.
    let end = unsafe { result::capture::capture_end(api, origin.raw()) };
    match (r, end) {
        (Ok(()), Ok(ri)) => Ok(ri as usize),
        (r, end) => {
            if let Ok(ri) = end {
                // SAFETY: the instance just made, never replayed.
                if let Err(e) = unsafe { result::capture::destroy(api, ri) } {
                    log::error!("acl: destroying a failed capture: {e}");
                }
            }
            match (r, end) {
                (Err(e), _) => Err(Recording::Node(e)),
                (_, Err(e)) => Err(Recording::Capture(e.into())),
                _ => unreachable!("handled above"),
            }
        }
    }
}

fn replay(api: &Api, rec: &StreamRec, ri: usize, seq: u64) -> BResult<()> {
    // SAFETY: a live instance of this plan; everything its launches touch (staging,
    // the arena, constants, workspaces, executors) is held by the plan until it is
    // released, after its streams are synchronised.
    unsafe { result::capture::execute_async(api, ri as aclmdlRI, rec.raw()) }?;
    rec.queued("captured graph", seq);
    Ok(())
}

/// The slots the plan touches, with a staging buffer each.
fn stages(api: &Api, touches: Touches) -> BResult<Vec<Stage>> {
    let mut stages: Vec<Stage> = Vec::new();
    for (k, end, read) in touches {
        let s = match stages.iter_mut().position(|s| s.slot == k) {
            Some(i) => &mut stages[i],
            None => {
                stages.push(Stage { slot: k, ptr: 0, copy_in: 0, copy_out: 0 });
                stages.last_mut().expect("just pushed")
            }
        };
        if read {
            s.copy_in = s.copy_in.max(end);
        } else {
            s.copy_out = s.copy_out.max(end);
        }
    }
    for i in 0..stages.len() {
        let bytes = stages[i].copy_in.max(stages[i].copy_out);
        match memory::malloc(api, None, bytes) {
            Ok(p) => stages[i].ptr = p,
            Err(e) => {
                for s in &stages[..i] {
                    let _ = memory::free(api, s.ptr);
                }
                return Err(e);
            }
        }
    }
    Ok(stages)
}

/// A stream-ordered device copy ([`memory::d2d`]) from the allocations' bases.
fn copy(api: &Api, dev: &Device, rec: &StreamRec, src: u64, dst: u64, bytes: usize) -> BResult<()> {
    let base = |a: u64| dev.allocs.locate(a, bytes).unwrap_or(a);
    let r = CopyRanges { src, src_base: base(src), dst, dst_base: base(dst), bytes };
    if memory::d2d(api, rec.raw(), &r, |s, d| kernels::byte_copy(api, rec, s, d, bytes))? {
        rec.mark_dirty();
    }
    Ok(())
}
