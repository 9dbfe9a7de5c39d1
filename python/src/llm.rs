//! `_native.LLM`: decoder LLMs (Llama, Qwen2, Qwen3) from a Hugging Face directory, and
//! `_native.LLMStream`, the iterator of one streamed generation.

use crate::errors::{check, guard, invalid, nogil, nogil_interruptible};
use crate::handle::PyRuntime;
use npurt::llm::{FinishReason, Generation, Llm, LlmOptions, SamplingParams};
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

/// One prompt's result as Python receives it: text, generated ids, finish reason.
type PyGeneration = (String, Vec<u32>, &'static str);

fn finish_name(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

fn to_py(g: Generation) -> PyGeneration {
    (g.text, g.token_ids, finish_name(g.finish_reason))
}

/// Prompts as Python passes them: every one a string, or every one a list of token ids.
#[derive(FromPyObject)]
enum Prompts {
    Texts(Vec<String>),
    Ids(Vec<Vec<u32>>),
}

/// The model; `Send + Sync` as [`Llm`] is: calls from several Python threads take turns on
/// it, the GIL released meanwhile.
#[pyclass(name = "LLM", module = "npurt._native", frozen)]
pub struct PyLlm {
    llm: Arc<Llm>,
}

fn params(
    max_new_tokens: usize,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    seed: u64,
    stop_token_ids: Option<Vec<u32>>,
) -> SamplingParams {
    SamplingParams { max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids }
}

#[pymethods]
impl PyLlm {
    #[new]
    #[pyo3(signature = (rt, model_dir, device = 0, max_batch = 8, block_size = 16, max_seq_len = None))]
    fn new(
        py: Python<'_>,
        rt: &PyRuntime,
        model_dir: &str,
        device: usize,
        max_batch: usize,
        block_size: usize,
        max_seq_len: Option<usize>,
    ) -> PyResult<PyLlm> {
        guard(py, "LLM.__init__", || {
            let r = &rt.rt;
            let options = LlmOptions { device, max_batch, block_size, max_seq_len, ..LlmOptions::default() };
            let llm = nogil_interruptible(py, || Llm::from_dir_with(r, model_dir, options))?;
            Ok(PyLlm { llm: Arc::new(llm) })
        })
    }

    /// The ids generation stops at by default (the model's EOS).
    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.llm.eos_token_ids().to_vec()
    }
    /// Bytes of the KV caches on the device.
    #[getter]
    fn kv_cache_bytes(&self) -> usize {
        self.llm.kv_cache_bytes()
    }
    /// Sequences decoded together at most, and tokens per sequence at most.
    #[getter]
    fn limits(&self) -> (usize, usize) {
        self.llm.limits()
    }
    #[getter]
    fn vocab_size(&self) -> usize {
        self.llm.config().vocab_size
    }

    /// The ids of `text` as the model's `tokenizer.json` encodes it.
    fn encode(&self, py: Python<'_>, text: &str) -> PyResult<Vec<u32>> {
        guard(py, "LLM.encode", || check(py, self.llm.encode(text)))
    }

    /// One result per prompt, the GIL released while generating.
    #[pyo3(signature = (prompts, max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompts: Prompts,
        max_new_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        stop_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Vec<PyGeneration>> {
        guard(py, "LLM.generate", || {
            let p = params(max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids);
            let llm = &self.llm;
            let out = nogil_interruptible(py, || match &prompts {
                Prompts::Texts(t) => {
                    let refs: Vec<&str> = t.iter().map(String::as_str).collect();
                    llm.generate(&refs, &p)
                }
                Prompts::Ids(ids) => llm.generate_ids(ids, &p),
            })?;
            Ok(out.into_iter().map(to_py).collect())
        })
    }

    /// Starts generating one prompt on a thread of its own; the returned iterator yields
    /// each token as it is chosen.
    #[pyo3(signature = (prompt, max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        prompt: Prompts,
        max_new_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        stop_token_ids: Option<Vec<u32>>,
    ) -> PyResult<PyLlmStream> {
        guard(py, "LLM.stream", || {
            let p = params(max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids);
            let one = match prompt {
                Prompts::Texts(t) if t.len() == 1 => check(py, self.llm.encode(&t[0]))?,
                Prompts::Ids(mut ids) if ids.len() == 1 => ids.remove(0),
                _ => return Err(invalid(py, "LLM.stream", "takes one prompt")),
            };
            // A small buffer: the generating thread runs at most a few tokens ahead.
            let (tx, rx) = sync_channel::<Item>(16);
            let llm = Arc::clone(&self.llm);
            std::thread::Builder::new()
                .name("npurt-llm-stream".into())
                .spawn(move || produce(&llm, one, &p, tx))
                .map_err(|e| invalid(py, "LLM.stream", format!("cannot start the generating thread: {e}")))?;
            Ok(PyLlmStream { rx: Mutex::new(Some(rx)), done: AtomicBool::new(false) })
        })
    }
}

/// What the generating thread sends: a token (id, text piece, finish reason) or the error
/// that ended the generation.
type Item = npurt::Result<(u32, String, Option<&'static str>)>;

/// Runs one streamed generation, sending each token; stops early (quietly) when the
/// iterator was dropped, since the send then fails.
fn produce(llm: &Llm, ids: Vec<u32>, p: &SamplingParams, tx: SyncSender<Item>) {
    let sent = llm.generate_ids_stream(&[ids], p, |ev| {
        let item = Ok((ev.token_id, ev.text.to_string(), ev.finish_reason.map(finish_name)));
        tx.send(item).map_err(|_| npurt::Error::Config("llm stream: the iterator was dropped".into()))
    });
    if let Err(e) = sent {
        // Nobody listens when the iterator is gone; the error is then moot.
        let _ = tx.send(Err(e));
    }
}

/// The tokens of one streamed generation; iterating blocks (GIL released) until the next
/// token. `Send + Sync`: one thread reads at a time; another thread's `next` meanwhile
/// raises `ValidationError`.
#[pyclass(name = "LLMStream", module = "npurt._native", frozen)]
pub struct PyLlmStream {
    /// `None` while a thread waits on it, or once the generation ended (`done`).
    rx: Mutex<Option<Receiver<Item>>>,
    done: AtomicBool,
}

#[pymethods]
impl PyLlmStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `(token_id, text, finish_reason)`; `StopIteration` after the last token. A Ctrl-C
    /// while waiting is raised once the next token arrived (that token is kept for the
    /// next call).
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(u32, String, Option<&'static str>)>> {
        guard(py, "LLMStream.__next__", || {
            let taken = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take();
            let Some(rx) = taken else {
                if self.done.load(Ordering::Acquire) {
                    return Ok(None);
                }
                return Err(invalid(py, "LLMStream", "is being read by another thread"));
            };
            let (rx, got) = nogil(py, move || {
                let got = rx.recv().ok();
                Ok((rx, got))
            })?;
            match got {
                Some(Ok(item)) => {
                    *self.rx.lock().unwrap_or_else(|p| p.into_inner()) = Some(rx);
                    py.check_signals()?;
                    Ok(Some(item))
                }
                Some(Err(e)) => {
                    self.done.store(true, Ordering::Release);
                    check(py, Err(e))
                }
                None => {
                    self.done.store(true, Ordering::Release);
                    Ok(None)
                }
            }
        })
    }
}
