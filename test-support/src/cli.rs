//! The `npurt` binary (package `npurt-cli`) for the tests of other packages that run it.
//!
//! Cargo hands `CARGO_BIN_EXE_npurt` only to the tests of the package that builds the
//! binary; the root package's tests that run it (facade discovery, `npurt embed`,
//! `npurt bench bert --concurrent`) find it here instead. `cargo test` at the root and
//! `cargo test --workspace` build it before any test runs; `cargo test -p npurt` alone
//! does not (then run `cargo build -p npurt-cli` first).

use std::path::PathBuf;

/// `$NPURT_BIN`, or `npurt` in the profile directory of the running test binary
/// (`target/<profile>/`). Panics, naming the command that builds it, when it is absent:
/// a missing binary fails the test instead of skipping it.
pub fn npurt_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NPURT_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> -> target/<profile>/npurt
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("the test binary's profile directory");
    let bin = profile.join(format!("npurt{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the npurt binary is not built at {}: `cargo build -p npurt-cli` builds it (`cargo test` at the root \
         and `cargo test --workspace` do so before the tests run)",
        bin.display()
    );
    bin
}
