/*
 * npurt test header for aclnnRmsNorm, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_rms_norm.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes from hicann/ops-nn's operator docs (docs/aclnn*.md):
 * that repository has no header for it (one is generated when it is built).
 */
#ifndef NPURT_TESTDATA_ACLNN_RMS_NORM_H
#define NPURT_TESTDATA_ACLNN_RMS_NORM_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma,
    double epsilon, const aclTensor *yOut, const aclTensor *rstdOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
