/*
 * npurt test header for aclnnSwiGlu, laid out like an operator header of CANN's
 * operator repositories (op_api/aclnn_swi_glu.h): aclnn/aclnn_base.h for the types and
 * aclnn_util.h for ACLNN_API. Prototypes from hicann/ops-nn's operator docs (docs/aclnn*.md):
 * the header itself is generated when the operator is built.
 */
#ifndef NPURT_TESTDATA_ACLNN_SWI_GLU_H
#define NPURT_TESTDATA_ACLNN_SWI_GLU_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnSwiGlu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
