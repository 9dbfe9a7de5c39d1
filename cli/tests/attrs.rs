//! `npurt op --attr`: an attribute given twice is refused as such, naming it, before any
//! input is read.

use npurt::DType;
use npurt::npy::{self, NpyArray};
use std::process::Command;

#[test]
fn a_repeated_attr_is_given_twice() {
    let dir = std::env::temp_dir().join(format!("npurt-cli-attrs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let x = dir.join("x.npy");
    let v = [1f32, 2.0, 3.0, 4.0];
    npy::write(&x, &NpyArray { dtype: DType::F32, shape: vec![2, 2], data: bytemuck::cast_slice(&v).to_vec() })
        .unwrap();
    let out = dir.join("y.npy");
    let r = Command::new(env!("CARGO_BIN_EXE_npurt"))
        .args(["op", "Softmax", "--attr", "axis=0", "--attr", "axis=1", "--input"])
        .arg(&x)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "accepted: {err}");
    assert!(err.contains("\"axis\" is given twice"), "{err}");
    assert!(!err.contains("unknown attribute"), "{err}");
    assert!(!out.exists(), "an output was written");
    let _ = std::fs::remove_dir_all(&dir);
}
