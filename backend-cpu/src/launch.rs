//! Kernel launches: each is checked against its op (`LaunchArgs::validate`, contract
//! rule M6) and the device's allocations, then run on the calling thread, queued, run as
//! part of a batch, or frozen once for a compiled graph and replayed.
//!
//! A kernel that panics fails its launch exactly as one that returns an error: the panic
//! is caught around the kernel and becomes a [`runtime::Error::Async`] naming the op, the
//! stream (`cpu:D/default` or `cpu:D/streamN`) and the submission number, returned at
//! once on the default stream and at the next synchronisation on a user stream.
//!
//! Faults can be injected into launches
//! ([`CpuBackend::inject_fault`](crate::CpuBackend::inject_fault)) for tests of failure
//! handling.

use crate::device::Device;
use crate::error::CpuError;
use crate::fault::Fault;
use crate::kernels::{
    self,
    common::{Ctx, In, Out},
};
use crate::memory;
use crate::pool::JoinedPool;
use crate::stream::DEFAULT_STREAM;
use runtime::backend::allocations::overlapping_output;
use runtime::error::panic_message;
use runtime::{DevicePtr, KernelInfo, LaunchArgs, Result, StreamId};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Output bytes up to which a launch runs inline without entering the device's thread
/// pool (the hand-off costs more than the work).
const INLINE_MAX_BYTES: u64 = 1 << 18;

/// How one kernel run failed, before it is named with its kernel, op and stream.
enum Failure {
    Kernel(runtime::KernelError),
    Panicked(String),
    Injected,
    NotContiguous,
}

impl From<runtime::KernelError> for Failure {
    fn from(e: runtime::KernelError) -> Failure {
        Failure::Kernel(e)
    }
}

/// Runs a kernel (or a pool hand-off around it); a panic becomes a [`Failure`].
fn guarded(go: impl FnOnce() -> std::result::Result<(), Failure>) -> std::result::Result<(), Failure> {
    match catch_unwind(AssertUnwindSafe(go)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            // Dropping the payload runs foreign code too; a panic there is not propagated.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            Err(Failure::Panicked(msg))
        }
    }
}

/// Runs `f` on operands whose byte ranges `range(operand index, operand)` gives (inputs
/// first, then outputs). Every range must have been validated and pinned by the caller.
/// `ins` and `outs` are scratch space (empty before and after a normal return), so that a
/// run of many launches can reuse one allocation.
#[allow(clippy::too_many_arguments)]
fn run_kernel_at<'a>(
    f: kernels::KernelFn,
    op: &runtime::Op,
    inputs: &'a [runtime::TensorArg],
    outputs: &'a [runtime::TensorArg],
    range: impl Fn(usize, &runtime::TensorArg) -> (u64, usize),
    ctx: &Ctx,
    fault: Option<Fault>,
    ins: &mut Vec<In<'a>>,
    outs: &mut Vec<Out<'a>>,
) -> std::result::Result<(), Failure> {
    let n_in = inputs.len();
    ins.extend(inputs.iter().enumerate().map(|(i, a)| {
        let (start, len) = range(i, a);
        In {
            dtype: a.dtype,
            dims: a.layout.dims(),
            strides: &a.layout.strides,
            bytes: if len == 0 {
                // An empty slice with 8-byte alignment, so typed views of it work.
                bytemuck::cast_slice::<u64, u8>(&[])
            } else {
                // `launch` (or `freeze` and `launch_frozen`) checked that no output overlaps.
                // SAFETY: that check also put `start .. start + len` inside a live allocation
                // of this device, pinned until this job finishes; the bytes are only read.
                unsafe { std::slice::from_raw_parts(start as *const u8, len) }
            },
        }
    }));
    outs.extend(outputs.iter().enumerate().map(|(i, a)| {
        let (start, len) = range(n_in + i, a);
        Out {
            dtype: a.dtype,
            dims: a.layout.dims(),
            bytes: if len == 0 {
                bytemuck::cast_slice_mut::<u64, u8>(&mut [])
            } else {
                // SAFETY: as for inputs, plus: outputs overlap neither each other nor
                // any input (checked in `launch`), so this is the only reference.
                unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) }
            },
        }
    }));
    let r = if outs.iter().any(|o| o.bytes.len() < o.numel() * o.dtype.size()) {
        Err(Failure::NotContiguous)
    } else {
        match fault {
            None => f(op, ins, outs, ctx).map_err(Failure::Kernel),
            Some(Fault::Panic) => panic!("injected fault in {}", op.name()),
            Some(Fault::Error) => Err(Failure::Injected),
        }
    };
    // No view of the operands outlives the launch.
    ins.clear();
    outs.clear();
    r
}

/// The error of a failed kernel: returned directly on the default stream, reported at
/// the next synchronisation on a user stream.
fn kernel_error(
    kernel: &'static str,
    op: &runtime::Op,
    seq: u64,
    device: usize,
    stream: StreamId,
    failure: Failure,
) -> runtime::Error {
    let stream = if stream == DEFAULT_STREAM {
        format!("cpu:{device}/default")
    } else {
        format!("cpu:{device}/stream{}", stream.0)
    };
    let kernel = std::borrow::Cow::Borrowed(kernel);
    let source = match failure {
        Failure::Kernel(source) => CpuError::Kernel { kernel, source },
        Failure::Panicked(msg) => CpuError::Panicked { kernel, msg },
        Failure::Injected => CpuError::Injected { kernel },
        Failure::NotContiguous => CpuError::NotContiguous { kernel },
    };
    runtime::Error::Async { op: op.name().to_string(), stream, seq, source: Arc::new(source) }
}

/// A validated launch, ready to run on the calling thread or to be queued.
pub(crate) struct Prepared {
    f: kernels::KernelFn,
    args: LaunchArgs,
    /// Operand byte ranges (inputs, then outputs), checked and pinned.
    ranges: Vec<(u64, usize)>,
    ctx: Ctx,
    kernel: &'static str,
    device: usize,
    stream: StreamId,
    pool: Option<Arc<JoinedPool>>,
    fault: Option<Fault>,
    _pins: memory::Pins,
}

impl Prepared {
    pub(crate) fn run(self) -> Result<()> {
        let go = || {
            let (mut ins, mut outs) = (Vec::new(), Vec::new());
            let (a, o, ranges) = (&self.args.inputs, &self.args.outputs, &self.ranges);
            let mut run = || {
                let range = |j, _: &_| ranges[j];
                run_kernel_at(self.f, &self.args.op, a, o, range, &self.ctx, self.fault, &mut ins, &mut outs)
            };
            match &self.pool {
                Some(p) => p.install(run),
                None => run(),
            }
        };
        guarded(go).map_err(|f| kernel_error(self.kernel, &self.args.op, self.args.seq, self.device, self.stream, f))
    }
}

/// A compiled graph's launches, validated once by `freeze`.
struct CpuFrozen {
    device: usize,
    table: Arc<memory::Table>,
    nodes: Vec<FrozenNode>,
    /// Bytes from each per-run address that the operands patched with it reach.
    extent: Vec<usize>,
    /// The allocations of the fixed operands, pinned for as long as the plan lives.
    _pins: memory::Pins,
}

struct FrozenNode {
    f: kernels::KernelFn,
    kernel: &'static str,
    args: LaunchArgs,
    /// Operand byte ranges (inputs, then outputs); a patched operand's start is its
    /// offset from the per-run address.
    ranges: Vec<(u64, usize)>,
    /// `(operand, address slot)`.
    patches: Vec<(usize, usize)>,
    /// `ctx.threads` is 1 for launches that would run inline (see `placement`).
    ctx: Ctx,
}

impl FrozenNode {
    /// The operand ranges of this node for per-run addresses `addrs` (in `out`).
    fn ranges_into(&self, addrs: &[DevicePtr], out: &mut Vec<(u64, usize)>) {
        out.clear();
        out.extend_from_slice(&self.ranges);
        for &(op, k) in &self.patches {
            // No overflow: `launch_frozen` pinned `addrs[k] .. addrs[k] + extent[k]`, which
            // covers `offset + len` of every operand patched from slot k.
            out[op].0 += addrs[k].0;
        }
    }
}

/// One run of a span of frozen launches: which, where, and the faults injected into them.
struct RunSpan<'a> {
    nodes: std::ops::Range<usize>,
    addrs: &'a [DevicePtr],
    first_seq: u64,
    stream: StreamId,
    /// Per node of the run, when a fault is armed; empty otherwise.
    faults: &'a [Option<Fault>],
}

impl CpuFrozen {
    /// Runs the launches in order, all of them inside one task of the device pool: the
    /// submitting thread hands the run over and waits once, instead of once per launch,
    /// and each kernel's parallel parts start from a pool worker (no hand-over, no
    /// wake-up of the submitter between kernels). Launches budgeted one thread run on that
    /// worker alone. Stops at the first failure, which names that launch's op and
    /// submission number.
    ///
    /// Where a launch of the span is parallel, one other pool thread is kept awake for the
    /// run ([`keep_awake`]): between two products a decode step runs short serial kernels
    /// (a norm, attention over one query), long enough for an idle rayon worker to fall
    /// asleep, and waking it for the next product costs tens of microseconds on a virtual
    /// machine. (A throwaway timing on AMD EPYC Zen 3, two threads: qwen2-0.5b's 96 f32
    /// layer products with 30 or 60 µs of serial work between them took 51.9 and 52.3 ms
    /// of product time, and 47.9 and 48.1 ms with a helper kept awake, medians of 15
    /// alternated passes.)
    fn run(&self, run: RunSpan<'_>, pool: &rayon::ThreadPool) -> Result<()> {
        let parallel = self.nodes[run.nodes.clone()].iter().any(|n| n.ctx.threads > 1);
        if !parallel || pool.current_num_threads() < 2 {
            return pool.install(|| self.run_here(run));
        }
        let done = AtomicBool::new(false);
        pool.scope(|s| {
            let (owner, done) = (rayon::current_thread_index(), &done);
            s.spawn(move |_| keep_awake(owner, done));
            let r = self.run_here(run);
            done.store(true, Ordering::Release);
            r
        })
    }

    fn run_here(&self, run: RunSpan<'_>) -> Result<()> {
        let mut ranges = Vec::new();
        let (mut ins, mut outs) = (Vec::new(), Vec::new());
        for (i, n) in self.nodes[run.nodes].iter().enumerate() {
            n.ranges_into(run.addrs, &mut ranges);
            let fault = run.faults.get(i).copied().flatten();
            let r = {
                let ranges = &ranges;
                let (ins, outs) = (&mut ins, &mut outs);
                guarded(|| {
                    let (a, o) = (&n.args.inputs, &n.args.outputs);
                    run_kernel_at(n.f, &n.args.op, a, o, |j, _| ranges[j], &n.ctx, fault, ins, outs)
                })
            };
            // A panic skipped the clean-up in `run_kernel_at`.
            ins.clear();
            outs.clear();
            let seq = run.first_seq + i as u64;
            r.map_err(|f| kernel_error(n.kernel, &n.args.op, seq, self.device, run.stream, f))?;
        }
        Ok(())
    }
}

/// Longest idle spell a thread kept awake by [`keep_awake`] spins through before it
/// leaves (and may sleep): longer than the serial stretches between a decode step's
/// products, short enough that a helper caught inside another job's wait (see
/// [`keep_awake`]) hands its thread back soon.
const KEEP_AWAKE_IDLE: Duration = Duration::from_micros(500);

/// Runs pending pool work until `done`, spinning instead of sleeping while there is none
/// (a worker asleep takes tens of microseconds to wake on a virtual machine, which a
/// decode step's 100 products would pay each). Returns at once on the run's own thread
/// `owner` (which popped it while waiting), and after [`KEEP_AWAKE_IDLE`] without work: a
/// thread that picked this job up while it waited inside another job (rayon steals from any
/// queue while waiting) must not hold that job's completion, and so the run's, hostage
/// until `done`. While such a thread keeps finding work (another run's) it stays, so under
/// concurrent runs one may wait for another's end: a cost in latency, never a deadlock,
/// since every helper leaves once its run is done or the pool runs dry
/// (`tests/concurrent.rs`, `cpu_runs_on_four_pool_threads_finish_with_serial_results`).
fn keep_awake(owner: Option<usize>, done: &AtomicBool) {
    if rayon::current_thread_index() == owner {
        return;
    }
    let mut idle_since: Option<Instant> = None;
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => idle_since = None,
            Some(rayon::Yield::Idle) => {
                if idle_since.get_or_insert_with(Instant::now).elapsed() > KEEP_AWAKE_IDLE {
                    return;
                }
                std::hint::spin_loop();
            }
            None => return,
        }
    }
}

impl Device {
    /// Validates a launch: the kernel is ours, the launch fits its op and kernel, every
    /// operand lies in a live allocation (which is pinned), and no output overlaps
    /// another operand.
    pub(crate) fn prepare_launch(&self, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<Prepared> {
        let (f, own) = self.kernel_fn(kernel)?;
        let ranges = args.validate(own)?;
        let n_in = args.inputs.len();
        if let Some(i) = overlapping_output(&ranges, n_in, |_| false) {
            return Err(CpuError::BadRequest(format!("{}: output {i} overlaps another operand", kernel.name)).into());
        }
        // One lock for the read-only test and the pins: a loan cannot end and come back
        // read-only in between.
        let pins = self.table.pin_writing(&ranges[..n_in], &ranges[n_in..]).map_err(CpuError::from)?;
        let out_bytes: u64 = ranges[n_in..].iter().map(|o| o.1 as u64).sum();
        let (inline, threads) = self.placement(&args.op, args.threads, out_bytes);
        let pool = if inline {
            None
        } else if threads == 1 {
            self.queue(stream)?.map(|q| q.solo.clone())
        } else {
            Some(self.pool.clone())
        };
        let prepacked = args.prepacked.clone();
        Ok(Prepared {
            f,
            args,
            ranges,
            ctx: Ctx { threads, features: self.features, prepacked },
            kernel: own.name.as_ref(),
            device: self.index,
            stream,
            pool,
            fault: self.faults.take(&own.name),
            _pins: pins,
        })
    }

    /// Runs a prepared launch now (default stream) or queues it, named by its op and
    /// submission number (user stream).
    pub(crate) fn enqueue(&self, stream: StreamId, p: Prepared) -> Result<()> {
        match self.queue(stream)? {
            None => p.run(),
            Some(q) => {
                q.queue.submit_op(p.args.op.name(), p.args.seq, Box::new(move || p.run()))?;
                Ok(())
            }
        }
    }

    /// Validates every launch in full (as `prepare_launch` does; patched operands by their
    /// offsets) and pins the fixed operands' allocations for the life of the plan;
    /// `launch_frozen` then checks only the per-run addresses.
    pub(crate) fn freeze_launches(&self, launches: &[runtime::FrozenLaunch]) -> Result<Option<runtime::Frozen>> {
        let bad = |msg: String| -> runtime::Error { CpuError::BadRequest(msg).into() };
        let mut nodes = Vec::with_capacity(launches.len());
        let mut fixed: Vec<(u64, usize)> = Vec::new();
        let mut fixed_writes: Vec<(u64, usize)> = Vec::new();
        let mut extent: Vec<usize> = Vec::new();
        for l in launches {
            let (kernel, args) = (&l.kernel, &l.args);
            let (f, own) = self.kernel_fn(kernel)?;
            let ranges = args.validate(own)?;
            let n_in = args.inputs.len();
            let n_ops = ranges.len();
            let mut patched = vec![false; n_ops];
            for &(op, k) in &l.patches {
                if op >= n_ops || patched[op] {
                    return Err(bad(format!("{}: bad patch of operand {op}", kernel.name)));
                }
                patched[op] = true;
                // A patched operand's range is relative to its per-run address.
                let a = if op < n_in { &args.inputs[op] } else { &args.outputs[op - n_in] };
                if a.ptr != DevicePtr::NULL {
                    return Err(bad(format!("{}: patched operand {op} has an address", kernel.name)));
                }
                let (off, len) = ranges[op];
                let end = usize::try_from(off)
                    .ok()
                    .and_then(|o| o.checked_add(len))
                    .ok_or_else(|| bad(format!("{}: operand {op} is out of range", kernel.name)))?;
                if extent.len() <= k {
                    extent.resize(k + 1, 0);
                }
                extent[k] = extent[k].max(end);
            }
            // Fixed operands: outputs overlap no other fixed operand (patched ones are
            // checked per run), and all lie in live allocations (pinned below).
            if let Some(i) = overlapping_output(&ranges, n_in, |i| patched[i]) {
                return Err(bad(format!("{}: output {i} overlaps another operand", kernel.name)));
            }
            fixed.extend(ranges.iter().enumerate().filter(|(i, _)| !patched[*i]).map(|(_, r)| *r));
            fixed_writes.extend((n_in..n_ops).filter(|&i| !patched[i]).map(|i| ranges[i]));
            let out_bytes: u64 = ranges[n_in..].iter().map(|o| o.1 as u64).sum();
            let (_, threads) = self.placement(&args.op, args.threads, out_bytes);
            nodes.push(FrozenNode {
                f,
                kernel: own.name.as_ref(),
                args: args.clone(),
                ranges,
                patches: l.patches.clone(),
                ctx: Ctx { threads, features: self.features, prepacked: args.prepacked.clone() },
            });
        }
        // The fixed outputs are tested writable under the lock that pins them (pinned
        // twice, as reads and as writes: each pin is released with the plan).
        let pins = self.table.pin_writing(&fixed, &fixed_writes).map_err(CpuError::from)?;
        Ok(Some(runtime::Frozen(Arc::new(CpuFrozen {
            device: self.index,
            table: self.table.clone(),
            nodes,
            extent,
            _pins: pins,
        }))))
    }

    /// Checks the per-run addresses of frozen launches `nodes` and runs them (default
    /// stream) or queues them as one job named by the first launch (user stream).
    pub(crate) fn launch_frozen_at(
        &self,
        frozen: &runtime::Frozen,
        nodes: std::ops::Range<usize>,
        addrs: &[DevicePtr],
        first_seq: u64,
        stream: StreamId,
    ) -> Result<()> {
        let bad = |msg: &str| -> runtime::Error { CpuError::BadRequest(msg.into()).into() };
        let fz = frozen.0.clone().downcast::<CpuFrozen>().map_err(|_| bad("not a frozen plan of the CPU backend"))?;
        if fz.device != self.index || !Arc::ptr_eq(&fz.table, &self.table) {
            return Err(bad("the frozen plan belongs to another device"));
        }
        if nodes.start > nodes.end || nodes.end > fz.nodes.len() || addrs.len() < fz.extent.len() {
            return Err(bad("frozen launch: node range or address table does not fit the plan"));
        }
        // Per-run addresses: each covers every operand patched from it (slots beyond
        // `extent` patch nothing).
        let slots: Vec<(u64, usize)> = addrs.iter().zip(&fz.extent).map(|(a, &e)| (a.0, e)).collect();
        let pins = self.table.pin(&slots).map_err(CpuError::from)?;
        // Outputs of nodes with patched operands must not overlap their other operands.
        let mut ranges = Vec::new();
        for n in &fz.nodes[nodes.clone()] {
            if n.patches.is_empty() {
                continue;
            }
            n.ranges_into(addrs, &mut ranges);
            if let Some(i) = overlapping_output(&ranges, n.args.inputs.len(), |_| false) {
                return Err(CpuError::BadRequest(format!("{}: output {i} overlaps another operand", n.kernel)).into());
            }
            self.table.check_writable(&ranges[n.args.inputs.len()..]).map_err(CpuError::from)?;
        }
        let faults: Vec<Option<Fault>> = if self.faults.armed() {
            fz.nodes[nodes.clone()].iter().map(|n| self.faults.take(n.kernel)).collect()
        } else {
            Vec::new()
        };
        let first_op = fz.nodes.get(nodes.start).filter(|_| !nodes.is_empty()).map(|n| n.args.op.name());
        match self.queue(stream)? {
            None => {
                let run = RunSpan { nodes, addrs, first_seq, stream, faults: &faults };
                let r = fz.run(run, &self.pool);
                drop(pins);
                r
            }
            Some(q) => {
                let Some(op) = first_op else { return Ok(()) };
                let addrs = addrs.to_vec();
                let pool = self.pool.clone();
                q.queue.submit_op(
                    op,
                    first_seq,
                    Box::new(move || {
                        let _pins = pins;
                        let run = RunSpan { nodes, addrs: &addrs, first_seq, stream, faults: &faults };
                        fz.run(run, &pool)
                    }),
                )?;
                Ok(())
            }
        }
    }

    /// Validates every launch, then runs them (default stream) or queues them as one job
    /// named by the first launch (user stream); each failure names its own launch.
    pub(crate) fn launch_batch_at(&self, launches: Vec<(KernelInfo, LaunchArgs)>, stream: StreamId) -> Result<()> {
        let mut jobs = Vec::with_capacity(launches.len());
        for (k, a) in launches {
            jobs.push(self.prepare_launch(&k, a, stream)?);
        }
        let Some((op, seq)) = jobs.first().map(|j| (j.args.op.name(), j.args.seq)) else { return Ok(()) };
        // One submission for the whole batch: the jobs run back to back and the first
        // failure is reported.
        let run = move || {
            let mut first = Ok(());
            for j in jobs {
                if let Err(e) = j.run()
                    && first.is_ok()
                {
                    first = Err(e);
                }
            }
            first
        };
        match self.queue(stream)? {
            None => run(),
            Some(q) => {
                q.queue.submit_op(op, seq, Box::new(run))?;
                Ok(())
            }
        }
    }

    /// This backend's function and description for `kernel`.
    fn kernel_fn(&self, kernel: &KernelInfo) -> Result<(kernels::KernelFn, &'static KernelInfo)> {
        match self.kernels.resolve(kernel) {
            Some((own, f)) => Ok((*f, own)),
            None => Err(CpuError::BadRequest(format!("kernel {} is not a CPU kernel", kernel.name)).into()),
        }
    }

    /// Where a launch runs: `(inline, threads)`. Small launches run on the submitting
    /// thread (stream worker or caller); larger ones enter the device pool, or the
    /// stream's one-thread pool when the budget is 1.
    fn placement(&self, op: &runtime::Op, budget: usize, out_bytes: u64) -> (bool, usize) {
        let threads = if budget == 0 { self.threads } else { budget.min(self.threads) };
        let matrix = matches!(
            op.kind(),
            runtime::OpKind::MatMul
                | runtime::OpKind::Gemm
                | runtime::OpKind::Linear
                | runtime::OpKind::LinearGelu
                | runtime::OpKind::Attention
        );
        let inline = self.threads == 1 || (out_bytes <= INLINE_MAX_BYTES && !matrix);
        (inline, if inline { 1 } else { threads })
    }
}
