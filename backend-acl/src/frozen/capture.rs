//! Graph capture of a frozen plan: the launches a run queues on a stream for a range of
//! nodes, recorded once into a model runtime instance (`aclmdlRICaptureBegin` /
//! `aclmdlRICaptureEnd`) and replayed on later runs with one `aclmdlRIExecuteAsync`.
//!
//! A replay reads and writes the addresses its launches had when they were recorded, but
//! a graph's inputs and outputs move from run to run. So each captured range owns a
//! *staging* buffer per address slot it touches: every run copies the range's inputs from
//! this run's addresses into staging (device to device, on the stream, before the
//! replay), the launches are recorded against staging only, and the range's outputs are
//! copied out after it. The copies stay outside the capture.
//!
//! Per range (nodes and stream, as the runtime's steps fix them), runs go:
//! 1. **warm-up**: the nodes run one by one on staging; this records each node's
//!    executors and sizes the workspaces, which may allocate and synchronise (not
//!    allowed while capturing);
//! 2. **capture**: the nodes' phase 2 calls are recorded, then replayed once;
//! 3. **replay**: every later run.
//!
//! A plan is captured when [`GraphCapture`] allows it, the runtime exports the capture
//! symbols and no node runs on the host tier (host work cannot be recorded). With
//! `Auto`, a capture or replay that fails turns capture off for the plan, with one log
//! line, and the range runs node by node; with `On` the failure is the run's error.

use crate::device::Dev;
use crate::error::AclBackendError;
use crate::kernels;
use crate::memory;
use crate::stream::StreamRec;
use acl_sys::{ACL_MODEL_RI_CAPTURE_MODE_RELAXED, Api, aclmdlRI, result};
use runtime::{DevicePtr, GraphCapture};
use std::ops::Range;
use std::sync::Arc;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// The symbols capture needs; all optional in CANN.
const SYMBOLS: [&str; 4] = ["aclmdlRICaptureBegin", "aclmdlRICaptureEnd", "aclmdlRIExecuteAsync", "aclmdlRIDestroy"];

/// Whether the runtime exports every capture symbol; the first missing one otherwise.
fn missing_symbol(api: &Api) -> Option<&'static str> {
    let have = [
        api.aclmdlRICaptureBegin().is_ok(),
        api.aclmdlRICaptureEnd().is_ok(),
        api.aclmdlRIExecuteAsync().is_ok(),
        api.aclmdlRIDestroy().is_ok(),
    ];
    SYMBOLS.iter().zip(have).find(|(_, ok)| !ok).map(|(s, _)| *s)
}

/// One address slot a captured range touches.
struct Stage {
    slot: usize,
    /// The staging buffer (aclrtMalloc'd, so 64-byte aligned).
    ptr: u64,
    /// Bytes copied in before the range (its nodes read them) and out after (they write them).
    copy_in: usize,
    copy_out: usize,
}

/// Where a range stands (see the module documentation).
enum Phase {
    WarmUp,
    Capture,
    Replay(usize),
}

struct RangeCapture {
    nodes: Range<usize>,
    stream: Arc<StreamRec>,
    stages: Vec<Stage>,
    phase: Phase,
}

/// A plan's captures.
pub(super) struct Captures {
    mode: GraphCapture,
    /// Why the plan is not captured (`None`: it is).
    off: Option<String>,
    ranges: Vec<RangeCapture>,
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
        Ok(Captures { mode, off, ranges: Vec::new() })
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

    /// Replays recorded and staging buffers made; destroyed and freed when the plan is
    /// released (its streams synchronised).
    pub(super) fn release(self, api: &Api) -> usize {
        let mut staged = 0;
        for r in self.ranges {
            if let Phase::Replay(ri) = r.phase {
                // SAFETY: an instance made by aclmdlRICaptureEnd, destroyed once (a second
                // attempt only after the first failed); the streams that replayed it were
                // synchronised by the caller.
                let destroy = || unsafe { result::capture::destroy(api, ri as aclmdlRI) };
                if let Err(e) = destroy() {
                    log::warn!("acl: destroying a captured graph: {e}; retrying once");
                    if let Err(e) = destroy() {
                        log::error!("acl: destroying a captured graph: {e}");
                    }
                }
            }
            for s in r.stages {
                staged += s.copy_in.max(s.copy_out);
                if let Err(e) = memory::free(api, s.ptr) {
                    log::error!("acl: freeing a capture's staging buffer: {e}");
                }
            }
        }
        staged
    }
}

/// The arguments of [`run`] that describe the launch.
pub(super) struct CaptureRun<'a> {
    pub dev: &'a Dev,
    pub rec: &'a Arc<StreamRec>,
    pub nodes: Range<usize>,
    pub addrs: &'a [DevicePtr],
    pub first_seq: u64,
    /// The first node's name, for errors.
    pub label: &'a str,
}

/// Where the nodes of a range reach through the address slots: `(slot, bytes from the
/// slot's address, read)`, one per patched operand (`read`: an input).
pub(super) type Touches = Vec<(usize, usize, bool)>;

/// Runs `nodes` of the plan on the stream through its capture; `Ok(false)` when the plan
/// is not captured (the caller runs the nodes itself). `touches` says which slots the
/// range reads and writes (asked once per range); `each` runs the range's nodes one by
/// one with the slot addresses it is given.
pub(super) fn run(
    api: &Api,
    caps: &mut Captures,
    run: CaptureRun<'_>,
    touches: &dyn Fn() -> Touches,
    each: &mut dyn FnMut(&[DevicePtr]) -> BResult<()>,
) -> BResult<bool> {
    let CaptureRun { dev, rec, nodes, addrs, first_seq, label } = run;
    if !caps.enabled() {
        return Ok(false);
    }
    let i = match caps.ranges.iter().position(|r| r.nodes == nodes && Arc::ptr_eq(&r.stream, rec)) {
        Some(i) => i,
        None => match stages(api, touches()) {
            Ok(stages) => {
                let stream = rec.clone();
                caps.ranges.push(RangeCapture { nodes: nodes.clone(), stream, stages, phase: Phase::WarmUp });
                caps.ranges.len() - 1
            }
            Err(e) => {
                caps.give_up(e)?;
                return Ok(false);
            }
        },
    };
    let mut staged = addrs.to_vec();
    for s in &caps.ranges[i].stages {
        if s.copy_in > 0 {
            copy(api, dev, rec, addrs[s.slot].0, s.ptr, s.copy_in)?;
        }
        staged[s.slot] = DevicePtr(s.ptr);
    }
    let what = |e: AclBackendError| AclBackendError::InNode {
        node: format!("{label:?} (and the rest of nodes {}..{}, captured)", nodes.start, nodes.end),
        source: Box::new(e),
    };
    match caps.ranges[i].phase {
        Phase::WarmUp => {
            each(&staged)?;
            caps.ranges[i].phase = Phase::Capture;
        }
        Phase::Capture => match record(api, rec, &staged, each) {
            Ok(ri) => {
                caps.ranges[i].phase = Phase::Replay(ri);
                if let Err(e) = replay(api, rec, ri, first_seq) {
                    caps.give_up(what(e))?;
                    each(&staged)?;
                }
            }
            Err(Recording::Node(e)) => return Err(e),
            Err(Recording::Capture(e)) => {
                caps.give_up(what(e))?;
                // Nothing of the range ran: run it now, node by node.
                each(&staged)?;
            }
        },
        Phase::Replay(ri) => {
            if let Err(e) = replay(api, rec, ri, first_seq) {
                caps.give_up(what(e))?;
                each(&staged)?;
            }
        }
    }
    for s in &caps.ranges[i].stages {
        if s.copy_out > 0 {
            copy(api, dev, rec, s.ptr, addrs[s.slot].0, s.copy_out)?;
        }
    }
    Ok(true)
}

/// How a capture failed: in a node's own call (the run's error whatever the mode), or
/// in the capture itself.
enum Recording {
    Node(AclBackendError),
    Capture(AclBackendError),
}

/// Records the range's launches: begin, each node's phase 2, end.
fn record(
    api: &Api,
    rec: &Arc<StreamRec>,
    staged: &[DevicePtr],
    each: &mut dyn FnMut(&[DevicePtr]) -> BResult<()>,
) -> Result<usize, Recording> {
    // RELAXED: other threads (other arenas' runs, uploads) keep using the synchronous
    // calls while this stream is captured; this thread makes none until the end.
    // SAFETY: a live stream of the bound device, not being captured (ranges are captured
    // one at a time, under the plan's lock).
    unsafe { result::capture::capture_begin(api, rec.raw(), ACL_MODEL_RI_CAPTURE_MODE_RELAXED) }
        .map_err(|e| Recording::Capture(e.into()))?;
    let r = each(staged);
    // SAFETY: the stream this thread began capturing above.
    let end = unsafe { result::capture::capture_end(api, rec.raw()) };
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

/// The slots the range touches, with a staging buffer each.
fn stages(api: &Api, touches: Touches) -> BResult<Vec<Stage>> {
    let mut stages: Vec<Stage> = Vec::new();
    for (k, end, read) in touches {
        let s = match stages.iter_mut().find(|s| s.slot == k) {
            Some(s) => s,
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

/// A stream-ordered device copy: a DMA copy when both ends are 64-byte aligned, else a
/// byte-typed aclnnInplaceCopy from the allocations' bases.
fn copy(api: &Api, dev: &Dev, rec: &StreamRec, src: u64, dst: u64, bytes: usize) -> BResult<()> {
    if src.is_multiple_of(64) && dst.is_multiple_of(64) {
        memory::d2d_async(api, src, dst, bytes, rec.raw())?;
        rec.mark_dirty();
        return Ok(());
    }
    let base = |a: u64| dev.allocs.locate(a, bytes).unwrap_or(a);
    let (sb, db) = (base(src), base(dst));
    kernels::byte_copy(api, rec, (sb, src - sb), (db, dst - db), bytes)
}
