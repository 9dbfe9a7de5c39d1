//! npurt's `log` records, forwarded to ONNX Runtime's logger.
//!
//! npurt (and this EP) log through the `log` crate. When no other `log` logger is installed in
//! the process, [`install`] (called by `CreateEpFactories`) installs one that writes each record
//! to ORT's default logger (the one handed to `CreateEpFactories`, the environment's), with the
//! `log` level mapped to ORT's severity (error, warning, info, verbose; trace as verbose). Two
//! filters apply in turn: the `log` crate's maximum level (process-wide: `warn` once installed,
//! changed by the EP option `log_level`, the last session created with one setting it), then ORT's
//! own severity of its default logger (`onnxruntime.set_default_logger_severity`). When another
//! logger was installed first (the Python package installs its own), records go there and
//! `log_level` still sets the `log` filter. Released with the factory: nothing is written to a
//! logger ORT may have destroyed.

use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};
use ort_sys::OrtLoggingLevel;

use crate::abi::OrtLogger;
use crate::ort::Ort;

/// Where records go: ORT's tables and its default logger, while a factory lives.
struct Sink {
    ort: Ort,
    logger: *const OrtLogger,
}

// SAFETY: the logger is ORT's environment logger, which ORT's API lets any thread write to;
// the tables are immutable.
unsafe impl Send for Sink {}

/// The logger installed with `log::set_logger`; `Send + Sync` (a mutex over the sink).
struct Bridge {
    /// The live factories (each installed once) and the sink of the newest.
    sink: Mutex<(usize, Option<Sink>)>,
}

static BRIDGE: Bridge = Bridge { sink: Mutex::new((0, None)) };

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            Level::Error => OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR,
            Level::Warn => OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
            Level::Info => OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO,
            Level::Debug | Level::Trace => OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE,
        };
        let guard = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = guard.1.as_ref() {
            let msg = format!("[{}] {}", record.target(), record.args());
            // SAFETY: the logger is valid while a factory lives (cleared by `release`).
            unsafe { s.ort.log(s.logger, level, &msg) };
        }
    }

    fn flush(&self) {}
}

/// Installs the bridge to `logger` (ORT's default logger) unless another `log` logger is in
/// place; on the first install the `log` filter is set to `warn`. Later calls (a library
/// registered again) point the bridge at the newest logger.
pub fn install(ort: Ort, logger: *const OrtLogger) {
    {
        let mut guard = BRIDGE.sink.lock().unwrap_or_else(|p| p.into_inner());
        guard.0 += 1;
        if !logger.is_null() {
            guard.1 = Some(Sink { ort, logger });
        }
    }
    if log::set_logger(&BRIDGE).is_ok() {
        log::set_max_level(LevelFilter::Warn);
    }
}

/// A factory is going away; with the last one, records stop going to ORT's logger.
pub fn release() {
    let mut guard = BRIDGE.sink.lock().unwrap_or_else(|p| p.into_inner());
    guard.0 = guard.0.saturating_sub(1);
    if guard.0 == 0 {
        guard.1 = None;
    }
}

/// Applies the EP option `log_level` (process-wide, see the module docs).
pub fn set_level(level: Option<LevelFilter>) {
    if let Some(l) = level {
        log::set_max_level(l);
    }
}
