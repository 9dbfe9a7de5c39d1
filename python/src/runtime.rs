//! `_native.Runtime`: devices, allocation, memory figures, utilisation and streams.

use crate::errors::{self, check, guard, nogil, nogil_interruptible};
use crate::handle::{PyRuntime, id_of};
use crate::stream::{PyEvent, PyStream};
use crate::tensor::{PyTensor, dtype};
use pyo3::prelude::*;
use pyo3::types::PyDict;

impl PyRuntime {
    /// Every pool statistic of `device` as a dictionary.
    fn pool_dict<'py>(&self, py: Python<'py>, device: usize) -> PyResult<Bound<'py, PyDict>> {
        let s = check(py, self.rt.pool_stats(device))?;
        let d = PyDict::new(py);
        d.set_item("total_bytes", s.total_bytes)?;
        d.set_item("in_use_bytes", s.in_use_bytes)?;
        d.set_item("cached_bytes", s.cached_bytes)?;
        d.set_item("system_bytes", s.system_bytes)?;
        d.set_item("peak_in_use_bytes", s.peak_in_use_bytes)?;
        d.set_item("peak_total_bytes", s.peak_total_bytes)?;
        d.set_item("largest_free_block", s.largest_free_block)?;
        d.set_item("fragmentation", s.fragmentation)?;
        d.set_item("pending_blocks", s.pending_blocks)?;
        d.set_item("segments", s.segments)?;
        d.set_item("system_allocations", s.system_allocations)?;
        d.set_item("cache_hits", s.cache_hits)?;
        d.set_item("allocations", s.allocations)?;
        d.set_item("limit_bytes", s.limit_bytes)?;
        Ok(d)
    }

    /// `stream`'s runtime must be this one.
    fn scoped<T: Send>(
        &self,
        py: Python<'_>,
        stream: Option<&PyStream>,
        f: impl FnOnce(&npurt::Runtime) -> npurt::Result<T> + Send,
    ) -> PyResult<T> {
        let rt = &self.rt;
        match stream {
            None => nogil(py, || f(rt)),
            Some(s) => {
                let s = &s.s;
                nogil(py, || {
                    let _scope = rt.stream_scope(s);
                    f(rt)
                })
            }
        }
    }
}

#[pymethods]
impl PyRuntime {
    /// A runtime from the settings dictionary (see `config.rs`), over the `NPURT_*`
    /// environment when `env`.
    #[new]
    #[pyo3(signature = (settings, env = true))]
    fn new(py: Python<'_>, settings: &Bound<'_, PyDict>, env: bool) -> PyResult<PyRuntime> {
        guard(py, "Runtime.__init__", || {
            let config = crate::config::build(py, settings, env)?;
            match nogil(py, || Ok(npurt::Runtime::with_config(config)))? {
                Ok(rt) => Ok(PyRuntime { rt }),
                Err(e) => Err(errors::unavailable(py, &e)),
            }
        })
    }

    /// Identifies this runtime (equal for its tensors' and streams' `runtime_id`).
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Runtime.id", || Ok(id_of(&self.rt)))
    }
    #[getter]
    fn backend(&self, py: Python<'_>) -> PyResult<&'static str> {
        guard(py, "Runtime.backend", || Ok(self.rt.backend_name()))
    }
    fn device_count(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Runtime.device_count", || Ok(self.rt.device_count()))
    }
    fn device_label(&self, py: Python<'_>, device: usize) -> PyResult<String> {
        guard(py, "Runtime.device_label", || Ok(self.rt.device_label(device)))
    }
    /// The device's name (e.g. the CPU model or `Ascend910B2`).
    fn device_name(&self, py: Python<'_>, device: usize) -> PyResult<String> {
        guard(py, "Runtime.device_name", || Ok(check(py, self.rt.device_info(device))?.name.clone()))
    }
    fn supports_zero_copy(&self, py: Python<'_>, device: usize) -> PyResult<bool> {
        guard(py, "Runtime.supports_zero_copy", || Ok(self.rt.supports_zero_copy(device)))
    }
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(py, "Runtime.config", || crate::config::describe(py, self.rt.config()))
    }
    /// `(name, tier, unit class, unit label)` of every kernel of the backend.
    fn kernels(&self, py: Python<'_>) -> PyResult<Vec<(String, String, String, String)>> {
        guard(py, "Runtime.kernels", || {
            Ok(self
                .rt
                .kernels()
                .iter()
                .map(|k| {
                    (
                        k.name.to_string(),
                        k.tier.name().to_string(),
                        k.unit.class.name().to_string(),
                        k.unit.label.to_string(),
                    )
                })
                .collect())
        })
    }

    /// An uninitialised tensor (`zero`: zero-filled) on `device`, allocated for `stream`.
    #[pyo3(signature = (dtype_name, shape, device, zero = false, stream = None))]
    fn empty(
        &self,
        py: Python<'_>,
        dtype_name: &str,
        shape: Vec<usize>,
        device: usize,
        zero: bool,
        stream: Option<PyRef<'_, PyStream>>,
    ) -> PyResult<PyTensor> {
        guard(py, "Runtime.empty", || {
            let d = dtype(py, dtype_name)?;
            let t = self.scoped(py, stream.as_deref(), |rt| {
                if zero { rt.zeros(d, shape, device) } else { rt.empty(d, shape, device) }
            })?;
            Ok(PyTensor::new(t, &self.rt))
        })
    }

    /// A copy of `t` on `device`.
    fn to_device(&self, py: Python<'_>, t: PyRef<'_, PyTensor>, device: usize) -> PyResult<PyTensor> {
        guard(py, "Runtime.to_device", || {
            let src = &t.t;
            let rt = &self.rt;
            let out = nogil_interruptible(py, || rt.to_device(src, device))?;
            Ok(PyTensor::new(out, rt))
        })
    }

    fn default_stream(&self, py: Python<'_>, device: usize) -> PyResult<PyStream> {
        guard(py, "Runtime.default_stream", || {
            let rt = &self.rt;
            Ok(PyStream { s: nogil(py, || rt.default_stream(device))?, rt: self.rt.clone() })
        })
    }
    fn new_stream(&self, py: Python<'_>, device: usize) -> PyResult<PyStream> {
        guard(py, "Runtime.new_stream", || {
            let rt = &self.rt;
            Ok(PyStream { s: nogil(py, || rt.stream(device))?, rt: self.rt.clone() })
        })
    }
    fn event(&self, py: Python<'_>, device: usize) -> PyResult<PyEvent> {
        guard(py, "Runtime.event", || {
            let rt = &self.rt;
            Ok(PyEvent { e: nogil(py, || rt.event(device))?, device })
        })
    }
    /// Waits for all work on `device` (every stream).
    fn synchronize(&self, py: Python<'_>, device: usize) -> PyResult<()> {
        guard(py, "Runtime.synchronize", || {
            let rt = &self.rt;
            nogil_interruptible(py, || rt.synchronize(device))
        })
    }
    fn synchronize_all(&self, py: Python<'_>) -> PyResult<()> {
        guard(py, "Runtime.synchronize_all", || {
            let rt = &self.rt;
            nogil_interruptible(py, || rt.synchronize_all())
        })
    }

    /// Memory figures of `device` in bytes, with every pool statistic.
    fn memory_info<'py>(&self, py: Python<'py>, device: usize) -> PyResult<Bound<'py, PyDict>> {
        guard(py, "Runtime.memory_info", || {
            let m = check(py, self.rt.memory_info(device))?;
            let d = self.pool_dict(py, device)?;
            d.set_item("device_total_bytes", m.total_bytes)?;
            d.set_item("system_free_bytes", m.system_free_bytes)?;
            d.set_item("pool_bytes", m.pool_bytes)?;
            d.set_item("used_bytes", m.used_bytes)?;
            d.set_item("alignment", self.rt.config().pool.alignment)?;
            Ok(d)
        })
    }
    fn pool_stats<'py>(&self, py: Python<'py>, device: usize) -> PyResult<Bound<'py, PyDict>> {
        guard(py, "Runtime.pool_stats", || self.pool_dict(py, device))
    }
    /// Returns cached pool memory of `device` to the system; the bytes released.
    fn release_cached(&self, py: Python<'_>, device: usize) -> PyResult<usize> {
        guard(py, "Runtime.release_cached", || {
            let rt = &self.rt;
            nogil(py, || rt.release_cached(device))
        })
    }

    /// Per-unit utilisation since the runtime was made or last reset.
    fn utilisation<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        guard(py, "Runtime.utilisation", || {
            let mut out = Vec::new();
            for u in self.rt.utilisation() {
                let d = PyDict::new(py);
                d.set_item("device", u.device)?;
                d.set_item("unit", u.unit.label)?;
                d.set_item("unit_class", u.unit.class.name())?;
                d.set_item("launches", u.totals.launches)?;
                d.set_item("busy_ms", u.totals.busy.as_secs_f64() * 1e3)?;
                d.set_item("flops", u.totals.flops)?;
                d.set_item("bytes", u.totals.bytes)?;
                d.set_item("compute", u.compute)?;
                d.set_item("bandwidth", u.bandwidth)?;
                d.set_item("method", u.method)?;
                out.push(d);
            }
            Ok(out)
        })
    }
    fn reset_utilisation(&self, py: Python<'_>) -> PyResult<()> {
        guard(py, "Runtime.reset_utilisation", || {
            self.rt.reset_profile();
            Ok(())
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Runtime.__repr__", || Ok(format!("{:?}", self.rt.inner())))
    }
}
