//! Tensors over host buffers npurt did not allocate: ranges a caller lends to a device for
//! one scoped run ([`crate::Backend::with_host_ranges`]), as
//! [`CompiledGraph::run_host`](crate::CompiledGraph::run_host) does with its inputs and
//! outputs. Such a tensor's storage is no pool block ([`StorageKind::Lent`]): dropping it
//! gives nothing back, and it must not outlive the loan (the backend refuses any work that
//! names the range afterwards, rule M1).

use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::op::TensorMeta;
use crate::pool::{Block, BlockKind};
use crate::runtime::Runtime;
use crate::shape::Layout;
use crate::tensor::{Storage, StorageKind, Tensor};
use std::sync::{Arc, Mutex};

impl Runtime {
    /// A contiguous tensor of `meta` over the lent range starting at `ptr` on logical
    /// device `device`; the range must hold exactly `meta`'s bytes (and be lent for as
    /// long as the tensor is used).
    pub(crate) fn lent_tensor(&self, device: usize, ptr: DevicePtr, meta: &TensorMeta) -> Result<Tensor> {
        self.inner.device(device)?;
        let bytes = meta.shape.checked_bytes("lent tensor", meta.dtype)?;
        if ptr == DevicePtr::NULL || bytes == 0 {
            return Err(Error::invalid("Tensor", format!("a lent {meta} needs a non-empty range")));
        }
        let block = Block { ptr, size: bytes, kind: BlockKind::Small };
        Ok(Tensor {
            storage: Arc::new(Storage {
                rt: self.inner.clone(),
                device,
                block,
                bytes,
                kind: StorageKind::Lent,
                uses: Mutex::new(Vec::new()),
            }),
            dtype: meta.dtype,
            layout: Arc::new(Layout::contiguous(meta.shape.clone())),
        })
    }
}
