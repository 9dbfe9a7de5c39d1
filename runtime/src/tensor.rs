//! Tensors: pool-allocated device buffers with a dtype and a strided layout (or, inside one
//! scoped run, views of host buffers lent to the device: `crate::lent`).

use crate::backend::{StreamId, TensorArg};
use crate::context::Inner;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::op::TensorMeta;
use crate::pool::Block;
use crate::shape::{Layout, Shape};
use crate::stream::StreamInner;
use crate::stream::Target;
use ndarray::{ArrayD, ArrayViewD, ArrayViewMutD, IxDyn, ShapeBuilder};
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

/// The buffer behind one or more tensor views.
pub(crate) struct Storage {
    pub(crate) rt: Arc<Inner>,
    /// Logical device index.
    pub(crate) device: usize,
    pub(crate) block: Block,
    pub(crate) bytes: usize,
    /// A block of the device's pool, or a host range lent for one scoped run.
    pub(crate) kind: StorageKind,
    /// Streams that queued work on this buffer since it was allocated.
    pub(crate) uses: Mutex<Vec<Use>>,
}

/// What a tensor's buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StorageKind {
    /// A block of the device's pool, given back when the last view drops.
    Pool,
    /// A host range the caller lent for one scoped run (`crate::lent`): nothing is given
    /// back, and no view of it outlives the run.
    Lent,
}

/// A stream that queued work on a buffer. User streams are held weakly: once a stream
/// is gone it has been synchronised (destroying waits), so it needs no release event.
pub(crate) enum Use {
    Default(StreamId),
    User(StreamId, Weak<StreamInner>),
}

impl Storage {
    pub(crate) fn mark_use(&self, target: Target<'_>) {
        let mut u = self.uses.lock().unwrap_or_else(|p| p.into_inner());
        let id = target.id;
        let known = u.iter().any(|x| match (x, target.user) {
            (Use::Default(s), None) => *s == id,
            (Use::User(s, w), Some(st)) => *s == id && std::ptr::eq(w.as_ptr(), Arc::as_ptr(&st.inner)),
            _ => false,
        });
        if !known {
            u.push(match target.user {
                Some(st) => Use::User(id, Arc::downgrade(&st.inner)),
                None => Use::Default(id),
            });
        }
    }
    /// Ids of the streams still alive that used this buffer.
    fn used_streams(&self) -> Vec<StreamId> {
        let u = self.uses.lock().unwrap_or_else(|p| p.into_inner());
        u.iter()
            .filter_map(|x| match x {
                Use::Default(s) => Some(*s),
                Use::User(s, w) => (w.strong_count() > 0).then_some(*s),
            })
            .collect()
    }
    /// Waits for every stream that used this buffer; reports their queued failures.
    pub(crate) fn settle(&self) -> Result<()> {
        let ord = self.rt.devices[self.device].ordinal;
        for s in self.used_streams() {
            self.rt.backend.synchronize_stream(ord, s)?;
        }
        Ok(())
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let StorageKind::Lent = self.kind {
            // Nothing to give back; the lender waits for the device before the loan ends,
            // and the work that used the range is awaited here already.
            if let Err(e) = self.settle() {
                log::debug!("a tensor over a lent host range: queued work failed: {e}");
            }
            return;
        }
        let dev = &self.rt.devices[self.device];
        let mut events = Vec::new();
        // Hold the user streams alive while their release events are recorded.
        let live: Vec<Arc<StreamInner>> = {
            let u = self.uses.lock().unwrap_or_else(|p| p.into_inner());
            u.iter().filter_map(|x| if let Use::User(_, w) = x { w.upgrade() } else { None }).collect()
        };
        for s in self.used_streams() {
            let ev = dev.ordinal;
            match self.rt.backend.create_event(ev) {
                Ok(e) => match self.rt.backend.record_event(ev, e, s) {
                    Ok(()) => events.push((s, e)),
                    Err(err) => {
                        // Without an event we cannot tell when the work ends: wait for it.
                        log::warn!("recording a release event: {err}; waiting for the stream");
                        let _ = self.rt.backend.destroy_event(ev, e);
                        let _ = self.rt.backend.synchronize_stream(ev, s);
                    }
                },
                Err(err) => {
                    log::warn!("creating a release event: {err}; waiting for the stream");
                    let _ = self.rt.backend.synchronize_stream(ev, s);
                }
            }
        }
        drop(live);
        if let Err(e) = dev.pool.free(self.block, events) {
            log::error!("returning a tensor buffer: {e}");
        }
    }
}

/// A view of device memory with a dtype and a layout. Cloning makes another view of the
/// same buffer; the buffer returns to the pool when the last view is dropped and the
/// queued work that uses it has finished.
///
/// `Send + Sync`: a tensor may be read by many threads at once (as an op input, copied to
/// the host). Work that writes it (as an op output, `copy_from_*`) is ordered against other
/// work on it only by the streams and events it goes through: two writers on different
/// streams without an event between them leave its values unspecified, as on any device,
/// but never touch memory outside it or a freed buffer.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) dtype: DType,
    pub(crate) layout: Arc<Layout>,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({} {} on {}:{} at {:#x})",
            self.dtype,
            self.layout.shape,
            self.storage.rt.backend.name(),
            self.storage.device,
            self.data_ptr()
        )
    }
}

fn to_bytes<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

impl Tensor {
    /// Records that work queued on `target` uses this tensor's memory, so the pool does
    /// not hand it out again before that work is done (compiled graphs mark their arena,
    /// constants, inputs and outputs this way).
    pub(crate) fn mark_use(&self, target: Target<'_>) {
        self.storage.mark_use(target);
    }

    /// True when this tensor belongs to the runtime sharing `rt`.
    pub(crate) fn runtime_is(&self, rt: &Arc<Inner>) -> bool {
        Arc::ptr_eq(&self.storage.rt, rt)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &Shape {
        &self.layout.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.layout.dims()
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }
    /// Logical device index.
    pub fn device(&self) -> usize {
        self.storage.device
    }
    pub fn meta(&self) -> TensorMeta {
        TensorMeta { dtype: self.dtype, shape: self.layout.shape.clone() }
    }
    /// Bytes of the view's elements.
    pub fn nbytes(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size())
    }
    /// Address of the first element of the view (device address space).
    pub fn data_ptr(&self) -> u64 {
        self.storage.block.ptr.0 + (self.layout.offset * self.dtype.size()) as u64
    }
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }
    /// True when both views share one buffer.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    pub(crate) fn arg(&self) -> TensorArg {
        TensorArg { ptr: self.storage.block.ptr, dtype: self.dtype, layout: self.layout.clone() }
    }

    /// Byte range of the view inside its buffer.
    pub(crate) fn byte_range(&self) -> (usize, usize) {
        let es = self.dtype.size();
        (self.layout.offset.saturating_mul(es), self.layout.span().saturating_mul(es))
    }

    /// Whether both views are non-empty and cover some of the same bytes of one buffer.
    pub(crate) fn overlaps(&self, other: &Tensor) -> bool {
        let ((s, e), (os, oe)) = (self.byte_range(), other.byte_range());
        self.shares_storage(other) && s < oe && os < e && self.nbytes() > 0 && other.nbytes() > 0
    }

    /// A contiguous view of `shape` elements of `dtype` starting `byte_offset` bytes into
    /// this tensor's buffer (graph arenas carve their intermediates this way).
    /// [`Error::Overflow`] when the view's size overflows, [`Error::Invalid`] when it does
    /// not fit the buffer.
    pub fn view_bytes(&self, byte_offset: usize, dtype: DType, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let bytes = shape.checked_bytes("view", dtype)?;
        let end = byte_offset.checked_add(bytes);
        if !byte_offset.is_multiple_of(dtype.size()) || end.is_none_or(|e| e > self.storage.bytes) {
            return Err(Error::invalid(
                "Tensor",
                format!(
                    "a {dtype} {shape} view at byte {byte_offset} does not fit a {}-byte buffer",
                    self.storage.bytes
                ),
            ));
        }
        let mut layout = Layout::contiguous(shape);
        layout.offset = byte_offset / dtype.size();
        Ok(Tensor { storage: self.storage.clone(), dtype, layout: Arc::new(layout) })
    }

    /// A view with a new shape (one entry may be -1); the layout must be contiguous.
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let s = crate::op::resolve_reshape(&self.layout.shape, shape)
            .ok_or_else(|| Error::invalid("Reshape", format!("cannot reshape x {} to {shape:?}", self.layout.shape)))?;
        crate::size::operand_bytes("Reshape", "output", s.dims(), self.dtype)?;
        let layout = self.layout.reshape(s).ok_or_else(|| {
            Error::invalid("Reshape", format!("x {} is not contiguous; copy it first (Op::Copy)", self.layout.shape))
        })?;
        Ok(Tensor { storage: self.storage.clone(), dtype: self.dtype, layout: Arc::new(layout) })
    }
    /// A view with permuted dimensions (no data moves).
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let layout = self
            .layout
            .permute(perm)
            .ok_or_else(|| Error::invalid("Permute", format!("perm {perm:?} does not fit x {}", self.layout.shape)))?;
        Ok(Tensor { storage: self.storage.clone(), dtype: self.dtype, layout: Arc::new(layout) })
    }
    /// A view with two dimensions swapped.
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor> {
        let layout = self
            .layout
            .transpose(a, b)
            .ok_or_else(|| Error::invalid("Permute", format!("axes {a}, {b} do not fit x {}", self.layout.shape)))?;
        Ok(Tensor { storage: self.storage.clone(), dtype: self.dtype, layout: Arc::new(layout) })
    }

    fn check_dtype<T: Element>(&self, what: &str) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid(
                "Tensor",
                format!("{what}: the tensor is {}, asked for {}", self.dtype, T::DTYPE),
            ));
        }
        Ok(())
    }

    /// Copies the tensor to a host array (waits for queued work that writes it and reports
    /// its failures).
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        self.check_dtype::<T>("to_ndarray")?;
        self.storage.settle()?;
        if !self.is_contiguous() {
            return self.gather_to_host();
        }
        let mut v = vec![T::default(); self.numel()];
        if !v.is_empty() {
            let dev = &self.storage.rt.devices[self.storage.device];
            let stream = self.storage.rt.backend.default_stream(dev.ordinal);
            self.storage.rt.backend.copy_to_host(
                dev.ordinal,
                self.storage.block.ptr.offset(self.layout.offset * self.dtype.size()),
                bytemuck::cast_slice_mut(&mut v),
                stream,
            )?;
        }
        ArrayD::from_shape_vec(IxDyn(self.dims()), v).map_err(|e| Error::invalid("Tensor", format!("to_ndarray: {e}")))
    }

    /// A strided view to a host array: the bytes the view reaches come to the host and
    /// are gathered there with the reference tier's strided copy (the same element order
    /// a device `Copy` gives).
    fn gather_to_host<T: Element>(&self) -> Result<ArrayD<T>> {
        let n = self.numel();
        let mut v = vec![T::default(); n];
        if n > 0 {
            let (start, end) = self.byte_range();
            let mut span = vec![0u64; (end - start).div_ceil(8)];
            let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut span)[..end - start];
            let dev = &self.storage.rt.devices[self.storage.device];
            let stream = self.storage.rt.backend.default_stream(dev.ordinal);
            self.storage.rt.backend.copy_to_host(dev.ordinal, self.storage.block.ptr.offset(start), bytes, stream)?;
            let x = crate::reference::In { dtype: self.dtype, dims: self.dims(), strides: &self.layout.strides, bytes };
            let mut o =
                crate::reference::Out { dtype: self.dtype, dims: self.dims(), bytes: bytemuck::cast_slice_mut(&mut v) };
            crate::reference::operands::strided_copy(&x, &mut o)
                .map_err(|e| Error::invalid("Tensor", format!("to_ndarray: {e}")))?;
        }
        ArrayD::from_shape_vec(IxDyn(self.dims()), v).map_err(|e| Error::invalid("Tensor", format!("to_ndarray: {e}")))
    }

    /// Copies host data into this tensor (which must be contiguous and of the same
    /// shape and dtype).
    pub fn copy_from_ndarray<T: Element>(&self, a: &ArrayViewD<'_, T>) -> Result<()> {
        self.check_dtype::<T>("copy_from_ndarray")?;
        if a.shape() != self.dims() || !self.is_contiguous() {
            return Err(Error::invalid(
                "Copy",
                format!("host array {:?} does not match the contiguous tensor {}", a.shape(), self.layout.shape),
            ));
        }
        self.storage.settle()?;
        let std = a.as_standard_layout();
        let Some(s) = std.as_slice() else {
            return Err(Error::invalid("Copy", "host array is not contiguous"));
        };
        if s.is_empty() {
            return Ok(());
        }
        let dev = &self.storage.rt.devices[self.storage.device];
        self.storage.rt.backend.copy_to_device(
            dev.ordinal,
            to_bytes(s),
            self.storage.block.ptr.offset(self.layout.offset * self.dtype.size()),
        )
    }

    /// Copies raw little-endian element bytes into this contiguous tensor.
    pub fn copy_from_bytes(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.nbytes() || !self.is_contiguous() {
            return Err(Error::invalid(
                "Copy",
                format!("{} bytes do not fill the contiguous tensor {} {}", bytes.len(), self.dtype, self.layout.shape),
            ));
        }
        self.storage.settle()?;
        if bytes.is_empty() {
            return Ok(());
        }
        let dev = &self.storage.rt.devices[self.storage.device];
        self.storage.rt.backend.copy_to_device(
            dev.ordinal,
            bytes,
            self.storage.block.ptr.offset(self.layout.offset * self.dtype.size()),
        )
    }

    /// Copies this contiguous tensor's bytes into `dst` (exactly [`Tensor::nbytes`] long),
    /// after the queued work that writes it (whose failures it reports).
    pub(crate) fn copy_to_bytes(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.nbytes() || !self.is_contiguous() {
            return Err(Error::invalid(
                "Copy",
                format!("{} bytes are not the contiguous tensor {} {}", dst.len(), self.dtype, self.layout.shape),
            ));
        }
        self.storage.settle()?;
        if dst.is_empty() {
            return Ok(());
        }
        let dev = &self.storage.rt.devices[self.storage.device];
        let stream = self.storage.rt.backend.default_stream(dev.ordinal);
        self.storage.rt.backend.copy_to_host(
            dev.ordinal,
            self.storage.block.ptr.offset(self.layout.offset * self.dtype.size()),
            dst,
            stream,
        )
    }

    /// Queues a fill of the view's bytes with `value` on `target`'s stream.
    pub(crate) fn fill_byte(&self, value: u8, target: Target<'_>) -> Result<()> {
        if self.nbytes() == 0 || !self.is_contiguous() {
            return Ok(());
        }
        let dev = &self.storage.rt.devices[self.storage.device];
        self.storage.rt.backend.memset(
            dev.ordinal,
            self.storage.block.ptr.offset(self.layout.offset * self.dtype.size()),
            value,
            self.nbytes(),
            target.id,
        )?;
        self.storage.mark_use(target);
        Ok(())
    }

    /// True when [`Tensor::with_host_view`] works on this tensor's device.
    pub fn supports_zero_copy(&self) -> bool {
        self.storage.rt.devices[self.storage.device].info.host_shared
    }

    /// Runs `f` on a host view of the tensor's own memory (no copy). Waits for queued work
    /// first. [`Error::Unsupported`] on devices with separate memory.
    pub fn with_host_view<T: Element, R>(&self, f: impl FnOnce(ArrayViewD<'_, T>) -> R) -> Result<R> {
        self.check_dtype::<T>("with_host_view")?;
        let mut f = Some(f);
        let mut out = None;
        self.map(|bytes, layout| {
            let Ok(elems) = bytemuck::try_cast_slice::<u8, T>(bytes) else {
                return Err(Error::Unsupported("host view of a misaligned buffer".into()));
            };
            let strides: Vec<usize> = layout.strides.clone();
            let v = ArrayViewD::from_shape(IxDyn(layout.dims()).strides(IxDyn(&strides)), &elems[layout.offset..])
                .map_err(|e| Error::invalid("Tensor", format!("host view: {e}")))?;
            if let Some(f) = f.take() {
                out = Some(f(v));
            }
            Ok(())
        })?;
        out.ok_or_else(|| Error::Unsupported("host view".into()))
    }

    /// Like [`Tensor::with_host_view`], mutable.
    pub fn with_host_view_mut<T: Element, R>(&self, f: impl FnOnce(ArrayViewMutD<'_, T>) -> R) -> Result<R> {
        self.check_dtype::<T>("with_host_view_mut")?;
        let mut f = Some(f);
        let mut out = None;
        self.map(|bytes, layout| {
            let Ok(elems) = bytemuck::try_cast_slice_mut::<u8, T>(bytes) else {
                return Err(Error::Unsupported("host view of a misaligned buffer".into()));
            };
            let strides: Vec<usize> = layout.strides.clone();
            let v =
                ArrayViewMutD::from_shape(IxDyn(layout.dims()).strides(IxDyn(&strides)), &mut elems[layout.offset..])
                    .map_err(|e| Error::invalid("Tensor", format!("host view: {e}")))?;
            if let Some(f) = f.take() {
                out = Some(f(v));
            }
            Ok(())
        })?;
        out.ok_or_else(|| Error::Unsupported("host view".into()))
    }

    fn map(&self, mut f: impl FnMut(&mut [u8], &Layout) -> Result<()>) -> Result<()> {
        if !self.supports_zero_copy() {
            return Err(Error::Unsupported(format!(
                "zero-copy host access on {} (device memory is separate; use to_ndarray)",
                self.storage.rt.backend.name()
            )));
        }
        self.storage.settle()?;
        let dev = &self.storage.rt.devices[self.storage.device];
        let mut res = Ok(());
        let layout = Layout::clone(&self.layout);
        let len = self.storage.bytes;
        let mapped = self.storage.rt.backend.map_host(dev.ordinal, self.storage.block.ptr, len, &mut |b| {
            res = f(b, &layout);
        })?;
        if !mapped {
            return Err(Error::Unsupported("the backend refused a host mapping".into()));
        }
        res
    }
}
