//! Discovery as on a real host: `ASCEND_TOOLKIT_HOME` points at a toolkit whose
//! `lib64/` holds libascendcl.so, libnnopbase.so and libopapi.so (here: the emulator).
//! The only test of this binary, so setting the variable races with nothing.

mod common;

use backend_acl::{AclBackend, AclConfig};
use runtime::Backend;

#[test]
fn finds_the_toolkit_through_ascend_toolkit_home() {
    let Some(emu) = common::emu_or_skip("discovery") else { return };
    let tk = common::fake_toolkit("discovery", &emu);
    // SAFETY: single-threaded at this point of the only test in this process.
    unsafe { std::env::set_var("ASCEND_TOOLKIT_HOME", &tk) };
    let b = AclBackend::new(AclConfig::default()).expect("discovered");
    assert_eq!(b.library_origin(), tk.join("lib64").display().to_string());
    assert_eq!(b.soc(), "Ascend910A");
    assert_eq!(b.device_count(), 1);
    let info = b.device_info(0).unwrap();
    assert!(info.name.starts_with("Ascend910A") && info.memory_bytes == 1 << 30, "{info:?}");
    assert!(info.units.iter().any(|u| u.unit.label == "Cube" && u.peak_flops > 2.6e14 && u.peak_flops < 2.63e14));
}
