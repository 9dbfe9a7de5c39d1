/*
 * npurt test header, laid out like CANN's aclnn/aclnn_base.h: every operator header
 * includes it, and it pulls in aclnn/acl_meta.h. Declares aclnnInit and
 * aclnnFinalize as hicann/opbase's include/nnopbase/aclnn/aclnn_base.h does.
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
