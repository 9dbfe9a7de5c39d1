/*
 * npurt test header for aclnnMatmul, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_matmul.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes as the real header in
 * hicann/ops-nn declares them.
 */
#ifndef NPURT_TESTDATA_ACLNN_MATMUL_H
#define NPURT_TESTDATA_ACLNN_MATMUL_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2,
    aclTensor *out, int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
