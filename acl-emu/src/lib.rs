//! acl-emu: a stand-in for the CANN libraries, for tests. **Test infrastructure, never a
//! fallback.**
//!
//! Built as a `cdylib`, it exports — with the exact C signatures `acl-sys` declares
//! (checked at compile time in [`signatures`]) — the ACL runtime ([`rt`]) and aclnn
//! ([`aclnn`]) symbols `backend-acl` uses, and computes on the host with the runtime's
//! reference kernels (`runtime::reference`):
//!
//! * streams are asynchronous in-order queues (one worker thread each); events order
//!   them; `aclrtSynchronize*` wait and report the first asynchronous error;
//! * device memory is reserved address space with no access rights (`mmap(PROT_NONE)`):
//!   a host dereference of a device pointer crashes; the emulator translates addresses
//!   to host buffers internally;
//! * the aclnn protocol is enforced with the real codes: launch without phase 1, a
//!   one-shot executor launched twice, a workspace smaller than asked, unaligned
//!   addresses, BF16 (and aclnnExp, FP32 cube math without cubeMathType 1) on the 910;
//! * knobs: `ACL_EMU_DEVICES` (1), `ACL_EMU_MEMORY` (1G per device), `ACL_EMU_SOC`
//!   (`Ascend910A`), `ACL_EMU_WORKSPACE` (4K), `ACL_EMU_FAIL=aclrtMalloc:3:207001,...`
//!   (the 3rd call of aclrtMalloc fails with 207001), `ACL_EMU_COMPUTE` (1; 0: model
//!   only — every check, call counter and modelled time as with 1, but kernels write
//!   nothing, so that whole models are costed in seconds); the same at run time through
//!   `aclEmuConfigure("devices=2;memory=64M;fail=...")`;
//! * `aclEmuCounters` reports outstanding allocations, streams, events, executors and
//!   descriptors; `aclEmuCallCount(name)` how often a symbol was called;
//! * `aclEmuGetRunCounters` what was done since `aclEmuResetRunCounters`: aclnn phase-1
//!   and phase-2 calls, copies by direction with their bytes, allocations,
//!   synchronisations, replays, and the **modelled** device time ([`model`], [`clock`]):
//!   each kernel advances its stream's clock by a roofline estimate for the SoC, each copy
//!   by its bytes over PCIe or HBM, events carry modelled timestamps, so
//!   `aclrtEventElapsedTime` returns modelled milliseconds.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod aclnn;
pub mod clock;
pub mod compute;
pub mod config;
pub mod control;
pub mod descriptors;
pub mod error;
mod ffi;
pub mod ifa_kernel;
pub mod kernel;
pub mod model;
pub mod ops;
pub mod rt;
pub mod signatures;
pub mod state;

pub use aclnn::{basics::*, copy::*, elementwise::*, gather::*, matmul::*, norm::*, reduce::*};
pub use control::*;
pub use rt::{capture::*, context::*, device::*, event::*, init::*, memory::*, stream::*};
pub use signatures::EXPORTED;
