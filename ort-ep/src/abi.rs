//! The EP side of ONNX Runtime's plugin ABI, declared field for field from
//! `include/onnxruntime/core/session/onnxruntime_ep_c_api.h` of microsoft/onnxruntime, as
//! released (1.24 and later; the members each struct had at 1.24). Beware of copies of the
//! header from between releases: one pre-1.24 state of main put `SetEnvironmentOptions` where
//! the release has `GetHardwareDeviceIncompatibilityDetails`, and ORT 1.32 calls
//! `OrtEpFactory::GetNumCustomOpDomains` (member 16) of every version-24 factory.
//!
//! `ort-sys` carries the `OrtApi` table (and the opaque handle types) but declares `OrtEpApi` as
//! an opaque struct and none of the structs an EP implements, so those are here. Every struct
//! that ORT reads is declared as of [`EP_API_VERSION`]: its `ort_version_supported` says so,
//! and ORT (which only appends to these tables) never reads a field added after it. `OrtEpApi`,
//! which ORT fills, is declared up to the last entry this library calls. `tests/abi_layout.rs`
//! pins every offset against the header's field order.
//!
//! All types here are plain `#[repr(C)]` data (function pointers and integers): `Send + Sync`
//! where they hold no raw pointer; the opaque handle types are neither (ORT owns them).

#![allow(non_snake_case, non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};

pub use ort_sys::{
    ONNXTensorElementDataType, OrtAllocator, OrtApi, OrtApiBase, OrtCustomOpDomain, OrtDeviceEpIncompatibilityDetails,
    OrtDeviceMemoryType, OrtErrorCode, OrtGraph, OrtHardwareDevice, OrtHardwareDeviceType, OrtKernelContext,
    OrtKeyValuePairs, OrtLogger, OrtMemoryInfo, OrtMemoryInfoDeviceType, OrtNode, OrtRunOptions, OrtSessionOptions,
    OrtStatus, OrtSyncStream, OrtValue,
};

/// The ORT API version this library is written against: the `OrtApi` it requests and the
/// `ort_version_supported` of every struct it hands to ORT (ONNX Runtime 1.24 or newer).
pub const EP_API_VERSION: u32 = 24;

const _: () = assert!(ort_sys::ORT_API_VERSION == EP_API_VERSION, "ort-sys api feature and EP_API_VERSION differ");

/// A status ORT reads; null is success.
pub type StatusPtr = *mut OrtStatus;

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        /// An opaque ORT handle (never built or dereferenced here).
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque!(
    OrtEpDevice,
    OrtEpGraphSupportInfo,
    OrtMemoryDevice,
    OrtNodeComputeContext,
    OrtSyncStreamImpl,
    OrtKernelRegistry,
    OrtKernelDef,
    OrtExternalResourceImporterImpl,
);

/// `OrtCompiledModelCompatibility` (an `int` enum in the header).
pub type OrtCompiledModelCompatibility = c_int;
pub const ORT_COMPILED_MODEL_COMPATIBILITY_EP_NOT_APPLICABLE: OrtCompiledModelCompatibility = 0;

/// `OrtEpDataLayout` (an `int` enum in the header).
pub type OrtEpDataLayout = c_int;

/// `OrtNodeFusionOptions` (since 1.23).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OrtNodeFusionOptions {
    pub ort_version_supported: u32,
    pub drop_constant_initializers: bool,
}

/// `OrtNodeComputeInfo` (since 1.23): the compute functions of one fused node.
#[repr(C)]
pub struct OrtNodeComputeInfo {
    pub ort_version_supported: u32,
    pub CreateState: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtNodeComputeInfo,
            compute_context: *mut OrtNodeComputeContext,
            compute_state: *mut *mut c_void,
        ) -> StatusPtr,
    >,
    pub Compute: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtNodeComputeInfo,
            compute_state: *mut c_void,
            kernel_context: *mut OrtKernelContext,
        ) -> StatusPtr,
    >,
    pub ReleaseState: Option<unsafe extern "system" fn(this_ptr: *mut OrtNodeComputeInfo, compute_state: *mut c_void)>,
}

/// `OrtDataTransferImpl` (since 1.23): device <-> host copies (not offered yet: the CPU backend
/// needs none).
#[repr(C)]
pub struct OrtDataTransferImpl {
    pub ort_version_supported: u32,
    pub Release: Option<unsafe extern "system" fn(this_ptr: *mut OrtDataTransferImpl)>,
    pub CanCopy: Option<
        unsafe extern "system" fn(
            this_ptr: *const OrtDataTransferImpl,
            src_memory_device: *const OrtMemoryDevice,
            dst_memory_device: *const OrtMemoryDevice,
        ) -> bool,
    >,
    pub CopyTensors: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtDataTransferImpl,
            src_tensors: *const *const OrtValue,
            dst_tensors: *mut *mut OrtValue,
            streams: *mut *mut OrtSyncStream,
            num_tensors: usize,
        ) -> StatusPtr,
    >,
}

/// `OrtEpApi` (since 1.22), filled by ORT: the entries in header order up to
/// `ReleaseHardwareDevice` (1.24). Never built here, only read through `OrtApi::GetEpApi`.
#[repr(C)]
pub struct OrtEpApi {
    pub CreateEpDevice: unsafe extern "system" fn(
        ep_factory: *mut OrtEpFactory,
        hardware_device: *const OrtHardwareDevice,
        ep_metadata: *const OrtKeyValuePairs,
        ep_options: *const OrtKeyValuePairs,
        ep_device: *mut *mut OrtEpDevice,
    ) -> StatusPtr,
    pub ReleaseEpDevice: unsafe extern "system" fn(input: *mut OrtEpDevice),
    pub EpGraphSupportInfo_AddNodesToFuse: unsafe extern "system" fn(
        graph_support_info: *mut OrtEpGraphSupportInfo,
        nodes: *const *const OrtNode,
        num_nodes: usize,
        node_fusion_options: *const OrtNodeFusionOptions,
    ) -> StatusPtr,
    pub EpGraphSupportInfo_AddSingleNode:
        unsafe extern "system" fn(graph_support_info: *mut OrtEpGraphSupportInfo, node: *const OrtNode) -> StatusPtr,
    pub NodeComputeContext_NodeName: unsafe extern "system" fn(context: *const OrtNodeComputeContext) -> *const c_char,
    pub EpDevice_AddAllocatorInfo: unsafe extern "system" fn(
        ep_device: *mut OrtEpDevice,
        allocator_memory_info: *const OrtMemoryInfo,
    ) -> StatusPtr,
    pub MemoryInfo_GetMemoryDevice:
        unsafe extern "system" fn(memory_info: *const OrtMemoryInfo) -> *const OrtMemoryDevice,
    pub Value_GetMemoryDevice: unsafe extern "system" fn(value: *const OrtValue) -> *const OrtMemoryDevice,
    pub MemoryDevice_AreEqual: unsafe extern "system" fn(a: *const OrtMemoryDevice, b: *const OrtMemoryDevice) -> bool,
    pub MemoryDevice_GetDeviceType:
        unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> OrtMemoryInfoDeviceType,
    pub MemoryDevice_GetMemoryType:
        unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> OrtDeviceMemoryType,
    pub MemoryDevice_GetVendorId: unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> u32,
    pub MemoryDevice_GetDeviceId: unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> u32,
    pub SyncStream_GetImpl: unsafe extern "system" fn(stream: *const OrtSyncStream) -> *const OrtSyncStreamImpl,
    pub SyncStream_GetSyncId: unsafe extern "system" fn(stream: *const OrtSyncStream) -> u64,
    pub GetSyncIdForLastWaitOnSyncStream:
        unsafe extern "system" fn(producer_stream: *const OrtSyncStream, consumer_stream: *const OrtSyncStream) -> u64,
    pub CreateHardwareDevice: unsafe extern "system" fn(
        r#type: OrtHardwareDeviceType,
        vendor_id: u32,
        device_id: u32,
        vendor_name: *const c_char,
        metadata: *const OrtKeyValuePairs,
        hardware_device: *mut *mut OrtHardwareDevice,
    ) -> StatusPtr,
    pub ReleaseHardwareDevice: unsafe extern "system" fn(input: *mut OrtHardwareDevice),
}

/// `OrtEp` (since 1.22), as of version 1.24: the execution provider one session uses.
#[repr(C)]
pub struct OrtEp {
    pub ort_version_supported: u32,
    pub GetName: Option<unsafe extern "system" fn(this_ptr: *const OrtEp) -> *const c_char>,
    pub GetCapability: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            graph: *const OrtGraph,
            graph_support_info: *mut OrtEpGraphSupportInfo,
        ) -> StatusPtr,
    >,
    pub Compile: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            graphs: *mut *const OrtGraph,
            fused_nodes: *mut *const OrtNode,
            count: usize,
            node_compute_infos: *mut *mut OrtNodeComputeInfo,
            ep_context_nodes: *mut *mut OrtNode,
        ) -> StatusPtr,
    >,
    pub ReleaseNodeComputeInfos: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            node_compute_infos: *mut *mut OrtNodeComputeInfo,
            num_node_compute_infos: usize,
        ),
    >,
    pub GetPreferredDataLayout: Option<
        unsafe extern "system" fn(this_ptr: *mut OrtEp, preferred_data_layout: *mut OrtEpDataLayout) -> StatusPtr,
    >,
    pub ShouldConvertDataLayoutForOp: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            domain: *const c_char,
            op_type: *const c_char,
            target_data_layout: OrtEpDataLayout,
            should_convert: *mut c_int,
        ) -> StatusPtr,
    >,
    pub SetDynamicOptions: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            option_keys: *const *const c_char,
            option_values: *const *const c_char,
            num_options: usize,
        ) -> StatusPtr,
    >,
    pub OnRunStart:
        Option<unsafe extern "system" fn(this_ptr: *mut OrtEp, run_options: *const OrtRunOptions) -> StatusPtr>,
    pub OnRunEnd: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            run_options: *const OrtRunOptions,
            sync_stream: bool,
        ) -> StatusPtr,
    >,
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            memory_info: *const OrtMemoryInfo,
            allocator: *mut *mut OrtAllocator,
        ) -> StatusPtr,
    >,
    pub CreateSyncStreamForDevice: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            memory_device: *const OrtMemoryDevice,
            stream: *mut *mut OrtSyncStreamImpl,
        ) -> StatusPtr,
    >,
    pub GetCompiledModelCompatibilityInfo:
        Option<unsafe extern "system" fn(this_ptr: *mut OrtEp, graph: *const OrtGraph) -> *const c_char>,
    pub GetKernelRegistry: Option<
        unsafe extern "system" fn(this_ptr: *mut OrtEp, kernel_registry: *mut *const OrtKernelRegistry) -> StatusPtr,
    >,
    pub IsConcurrentRunSupported:
        Option<unsafe extern "system" fn(this_ptr: *mut OrtEp, is_supported: *mut bool) -> StatusPtr>,
}

/// `OrtEpFactory` (since 1.22), as of version 1.24: what `CreateEpFactories` hands to ORT.
#[repr(C)]
pub struct OrtEpFactory {
    pub ort_version_supported: u32,
    pub GetName: Option<unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> *const c_char>,
    pub GetVendor: Option<unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> *const c_char>,
    pub GetSupportedDevices: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            ep_devices: *mut *mut OrtEpDevice,
            max_ep_devices: usize,
            num_ep_devices: *mut usize,
        ) -> StatusPtr,
    >,
    pub CreateEp: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            ep_metadata_pairs: *const *const OrtKeyValuePairs,
            num_devices: usize,
            session_options: *const OrtSessionOptions,
            logger: *const OrtLogger,
            ep: *mut *mut OrtEp,
        ) -> StatusPtr,
    >,
    pub ReleaseEp: Option<unsafe extern "system" fn(this_ptr: *mut OrtEpFactory, ep: *mut OrtEp)>,
    pub GetVendorId: Option<unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> u32>,
    pub GetVersion: Option<unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> *const c_char>,
    pub ValidateCompiledModelCompatibilityInfo: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            compatibility_info: *const c_char,
            model_compatibility: *mut OrtCompiledModelCompatibility,
        ) -> StatusPtr,
    >,
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            memory_info: *const OrtMemoryInfo,
            allocator_options: *const OrtKeyValuePairs,
            allocator: *mut *mut OrtAllocator,
        ) -> StatusPtr,
    >,
    pub ReleaseAllocator: Option<unsafe extern "system" fn(this_ptr: *mut OrtEpFactory, allocator: *mut OrtAllocator)>,
    pub CreateDataTransfer: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            data_transfer: *mut *mut OrtDataTransferImpl,
        ) -> StatusPtr,
    >,
    pub IsStreamAware: Option<unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> bool>,
    pub CreateSyncStreamForDevice: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            memory_device: *const OrtMemoryDevice,
            stream_options: *const OrtKeyValuePairs,
            stream: *mut *mut OrtSyncStreamImpl,
        ) -> StatusPtr,
    >,
    /// Optional (null: ORT assumes every device offered is compatible).
    pub GetHardwareDeviceIncompatibilityDetails: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            hw: *const OrtHardwareDevice,
            details: *mut OrtDeviceEpIncompatibilityDetails,
        ) -> StatusPtr,
    >,
    /// Optional (null: no external memory import).
    pub CreateExternalResourceImporterForDevice: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            ep_device: *const OrtEpDevice,
            out_importer: *mut *mut OrtExternalResourceImporterImpl,
        ) -> StatusPtr,
    >,
    /// Called by ORT 1.24+ whatever else the EP does: must be set.
    pub GetNumCustomOpDomains:
        Option<unsafe extern "system" fn(this_ptr: *mut OrtEpFactory, num_domains: *mut usize) -> StatusPtr>,
    pub GetCustomOpDomains: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            domains: *mut *mut OrtCustomOpDomain,
            num_domains: usize,
        ) -> StatusPtr,
    >,
}

/// The signature of the exported `CreateEpFactories` (`CreateEpApiFactoriesFn`).
pub type CreateEpApiFactoriesFn = unsafe extern "C" fn(
    registered_name: *const c_char,
    ort_api_base: *const OrtApiBase,
    default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> StatusPtr;

/// The signature of the exported `ReleaseEpFactory` (`ReleaseEpApiFactoryFn`).
pub type ReleaseEpApiFactoryFn = unsafe extern "C" fn(factory: *mut OrtEpFactory) -> StatusPtr;
