/*
 * npurt test header: a minimal stand-in for CANN's runtime header acl/acl_base.h,
 * with the real header's definitions of only what the aclnn test headers use: the
 * visibility macro, aclError, aclFloat16, aclrtStream and the two enums aclnn
 * prototypes take by value (aclDataType, aclFormat).
 */
#ifndef NPURT_TESTDATA_ACL_BASE_H
#define NPURT_TESTDATA_ACL_BASE_H

#include <stdint.h>
#include <stddef.h>

#ifndef ACL_FUNC_VISIBILITY
#define ACL_FUNC_VISIBILITY
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef uint16_t aclFloat16;
typedef void *aclrtStream;

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27,
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_FRACTAL_NZ = 29,
} aclFormat;

#ifdef __cplusplus
}
#endif

#endif
