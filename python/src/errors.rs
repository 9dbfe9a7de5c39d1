//! Runtime errors as Python exceptions, and the guard every native call runs under.
//!
//! The exception classes live in `npurt._errors` (pure Python, so a class can derive from
//! both `npurt.Error` and `ValueError` or `MemoryError`). A panic inside the runtime is
//! caught here and raised as `npurt.Error`; it never reaches Python as anything else.

use npurt::Error;
use pyo3::prelude::*;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Builds an instance of `npurt._errors.<kind>` carrying the message and, where known,
/// the op, the stream and the submission number.
pub(crate) fn raise(
    py: Python<'_>,
    kind: &str,
    msg: String,
    op: Option<String>,
    stream: Option<String>,
    seq: Option<u64>,
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let m = py.import("npurt._errors")?;
        let inst = m.getattr(kind)?.call1((msg.clone(),))?;
        inst.setattr("op", op)?;
        inst.setattr("stream", stream)?;
        inst.setattr("submission", seq)?;
        Ok(PyErr::from_value(inst))
    })();
    made.unwrap_or_else(|e| e)
}

/// The exception class name of a runtime error.
fn kind_of(e: &Error) -> &'static str {
    match e {
        Error::Invalid { .. } | Error::Config(_) | Error::Overflow { .. } => "ValidationError",
        Error::OutOfMemory { .. } => "OutOfMemoryError",
        Error::Async { .. } | Error::Backend { .. } | Error::Device { .. } => "DeviceError",
        Error::NoKernel { .. } | Error::Unsupported(_) | Error::Io { .. } | Error::Format { .. } => "Error",
    }
}

/// `e` as the matching `npurt` exception.
pub(crate) fn to_py(py: Python<'_>, e: &Error) -> PyErr {
    let (op, stream, seq) = match e {
        Error::Invalid { op, .. } | Error::NoKernel { op, .. } => (Some(op.to_string()), None, None),
        Error::Async { op, stream, seq, .. } => (Some(op.clone()), Some(stream.clone()), Some(*seq)),
        _ => (None, None, None),
    };
    let mut msg = e.to_string();
    // The chain of sources, as far as the message does not already say it.
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if !msg.contains(&t) {
            msg.push_str(": ");
            msg.push_str(&t);
        }
        src = s.source();
    }
    raise(py, kind_of(e), msg, op, stream, seq)
}

/// `e` as `npurt.BackendUnavailableError` (a runtime could not be opened).
pub(crate) fn unavailable(py: Python<'_>, e: &Error) -> PyErr {
    match e {
        Error::Config(_) => to_py(py, e),
        _ => raise(py, "BackendUnavailableError", e.to_string(), None, None, None),
    }
}

/// A caught panic as `npurt.Error`.
fn panicked(py: Python<'_>, payload: &(dyn std::any::Any + Send)) -> PyErr {
    let m = runtime::error::panic_message(payload);
    raise(py, "Error", format!("internal error (a panic in the runtime): {m}"), None, None, None)
}

/// A validation error raised from the bindings themselves.
pub(crate) fn invalid(py: Python<'_>, op: &str, msg: impl Into<String>) -> PyErr {
    raise(py, "ValidationError", format!("{op}: {}", msg.into()), Some(op.to_string()), None, None)
}

/// Runs `f` with the GIL released and panics caught; runtime errors become exceptions.
pub(crate) fn nogil<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> npurt::Result<T> + Send,
{
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, &e)),
        Err(p) => Err(panicked(py, &*p)),
    }
}

/// [`nogil`] for long calls: a Ctrl-C that arrived meanwhile raises `KeyboardInterrupt`.
pub(crate) fn nogil_interruptible<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> npurt::Result<T> + Send,
{
    let r = nogil(py, f);
    py.check_signals()?;
    r
}

/// A runtime result as a Python result.
pub(crate) fn check<T>(py: Python<'_>, r: npurt::Result<T>) -> PyResult<T> {
    r.map_err(|e| to_py(py, &e))
}
