/*
 * npurt test header. In an installed toolkit, aclnn_util.h sits next to the operator
 * headers (include/aclnnop/), and in recent releases it needs opbase internals
 * (opdev/platform.h, C++ namespaces) besides defining ACLNN_API. acl-sys's aclnn check
 * must read its own stub instead, even though a quoted include of "aclnn_util.h" from a
 * header in this directory looks here first: reading this file fails the build.
 */
#error "acl-sys's aclnn ABI check read the aclnn_util.h next to the operator headers instead of its stub"
