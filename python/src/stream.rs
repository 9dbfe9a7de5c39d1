//! `_native.Stream` and `_native.Event`.

use crate::errors::{guard, nogil, nogil_interruptible};
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
    fn device(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Stream.device", || Ok(self.s.device()))
    }
    #[getter]
    fn is_async(&self, py: Python<'_>) -> PyResult<bool> {
        guard(py, "Stream.is_async", || Ok(self.s.is_async()))
    }
    /// Identifies the runtime the stream belongs to (see `Runtime.id`).
    #[getter]
    fn runtime_id(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Stream.runtime_id", || Ok(crate::handle::id_of(&self.rt)))
    }
    #[getter]
    fn label(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Stream.label", || Ok(self.s.to_string()))
    }
    /// Waits for the work queued on this stream; reports the first failure of that work.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        guard(py, "Stream.synchronize", || {
            let s = &self.s;
            nogil_interruptible(py, || s.synchronize())
        })
    }
    /// A new event recorded at the current end of this stream.
    fn record(&self, py: Python<'_>) -> PyResult<PyEvent> {
        guard(py, "Stream.record", || {
            let s = &self.s;
            Ok(PyEvent { e: nogil(py, || s.record())?, device: self.s.device() })
        })
    }
    /// Makes later work on this stream wait for `event`.
    fn wait(&self, py: Python<'_>, event: &PyEvent) -> PyResult<()> {
        guard(py, "Stream.wait", || {
            let (s, e) = (&self.s, &event.e);
            nogil(py, || s.wait(e))
        })
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Stream.__repr__", || Ok(format!("{:?}", self.s)))
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
        guard(py, "Event.record", || {
            let (e, s) = (&self.e, &stream.s);
            nogil(py, || e.record(s))
        })
    }
    /// True when the work before the record point has finished.
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        guard(py, "Event.query", || {
            let e = &self.e;
            nogil(py, || e.query())
        })
    }
    /// Waits until the work before the record point has finished.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        guard(py, "Event.synchronize", || {
            let e = &self.e;
            nogil_interruptible(py, || e.synchronize())
        })
    }
    /// Milliseconds from this event to `end` (both recorded and complete).
    fn elapsed_ms(&self, py: Python<'_>, end: &PyEvent) -> PyResult<f64> {
        guard(py, "Event.elapsed_ms", || {
            let (end, start) = (&end.e, &self.e);
            let d = nogil(py, || end.elapsed_since(start))?;
            Ok(d.as_secs_f64() * 1e3)
        })
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Event.__repr__", || Ok(format!("{:?}", self.e)))
    }
}
