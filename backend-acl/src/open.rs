//! The start and teardown of an [`AclBackend`]: loading CANN, opening every visible
//! device and building the kernel table; its accessors; closing the devices when it
//! drops.

use crate::AclConfig;
use crate::backend::AclBackend;
use crate::device::{self, Device};
use crate::error::{AclBackendError, Unavailable};
use crate::kernels::Table;
use crate::probe;
use std::sync::atomic::{AtomicU64, Ordering};

type BResult<T> = std::result::Result<T, AclBackendError>;

static INSTANCES: AtomicU64 = AtomicU64::new(1);

impl AclBackend {
    /// Loads CANN, initialises ACL and opens every visible device. Any reason it
    /// cannot is [`AclBackendError::Unavailable`] ("Ascend not available: ...").
    pub fn new(cfg: AclConfig) -> BResult<AclBackend> {
        let api = probe::load(cfg.lib_dir.clone())?;
        let count = probe::device_count(&api)?;
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let mut b = AclBackend { api, devs: Vec::new(), table: Table::default(), instance };
        for d in 0..count as i32 {
            match Device::open(&b.api, instance, d) {
                Ok(dev) => b.devs.push(dev),
                Err(e) => {
                    // `b` drops here: devices opened so far are closed.
                    return Err(Unavailable::OpenDevice { device: d, source: Box::new(e) }.into());
                }
            }
        }
        let flash =
            b.api.aclnnFlashAttentionScoreGetWorkspaceSize().is_ok() && b.api.aclnnFlashAttentionScore().is_ok();
        let rope = b.api.aclnnRotaryPositionEmbeddingGetWorkspaceSize().is_ok()
            && b.api.aclnnRotaryPositionEmbedding().is_ok();
        b.table = Table::build(b.soc(), &cfg, flash, rope);
        log::info!(
            "acl: {} device(s), SoC {}, libraries from {} ({})",
            b.devs.len(),
            b.soc(),
            b.api.origin(),
            b.api.libraries().join(", ")
        );
        Ok(b)
    }

    /// The SoC of device 0.
    pub fn soc(&self) -> &str {
        self.devs.first().map_or("", |d| d.soc.as_str())
    }

    /// Where the CANN libraries were loaded from.
    pub fn library_origin(&self) -> String {
        self.api.origin().to_string()
    }

    /// acl-emu's run counters and modelled clock; `None` over a real CANN host.
    pub fn emulator(&self) -> Option<crate::emulator::Emulator> {
        crate::emulator::Emulator::probe(&self.api)
    }

    pub(crate) fn dev(&self, d: usize) -> BResult<&Device> {
        self.devs.get(d).ok_or(AclBackendError::NoDevice(d))
    }

    /// Device `d`, with the calling thread bound to it.
    pub(crate) fn bind(&self, d: usize) -> BResult<&Device> {
        let dev = self.dev(d)?;
        dev.bind(&self.api, self.instance)?;
        Ok(dev)
    }
}

impl Drop for AclBackend {
    fn drop(&mut self) {
        for dev in std::mem::take(&mut self.devs) {
            match dev.bind(&self.api, self.instance) {
                Ok(()) => dev.close(&self.api),
                Err(e) => log::error!("acl:{}: cannot bind the device for its teardown: {e}", dev.id),
            }
        }
        device::unbind(self.instance);
        // aclFinalize is deliberately not called: it is process-wide, other users of ACL
        // may remain, and CANN forbids calling it from destructors (`aclFinalize`, `acl/acl.h`).
    }
}

impl std::fmt::Debug for AclBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AclBackend({} device(s), {})", self.devs.len(), self.soc())
    }
}
