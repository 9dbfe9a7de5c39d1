//! Handles, enumerations, flags and structs of the CANN C ABI (`acl/acl_base.h`,
//! `acl/acl_rt.h`, `aclnn/acl_meta.h`).
//!
//! Every C enum is a 4-byte `int`; it is modelled as an `i32` newtype with named
//! constants, never as a Rust `enum`, because values read back from C may be outside
//! the set a Rust enum could represent.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::ffi::{c_char, c_void};

/// `typedef int aclError;` (0 = `ACL_SUCCESS`).
pub type aclError = i32;
/// `typedef int32_t aclnnStatus;` (0 = success).
pub type aclnnStatus = i32;
/// `typedef uint16_t aclFloat16;` — an fp16 bit pattern.
pub type aclFloat16 = u16;

/// `void *` runtime handles.
pub type aclrtStream = *mut c_void;
pub type aclrtEvent = *mut c_void;
pub type aclrtContext = *mut c_void;
pub type aclrtNotify = *mut c_void;
pub type aclrtLabel = *mut c_void;
pub type aclrtDrvMemHandle = *mut c_void;
pub type aclrtAllocatorDesc = *mut c_void;
pub type aclrtAllocator = *mut c_void;
pub type aclrtAllocatorBlock = *mut c_void;
pub type aclrtAllocatorAddr = *mut c_void;
pub type aclrtMemPool = *mut c_void;
/// A model runtime instance: what `aclmdlRICaptureEnd` makes of a captured stream (`acl_mdl.h`).
pub type aclmdlRI = *mut c_void;

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}

opaque!(
    /// aclnn tensor descriptor (host object over device memory).
    aclTensor,
    aclScalar,
    aclIntArray,
    aclFloatArray,
    aclBoolArray,
    aclTensorList,
    aclScalarList,
    /// aclnn executor returned by phase 1.
    aclOpExecutor,
    aclDataBuffer,
    /// Extension of `aclrtUtilizationInfo` (must be passed as NULL).
    aclrtUtilizationExtendInfo,
);

/// `void (*)(void *userData)`
pub type aclrtCallback = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
/// `void (*)(void *args)`
pub type aclrtHostFunc = Option<unsafe extern "C" fn(args: *mut c_void)>;
/// `void *(*)(aclrtAllocator allocator, size_t size)`
pub type aclrtAllocatorAllocFunc = Option<unsafe extern "C" fn(allocator: aclrtAllocator, size: usize) -> *mut c_void>;
/// `void (*)(aclrtAllocator allocator, aclrtAllocatorBlock block)`
pub type aclrtAllocatorFreeFunc = Option<unsafe extern "C" fn(allocator: aclrtAllocator, block: aclrtAllocatorBlock)>;
/// `void *(*)(aclrtAllocator allocator, size_t size, aclrtAllocatorAddr addr)`
pub type aclrtAllocatorAllocAdviseFunc =
    Option<unsafe extern "C" fn(allocator: aclrtAllocator, size: usize, addr: aclrtAllocatorAddr) -> *mut c_void>;
/// `void *(*)(aclrtAllocatorBlock block)`
pub type aclrtAllocatorGetAddrFromBlockFunc = Option<unsafe extern "C" fn(block: aclrtAllocatorBlock) -> *mut c_void>;

macro_rules! acl_enum {
    ($(#[$m:meta])* $name:ident { $($c:ident = $v:expr),* $(,)? }) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
        pub struct $name(pub i32);
        impl $name {
            $(pub const $c: $name = $name($v);)*
            /// The C name of this value, if it is one declared here.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(v if v == $v => Some(stringify!($c)),)*
                    _ => None,
                }
            }
        }
        $(pub const $c: $name = $name($v);)*
    };
}

acl_enum!(
    /// `aclDataType`
    aclDataType {
        ACL_DT_UNDEFINED = -1, ACL_FLOAT = 0, ACL_FLOAT16 = 1, ACL_INT8 = 2, ACL_INT32 = 3, ACL_UINT8 = 4,
        ACL_INT16 = 6, ACL_UINT16 = 7, ACL_UINT32 = 8, ACL_INT64 = 9, ACL_UINT64 = 10, ACL_DOUBLE = 11,
        ACL_BOOL = 12, ACL_STRING = 13, ACL_COMPLEX64 = 16, ACL_COMPLEX128 = 17, ACL_BF16 = 27, ACL_INT4 = 29,
        ACL_UINT1 = 30, ACL_COMPLEX32 = 33, ACL_HIFLOAT8 = 34, ACL_FLOAT8_E5M2 = 35, ACL_FLOAT8_E4M3FN = 36,
        ACL_FLOAT8_E8M0 = 37, ACL_FLOAT6_E3M2 = 38, ACL_FLOAT6_E2M3 = 39, ACL_FLOAT4_E2M1 = 40,
        ACL_FLOAT4_E1M2 = 41,
    }
);

impl aclDataType {
    /// Bytes per element for the byte-addressable types (what `aclDataTypeSize` returns);
    /// `None` for strings and sub-byte types.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            ACL_FLOAT | ACL_INT32 | ACL_UINT32 | ACL_COMPLEX32 => 4,
            ACL_FLOAT16 | ACL_BF16 | ACL_INT16 | ACL_UINT16 => 2,
            ACL_INT8 | ACL_UINT8 | ACL_BOOL | ACL_HIFLOAT8 | ACL_FLOAT8_E5M2 | ACL_FLOAT8_E4M3FN | ACL_FLOAT8_E8M0 => 1,
            ACL_INT64 | ACL_UINT64 | ACL_DOUBLE | ACL_COMPLEX64 => 8,
            ACL_COMPLEX128 => 16,
            _ => return None,
        })
    }
}

acl_enum!(
    /// `aclFormat`
    aclFormat {
        ACL_FORMAT_UNDEFINED = -1, ACL_FORMAT_NCHW = 0, ACL_FORMAT_NHWC = 1, ACL_FORMAT_ND = 2,
        ACL_FORMAT_NC1HWC0 = 3, ACL_FORMAT_FRACTAL_Z = 4, ACL_FORMAT_NC1HWC0_C04 = 12, ACL_FORMAT_HWCN = 16,
        ACL_FORMAT_NDHWC = 27, ACL_FORMAT_FRACTAL_NZ = 29, ACL_FORMAT_NCDHW = 30, ACL_FORMAT_NDC1HWC0 = 32,
        ACL_FRACTAL_Z_3D = 33, ACL_FORMAT_NC = 35, ACL_FORMAT_NCL = 47, ACL_FORMAT_FRACTAL_NZ_C0_16 = 50,
        ACL_FORMAT_FRACTAL_NZ_C0_32 = 51, ACL_FORMAT_FRACTAL_NZ_C0_2 = 52, ACL_FORMAT_FRACTAL_NZ_C0_4 = 53,
        ACL_FORMAT_FRACTAL_NZ_C0_8 = 54,
    }
);

acl_enum!(
    /// `aclrtMemMallocPolicy`
    aclrtMemMallocPolicy {
        ACL_MEM_MALLOC_HUGE_FIRST = 0, ACL_MEM_MALLOC_HUGE_ONLY = 1, ACL_MEM_MALLOC_NORMAL_ONLY = 2,
        ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3, ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4, ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
        ACL_MEM_MALLOC_HUGE1G_ONLY = 6, ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7, ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x100,
        ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000, ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
    }
);

acl_enum!(
    /// `aclrtMemcpyKind`
    aclrtMemcpyKind {
        ACL_MEMCPY_HOST_TO_HOST = 0, ACL_MEMCPY_HOST_TO_DEVICE = 1, ACL_MEMCPY_DEVICE_TO_HOST = 2,
        ACL_MEMCPY_DEVICE_TO_DEVICE = 3, ACL_MEMCPY_DEFAULT = 4, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7,
    }
);

acl_enum!(
    /// `aclrtRunMode`
    aclrtRunMode { ACL_DEVICE = 0, ACL_HOST = 1 }
);

acl_enum!(
    /// `aclrtEventStatus` (deprecated query: COMPLETE is 0).
    aclrtEventStatus { ACL_EVENT_STATUS_COMPLETE = 0, ACL_EVENT_STATUS_NOT_READY = 1, ACL_EVENT_STATUS_RESERVED = 2 }
);

acl_enum!(
    /// `aclrtEventRecordedStatus` (current query: COMPLETE is 1).
    aclrtEventRecordedStatus { ACL_EVENT_RECORDED_STATUS_NOT_READY = 0, ACL_EVENT_RECORDED_STATUS_COMPLETE = 1 }
);

acl_enum!(
    /// `aclmdlRICaptureMode`: which threads may call the non-stream-ordered functions
    /// (`aclrtMemcpy`, `aclrtMemset`, …) while a stream is being captured.
    aclmdlRICaptureMode {
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL = 0, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL = 1,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED = 2,
    }
);

acl_enum!(
    /// `aclmdlRICaptureStatus`
    aclmdlRICaptureStatus {
        ACL_MODEL_RI_CAPTURE_STATUS_NONE = 0, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE = 1,
        ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED = 2,
    }
);

acl_enum!(
    /// `aclrtEventWaitStatus`
    aclrtEventWaitStatus {
        ACL_EVENT_WAIT_STATUS_COMPLETE = 0, ACL_EVENT_WAIT_STATUS_NOT_READY = 1,
        ACL_EVENT_WAIT_STATUS_RESERVED = 0xffff,
    }
);

acl_enum!(
    /// `aclrtStreamStatus`
    aclrtStreamStatus {
        ACL_STREAM_STATUS_COMPLETE = 0, ACL_STREAM_STATUS_NOT_READY = 1, ACL_STREAM_STATUS_RESERVED = 0xffff,
    }
);

acl_enum!(
    /// `aclrtCallbackBlockType`
    aclrtCallbackBlockType { ACL_CALLBACK_NO_BLOCK = 0, ACL_CALLBACK_BLOCK = 1 }
);

acl_enum!(
    /// `aclrtMemAttr`
    aclrtMemAttr {
        ACL_DDR_MEM = 0, ACL_HBM_MEM = 1, ACL_DDR_MEM_HUGE = 2, ACL_DDR_MEM_NORMAL = 3, ACL_HBM_MEM_HUGE = 4,
        ACL_HBM_MEM_NORMAL = 5, ACL_DDR_MEM_P2P_HUGE = 6, ACL_DDR_MEM_P2P_NORMAL = 7, ACL_HBM_MEM_P2P_HUGE = 8,
        ACL_HBM_MEM_P2P_NORMAL = 9, ACL_HBM_MEM_HUGE1G = 10, ACL_HBM_MEM_P2P_HUGE1G = 11, ACL_MEM_NORMAL = 12,
        ACL_MEM_HUGE = 13, ACL_MEM_HUGE1G = 14, ACL_MEM_P2P_NORMAL = 15, ACL_MEM_P2P_HUGE = 16,
        ACL_MEM_P2P_HUGE1G = 17,
    }
);

acl_enum!(
    /// `aclSysParamOpt`
    aclSysParamOpt { ACL_OPT_DETERMINISTIC = 0, ACL_OPT_ENABLE_DEBUG_KERNEL = 1, ACL_OPT_STRONG_CONSISTENCY = 2 }
);

acl_enum!(
    /// `aclDeviceInfo` (for `aclGetDeviceCapability`)
    aclDeviceInfo {
        ACL_DEVICE_INFO_UNDEFINED = -1, ACL_DEVICE_INFO_AI_CORE_NUM = 0, ACL_DEVICE_INFO_VECTOR_CORE_NUM = 1,
        ACL_DEVICE_INFO_L2_SIZE = 2,
    }
);

acl_enum!(
    /// `aclCANNPackageName`
    aclCANNPackageName {
        ACL_PKG_NAME_CANN = 0, ACL_PKG_NAME_RUNTIME = 1, ACL_PKG_NAME_COMPILER = 2, ACL_PKG_NAME_HCCL = 3,
        ACL_PKG_NAME_TOOLKIT = 4, ACL_PKG_NAME_OPP = 5, ACL_PKG_NAME_OPP_KERNEL = 6, ACL_PKG_NAME_DRIVER = 7,
    }
);

acl_enum!(
    /// `aclrtLastErrLevel`
    aclrtLastErrLevel { ACL_RT_THREAD_LEVEL = 0 }
);

acl_enum!(
    /// `aclrtHostRegisterType`
    aclrtHostRegisterType { ACL_HOST_REGISTER_MAPPED = 0, ACL_HOST_REGISTER_IOMEMORY = 4, ACL_HOST_REGISTER_READONLY = 8 }
);

acl_enum!(
    /// `aclrtMemLocationType`
    aclrtMemLocationType {
        ACL_MEM_LOCATION_TYPE_HOST = 0, ACL_MEM_LOCATION_TYPE_DEVICE = 1, ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
        ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4,
    }
);

acl_enum!(
    /// `aclrtMemHandleType`
    aclrtMemHandleType { ACL_MEM_HANDLE_TYPE_NONE = 0, ACL_MEM_HANDLE_TYPE_POSIX = 2 }
);

acl_enum!(
    /// `aclrtMemAllocationType`
    aclrtMemAllocationType { ACL_MEM_ALLOCATION_TYPE_PINNED = 0 }
);

acl_enum!(
    /// `aclrtMemGranularityOptions`
    aclrtMemGranularityOptions {
        ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
        ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xffff,
    }
);

acl_enum!(
    /// `aclrtDeviceStatus`
    aclrtDeviceStatus { ACL_RT_DEVICE_STATUS_NORMAL = 0, ACL_RT_DEVICE_STATUS_ABNORMAL = 1, ACL_RT_DEVICE_STATUS_END = 0xffff }
);

acl_enum!(
    /// `aclrtDevAttr` (selected values, for `aclrtGetDeviceInfo`)
    aclrtDevAttr {
        ACL_DEV_ATTR_AICPU_CORE_NUM = 1, ACL_DEV_ATTR_AICORE_CORE_NUM = 101, ACL_DEV_ATTR_CUBE_CORE_NUM = 102,
        ACL_DEV_ATTR_VECTOR_CORE_NUM = 201, ACL_DEV_ATTR_WARP_SIZE = 202, ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE = 204,
        ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE = 301, ACL_DEV_ATTR_L2_CACHE_SIZE = 302, ACL_DEV_ATTR_PHY_CHIP_ID = 402,
        ACL_DEV_ATTR_IS_VIRTUAL = 501, ACL_DEV_ATTR_NPU_ARCH = 601,
    }
);

acl_enum!(
    /// `aclrtMemAccessFlags` (values not bound: npurt passes none).
    aclrtMemAccessFlags {}
);

acl_enum!(
    /// `aclrtMemPoolAttr` (values not bound: npurt passes none).
    aclrtMemPoolAttr {}
);

// ---- flag macros (§B.4) ----
pub const ACL_EVENT_SYNC: u32 = 0x1;
pub const ACL_EVENT_CAPTURE_STREAM_PROGRESS: u32 = 0x2;
pub const ACL_EVENT_TIME_LINE: u32 = 0x8;
pub const ACL_EVENT_DEVICE_USE_ONLY: u32 = 0x10;
pub const ACL_EVENT_EXTERNAL: u32 = 0x20;
pub const ACL_EVENT_IPC: u32 = 0x40;
pub const ACL_STREAM_FAST_LAUNCH: u32 = 0x1;
pub const ACL_STREAM_FAST_SYNC: u32 = 0x2;
pub const ACL_STREAM_PERSISTENT: u32 = 0x4;
pub const ACL_STREAM_HUGE: u32 = 0x8;
pub const ACL_STREAM_CPU_SCHEDULE: u32 = 0x10;
pub const ACL_STREAM_DEVICE_USE_ONLY: u32 = 0x20;
pub const ACL_CONTINUE_ON_FAILURE: u64 = 0;
pub const ACL_STOP_ON_FAILURE: u64 = 1;
pub const ACL_MAJOR_VERSION: i32 = 1;
pub const ACL_MINOR_VERSION: i32 = 17;
pub const ACL_PATCH_VERSION: i32 = 0;
pub const ACL_PKG_VERSION_MAX_SIZE: usize = 128;
pub const ACL_PKG_VERSION_PARTS_MAX_SIZE: usize = 64;

/// `cubeMathType` values of the matmul-family aclnn ops (`int8_t`).
pub mod cube_math {
    pub const KEEP_DTYPE: i8 = 0;
    pub const ALLOW_FP32_DOWN_PRECISION: i8 = 1;
    pub const USE_FP16: i8 = 2;
    pub const USE_HF32: i8 = 3;
    pub const USE_FP32_ADD: i8 = 4;
}

// ---- structs (§B.5) ----

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtMemLocation {
    pub id: u32,
    pub type_: aclrtMemLocationType,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtPhysicalMemProp {
    pub handleType: aclrtMemHandleType,
    pub allocationType: aclrtMemAllocationType,
    pub memAttr: aclrtMemAttr,
    pub location: aclrtMemLocation,
    pub reserve: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtMemPoolProps {
    pub allocType: aclrtMemAllocationType,
    pub handleType: aclrtMemHandleType,
    pub location: aclrtMemLocation,
    pub maxSize: usize,
    pub reserved: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtPtrAttributes {
    pub location: aclrtMemLocation,
    pub pageSize: u32,
    pub rsv: [u32; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct aclrtMemUsageInfo {
    pub name: [c_char; 32],
    pub curMemSize: u64,
    pub memPeakSize: u64,
    pub reserved: [usize; 8],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct aclrtUtilizationInfo {
    pub cubeUtilization: i32,
    pub vectorUtilization: i32,
    pub aicpuUtilization: i32,
    pub memoryUtilization: i32,
    /// Must be NULL.
    pub utilizationExtend: *mut aclrtUtilizationExtendInfo,
}

impl Default for aclrtUtilizationInfo {
    fn default() -> Self {
        aclrtUtilizationInfo {
            cubeUtilization: 0,
            vectorUtilization: 0,
            aicpuUtilization: 0,
            memoryUtilization: 0,
            utilizationExtend: std::ptr::null_mut(),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtMemAccessDesc {
    pub flags: aclrtMemAccessFlags,
    pub location: aclrtMemLocation,
    pub rsv: [u8; 12],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct aclCANNPackageVersion {
    pub version: [c_char; 128],
    pub majorVersion: [c_char; 64],
    pub minorVersion: [c_char; 64],
    pub releaseVersion: [c_char; 64],
    pub patchVersion: [c_char; 64],
    pub reserved: [c_char; 128],
}

// Layouts from §B.5 (LP64): a mismatch fails the build.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<aclrtMemLocation>() == 8 && align_of::<aclrtMemLocation>() == 4);
    assert!(size_of::<aclrtPhysicalMemProp>() == 32 && align_of::<aclrtPhysicalMemProp>() == 8);
    assert!(offset_of!(aclrtPhysicalMemProp, memAttr) == 8);
    assert!(offset_of!(aclrtPhysicalMemProp, location) == 12);
    assert!(offset_of!(aclrtPhysicalMemProp, reserve) == 24);
    assert!(size_of::<aclrtMemPoolProps>() == 56 && align_of::<aclrtMemPoolProps>() == 8);
    assert!(offset_of!(aclrtMemPoolProps, location) == 8);
    assert!(offset_of!(aclrtMemPoolProps, maxSize) == 16);
    assert!(offset_of!(aclrtMemPoolProps, reserved) == 24);
    assert!(size_of::<aclrtPtrAttributes>() == 28 && align_of::<aclrtPtrAttributes>() == 4);
    assert!(offset_of!(aclrtPtrAttributes, pageSize) == 8);
    assert!(size_of::<aclrtMemUsageInfo>() == 112 && align_of::<aclrtMemUsageInfo>() == 8);
    assert!(offset_of!(aclrtMemUsageInfo, curMemSize) == 32);
    assert!(offset_of!(aclrtMemUsageInfo, reserved) == 48);
    assert!(size_of::<aclrtUtilizationInfo>() == 24 && align_of::<aclrtUtilizationInfo>() == 8);
    assert!(offset_of!(aclrtUtilizationInfo, utilizationExtend) == 16);
    assert!(size_of::<aclrtMemAccessDesc>() == 24 && align_of::<aclrtMemAccessDesc>() == 4);
    assert!(offset_of!(aclrtMemAccessDesc, location) == 4);
    assert!(offset_of!(aclrtMemAccessDesc, rsv) == 12);
    assert!(size_of::<aclCANNPackageVersion>() == 512);
    assert!(size_of::<aclDataType>() == 4 && size_of::<aclrtStream>() == size_of::<*mut c_void>());
};
