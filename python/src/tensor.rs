//! `_native.Tensor`: a runtime tensor with NumPy copies in and out and host views.

use crate::errors::{self, guard, nogil, nogil_interruptible};
use npurt::{DType, Tensor, bf16, f16};
use numpy::{PyArray, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// A dtype by its runtime name (`f32`, `f16`, `bf16`, `i32`, `i64`, `u8`).
pub(crate) fn dtype(py: Python<'_>, name: &str) -> PyResult<DType> {
    DType::parse(name).ok_or_else(|| errors::invalid(py, "Tensor", format!("unsupported dtype {name:?}")))
}

/// A runtime tensor together with the runtime that owns it.
#[pyclass(name = "Tensor", module = "npurt._native", frozen)]
pub struct PyTensor {
    pub(crate) t: Tensor,
    pub(crate) rt: npurt::Runtime,
}

impl PyTensor {
    pub(crate) fn new(t: Tensor, rt: &npurt::Runtime) -> PyTensor {
        PyTensor { t, rt: rt.clone() }
    }
}

/// Copies `arr` (a C-contiguous array of the tensor's element type) into `t`.
fn copy_in<T: npurt::Element + numpy::Element>(py: Python<'_>, t: &Tensor, arr: &Bound<'_, PyAny>) -> PyResult<()> {
    let a: PyReadonlyArrayDyn<'_, T> =
        arr.extract().map_err(|_| errors::invalid(py, "from_numpy", format!("expected an array of {}", t.dtype())))?;
    if a.shape() != t.dims() {
        return Err(errors::invalid(
            py,
            "from_numpy",
            format!("shape {:?} does not match the tensor's {:?}", a.shape(), t.dims()),
        ));
    }
    let s = a.as_slice().map_err(|_| errors::invalid(py, "from_numpy", "the array is not C-contiguous"))?;
    let bytes: &[u8] = bytemuck::cast_slice(s);
    nogil_interruptible(py, || t.copy_from_bytes(bytes))
}

/// A NumPy copy of `t`.
fn copy_out<'py, T: npurt::Element + numpy::Element>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let a = nogil_interruptible(py, || t.to_ndarray::<T>())?;
    Ok(PyArray::from_owned_array(py, a).into_any())
}

/// The host address of `t`'s first element, after its queued work has finished.
fn host_address<T: npurt::Element>(t: &Tensor) -> npurt::Result<usize> {
    t.with_host_view_mut::<T, usize>(|mut v| v.as_mut_ptr() as usize)
}

#[pymethods]
impl PyTensor {
    #[getter]
    fn shape(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        guard(py, "Tensor.shape", || Ok(self.t.dims().to_vec()))
    }
    /// Element strides (in elements).
    #[getter]
    fn strides(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        guard(py, "Tensor.strides", || Ok(self.t.layout().strides.clone()))
    }
    #[getter]
    fn dtype(&self, py: Python<'_>) -> PyResult<&'static str> {
        guard(py, "Tensor.dtype", || Ok(self.t.dtype().name()))
    }
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Tensor.device", || Ok(self.t.device()))
    }
    #[getter]
    fn device_label(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Tensor.device_label", || Ok(self.rt.device_label(self.t.device())))
    }
    #[getter]
    fn nbytes(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Tensor.nbytes", || Ok(self.t.nbytes()))
    }
    #[getter]
    fn numel(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Tensor.numel", || Ok(self.t.numel()))
    }
    fn data_ptr(&self, py: Python<'_>) -> PyResult<u64> {
        guard(py, "Tensor.data_ptr", || Ok(self.t.data_ptr()))
    }
    fn is_contiguous(&self, py: Python<'_>) -> PyResult<bool> {
        guard(py, "Tensor.is_contiguous", || Ok(self.t.is_contiguous()))
    }
    fn supports_zero_copy(&self, py: Python<'_>) -> PyResult<bool> {
        guard(py, "Tensor.supports_zero_copy", || Ok(self.t.supports_zero_copy()))
    }
    fn shares_storage(&self, py: Python<'_>, other: &PyTensor) -> PyResult<bool> {
        guard(py, "Tensor.shares_storage", || Ok(self.t.shares_storage(&other.t)))
    }
    /// Identifies the runtime the tensor belongs to (see `Runtime.id`).
    #[getter]
    fn runtime_id(&self, py: Python<'_>) -> PyResult<usize> {
        guard(py, "Tensor.runtime_id", || Ok(crate::handle::id_of(&self.rt)))
    }
    /// The runtime the tensor belongs to.
    fn runtime(&self, py: Python<'_>) -> PyResult<crate::handle::PyRuntime> {
        guard(py, "Tensor.runtime", || Ok(crate::handle::PyRuntime { rt: self.rt.clone() }))
    }

    /// Copies a C-contiguous NumPy array of the tensor's element type (float32 for a bf16
    /// tensor) into the tensor.
    fn copy_from(&self, py: Python<'_>, arr: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(py, "Tensor.copy_from", || match self.t.dtype() {
            DType::F32 => copy_in::<f32>(py, &self.t, arr),
            DType::F16 => copy_in::<f16>(py, &self.t, arr),
            DType::I32 => copy_in::<i32>(py, &self.t, arr),
            DType::I64 => copy_in::<i64>(py, &self.t, arr),
            DType::U8 => copy_in::<u8>(py, &self.t, arr),
            DType::BF16 => {
                let a: PyReadonlyArrayDyn<'_, f32> = arr
                    .extract()
                    .map_err(|_| errors::invalid(py, "from_numpy", "a bf16 tensor takes a float32 array"))?;
                if a.shape() != self.t.dims() {
                    return Err(errors::invalid(
                        py,
                        "from_numpy",
                        format!("shape {:?} does not match the tensor's {:?}", a.shape(), self.t.dims()),
                    ));
                }
                let v = a.as_array().mapv(bf16::from_f32);
                nogil_interruptible(py, || self.t.copy_from_ndarray(&v.view()))
            }
        })
    }

    /// A NumPy copy (a bf16 tensor comes back as float32).
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(py, "Tensor.to_numpy", || match self.t.dtype() {
            DType::F32 => copy_out::<f32>(py, &self.t),
            DType::F16 => copy_out::<f16>(py, &self.t),
            DType::I32 => copy_out::<i32>(py, &self.t),
            DType::I64 => copy_out::<i64>(py, &self.t),
            DType::U8 => copy_out::<u8>(py, &self.t),
            DType::BF16 => {
                let a = nogil_interruptible(py, || self.t.to_ndarray::<bf16>())?;
                Ok(PyArray::from_owned_array(py, a.mapv(f32::from)).into_any())
            }
        })
    }

    /// `(address, byte strides)` of the tensor's memory on the host, after its queued
    /// work has finished: for zero-copy views (`__array_interface__`) and DLPack.
    fn host_view(&self, py: Python<'_>) -> PyResult<(usize, Vec<isize>)> {
        guard(py, "Tensor.host_view", || self.host_view_of(py))
    }

    /// A view with a new shape (one entry may be -1); shares memory.
    fn reshape(&self, py: Python<'_>, shape: Vec<isize>) -> PyResult<PyTensor> {
        guard(py, "Tensor.reshape", || {
            let t = errors::check(py, self.t.reshape(&shape))?;
            Ok(PyTensor::new(t, &self.rt))
        })
    }

    /// The DLPack capsule of the tensor (zero-copy devices only): DLPack 1.0's versioned
    /// capsule when `versioned`, else the legacy one.
    #[pyo3(signature = (versioned = false))]
    fn dlpack<'py>(&self, py: Python<'py>, versioned: bool) -> PyResult<Bound<'py, PyAny>> {
        guard(py, "Tensor.dlpack", || {
            let (addr, _) = self.host_view_of(py)?;
            crate::dlpack::capsule(py, &self.t, addr, versioned)
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, "Tensor.__repr__", || Ok(format!("{:?}", self.t)))
    }
}

impl PyTensor {
    fn host_view_of(&self, py: Python<'_>) -> PyResult<(usize, Vec<isize>)> {
        let t = &self.t;
        let addr = nogil(py, || match t.dtype() {
            DType::F32 => host_address::<f32>(t),
            DType::F16 => host_address::<f16>(t),
            DType::BF16 => host_address::<bf16>(t),
            DType::I32 => host_address::<i32>(t),
            DType::I64 => host_address::<i64>(t),
            DType::U8 => host_address::<u8>(t),
        })?;
        let es = t.dtype().size() as isize;
        Ok((addr, t.layout().strides.iter().map(|&s| s as isize * es).collect()))
    }
}
