//! Runtime errors as Python exceptions, and the guard every native call runs under.
//!
//! The exception classes live in `npurt._errors` (pure Python, so a class can derive from
//! both `npurt.Error` and `ValueError` or `MemoryError`). A panic inside the runtime is
//! caught here and raised as `npurt.Error`; it never reaches Python as anything else.

use npurt::Error;
use pyo3::prelude::*;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Whether a panic is armed for a named call (`_native._inject_panic`, for tests).
static ARMED: AtomicBool = AtomicBool::new(false);
/// The name of the call whose next guarded run panics.
static TARGET: Mutex<Option<String>> = Mutex::new(None);

/// Arms (`Some(name)`) or clears (`None`) a panic at the start of the guarded call `name`
/// (e.g. `"Graph.node"`), so that tests can check that each native call is guarded.
pub(crate) fn inject_panic(name: Option<String>) {
    let mut t = TARGET.lock().unwrap_or_else(|p| p.into_inner());
    ARMED.store(name.is_some(), Ordering::SeqCst);
    *t = name;
}

/// Panics when the call `name` is the armed one (one relaxed load otherwise).
fn injected(name: &str) {
    if ARMED.load(Ordering::Relaxed) {
        let hit = TARGET.lock().unwrap_or_else(|p| p.into_inner()).as_deref() == Some(name);
        if hit {
            panic!("injected panic in {name}");
        }
    }
}

/// Runs the body of the native call `name` with the GIL held and panics caught: a panic
/// becomes `npurt.Error` ("internal error"), never PyO3's `PanicException`. Every native
/// method and function runs under this (or under [`nogil`], which it may call inside).
pub(crate) fn guard<T, F>(py: Python<'_>, name: &'static str, f: F) -> PyResult<T>
where
    F: FnOnce() -> PyResult<T>,
{
    match catch_unwind(AssertUnwindSafe(|| {
        injected(name);
        f()
    })) {
        Ok(r) => r,
        Err(p) => Err(panicked(py, &*p)),
    }
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

/// [`nogil`] for long calls: a Ctrl-C (or any signal whose Python handler raises) that
/// arrived meanwhile is raised (`KeyboardInterrupt`) as the call returns, in place of
/// its result. The work itself is not cancelled: it ran to its end.
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
