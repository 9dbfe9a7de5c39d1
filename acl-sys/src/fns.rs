//! Every C function npurt binds, as a function-pointer type (`pfn::NAME`) and a lazily
//! resolved entry of [`Api`](crate::Api) (`api.NAME()`), with the library it lives in.
//!
//! The prototypes are those of CANN's headers, parameter for parameter: `acl/acl.h`
//! (`aclInit`, `aclFinalize`), `acl/acl_rt.h` and `acl/acl_mdl.h` (runtime), hicann/opbase's
//! `aclnn/acl_meta.h` and `aclnn/aclnn_base.h` (descriptors, executors), and one
//! `aclnnop/aclnn_*.h` per operator (hicann/ops-nn, ops-math, ops-transformer). Symbols
//! listed in [`OPTIONAL`] (neither torch_npu 2.14 nor onnxruntime-cann 1.24.4 links them)
//! may be missing from a given CANN release; callers resolve them with
//! [`Api::optional`](crate::Api::optional) and fall back:
//!
//! | optional symbol | fallback |
//! |---|---|
//! | `aclrtCreateStreamWithConfig` | `aclrtCreateStream` |
//! | `aclrtCreateEventWithFlag`, `aclrtCreateEventExWithFlag` | `aclrtCreateEvent` |
//! | `aclrtQueryEventStatus` | `aclrtQueryEvent` (opposite numbering of COMPLETE) |
//! | `aclrtGetDeviceInfo` | `aclGetDeviceCapability` |
//! | `aclrtGetDeviceUtilizationRate` | utilisation derived from FLOP/byte counts |
//! | `aclrtSynchronize*WithTimeout` | the call without timeout |
//! | `aclrtMallocAlign32` | `aclrtMalloc` |
//! | `aclrtGetLastError`, `aclrtPeekAtLastError` | `aclGetRecentErrMsg` |
//! | `aclnnInit` / `aclnnFinalize` | `aclInit` / `aclFinalize` |
//! | `aclEmuGetRunCounters`, `aclEmuResetRunCounters` (acl-emu only, never in CANN) | no counters: a real host |
//! | `aclFinalizeReference` | `aclFinalize` |
//! | `aclmdlRICapture*`, `aclmdlRIExecuteAsync`, `aclmdlRIDestroy` | per-node launches (no graph capture) |
//! | `aclnnFlashAttentionScore*` | fused Attention composed of other aclnn operators |
//! | `aclnnRotaryPositionEmbedding*` | Rope composed of other aclnn operators |
//! | `aclnnScatterPaKvCache*` | KvCacheWrite as two `aclnnScatterNdUpdate` |
//! | `aclnnIncreFlashAttentionV4*` | PagedAttention composed of other aclnn operators |
//! | everything else marked optional | the feature is reported as unavailable |

#![allow(non_snake_case)]

use crate::error::LoadError;

/// Which library a symbol is looked up in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LibKind {
    /// `libacl_rt.so` (9.x) or `libascendcl.so`.
    Runtime,
    /// `libnnopbase.so` (also reachable through `libopapi.so`).
    NnOpBase,
    /// `libopapi.so` or the split `libopapi_{math,nn,cv,transformer}.so`.
    OpApi,
}

macro_rules! api {
    ( $( $(#[$m:meta])* [$lib:ident] fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        /// Function-pointer types, one per C function, named after it.
        pub mod pfn {
            #![allow(non_camel_case_types)]
            use crate::fns::aclEmuRunCounters;
            use crate::types::*;
            use std::ffi::{c_char, c_void};
            $( $(#[$m])* pub type $name = unsafe extern "C" fn( $( $arg : $ty ),* ) -> $ret; )*
        }

        /// The resolved symbols of an [`Api`], one cell each.
        #[allow(non_snake_case)]
        pub(crate) struct Slots {
            $( pub(crate) $name: std::sync::OnceLock<Result<pfn::$name, LoadError>>, )*
        }

        #[allow(non_snake_case)]
        impl Slots {
            pub(crate) fn new() -> Slots {
                Slots { $( $name: std::sync::OnceLock::new(), )* }
            }
        }

        impl Default for Slots {
            fn default() -> Slots {
                Slots::new()
            }
        }

        #[allow(non_snake_case)]
        impl Api {
            $(
                #[doc = concat!("Resolves `", stringify!($name), "` (once; the result is cached).")]
                pub fn $name(&self) -> Result<pfn::$name, LoadError> {
                    self.slots
                        .$name
                        .get_or_init(|| {
                            // SAFETY: `pfn::$name` is the C prototype of this symbol as CANN's
                            // header declares it (checked against the headers by the
                            // `bindgen` feature); the library stays loaded as long as `self`.
                            unsafe { self.resolve::<pfn::$name>(concat!(stringify!($name), "\0"), LibKind::$lib) }
                        })
                        .clone()
                }
            )*
        }

        /// Every symbol declared here, with its library.
        pub const SYMBOLS: &[(&str, LibKind)] = &[ $( (stringify!($name), LibKind::$lib), )* ];
    };
}

api! {
    // ---- A.1 init / version / errors ----
    [Runtime] fn aclInit(configPath: *const c_char) -> aclError;
    [Runtime] fn aclFinalize() -> aclError;
    [Runtime] fn aclFinalizeReference(refCount: *mut u64) -> aclError;
    [Runtime] fn aclGetRecentErrMsg() -> *const c_char;
    [Runtime] fn aclrtGetLastError(level: aclrtLastErrLevel) -> aclError;
    [Runtime] fn aclrtPeekAtLastError(level: aclrtLastErrLevel) -> aclError;
    [Runtime] fn aclrtGetVersion(majorVersion: *mut i32, minorVersion: *mut i32, patchVersion: *mut i32) -> aclError;
    [Runtime] fn aclsysGetVersionStr(pkgName: *mut c_char, versionStr: *mut c_char) -> aclError;
    [Runtime] fn aclsysGetVersionNum(pkgName: *mut c_char, versionNum: *mut i32) -> aclError;
    [Runtime] fn aclsysGetCANNVersion(name: aclCANNPackageName, version: *mut aclCANNPackageVersion) -> aclError;
    [Runtime] fn aclDataTypeSize(dataType: aclDataType) -> usize;
    [Runtime] fn aclFloat16ToFloat(value: aclFloat16) -> f32;
    [Runtime] fn aclFloatToFloat16(value: f32) -> aclFloat16;

    // ---- A.2 device ----
    [Runtime] fn aclrtSetDevice(deviceId: i32) -> aclError;
    [Runtime] fn aclrtResetDevice(deviceId: i32) -> aclError;
    [Runtime] fn aclrtResetDeviceForce(deviceId: i32) -> aclError;
    [Runtime] fn aclrtGetDevice(deviceId: *mut i32) -> aclError;
    [Runtime] fn aclrtGetDeviceCount(count: *mut u32) -> aclError;
    [Runtime] fn aclrtGetRunMode(runMode: *mut aclrtRunMode) -> aclError;
    [Runtime] fn aclrtGetSocName() -> *const c_char;
    [Runtime] fn aclrtSynchronizeDevice() -> aclError;
    [Runtime] fn aclrtSynchronizeDeviceWithTimeout(timeout: i32) -> aclError;
    [Runtime] fn aclrtGetDeviceInfo(deviceId: u32, attr: aclrtDevAttr, value: *mut i64) -> aclError;
    [Runtime] fn aclGetDeviceCapability(deviceId: u32, deviceInfo: aclDeviceInfo, value: *mut i64) -> aclError;
    [Runtime] fn aclrtGetDeviceUtilizationRate(deviceId: i32, utilizationInfo: *mut aclrtUtilizationInfo) -> aclError;
    [Runtime] fn aclrtQueryDeviceStatus(deviceId: i32, deviceStatus: *mut aclrtDeviceStatus) -> aclError;
    [Runtime] fn aclrtGetPhyDevIdByLogicDevId(logicDevId: i32, phyDevId: *mut i32) -> aclError;
    [Runtime] fn aclrtDeviceGetStreamPriorityRange(leastPriority: *mut i32, greatestPriority: *mut i32) -> aclError;

    // ---- A.3 context ----
    [Runtime] fn aclrtCreateContext(context: *mut aclrtContext, deviceId: i32) -> aclError;
    [Runtime] fn aclrtDestroyContext(context: aclrtContext) -> aclError;
    [Runtime] fn aclrtSetCurrentContext(context: aclrtContext) -> aclError;
    [Runtime] fn aclrtGetCurrentContext(context: *mut aclrtContext) -> aclError;
    [Runtime] fn aclrtCtxGetCurrentDefaultStream(stream: *mut aclrtStream) -> aclError;
    [Runtime] fn aclrtSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError;
    [Runtime] fn aclrtCtxSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError;
    [Runtime] fn aclrtGetSysParamOpt(opt: aclSysParamOpt, value: *mut i64) -> aclError;

    // ---- A.4 stream ----
    [Runtime] fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError;
    [Runtime] fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, priority: u32, flag: u32) -> aclError;
    [Runtime] fn aclrtDestroyStream(stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtDestroyStreamForce(stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtSynchronizeStreamWithTimeout(stream: aclrtStream, timeout: i32) -> aclError;
    [Runtime] fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) -> aclError;
    [Runtime] fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError;

    // ---- A.5 event ----
    [Runtime] fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError;
    [Runtime] fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError;
    [Runtime] fn aclrtCreateEventExWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError;
    [Runtime] fn aclrtDestroyEvent(event: aclrtEvent) -> aclError;
    [Runtime] fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) -> aclError;
    [Runtime] fn aclrtQueryEvent(event: aclrtEvent, status: *mut aclrtEventStatus) -> aclError;
    [Runtime] fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError;
    [Runtime] fn aclrtSynchronizeEventWithTimeout(event: aclrtEvent, timeout: i32) -> aclError;
    /// Note: the output pointer comes first.
    [Runtime] fn aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) -> aclError;
    [Runtime] fn aclrtEventGetTimestamp(event: aclrtEvent, timestamp: *mut u64) -> aclError;

    // ---- stream capture into a model runtime instance (acl_mdl.h; acl_rt.h since CANN 8.5) ----
    /// Starts capturing `stream`: work queued on it until `aclmdlRICaptureEnd` is recorded
    /// into a model runtime instance instead of running.
    [Runtime] fn aclmdlRICaptureBegin(stream: aclrtStream, mode: aclmdlRICaptureMode) -> aclError;
    [Runtime] fn aclmdlRICaptureGetInfo(
        stream: aclrtStream, status: *mut aclmdlRICaptureStatus, modelRI: *mut aclmdlRI,
    ) -> aclError;
    /// Ends the capture of `stream` and hands out what was recorded.
    [Runtime] fn aclmdlRICaptureEnd(stream: aclrtStream, modelRI: *mut aclmdlRI) -> aclError;
    /// Queues a replay of everything `modelRI` recorded on `stream`.
    [Runtime] fn aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> aclError;
    [Runtime] fn aclmdlRIDestroy(modelRI: aclmdlRI) -> aclError;

    // ---- A.6 device memory ----
    [Runtime] fn aclrtMalloc(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
    [Runtime] fn aclrtMallocAlign32(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
    [Runtime] fn aclrtMallocCached(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
    [Runtime] fn aclrtFree(devPtr: *mut c_void) -> aclError;
    [Runtime] fn aclrtFreeWithDevSync(devPtr: *mut c_void) -> aclError;
    [Runtime] fn aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) -> aclError;
    [Runtime] fn aclrtGetMemUsageInfo(
        deviceId: i32,
        memUsageInfo: *mut aclrtMemUsageInfo,
        inputNum: usize,
        outputNum: *mut usize,
    ) -> aclError;
    [Runtime] fn aclrtPointerGetAttributes(ptr: *const c_void, attributes: *mut aclrtPtrAttributes) -> aclError;

    // ---- A.7 host (pinned) memory ----
    [Runtime] fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError;
    [Runtime] fn aclrtFreeHost(hostPtr: *mut c_void) -> aclError;
    [Runtime] fn aclrtHostRegister(
        ptr: *mut c_void,
        size: u64,
        type_: aclrtHostRegisterType,
        devPtr: *mut *mut c_void,
    ) -> aclError;
    [Runtime] fn aclrtHostUnregister(ptr: *mut c_void) -> aclError;

    // ---- A.8 copy / set ----
    [Runtime] fn aclrtMemcpy(
        dst: *mut c_void,
        destMax: usize,
        src: *const c_void,
        count: usize,
        kind: aclrtMemcpyKind,
    ) -> aclError;
    [Runtime] fn aclrtMemcpyAsync(
        dst: *mut c_void,
        destMax: usize,
        src: *const c_void,
        count: usize,
        kind: aclrtMemcpyKind,
        stream: aclrtStream,
    ) -> aclError;
    [Runtime] fn aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) -> aclError;
    [Runtime] fn aclrtMemsetAsync(
        devPtr: *mut c_void,
        maxCount: usize,
        value: i32,
        count: usize,
        stream: aclrtStream,
    ) -> aclError;
    [Runtime] fn aclrtMemcpy2d(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: aclrtMemcpyKind,
    ) -> aclError;
    [Runtime] fn aclrtMemcpy2dAsync(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: aclrtMemcpyKind,
        stream: aclrtStream,
    ) -> aclError;

    // ---- A.9 peer access ----
    /// Note: the output pointer comes first.
    [Runtime] fn aclrtDeviceCanAccessPeer(canAccessPeer: *mut i32, deviceId: i32, peerDeviceId: i32) -> aclError;
    [Runtime] fn aclrtDeviceEnablePeerAccess(peerDeviceId: i32, flags: u32) -> aclError;
    [Runtime] fn aclrtDeviceDisablePeerAccess(peerDeviceId: i32) -> aclError;

    // ---- A.10 host callbacks ----
    [Runtime] fn aclrtSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtLaunchCallback(
        fn_: aclrtCallback,
        userData: *mut c_void,
        blockType: aclrtCallbackBlockType,
        stream: aclrtStream,
    ) -> aclError;
    [Runtime] fn aclrtProcessReport(timeout: i32) -> aclError;
    [Runtime] fn aclrtUnSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtLaunchHostFunc(stream: aclrtStream, fn_: aclrtHostFunc, args: *mut c_void) -> aclError;

    // ---- A.11 timeouts ----
    [Runtime] fn aclrtSetOpWaitTimeout(timeout: u32) -> aclError;
    [Runtime] fn aclrtSetOpExecuteTimeOut(timeout: u32) -> aclError;

    // ---- A.12 virtual memory ----
    [Runtime] fn aclrtReserveMemAddress(
        virPtr: *mut *mut c_void,
        size: usize,
        alignment: usize,
        expectPtr: *mut c_void,
        flags: u64,
    ) -> aclError;
    [Runtime] fn aclrtReleaseMemAddress(virPtr: *mut c_void) -> aclError;
    [Runtime] fn aclrtMallocPhysical(
        handle: *mut aclrtDrvMemHandle,
        size: usize,
        prop: *const aclrtPhysicalMemProp,
        flags: u64,
    ) -> aclError;
    [Runtime] fn aclrtFreePhysical(handle: aclrtDrvMemHandle) -> aclError;
    [Runtime] fn aclrtMapMem(
        virPtr: *mut c_void,
        size: usize,
        offset: usize,
        handle: aclrtDrvMemHandle,
        flags: u64,
    ) -> aclError;
    [Runtime] fn aclrtUnmapMem(virPtr: *mut c_void) -> aclError;
    [Runtime] fn aclrtMemGetAllocationGranularity(
        prop: *mut aclrtPhysicalMemProp,
        option: aclrtMemGranularityOptions,
        granularity: *mut usize,
    ) -> aclError;
    [Runtime] fn aclrtMemSetAccess(virPtr: *mut c_void, size: usize, desc: *mut aclrtMemAccessDesc, count: usize)
        -> aclError;

    // ---- A.13 stream-ordered memory pool ----
    [Runtime] fn aclrtMemPoolCreate(memPool: *mut aclrtMemPool, poolProps: *const aclrtMemPoolProps) -> aclError;
    [Runtime] fn aclrtMemPoolDestroy(memPool: aclrtMemPool) -> aclError;
    [Runtime] fn aclrtMemPoolMallocAsync(
        ptr: *mut *mut c_void,
        size: usize,
        memPool: aclrtMemPool,
        stream: aclrtStream,
    ) -> aclError;
    [Runtime] fn aclrtMemPoolFreeAsync(ptr: *mut c_void, stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtMemPoolTrimTo(memPool: aclrtMemPool, minBytesToKeep: usize) -> aclError;
    [Runtime] fn aclrtMemPoolSetAttr(memPool: aclrtMemPool, attr: aclrtMemPoolAttr, value: *mut c_void) -> aclError;
    [Runtime] fn aclrtMemPoolGetAttr(memPool: aclrtMemPool, attr: aclrtMemPoolAttr, value: *mut c_void) -> aclError;

    // ---- A.14 per-stream user allocator ----
    [Runtime] fn aclrtAllocatorCreateDesc() -> aclrtAllocatorDesc;
    [Runtime] fn aclrtAllocatorSetObjToDesc(allocatorDesc: aclrtAllocatorDesc, allocator: aclrtAllocator) -> aclError;
    [Runtime] fn aclrtAllocatorSetAllocFuncToDesc(allocatorDesc: aclrtAllocatorDesc, func: aclrtAllocatorAllocFunc)
        -> aclError;
    [Runtime] fn aclrtAllocatorSetFreeFuncToDesc(allocatorDesc: aclrtAllocatorDesc, func: aclrtAllocatorFreeFunc)
        -> aclError;
    [Runtime] fn aclrtAllocatorSetAllocAdviseFuncToDesc(
        allocatorDesc: aclrtAllocatorDesc,
        func: aclrtAllocatorAllocAdviseFunc,
    ) -> aclError;
    [Runtime] fn aclrtAllocatorSetGetAddrFromBlockFuncToDesc(
        allocatorDesc: aclrtAllocatorDesc,
        func: aclrtAllocatorGetAddrFromBlockFunc,
    ) -> aclError;
    [Runtime] fn aclrtAllocatorRegister(stream: aclrtStream, allocatorDesc: aclrtAllocatorDesc) -> aclError;
    [Runtime] fn aclrtAllocatorUnregister(stream: aclrtStream) -> aclError;
    [Runtime] fn aclrtAllocatorDestroyDesc(allocatorDesc: aclrtAllocatorDesc) -> aclError;

    // ---- C.2 aclnn basics (libnnopbase.so) ----
    [NnOpBase] fn aclCreateTensor(
        viewDims: *const i64,
        viewDimsNum: u64,
        dataType: aclDataType,
        stride: *const i64,
        offset: i64,
        format: aclFormat,
        storageDims: *const i64,
        storageDimsNum: u64,
        tensorData: *mut c_void,
    ) -> *mut aclTensor;
    [NnOpBase] fn aclDestroyTensor(tensor: *const aclTensor) -> aclnnStatus;
    [NnOpBase] fn aclCreateScalar(value: *mut c_void, dataType: aclDataType) -> *mut aclScalar;
    [NnOpBase] fn aclDestroyScalar(scalar: *const aclScalar) -> aclnnStatus;
    [NnOpBase] fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray;
    [NnOpBase] fn aclDestroyIntArray(array: *const aclIntArray) -> aclnnStatus;
    [NnOpBase] fn aclCreateFloatArray(value: *const f32, size: u64) -> *mut aclFloatArray;
    [NnOpBase] fn aclDestroyFloatArray(array: *const aclFloatArray) -> aclnnStatus;
    [NnOpBase] fn aclCreateBoolArray(value: *const bool, size: u64) -> *mut aclBoolArray;
    [NnOpBase] fn aclDestroyBoolArray(array: *const aclBoolArray) -> aclnnStatus;
    [NnOpBase] fn aclCreateTensorList(value: *const *const aclTensor, size: u64) -> *mut aclTensorList;
    [NnOpBase] fn aclDestroyTensorList(array: *const aclTensorList) -> aclnnStatus;
    [NnOpBase] fn aclCreateScalarList(value: *const *const aclScalar, size: u64) -> *mut aclScalarList;
    [NnOpBase] fn aclDestroyScalarList(array: *const aclScalarList) -> aclnnStatus;
    [NnOpBase] fn aclGetViewShape(tensor: *const aclTensor, viewDims: *mut *mut i64, viewDimsNum: *mut u64)
        -> aclnnStatus;
    [NnOpBase] fn aclGetDataType(tensor: *const aclTensor, dataType: *mut aclDataType) -> aclnnStatus;
    [NnOpBase] fn aclGetFormat(tensor: *const aclTensor, format: *mut aclFormat) -> aclnnStatus;
    [NnOpBase] fn aclInitTensor(
        tensor: *mut aclTensor,
        viewDims: *const i64,
        viewDimsNum: u64,
        dataType: aclDataType,
        stride: *const i64,
        offset: i64,
        format: aclFormat,
        storageDims: *const i64,
        storageDimsNum: u64,
        tensorDataAddr: *mut c_void,
    ) -> aclnnStatus;
    [NnOpBase] fn aclSetRawTensorAddr(tensor: *mut aclTensor, addr: *mut c_void) -> aclnnStatus;
    [NnOpBase] fn aclGetRawTensorAddr(tensor: *const aclTensor, addr: *mut *mut c_void) -> aclnnStatus;
    [NnOpBase] fn aclSetAclOpExecutorRepeatable(executor: *mut aclOpExecutor) -> aclnnStatus;
    [NnOpBase] fn aclDestroyAclOpExecutor(executor: *mut aclOpExecutor) -> aclnnStatus;
    [NnOpBase] fn aclSetInputTensorAddr(
        executor: *mut aclOpExecutor,
        index: usize,
        tensor: *mut aclTensor,
        addr: *mut c_void,
    ) -> aclnnStatus;
    [NnOpBase] fn aclSetOutputTensorAddr(
        executor: *mut aclOpExecutor,
        index: usize,
        tensor: *mut aclTensor,
        addr: *mut c_void,
    ) -> aclnnStatus;
    [NnOpBase] fn aclSetTensorAddr(
        executor: *mut aclOpExecutor,
        index: usize,
        tensor: *mut aclTensor,
        addr: *mut c_void,
    ) -> aclnnStatus;
    [NnOpBase] fn aclSetDynamicInputTensorAddr(
        executor: *mut aclOpExecutor,
        irIndex: usize,
        relativeIndex: usize,
        tensors: *mut aclTensorList,
        addr: *mut c_void,
    ) -> aclnnStatus;
    [NnOpBase] fn aclnnInit(configPath: *const c_char) -> aclnnStatus;
    [NnOpBase] fn aclnnFinalize() -> aclnnStatus;

    // ---- D. operators (libopapi.so); phase 2 is always (workspace, size, executor, stream) ----
    [OpApi] fn aclnnMatmulGetWorkspaceSize(
        self_: *const aclTensor, mat2: *const aclTensor, out: *mut aclTensor, cubeMathType: i8,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnMatmul(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnBatchMatMulGetWorkspaceSize(
        self_: *const aclTensor, mat2: *const aclTensor, out: *mut aclTensor, cubeMathType: i8,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnBatchMatMul(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnMmGetWorkspaceSize(
        self_: *const aclTensor, mat2: *const aclTensor, out: *mut aclTensor, cubeMathType: i8,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnMm(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnAddmmGetWorkspaceSize(
        self_: *const aclTensor, mat1: *const aclTensor, mat2: *const aclTensor, beta: *const aclScalar,
        alpha: *const aclScalar, out: *mut aclTensor, cubeMathType: i8, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnAddmm(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnAddGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnAdd(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnSubGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSub(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnMulGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnMul(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnDivGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnDiv(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnReluGetWorkspaceSize(
        self_: *const aclTensor, out: *const aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnRelu(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnGeluGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnGelu(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnGeluV2GetWorkspaceSize(
        x: *const aclTensor, approximate: i64, y: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnGeluV2(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnTanhGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnTanh(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnErfGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnErf(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnSoftmaxGetWorkspaceSize(
        self_: *const aclTensor, dim: i64, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSoftmax(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnLayerNormGetWorkspaceSize(
        input: *const aclTensor, normalizedShape: *const aclIntArray, weightOptional: *const aclTensor,
        biasOptional: *const aclTensor, eps: f64, out: *mut aclTensor, meanOutOptional: *mut aclTensor,
        rstdOutOptional: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnLayerNorm(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnPermuteGetWorkspaceSize(
        self_: *const aclTensor, dims: *const aclIntArray, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnPermute(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnEmbeddingGetWorkspaceSize(
        weight: *const aclTensor, indices: *const aclTensor, out: *const aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnEmbedding(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnIndexSelectGetWorkspaceSize(
        self_: *const aclTensor, dim: i64, index: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnIndexSelect(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnCastGetWorkspaceSize(
        self_: *const aclTensor, dtype: aclDataType, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnCast(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnMeanGetWorkspaceSize(
        self_: *const aclTensor, dim: *const aclIntArray, keepDim: bool, dtype: aclDataType, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnMean(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnReduceSumGetWorkspaceSize(
        self_: *const aclTensor, dims: *const aclIntArray, keepDims: bool, dtype: aclDataType, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnReduceSum(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnInplaceCopyGetWorkspaceSize(
        selfRef: *mut aclTensor, src: *const aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnInplaceCopy(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnExpGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnExp(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnSqrtGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, opExecutor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSqrt(workspace: *mut c_void, workspaceSize: u64, opExecutor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnRsqrtGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnRsqrt(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnNegGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnNeg(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnSliceGetWorkspaceSize(
        self_: *const aclTensor, dim: i64, start: i64, end: i64, step: i64, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSlice(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnExpandGetWorkspaceSize(
        self_: *const aclTensor, size: *const aclIntArray, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnExpand(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnCatGetWorkspaceSize(
        tensors: *const aclTensorList, dim: i64, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnCat(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSWhereGetWorkspaceSize(
        condition: *const aclTensor, self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSWhere(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnTriuGetWorkspaceSize(
        self_: *const aclTensor, diagonal: i64, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnTriu(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnEqTensorGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnEqTensor(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnPowTensorTensorGetWorkspaceSize(
        self_: *const aclTensor, exponent: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnPowTensorTensor(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSigmoidGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSigmoid(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSiluGetWorkspaceSize(
        self_: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSilu(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnAddsGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclScalar, alpha: *const aclScalar, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnAdds(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnMulsGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnMuls(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    // Amax, EqScalar and InplaceMaskedFillScalar: prototypes from hicann/ops-math
    // (math/reduce_max/op_host/op_api/aclnn_amax.h, math/equal/op_host/op_api/aclnn_eq_scalar.h,
    // conversion/masked_fill/op_host/op_api/aclnn_masked_fill_scalar.h); libopapi.so or
    // the split libopapi_math.so.
    [OpApi] fn aclnnAmaxGetWorkspaceSize(
        self_: *const aclTensor, dim: *const aclIntArray, keepDim: bool, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnAmax(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    [OpApi] fn aclnnEqScalarGetWorkspaceSize(
        self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnEqScalar(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    [OpApi] fn aclnnInplaceMaskedFillScalarGetWorkspaceSize(
        selfRef: *mut aclTensor, mask: *const aclTensor, value: *const aclScalar, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnInplaceMaskedFillScalar(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    // FlashAttentionScore: prototypes from hicann/ops-transformer
    // (attention/flash_attention_score/op_host/op_api/aclnn_flash_attention_score.h); libopapi.so or
    // the split libopapi_transformer.so. Atlas A2/A3 training SoCs only (no kernel for the 910
    // family); optional, older toolkits may lack it. `inputLayout` is a NUL-terminated string the
    // operator only reads, although the header does not say `const`.
    [OpApi] fn aclnnFlashAttentionScoreGetWorkspaceSize(
        query: *const aclTensor, key: *const aclTensor, value: *const aclTensor,
        realShiftOptional: *const aclTensor, dropMaskOptional: *const aclTensor,
        paddingMaskOptional: *const aclTensor, attenMaskOptional: *const aclTensor,
        prefixOptional: *const aclIntArray, scaleValue: f64, keepProb: f64, preTokens: i64, nextTokens: i64,
        headNum: i64, inputLayout: *mut c_char, innerPrecise: i64, sparseMode: i64,
        softmaxMaxOut: *const aclTensor, softmaxSumOut: *const aclTensor, softmaxOutOut: *const aclTensor,
        attentionOutOut: *const aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnFlashAttentionScore(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    // ScatterNdUpdate: `varRef[indices[i]] = updates[i]` in place, prototype as CANN's
    // `aclnnop/level2/aclnn_scatter_nd_update.h` (hicann/ops-nn, index/scatter_nd_update).
    // CANN's API reference lists it for Atlas training (910), A2/A3 and inference SoCs
    // (FLOAT16, FLOAT32 and BOOL on the 910); indices must not be out of range.
    [OpApi] fn aclnnScatterNdUpdateGetWorkspaceSize(
        varRef: *mut aclTensor, indices: *const aclTensor, updates: *const aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnScatterNdUpdate(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    // ScatterPaKvCache: prototype from hicann/ops-transformer's operator docs
    // (attention/scatter_pa_kv_cache/docs/aclnnScatterPaKvCache.md; the header is generated
    // when the operator is built). Atlas A2/A3 only (not the 910 family); optional. The two
    // `char *` modes are NUL-terminated strings the operator only reads (NULL = "Norm" /
    // "None"); strides and offsets only matter in "Nct" mode.
    [OpApi] fn aclnnScatterPaKvCacheGetWorkspaceSize(
        key: *const aclTensor, keyCacheRef: *mut aclTensor, slotMapping: *const aclTensor,
        value: *const aclTensor, valueCacheRef: *mut aclTensor, compressLensOptional: *const aclTensor,
        compressSeqOffsetOptional: *const aclTensor, seqLensOptional: *const aclTensor,
        cacheModeOptional: *mut c_char, scatterModeOptional: *mut c_char, stridesOptional: *const aclIntArray,
        offsetsOptional: *const aclIntArray, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnScatterPaKvCache(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    // IncreFlashAttentionV4: prototype from hicann/ops-transformer's operator docs
    // (attention/incre_flash_attention/docs/aclnnIncreFlashAttentionV4.md; the header,
    // aclnnop/aclnn_incre_flash_attention_v4.h, is generated when the operator is built).
    // Atlas A2/A3 (and inference) SoCs, not the 910 family; optional. key and value are tensor
    // lists (one member each in the paged form: the caches with blocktable and blockSize);
    // `inputLayout` is a NUL-terminated string the operator only reads.
    [OpApi] fn aclnnIncreFlashAttentionV4GetWorkspaceSize(
        query: *const aclTensor, key: *const aclTensorList, value: *const aclTensorList,
        pseShift: *const aclTensor, attenMask: *const aclTensor, actualSeqLengths: *const aclIntArray,
        dequantScale1: *const aclTensor, quantScale1: *const aclTensor, dequantScale2: *const aclTensor,
        quantScale2: *const aclTensor, quantOffset2: *const aclTensor, antiquantScale: *const aclTensor,
        antiquantOffset: *const aclTensor, blocktable: *const aclTensor, kvPaddingSize: *const aclTensor,
        numHeads: i64, scaleValue: f64, inputLayout: *mut c_char, numKeyValueHeads: i64, blockSize: i64,
        innerPrecise: i64, attentionOut: *const aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnIncreFlashAttentionV4(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    // RotaryPositionEmbedding: prototype from hicann/ops-transformer's operator docs
    // (posembedding/rotary_position_embedding/docs/aclnnRotaryPositionEmbedding.md; the header is
    // generated when the operator is built). Atlas A2/A3 (and inference) SoCs, not the 910
    // family; optional, older toolkits may lack it. mode 0 = half, 1 = interleave.
    [OpApi] fn aclnnRotaryPositionEmbeddingGetWorkspaceSize(
        x: *const aclTensor, cos: *const aclTensor, sin: *const aclTensor, mode: i64, out: *mut aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnRotaryPositionEmbedding(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    /// Prototype from hicann/ops-nn's operator docs (`aclnnRmsNorm.md`): that repository has
    /// no header for it (it is generated when the operator is built).
    [OpApi] fn aclnnRmsNormGetWorkspaceSize(
        x: *const aclTensor, gamma: *const aclTensor, epsilon: f64, yOut: *const aclTensor, rstdOut: *const aclTensor,
        workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnRmsNorm(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    /// Prototype from hicann/ops-nn's operator docs (`aclnnAddRmsNorm.md`; the header is
    /// generated when the operator is built, `aclnnop/aclnn_add_rms_norm.h`). Atlas A2/A3
    /// (and inference) SoCs; no kernel for the 910 family. `rstdOut` is FLOAT.
    [OpApi] fn aclnnAddRmsNormGetWorkspaceSize(
        x1: *const aclTensor, x2: *const aclTensor, gamma: *const aclTensor, epsilon: f64, yOut: *const aclTensor,
        rstdOut: *const aclTensor, xOut: *const aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnAddRmsNorm(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;
    /// Prototype from hicann/ops-nn's operator docs (`aclnnSwiGlu.md`; the header is
    /// generated when the operator is built, `aclnnop/aclnn_swi_glu.h`): `silu(A) * B` with
    /// A and B the first and second halves of x along `dim`. Atlas A2/A3 SoCs.
    [OpApi] fn aclnnSwiGluGetWorkspaceSize(
        x: *const aclTensor, dim: i64, out: *const aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnSwiGlu(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream)
        -> aclnnStatus;
    /// Prototype from hicann/ops-nn's operator docs (`aclnnAddLayerNorm.md`): that repository
    /// has no header for it (it is generated when the operator is built).
    [OpApi] fn aclnnAddLayerNormGetWorkspaceSize(
        x1: *const aclTensor, x2: *const aclTensor, gamma: *const aclTensor, beta: *const aclTensor,
        biasOptional: *const aclTensor, epsilon: f64, additionalOutput: bool, yOut: *const aclTensor,
        meanOut: *const aclTensor, rstdOut: *const aclTensor, xOut: *const aclTensor, workspaceSize: *mut u64,
        executor: *mut *mut aclOpExecutor,
    ) -> aclnnStatus;
    [OpApi] fn aclnnAddLayerNorm(
        workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream,
    ) -> aclnnStatus;

    // ---- acl-emu only (never exported by CANN): what the emulator counted and modelled ----
    /// Fills `*counters` (`size` must be `sizeof(aclEmuRunCounters)`); see [`aclEmuRunCounters`].
    [Runtime] fn aclEmuGetRunCounters(counters: *mut aclEmuRunCounters, size: usize) -> aclError;
    /// Zeroes the run counters and starts the modelled elapsed time from the current modelled instant.
    [Runtime] fn aclEmuResetRunCounters() -> aclError;
}

/// What acl-emu counted and modelled since its last `aclEmuResetRunCounters` (or since it
/// started): the record `aclEmuGetRunCounters` fills. Sixteen `uint64_t`, in this order.
/// Emulator only: a real CANN host exports neither function.
///
/// Times are *modelled*, not measured: each aclnn kernel advances its stream's clock by a
/// roofline estimate for the emulated SoC, each copy by its bytes over PCIe or HBM
/// bandwidth (acl-emu's `model` module; the constants are in docs/ASCEND.md).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct aclEmuRunCounters {
    /// `aclnn*GetWorkspaceSize` calls (failed ones included).
    pub phase1_calls: u64,
    /// aclnn launches (`aclnnX(workspace, size, executor, stream)`; failed ones included).
    pub phase2_calls: u64,
    /// Host-to-device copies accepted (`aclrtMemcpy` and `aclrtMemcpyAsync`).
    pub h2d_copies: u64,
    /// Device-to-host copies accepted.
    pub d2h_copies: u64,
    /// Device-to-device copies accepted.
    pub d2d_copies: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub d2d_bytes: u64,
    /// Successful `aclrtMalloc*` and `aclrtMallocHost` calls.
    pub allocations: u64,
    /// Bytes those allocations asked for.
    pub allocated_bytes: u64,
    /// `aclrtSynchronize*` calls (stream, event, device).
    pub synchronizations: u64,
    /// `aclmdlRIExecuteAsync` calls accepted (replays of captured graphs).
    pub replays: u64,
    /// Modelled device time from the reset to the latest modelled instant any stream or
    /// the host reached, in nanoseconds.
    pub modelled_ns: u64,
    /// Modelled busy time of kernels on the Cube (matrix products), summed over streams.
    pub modelled_cube_ns: u64,
    /// Modelled busy time of kernels on the Vector units (everything else), summed.
    pub modelled_vector_ns: u64,
    /// Modelled time of copies and fills, summed.
    pub modelled_copy_ns: u64,
    /// The kernels' roofline bounds summed (each `max(FLOPs / peak, bytes / HBM
    /// bandwidth)`, the Cube at its FP16 peak, no launch cost), in nanoseconds.
    pub modelled_roofline_ns: u64,
}

/// Symbols whose absence is normal on some CANN releases (neither torch_npu 2.14 nor
/// onnxruntime-cann 1.24.4 imports them at link time; torch_npu looks several up with
/// `dlsym`); see the module docs for the fallbacks.
pub const OPTIONAL: &[&str] = &[
    "aclFinalizeReference",
    "aclrtGetLastError",
    "aclrtPeekAtLastError",
    "aclrtGetVersion",
    "aclsysGetVersionStr",
    "aclsysGetVersionNum",
    "aclsysGetCANNVersion",
    "aclFloat16ToFloat",
    "aclFloatToFloat16",
    "aclrtResetDeviceForce",
    "aclrtGetRunMode",
    "aclrtSynchronizeDeviceWithTimeout",
    "aclrtGetDeviceInfo",
    "aclrtGetDeviceUtilizationRate",
    "aclrtQueryDeviceStatus",
    "aclrtGetPhyDevIdByLogicDevId",
    "aclrtDeviceGetStreamPriorityRange",
    "aclrtCreateContext",
    "aclrtDestroyContext",
    "aclrtCtxGetCurrentDefaultStream",
    "aclrtSetSysParamOpt",
    "aclrtCtxSetSysParamOpt",
    "aclrtGetSysParamOpt",
    "aclrtDestroyStreamForce",
    "aclrtSynchronizeStreamWithTimeout",
    "aclrtStreamQuery",
    "aclrtCreateEventWithFlag",
    "aclrtQueryEventStatus",
    "aclrtQueryEvent",
    "aclrtSynchronizeEventWithTimeout",
    "aclrtEventGetTimestamp",
    "aclmdlRICaptureBegin",
    "aclmdlRICaptureGetInfo",
    "aclmdlRICaptureEnd",
    "aclmdlRIExecuteAsync",
    "aclmdlRIDestroy",
    "aclrtMallocAlign32",
    "aclrtMallocCached",
    "aclrtFreeWithDevSync",
    "aclrtGetMemUsageInfo",
    "aclrtPointerGetAttributes",
    "aclrtHostRegister",
    "aclrtHostUnregister",
    "aclrtMemcpy2d",
    "aclrtMemcpy2dAsync",
    "aclrtDeviceDisablePeerAccess",
    "aclrtSubscribeReport",
    "aclrtLaunchCallback",
    "aclrtUnSubscribeReport",
    "aclrtLaunchHostFunc",
    "aclrtSetOpWaitTimeout",
    "aclrtSetOpExecuteTimeOut",
    "aclrtMemGetAllocationGranularity",
    "aclrtMemSetAccess",
    "aclrtMemPoolCreate",
    "aclrtMemPoolDestroy",
    "aclrtMemPoolMallocAsync",
    "aclrtMemPoolFreeAsync",
    "aclrtMemPoolTrimTo",
    "aclrtMemPoolSetAttr",
    "aclrtMemPoolGetAttr",
    "aclrtAllocatorCreateDesc",
    "aclrtAllocatorSetObjToDesc",
    "aclrtAllocatorSetAllocFuncToDesc",
    "aclrtAllocatorSetFreeFuncToDesc",
    "aclrtAllocatorSetAllocAdviseFuncToDesc",
    "aclrtAllocatorSetGetAddrFromBlockFuncToDesc",
    "aclrtAllocatorRegister",
    "aclrtAllocatorUnregister",
    "aclrtAllocatorDestroyDesc",
    "aclInitTensor",
    "aclSetRawTensorAddr",
    "aclGetRawTensorAddr",
    "aclSetTensorAddr",
    "aclnnInit",
    "aclnnFinalize",
    "aclnnRmsNormGetWorkspaceSize",
    "aclnnRmsNorm",
    "aclnnAddRmsNormGetWorkspaceSize",
    "aclnnAddRmsNorm",
    "aclnnSwiGluGetWorkspaceSize",
    "aclnnSwiGlu",
    "aclnnAddLayerNormGetWorkspaceSize",
    "aclnnAddLayerNorm",
    "aclnnFlashAttentionScoreGetWorkspaceSize",
    "aclnnFlashAttentionScore",
    "aclnnRotaryPositionEmbeddingGetWorkspaceSize",
    "aclnnRotaryPositionEmbedding",
    "aclnnScatterPaKvCacheGetWorkspaceSize",
    "aclnnScatterPaKvCache",
    "aclnnIncreFlashAttentionV4GetWorkspaceSize",
    "aclnnIncreFlashAttentionV4",
    "aclEmuGetRunCounters",
    "aclEmuResetRunCounters",
];

/// One opened library, with the label it is reported under.
pub(crate) struct Loaded {
    pub(crate) label: String,
    pub(crate) lib: libloading::Library,
}

/// The loaded CANN libraries and their lazily resolved symbols (loading: `crate::load`;
/// one resolver per symbol: the table above).
pub struct Api {
    pub(crate) runtime: Loaded,
    pub(crate) nnopbase: Result<Loaded, LoadError>,
    pub(crate) opapi: Result<Vec<Loaded>, LoadError>,
    /// Dependencies opened by absolute path; kept loaded for the libraries above.
    pub(crate) _deps: Vec<libloading::Library>,
    /// Where the libraries came from (a directory or "system loader").
    pub(crate) origin: String,
    pub(crate) slots: Slots,
}
