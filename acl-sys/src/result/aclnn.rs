//! The aclnn calls npurt makes (`aclnn/acl_meta.h`, `aclnnop/aclnn_*.h`): descriptors, executors and the two
//! phases of each operator.
//!
//! Descriptors are host objects over device memory: creating one copies its arrays and
//! never dereferences the device address. The creators return NULL on failure; that is
//! reported as [`AclError::Status`] with `ACLNN_ERR_INNER_NULLPTR` (561103), the code
//! nnopbase itself gives a NULL object, and the recent message.
//!
//! Phase 1 (`aclnnXxxGetWorkspaceSize`) returns `(workspace bytes, executor)`; phase 2
//! (`aclnnXxx`) queues the operator on a stream and consumes a one-shot executor.
//!
//! # Safety
//!
//! Besides the module-wide contract of [`crate::result`]: descriptors passed to an
//! operator are live (or NULL where the operator documents the parameter as optional),
//! and the device memory they describe stays allocated until the stream has run the
//! operator. An executor from phase 1 is used by exactly one phase-2 call, or made
//! repeatable and destroyed (the one documented way to release it unlaunched, §C.4).

#![allow(non_snake_case)]
// The C prototypes take that many parameters.
#![allow(clippy::too_many_arguments)]

use super::{check, recent_error_message};
use crate::codes;
use crate::types::*;
use crate::{AclError, Api};
use std::ffi::c_void;

/// A NULL returned by a descriptor creator, as an error.
fn null_object(api: &Api, call: &'static str) -> AclError {
    let code = codes::ACLNN_ERR_INNER_NULLPTR;
    AclError::Status { code, name: codes::name(code), call, message: recent_error_message(api) }
}

/// `aclCreateTensor(viewDims, viewDimsNum, dataType, stride, offset, format, storageDims,
/// storageDimsNum, tensorData)`: dims, strides and offset in elements.
///
/// # Safety
/// `viewDims` and `stride` hold `viewDimsNum` elements, `storageDims` holds
/// `storageDimsNum`, all readable for the call (which copies them). `tensorData` is a
/// device address the tensor may be used to read or write later.
pub unsafe fn create_tensor(
    api: &Api,
    viewDims: *const i64,
    viewDimsNum: u64,
    dataType: aclDataType,
    stride: *const i64,
    offset: i64,
    format: aclFormat,
    storageDims: *const i64,
    storageDimsNum: u64,
    tensorData: *mut c_void,
) -> Result<*mut aclTensor, AclError> {
    let f = api.aclCreateTensor()?;
    // SAFETY: the caller's contract on the arrays; the device address is not dereferenced.
    let t =
        unsafe { f(viewDims, viewDimsNum, dataType, stride, offset, format, storageDims, storageDimsNum, tensorData) };
    if t.is_null() {
        return Err(null_object(api, "aclCreateTensor"));
    }
    Ok(t)
}

/// `aclDestroyTensor(tensor)`: frees the descriptor, never the device memory.
///
/// # Safety
/// `tensor` came from [`create_tensor`], is destroyed once, and no call still to return
/// uses it.
pub unsafe fn destroy_tensor(api: &Api, tensor: *const aclTensor) -> Result<(), AclError> {
    let f = api.aclDestroyTensor()?;
    // SAFETY: the caller's contract on `tensor`.
    let code = unsafe { f(tensor) };
    check(api, "aclDestroyTensor", code)
}

/// `aclCreateScalar(value, dataType)`: the host value is copied.
///
/// # Safety
/// `value` points to a readable host value of `dataType`.
pub unsafe fn create_scalar(api: &Api, value: *mut c_void, dataType: aclDataType) -> Result<*mut aclScalar, AclError> {
    let f = api.aclCreateScalar()?;
    // SAFETY: the caller's contract on `value`.
    let s = unsafe { f(value, dataType) };
    if s.is_null() {
        return Err(null_object(api, "aclCreateScalar"));
    }
    Ok(s)
}

/// `aclDestroyScalar(scalar)`.
///
/// # Safety
/// `scalar` came from [`create_scalar`], is destroyed once, and no call still to return
/// uses it.
pub unsafe fn destroy_scalar(api: &Api, scalar: *const aclScalar) -> Result<(), AclError> {
    let f = api.aclDestroyScalar()?;
    // SAFETY: the caller's contract on `scalar`.
    let code = unsafe { f(scalar) };
    check(api, "aclDestroyScalar", code)
}

/// `aclCreateIntArray(value, size)`: the values are copied.
///
/// # Safety
/// `value` holds `size` readable elements.
pub unsafe fn create_int_array(api: &Api, value: *const i64, size: u64) -> Result<*mut aclIntArray, AclError> {
    let f = api.aclCreateIntArray()?;
    // SAFETY: the caller's contract on `value`.
    let a = unsafe { f(value, size) };
    if a.is_null() {
        return Err(null_object(api, "aclCreateIntArray"));
    }
    Ok(a)
}

/// `aclDestroyIntArray(array)`.
///
/// # Safety
/// `array` came from [`create_int_array`], is destroyed once, and no call still to
/// return uses it.
pub unsafe fn destroy_int_array(api: &Api, array: *const aclIntArray) -> Result<(), AclError> {
    let f = api.aclDestroyIntArray()?;
    // SAFETY: the caller's contract on `array`.
    let code = unsafe { f(array) };
    check(api, "aclDestroyIntArray", code)
}

/// `aclCreateTensorList(value, size)`: a list of `size` tensor descriptors, which it then
/// owns (destroying the list destroys them).
///
/// # Safety
/// `value` holds `size` live descriptors from [`create_tensor`], none in another list.
pub unsafe fn create_tensor_list(
    api: &Api,
    value: *const *const aclTensor,
    size: u64,
) -> Result<*mut aclTensorList, AclError> {
    let f = api.aclCreateTensorList()?;
    // SAFETY: the caller's contract on `value`.
    let l = unsafe { f(value, size) };
    if l.is_null() {
        return Err(null_object(api, "aclCreateTensorList"));
    }
    Ok(l)
}

/// `aclDestroyTensorList(array)`: frees the list and the descriptors in it.
///
/// # Safety
/// `array` came from [`create_tensor_list`], is destroyed once, no call still to return
/// uses it, and its descriptors are not destroyed on their own.
pub unsafe fn destroy_tensor_list(api: &Api, array: *const aclTensorList) -> Result<(), AclError> {
    let f = api.aclDestroyTensorList()?;
    // SAFETY: the caller's contract on `array`.
    let code = unsafe { f(array) };
    check(api, "aclDestroyTensorList", code)
}

/// `aclSetAclOpExecutorRepeatable(executor)`: phase 2 may then run many times, and the
/// executor lives until [`destroy_executor`].
///
/// # Safety
/// `executor` is a live executor from phase 1.
pub unsafe fn set_executor_repeatable(api: &Api, executor: *mut aclOpExecutor) -> Result<(), AclError> {
    let f = api.aclSetAclOpExecutorRepeatable()?;
    // SAFETY: the caller's contract on `executor`.
    let code = unsafe { f(executor) };
    check(api, "aclSetAclOpExecutorRepeatable", code)
}

/// `aclDestroyAclOpExecutor(executor)`: only for executors made repeatable.
///
/// # Safety
/// `executor` was made repeatable, is destroyed once, and no queued work still needs it.
pub unsafe fn destroy_executor(api: &Api, executor: *mut aclOpExecutor) -> Result<(), AclError> {
    let f = api.aclDestroyAclOpExecutor()?;
    // SAFETY: the caller's contract on `executor`.
    let code = unsafe { f(executor) };
    check(api, "aclDestroyAclOpExecutor", code)
}

/// `aclSetInputTensorAddr(executor, index, tensor, addr)`: input tensor `index` (counted
/// over the operator's input tensors in prototype order, scalars and int arrays not
/// counted) of a repeatable executor reads `addr` from its next phase 2 on.
///
/// # Safety
/// `executor` was made repeatable and is live; `tensor` is the live descriptor passed
/// as that input at phase 1; `addr` is 32-byte aligned device memory that holds the
/// view and stays allocated while launches reading it are queued.
pub unsafe fn set_input_tensor_addr(
    api: &Api,
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> Result<(), AclError> {
    let f = api.aclSetInputTensorAddr()?;
    // SAFETY: the caller's contract on the executor, the descriptor and the address.
    let code = unsafe { f(executor, index, tensor, addr) };
    check(api, "aclSetInputTensorAddr", code)
}

/// `aclSetOutputTensorAddr(executor, index, tensor, addr)`: as
/// [`set_input_tensor_addr`], for output tensor `index`.
///
/// # Safety
/// As for [`set_input_tensor_addr`].
pub unsafe fn set_output_tensor_addr(
    api: &Api,
    executor: *mut aclOpExecutor,
    index: usize,
    tensor: *mut aclTensor,
    addr: *mut c_void,
) -> Result<(), AclError> {
    let f = api.aclSetOutputTensorAddr()?;
    // SAFETY: the caller's contract on the executor, the descriptor and the address.
    let code = unsafe { f(executor, index, tensor, addr) };
    check(api, "aclSetOutputTensorAddr", code)
}

/// `aclSetDynamicInputTensorAddr(executor, irIndex, relativeIndex, tensors, addr)`: member
/// `relativeIndex` of the tensor list given as input `irIndex` (the operator's IR input
/// index, its prototype's position) of a repeatable executor reads `addr` from its next
/// phase 2 on.
///
/// # Safety
/// `executor` was made repeatable and is live; `tensors` is the live list passed as that
/// input at phase 1 and has such a member; `addr` is 32-byte aligned device memory that
/// holds the member's view and stays allocated while launches reading it are queued.
pub unsafe fn set_dynamic_input_tensor_addr(
    api: &Api,
    executor: *mut aclOpExecutor,
    ir_index: usize,
    relative_index: usize,
    tensors: *mut aclTensorList,
    addr: *mut c_void,
) -> Result<(), AclError> {
    let f = api.aclSetDynamicInputTensorAddr()?;
    // SAFETY: the caller's contract on the executor, the list and the address.
    let code = unsafe { f(executor, ir_index, relative_index, tensors, addr) };
    check(api, "aclSetDynamicInputTensorAddr", code)
}

/// Declares phase 1 and phase 2 of each operator. Phase 1 takes the C parameters up to
/// (not including) `workspaceSize, executor`; phase 2 always takes
/// `(workspace, workspaceSize, executor, stream)`.
macro_rules! two_phase {
    ($( $phase1:ident, $phase2:ident => $c1:ident, $c2:ident ( $( $arg:ident : $ty:ty ),* $(,)? ); )*) => {$(
        #[doc = concat!("`", stringify!($c1), "(", $(stringify!($arg), ", ",)* "&workspaceSize, &executor)`: ",
            "phase 1 of `", stringify!($c2), "`, returning `(workspaceSize, executor)`.")]
        ///
        /// # Safety
        /// The descriptors are live (NULL only where the operator documents the parameter
        /// as optional). The executor returned is used by exactly one phase-2 call, or
        /// made repeatable and destroyed.
        pub unsafe fn $phase1(api: &Api, $( $arg: $ty ),*) -> Result<(u64, *mut aclOpExecutor), AclError> {
            let f = api.$c1()?;
            let mut workspace_size = 0u64;
            let mut executor: *mut aclOpExecutor = std::ptr::null_mut();
            // SAFETY: the caller's contract on the descriptors; valid out-pointers.
            let code = unsafe { f($( $arg, )* &mut workspace_size, &mut executor) };
            check(api, stringify!($c1), code)?;
            Ok((workspace_size, executor))
        }

        #[doc = concat!("`", stringify!($c2), "(workspace, workspaceSize, executor, stream)`: phase 2, ",
            "queues the operator on `stream`.")]
        ///
        /// # Safety
        #[doc = concat!("`executor` comes from [`", stringify!($phase1), "`] and is used once (unless made ",
            "repeatable); `workspace` is device memory of at least `workspaceSize` bytes (NULL when 0) and it, ",
            "like the memory the descriptors describe, stays allocated until the stream has run the operator; ",
            "`stream` is a live stream of the current device.")]
        pub unsafe fn $phase2(
            api: &Api,
            workspace: *mut c_void,
            workspaceSize: u64,
            executor: *mut aclOpExecutor,
            stream: aclrtStream,
        ) -> Result<(), AclError> {
            let f = api.$c2()?;
            // SAFETY: the caller's contract on the executor, the workspace and the stream.
            let code = unsafe { f(workspace, workspaceSize, executor, stream) };
            check(api, stringify!($c2), code)
        }
    )*};
}

two_phase! {
    matmul_get_workspace_size, matmul => aclnnMatmulGetWorkspaceSize, aclnnMatmul(
        self_: *const aclTensor, mat2: *const aclTensor, out: *mut aclTensor, cubeMathType: i8,
    );
    addmm_get_workspace_size, addmm => aclnnAddmmGetWorkspaceSize, aclnnAddmm(
        self_: *const aclTensor, mat1: *const aclTensor, mat2: *const aclTensor, beta: *const aclScalar,
        alpha: *const aclScalar, out: *mut aclTensor, cubeMathType: i8,
    );
    add_get_workspace_size, add => aclnnAddGetWorkspaceSize, aclnnAdd(
        self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor,
    );
    sub_get_workspace_size, sub => aclnnSubGetWorkspaceSize, aclnnSub(
        self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor,
    );
    mul_get_workspace_size, mul => aclnnMulGetWorkspaceSize, aclnnMul(
        self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
    );
    div_get_workspace_size, div => aclnnDivGetWorkspaceSize, aclnnDiv(
        self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
    );
    adds_get_workspace_size, adds => aclnnAddsGetWorkspaceSize, aclnnAdds(
        self_: *const aclTensor, other: *const aclScalar, alpha: *const aclScalar, out: *mut aclTensor,
    );
    muls_get_workspace_size, muls => aclnnMulsGetWorkspaceSize, aclnnMuls(
        self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor,
    );
    relu_get_workspace_size, relu => aclnnReluGetWorkspaceSize, aclnnRelu(
        self_: *const aclTensor, out: *const aclTensor,
    );
    gelu_get_workspace_size, gelu => aclnnGeluGetWorkspaceSize, aclnnGelu(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    gelu_v2_get_workspace_size, gelu_v2 => aclnnGeluV2GetWorkspaceSize, aclnnGeluV2(
        x: *const aclTensor, approximate: i64, y: *mut aclTensor,
    );
    tanh_get_workspace_size, tanh => aclnnTanhGetWorkspaceSize, aclnnTanh(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    erf_get_workspace_size, erf => aclnnErfGetWorkspaceSize, aclnnErf(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    exp_get_workspace_size, exp => aclnnExpGetWorkspaceSize, aclnnExp(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    sqrt_get_workspace_size, sqrt => aclnnSqrtGetWorkspaceSize, aclnnSqrt(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    slice_get_workspace_size, slice => aclnnSliceGetWorkspaceSize, aclnnSlice(
        self_: *const aclTensor, dim: i64, start: i64, end: i64, step: i64, out: *mut aclTensor,
    );
    expand_get_workspace_size, expand => aclnnExpandGetWorkspaceSize, aclnnExpand(
        self_: *const aclTensor, size: *const aclIntArray, out: *mut aclTensor,
    );
    cat_get_workspace_size, cat => aclnnCatGetWorkspaceSize, aclnnCat(
        tensors: *const aclTensorList, dim: i64, out: *mut aclTensor,
    );
    s_where_get_workspace_size, s_where => aclnnSWhereGetWorkspaceSize, aclnnSWhere(
        condition: *const aclTensor, self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
    );
    rotary_position_embedding_get_workspace_size, rotary_position_embedding =>
        aclnnRotaryPositionEmbeddingGetWorkspaceSize, aclnnRotaryPositionEmbedding(
        x: *const aclTensor, cos: *const aclTensor, sin: *const aclTensor, mode: i64, out: *mut aclTensor,
    );
    scatter_nd_update_get_workspace_size, scatter_nd_update =>
        aclnnScatterNdUpdateGetWorkspaceSize, aclnnScatterNdUpdate(
        varRef: *mut aclTensor, indices: *const aclTensor, updates: *const aclTensor,
    );
    scatter_pa_kv_cache_get_workspace_size, scatter_pa_kv_cache =>
        aclnnScatterPaKvCacheGetWorkspaceSize, aclnnScatterPaKvCache(
        key: *const aclTensor, keyCacheRef: *mut aclTensor, slotMapping: *const aclTensor,
        value: *const aclTensor, valueCacheRef: *mut aclTensor, compressLensOptional: *const aclTensor,
        compressSeqOffsetOptional: *const aclTensor, seqLensOptional: *const aclTensor,
        cacheModeOptional: *mut std::ffi::c_char, scatterModeOptional: *mut std::ffi::c_char,
        stridesOptional: *const aclIntArray, offsetsOptional: *const aclIntArray,
    );
    incre_flash_attention_v4_get_workspace_size, incre_flash_attention_v4 =>
        aclnnIncreFlashAttentionV4GetWorkspaceSize, aclnnIncreFlashAttentionV4(
        query: *const aclTensor, key: *const aclTensorList, value: *const aclTensorList,
        pseShift: *const aclTensor, attenMask: *const aclTensor, actualSeqLengths: *const aclIntArray,
        dequantScale1: *const aclTensor, quantScale1: *const aclTensor, dequantScale2: *const aclTensor,
        quantScale2: *const aclTensor, quantOffset2: *const aclTensor, antiquantScale: *const aclTensor,
        antiquantOffset: *const aclTensor, blocktable: *const aclTensor, kvPaddingSize: *const aclTensor,
        numHeads: i64, scaleValue: f64, inputLayout: *mut std::ffi::c_char, numKeyValueHeads: i64,
        blockSize: i64, innerPrecise: i64, attentionOut: *const aclTensor,
    );
    triu_get_workspace_size, triu => aclnnTriuGetWorkspaceSize, aclnnTriu(
        self_: *const aclTensor, diagonal: i64, out: *mut aclTensor,
    );
    eq_tensor_get_workspace_size, eq_tensor => aclnnEqTensorGetWorkspaceSize, aclnnEqTensor(
        self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor,
    );
    pow_tensor_tensor_get_workspace_size, pow_tensor_tensor => aclnnPowTensorTensorGetWorkspaceSize, aclnnPowTensorTensor(
        self_: *const aclTensor, exponent: *const aclTensor, out: *mut aclTensor,
    );
    neg_get_workspace_size, neg => aclnnNegGetWorkspaceSize, aclnnNeg(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    sigmoid_get_workspace_size, sigmoid => aclnnSigmoidGetWorkspaceSize, aclnnSigmoid(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    softmax_get_workspace_size, softmax => aclnnSoftmaxGetWorkspaceSize, aclnnSoftmax(
        self_: *const aclTensor, dim: i64, out: *mut aclTensor,
    );
    layer_norm_get_workspace_size, layer_norm => aclnnLayerNormGetWorkspaceSize, aclnnLayerNorm(
        input: *const aclTensor, normalizedShape: *const aclIntArray, weightOptional: *const aclTensor,
        biasOptional: *const aclTensor, eps: f64, out: *mut aclTensor, meanOutOptional: *mut aclTensor,
        rstdOutOptional: *mut aclTensor,
    );
    permute_get_workspace_size, permute => aclnnPermuteGetWorkspaceSize, aclnnPermute(
        self_: *const aclTensor, dims: *const aclIntArray, out: *mut aclTensor,
    );
    cast_get_workspace_size, cast => aclnnCastGetWorkspaceSize, aclnnCast(
        self_: *const aclTensor, dtype: aclDataType, out: *mut aclTensor,
    );
    reduce_sum_get_workspace_size, reduce_sum => aclnnReduceSumGetWorkspaceSize, aclnnReduceSum(
        self_: *const aclTensor, dims: *const aclIntArray, keepDims: bool, dtype: aclDataType, out: *mut aclTensor,
    );
    mean_get_workspace_size, mean => aclnnMeanGetWorkspaceSize, aclnnMean(
        self_: *const aclTensor, dim: *const aclIntArray, keepDim: bool, dtype: aclDataType, out: *mut aclTensor,
    );
    inplace_copy_get_workspace_size, inplace_copy => aclnnInplaceCopyGetWorkspaceSize, aclnnInplaceCopy(
        selfRef: *mut aclTensor, src: *const aclTensor,
    );
    index_select_get_workspace_size, index_select => aclnnIndexSelectGetWorkspaceSize, aclnnIndexSelect(
        self_: *const aclTensor, dim: i64, index: *const aclTensor, out: *mut aclTensor,
    );
    amax_get_workspace_size, amax => aclnnAmaxGetWorkspaceSize, aclnnAmax(
        self_: *const aclTensor, dim: *const aclIntArray, keepDim: bool, out: *mut aclTensor,
    );
    eq_scalar_get_workspace_size, eq_scalar => aclnnEqScalarGetWorkspaceSize, aclnnEqScalar(
        self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor,
    );
    inplace_masked_fill_scalar_get_workspace_size, inplace_masked_fill_scalar =>
        aclnnInplaceMaskedFillScalarGetWorkspaceSize, aclnnInplaceMaskedFillScalar(
        selfRef: *mut aclTensor, mask: *const aclTensor, value: *const aclScalar,
    );
    silu_get_workspace_size, silu => aclnnSiluGetWorkspaceSize, aclnnSilu(
        self_: *const aclTensor, out: *mut aclTensor,
    );
    rms_norm_get_workspace_size, rms_norm => aclnnRmsNormGetWorkspaceSize, aclnnRmsNorm(
        x: *const aclTensor, gamma: *const aclTensor, epsilon: f64, yOut: *const aclTensor, rstdOut: *const aclTensor,
    );
    add_rms_norm_get_workspace_size, add_rms_norm => aclnnAddRmsNormGetWorkspaceSize, aclnnAddRmsNorm(
        x1: *const aclTensor, x2: *const aclTensor, gamma: *const aclTensor, epsilon: f64, yOut: *const aclTensor,
        rstdOut: *const aclTensor, xOut: *const aclTensor,
    );
    swi_glu_get_workspace_size, swi_glu => aclnnSwiGluGetWorkspaceSize, aclnnSwiGlu(
        x: *const aclTensor, dim: i64, out: *const aclTensor,
    );
}

/// The attributes of `aclnnFlashAttentionScoreGetWorkspaceSize` (hicann/ops-transformer,
/// `aclnn_flash_attention_score.h`), in the order of its C prototype.
#[derive(Clone, Copy, Debug)]
pub struct FlashAttentionAttrs<'a> {
    /// `scale` of `softmax(scale * (pse + q·kᵀ)) · v`.
    pub scale_value: f64,
    /// Share of ones in the dropout mask, in (0, 1]; 1 = no dropout.
    pub keep_prob: f64,
    /// Sliding-window bounds (no effect without an attention mask).
    pub pre_tokens: i64,
    pub next_tokens: i64,
    /// Heads of the query (its N axis).
    pub head_num: i64,
    /// `"BNSD"`, `"BSND"`, `"BSH"`, `"SBH"` or `"TND"`.
    pub input_layout: &'a std::ffi::CStr,
    /// 0 and 1 reserved, 2 computes fully masked ("invalid") rows separately.
    pub inner_precise: i64,
    /// 0 to 6; 0 = the attention mask as given.
    pub sparse_mode: i64,
}

/// `aclnnFlashAttentionScoreGetWorkspaceSize(query, key, value, realShiftOptional,
/// dropMaskOptional, paddingMaskOptional, attenMaskOptional, prefixOptional, scaleValue,
/// keepProb, preTokens, nextTokens, headNum, inputLayout, innerPrecise, sparseMode,
/// softmaxMaxOut, softmaxSumOut, softmaxOutOut, attentionOutOut, &workspaceSize, &executor)`:
/// phase 1 of `aclnnFlashAttentionScore`, returning `(workspaceSize, executor)`.
///
/// # Safety
/// The descriptors are live (NULL only for the `*Optional` ones, `prefix` and
/// `softmax_out`). The executor returned is used by exactly one phase-2 call, or made
/// repeatable and destroyed.
pub unsafe fn flash_attention_score_get_workspace_size(
    api: &Api,
    query: *const aclTensor,
    key: *const aclTensor,
    value: *const aclTensor,
    realShiftOptional: *const aclTensor,
    dropMaskOptional: *const aclTensor,
    paddingMaskOptional: *const aclTensor,
    attenMaskOptional: *const aclTensor,
    prefixOptional: *const aclIntArray,
    attrs: &FlashAttentionAttrs<'_>,
    softmaxMaxOut: *const aclTensor,
    softmaxSumOut: *const aclTensor,
    softmaxOutOut: *const aclTensor,
    attentionOutOut: *const aclTensor,
) -> Result<(u64, *mut aclOpExecutor), AclError> {
    let f = api.aclnnFlashAttentionScoreGetWorkspaceSize()?;
    let a = attrs;
    let mut workspace_size = 0u64;
    let mut executor: *mut aclOpExecutor = std::ptr::null_mut();
    // SAFETY: the caller's contract on the descriptors; the layout string is NUL-terminated
    // and outlives the call, which only reads it (the header's `char *` is not `const`);
    // valid out-pointers.
    let code = unsafe {
        f(
            query,
            key,
            value,
            realShiftOptional,
            dropMaskOptional,
            paddingMaskOptional,
            attenMaskOptional,
            prefixOptional,
            a.scale_value,
            a.keep_prob,
            a.pre_tokens,
            a.next_tokens,
            a.head_num,
            a.input_layout.as_ptr().cast_mut(),
            a.inner_precise,
            a.sparse_mode,
            softmaxMaxOut,
            softmaxSumOut,
            softmaxOutOut,
            attentionOutOut,
            &mut workspace_size,
            &mut executor,
        )
    };
    check(api, "aclnnFlashAttentionScoreGetWorkspaceSize", code)?;
    Ok((workspace_size, executor))
}

/// `aclnnFlashAttentionScore(workspace, workspaceSize, executor, stream)`: phase 2, queues
/// the operator on `stream`.
///
/// # Safety
/// `executor` comes from [`flash_attention_score_get_workspace_size`] and is used once
/// (unless made repeatable); `workspace` is device memory of at least `workspaceSize` bytes
/// (NULL when 0) and it, like the memory the descriptors describe, stays allocated until the
/// stream has run the operator; `stream` is a live stream of the current device.
pub unsafe fn flash_attention_score(
    api: &Api,
    workspace: *mut c_void,
    workspaceSize: u64,
    executor: *mut aclOpExecutor,
    stream: aclrtStream,
) -> Result<(), AclError> {
    let f = api.aclnnFlashAttentionScore()?;
    // SAFETY: the caller's contract on the executor, the workspace and the stream.
    let code = unsafe { f(workspace, workspaceSize, executor, stream) };
    check(api, "aclnnFlashAttentionScore", code)
}
