//! The fixed names the EP reports to ONNX Runtime.

use core::ffi::CStr;

/// The EP's name, fixed: applications select it by this name.
pub const EP_NAME: &CStr = c"NpurtExecutionProvider";
/// The vendor, fixed.
pub const EP_VENDOR: &CStr = c"npurt";
/// The EP's version: the crate's (semantic versioning, as ORT asks).
pub const EP_VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("the crate version has a NUL"),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_fixed_ones() {
        assert_eq!(EP_NAME.to_str().unwrap(), "NpurtExecutionProvider");
        assert_eq!(EP_VENDOR.to_str().unwrap(), "npurt");
        assert_eq!(EP_VERSION.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        // ORT's option prefix is `ep.` + the lower-cased EP name + `.`.
        assert_eq!(crate::options::OPTION_PREFIX, format!("ep.{}.", EP_NAME.to_str().unwrap().to_lowercase()));
    }
}
