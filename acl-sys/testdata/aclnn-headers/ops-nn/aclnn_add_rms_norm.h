/*
 * npurt test header for aclnnAddRmsNorm, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_add_rms_norm.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes from hicann/ops-nn's operator docs (docs/aclnn*.md):
 * the header itself is generated when the operator is built.
 */
#ifndef NPURT_TESTDATA_ACLNN_ADD_RMS_NORM_H
#define NPURT_TESTDATA_ACLNN_ADD_RMS_NORM_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnAddRmsNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2,
    const aclTensor *gamma, double epsilon, const aclTensor *yOut, const aclTensor *rstdOut,
    const aclTensor *xOut, uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnAddRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
