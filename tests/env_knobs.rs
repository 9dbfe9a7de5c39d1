//! Every `NPURT_*` knob, end to end: `npurt info` (which reads the environment, validates
//! the configuration and opens a backend) refuses a value that is not UTF-8, is empty, is
//! blank or is unknown, with a configuration error naming the variable, and exits non-zero;
//! the README's table lists every knob.

use npurt_test_support::cli::npurt_bin;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Output};

/// Read by the Python package only (`npurt.init_logging`); the CLI does not read it.
const PYTHON_ONLY: &[&str] = &["NPURT_LOG"];

/// `npurt info` on the CPU with every knob removed from the environment, then `set`.
fn info(set: &[(&str, OsString)]) -> Output {
    let mut c = Command::new(npurt_bin());
    c.arg("info");
    for k in runtime::env::KNOBS {
        c.env_remove(k);
    }
    c.env("NPURT_BACKEND", "cpu");
    for (k, v) in set {
        c.env(k, v);
    }
    c.output().expect("run npurt info")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn every_knob_refuses_non_utf8_empty_blank_and_unknown_values_naming_the_variable() {
    let o = info(&[]);
    assert!(o.status.success(), "npurt info fails without any knob set: {}", text(&o));
    let mut tried = 0;
    for &k in runtime::env::KNOBS {
        if PYTHON_ONLY.contains(&k) {
            println!("{k}: not read by the CLI (Python's init_logging reads it); skipped here");
            continue;
        }
        let values = [OsString::from_vec(b"on\xff".to_vec()), "".into(), " \t".into(), "zzz-not-a-value".into()];
        for v in values {
            let o = info(&[(k, v.clone())]);
            let t = text(&o);
            assert!(!o.status.success(), "{k}={v:?} accepted: {t}");
            assert!(t.contains("invalid configuration") && t.contains(k), "{k}={v:?}: the error does not name it: {t}");
            tried += 1;
        }
    }
    assert_eq!(tried, 4 * (runtime::env::KNOBS.len() - PYTHON_ONLY.len()));
}

#[test]
fn a_bad_pin_value_is_reported_as_such() {
    let o = info(&[("NPURT_CPU_PIN", "zzz".into())]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("NPURT_CPU_PIN=\"zzz\": expected on, off or auto"), "{t}");
    assert!(!t.contains("allocation"), "{t}");
}

#[test]
fn the_readme_lists_every_knob() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("read README.md");
    for k in runtime::env::KNOBS {
        assert!(readme.contains(&format!("| `{k}`")), "README.md's configuration table lacks {k}");
    }
}
