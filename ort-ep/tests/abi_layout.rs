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
    // GetSupportedDevices reads each device's vendor id (NVIDIA's GPUs pair with CUDA devices);
    // it follows HardwareDevice_Type in the header.
    assert_eq!(offset_of!(OrtApi, HardwareDevice_VendorId) / P, hw_type + 1);
    assert_eq!(offset_of!(OrtApi, HardwareDevice_VendorId) / P, 308);
}

// The indices of CreateKeyValuePairs, HardwareDevice_Type, GetEpApi and
// GetSessionOptionsConfigEntries in the OrtApi table of ORT 1.24 (as ort-sys 2.0.0-rc.15 declares it).
const KNOWN: (usize, usize, usize, usize) = (295, 307, 317, 379);

#[test]
fn ort_api_entries_of_the_graph_and_kernel_context_sit_where_ort_sys_put_them() {
    // The entries GetCapability, Compile and Compute call, at the indices ort-sys 2.0.0-rc.15
    // (api-24) declares; python/tests/test_ort_ep.py calls every one of them through the ORT
    // that loads the library (a wrong index would call another function).
    use ort_sys::OrtApi;
    let got: Vec<(&str, usize)> = vec![
        ("GetTensorMutableData", offset_of!(OrtApi, GetTensorMutableData) / P),
        ("CastTypeInfoToTensorInfo", offset_of!(OrtApi, CastTypeInfoToTensorInfo) / P),
        ("GetTensorElementType", offset_of!(OrtApi, GetTensorElementType) / P),
        ("GetDimensionsCount", offset_of!(OrtApi, GetDimensionsCount) / P),
        ("GetDimensions", offset_of!(OrtApi, GetDimensions) / P),
        ("KernelContext_GetInput", offset_of!(OrtApi, KernelContext_GetInput) / P),
        ("KernelContext_GetOutput", offset_of!(OrtApi, KernelContext_GetOutput) / P),
        ("Logger_LogMessage", offset_of!(OrtApi, Logger_LogMessage) / P),
        ("ReadOpAttr", offset_of!(OrtApi, ReadOpAttr) / P),
        ("GetValueInfoName", offset_of!(OrtApi, GetValueInfoName) / P),
        ("GetValueInfoTypeInfo", offset_of!(OrtApi, GetValueInfoTypeInfo) / P),
        ("ValueInfo_GetInitializerValue", offset_of!(OrtApi, ValueInfo_GetInitializerValue) / P),
        ("ValueInfo_IsConstantInitializer", offset_of!(OrtApi, ValueInfo_IsConstantInitializer) / P),
        ("Graph_GetNumNodes", offset_of!(OrtApi, Graph_GetNumNodes) / P),
        ("Graph_GetNodes", offset_of!(OrtApi, Graph_GetNodes) / P),
        ("Node_GetName", offset_of!(OrtApi, Node_GetName) / P),
        ("Node_GetOperatorType", offset_of!(OrtApi, Node_GetOperatorType) / P),
        ("Node_GetDomain", offset_of!(OrtApi, Node_GetDomain) / P),
        ("Node_GetSinceVersion", offset_of!(OrtApi, Node_GetSinceVersion) / P),
        ("Node_GetNumInputs", offset_of!(OrtApi, Node_GetNumInputs) / P),
        ("Node_GetInputs", offset_of!(OrtApi, Node_GetInputs) / P),
        ("Node_GetNumOutputs", offset_of!(OrtApi, Node_GetNumOutputs) / P),
        ("Node_GetOutputs", offset_of!(OrtApi, Node_GetOutputs) / P),
        ("Node_GetNumAttributes", offset_of!(OrtApi, Node_GetNumAttributes) / P),
        ("Node_GetAttributes", offset_of!(OrtApi, Node_GetAttributes) / P),
        ("OpAttr_GetType", offset_of!(OrtApi, OpAttr_GetType) / P),
        ("OpAttr_GetName", offset_of!(OrtApi, OpAttr_GetName) / P),
        ("GetTensorData", offset_of!(OrtApi, GetTensorData) / P),
        (
            "GetTensorElementTypeAndShapeDataReference",
            offset_of!(OrtApi, GetTensorElementTypeAndShapeDataReference) / P,
        ),
        ("TensorTypeAndShape_HasShape", offset_of!(OrtApi, TensorTypeAndShape_HasShape) / P),
        ("OpAttr_GetTensorAttributeAsOrtValue", offset_of!(OrtApi, OpAttr_GetTensorAttributeAsOrtValue) / P),
        ("ReleaseValue", offset_of!(OrtApi, ReleaseValue) / P),
    ];
    let want: &[(&str, usize)] = &[
        ("GetTensorMutableData", 51),
        ("CastTypeInfoToTensorInfo", 55),
        ("GetTensorElementType", 60),
        ("GetDimensionsCount", 61),
        ("GetDimensions", 62),
        ("KernelContext_GetInput", 90),
        ("KernelContext_GetOutput", 91),
        ("Logger_LogMessage", 247),
        ("ReadOpAttr", 272),
        ("GetValueInfoName", 289),
        ("GetValueInfoTypeInfo", 290),
        ("ValueInfo_GetInitializerValue", 326),
        ("ValueInfo_IsConstantInitializer", 331),
        ("Graph_GetNumNodes", 344),
        ("Graph_GetNodes", 345),
        ("Node_GetName", 349),
        ("Node_GetOperatorType", 350),
        ("Node_GetDomain", 351),
        ("Node_GetSinceVersion", 352),
        ("Node_GetNumInputs", 353),
        ("Node_GetInputs", 354),
        ("Node_GetNumOutputs", 355),
        ("Node_GetOutputs", 356),
        ("Node_GetNumAttributes", 359),
        ("Node_GetAttributes", 360),
        ("OpAttr_GetType", 363),
        ("OpAttr_GetName", 364),
        ("GetTensorData", 378),
        ("GetTensorElementTypeAndShapeDataReference", 414),
        ("TensorTypeAndShape_HasShape", 390),
        ("OpAttr_GetTensorAttributeAsOrtValue", 362),
        ("ReleaseValue", 96),
    ];
    assert_eq!(got, want);
}
