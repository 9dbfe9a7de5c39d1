//! Graphs from Python: the builder, compiled graphs (run, memory plan, profile) and BERT.

use crate::errors::{self, check, guard, nogil_interruptible};
use crate::execute::parse_op;
use crate::handle::PyRuntime;
use crate::tensor::PyTensor;
use npurt::models::bert::{self as bert_model, BertConfig, Weights};
use npurt::models::safetensors::SafetensorsFile;
use npurt::{Error, Precision, Tensor, f16};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, ValueId};
use std::sync::{Arc, Mutex};

/// A graph under construction; values are numbered in the order they are made.
#[pyclass(name = "Graph", module = "npurt._native", frozen)]
pub struct PyGraph {
    g: Mutex<Graph>,
}

impl PyGraph {
    fn graph(&self) -> std::sync::MutexGuard<'_, Graph> {
        self.g.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn host<T: npurt::Element + numpy::Element>(arr: &Bound<'_, PyAny>) -> PyResult<Option<HostTensor>> {
    let Ok(a) = arr.extract::<PyReadonlyArrayDyn<'_, T>>() else { return Ok(None) };
    let v: Vec<T> = a.as_array().iter().copied().collect();
    Ok(HostTensor::from_vec(a.shape().to_vec(), v).ok())
}

/// Options for [`CompiledGraph::compile`]: the runtime's configuration, then the
/// Python layer's settings (`parallel`, `fuse`, `memory_reuse`, `scheduling`, `precision`,
/// `store_slow_precision`, `streams`, `max_arenas`).
fn options(py: Python<'_>, rt: &npurt::Runtime, device: usize, o: &Bound<'_, PyDict>) -> PyResult<CompileOptions> {
    let mut c = CompileOptions::from_config(rt.config(), device);
    if let Some(v) = o.get_item("fuse")? {
        c.fuse = v.extract()?;
    }
    if let Some(v) = o.get_item("memory_reuse")? {
        c.memory_reuse = v.extract()?;
    }
    if let Some(v) = o.get_item("parallel")? {
        c.parallel = v.extract()?;
    }
    if let Some(v) = o.get_item("scheduling")? {
        let s: String = v.extract()?;
        let sched = match s.as_str() {
            "latency" => npurt::Scheduling::Latency,
            "throughput" => npurt::Scheduling::Throughput,
            "balanced" => npurt::Scheduling::Balanced,
            _ => return Err(errors::invalid(py, "compile", format!("unknown scheduling {s:?}"))),
        };
        c.strategy = sched.into();
    }
    if let Some(v) = o.get_item("precision")?.filter(|v| !v.is_none()) {
        let s: String = v.extract()?;
        c.precision = Precision::parse(&s).ok_or_else(|| {
            errors::invalid(
                py,
                "compile",
                format!("precision must be one of f32, fp32, bf16, f16, fp16, half, auto; got {s:?}"),
            )
        })?;
    }
    if let Some(v) = o.get_item("store_slow_precision")?.filter(|v| !v.is_none()) {
        c.store_slow_precision = v.extract()?;
    }
    if let Some(v) = o.get_item("streams")?.filter(|v| !v.is_none()) {
        let n: usize = v.extract()?;
        if n == 0 {
            return Err(errors::invalid(py, "compile", "streams must be at least 1"));
        }
        c.max_streams = n;
        c.parallel = c.parallel && n > 1;
    }
    if let Some(v) = o.get_item("max_arenas")?.filter(|v| !v.is_none()) {
        c.max_arenas = v.extract::<usize>()?.max(1);
    }
    Ok(c)
}

#[pymethods]
impl PyGraph {
    #[new]
    fn new(py: Python<'_>) -> PyResult<PyGraph> {
        guard(py, "Graph.__init__", || Ok(PyGraph { g: Mutex::new(Graph::new()) }))
    }
    /// Adds a graph input; its value number.
    fn input(&self, py: Python<'_>, name: &str, dtype_name: &str, shape: Vec<usize>) -> PyResult<usize> {
        guard(py, "Graph.input", || {
            let d = crate::tensor::dtype(py, dtype_name)?;
            Ok(check(py, self.graph().try_input(name, d, shape))?.0)
        })
    }
    /// Adds a constant holding a copy of the NumPy array `arr`; its value number.
    fn constant(&self, py: Python<'_>, name: &str, arr: &Bound<'_, PyAny>) -> PyResult<usize> {
        guard(py, "Graph.constant", || {
            let t = match host::<f32>(arr)? {
                Some(t) => Some(t),
                None => match host::<i64>(arr)? {
                    Some(t) => Some(t),
                    None => match host::<i32>(arr)? {
                        Some(t) => Some(t),
                        None => match host::<f16>(arr)? {
                            Some(t) => Some(t),
                            None => host::<u8>(arr)?,
                        },
                    },
                },
            };
            let t = t.ok_or_else(|| {
                errors::invalid(py, "Graph.constant", "expected a float32, float16, int32, int64 or uint8 array")
            })?;
            Ok(check(py, self.graph().try_constant(name, t))?.0)
        })
    }
    /// Adds a node `op_type` with attributes on the values `inputs`; its output values.
    fn node(
        &self,
        py: Python<'_>,
        name: &str,
        op_type: &str,
        inputs: Vec<usize>,
        attrs: Vec<(String, String)>,
    ) -> PyResult<Vec<usize>> {
        guard(py, "Graph.node", || {
            let mut g = self.graph();
            let ids: Vec<ValueId> = inputs.iter().map(|&i| ValueId(i)).collect();
            let rank = inputs.first().filter(|&&i| i < g.values.len()).map_or(0, |&i| g.values[i].meta.shape.rank());
            let op = check(py, parse_op(op_type, &attrs, rank))?;
            let outs = check(py, g.op_multi(name, op, &ids))?;
            Ok(outs.into_iter().map(|v| v.0).collect())
        })
    }
    /// Marks a value as a graph output (once).
    fn output(&self, py: Python<'_>, value: usize) -> PyResult<()> {
        guard(py, "Graph.output", || check(py, self.graph().try_output(ValueId(value))))
    }
    /// Whether a value of the graph has the name `name`.
    fn has_name(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        guard(py, "Graph.has_name", || Ok(self.graph().values.iter().any(|v| v.name == name)))
    }
    /// `(name, dtype, shape)` of a value.
    fn value(&self, py: Python<'_>, value: usize) -> PyResult<(String, String, Vec<usize>)> {
        guard(py, "Graph.value", || {
            let g = self.graph();
            let v = g
                .values
                .get(value)
                .ok_or_else(|| errors::invalid(py, "Graph", format!("value {value} does not exist")))?;
            Ok((v.name.clone(), v.meta.dtype.name().to_string(), v.meta.shape.dims().to_vec()))
        })
    }
    fn num_nodes(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Graph.num_nodes", || Ok(self.graph().nodes.len()))
    }
    fn dump(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Graph.dump", || Ok(self.graph().dump()))
    }
    /// Compiles the graph for `device` of `rt` with `opts` (see `options`).
    fn compile(
        &self,
        py: Python<'_>,
        rt: &PyRuntime,
        device: usize,
        opts: &Bound<'_, PyDict>,
    ) -> PyResult<PyCompiledGraph> {
        guard(py, "Graph.compile", || {
            let o = options(py, &rt.rt, device, opts)?;
            let g = self.graph().clone();
            let r = &rt.rt;
            let cg = nogil_interruptible(py, || CompiledGraph::compile_owned(r, g, o))?;
            Ok(PyCompiledGraph::new(cg, r))
        })
    }
}

/// A compiled graph; `run` may be called from many threads at once.
#[pyclass(name = "CompiledGraph", module = "npurt._native", frozen)]
pub struct PyCompiledGraph {
    cg: Arc<CompiledGraph>,
    rt: npurt::Runtime,
}

impl PyCompiledGraph {
    fn new(cg: CompiledGraph, rt: &npurt::Runtime) -> PyCompiledGraph {
        PyCompiledGraph { cg: Arc::new(cg), rt: rt.clone() }
    }
    fn inputs_of(&self, inputs: &[PyRef<'_, PyTensor>]) -> Vec<Tensor> {
        inputs.iter().map(|t| t.t.clone()).collect()
    }
    /// `(name, dtype, shape)` of each of `values`.
    fn describe(&self, values: &[ValueId]) -> Vec<(String, String, Vec<usize>)> {
        let g = self.cg.graph();
        values
            .iter()
            .map(|&v| {
                let x = g.value(v);
                (x.name.clone(), x.meta.dtype.name().to_string(), x.meta.shape.dims().to_vec())
            })
            .collect()
    }
}

#[pymethods]
impl PyCompiledGraph {
    /// `(name, dtype, shape)` of each input, in run order.
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<(String, String, Vec<usize>)>> {
        guard(py, "CompiledGraph.inputs", || Ok(self.describe(&self.cg.graph().inputs)))
    }
    /// `(name, dtype, shape)` of each output.
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<(String, String, Vec<usize>)>> {
        guard(py, "CompiledGraph.outputs", || Ok(self.describe(&self.cg.graph().outputs)))
    }
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "CompiledGraph.device", || Ok(self.cg.options().device))
    }
    /// The runtime the graph was compiled on.
    fn runtime(&self, py: Python<'_>) -> PyResult<PyRuntime> {
        guard(py, "CompiledGraph.runtime", || Ok(PyRuntime { rt: self.rt.clone() }))
    }
    /// Runs the graph on `inputs` (in input order); its outputs. A Ctrl-C that arrived
    /// meanwhile is raised as the run returns.
    fn run(&self, py: Python<'_>, inputs: Vec<PyRef<'_, PyTensor>>) -> PyResult<Vec<PyTensor>> {
        guard(py, "CompiledGraph.run", || {
            let ins = self.inputs_of(&inputs);
            let cg = &self.cg;
            let outs = nogil_interruptible(py, || {
                let refs: Vec<&Tensor> = ins.iter().collect();
                cg.run(&refs)
            })?;
            Ok(outs.into_iter().map(|t| PyTensor::new(t, &self.rt)).collect())
        })
    }
    /// The static memory plan: arena and LOAD bytes, their ratio, the ordering chosen and
    /// every ordering tried; `None` without memory reuse.
    fn memory_plan<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        guard(py, "CompiledGraph.memory_plan", || {
            let Some(p) = self.cg.memory_plan() else { return Ok(None) };
            let d = PyDict::new(py);
            d.set_item("arena_bytes", p.arena_bytes)?;
            d.set_item("load_bytes", p.load_bytes)?;
            d.set_item("ratio", p.ratio())?;
            d.set_item("strategy", p.strategy)?;
            d.set_item("candidates", p.candidates.clone())?;
            d.set_item("buffers", p.offsets.len())?;
            Ok(Some(d))
        })
    }
    /// Runs once with per-node timings: `{total_ms, nodes: [...], by_op: [...], trace}`.
    fn profile<'py>(&self, py: Python<'py>, inputs: Vec<PyRef<'_, PyTensor>>) -> PyResult<Bound<'py, PyDict>> {
        guard(py, "CompiledGraph.profile", || {
            let ins = self.inputs_of(&inputs);
            let cg = &self.cg;
            let (_, p) = nogil_interruptible(py, || {
                let refs: Vec<&Tensor> = ins.iter().collect();
                cg.run_profiled(&refs)
            })?;
            let d = PyDict::new(py);
            d.set_item("total_ms", p.total.as_secs_f64() * 1e3)?;
            let mut nodes = Vec::new();
            for n in &p.nodes {
                let e = PyDict::new(py);
                e.set_item("name", &n.name)?;
                e.set_item("op", n.op)?;
                e.set_item("implementation", n.implementation.to_string())?;
                e.set_item("unit", n.unit.label)?;
                e.set_item("unit_class", n.unit.class.name())?;
                e.set_item("stream", n.stream)?;
                e.set_item("start_ms", n.start.as_secs_f64() * 1e3)?;
                e.set_item("elapsed_ms", n.elapsed.as_secs_f64() * 1e3)?;
                e.set_item("flops", n.flops)?;
                e.set_item("bytes", n.bytes)?;
                nodes.push(e);
            }
            d.set_item("nodes", nodes)?;
            let by_op: Vec<(String, f64, u64, usize)> =
                p.by_op().into_iter().map(|(op, t, f, n)| (op, t.as_secs_f64() * 1e3, f, n)).collect();
            d.set_item("by_op", by_op)?;
            d.set_item("trace", p.chrome_trace())?;
            Ok(d)
        })
    }
    /// Nodes the fusion pass made: `{attention, bias_gelu, linear_gelu, add_layer_norm,
    /// merged_linears}` (`linear_gelu`: those of `bias_gelu` fused into their product as
    /// `LinearGelu`; `merged_linears`: groups of Linears reading one x run as one product).
    /// Bytes the compiled graph's constants take in the dtypes they are stored in.
    fn constant_bytes(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "CompiledGraph.constant_bytes", || Ok(self.cg.graph().constant_bytes()))
    }
    fn fusion<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(py, "CompiledGraph.fusion", || {
            let f = self.cg.fusion_stats();
            let d = PyDict::new(py);
            d.set_item("attention", f.attention)?;
            d.set_item("bias_gelu", f.bias_gelu)?;
            d.set_item("linear_gelu", f.linear_gelu)?;
            d.set_item("add_layer_norm", f.add_layer_norm)?;
            d.set_item("merged_linears", f.merged_linears)?;
            Ok(d)
        })
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "CompiledGraph.__repr__", || {
            let g = self.cg.graph();
            Ok(format!(
                "CompiledGraph({} nodes, {} inputs, on {})",
                g.nodes.len(),
                g.inputs.len(),
                self.rt.device_label(self.cg.options().device)
            ))
        })
    }
}

/// A BERT encoder compiled on `rt`: a preset (`bert-large`, `bert-base`, `minilm-l6`,
/// `tiny`: seeded random weights) or a Hugging Face model directory (`config.json` and
/// its `model.safetensors`, both required).
#[pyfunction]
#[pyo3(signature = (rt, model, batch, seq, device, opts, seed = 42))]
#[allow(clippy::too_many_arguments)] // the Python signature
pub(crate) fn bert(
    py: Python<'_>,
    rt: &PyRuntime,
    model: &str,
    batch: usize,
    seq: usize,
    device: usize,
    opts: &Bound<'_, PyDict>,
    seed: u64,
) -> PyResult<PyCompiledGraph> {
    guard(py, "bert", || {
        let o = options(py, &rt.rt, device, opts)?;
        let r = &rt.rt;
        let name = model.to_string();
        let cg = nogil_interruptible(py, move || {
            let (config, weights) = match BertConfig::preset(&name) {
                Some(c) => (c, Weights::Random(seed)),
                None => {
                    let p = std::path::Path::new(&name);
                    if !p.is_dir() {
                        return Err(Error::Config(format!(
                            "bert: {name:?} is neither a preset (bert-large, bert-base, minilm-l6, tiny) nor a model \
                             directory"
                        )));
                    }
                    let c = BertConfig::from_file(p.join("config.json"))?;
                    let st = p.join("model.safetensors");
                    if !st.is_file() {
                        // A model directory without its weights is an error, not random
                        // weights (only the presets have those).
                        let missing = std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "the model's weights are missing (a model directory needs its model.safetensors; \
                             only the presets use random weights)",
                        );
                        return Err(Error::io(st.display().to_string(), missing));
                    }
                    (c, Weights::File(Arc::new(SafetensorsFile::open(&st)?)))
                }
            };
            let bg = bert_model::build(&config, weights, batch, seq)?;
            CompiledGraph::compile_owned(r, bg.graph, o)
        })?;
        Ok(PyCompiledGraph::new(cg, r))
    })
}
