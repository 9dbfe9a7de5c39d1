//! The runtime: devices, pools, streams and tensors over one backend.
//!
//! Eager execution on a [`Runtime`] (`execute`, `run`, `execute_batch` and the launch
//! preparation compiled graphs reuse) is in `execute.rs`; the per-unit utilisation
//! counters are in `utilisation.rs`.

use crate::backend::{Backend, DeviceInfo};
use crate::config::{HwMapping, RuntimeConfig};
use crate::context::{DeviceCtx, Inner};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::{self, KernelInfo};
use crate::op::Op;
use crate::pool::{Pool, PoolStats};
use crate::report::Profile;
use crate::shape::{Layout, Shape};
use crate::stream::{self, Event, Stream, StreamInner, StreamScope, Target};
use crate::tensor::{Storage, Tensor};
use ndarray::ArrayViewD;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Memory figures of one device.
#[derive(Clone, Debug)]
pub struct MemoryInfo {
    /// Device memory size.
    pub total_bytes: u64,
    /// Free according to the system/driver, when known.
    pub system_free_bytes: Option<u64>,
    /// Bytes the pool holds from the system.
    pub pool_bytes: usize,
    /// Bytes in tensors.
    pub used_bytes: usize,
}

/// One op with its operands, for [`Runtime::execute_batch`].
#[derive(Clone, Debug)]
pub struct Task {
    pub op: Op,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

/// Entry point: owns one backend's visible devices. Cheap to clone.
///
/// `Send + Sync`: clones and shared references may be used from any number of threads at
/// once; allocation, eager execution, streams and events are all safe to call
/// concurrently (each device's pool and queues take their own locks).
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime({}, {} devices)", self.inner.backend.name(), self.inner.devices.len())
    }
}

impl Runtime {
    /// A runtime over `backend` with `config` (validated here).
    pub fn with_backend(backend: Arc<dyn Backend>, config: RuntimeConfig) -> Result<Runtime> {
        config.validate()?;
        let n = backend.device_count();
        let visible: Vec<usize> = match &config.devices {
            Some(list) => {
                for &d in list {
                    if d >= n {
                        return Err(Error::Config(format!(
                            "device {d} requested but {} has {n} devices",
                            backend.name()
                        )));
                    }
                }
                list.clone()
            }
            None => (0..n).collect(),
        };
        if visible.is_empty() {
            return Err(Error::device(format!("{} has no devices", backend.name())));
        }
        let mut devices = Vec::new();
        for (logical, &ordinal) in visible.iter().enumerate() {
            let info = backend.device_info(ordinal)?;
            let mut pcfg = config.pool.clone();
            pcfg.reuse = pcfg.reuse && config.optimizations.memory_reuse;
            if pcfg.limit_bytes.is_none() && info.memory_bytes > 0 {
                pcfg.limit_bytes = Some(info.memory_bytes as usize);
            }
            let pool = Pool::new(backend.clone(), ordinal, pcfg, config.optimizations.memory_pool)?;
            devices.push(DeviceCtx {
                ordinal,
                default_stream: backend.default_stream(ordinal),
                info,
                pool,
                user_streams: AtomicUsize::new(0),
                label: format!("{}:{logical}", backend.name()).into(),
                default_label: format!("{}:{logical}/default", backend.name()).into(),
            });
        }
        log::info!(
            "npurt runtime on {} with {} device(s): {}",
            backend.name(),
            devices.len(),
            devices.iter().map(|d| d.info.name.as_str()).collect::<Vec<_>>().join(", ")
        );
        let mapping = if config.optimizations.hardware_mapping { config.hw_mapping } else { HwMapping::Auto };
        let preference: Vec<Vec<usize>> =
            crate::op::OpKind::ALL.iter().map(|&k| kernel::preference_order(backend.kernels(), k, mapping)).collect();
        Ok(Runtime {
            inner: Arc::new(Inner {
                backend,
                config,
                devices,
                seq: AtomicU64::new(0),
                profile: Mutex::new(Profile::default()),
                preference,
            }),
        })
    }

    pub fn backend_name(&self) -> &'static str {
        self.inner.backend.name()
    }
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }
    pub fn device_count(&self) -> usize {
        self.inner.devices.len()
    }
    pub fn device_info(&self, device: usize) -> Result<&DeviceInfo> {
        Ok(&self.inner.device(device)?.info)
    }
    /// What a compiled graph's `Precision::Auto` runs as on `device`
    /// ([`Backend::auto_precision`]).
    pub fn auto_precision(&self, device: usize) -> Result<crate::config::Precision> {
        let d = self.inner.device(device)?;
        Ok(self.inner.backend.auto_precision(d.ordinal))
    }
    /// `backend:index`, e.g. `cpu:0`.
    pub fn device_label(&self, device: usize) -> String {
        self.inner.devices.get(device).map_or_else(|| format!("?:{device}"), |d| d.label.to_string())
    }
    pub fn supports_zero_copy(&self, device: usize) -> bool {
        self.inner.devices.get(device).is_some_and(|d| d.info.host_shared)
    }
    pub fn kernels(&self) -> &[KernelInfo] {
        self.inner.backend.kernels()
    }

    // ---- memory ----

    pub fn pool_stats(&self, device: usize) -> Result<PoolStats> {
        Ok(self.inner.device(device)?.pool.stats())
    }
    /// Returns cached pool memory to the system; the bytes released.
    pub fn release_cached(&self, device: usize) -> Result<usize> {
        Ok(self.inner.device(device)?.pool.release_cached())
    }
    pub fn memory_info(&self, device: usize) -> Result<MemoryInfo> {
        let d = self.inner.device(device)?;
        let s = d.pool.stats();
        Ok(MemoryInfo {
            total_bytes: d.info.memory_bytes,
            system_free_bytes: self.inner.backend.memory_free(d.ordinal),
            pool_bytes: s.total_bytes,
            used_bytes: s.in_use_bytes,
        })
    }

    /// An uninitialised tensor on `device`.
    pub fn empty(&self, dtype: DType, shape: impl Into<Shape>, device: usize) -> Result<Tensor> {
        let scoped = stream::current_for(&self.inner).filter(|s| s.device() == device);
        match &scoped {
            Some(s) => self.empty_for(dtype, shape.into(), Target::on(s)),
            None => {
                let d = self.inner.device(device)?;
                self.empty_for(
                    dtype,
                    shape.into(),
                    Target { device, id: d.default_stream, user: None, threads: 0, prepacked: None },
                )
            }
        }
    }

    /// Allocates for use on `target`. A block may come back from work still queued on
    /// that stream, so the stream is recorded as a user of the new buffer: host access
    /// (copies, views) then waits for it first.
    pub(crate) fn empty_for(&self, dtype: DType, shape: Shape, target: Target<'_>) -> Result<Tensor> {
        let device = target.device;
        let d = self.inner.device(device)?;
        let bytes = shape.checked_bytes("tensor", dtype)?;
        let block = d.pool.alloc(bytes, target.id)?;
        let t = Tensor {
            storage: Arc::new(Storage {
                rt: self.inner.clone(),
                device,
                block,
                bytes: block.size,
                kind: crate::tensor::StorageKind::Pool,
                uses: Mutex::new(Vec::new()),
            }),
            dtype,
            layout: Arc::new(Layout::contiguous(shape)),
        };
        if target.user.is_some() {
            t.storage.mark_use(target);
        }
        Ok(t)
    }

    /// Allocates a buffer the host fills before any stream uses it: it never reuses a
    /// block still pending on a stream (that would make the host write race the stream).
    fn empty_host(&self, dtype: DType, shape: Shape, device: usize) -> Result<Tensor> {
        let d = self.inner.device(device)?;
        self.empty_for(dtype, shape, Target { device, id: d.default_stream, user: None, threads: 0, prepacked: None })
    }

    /// A zero-filled tensor. The fill runs on the default stream and is complete on return,
    /// like every default-stream op. (A backend's default stream may itself be a device
    /// queue, as on Ascend: the fill is recorded as a use of the buffer, so its block is not
    /// handed to a host write while the fill is still queued.)
    pub fn zeros(&self, dtype: DType, shape: impl Into<Shape>, device: usize) -> Result<Tensor> {
        let t = self.empty_host(dtype, shape.into(), device)?;
        if t.nbytes() > 0 {
            let d = self.inner.device(device)?;
            let target = Target { device, id: d.default_stream, user: None, threads: 0, prepacked: None };
            t.fill_byte(0, target)?;
            self.inner.backend.synchronize_stream(d.ordinal, d.default_stream)?;
        }
        Ok(t)
    }

    /// Copies a host array into a new tensor on `device`.
    pub fn from_ndarray<T: Element, D: ndarray::Dimension>(
        &self,
        a: &ndarray::ArrayBase<impl ndarray::Data<Elem = T>, D>,
        device: usize,
    ) -> Result<Tensor> {
        let t = self.empty_host(T::DTYPE, a.shape().to_vec().into(), device)?;
        let v: ArrayViewD<'_, T> = a.view().into_dyn();
        t.copy_from_ndarray(&v)?;
        Ok(t)
    }

    /// A tensor from a flat slice and a shape; the slice holds exactly the shape's
    /// elements (one for a 0-d shape `[]`).
    pub fn from_slice<T: Element>(&self, data: &[T], shape: impl Into<Shape>, device: usize) -> Result<Tensor> {
        let shape = shape.into();
        shape.checked_bytes("tensor", T::DTYPE)?;
        if data.len() != shape.numel() {
            return Err(Error::invalid(
                "Tensor",
                format!("{} values for {shape}, which holds {}", data.len(), shape.numel()),
            ));
        }
        let a = ndarray::ArrayViewD::from_shape(ndarray::IxDyn(shape.dims()), data)
            .map_err(|e| Error::invalid("Tensor", format!("{} values do not fill {shape}: {e}", data.len())))?;
        self.from_ndarray(&a, device)
    }

    /// Copies a tensor to another device (through the host when the backend needs to).
    pub fn to_device(&self, t: &Tensor, device: usize) -> Result<Tensor> {
        let src = if t.is_contiguous() { t.clone() } else { self.run(&Op::Copy, &[t])?.remove(0) };
        src.storage.settle()?;
        let out = self.empty_host(t.dtype, t.shape().clone(), device)?;
        let n = src.nbytes();
        if n > 0 {
            let mut host = vec![0u8; n];
            let sd = self.inner.device(src.device())?;
            self.inner.backend.copy_to_host(
                sd.ordinal,
                src.storage.block.ptr.offset(src.layout.offset * src.dtype.size()),
                &mut host,
                sd.default_stream,
            )?;
            let dd = self.inner.device(device)?;
            self.inner.backend.copy_to_device(dd.ordinal, &host, out.storage.block.ptr)?;
        }
        Ok(out)
    }

    // ---- streams and events ----

    /// The synchronous default stream of `device`.
    pub fn default_stream(&self, device: usize) -> Result<Stream> {
        let d = self.inner.device(device)?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                rt: self.inner.clone(),
                device,
                id: d.default_stream,
                user: false,
                label: d.default_label.clone(),
            }),
        })
    }

    /// A new asynchronous user stream on `device` (at most `max_streams` alive).
    pub fn stream(&self, device: usize) -> Result<Stream> {
        let d = self.inner.device(device)?;
        let max = self.inner.config.max_streams;
        if d.user_streams.fetch_add(1, Ordering::Relaxed) >= max {
            d.user_streams.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::on_device(
                device,
                format!("{}: max_streams ({max}) user streams already exist", d.label),
            ));
        }
        let id = match self.inner.backend.create_stream(d.ordinal) {
            Ok(id) => id,
            Err(e) => {
                d.user_streams.fetch_sub(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        Ok(Stream {
            inner: Arc::new(StreamInner {
                rt: self.inner.clone(),
                device,
                id,
                user: true,
                label: format!("{}/stream{}", d.label, id.0).into(),
            }),
        })
    }

    /// Makes `stream` this thread's current stream for this runtime until the guard drops.
    pub fn stream_scope(&self, stream: &Stream) -> StreamScope {
        StreamScope::enter(stream)
    }

    /// The scoped current stream for `device`, or its default stream.
    pub fn current_stream(&self, device: usize) -> Result<Stream> {
        match stream::current_for(&self.inner).filter(|s| s.device() == device) {
            Some(s) => Ok(s),
            None => self.default_stream(device),
        }
    }

    pub fn event(&self, device: usize) -> Result<Event> {
        Event::new_on(&self.inner, device)
    }

    /// Waits for all work on `device`.
    pub fn synchronize(&self, device: usize) -> Result<()> {
        let d = self.inner.device(device)?;
        self.inner.backend.synchronize_device(d.ordinal).map_err(|e| self.relabel(device, e))
    }

    /// Rewrites a backend's stream label (`backend:ordinal/...`) to the runtime's
    /// (`backend:logical/...`) in asynchronous errors.
    pub(crate) fn relabel(&self, device: usize, e: Error) -> Error {
        self.inner.relabel_async(device, e)
    }

    /// Waits for all work on every device.
    pub fn synchronize_all(&self) -> Result<()> {
        for d in 0..self.device_count() {
            self.synchronize(d)?;
        }
        Ok(())
    }
}
