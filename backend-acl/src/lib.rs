//! `Backend` for Huawei Ascend NPUs over the CANN libraries (through `acl-sys`).
//!
//! * Devices: count, SoC name (matched on the whole string), memory, cube/vector cores
//!   and nominal peaks per SoC; the calling thread is bound to a device automatically
//!   (`aclrtSetCurrentContext` with the device's context) before every ACL call.
//! * Memory (`memory`): `aclrtMalloc` under the runtime's pool, every address checked
//!   against the device's allocation table (contract rule M1) and 32-byte aligned for
//!   aclnn; frees wait for streams with queued work (M2). Host copies are synchronous
//!   `aclrtMemcpy` from pageable memory (`aclrtMemcpyAsync`, `acl/acl_rt.h`: async copies
//!   only from pinned buffers).
//! * Streams and events (`stream`): `aclrtCreateStreamWithConfig`, falling back to
//!   `aclrtCreateStream`; each stream owns a workspace and a scratch buffer.
//! * Frozen plans (`frozen`): a compiled graph's launches per run arena, whose aclnn
//!   executors are recorded once (phase 1, made repeatable) and relaunched every run with
//!   only the graph's input and output addresses patched.
//! * Kernels (`kernels`): every op of the table through aclnn two-phase calls (tier
//!   `fast`, units Cube / Vector / Scalar), and a host reference tier (the runtime's
//!   reference kernels on copies) that is the ground truth and the implementation chosen
//!   for what the SoC cannot run (BF16, aclnnExp, AddLayerNorm... on the 910).
//!
//! Every ACL and aclnn call goes through `acl_sys::result`. Modules: `probe` (loading
//! CANN, SoC figures, units), `device` (per-device records), `memory`, `stream`,
//! `kernels`, `frozen`, `backend` (the `runtime::Backend` impl), `open` (its start and
//! teardown), `config`, [`error`].

#![allow(clippy::too_many_arguments)]

mod backend;
mod config;
pub mod cost;
mod device;
pub mod emulator;
pub mod error;
mod frozen;
mod kernels;
mod memory;
mod open;
mod probe;
mod stream;

pub use backend::AclBackend;
pub use config::{AclConfig, Fp32Matmul};
pub use emulator::{Emulator, RunCounters};
pub use error::{AclBackendError, Unavailable};
pub use probe::{has_flash_attention, is_910_family};
pub use stream::DEFAULT_STREAM;
