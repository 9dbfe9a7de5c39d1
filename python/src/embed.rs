//! `_native.Embedder`: sentence embeddings from a sentence-transformers model directory.

use crate::errors::{check, guard, nogil_interruptible};
use crate::handle::PyRuntime;
use npurt::embed::{EmbedOptions, Embedder};
use numpy::PyArray2;
use pyo3::prelude::*;
use std::sync::Mutex;

/// The runtime's embedder; one embedding call at a time.
#[pyclass(name = "Embedder", module = "npurt._native", frozen)]
pub struct PyEmbedder {
    e: Mutex<Embedder>,
    dimension: usize,
    max_seq_length: usize,
    normalizes: bool,
}

#[pymethods]
impl PyEmbedder {
    #[new]
    #[pyo3(signature = (rt, model_dir, batch_size = 32, device = 0))]
    fn new(py: Python<'_>, rt: &PyRuntime, model_dir: &str, batch_size: usize, device: usize) -> PyResult<PyEmbedder> {
        guard(py, "Embedder.__init__", || {
            let r = &rt.rt;
            let options = EmbedOptions { batch_size, device, ..EmbedOptions::default() };
            let e = nogil_interruptible(py, || Embedder::from_dir_with(r, model_dir, options))?;
            Ok(PyEmbedder {
                dimension: e.dimension(),
                max_seq_length: e.max_seq_length(),
                normalizes: e.normalizes(),
                e: Mutex::new(e),
            })
        })
    }
    #[getter]
    fn dimension(&self) -> usize {
        self.dimension
    }
    #[getter]
    fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }
    /// Whether the model's pipeline ends with a Normalize module (`modules.json`).
    #[getter]
    fn normalizes(&self) -> bool {
        self.normalizes
    }
    #[getter]
    fn batch_size(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Embedder.batch_size", || Ok(self.lock().batch_size()))
    }
    /// Embeddings of `texts`, `[len(texts), dimension]` float32, as the model's pipeline
    /// makes them, one batch of texts per pass; a Ctrl-C during a pass is raised when the
    /// pass ends, before the next one starts.
    fn embed<'py>(&self, py: Python<'py>, texts: Vec<String>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        guard(py, "Embedder.embed", || {
            let chunk = self.lock().batch_size().max(1);
            let mut rows: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
            for part in texts.chunks(chunk) {
                let e = &self.e;
                let got = nogil_interruptible(py, || {
                    let refs: Vec<&str> = part.iter().map(String::as_str).collect();
                    e.lock().unwrap_or_else(|p| p.into_inner()).embed(&refs)
                })?;
                rows.extend(got);
            }
            let d = self.dimension;
            let flat: Vec<f32> = rows.into_iter().flatten().collect();
            let a = check(
                py,
                npurt::ndarray::Array2::from_shape_vec((flat.len() / d.max(1), d), flat)
                    .map_err(|e| npurt::Error::format_from("embeddings", e)),
            )?;
            Ok(PyArray2::from_owned_array(py, a))
        })
    }
}

impl PyEmbedder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Embedder> {
        self.e.lock().unwrap_or_else(|p| p.into_inner())
    }
}
