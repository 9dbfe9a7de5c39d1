//! Records of acl-emu's own control functions (never exported by CANN), declared once for
//! the emulator, which fills them, and for its callers (test harnesses). Each crosses the
//! C boundary with its size, which the emulator checks against its own: a caller built
//! against another layout gets `ACL_ERROR_INVALID_PARAM` instead of a short or long write.
//! The run counters (`aclEmuGetRunCounters`) are [`crate::fns::aclEmuRunCounters`].

/// The objects the emulator holds now: `int aclEmuCounters(EmuCounters *out, size_t size)`,
/// `size` being `sizeof(EmuCounters)`. Tests read it at teardown to prove nothing leaked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmuCounters {
    /// Live `aclrtMalloc` blocks, over every device.
    pub device_allocations: u64,
    /// Live `aclrtMallocHost` blocks.
    pub host_allocations: u64,
    /// Live streams (the default streams included).
    pub streams: u64,
    /// Live events.
    pub events: u64,
    /// Live aclnn executors (made repeatable and not destroyed, or not yet launched).
    pub executors: u64,
    /// Live tensor, scalar and int-array descriptors.
    pub descriptors: u64,
    /// Bytes of device memory charged to live blocks.
    pub device_bytes: u64,
    /// Devices set (`aclrtSetDevice`) and not reset.
    pub device_refs: u64,
    /// Model runtime instances made by `aclmdlRICaptureEnd` and not yet destroyed.
    pub models: u64,
}

/// `aclEmuCounters`: fills `*out` when `size` is `sizeof(EmuCounters)`.
pub type AclEmuCountersFn = unsafe extern "C" fn(out: *mut EmuCounters, size: usize) -> i32;
