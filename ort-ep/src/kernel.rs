//! `Compile` and `Compute`: each fused node ORT hands over becomes one npurt compiled graph
//! (the graph builder of `runtime::graph`, then [`CompiledGraph::compile_owned`]: fusion,
//! kernel selection, the memory plan), and runs through ORT's kernel context.
//!
//! The constant initializers of a fused group (its weights) are read once at `Compile` and
//! held by npurt only (`drop_constant_initializers` was set when the group was claimed).
//! A group whose inputs have symbolic dims is compiled at its first run with each new set of
//! input shapes (the symbols bound from the tensors ORT feeds), with the weights' device
//! copies shared by all of them (`compile_shared`), and the compiled graphs cached; its weights
//! wait for those compiles in a file, not in memory ([`Stash`]).
//! Where npurt's device memory is host memory (the CPU backend), `Compute` runs the graph
//! over ORT's own input and output buffers ([`CompiledGraph::run_host`]): no copy either
//! way. Elsewhere (Ascend) the inputs are copied into npurt's tensors and the outputs out.

use core::ffi::c_void;
use std::collections::HashMap;
use std::ptr;
use std::sync::{Arc, Mutex};

use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, SharedConstants, ValueId};
use runtime::{DType, Op, Shape, TensorMeta};

use crate::abi::{
    EP_API_VERSION, OrtGraph, OrtKernelContext, OrtNode, OrtNodeComputeContext, OrtNodeComputeInfo, OrtValue, StatusPtr,
};
use crate::graph::{self, NodeInfo, ValueMeta};
use crate::ops::fold::HostValue;
use crate::ops::walk::{Env, Step, walk};
use crate::ops::{self, Mapped};
use crate::ort::{EpError, Ort};
use crate::partition;
use crate::stash::Stash;

/// One compiled fused node. `base` comes first so that the `OrtNodeComputeInfo*` ORT passes
/// back points at the whole struct. `Send + Sync`: immutable after `Compile` but for the
/// cache of compiled shapes (behind a mutex), and a [`CompiledGraph`] runs from many threads
/// at once (one arena each).
#[repr(C)]
pub struct Kernel {
    base: OrtNodeComputeInfo,
    ort: Ort,
    /// The fused node's name, as ORT made it (`NpurtExecutionProvider_..._0`).
    name: String,
    /// The original nodes, as messages name them.
    nodes: String,
    rt: npurt::Runtime,
    /// The fused node's input names, in the kernel context's order.
    inputs: Vec<String>,
    /// The fused node's outputs' ONNX names.
    outputs: Vec<String>,
    plan: Plan,
}

// SAFETY: the ORT handles inside the node records of a `Plan::Shapes` are nulled at Compile
// and never read again; everything else is Send + Sync (the cache is behind a Mutex).
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

/// How a fused node gets its compiled graph.
enum Plan {
    /// Every input shape fixed: compiled once, at `Compile`.
    Static { graph: Arc<Compiled>, inputs: Vec<TensorMeta> },
    /// Symbolic input dims: compiled per set of input shapes, at the first run with it.
    Shapes(Box<Shapes>),
    /// No output of the group is read (dead nodes ORT kept, e.g. with its graph optimisations
    /// off): nothing to compute; an npurt graph needs an output.
    Nothing,
}

/// Most input shapes whose compiled graphs a fused node keeps; the cache starts afresh past it.
const MAX_SHAPES: usize = 32;

/// A group to compile per input shape: its ONNX nodes (ORT's handles nulled), weights and
/// the compiled graphs so far.
struct Shapes {
    fused: NodeInfo,
    nodes: Vec<NodeInfo>,
    weights: Stash,
    options: CompileOptions,
    shared: SharedConstants,
    cache: Mutex<HashMap<Vec<TensorMeta>, Arc<Compiled>>>,
}

/// A fused group compiled for one set of input shapes. `Send + Sync`, as [`CompiledGraph`].
pub struct Compiled {
    /// The npurt graph; `None` when every output is folded on the host.
    graph: Option<CompiledGraph>,
    /// The fused inputs fed to the graph, as indices into the kernel context's inputs.
    feeds: Vec<usize>,
    /// Per fused output, where it comes from.
    outputs: Vec<Out>,
}

/// Where a fused node's output comes from. `Send + Sync`.
#[derive(Debug, Clone)]
pub enum Out {
    /// Output `k` of the npurt graph.
    Graph(usize),
    /// A value folded on the host (a shape a node left to ORT reads).
    Host(HostValue),
}

impl Compiled {
    fn new(
        rt: &npurt::Runtime,
        built: Built,
        compile: impl FnOnce(&runtime::Runtime, Graph) -> runtime::Result<CompiledGraph>,
    ) -> runtime::Result<Compiled> {
        let graph = if built.graph.outputs.is_empty() { None } else { Some(compile(rt.inner(), built.graph)?) };
        Ok(Compiled { graph, feeds: built.inputs.iter().map(|(i, _, _)| *i).collect(), outputs: built.outputs })
    }
}

impl Shapes {
    /// Group `nodes` fused as `fused`, its weights in `weights`, nothing compiled yet.
    fn new(fused: &NodeInfo, nodes: &[NodeInfo], weights: Stash, options: CompileOptions) -> Shapes {
        Shapes {
            fused: detached(fused),
            nodes: nodes.iter().map(detached).collect(),
            weights,
            options,
            shared: SharedConstants::new(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The graph compiled for `metas` (the tensors ORT feeds), compiled now if new.
    fn graph_for(&self, rt: &npurt::Runtime, metas: &[TensorMeta]) -> Result<Arc<Compiled>, EpError> {
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(g) = cache.get(metas) {
            return Ok(g.clone());
        }
        let mut b = ops::Bindings::new();
        for (v, m) in self.fused.inputs.iter().zip(metas) {
            let Some(v) = v else { return Err(EpError::Graph("a fused input is missing".into())) };
            ops::bind(v, m, &mut b).map_err(|e| EpError::Graph(format!("input {e}")))?;
        }
        // Each weight a mapping of its own that only the graph holds: npurt frees it once
        // its device copy is made or found in the store.
        let mut weights = |v: &ValueMeta| {
            self.weights
                .get(&v.name)
                .unwrap_or_else(|| Err(EpError::Graph(format!("weight {:?} was not kept", v.name))))
        };
        let built = build_graph(&self.fused, &self.nodes, metas, b, &mut weights)?;
        let shapes: Vec<String> = metas.iter().map(|m| m.to_string()).collect();
        let g =
            Compiled::new(rt, built, |rt, g| CompiledGraph::compile_shared(rt, g, self.options.clone(), &self.shared))
                .map_err(|e| npurt_err(format!("compile for inputs [{}]", shapes.join(", ")), e))?;
        if cache.len() >= MAX_SHAPES {
            cache.clear();
        }
        let g = Arc::new(g);
        cache.insert(metas.to_vec(), g.clone());
        Ok(g)
    }
}

/// `n` without ORT's handles (valid only during the call that listed it).
fn detached(n: &NodeInfo) -> NodeInfo {
    let strip = |vs: &[Option<ValueMeta>]| -> Vec<Option<ValueMeta>> {
        vs.iter().map(|v| v.as_ref().map(|v| ValueMeta { handle: ptr::null(), ..v.clone() })).collect()
    };
    NodeInfo { node: ptr::null(), inputs: strip(&n.inputs), outputs: strip(&n.outputs), ..n.clone() }
}

impl Kernel {
    pub fn into_raw(self: Box<Self>) -> *mut OrtNodeComputeInfo {
        Box::into_raw(self).cast()
    }

    /// # Safety
    /// `p` came from [`Kernel::into_raw`] and is not used afterwards.
    pub unsafe fn from_raw(p: *mut OrtNodeComputeInfo) -> Box<Kernel> {
        // SAFETY: per the contract; `base` is the first field of the repr(C) Kernel.
        unsafe { Box::from_raw(p.cast::<Kernel>()) }
    }
}

/// Compiles one fused group: `graph` is ORT's view of its nodes, `fused` the node that
/// replaces them (whose inputs and outputs, in order, are the kernel context's).
///
/// # Safety
/// `graph` and `fused` are the pointers ORT passed to the current `Compile`.
pub unsafe fn compile(
    ort: Ort,
    rt: &npurt::Runtime,
    graph: *const OrtGraph,
    fused: *const OrtNode,
) -> Result<Box<Kernel>, EpError> {
    if graph.is_null() || fused.is_null() {
        return Err(EpError::Null("graph"));
    }
    // SAFETY: ORT's pointers, valid during this call.
    let (nodes, fused) = unsafe { (graph::nodes(&ort, graph)?, graph::node_info(&ort, fused)?) };
    // Precision and graph capture as the EP options set them in the runtime's configuration
    // (crate::devices::runtime_config: f32 unless asked otherwise); device 0 is the one selected.
    let options = CompileOptions::from_config(rt.config(), 0);
    let inputs: Vec<String> = fused.inputs.iter().flatten().map(|v| v.name.clone()).collect();
    let outputs: Vec<String> = fused.outputs.iter().flatten().map(|v| v.name.clone()).collect();
    let labels: Vec<String> = nodes.iter().map(NodeInfo::label).collect();
    let labels = labels.join(", ");
    let plan = if outputs.is_empty() {
        Plan::Nothing
    } else if fused.inputs.iter().flatten().all(ValueMeta::is_static) {
        let metas = fused.inputs.iter().flatten().map(static_meta).collect::<Result<Vec<_>, _>>();
        let metas = metas.map_err(|d| EpError::Graph(format!("fused node {:?}: {}", fused.name, d.0)))?;
        // SAFETY: the operands' handles are valid during this call.
        let built =
            build_graph(&fused, &nodes, &metas, ops::Bindings::new(), &mut |v| unsafe { initializer(&ort, v) })?;
        let compiled = Compiled::new(rt, built, |rt, g| CompiledGraph::compile_owned(rt, g, options))
            .map_err(|e| npurt_err(format!("fused node {:?} of [{labels}]: compile", fused.name), e))?;
        Plan::Static { graph: Arc::new(compiled), inputs: metas }
    } else {
        let mut weights = Stash::new();
        for v in
            nodes.iter().flat_map(|n| n.inputs.iter().flatten()).filter(|v| v.constant && !inputs.contains(&v.name))
        {
            // SAFETY: the operand's handle is valid during this call.
            unsafe { stash_initializer(&ort, v, &mut weights) }?;
        }
        Plan::Shapes(Box::new(Shapes::new(&fused, &nodes, weights, options)))
    };
    Ok(Box::new(Kernel {
        base: OrtNodeComputeInfo {
            ort_version_supported: EP_API_VERSION,
            CreateState: Some(create_state),
            Compute: Some(compute),
            ReleaseState: Some(release_state),
        },
        ort,
        name: fused.name.clone(),
        nodes: labels,
        rt: rt.clone(),
        inputs,
        outputs,
        plan,
    }))
}

/// The npurt graph of one fused group, and what `Compute` needs to feed and read it.
#[derive(Debug)]
pub struct Built {
    pub graph: Graph,
    /// The fused inputs the graph reads: index in the kernel context, ONNX name, meta (an
    /// input only a `Shape` reads is not fed).
    pub inputs: Vec<(usize, String, TensorMeta)>,
    /// Per fused output, where it comes from.
    pub outputs: Vec<Out>,
    /// The group's nodes, as messages name them.
    pub labels: String,
}

/// Builds the npurt graph of a fused group for inputs of `metas` (the fused node's inputs, in
/// order; `bindings` their symbols' values): the group is walked ([`walk`]) so that each
/// node either folds on the host or maps to one npurt op; the fused inputs a mapped node
/// reads become graph inputs, each constant initializer a node reads a constant
/// (`initializer` reads its data), each folded value a mapped node reads a constant, and the
/// fused node's outputs the graph's outputs or folded values. Errors name the fused node, the
/// group, and the node, op and operands refused.
pub fn build_graph(
    fused: &NodeInfo,
    nodes: &[NodeInfo],
    metas: &[TensorMeta],
    bindings: ops::Bindings,
    initializer: &mut dyn FnMut(&ValueMeta) -> Result<HostTensor, EpError>,
) -> Result<Built, EpError> {
    let labels: Vec<String> = nodes.iter().map(NodeInfo::label).collect();
    let labels = labels.join(", ");
    let context = |what: String| format!("fused node {:?} of [{labels}]: {what}", fused.name);
    let mut env = Env::bound(bindings);
    let mut fed: Vec<(usize, &ValueMeta, &TensorMeta)> = Vec::new();
    for (i, v) in fused.inputs.iter().enumerate() {
        let Some(v) = v else { return Err(EpError::Graph(context("a fused input is missing".into()))) };
        let Some(m) = metas.get(i) else { return Err(EpError::Graph(context(format!("no meta for input {i}")))) };
        let dims = Some(m.shape.dims().iter().map(|&d| d as i64).collect());
        env.metas.insert(v.name.clone(), ValueMeta { dims, symbols: Vec::new(), handle: ptr::null(), ..v.clone() });
        fed.push((i, v, m));
    }
    let order: Vec<usize> = {
        let preds = crate::graph::predecessors(nodes);
        partition::topological(&preds)
            .ok_or_else(|| EpError::Graph(context("the group's nodes form a cycle".into())))?
    };
    let steps = walk(nodes, &order, &mut env, &|_| Ok(()));
    let mut g = Graph::new();
    let mut ids: HashMap<String, ValueId> = HashMap::new();
    let read: std::collections::HashSet<&str> = steps
        .iter()
        .filter_map(|s| match s {
            Ok(Step::Mapped(n, m)) => Some(m.operand_names(n)),
            _ => None,
        })
        .flatten()
        .collect();
    let mut inputs = Vec::new();
    for (i, v, m) in fed {
        if !read.contains(v.name.as_str()) {
            continue;
        }
        let id = g.try_input(&v.name, m.dtype, m.shape.clone()).map_err(|e| npurt_err(context(String::new()), e))?;
        ids.insert(v.name.clone(), id);
        inputs.push((i, v.name.clone(), m.clone()));
    }
    for &i in &order {
        let node = match &steps[i] {
            Ok(Step::Folded) => continue,
            Ok(Step::Mapped(node, mapped)) => add_node(&mut g, &mut ids, node, mapped, &env, initializer),
            Err(d) => Err(EpError::Graph(format!("node {} is not npurt's: {}", nodes[i].label(), d.0))),
        };
        node.map_err(|e| match e {
            EpError::Graph(m) => EpError::Graph(context(m)),
            EpError::Npurt { context: c, source } => EpError::Npurt { context: context(c), source },
            other => other,
        })?;
    }
    let mut outputs = Vec::new();
    let mut k = 0;
    for v in fused.outputs.iter().flatten() {
        if let Some(&id) = ids.get(&v.name) {
            g.try_output(id).map_err(|e| npurt_err(context(String::new()), e))?;
            outputs.push(Out::Graph(k));
            k += 1;
        } else if let Some(h) = env.host.get(&v.name) {
            outputs.push(Out::Host(h.clone()));
        } else {
            return Err(EpError::Graph(context(format!("output {:?} is made by no node of the group", v.name))));
        }
    }
    Ok(Built { graph: g, inputs, outputs, labels })
}

fn npurt_err(context: String, source: runtime::Error) -> EpError {
    EpError::Npurt { context, source }
}

fn static_meta(v: &ValueMeta) -> Result<TensorMeta, ops::Decline> {
    let dtype = ops::operand_dtype(v.elem)
        .ok_or_else(|| ops::Decline(format!("{:?}: ONNX element type {}", v.name, v.elem)))?;
    match &v.dims {
        Some(d) if v.is_static() => {
            Ok(TensorMeta::new(dtype, Shape::from(d.iter().map(|&x| x as usize).collect::<Vec<_>>())))
        }
        _ => Err(ops::Decline(format!("{:?} has no static shape", v.name))),
    }
}

/// A folded value as an npurt constant.
fn host_tensor(v: &HostValue) -> Result<HostTensor, EpError> {
    let r = match ops::operand_dtype(v.elem) {
        Some(DType::I64) => HostTensor::from_vec(v.dims.clone(), v.data.clone()),
        Some(DType::I32) => HostTensor::from_vec(v.dims.clone(), v.data.iter().map(|&x| x as i32).collect()),
        Some(DType::U8) => HostTensor::from_vec(v.dims.clone(), v.data.iter().map(|&x| x as u8).collect()),
        _ => return Err(EpError::Graph(format!("a folded value of element type {}", v.elem))),
    };
    r.map_err(|e| npurt_err("folded value".into(), e))
}

/// Adds one mapped node (and the constants it reads) to the npurt graph: its operands'
/// reshapes, the op, the output's reshape.
fn add_node(
    g: &mut Graph,
    ids: &mut HashMap<String, ValueId>,
    node: &NodeInfo,
    mapped: &Mapped,
    env: &Env,
    initializer: &mut dyn FnMut(&ValueMeta) -> Result<HostTensor, EpError>,
) -> Result<(), EpError> {
    let label = node.label();
    let mut args = Vec::new();
    if let (Some(t), Some(Some(out))) = (&mapped.fill, node.outputs.first()) {
        let name = format!("{}/npurt_value", out.name);
        args.push(g.try_constant(&name, (**t).clone()).map_err(|e| npurt_err(format!("node {label}"), e))?);
    }
    for v in node.inputs.iter().flatten().take(mapped.operand_names(node).len()) {
        let id = match ids.get(&v.name) {
            Some(&id) => id,
            None => {
                let t = match env.host.get(&v.name) {
                    Some(h) => host_tensor(h)?,
                    None if v.constant => initializer(v)?,
                    None => {
                        return Err(EpError::Graph(format!("node {label}: operand {:?} comes from nowhere", v.name)));
                    }
                };
                let id = g.try_constant(&v.name, t).map_err(|e| npurt_err(format!("node {label}"), e))?;
                ids.insert(v.name.clone(), id);
                id
            }
        };
        args.push(id);
    }
    let Some(out) = node.outputs.first().and_then(Option::as_ref) else {
        return Err(EpError::Graph(format!("node {label} has no output")));
    };
    let operands: Vec<String> =
        node.inputs.iter().flatten().zip(&args).map(|(v, id)| format!("{:?} {}", v.name, g.meta(*id))).collect();
    let refused = |e| npurt_err(format!("node {label} with operands [{}]", operands.join(", ")), e);
    for (k, shape) in mapped.pre.iter().enumerate() {
        if let (Some(shape), Some(arg)) = (shape, args.get_mut(k)) {
            let name = format!("{}/npurt_promote_{k}", out.name);
            *arg = g.op(&name, Op::Reshape { shape: shape.clone() }, &[*arg]).map_err(refused)?;
        }
    }
    let id = match &mapped.post {
        None => g.op(&out.name, mapped.op.clone(), &args).map_err(refused)?,
        Some(shape) => {
            let mm = g.op(&format!("{}/npurt_promoted", out.name), mapped.op.clone(), &args).map_err(refused)?;
            g.op(&out.name, Op::Reshape { shape: shape.clone() }, &[mm]).map_err(refused)?
        }
    };
    ids.insert(out.name.clone(), id);
    // A Split's further outputs: one op each on the same operands.
    for (op, v) in mapped.rest.iter().zip(node.outputs.iter().skip(1)) {
        let Some(v) = v else { return Err(EpError::Graph(format!("node {label}: an output is missing"))) };
        let id = g.op(&v.name, op.clone(), &args).map_err(refused)?;
        ids.insert(v.name.clone(), id);
    }
    Ok(())
}

/// A constant initializer's data, copied out of ORT.
///
/// # Safety
/// `v.handle` is valid during the current call.
unsafe fn initializer(ort: &Ort, v: &ValueMeta) -> Result<HostTensor, EpError> {
    // SAFETY: per this function's contract.
    let (meta, bytes) = unsafe { initializer_bytes(ort, v) }?;
    Ok(HostTensor { dtype: meta.dtype, shape: meta.shape, bytes: bytes.to_vec().into() })
}

/// Writes a constant initializer's data into `stash`, straight from ORT's buffer.
///
/// # Safety
/// `v.handle` is valid during the current call.
unsafe fn stash_initializer(ort: &Ort, v: &ValueMeta, stash: &mut Stash) -> Result<(), EpError> {
    if stash.contains(&v.name) {
        return Ok(());
    }
    // SAFETY: per this function's contract.
    let (meta, bytes) = unsafe { initializer_bytes(ort, v) }?;
    stash.put(&v.name, meta.dtype, meta.shape, bytes)
}

/// The meta and bytes of a constant initializer, borrowed from ORT.
///
/// # Safety
/// `v.handle` is valid during the current call, which the bytes must not outlive.
unsafe fn initializer_bytes<'a>(ort: &Ort, v: &ValueMeta) -> Result<(TensorMeta, &'a [u8]), EpError> {
    let mut value: *const OrtValue = ptr::null();
    // SAFETY: the handle is valid; ORT returns a value it owns (or null).
    ort.check("ValueInfo_GetInitializerValue", unsafe {
        (ort.api.ValueInfo_GetInitializerValue)(v.handle, &mut value)
    })?;
    if value.is_null() {
        return Err(EpError::Graph(format!("initializer {:?} has no value", v.name)));
    }
    // SAFETY: value is a valid tensor owned by ORT during this call.
    unsafe { tensor_bytes(ort, value) }
}

/// The meta and host bytes of an ORT tensor.
///
/// # Safety
/// `value` is a valid host tensor for the lifetime `'a` the caller picks (the current call).
unsafe fn tensor_bytes<'a>(ort: &Ort, value: *const OrtValue) -> Result<(TensorMeta, &'a [u8]), EpError> {
    // SAFETY: value is a valid host tensor for 'a, as this function's caller promises.
    let (elem, dims) = unsafe { graph::tensor_type_and_dims(ort, value) }?;
    let dtype = ops::operand_dtype(elem).ok_or_else(|| EpError::Graph(format!("ONNX element type {elem}")))?;
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| EpError::Graph(format!("dims {dims:?}")))?;
    let meta = TensorMeta::new(dtype, Shape::from(shape));
    let n = runtime::size::bytes("tensor", meta.shape.dims(), dtype).map_err(|e| npurt_err("ORT tensor".into(), e))?;
    if n == 0 {
        return Ok((meta, &[]));
    }
    let mut data: *const c_void = ptr::null();
    // SAFETY: value is valid; ORT returns its data pointer.
    ort.check("GetTensorData", unsafe { (ort.api.GetTensorData)(value, &mut data) })?;
    if data.is_null() {
        return Err(EpError::Null("tensor data"));
    }
    // SAFETY: a host tensor of this dtype and shape holds n bytes at data.
    Ok((meta, unsafe { std::slice::from_raw_parts(data.cast::<u8>(), n) }))
}

unsafe extern "system" fn create_state(
    _this: *mut OrtNodeComputeInfo,
    _ctx: *mut OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> StatusPtr {
    // No per-state data: the compiled graph keeps one arena per concurrent run.
    if !state.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *state = ptr::null_mut() };
    }
    ptr::null_mut()
}

unsafe extern "system" fn release_state(_this: *mut OrtNodeComputeInfo, _state: *mut c_void) {}

unsafe extern "system" fn compute(
    this: *mut OrtNodeComputeInfo,
    _state: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> StatusPtr {
    // SAFETY: ORT passes back a compute info made by Kernel::into_raw, alive until released.
    let k = unsafe { &*this.cast::<Kernel>() };
    k.ort.guard("Compute", || {
        if ctx.is_null() {
            return Err(EpError::Null("kernel_context"));
        }
        // SAFETY: ctx is ORT's kernel context for this call.
        unsafe { k.run(ctx) }.map_err(|e| match e {
            EpError::Npurt { context, source } => {
                EpError::Npurt { context: format!("fused node {:?} of [{}]: {context}", k.name, k.nodes), source }
            }
            EpError::Graph(m) => EpError::Graph(format!("fused node {:?} of [{}]: {m}", k.name, k.nodes)),
            other => other,
        })
    })
}

/// Releases compute infos made by [`compile`].
///
/// # Safety
/// Each non-null entry came from [`Kernel::into_raw`] and is released once.
pub unsafe fn release(infos: *mut *mut OrtNodeComputeInfo, n: usize) {
    if infos.is_null() {
        return;
    }
    for i in 0..n {
        // SAFETY: infos holds n entries.
        let p = unsafe { *infos.add(i) };
        if !p.is_null() {
            // SAFETY: per the contract.
            drop(unsafe { Kernel::from_raw(p) });
        }
    }
}

mod run;
#[cfg(test)]
mod tests;
