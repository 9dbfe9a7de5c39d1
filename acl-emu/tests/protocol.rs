//! The emulator enforces the aclnn protocol with the real codes, and device memory is
//! not host-accessible. Driven through acl-sys over the built libacl_emu.so.

use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::c_void;
use std::ptr::null_mut;

fn emu_dir() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    let lib = [deps.join("libacl_emu.so"), deps.parent()?.join("libacl_emu.so")].into_iter().find(|p| p.is_file())?;
    let dir = npurt_test_support::scratch::dir("acl-emu-proto");
    for n in ["libascendcl.so", "libnnopbase.so", "libopapi.so"] {
        let _ = std::fs::remove_file(dir.join(n));
        std::os::unix::fs::symlink(&lib, dir.join(n)).ok()?;
    }
    Some(dir)
}

#[test]
fn protocol_is_enforced() {
    let Some(dir) = emu_dir() else {
        eprintln!("SKIP protocol_is_enforced: libacl_emu.so not found next to the test binary");
        return;
    };
    let api = Api::load(&LoadConfig { lib_dir: Some(dir), no_system_loader: true }).expect("load emulator");
    // SAFETY: the emulator's functions have exactly these prototypes (checked at its
    // compile time); every pointer passed below is valid for the call.
    unsafe {
        assert_eq!(api.aclInit().unwrap()(std::ptr::null()), 0);
        assert_eq!(api.aclInit().unwrap()(std::ptr::null()), ACL_ERROR_REPEAT_INITIALIZE);
        // No device bound yet: no context.
        let mut p: *mut c_void = null_mut();
        assert_eq!(api.aclrtMalloc().unwrap()(&mut p, 1024, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_CONTEXT_NULL);
        assert_eq!(api.aclrtSetDevice().unwrap()(0), 0);
        assert_eq!(api.aclrtMalloc().unwrap()(&mut p, 16384, ACL_MEM_MALLOC_HUGE_FIRST), 0);
        assert_eq!(p as usize % 64, 0);
        // Device memory is a PROT_NONE reservation: not host-dereferenceable.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let a = p as u64;
        let prot = maps.lines().find_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (s, e) = range.split_once('-')?;
            let (s, e) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
            (a >= s && a < e).then(|| rest[..4].to_string())
        });
        assert_eq!(prot.as_deref(), Some("---p"), "device pointer {a:#x} must be inaccessible");
        assert_eq!(api.aclrtMemset().unwrap()(p, 4096, 0, 4096), 0);
        let mut s: aclrtStream = null_mut();
        assert_eq!(api.aclrtCreateStream().unwrap()(&mut s), 0);
        let dims = [4i64];
        let mk = |base: *mut c_void, dt: aclDataType| {
            api.aclCreateTensor().unwrap()(
                dims.as_ptr(),
                1,
                dt,
                std::ptr::null(),
                0,
                ACL_FORMAT_ND,
                dims.as_ptr(),
                1,
                base,
            )
        };
        let x = mk(p, ACL_FLOAT16);
        let y = mk((p as usize + 512) as *mut c_void, ACL_FLOAT16);
        let relu1 = api.aclnnReluGetWorkspaceSize().unwrap();
        let relu2 = api.aclnnRelu().unwrap();
        let (mut ws, mut ex) = (0u64, null_mut());
        // Launch without phase 1.
        assert_eq!(relu2(null_mut(), 0, null_mut(), s), ACLNN_ERR_INNER_NULLPTR);
        assert_eq!(relu1(x, y, &mut ws, &mut ex), 0);
        assert_eq!(relu2(null_mut(), ws, ex, s), 0);
        // A one-shot executor launched twice.
        assert_eq!(relu2(null_mut(), ws, ex, s), ACLNN_ERR_INNER_NULLPTR);
        // Workspace smaller than asked (matmul asks for one).
        let d2 = [2i64, 2];
        let m = |o: usize| {
            api.aclCreateTensor().unwrap()(
                d2.as_ptr(),
                2,
                ACL_FLOAT16,
                std::ptr::null(),
                0,
                ACL_FORMAT_ND,
                d2.as_ptr(),
                2,
                (p as usize + o) as *mut c_void,
            )
        };
        let (a, b, c) = (m(0), m(512), m(1024));
        let mm1 = api.aclnnMatmulGetWorkspaceSize().unwrap();
        let mm2 = api.aclnnMatmul().unwrap();
        assert_eq!(mm1(a, b, c, 0, &mut ws, &mut ex), 0);
        assert!(ws > 0);
        let wsp = (p as usize + 2048) as *mut c_void;
        assert_eq!(mm2(wsp, ws - 1, ex, s), ACLNN_ERR_PARAM_INVALID);
        assert_eq!(api.aclSetAclOpExecutorRepeatable().unwrap()(ex), 0);
        assert_eq!(api.aclDestroyAclOpExecutor().unwrap()(ex), 0);
        // Unaligned tensor address.
        let u = mk((p as usize + 2) as *mut c_void, ACL_FLOAT16);
        assert_eq!(relu1(u, y, &mut ws, &mut ex), ACLNN_ERR_PARAM_INVALID);
        // BF16 on Ascend910A.
        let xb = mk(p, ACL_BF16);
        let yb = mk((p as usize + 512) as *mut c_void, ACL_BF16);
        assert_eq!(relu1(xb, yb, &mut ws, &mut ex), ACLNN_ERR_PARAM_INVALID);
        assert!(api.recent_error_message().unwrap_or_default().contains("BF16"));
        assert_eq!(api.aclrtSynchronizeStream().unwrap()(s), 0);
        for t in [x, y, u, xb, yb, a, b, c] {
            assert_eq!(api.aclDestroyTensor().unwrap()(t), 0);
        }
        assert_eq!(api.aclrtDestroyStream().unwrap()(s), 0);
        assert_eq!(api.aclrtFree().unwrap()(p), 0);
        assert_eq!(api.aclrtFree().unwrap()(p), ACL_ERROR_INVALID_PARAM);
        assert_eq!(api.aclrtResetDevice().unwrap()(0), 0);
    }
}
