//! The `_native.Runtime` object (its methods are in `runtime.rs`) and the number that
//! identifies a runtime: what tensors and streams hand back of their runtime, kept apart
//! from the runtime's methods, which make tensors and streams.

use pyo3::prelude::*;

/// One runtime over one backend.
#[pyclass(name = "Runtime", module = "npurt._native", frozen)]
pub struct PyRuntime {
    pub(crate) rt: npurt::Runtime,
}

/// A number identifying `rt` among the live runtimes (the address of its shared state).
pub(crate) fn id_of(rt: &npurt::Runtime) -> usize {
    std::ptr::from_ref(rt.config()) as usize
}
