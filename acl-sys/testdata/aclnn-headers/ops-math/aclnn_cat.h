/*
 * npurt test header for aclnnCat, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_cat.h): aclnn/aclnn_base.h for the
 * types and aclnn_util.h for ACLNN_API. Prototypes as the real header in
 * hicann/ops-math declares them (its stream parameter is `const aclrtStream`).
 */
#ifndef NPURT_TESTDATA_ACLNN_CAT_H
#define NPURT_TESTDATA_ACLNN_CAT_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnCatGetWorkspaceSize(const aclTensorList *tensors, int64_t dim, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnCat(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
