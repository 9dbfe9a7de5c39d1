/*
 * npurt test header for aclnnSqrt, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_sqrt.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes as the real header in
 * hicann/ops-math declares them.
 */
#ifndef NPURT_TESTDATA_ACLNN_SQRT_H
#define NPURT_TESTDATA_ACLNN_SQRT_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnSqrtGetWorkspaceSize(const aclTensor *self, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **opExecutor);
ACLNN_API aclnnStatus aclnnSqrt(void *workspace, uint64_t workspaceSize, aclOpExecutor *opExecutor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
