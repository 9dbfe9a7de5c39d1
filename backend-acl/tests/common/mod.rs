//! Test harness: the acl-emu helpers of `npurt-test-support`, and the backend over a fake
//! toolkit.
#![allow(dead_code)]

#[allow(unused_imports)] // each test binary uses some of them
pub use npurt_test_support::emu::{Emu, EmuCounters, emu_lib, emu_or_skip, fake_toolkit, serial};

use backend_acl::{AclBackend, AclConfig, Fp32Matmul};
use std::path::Path;

pub fn backend(toolkit: &Path) -> Result<AclBackend, backend_acl::AclBackendError> {
    // Exact f32 products: the suites compare f32 results at f32 tolerances.
    AclBackend::new(AclConfig { lib_dir: Some(toolkit.join("lib64")), fp32_matmul: Fp32Matmul::Exact })
}
