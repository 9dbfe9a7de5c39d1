//! `_native.Stream` and `_native.Event`.

use crate::errors::{nogil, nogil_interruptible};
use pyo3::prelude::*;

/// A runtime stream: a device's synchronous default stream or an asynchronous user stream.
#[pyclass(name = "Stream", module = "npurt._native", frozen)]
pub struct PyStream {
    pub(crate) s: npurt::Stream,
    pub(crate) rt: npurt::Runtime,
}

#[pymethods]
impl PyStream {
    #[getter]
    fn device(&self) -> usize {
        self.s.device()
    }
    #[getter]
    fn is_async(&self) -> bool {
        self.s.is_async()
    }
    /// Identifies the runtime the stream belongs to (see `Runtime.id`).
    #[getter]
    fn runtime_id(&self) -> usize {
        crate::runtime::id_of(&self.rt)
    }
    #[getter]
    fn label(&self) -> String {
        self.s.to_string()
    }
    /// Waits for the work queued on this stream; reports the first failure of that work.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let s = &self.s;
        nogil_interruptible(py, || s.synchronize())
    }
    /// A new event recorded at the current end of this stream.
    fn record(&self, py: Python<'_>) -> PyResult<PyEvent> {
        let s = &self.s;
        Ok(PyEvent { e: nogil(py, || s.record())?, device: self.s.device() })
    }
    /// Makes later work on this stream wait for `event`.
    fn wait(&self, py: Python<'_>, event: &PyEvent) -> PyResult<()> {
        let (s, e) = (&self.s, &event.e);
        nogil(py, || s.wait(e))
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.s)
    }
}

/// A marker in a stream, for cross-stream waits and timing.
#[pyclass(name = "Event", module = "npurt._native", frozen)]
pub struct PyEvent {
    pub(crate) e: npurt::Event,
    pub(crate) device: usize,
}

#[pymethods]
impl PyEvent {
    #[getter]
    fn device(&self) -> usize {
        self.device
    }
    /// (Re-)records the event at the current end of `stream`.
    fn record(&self, py: Python<'_>, stream: &PyStream) -> PyResult<()> {
        let (e, s) = (&self.e, &stream.s);
        nogil(py, || e.record(s))
    }
    /// True when the work before the record point has finished.
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        let e = &self.e;
        nogil(py, || e.query())
    }
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let e = &self.e;
        nogil_interruptible(py, || e.synchronize())
    }
    /// Milliseconds from this event to `end` (both recorded and complete).
    fn elapsed_ms(&self, py: Python<'_>, end: &PyEvent) -> PyResult<f64> {
        let (end, start) = (&end.e, &self.e);
        let d = nogil(py, || end.elapsed_since(start))?;
        Ok(d.as_secs_f64() * 1e3)
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.e)
    }
}
