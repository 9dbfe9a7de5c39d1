/*
 * npurt test header for aclnnScatterNdUpdate, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_scatter_nd_update.h, shipped as
 * aclnnop/level2/aclnn_scatter_nd_update.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes as the operator's docs in hicann/ops-nn
 * (index/scatter_nd_update/docs/aclnnScatterNdUpdate.md) declare them.
 */
#ifndef NPURT_TESTDATA_ACLNN_SCATTER_ND_UPDATE_H
#define NPURT_TESTDATA_ACLNN_SCATTER_ND_UPDATE_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnScatterNdUpdateGetWorkspaceSize(aclTensor *varRef, const aclTensor *indices,
    const aclTensor *updates, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnScatterNdUpdate(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
