/*
 * npurt test header for aclnnFlashAttentionScore, laid out like an operator header of CANN's
 * operator repositories (hicann/ops-transformer, op_api/aclnn_flash_attention_score.h):
 * aclnn/aclnn_base.h for the types and aclnn_util.h for ACLNN_API. Parameter types and order
 * as the real header declares them (the real one also declares the VarLen and V2..V5
 * variants, which npurt does not bind).
 */
#ifndef NPURT_TESTDATA_ACLNN_FLASH_ATTENTION_SCORE_H
#define NPURT_TESTDATA_ACLNN_FLASH_ATTENTION_SCORE_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inputs query, key, value (layout inputLayout), then the optional pse ("real shift"),
 * dropout mask, padding mask (reserved) and attention mask; outputs the softmax row maxima
 * and sums (FLOAT), the reserved softmax output and the attention result. */
ACLNN_API aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(const aclTensor *query,
    const aclTensor *key, const aclTensor *value, const aclTensor *realShiftOptional,
    const aclTensor *dropMaskOptional, const aclTensor *paddingMaskOptional,
    const aclTensor *attenMaskOptional, const aclIntArray *prefixOptional, double scaleValue,
    double keepProb, int64_t preTokens, int64_t nextTokens, int64_t headNum, char *inputLayout,
    int64_t innerPrecise, int64_t sparseMode, const aclTensor *softmaxMaxOut,
    const aclTensor *softmaxSumOut, const aclTensor *softmaxOutOut,
    const aclTensor *attentionOutOut, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnFlashAttentionScore(void *workspace, uint64_t workspaceSize,
    aclOpExecutor *executor, const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
