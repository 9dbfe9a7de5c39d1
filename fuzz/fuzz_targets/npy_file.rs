//! `npurt::npy::read` of a file on disk. The first byte picks what the path is: a regular
//! file holding the input's bytes after the fifth, extended by a sparse tail of as many
//! zero bytes as the next four say (little-endian, up to 4 GiB, made with `set_len`, so
//! nothing is written); a link to `/dev/zero`; a directory. A regular file reads as
//! `parse` of its bytes when it has no tail, and never allocates from the tail (run with
//! libFuzzer's default `-rss_limit_mb=2048`); anything else is refused as "not a regular
//! file".
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicUsize, Ordering};

fuzz_target!(|data: &[u8]| {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let Some((&kind, rest)) = data.split_first() else { return };
    let dir = std::env::temp_dir()
        .join(format!("npurt-fuzz-npy-file-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let path = dir.join("input.npy");
    match kind % 3 {
        0 => {
            let (tail, content) = match rest.split_first_chunk::<4>() {
                Some((t, c)) => (u32::from_le_bytes(*t) as u64, c),
                None => (0, rest),
            };
            std::fs::write(&path, content).expect("the input file");
            let f = std::fs::OpenOptions::new().write(true).open(&path).expect("the input file");
            f.set_len(content.len() as u64 + tail).expect("a sparse tail");
            let got = npurt::npy::read(&path);
            if tail == 0 {
                let want = npurt::npy::parse(content, &path.display().to_string());
                match (&got, &want) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b),
                    (Err(_), Err(_)) => {}
                    _ => panic!("read {got:?} but parse {want:?}"),
                }
            }
            if let Ok(a) = got {
                let need = runtime::size::bytes("shape", &a.shape, a.dtype).expect("a representable shape");
                assert_eq!(a.data.len(), need);
            }
        }
        k => {
            let target = if k == 1 {
                std::os::unix::fs::symlink("/dev/zero", &path).expect("a link");
                "not a regular file (a character device)"
            } else {
                std::fs::create_dir(&path).expect("a directory");
                "not a regular file (a directory)"
            };
            let e = npurt::npy::read(&path).expect_err("a special file is refused");
            assert!(e.to_string().contains(target), "{e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
});
