/*
 * npurt test header for aclnnRotaryPositionEmbedding, laid out like an operator header
 * of CANN's operator repositories (aclnnop/aclnn_rotary_position_embedding.h, generated
 * when the operator is built): aclnn/aclnn_base.h for the types and aclnn_util.h for
 * ACLNN_API. Prototypes as the operator's docs in hicann/ops-transformer declare them
 * (posembedding/rotary_position_embedding/docs/aclnnRotaryPositionEmbedding.md).
 */
#ifndef NPURT_TESTDATA_ACLNN_ROTARY_POSITION_EMBEDDING_H
#define NPURT_TESTDATA_ACLNN_ROTARY_POSITION_EMBEDDING_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, const aclTensor *cos,
    const aclTensor *sin, int64_t mode, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnRotaryPositionEmbedding(void *workspace, uint64_t workspaceSize,
    aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
