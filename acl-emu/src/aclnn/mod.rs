//! The aclnn symbols: descriptor objects and executors ([`basics`]), the address setters
//! of repeatable executors ([`executor`]), and the operators'
//! two phases (`aclnnXGetWorkspaceSize`, `aclnnX`) by family.

pub mod attention;
pub mod basics;
pub mod copy;
pub mod elementwise;
pub mod executor;
pub mod gather;
pub mod incre_flash;
pub mod masking;
pub mod matmul;
pub mod movement;
pub mod norm;
pub mod reduce;
pub mod rotary;
pub mod scatter;
