//! Eager execution from Python: ops by name with attributes, single and batched.

use crate::errors::{guard, nogil_interruptible};
use crate::stream::PyStream;
use crate::tensor::PyTensor;
use npurt::runtime_op::{names, op_from_attrs};
use npurt::{Error, ExecReport, Op, OpKind, Task, Tensor};
use pyo3::prelude::*;

/// What one execution did (the runtime's `ExecReport`).
#[pyclass(name = "Report", module = "npurt._native", frozen, get_all)]
pub struct PyReport {
    op: String,
    implementation: String,
    tier: String,
    device: String,
    unit: String,
    unit_class: String,
    stream: String,
    seq: u64,
    /// `None` when the work was queued on an asynchronous stream.
    elapsed_ms: Option<f64>,
    flops: u64,
    bytes: u64,
}

impl From<&ExecReport> for PyReport {
    fn from(r: &ExecReport) -> PyReport {
        PyReport {
            op: r.op.to_string(),
            implementation: r.implementation.to_string(),
            tier: r.tier.name().to_string(),
            device: r.device.to_string(),
            unit: r.unit.label.to_string(),
            unit_class: r.unit.class.name().to_string(),
            stream: r.stream.to_string(),
            seq: r.seq,
            elapsed_ms: r.elapsed.map(|d| d.as_secs_f64() * 1e3),
            flops: r.flops,
            bytes: r.bytes,
        }
    }
}

#[pymethods]
impl PyReport {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Report.__repr__", || {
            Ok(format!("Report({} via {} on {})", self.op, self.implementation, self.device))
        })
    }
}

/// The op `name` (the op-name table's spellings: npurt's, ONNX's and the aliases, in any
/// case) with its attributes.
pub(crate) fn parse_op(name: &str, attrs: &[(String, String)], rank: usize) -> npurt::Result<Op> {
    let kind = names::lookup(name).ok_or_else(|| {
        Error::invalid(
            "execute",
            format!(
                "unknown op {name:?}; known: {}",
                OpKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
            ),
        )
    })?;
    op_from_attrs(kind, attrs, rank)
}

/// One task's operands: the inputs and the outputs (given ones, the rest allocated).
fn operands(
    rt: &npurt::Runtime,
    op: &Op,
    inputs: &[Tensor],
    given: &[Option<Tensor>],
    stream: Option<&npurt::Stream>,
) -> npurt::Result<Vec<Tensor>> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let metas = rt.infer(op, &refs)?;
    if given.len() > metas.len() {
        return Err(Error::invalid(
            op.name(),
            format!("{} output(s) given, the op produces {}", given.len(), metas.len()),
        ));
    }
    let device = inputs.first().map_or(0, |t| t.device());
    let _scope = stream.map(|s| rt.stream_scope(s));
    metas
        .iter()
        .enumerate()
        .map(|(i, m)| match given.get(i).cloned().flatten() {
            Some(t) => Ok(t),
            None => rt.empty(m.dtype, m.shape.clone(), device),
        })
        .collect()
}

type Outcome = (PyReport, Vec<PyTensor>);
/// A task from Python: `(op_type, inputs, outputs or None, attrs)`.
type PyTask<'py> =
    (String, Vec<PyRef<'py, PyTensor>>, Option<Vec<Option<PyRef<'py, PyTensor>>>>, Vec<(String, String)>);
/// The same task with the runtime's tensors.
type Spec = (String, Vec<Tensor>, Vec<Option<Tensor>>, Vec<(String, String)>);

fn tensors(v: &[PyRef<'_, PyTensor>]) -> Vec<Tensor> {
    v.iter().map(|t| t.t.clone()).collect()
}

fn optional(v: Option<Vec<Option<PyRef<'_, PyTensor>>>>) -> Vec<Option<Tensor>> {
    v.unwrap_or_default().iter().map(|o| o.as_ref().map(|t| t.t.clone())).collect()
}

/// Runs `op_type` on `inputs`, writing `outputs` (entries `None` or missing are
/// allocated), on `stream` (or the device's default stream). Returns the report and the
/// outputs. A Ctrl-C that arrived meanwhile is raised as the call returns.
#[pyfunction]
#[pyo3(signature = (op_type, inputs, outputs, attrs, stream = None))]
pub(crate) fn execute(
    py: Python<'_>,
    op_type: &str,
    inputs: Vec<PyRef<'_, PyTensor>>,
    outputs: Option<Vec<Option<PyRef<'_, PyTensor>>>>,
    attrs: Vec<(String, String)>,
    stream: Option<PyRef<'_, PyStream>>,
) -> PyResult<Outcome> {
    guard(py, "execute", || {
        let Some(first) = inputs.first() else {
            return Err(crate::errors::invalid(py, op_type, "at least one input is needed"));
        };
        let r = &first.rt.clone();
        let ins = tensors(&inputs);
        let given = optional(outputs);
        let s = stream.as_ref().map(|s| s.s.clone());
        let rank = ins.first().map_or(0, |t| t.dims().len());
        let (report, outs) = nogil_interruptible(py, || {
            let op = parse_op(op_type, &attrs, rank)?;
            let outs = operands(r, &op, &ins, &given, s.as_ref())?;
            let in_refs: Vec<&Tensor> = ins.iter().collect();
            let out_refs: Vec<&Tensor> = outs.iter().collect();
            let report = match &s {
                Some(s) => r.execute_on(s, &op, &in_refs, &out_refs)?,
                None => r.execute(&op, &in_refs, &out_refs)?,
            };
            Ok((report, outs))
        })?;
        Ok((PyReport::from(&report), outs.into_iter().map(|t| PyTensor::new(t, r)).collect()))
    })
}

/// Validates every task `(op_type, inputs, outputs or None, attrs)`, then submits them
/// together on `stream` (or the default stream). Nothing runs if a task is invalid. A
/// Ctrl-C that arrived meanwhile is raised as the call returns (the submission is one
/// unit: it is not split to look for signals between its tasks).
#[pyfunction]
#[pyo3(signature = (tasks, stream = None))]
pub(crate) fn execute_batch(
    py: Python<'_>,
    tasks: Vec<PyTask<'_>>,
    stream: Option<PyRef<'_, PyStream>>,
) -> PyResult<Vec<Outcome>> {
    guard(py, "execute_batch", || {
        let Some(r) = tasks.iter().find_map(|t| t.1.first().map(|x| x.rt.clone())) else {
            if tasks.is_empty() {
                return Ok(Vec::new());
            }
            return Err(crate::errors::invalid(py, "execute_batch", "every task needs at least one input"));
        };
        let r = &r;
        let specs: Vec<Spec> = tasks.into_iter().map(|(n, i, o, a)| (n, tensors(&i), optional(o), a)).collect();
        let s = stream.as_ref().map(|s| s.s.clone());
        let done = nogil_interruptible(py, || {
            let mut batch = Vec::with_capacity(specs.len());
            for (name, ins, given, attrs) in &specs {
                let op = parse_op(name, attrs, ins.first().map_or(0, |t| t.dims().len()))?;
                let outs = operands(r, &op, ins, given, s.as_ref())?;
                batch.push(Task { op, inputs: ins.clone(), outputs: outs });
            }
            let reports = {
                let _scope = s.as_ref().map(|s| r.stream_scope(s));
                r.execute_batch(&batch)?
            };
            Ok(reports.into_iter().zip(batch).map(|(rep, t)| (rep, t.outputs)).collect::<Vec<_>>())
        })?;
        Ok(done
            .into_iter()
            .map(|(rep, outs)| (PyReport::from(&rep), outs.into_iter().map(|t| PyTensor::new(t, r)).collect()))
            .collect())
    })
}

/// The canonical names of the op table.
#[pyfunction]
pub(crate) fn op_names(py: Python<'_>) -> PyResult<Vec<&'static str>> {
    guard(py, "op_names", || Ok(OpKind::ALL.iter().map(|k| k.name()).collect()))
}
