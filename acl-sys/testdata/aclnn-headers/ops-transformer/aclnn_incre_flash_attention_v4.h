/*
 * npurt test header for aclnnIncreFlashAttentionV4, laid out like an operator header of
 * CANN's operator repositories (aclnnop/aclnn_incre_flash_attention_v4.h, generated when the
 * operator is built): aclnn/aclnn_base.h for the types and aclnn_util.h for ACLNN_API.
 * Prototypes as the operator's docs in hicann/ops-transformer declare them
 * (attention/incre_flash_attention/docs/aclnnIncreFlashAttentionV4.md).
 */
#ifndef NPURT_TESTDATA_ACLNN_INCRE_FLASH_ATTENTION_V4_H
#define NPURT_TESTDATA_ACLNN_INCRE_FLASH_ATTENTION_V4_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnIncreFlashAttentionV4GetWorkspaceSize(const aclTensor *query,
    const aclTensorList *key, const aclTensorList *value, const aclTensor *pseShift,
    const aclTensor *attenMask, const aclIntArray *actualSeqLengths, const aclTensor *dequantScale1,
    const aclTensor *quantScale1, const aclTensor *dequantScale2, const aclTensor *quantScale2,
    const aclTensor *quantOffset2, const aclTensor *antiquantScale, const aclTensor *antiquantOffset,
    const aclTensor *blocktable, const aclTensor *kvPaddingSize, int64_t numHeads, double scaleValue,
    char *inputLayout, int64_t numKeyValueHeads, int64_t blockSize, int64_t innerPrecise,
    const aclTensor *attentionOut, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnIncreFlashAttentionV4(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
