//! `NPURT_TEST_REQUIRE`: the backends whose absence fails a test instead of skipping it.
//!
//! A test whose backend cannot be made (absent, or failing to load) skips with a `SKIP`
//! line, so that a machine without, say, a GPU still runs the rest. That also turns a
//! broken build of `libacl_emu.so` into green Ascend tests. [`REQUIRE_VAR`] lists, comma
//! separated, the names of [`BACKENDS`] that must be there (CI sets `cpu,acl_emu`): their
//! absence fails the test, with the reason. Unset or empty, every backend may skip.

/// The backend names a case is generated for (`per_backend!`), in the order of its tests.
pub const BACKENDS: [&str; 3] = ["cpu", "acl_emu", "cuda"];

/// The environment variable naming the backends that must be present.
pub const REQUIRE_VAR: &str = "NPURT_TEST_REQUIRE";

/// The value of [`REQUIRE_VAR`] in the environment, if set.
pub fn require_from_env() -> Option<String> {
    std::env::var(REQUIRE_VAR).ok()
}

/// What a test does when `backend` cannot be made (`why`), given `require`, the value of
/// [`REQUIRE_VAR`] (`None`: unset): `Ok(())` when the backend is not required (the caller
/// skips); `Err(message)` when it is, or when `require` names a backend that does not
/// exist (a typo would otherwise require nothing): the caller fails with the message.
pub fn absent(require: Option<&str>, test: &str, backend: &str, why: &str) -> Result<(), String> {
    let Some(value) = require else { return Ok(()) };
    let mut required = false;
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !BACKENDS.contains(&name) {
            return Err(format!(
                "{REQUIRE_VAR}={value:?} names an unknown backend {name:?} (known: {})",
                BACKENDS.join(", ")
            ));
        }
        required |= name == backend;
    }
    if required {
        return Err(format!("{test}: backend {backend} is required ({REQUIRE_VAR}={value:?}) but absent: {why}"));
    }
    Ok(())
}

/// Fails the calling test (a panic with the reason) when the environment requires
/// `backend`, which cannot be made (`why`); returns when the test may skip instead.
pub fn fail_if_required(test: &str, backend: &str, why: &str) {
    if let Err(msg) = absent(require_from_env().as_deref(), test, backend, why) {
        panic!("{msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_backend_skips_unless_required() {
        for require in [None, Some(""), Some("cpu"), Some("cpu,cuda")] {
            assert_eq!(absent(require, "case", "acl_emu", "gone"), Ok(()), "{require:?}");
        }
        for require in ["acl_emu", "cpu,acl_emu", " cpu , acl_emu ", "acl_emu,"] {
            let msg = absent(Some(require), "case", "acl_emu", "libacl_emu.so not found").unwrap_err();
            assert!(msg.contains("case") && msg.contains("acl_emu") && msg.contains(REQUIRE_VAR), "{msg}");
            assert!(msg.contains("libacl_emu.so not found"), "the reason is kept: {msg}");
        }
        let msg = absent(Some("cpu,acl-emu"), "case", "cpu", "gone").unwrap_err();
        assert!(msg.contains("unknown backend \"acl-emu\""), "{msg}");
    }
}
