//! `npurt._native`: the runtime's Python bindings. The pure-Python package `npurt`
//! wraps these objects into the documented API (module functions, `npurt.Runtime`,
//! `npurt.Tensor`, ...).

mod config;
mod dlpack;
mod embed;
mod errors;
mod execute;
mod graph;
mod handle;
mod llm;
mod runtime;
mod stream;
mod tensor;

use pyo3::prelude::*;

use errors::guard;

/// Backends compiled into this build, in fallback order.
#[pyfunction]
fn compiled_backends(py: Python<'_>) -> PyResult<Vec<&'static str>> {
    guard(py, "compiled_backends", || Ok(npurt::compiled_backends()))
}

/// Turns on the runtime's log (the `RUST_LOG` / `NPURT_LOG` filter, default `warn`).
#[pyfunction]
fn init_logging(py: Python<'_>) -> PyResult<()> {
    guard(py, "init_logging", || {
        // NPURT_LOG by the rule of every NPURT_* variable: not UTF-8 or empty is refused.
        ::runtime::env::var("NPURT_LOG").map_err(|e| errors::to_py(py, &e.into()))?;
        let env = env_logger::Env::default()
            .filter_or("NPURT_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()));
        let _ = env_logger::Builder::from_env(env).try_init();
        Ok(())
    })
}

/// Checks a settings dictionary as a runtime would (without opening a backend).
#[pyfunction]
#[pyo3(signature = (settings, env = true))]
fn validate_config(py: Python<'_>, settings: &Bound<'_, pyo3::types::PyDict>, env: bool) -> PyResult<()> {
    guard(py, "validate_config", || config::build(py, settings, env).map(|_| ()))
}

/// Most user streams per device a runtime accepts on this machine.
#[pyfunction]
fn max_streams_bound(py: Python<'_>) -> PyResult<usize> {
    guard(py, "max_streams_bound", || Ok(::runtime::config::max_streams_bound()))
}

/// For tests: every guarded call named `name` (e.g. `"Graph.node"`, `"Runtime.config"`)
/// panics inside its guard from now until `_inject_panic(None)`.
#[pyfunction]
#[pyo3(signature = (name))]
fn _inject_panic(name: Option<String>) {
    errors::inject_panic(name);
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<handle::PyRuntime>()?;
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<stream::PyStream>()?;
    m.add_class::<stream::PyEvent>()?;
    m.add_class::<execute::PyReport>()?;
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::PyCompiledGraph>()?;
    m.add_class::<embed::PyEmbedder>()?;
    m.add_class::<llm::PyLlm>()?;
    m.add_class::<llm::PyLlmStream>()?;
    m.add_function(wrap_pyfunction!(execute::execute, m)?)?;
    m.add_function(wrap_pyfunction!(execute::execute_batch, m)?)?;
    m.add_function(wrap_pyfunction!(execute::op_names, m)?)?;
    m.add_function(wrap_pyfunction!(graph::bert, m)?)?;
    m.add_function(wrap_pyfunction!(compiled_backends, m)?)?;
    m.add_function(wrap_pyfunction!(init_logging, m)?)?;
    m.add_function(wrap_pyfunction!(validate_config, m)?)?;
    m.add_function(wrap_pyfunction!(max_streams_bound, m)?)?;
    m.add_function(wrap_pyfunction!(_inject_panic, m)?)?;
    m.add("DLPACK_DEVICE_CPU", dlpack::DEVICE_CPU)?;
    Ok(())
}

// The ONNX Runtime plugin execution provider's two entry points, re-exported so that this
// module's shared object is also the EP library (`npurt.ort.get_library_path()` returns its
// path): ONNX Runtime dlopens it (already loaded by Python) and calls `CreateEpFactories`.
pub use npurt_ort_ep::{CreateEpFactories, ReleaseEpFactory};

// Keeps both symbols in the link (and so in the dynamic symbol table), referenced or not.
#[used]
static ORT_EP_ENTRY_POINTS: (npurt_ort_ep::abi::CreateEpApiFactoriesFn, npurt_ort_ep::abi::ReleaseEpApiFactoryFn) =
    (CreateEpFactories, ReleaseEpFactory);
