//! Pins the EP-side structs to the field order of `onnxruntime_ep_c_api.h` (microsoft/onnxruntime,
//! the version-1.24 members of each struct; ORT only appends). Each list below is the header's
//! field order; a field moved, dropped or inserted here shifts an offset and fails the test.
//! Every member is a pointer after a `uint32_t` version, so member i sits at 8 * i on the 64-bit
//! targets this library builds for.

use std::mem::{offset_of, size_of};

use npurt_ort_ep::abi::{
    EP_API_VERSION, OrtDataTransferImpl, OrtEp, OrtEpApi, OrtEpFactory, OrtNodeComputeInfo, OrtNodeFusionOptions,
};

const P: usize = size_of::<*const u8>();

macro_rules! pin {
    ($ty:ty, [$($field:ident),* $(,)?]) => {{
        let fields: &[(&str, usize)] = &[$((stringify!($field), offset_of!($ty, $field))),*];
        for (i, (name, off)) in fields.iter().enumerate() {
            assert_eq!(*off, i * P, "{}::{} is member {} of the header", stringify!($ty), name, i);
        }
        assert_eq!(size_of::<$ty>(), fields.len() * P, "{} has exactly the header's members", stringify!($ty));
    }};
}

#[test]
fn api_version_is_1_24() {
    assert_eq!(EP_API_VERSION, 24);
    assert_eq!(ort_sys::ORT_API_VERSION, EP_API_VERSION);
}

#[test]
fn ep_factory_matches_the_header() {
    pin!(
        OrtEpFactory,
        [
            ort_version_supported,
            GetName,
            GetVendor,
            GetSupportedDevices,
            CreateEp,
            ReleaseEp,
            GetVendorId,
            GetVersion,
            ValidateCompiledModelCompatibilityInfo,
            CreateAllocator,
            ReleaseAllocator,
            CreateDataTransfer,
            IsStreamAware,
            CreateSyncStreamForDevice,
            GetHardwareDeviceIncompatibilityDetails,
            CreateExternalResourceImporterForDevice,
            GetNumCustomOpDomains,
            GetCustomOpDomains,
        ]
    );
}

#[test]
fn ep_matches_the_header() {
    pin!(
        OrtEp,
        [
            ort_version_supported,
            GetName,
            GetCapability,
            Compile,
            ReleaseNodeComputeInfos,
            GetPreferredDataLayout,
            ShouldConvertDataLayoutForOp,
            SetDynamicOptions,
            OnRunStart,
            OnRunEnd,
            CreateAllocator,
            CreateSyncStreamForDevice,
            GetCompiledModelCompatibilityInfo,
            GetKernelRegistry,
            IsConcurrentRunSupported,
        ]
    );
}

#[test]
fn node_compute_info_and_data_transfer_match_the_header() {
    pin!(OrtNodeComputeInfo, [ort_version_supported, CreateState, Compute, ReleaseState]);
    pin!(OrtDataTransferImpl, [ort_version_supported, Release, CanCopy, CopyTensors]);
    assert_eq!(offset_of!(OrtNodeFusionOptions, drop_constant_initializers), 4);
    assert_eq!(size_of::<OrtNodeFusionOptions>(), 8);
}

#[test]
fn ep_api_prefix_matches_the_header() {
    // OrtEpApi has no version field: entry i sits at 8 * i. Declared up to ReleaseHardwareDevice.
    let fields: &[(&str, usize)] = &[
        ("CreateEpDevice", offset_of!(OrtEpApi, CreateEpDevice)),
        ("ReleaseEpDevice", offset_of!(OrtEpApi, ReleaseEpDevice)),
        ("EpGraphSupportInfo_AddNodesToFuse", offset_of!(OrtEpApi, EpGraphSupportInfo_AddNodesToFuse)),
        ("EpGraphSupportInfo_AddSingleNode", offset_of!(OrtEpApi, EpGraphSupportInfo_AddSingleNode)),
        ("NodeComputeContext_NodeName", offset_of!(OrtEpApi, NodeComputeContext_NodeName)),
        ("EpDevice_AddAllocatorInfo", offset_of!(OrtEpApi, EpDevice_AddAllocatorInfo)),
        ("MemoryInfo_GetMemoryDevice", offset_of!(OrtEpApi, MemoryInfo_GetMemoryDevice)),
        ("Value_GetMemoryDevice", offset_of!(OrtEpApi, Value_GetMemoryDevice)),
        ("MemoryDevice_AreEqual", offset_of!(OrtEpApi, MemoryDevice_AreEqual)),
        ("MemoryDevice_GetDeviceType", offset_of!(OrtEpApi, MemoryDevice_GetDeviceType)),
        ("MemoryDevice_GetMemoryType", offset_of!(OrtEpApi, MemoryDevice_GetMemoryType)),
        ("MemoryDevice_GetVendorId", offset_of!(OrtEpApi, MemoryDevice_GetVendorId)),
        ("MemoryDevice_GetDeviceId", offset_of!(OrtEpApi, MemoryDevice_GetDeviceId)),
        ("SyncStream_GetImpl", offset_of!(OrtEpApi, SyncStream_GetImpl)),
        ("SyncStream_GetSyncId", offset_of!(OrtEpApi, SyncStream_GetSyncId)),
        ("GetSyncIdForLastWaitOnSyncStream", offset_of!(OrtEpApi, GetSyncIdForLastWaitOnSyncStream)),
        ("CreateHardwareDevice", offset_of!(OrtEpApi, CreateHardwareDevice)),
        ("ReleaseHardwareDevice", offset_of!(OrtEpApi, ReleaseHardwareDevice)),
    ];
    for (i, (name, off)) in fields.iter().enumerate() {
        assert_eq!(*off, i * P, "OrtEpApi::{name} is entry {i} of the header");
    }
    assert_eq!(size_of::<OrtEpApi>(), fields.len() * P);
}

#[test]
fn ort_api_entries_used_sit_where_ort_sys_put_them() {
    // The OrtApi table comes from ort-sys (api-24). These offsets are the ones that crate's
    // version declares; a bump of ort-sys that moves one fails here. That they match the ORT
    // that loads the library is checked end to end by python/tests/test_ort_ep.py.
    use ort_sys::OrtApi;
    assert_eq!(offset_of!(OrtApi, CreateStatus), 0);
    assert_eq!(offset_of!(OrtApi, GetErrorMessage), 2 * P);
    let ep_api = offset_of!(OrtApi, GetEpApi) / P;
    let kvps = offset_of!(OrtApi, CreateKeyValuePairs) / P;
    let hw_type = offset_of!(OrtApi, HardwareDevice_Type) / P;
    let config = offset_of!(OrtApi, GetSessionOptionsConfigEntries) / P;
    assert_eq!((kvps, hw_type, ep_api, config), KNOWN);
}

// The indices of CreateKeyValuePairs, HardwareDevice_Type, GetEpApi and
// GetSessionOptionsConfigEntries in the OrtApi table of ORT 1.24 (as ort-sys 2.0.0-rc.15 declares it).
const KNOWN: (usize, usize, usize, usize) = (295, 307, 317, 379);
