//! `npurt_execute`: one op by name, with `key=value` attributes, on a stream; and
//! `npurt_report`, what it did.

use crate::error::{CResult, Fail, guard, npurt_status};
use crate::ffi::{fill_chars, opt_str_arg, str_arg, write};
use crate::handles::{get, get_opt};
use crate::options::pairs;
use crate::runtime::npurt_runtime;
use crate::stream::npurt_stream;
use crate::tensor::{into_handles, npurt_tensor, output_slots, tensor_list};
use crate::types::{npurt_tier, npurt_unit_class, tier_to_c, unit_class_to_c};
use npurt::{ExecReport, OpKind, Tensor};
use std::ffi::c_char;

/// What one `npurt_execute` did. A plain struct the caller owns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct npurt_report {
    /// The implementation that ran, NUL-terminated (truncated to fit).
    pub implementation: [c_char; 96],
    /// The unit it ran on (e.g. `"cpu-fma"`), NUL-terminated (truncated to fit).
    pub unit: [c_char; 32],
    /// `NPURT_UNIT_CUBE`, `NPURT_UNIT_VECTOR` or `NPURT_UNIT_SCALAR`.
    pub unit_class: npurt_unit_class,
    /// `NPURT_TIER_REFERENCE`, `NPURT_TIER_GENERIC` or `NPURT_TIER_FAST`.
    pub tier: npurt_tier,
    /// The device index.
    pub device: i32,
    /// Wall time of the call when it ran synchronously (default stream); -1 when it was
    /// queued on a user stream (time it with events).
    pub elapsed_ms: f64,
    /// Floating-point operations of the op.
    pub flops: u64,
    /// Bytes the op reads and writes.
    pub bytes: u64,
}

impl npurt_report {
    fn from_report(r: &ExecReport, device: usize) -> npurt_report {
        let mut out = npurt_report {
            implementation: [0; 96],
            unit: [0; 32],
            unit_class: unit_class_to_c(r.unit.class),
            tier: tier_to_c(r.tier),
            device: i32::try_from(device).unwrap_or(i32::MAX),
            elapsed_ms: r.elapsed.map_or(-1.0, |d| d.as_secs_f64() * 1e3),
            flops: r.flops,
            bytes: r.bytes,
        };
        fill_chars(&mut out.implementation, &r.implementation);
        fill_chars(&mut out.unit, r.unit.label);
        out
    }
}

/// The op `name` (the op-name table's spellings: npurt's, ONNX's and the aliases, in any
/// case) with the attributes `attrs`.
fn parse_op(name: &str, attrs: Option<&str>, rank: usize) -> CResult<npurt::Op> {
    let kind = npurt::runtime_op::names::lookup(name).ok_or_else(|| {
        let known: Vec<&str> = OpKind::ALL.iter().map(|k| k.name()).collect();
        Fail::arg(format!("unknown op {name:?}; known: {}", known.join(", ")))
    })?;
    let attrs = pairs(attrs, "attrs")?;
    Ok(npurt::runtime_op::op_from_attrs(kind, &attrs, rank)?)
}

/// Runs the op `op` (by name; ONNX spellings accepted) on `inputs`. `attrs` is NULL or
/// `"key=value;..."` (e.g. `"trans_b=true"`, `"axis=-1"`, `"perm=0,2,1"`). Each of the
/// `n_outputs` entries of `outputs` is an existing tensor, written in place (its dtype and
/// shape must be the op's), or NULL: a new tensor is made and stored there, owned by the
/// caller (written only on success). `n_outputs` must be the op's output count. `stream`
/// NULL runs on the default stream and returns when the op is done; a user stream queues
/// the op and returns (its failures surface at `npurt_stream_synchronize`). `report` is
/// NULL or filled.
///
/// # Safety
/// `op` and `attrs` NULL or NUL-terminated; `inputs` points to `n_inputs` tensor pointers
/// and `outputs` to `n_outputs` tensor pointers (NULL arrays only with a count of 0);
/// `report` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_execute(
    rt: *mut npurt_runtime,
    op: *const c_char,
    attrs: *const c_char,
    inputs: *const *const npurt_tensor,
    n_inputs: usize,
    outputs: *mut *mut npurt_tensor,
    n_outputs: usize,
    stream: *mut npurt_stream,
    report: *mut npurt_report,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        // SAFETY: NUL-terminated or NULL (the caller's contract).
        let name = unsafe { str_arg(op, "op") }?;
        // SAFETY: as above.
        let attrs = unsafe { opt_str_arg(attrs, "attrs") }?;
        // SAFETY: `inputs` holds `n_inputs` pointers.
        let in_handles = unsafe { tensor_list(inputs, n_inputs, "inputs") }?;
        let ins: Vec<&Tensor> = in_handles.iter().map(|h| &h.t).collect();
        // SAFETY: `outputs` holds `n_outputs` pointers.
        let out_slots = unsafe { output_slots(outputs, n_outputs, "outputs") }?;
        let given: Vec<Option<&Tensor>> = out_slots.iter().map(|s| s.as_ref().map(|h| &h.t)).collect();
        let stream_handle = get_opt(stream, "stream")?;
        let stream = stream_handle.as_ref().map(|s| &s.stream);
        let rank = ins.first().map_or(0, |t| t.dims().len());
        let op = parse_op(name, attrs, rank)?;
        let metas = rt.infer(&op, &ins)?;
        if metas.len() != n_outputs {
            return Err(Fail::arg(format!("{} has {} output(s), n_outputs is {n_outputs}", op.name(), metas.len())));
        }
        let device = ins.first().map(|t| t.device()).or_else(|| stream.map(|s| s.device())).unwrap_or(0);
        if let Some(s) = stream
            && s.device() != device
        {
            return Err(Fail::arg(format!(
                "{}: the stream is on device {} but the inputs on {device}",
                op.name(),
                s.device()
            )));
        }
        // New outputs come from the pool for the stream the op runs on.
        let scope = stream.map(|s| rt.stream_scope(s));
        let mut made: Vec<Option<Tensor>> = Vec::with_capacity(n_outputs);
        for (g, m) in given.iter().zip(&metas) {
            made.push(match g {
                Some(_) => None,
                None => Some(rt.empty(m.dtype, m.shape.clone(), device)?),
            });
        }
        let outs: Vec<&Tensor> = given.iter().zip(&made).filter_map(|(g, m)| g.or(m.as_ref())).collect();
        let r = match stream {
            Some(s) => rt.execute_on(s, &op, &ins, &outs)?,
            None => rt.execute(&op, &ins, &outs)?,
        };
        drop(scope);
        if !report.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { write(report, npurt_report::from_report(&r, device)) };
        }
        let fresh: Vec<(usize, Tensor)> = made.into_iter().enumerate().filter_map(|(i, m)| Some((i, m?))).collect();
        for (i, h) in into_handles(fresh)? {
            // SAFETY: `outputs` holds `n_outputs > i` writable slots (the caller's contract).
            unsafe { write(outputs.add(i), h) };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each ONNX operator name of an op the table has, in ONNX's spelling and in other
    /// cases, is the op npurt runs.
    #[test]
    fn onnx_operator_names_are_accepted() {
        let onnx = [
            ("MatMul", OpKind::MatMul),
            ("Gemm", OpKind::Gemm),
            ("Add", OpKind::Add),
            ("Sub", OpKind::Sub),
            ("Mul", OpKind::Mul),
            ("Div", OpKind::Div),
            ("Relu", OpKind::Relu),
            ("Gelu", OpKind::Gelu),
            ("Tanh", OpKind::Tanh),
            ("Erf", OpKind::Erf),
            ("Exp", OpKind::Exp),
            ("Sqrt", OpKind::Sqrt),
            ("Neg", OpKind::Neg),
            ("Pow", OpKind::Pow),
            ("Equal", OpKind::Equal),
            ("Where", OpKind::Where),
            ("Concat", OpKind::Concat),
            ("Slice", OpKind::Slice),
            ("Expand", OpKind::Expand),
            ("Sigmoid", OpKind::Sigmoid),
            ("Softmax", OpKind::Softmax),
            ("LayerNormalization", OpKind::LayerNorm),
            ("RMSNormalization", OpKind::RmsNorm),
            ("Transpose", OpKind::Permute),
            ("Reshape", OpKind::Reshape),
            ("Gather", OpKind::Gather),
            ("Cast", OpKind::Cast),
            ("ReduceSum", OpKind::ReduceSum),
            ("ReduceMean", OpKind::ReduceMean),
            ("Identity", OpKind::Copy),
            ("RotaryEmbedding", OpKind::Rope),
        ];
        for (name, kind) in onnx {
            for spelling in [name.to_string(), name.to_ascii_lowercase(), name.to_ascii_uppercase()] {
                // The ops whose attributes have no default.
                let attrs = match kind {
                    OpKind::Reshape => Some("shape=2,3"),
                    OpKind::Concat => Some("axis=0"),
                    OpKind::Slice => Some("starts=0;ends=1"),
                    OpKind::Expand => Some("shape=2,3"),
                    _ => None,
                };
                let op = parse_op(&spelling, attrs, 2).unwrap_or_else(|e| panic!("{spelling}: {}", e.msg));
                assert_eq!(op.kind(), kind, "{spelling}");
            }
        }
        assert!(parse_op("Frobnicate", None, 2).is_err());
    }
}
