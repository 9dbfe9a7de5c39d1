//! The aclnn symbols: descriptor objects and executors ([`basics`]), and the operators'
//! two phases (`aclnnXGetWorkspaceSize`, `aclnnX`) by family.

pub mod basics;
pub mod copy;
pub mod elementwise;
pub mod gather;
pub mod masking;
pub mod matmul;
pub mod norm;
pub mod reduce;
