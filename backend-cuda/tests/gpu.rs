//! Tests that need a GPU: the Foundation conformance suite, unchanged, on the CUDA
//! backend, plus memory/stream/event behaviour. Without a usable GPU each test prints one
//! line saying why it skipped and passes.

use backend_cuda::CudaBackend;
use runtime::{Backend, DType, Op, RuntimeConfig};
use std::sync::{Arc, OnceLock};

/// The backend, probed once per test binary; `None` (after one SKIP line) without a GPU.
fn gpu(test: &str) -> Option<Arc<dyn Backend>> {
    static B: OnceLock<Result<Arc<CudaBackend>, String>> = OnceLock::new();
    match B.get_or_init(|| CudaBackend::probe().map(Arc::new).map_err(|e| e.to_string())) {
        Ok(b) => Some(b.clone() as Arc<dyn Backend>),
        Err(e) => {
            eprintln!("SKIP {test}: {e}");
            None
        }
    }
}

fn check(test: &str, dtypes: &[DType]) {
    let Some(b) = gpu(test) else { return };
    let s = npurt_test_support::conformance::run(b, dtypes, 7).expect("conformance run");
    for skip in &s.skipped {
        eprintln!("SKIP cuda: {skip}");
    }
    for m in s.mismatches.iter().take(30) {
        eprintln!("MISMATCH cuda [{}] {}: {}", m.tier, m.case, m.detail);
    }
    assert!(s.checked > 0, "cuda: nothing was checked");
    assert!(s.mismatches.is_empty(), "cuda: {} mismatches in {} checks", s.mismatches.len(), s.checked);
    eprintln!("cuda {dtypes:?}: {} checks, {} skipped, 0 mismatches", s.checked, s.skipped.len());
}

#[test]
fn cuda_conformance_f32() {
    check("cuda_conformance_f32", &[DType::F32]);
}

#[test]
fn cuda_conformance_f16() {
    check("cuda_conformance_f16", &[DType::F16]);
}

#[test]
fn cuda_conformance_bf16() {
    check("cuda_conformance_bf16", &[DType::BF16]);
}

#[test]
fn cuda_conformance_integers() {
    check("cuda_conformance_integers", &[DType::I32, DType::I64, DType::U8]);
}

fn rt(b: Arc<dyn Backend>) -> runtime::Runtime {
    runtime::Runtime::with_backend(b, RuntimeConfig::default()).expect("runtime")
}

#[test]
fn cuda_device_info_and_units() {
    let Some(b) = gpu("cuda_device_info_and_units") else { return };
    let info = b.device_info(0).expect("device info");
    assert!(info.memory_bytes > 1 << 30);
    assert!(!info.host_shared);
    assert!(info.units.iter().any(|u| u.unit.label == "tensor-cores" && u.peak_flops > 1e12));
    eprintln!("cuda:0 = {} ({} GiB)", info.name, info.memory_bytes >> 30);
}

#[test]
fn cuda_addresses_are_checked() {
    let Some(b) = gpu("cuda_addresses_are_checked") else { return };
    let p = b.alloc(0, 1024, 256).expect("alloc");
    assert_eq!(p.0 % 256, 0);
    let s = b.default_stream(0);
    assert!(b.copy_to_device(0, &[0u8; 2048], p).is_err(), "copy past the end is refused");
    assert!(b.memset(0, p.offset(1000), 0, 100, s).is_err());
    assert!(b.copy_on_device(0, p, p.offset(10), 100, s).is_err(), "overlapping copy is refused");
    let mut host = vec![7u8; 1024];
    b.copy_to_device(0, &host, p).unwrap();
    b.memset(0, p.offset(512), 1, 512, s).unwrap();
    host.fill(0);
    b.copy_to_host(0, p, &mut host, s).unwrap();
    assert!(host[..512].iter().all(|&v| v == 7) && host[512..].iter().all(|&v| v == 1));
    b.free(0, p).unwrap();
    assert!(b.free(0, p).is_err(), "double free is refused");
    assert!(b.copy_to_host(0, p, &mut host, s).is_err(), "use after free is refused");
    assert!(b.synchronize_stream(0, npurt_stream(999)).is_err(), "unknown stream");
    assert!(b.query_event(0, npurt_event(999)).is_err(), "unknown event");
}

fn npurt_stream(id: u64) -> runtime::StreamId {
    runtime::StreamId(id)
}
fn npurt_event(id: u64) -> runtime::EventId {
    runtime::EventId(id)
}

#[test]
fn cuda_large_copies_round_trip() {
    let Some(b) = gpu("cuda_large_copies_round_trip") else { return };
    let n = (20 << 20) + 12345; // several staging chunks and a ragged tail
    let data: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let p = b.alloc(0, n, 256).unwrap();
    b.copy_to_device(0, &data, p).unwrap();
    let mut back = vec![0u8; n];
    b.copy_to_host(0, p, &mut back, b.default_stream(0)).unwrap();
    assert!(back == data);
    b.free(0, p).unwrap();
}

#[test]
fn cuda_user_streams_events_and_deferred_free() {
    let Some(b) = gpu("cuda_user_streams_events_and_deferred_free") else { return };
    let r = rt(b.clone());
    let s = r.stream(0).unwrap();
    let a = r.from_slice(&vec![1f32; 1 << 20], [1024, 1024], 0).unwrap();
    let start = s.record().unwrap();
    let y = {
        let _scope = r.stream_scope(&s);
        let y = r.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &a]).unwrap();
        r.run(&Op::Relu, &[&y[0]]).unwrap()
    };
    drop(a); // freed while the queued matmul may still read it: deferred
    let end = s.record().unwrap();
    s.synchronize().unwrap();
    let ms = end.elapsed_since(&start).unwrap();
    assert!(ms.as_nanos() > 0);
    let v = y[0].to_ndarray::<f32>().unwrap();
    assert!(v.iter().all(|&x| x == 1024.0));
}

#[test]
fn cuda_gather_out_of_range_is_an_error() {
    let Some(b) = gpu("cuda_gather_out_of_range_is_an_error") else { return };
    let r = rt(b);
    let data = r.from_slice(&[1f32, 2., 3., 4.], [4], 0).unwrap();
    let idx = r.from_slice(&[0i64, 9], [2], 0).unwrap();
    let e = r.run(&Op::Gather { axis: 0 }, &[&data, &idx]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    // The device stays usable.
    let ok = r.from_slice(&[1i64, 3], [2], 0).unwrap();
    let g = r.run(&Op::Gather { axis: 0 }, &[&data, &ok]).unwrap();
    assert_eq!(g[0].to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<_>>(), vec![2.0, 4.0]);
}

#[test]
fn cuda_big_matmul_matches_the_reference_tier() {
    let Some(b) = gpu("cuda_big_matmul_matches_the_reference_tier") else { return };
    let fast = rt(b.clone());
    let reference = runtime::Runtime::with_backend(
        b,
        RuntimeConfig { forced_tier: Some(runtime::Tier::Reference), ..RuntimeConfig::default() },
    )
    .unwrap();
    let (m, k, n) = (300, 517, 129);
    let av: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
    let bv: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0).collect();
    let run = |r: &runtime::Runtime| {
        let a = r.from_slice(&av, [m, k], 0).unwrap();
        let bb = r.from_slice(&bv, [k, n], 0).unwrap();
        let (o, rep) = r.run_with_report(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &bb]).unwrap();
        (o[0].to_ndarray::<f32>().unwrap(), rep.implementation)
    };
    let (x, ix) = run(&fast);
    let (y, iy) = run(&reference);
    assert_ne!(ix, iy);
    let worst = x.iter().zip(y.iter()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-3, "{ix} vs {iy}: worst difference {worst}");
}
