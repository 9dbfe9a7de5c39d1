//! The state one [`crate::Runtime`] shares with everything it hands out (tensors,
//! streams, events, compiled graphs): the backend, the configuration and one record per
//! visible device (its pool, default stream and labels).

use crate::backend::{Backend, DeviceInfo, StreamId};
use crate::config::RuntimeConfig;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::report::Profile;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

/// One visible device.
pub(crate) struct DeviceCtx {
    /// The backend's index of this device.
    pub(crate) ordinal: usize,
    pub(crate) info: DeviceInfo,
    pub(crate) pool: Pool,
    pub(crate) default_stream: StreamId,
    pub(crate) user_streams: AtomicUsize,
    /// `backend:index`.
    pub(crate) label: Arc<str>,
    /// `backend:index/default`.
    pub(crate) default_label: Arc<str>,
}

/// Shared by a runtime and its clones, tensors, streams and events.
pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) config: RuntimeConfig,
    pub(crate) devices: Vec<DeviceCtx>,
    pub(crate) seq: AtomicU64,
    pub(crate) profile: Mutex<Profile>,
    /// Kernel indices per op kind in preference order for the configured mapping.
    pub(crate) preference: Vec<Vec<usize>>,
}

impl Inner {
    pub(crate) fn device(&self, d: usize) -> Result<&DeviceCtx> {
        self.devices.get(d).ok_or_else(|| {
            Error::on_device(
                d,
                format!("device {d} does not exist ({} has {} visible)", self.backend.name(), self.devices.len()),
            )
        })
    }

    /// Rewrites a backend's stream label (`backend:ordinal/...`) to the runtime's
    /// (`backend:logical/...`) in an asynchronous error.
    pub(crate) fn relabel_async(&self, device: usize, e: Error) -> Error {
        match (e, self.devices.get(device)) {
            (Error::Async { op, stream, seq, source }, Some(d)) => {
                let backend_prefix = format!("{}:{}/", self.backend.name(), d.ordinal);
                let stream = match stream.strip_prefix(&backend_prefix) {
                    Some(rest) => format!("{}/{rest}", d.label),
                    None => stream,
                };
                Error::Async { op, stream, seq, source }
            }
            (e, _) => e,
        }
    }
}
