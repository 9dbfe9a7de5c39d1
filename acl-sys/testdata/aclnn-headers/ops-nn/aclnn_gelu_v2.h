/*
 * npurt test header for aclnnGeluV2, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_gelu_v2.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes as the real header in
 * hicann/ops-nn declares them.
 */
#ifndef NPURT_TESTDATA_ACLNN_GELU_V2_H
#define NPURT_TESTDATA_ACLNN_GELU_V2_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate,
    aclTensor *y, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnGeluV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
