//! Compiles every generated module with NVRTC when the library is present (no GPU
//! needed: NVRTC only produces code). Skips with one line otherwise.

use backend_cuda::{nvrtc, source};
use runtime::{DType, Tier};

#[test]
fn every_generated_module_compiles_with_nvrtc() {
    if let Err(e) = nvrtc::available() {
        eprintln!("SKIP every_generated_module_compiles_with_nvrtc: {e}");
        return;
    }
    let ver = nvrtc::version().expect("nvrtc version");
    let mut compiled = 0;
    for tier in Tier::ALL {
        for dtype in DType::ALL {
            let Some(src) = source::module_source(tier, dtype) else { continue };
            for (cc, out) in [((9, 0), nvrtc::Output::Ptx), ((8, 0), nvrtc::Output::Cubin)] {
                let name = source::module_name(tier, dtype);
                let img = nvrtc::compile(&name, &src, &nvrtc::options(cc, tier, out), out)
                    .unwrap_or_else(|e| panic!("{name} for {cc:?} {out:?}: {e}"));
                assert!(!img.bytes.is_empty());
                if out == nvrtc::Output::Ptx {
                    let ptx = String::from_utf8_lossy(&img.bytes);
                    for e in source::entry_points(tier, dtype) {
                        assert!(ptx.contains(&format!(".entry {e}(")), "{name}: entry {e} missing from the PTX");
                    }
                }
                compiled += 1;
            }
        }
    }
    eprintln!("NVRTC {}.{}: compiled {compiled} module images", ver.0, ver.1);
    assert!(compiled >= 20);
}
