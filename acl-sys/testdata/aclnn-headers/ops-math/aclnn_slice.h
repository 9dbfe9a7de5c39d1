/*
 * npurt test header for aclnnSlice, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_slice.h): aclnn/aclnn_base.h for the
 * types and aclnn_util.h for ACLNN_API. Prototypes as the real header in
 * hicann/ops-math declares them (conversion/strided_slice_v3).
 */
#ifndef NPURT_TESTDATA_ACLNN_SLICE_H
#define NPURT_TESTDATA_ACLNN_SLICE_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnSliceGetWorkspaceSize(const aclTensor *self, int64_t dim, int64_t start, int64_t end,
    int64_t step, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnSlice(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
