//! aclnn execution in the emulator: the two-phase protocol with its real error codes
//! (phase 1 stores a validated executor, phase 2 queues it on a stream and moves the
//! stream's modelled clock by the kernel's roofline cost), and the computation through
//! the runtime's reference kernels.

use crate::descriptors::{Executor, Kernel, Src, TensorDesc};
use crate::error::{Fail, R, fail};
use crate::state::*;
use acl_sys::ACL_BF16;
use acl_sys::codes::*;
use runtime::reference::{In, Out};
use runtime::{DType, Op, TensorMeta};

/// Phase 1: validates operands against the op table and the SoC, stores an executor.
pub fn create(t: &mut Tables, mut ex: Executor) -> R<u64> {
    let soc = t.cfg.soc.clone();
    let dev = t.current()?;
    ex.device = dev;
    let mut metas = Vec::new();
    let all: Vec<&TensorDesc> = ex
        .inputs
        .iter()
        .filter_map(|s| if let Src::Tensor(_, d) = s { Some(d) } else { None })
        .chain(ex.outputs.iter().map(|(_, d)| d))
        .collect();
    for d in &all {
        if t.cfg.is_910() && d.dtype == ACL_BF16 {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{}: BF16 is not supported on {soc}", ex.phase2));
        }
        if d.addr % 32 != 0 {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("{}: tensor address {:#x} is not 32-byte aligned", ex.phase2, d.addr),
            );
        }
        if d.dims.iter().any(|&x| x < 0) || d.strides.iter().any(|&s| s < 0) || d.offset < 0 {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{}: negative dims, strides or offset", ex.phase2));
        }
        d.meta()?;
        let (s, e) = d.span();
        if e > s {
            match t.device_of_addr(s) {
                Some(ad) if ad as i32 == dev && t.mem[ad].find(s, e - s).is_some() => {}
                Some(ad) if ad as i32 != dev => {
                    return fail(
                        ACLNN_ERR_PARAM_INVALID,
                        format!("{}: tensor on device {ad} used on device {dev}", ex.phase2),
                    );
                }
                _ => {
                    return fail(
                        ACLNN_ERR_PARAM_INVALID,
                        format!("{}: tensor bytes {s:#x}..{e:#x} are not inside one live allocation", ex.phase2),
                    );
                }
            }
        }
    }
    for s in &ex.inputs {
        metas.push(match s {
            Src::Tensor(_, d) => d.meta()?,
            Src::Fill(dt, dims, _) => TensorMeta::new(*dt, dims.clone()),
        });
    }
    let inferred = ex.kernel.infer(&metas).map_err(|e| Fail(ACLNN_ERR_PARAM_INVALID, format!("{}: {e}", ex.phase2)))?;
    let outs: Vec<TensorMeta> = ex.outputs.iter().map(|(_, d)| d.meta()).collect::<R<_>>()?;
    if inferred != outs {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!(
                "{}: output must be {}, got {}",
                ex.phase2,
                runtime::kernel::signature(&inferred),
                runtime::kernel::signature(&outs)
            ),
        );
    }
    let h = emu().handle(TAG_EXEC);
    t.executors.insert(h, ex);
    Ok(h)
}

/// Phase 2: checks the protocol, then queues the computation on the stream.
pub fn launch(t: &mut Tables, name: &'static str, ws: u64, ws_size: u64, exec: u64, stream: u64) -> R<()> {
    if exec == 0 {
        return fail(ACLNN_ERR_INNER_NULLPTR, format!("{name}: executor is NULL"));
    }
    if t.consumed.contains(&exec) {
        return fail(
            ACLNN_ERR_INNER_NULLPTR,
            format!("{name}: executor {exec:#x} was already consumed by a launch and is not repeatable"),
        );
    }
    let Some(ex) = t.executors.get(&exec) else {
        return fail(
            ACLNN_ERR_INNER_NULLPTR,
            format!("{name}: unknown executor {exec:#x} (no prior GetWorkspaceSize)"),
        );
    };
    if ex.phase2 != name {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: executor was made by {}GetWorkspaceSize", ex.phase2));
    }
    if ws_size < ex.workspace {
        return fail(
            ACLNN_ERR_PARAM_INVALID,
            format!("{name}: workspace of {ws_size} bytes is smaller than the {} asked for", ex.workspace),
        );
    }
    if ex.workspace > 0 || ws != 0 {
        if ws == 0 {
            return fail(ACLNN_ERR_PARAM_NULLPTR, format!("{name}: workspace is NULL"));
        }
        if !ws.is_multiple_of(32) {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: workspace {ws:#x} is not 32-byte aligned"));
        }
        match t.check_range(ws, ws_size, "workspace") {
            Ok(d) if d as i32 == ex.device => {}
            _ => {
                return fail(
                    ACLNN_ERR_PARAM_INVALID,
                    format!("{name}: workspace {ws:#x}+{ws_size} is not device memory of device {}", ex.device),
                );
            }
        }
    }
    for (h, _) in ex
        .inputs
        .iter()
        .filter_map(|s| if let Src::Tensor(h, d) = s { Some((h, d)) } else { None })
        .chain(ex.outputs.iter().map(|(h, d)| (h, d)))
    {
        if !t.tensors.contains_key(h) {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("{name}: a tensor descriptor was destroyed before the launch"),
            );
        }
    }
    let (device, repeatable) = (ex.device, ex.repeatable);
    let s = t.stream(stream)?;
    if s.device != device {
        return fail(
            ACL_ERROR_RT_STREAM_CONTEXT,
            format!("{name}: stream of device {} used for device {device}", s.device),
        );
    }
    let ex = if repeatable {
        t.executors.get(&exec).cloned()
    } else {
        t.consumed.insert(exec);
        t.executors.remove(&exec)
    };
    let Some(ex) = ex else { return fail(ACLNN_ERR_INNER_NULLPTR, format!("{name}: executor vanished")) };
    let cost = modelled_cost(t, &ex);
    if let Some(c) = t.captures.get(&stream).and_then(|ri| t.capturing.get_mut(ri)) {
        // Recorded, not run: the replays run it (`aclmdlRIExecuteAsync`).
        let lane = c.lanes.iter().position(|&l| l == stream).unwrap_or(0);
        c.tasks.push(Task::Kernel { lane, launch: Box::new(Captured { exec: ex, ws, ws_size, cost }) });
        return Ok(());
    }
    s.submit(Box::new(move || run(ex, ws, ws_size)))?;
    t.timeline.run_on(&s.clock, cost);
    Ok(())
}

/// The roofline cost of one launch of `ex` on the configured SoC.
fn modelled_cost(t: &Tables, ex: &Executor) -> crate::model::Cost {
    let ins: Vec<TensorMeta> = ex
        .inputs
        .iter()
        .filter_map(|s| match s {
            Src::Tensor(_, d) => d.meta().ok(),
            Src::Fill(dt, dims, _) => Some(TensorMeta::new(*dt, dims.clone())),
        })
        .collect();
    let outs: Vec<TensorMeta> = ex.outputs.iter().filter_map(|(_, d)| d.meta().ok()).collect();
    match &ex.kernel {
        Kernel::Op(op) => t.soc.kernel(op, &ins, &outs, ex.fp16_compute),
        // Cube work with the FLOPs and bytes of a fused Attention producing the attention
        // result (the softmax statistics add 64 bytes a row).
        Kernel::FlashAttention { causal, .. } => t.soc.kernel(
            &Op::Attention { scale: None, layout: Default::default(), causal: *causal },
            &ins,
            outs.last().map(std::slice::from_ref).unwrap_or(&[]),
            false,
        ),
        // Vector work with the FLOPs and bytes of the runtime's RmsNorm / AddRmsNorm (the
        // rstd output adds 4 bytes a row).
        Kernel::RmsNorm { eps } => {
            let op =
                if ins.len() == 3 { Op::AddRmsNorm { eps: *eps as f32 } } else { Op::RmsNorm { eps: *eps as f32 } };
            t.soc.kernel(&op, &ins, &outs, false)
        }
        // Row scatters into a cache in place: the rows written and their indices (read once,
        // written once), never the whole cache, as the runtime's KvCacheWrite is costed.
        Kernel::ScatterNd => t.soc.kernel(&Op::KvCacheWrite, &[&ins[..1], &ins[..1], &ins[1..]].concat(), &[], false),
        Kernel::PaKvCache => {
            let order: Vec<TensorMeta> = [1, 4, 0, 3, 2].iter().filter_map(|&i| ins.get(i).cloned()).collect();
            t.soc.kernel(&Op::KvCacheWrite, &order, &[], false)
        }
        Kernel::IncreFlash(f) => crate::ifa_kernel::cost(&t.soc, f, &ins, &outs),
        // Reductions, comparisons and fills: memory-bound Vector work, costed as a copy of
        // their operands.
        _ => t.soc.kernel(&Op::Copy, &ins, &outs, false),
    }
}

fn words(n: usize) -> Vec<u64> {
    vec![0u64; n.div_ceil(8)]
}

fn as_bytes(v: &[u64], n: usize) -> &[u8] {
    let b: &[u8] = raw::bytemuck_cast(v);
    &b[..n]
}

mod raw {
    pub fn bytemuck_cast(v: &[u64]) -> &[u8] {
        // SAFETY: u64 has no padding and any byte is a valid u8; the length is scaled.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 8) }
    }
    pub fn bytemuck_cast_mut(v: &mut [u64]) -> &mut [u8] {
        // SAFETY: as above, with exclusive access to `v`.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 8) }
    }
}

fn gather(t: &Tables, d: &TensorDesc) -> R<Vec<u64>> {
    let es = d.es();
    let n = d.numel();
    let mut buf = words(n * es);
    if n == 0 {
        return Ok(buf);
    }
    let (s, e) = d.span();
    let dev =
        t.device_of_addr(s).ok_or_else(|| Fail(ACL_ERROR_RT_AICORE_EXCEPTION, "tensor is not device memory".into()))?;
    let src = t.mem[dev]
        .bytes(s, e - s)
        .ok_or_else(|| Fail(ACL_ERROR_RT_AICORE_EXCEPTION, format!("kernel read {s:#x}..{e:#x}: memory was freed")))?;
    let out = raw::bytemuck_cast_mut(&mut buf);
    if d.is_contiguous() {
        out[..n * es].copy_from_slice(&src[..n * es]);
    } else {
        let base = d.offset as u64;
        for (i, o) in d.offsets().into_iter().enumerate() {
            let o = ((o - base) as usize) * es;
            out[i * es..(i + 1) * es].copy_from_slice(&src[o..o + es]);
        }
    }
    Ok(buf)
}

fn scatter(t: &mut Tables, d: &TensorDesc, data: &[u8]) -> R<()> {
    let es = d.es();
    let n = d.numel();
    if n == 0 {
        return Ok(());
    }
    let (s, e) = d.span();
    let contiguous = d.is_contiguous();
    let offs = if contiguous { Vec::new() } else { d.offsets() };
    let dev =
        t.device_of_addr(s).ok_or_else(|| Fail(ACL_ERROR_RT_AICORE_EXCEPTION, "output is not device memory".into()))?;
    let dst = t.mem[dev]
        .bytes_mut(s, e - s)
        .ok_or_else(|| Fail(ACL_ERROR_RT_AICORE_EXCEPTION, format!("kernel write {s:#x}..{e:#x}: memory was freed")))?;
    if contiguous {
        dst[..n * es].copy_from_slice(&data[..n * es]);
    } else {
        let base = d.offset as u64;
        for (i, o) in offs.into_iter().enumerate() {
            let o = ((o - base) as usize) * es;
            dst[o..o + es].copy_from_slice(&data[i * es..(i + 1) * es]);
        }
    }
    Ok(())
}

fn fill(dt: DType, n: usize, v: f64) -> Vec<u64> {
    let mut buf = words(n * dt.size());
    let b = raw::bytemuck_cast_mut(&mut buf);
    for i in 0..n {
        let es = dt.size();
        let dst = &mut b[i * es..(i + 1) * es];
        match dt {
            DType::F32 => dst.copy_from_slice(&(v as f32).to_le_bytes()),
            DType::F16 => dst.copy_from_slice(&::half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => dst.copy_from_slice(&::half::bf16::from_f64(v).to_le_bytes()),
            DType::I32 => dst.copy_from_slice(&(v as i32).to_le_bytes()),
            DType::I64 => dst.copy_from_slice(&(v as i64).to_le_bytes()),
            DType::U8 => dst[0] = v as u8,
        }
    }
    buf
}

/// Executes an executor on the stream's worker thread.
pub(crate) fn run(ex: Executor, ws: u64, ws_size: u64) -> R<()> {
    let e = emu();
    // Read the operands (and scribble over the workspace: a caller that aliases it
    // with live data sees garbage, as on hardware).
    let mut bufs: Vec<(DType, Vec<usize>, Vec<u64>)> = Vec::new();
    {
        let mut t = lock(&e.t);
        if !t.cfg.compute {
            // Model only (`ACL_EMU_COMPUTE=0`): the launch was checked and costed already.
            return Ok(());
        }
        if ws != 0
            && ws_size > 0
            && let Some(d) = t.device_of_addr(ws)
            && let Some(w) = t.mem[d].bytes_mut(ws, ws_size)
        {
            w.fill(0xA5);
        }
        for s in &ex.inputs {
            bufs.push(match s {
                Src::Tensor(_, d) => (d.meta()?.dtype, d.udims(), gather(&t, d)?),
                Src::Fill(dt, dims, v) => (*dt, dims.clone(), fill(*dt, dims.iter().product(), *v)),
            });
        }
    }
    if ex.fp16_compute {
        for (dt, dims, b) in &mut bufs {
            if *dt == DType::F32 {
                let n: usize = dims.iter().product();
                let by = raw::bytemuck_cast_mut(b);
                for i in 0..n {
                    let v = f32::from_le_bytes(by[i * 4..i * 4 + 4].try_into().unwrap_or([0; 4]));
                    let r = ::half::f16::from_f32(v).to_f32();
                    by[i * 4..i * 4 + 4].copy_from_slice(&r.to_le_bytes());
                }
            }
        }
    }
    if let Some((i, n)) = ex.index_check {
        let (dt, dims, b) = &bufs[i];
        let cnt: usize = dims.iter().product();
        let by = raw::bytemuck_cast(b);
        for k in 0..cnt {
            let v = match dt {
                DType::I32 => i32::from_le_bytes(by[k * 4..k * 4 + 4].try_into().unwrap_or([0; 4])) as i64,
                _ => i64::from_le_bytes(by[k * 8..k * 8 + 8].try_into().unwrap_or([0; 8])),
            };
            if v < 0 || v >= n as i64 {
                return fail(
                    ACL_ERROR_RT_AICORE_EXCEPTION,
                    format!("{}: index {v} is out of range [0, {n}) (AI Core exception)", ex.phase2),
                );
            }
        }
    }
    let strides: Vec<Vec<usize>> =
        bufs.iter().map(|(_, d, _)| runtime::Shape::new(d.clone()).contiguous_strides()).collect();
    let ins: Vec<In> = bufs
        .iter()
        .zip(&strides)
        .map(|((dt, dims, b), st)| In {
            dtype: *dt,
            dims,
            strides: st,
            bytes: as_bytes(b, dims.iter().product::<usize>() * dt.size()),
        })
        .collect();
    let out_meta: Vec<(DType, Vec<usize>)> =
        ex.outputs.iter().map(|(_, d)| Ok((d.meta()?.dtype, d.udims()))).collect::<R<_>>()?;
    let mut out_bufs: Vec<Vec<u64>> =
        out_meta.iter().map(|(dt, dims)| words(dims.iter().product::<usize>() * dt.size())).collect();
    {
        let mut outs: Vec<Out> = out_bufs
            .iter_mut()
            .zip(&out_meta)
            .map(|(b, (dt, dims))| {
                let n = dims.iter().product::<usize>() * dt.size();
                Out { dtype: *dt, dims, bytes: &mut raw::bytemuck_cast_mut(b)[..n] }
            })
            .collect();
        ex.kernel
            .run(&ins, &mut outs)
            .map_err(|m| Fail(ACL_ERROR_RT_AICORE_EXCEPTION, format!("{}: {m}", ex.phase2)))?;
    }
    let mut t = lock(&e.t);
    for ((_, d), b) in ex.outputs.iter().zip(&out_bufs) {
        scatter(&mut t, d, raw::bytemuck_cast(b))?;
    }
    Ok(())
}
