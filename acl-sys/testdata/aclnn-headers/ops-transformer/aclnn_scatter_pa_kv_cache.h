/*
 * npurt test header for aclnnScatterPaKvCache, laid out like an operator header of CANN's
 * operator repositories (aclnnop/aclnn_scatter_pa_kv_cache.h, generated when the operator
 * is built): aclnn/aclnn_base.h for the types and aclnn_util.h for ACLNN_API. Prototypes
 * as the operator's docs in hicann/ops-transformer declare them
 * (attention/scatter_pa_kv_cache/docs/aclnnScatterPaKvCache.md).
 */
#ifndef NPURT_TESTDATA_ACLNN_SCATTER_PA_KV_CACHE_H
#define NPURT_TESTDATA_ACLNN_SCATTER_PA_KV_CACHE_H

#include "aclnn/aclnn_base.h"
#include "aclnn_util.h"

#ifdef __cplusplus
extern "C" {
#endif

ACLNN_API aclnnStatus aclnnScatterPaKvCacheGetWorkspaceSize(const aclTensor *key, aclTensor *keyCacheRef,
    const aclTensor *slotMapping, const aclTensor *value, aclTensor *valueCacheRef,
    const aclTensor *compressLensOptional, const aclTensor *compressSeqOffsetOptional,
    const aclTensor *seqLensOptional, char *cacheModeOptional, char *scatterModeOptional,
    const aclIntArray *stridesOptional, const aclIntArray *offsetsOptional, uint64_t *workspaceSize,
    aclOpExecutor **executor);
ACLNN_API aclnnStatus aclnnScatterPaKvCache(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
