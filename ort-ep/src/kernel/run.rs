//! `Compute`: a fused node's run over ORT's kernel context, in place over ORT's buffers on
//! the CPU backend and through npurt's tensors elsewhere.

use core::ffi::c_void;
use std::ptr;

use runtime::backend::allocations::overlaps;
use runtime::graph::CompiledGraph;
use runtime::{DType, Tensor, TensorMeta};

use super::{Compiled, Kernel, Out, Plan, npurt_err, tensor_bytes};
use crate::abi::{OrtKernelContext, OrtValue};
use crate::ops::{self, fold::HostValue};
use crate::ort::EpError;

impl Kernel {
    /// Reads the inputs, picks the compiled graph for their shapes and runs it: in place
    /// over ORT's buffers where npurt's device memory is host memory
    /// ([`run_in_place`](Self::run_in_place)), through npurt's tensors elsewhere
    /// ([`run_staged`](Self::run_staged)).
    ///
    /// # Safety
    /// `ctx` is ORT's kernel context of the current `Compute`.
    pub(super) unsafe fn run(&self, ctx: *mut OrtKernelContext) -> Result<(), EpError> {
        if let Plan::Nothing = self.plan {
            return Ok(());
        }
        let ort = &self.ort;
        let mut fed = Vec::with_capacity(self.inputs.len());
        for (i, name) in self.inputs.iter().enumerate() {
            let mut v: *const OrtValue = ptr::null();
            // SAFETY: ctx is valid; index i < the fused node's input count.
            ort.check("KernelContext_GetInput", unsafe { (ort.api.KernelContext_GetInput)(ctx, i, &mut v) })?;
            if v.is_null() {
                return Err(EpError::Graph(format!("input {name:?} is missing")));
            }
            // SAFETY: v is ORT's input tensor, valid for this call.
            fed.push(unsafe { tensor_bytes(ort, v) }?);
        }
        let metas: Vec<TensorMeta> = fed.iter().map(|(m, _)| m.clone()).collect();
        let graph = match &self.plan {
            Plan::Static { graph, inputs } => {
                if let Some(((name, got), want)) = self.inputs.iter().zip(&metas).zip(inputs).find(|((_, g), w)| g != w)
                {
                    return Err(EpError::Graph(format!("input {name:?} is {got}, compiled for {want}")));
                }
                graph.clone()
            }
            Plan::Shapes(shapes) => shapes.graph_for(&self.rt, &metas)?,
            Plan::Nothing => return Ok(()),
        };
        let host = self.rt.inner().device_info(0).is_ok_and(|d| d.host_shared);
        match &graph.graph {
            // SAFETY: ctx as this function's caller promises.
            Some(g) if host => unsafe { self.run_in_place(ctx, &graph, g, &fed) },
            // SAFETY: as above.
            _ => unsafe { self.run_staged(ctx, &graph, &fed) },
        }
    }

    /// The inputs fed to the graph, as ORT holds them.
    fn feeds<'a>(&self, graph: &Compiled, fed: &[(TensorMeta, &'a [u8])]) -> Result<Vec<&'a [u8]>, EpError> {
        graph
            .feeds
            .iter()
            .map(|&i| fed.get(i).map(|(_, b)| *b).ok_or_else(|| EpError::Graph(format!("fused input {i} is missing"))))
            .collect()
    }

    /// ORT's output `j`, allocated with `dims`, as `nbytes` bytes (empty when 0).
    ///
    /// # Safety
    /// `ctx` is ORT's kernel context of the current `Compute`, which the bytes must not
    /// outlive; `nbytes` is what a tensor of `dims` and the output's element type holds.
    unsafe fn output(
        &self,
        ctx: *mut OrtKernelContext,
        j: usize,
        dims: &[i64],
        nbytes: usize,
    ) -> Result<*mut u8, EpError> {
        let ort = &self.ort;
        let mut ov: *mut OrtValue = ptr::null_mut();
        // SAFETY: ctx is valid; ORT allocates output j with these dims.
        ort.check("KernelContext_GetOutput", unsafe {
            (ort.api.KernelContext_GetOutput)(ctx, j, dims.as_ptr(), dims.len(), &mut ov)
        })?;
        if nbytes == 0 {
            return Ok(ptr::null_mut());
        }
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: ov is the output ORT just allocated.
        ort.check("GetTensorMutableData", unsafe { (ort.api.GetTensorMutableData)(ov, &mut data) })?;
        if data.is_null() {
            return Err(EpError::Null("output data"));
        }
        Ok(data.cast())
    }

    /// Runs `g` in place over ORT's buffers: the outputs are allocated first, with the dims
    /// the compiled graph knows, and [`CompiledGraph::run_host`] lends them and the inputs
    /// to npurt's device for the run (no copy where they are aligned as ORT's allocator
    /// aligns them; see `run_host` for what is copied otherwise).
    ///
    /// # Safety
    /// `ctx` is ORT's kernel context of the current `Compute`; `fed` its inputs.
    unsafe fn run_in_place(
        &self,
        ctx: *mut OrtKernelContext,
        graph: &Compiled,
        g: &CompiledGraph,
        fed: &[(TensorMeta, &[u8])],
    ) -> Result<(), EpError> {
        let ins = self.feeds(graph, fed)?;
        let cg = g.graph();
        let mut outs: Vec<(*mut u8, usize)> = Vec::new();
        for (j, (out, name)) in graph.outputs.iter().zip(&self.outputs).enumerate() {
            let (dims, nbytes): (Vec<i64>, usize) = match out {
                Out::Graph(k) => {
                    let v = cg.outputs.get(*k).ok_or_else(|| EpError::Graph(format!("output {name:?} not made")))?;
                    let m = cg.meta(*v);
                    let n = m
                        .shape
                        .checked_bytes("output", m.dtype)
                        .map_err(|e| npurt_err(format!("output {name:?}"), e))?;
                    (m.shape.dims().iter().map(|&d| d as i64).collect(), n)
                }
                Out::Host(h) => {
                    let size = ops::operand_dtype(h.elem).map_or(8, |d| d.size());
                    (h.dims.iter().map(|&d| d as i64).collect(), h.data.len() * size)
                }
            };
            // SAFETY: ctx is valid for this call.
            let data = unsafe { self.output(ctx, j, &dims, nbytes) }?;
            match out {
                Out::Graph(_) => outs.push((data, nbytes)),
                Out::Host(h) if nbytes > 0 => {
                    // SAFETY: ORT's output holds nbytes bytes (these dims, the element type
                    // ORT declared), apart from every other buffer of this call.
                    write_host(h, unsafe { std::slice::from_raw_parts_mut(data, nbytes) })?;
                }
                Out::Host(_) => {}
            }
        }
        // ORT allocates each output afresh (the fused node declares no in-place outputs):
        // no output shares a byte with an input or another output. Checked, since the
        // slices below would otherwise alias.
        let spans: Vec<(u64, usize)> =
            outs.iter().map(|&(p, n)| (p as u64, n)).chain(ins.iter().map(|b| (b.as_ptr() as u64, b.len()))).collect();
        for (a, &out) in spans.iter().enumerate().take(outs.len()) {
            if spans.iter().enumerate().any(|(b, &other)| b != a && overlaps(out, other)) {
                return Err(EpError::Graph(format!("ORT gave output {a} bytes of another operand")));
            }
        }
        let mut slices: Vec<&mut [u8]> = outs
            .iter()
            .map(|&(p, n)| {
                if n == 0 {
                    Default::default()
                } else {
                    // SAFETY: ORT's output of n bytes, valid during this call and apart
                    // from every other operand (checked above).
                    unsafe { std::slice::from_raw_parts_mut(p, n) }
                }
            })
            .collect();
        let r = g.run_host(&ins, &mut slices).map_err(|e| npurt_err("run".into(), e))?;
        log::trace!(
            "{}: {} inputs and {} outputs in place, {} bytes copied",
            self.name,
            r.lent_inputs,
            r.lent_outputs,
            r.copied_bytes
        );
        Ok(())
    }

    /// Copies the inputs into npurt's tensors, runs, copies the outputs out.
    ///
    /// # Safety
    /// `ctx` is ORT's kernel context of the current `Compute`; `fed` its inputs.
    unsafe fn run_staged(
        &self,
        ctx: *mut OrtKernelContext,
        graph: &Compiled,
        fed: &[(TensorMeta, &[u8])],
    ) -> Result<(), EpError> {
        let mut tensors = Vec::with_capacity(graph.feeds.len());
        for (&i, bytes) in graph.feeds.iter().zip(self.feeds(graph, fed)?) {
            let (name, meta) = (&self.inputs[i], &fed[i].0);
            let t = self
                .rt
                .empty(meta.dtype, meta.shape.clone(), 0)
                .map_err(|e| npurt_err(format!("input {name:?}"), e))?;
            // The one copy in: straight from ORT's buffer into npurt's tensor.
            t.copy_from_bytes(bytes).map_err(|e| npurt_err(format!("input {name:?}"), e))?;
            tensors.push(t);
        }
        let refs: Vec<&Tensor> = tensors.iter().collect();
        let outs = match &graph.graph {
            Some(g) => g.run(&refs).map_err(|e| npurt_err("run".into(), e))?,
            None => Vec::new(),
        };
        for (j, (out, name)) in graph.outputs.iter().zip(&self.outputs).enumerate() {
            let (dims, nbytes): (Vec<i64>, usize) = match out {
                Out::Graph(k) => {
                    let t = outs.get(*k).ok_or_else(|| EpError::Graph(format!("output {name:?} not made")))?;
                    (t.dims().iter().map(|&d| d as i64).collect(), t.nbytes())
                }
                Out::Host(h) => {
                    let size = ops::operand_dtype(h.elem).map_or(8, |d| d.size());
                    (h.dims.iter().map(|&d| d as i64).collect(), h.data.len() * size)
                }
            };
            // SAFETY: ctx is valid for this call.
            let data = unsafe { self.output(ctx, j, &dims, nbytes) }?;
            if nbytes == 0 {
                continue;
            }
            // SAFETY: ORT's output holds exactly nbytes bytes: these dims, and the dtype ORT
            // declared, checked equal to npurt's when the group was walked; distinct from npurt's.
            let dst = unsafe { std::slice::from_raw_parts_mut(data, nbytes) };
            match out {
                Out::Graph(k) => write_output(&outs[*k], dst).map_err(|e| npurt_err(format!("output {name:?}"), e))?,
                Out::Host(h) => write_host(h, dst)?,
            }
        }
        Ok(())
    }
}

/// Writes a folded value's elements as its element type's bytes.
fn write_host(h: &HostValue, dst: &mut [u8]) -> Result<(), EpError> {
    match ops::operand_dtype(h.elem) {
        Some(DType::I64) => dst.copy_from_slice(bytemuck::cast_slice(&h.data)),
        Some(DType::I32) => {
            let v: Vec<i32> = h.data.iter().map(|&x| x as i32).collect();
            dst.copy_from_slice(bytemuck::cast_slice(&v));
        }
        Some(DType::U8) => dst.iter_mut().zip(&h.data).for_each(|(d, &x)| *d = x as u8),
        _ => return Err(EpError::Graph(format!("a folded output of element type {}", h.elem))),
    }
    Ok(())
}

/// Copies a tensor's elements into `dst` (its bytes, in logical order): straight from npurt's
/// memory when the device shares the host's (the CPU backend: one copy), else through a host
/// array.
fn write_output(t: &Tensor, dst: &mut [u8]) -> runtime::Result<()> {
    fn of<T: runtime::Element>(t: &Tensor, dst: &mut [u8]) -> runtime::Result<()> {
        let out: Option<&mut [T]> = bytemuck::try_cast_slice_mut(dst).ok();
        match out {
            Some(out) if t.supports_zero_copy() => t.with_host_view::<T, _>(|v| match v.as_slice() {
                Some(s) => out.copy_from_slice(s),
                None => out.iter_mut().zip(v.iter()).for_each(|(o, x)| *o = *x),
            }),
            _ => {
                let (v, _) = t.to_ndarray::<T>()?.into_raw_vec_and_offset();
                dst.copy_from_slice(bytemuck::cast_slice(&v));
                Ok(())
            }
        }
    }
    match t.dtype() {
        DType::F32 => of::<f32>(t, dst),
        DType::F16 => of::<runtime::f16>(t, dst),
        DType::BF16 => of::<runtime::bf16>(t, dst),
        DType::I32 => of::<i32>(t, dst),
        DType::I64 => of::<i64>(t, dst),
        DType::U8 => of::<u8>(t, dst),
    }
}
