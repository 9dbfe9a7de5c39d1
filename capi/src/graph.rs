//! `npurt_graph`: a compiled BERT encoder, what its inputs are, and runs of it.

use crate::error::{Fail, guard, npurt_status};
use crate::ffi::{opt_str_arg, out_ptr, str_arg, write, write_text};
use crate::handles::{Kind, Object, get, insert, release};
use crate::options::graph_options;
use crate::runtime::{device_index, npurt_runtime};
use crate::tensor::{into_handles, npurt_tensor, output_slots, tensor_list, write_meta};
use crate::types::npurt_dtype;
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::models::safetensors::SafetensorsFile;
use npurt::{Op, Tensor};
use runtime::graph::{CompileOptions, CompiledGraph};
use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

/// A compiled graph. Opaque; made by `npurt_graph_from_bert`, freed by
/// `npurt_graph_free`. Runs may overlap: `npurt_graph_run` is thread-safe. Send and Sync.
pub struct npurt_graph {
    rt: npurt::Runtime,
    cg: CompiledGraph,
}

impl Object for npurt_graph {
    const KIND: Kind = Kind::Graph;
}

/// Builds and compiles a BERT encoder for `batch` sequences of `seq` tokens.
/// `model_dir_or_preset` is a Hugging Face directory (`config.json` and
/// `model.safetensors`) or a preset with random weights (`tiny`, `minilm-l6`, `bert-base`,
/// `bert-large`). `options` is NULL or `"key=value;..."`: `precision` (of the matrix
/// products, as the runtime option takes it: `f32`, `bf16`, ...; default the runtime's),
/// `streams` (most streams one run uses), `max_arenas`
/// (most runs in flight at once), `device`, `seed` (of a preset's weights). The graph's
/// inputs are `input_ids` and `token_type_ids` (`NPURT_I64`, `[batch, seq]`) and
/// `attention_mask` (`NPURT_F32`, `[batch, seq]`: 1 for tokens, 0 for padding); its
/// output is the last hidden state, `NPURT_F32` `[batch, seq, hidden]`. A model whose
/// `config.json` asks for what npurt does not implement (an activation other than GELU) is
/// `NPURT_ERR_UNSUPPORTED`.
///
/// # Safety
/// The strings NULL or NUL-terminated; `out` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_graph_from_bert(
    rt: *mut npurt_runtime,
    model_dir_or_preset: *const c_char,
    batch: usize,
    seq: usize,
    options: *const c_char,
    out: *mut *mut npurt_graph,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        // SAFETY: NUL-terminated or NULL (the caller's contract).
        let model = unsafe { str_arg(model_dir_or_preset, "model_dir_or_preset") }?;
        // SAFETY: NUL-terminated or NULL (the caller's contract).
        let options = unsafe { opt_str_arg(options, "options") }?;
        out_ptr(out, "out")?;
        let o = graph_options(options)?;
        let device = device_index(rt, i32::try_from(o.device).unwrap_or(i32::MAX))?;
        let (config, weights) = match BertConfig::preset(model) {
            Some(c) => (c, Weights::Random(o.seed)),
            None => {
                let dir = Path::new(model);
                if !dir.is_dir() {
                    return Err(Fail::arg(format!(
                        "{model:?} is neither a model directory nor a preset (tiny, minilm-l6, bert-base, bert-large)"
                    )));
                }
                let config = BertConfig::from_file(dir.join("config.json"))?;
                let st = SafetensorsFile::open(dir.join("model.safetensors")).map_err(npurt::Error::from)?;
                (config, Weights::File(Arc::new(st)))
            }
        };
        let mut cfg = rt.config().clone();
        if let Some(p) = o.precision {
            cfg.precision = p;
        }
        let mut copts = CompileOptions::from_config(&cfg, device);
        if let Some(s) = o.streams {
            copts.max_streams = s;
        }
        if let Some(a) = o.max_arenas {
            copts.max_arenas = a;
        }
        let bg = bert::build(&config, weights, batch, seq)?;
        let cg = CompiledGraph::compile_owned(rt, bg.graph, copts)?;
        let h = insert(npurt_graph { rt: rt.clone(), cg })?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, h) };
        Ok(())
    })
}

/// `*n` = the number of inputs the graph takes.
///
/// # Safety
/// `n` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_graph_input_count(g: *const npurt_graph, n: *mut usize) -> npurt_status {
    guard(|| {
        let g = get(g, "graph")?;
        out_ptr(n, "n")?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(n, g.cg.graph().inputs.len()) };
        Ok(())
    })
}

/// What input `i` is: its name (NUL-terminated into `name` of `name_len` bytes, which
/// must hold it), `*dtype`, `shape[0..rank]` (`max_rank` must be at least the rank) and
/// `*rank`. Each out-pointer may be NULL (not wanted).
///
/// # Safety
/// `name` NULL or writable for `name_len` bytes; `shape` NULL
/// or writable for `max_rank` values; `dtype` and `rank` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_graph_input_info(
    g: *const npurt_graph,
    i: usize,
    name: *mut c_char,
    name_len: usize,
    dtype: *mut npurt_dtype,
    shape: *mut i64,
    max_rank: usize,
    rank: *mut usize,
) -> npurt_status {
    guard(|| {
        let g = get(g, "graph")?;
        let graph = g.cg.graph();
        let id = *graph
            .inputs
            .get(i)
            .ok_or_else(|| Fail::arg(format!("input {i} does not exist (the graph has {})", graph.inputs.len())))?;
        let v = graph.value(id);
        if !name.is_null() && name_len <= v.name.len() {
            return Err(Fail::arg(format!("name_len is {name_len}, {} needed for {:?}", v.name.len() + 1, v.name)));
        }
        if !shape.is_null() && max_rank < v.meta.shape.rank() {
            return Err(Fail::arg(format!("max_rank is {max_rank} but input {i} has rank {}", v.meta.shape.rank())));
        }
        if !name.is_null() {
            // SAFETY: `name` is writable for `name_len` (> the name's length) bytes.
            unsafe { write_text(&v.name, name, name_len, std::ptr::null_mut()) }?;
        }
        // SAFETY: each pointer NULL or writable (the caller's contract).
        unsafe { write_meta(v.meta.dtype, v.meta.shape.dims(), dtype, shape, max_rank, rank) }
    })
}

/// Runs the graph on `inputs` (in the order `npurt_graph_input_info` gives, dtypes and
/// shapes as it says) and waits for the results. Each of the `n_outputs` entries of
/// `outputs` (the graph's output count) is an existing tensor of the output's dtype and
/// shape, which receives a copy, or NULL: the output is stored there as a new tensor owned
/// by the caller (written only on success). Thread-safe: runs from several threads overlap.
///
/// # Safety
/// `inputs` holds `n_inputs` tensor pointers and `outputs` `n_outputs` (NULL arrays only
/// with a count of 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_graph_run(
    g: *mut npurt_graph,
    inputs: *const *const npurt_tensor,
    n_inputs: usize,
    outputs: *mut *mut npurt_tensor,
    n_outputs: usize,
) -> npurt_status {
    guard(|| {
        let g = get(g, "graph")?;
        // SAFETY: `inputs` holds `n_inputs` pointers.
        let in_handles = unsafe { tensor_list(inputs, n_inputs, "inputs") }?;
        let ins: Vec<&Tensor> = in_handles.iter().map(|h| &h.t).collect();
        // SAFETY: `outputs` holds `n_outputs` pointers.
        let slots = unsafe { output_slots(outputs, n_outputs, "outputs") }?;
        let graph = g.cg.graph();
        if n_outputs != graph.outputs.len() {
            return Err(Fail::arg(format!(
                "the graph has {} output(s), n_outputs is {n_outputs}",
                graph.outputs.len()
            )));
        }
        let given: Vec<Option<&Tensor>> = slots.iter().map(|s| s.as_ref().map(|h| &h.t)).collect();
        for (i, (t, id)) in given.iter().zip(&graph.outputs).enumerate() {
            let m = graph.meta(*id);
            if let Some(t) = t
                && (t.dtype() != m.dtype || *t.shape() != m.shape)
            {
                return Err(Fail::new(
                    crate::error::NPURT_ERR_VALIDATION,
                    format!("output {i} must be {m}, got {}", t.meta()),
                ));
            }
        }
        let results = g.cg.run(&ins)?;
        let mut fresh = Vec::new();
        for (i, (r, t)) in results.into_iter().zip(&given).enumerate() {
            match t {
                Some(t) => {
                    g.rt.execute(&Op::Copy, &[&r], &[t])?;
                }
                None => fresh.push((i, r)),
            }
        }
        for (i, h) in into_handles(fresh)? {
            // SAFETY: `outputs` holds `n_outputs > i` writable slots (the caller's contract).
            unsafe { write(outputs.add(i), h) };
        }
        Ok(())
    })
}

/// Frees a graph (NULL is accepted: `NPURT_OK`); runs in flight on other threads finish
/// first. A handle already freed, or not a graph, is `NPURT_ERR_INVALID_HANDLE`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_graph_free(g: *mut npurt_graph) -> npurt_status {
    guard(|| {
        drop(release(g, "graph")?);
        Ok(())
    })
}
