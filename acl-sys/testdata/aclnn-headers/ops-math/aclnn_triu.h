/*
 * npurt test header for aclnnTriu, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_triu.h): aclnn/aclnn_base.h for the
 * types and aclnn_util.h for ACLNN_API. Prototypes as the real header in
 * hicann/ops-math declares them.
 */
#ifndef NPURT_TESTDATA_ACLNN_TRIU_H
#define NPURT_TESTDATA_ACLNN_TRIU_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnTriuGetWorkspaceSize(const aclTensor *self, int64_t diagonal, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnTriu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
