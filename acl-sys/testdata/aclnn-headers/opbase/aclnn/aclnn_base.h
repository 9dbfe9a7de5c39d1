/*
 * npurt test header, laid out like CANN's aclnn/aclnn_base.h: every operator header
 * includes it, and it pulls in aclnn/acl_meta.h. Written from
 * ../shared/ascend/ACL_API_FACTS.md section C.2 (aclnnInit / aclnnFinalize).
 */
#ifndef NPURT_TESTDATA_ACLNN_BASE_H
#define NPURT_TESTDATA_ACLNN_BASE_H

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnInit(const char *configPath);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFinalize();

#ifdef __cplusplus
}
#endif

#endif
