//! Facts recorded by `build.rs` when this binary was built.

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const GIT_COMMIT: &str = env!("NPURT_GIT_COMMIT");
/// Cargo features enabled on this package, which passes them on to `npurt` (comma-separated).
pub const FEATURES: &str = env!("NPURT_BUILD_FEATURES");
/// CPU features the compiler could assume for the target (comma-separated).
pub const TARGET_FEATURES: &str = env!("NPURT_TARGET_FEATURES");
pub const TARGET: &str = env!("NPURT_TARGET");
pub const PROFILE: &str = env!("NPURT_PROFILE");
