//! GEMM benchmark on the CUDA backend: npurt (eager MatMul on a user stream) against
//! cuBLAS called directly (same library, no runtime in between), event-timed on the GPU.
//!
//! `gemm_bench [--iters N] [--dtypes f32,f16,bf16] [--tf32]` prints one line per case:
//! `GEMM impl=<npurt|cublas> dtype=<d> m=<M> k=<K> n=<N> ms=<per call> tflops=<rate> kernel=<name>`.
//! Exit status 2 when no GPU is usable (the reason is printed), 1 on failure.

use backend_cuda::{CudaBackend, CudaConfig};
use cudarc::cublas::sys as bsys;
use cudarc::driver::{CudaContext, result, sys::CUevent_flags};
use runtime::{Backend, DType, Op, Runtime, RuntimeConfig};
use std::sync::Arc;

const SHAPES: [(usize, usize, usize); 4] =
    [(512, 1024, 1024), (512, 1024, 4096), (512, 4096, 1024), (1024, 1024, 1024)];

fn flops(m: usize, k: usize, n: usize) -> f64 {
    2.0 * m as f64 * k as f64 * n as f64
}

fn fill(dtype: DType, n: usize) -> Vec<u8> {
    let vals = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0);
    match dtype {
        DType::F16 => vals.flat_map(|v| half::f16::from_f32(v).to_le_bytes()).collect(),
        DType::BF16 => vals.flat_map(|v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        _ => vals.flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// npurt: MatMul through the runtime on a user stream, timed with runtime events.
fn bench_npurt(
    rt: &Runtime,
    dtype: DType,
    (m, k, n): (usize, usize, usize),
    iters: usize,
) -> Result<(f64, String), String> {
    let e = |x: runtime::Error| x.to_string();
    let a = rt.empty(dtype, [m, k], 0).map_err(e)?;
    let b = rt.empty(dtype, [k, n], 0).map_err(e)?;
    let c = rt.empty(dtype, [m, n], 0).map_err(e)?;
    let be = rt.backend();
    be.copy_to_device(0, &fill(dtype, m * k), DevicePtrOf::ptr(&a)).map_err(e)?;
    be.copy_to_device(0, &fill(dtype, k * n), DevicePtrOf::ptr(&b)).map_err(e)?;
    let s = rt.stream(0).map_err(e)?;
    let op = Op::MatMul { trans_a: false, trans_b: false };
    let mut kernel = String::new();
    for _ in 0..3 {
        kernel = rt.execute_on(&s, &op, &[&a, &b], &[&c]).map_err(e)?.implementation.to_string();
    }
    s.synchronize().map_err(e)?;
    let start = s.record().map_err(e)?;
    for _ in 0..iters {
        rt.execute_on(&s, &op, &[&a, &b], &[&c]).map_err(e)?;
    }
    let end = s.record().map_err(e)?;
    s.synchronize().map_err(e)?;
    let t = end.elapsed_since(&start).map_err(e)?;
    Ok((t.as_secs_f64() * 1e3 / iters as f64, kernel))
}

/// Device address of a tensor (through the runtime's public byte-range accessor).
struct DevicePtrOf;
impl DevicePtrOf {
    fn ptr(t: &runtime::Tensor) -> runtime::DevicePtr {
        runtime::DevicePtr(t.data_ptr())
    }
}

/// cuBLAS directly: raw allocations, one handle, one stream, event timing.
fn bench_cublas(dtype: DType, (m, k, n): (usize, usize, usize), iters: usize, tf32: bool) -> Result<f64, String> {
    let ctx = CudaContext::new(0).map_err(|e| e.to_string())?;
    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
    let es = dtype.size();
    let (ty, compute) = match dtype {
        DType::F32 if tf32 => (bsys::cudaDataType::CUDA_R_32F, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (bsys::cudaDataType::CUDA_R_32F, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::F16 => (bsys::cudaDataType::CUDA_R_16F, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
        _ => (bsys::cudaDataType::CUDA_R_16BF, bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
    };
    // SAFETY: plain allocations and synchronous uploads of exactly the allocated sizes in
    // the context bound by `new_stream` above; freed at the end of this function.
    let (a, b, c) = unsafe {
        let a = result::malloc_sync(m * k * es).map_err(|e| e.to_string())?;
        let b = result::malloc_sync(k * n * es).map_err(|e| e.to_string())?;
        let c = result::malloc_sync(m * n * es).map_err(|e| e.to_string())?;
        result::memcpy_htod_sync(a, &fill(dtype, m * k)).map_err(|e| e.to_string())?;
        result::memcpy_htod_sync(b, &fill(dtype, k * n)).map_err(|e| e.to_string())?;
        (a, b, c)
    };
    let handle = cudarc::cublas::result::create_handle().map_err(|e| e.to_string())?;
    let (alpha, beta) = (1f32, 0f32);
    let call = || {
        // SAFETY: row-major C[m,n] = A[m,k] B[k,n] as column-major C^T = B^T A^T; every
        // pointer is an allocation of exactly the addressed size; host scalars.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                handle,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const _,
                b as *const _,
                ty,
                n as i32,
                a as *const _,
                ty,
                k as i32,
                &beta as *const f32 as *const _,
                c as *mut _,
                ty,
                n as i32,
                compute,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        }
        .map_err(|e| format!("cublasGemmEx: {e}"))
    };
    // SAFETY: the handle is valid and the stream belongs to its context.
    unsafe { cudarc::cublas::result::set_stream(handle, stream.cu_stream() as bsys::cudaStream_t) }
        .map_err(|e| e.to_string())?;
    for _ in 0..3 {
        call()?;
    }
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| e.to_string())?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| e.to_string())?;
    start.record(&stream).map_err(|e| e.to_string())?;
    for _ in 0..iters {
        call()?;
    }
    end.record(&stream).map_err(|e| e.to_string())?;
    let ms = start.elapsed_ms(&end).map_err(|e| e.to_string())? as f64;
    stream.synchronize().map_err(|e| e.to_string())?;
    // SAFETY: the handle and allocations are released once, after all work finished.
    unsafe {
        let _ = cudarc::cublas::result::destroy_handle(handle);
        let _ = result::free_sync(a);
        let _ = result::free_sync(b);
        let _ = result::free_sync(c);
    }
    Ok(ms / iters as f64)
}

fn main() {
    let mut iters = 50usize;
    let mut dtypes = vec![DType::F32, DType::F16, DType::BF16];
    let mut tf32 = false;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--iters" => {
                iters = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(iters);
                i += 1;
            }
            "--dtypes" => {
                dtypes = args.get(i + 1).map_or(vec![], |v| v.split(',').filter_map(DType::parse).collect());
                i += 1;
            }
            "--tf32" => tf32 = true,
            "--help" | "-h" => {
                println!("usage: gemm_bench [--iters N] [--dtypes f32,f16,bf16] [--tf32]");
                return;
            }
            other => {
                eprintln!("unknown argument {other:?}");
                std::process::exit(1);
            }
        }
        i += 1;
    }
    let env = CudaConfig::from_env().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    let backend = match CudaBackend::probe_with(CudaConfig { allow_tf32: tf32, ..env }) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            println!("SKIP gemm_bench: {e}");
            std::process::exit(2);
        }
    };
    let d = backend.device_details(0).cloned();
    if let Ok(d) = &d {
        println!(
            "DEVICE name={:?} cc={}.{} sms={} driver={} peak_f32={:.1}T peak_tf32={:.1}T peak_f16={:.1}T",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sm_count,
            d.driver_version,
            d.peak_f32 / 1e12,
            d.peak_tf32 / 1e12,
            d.peak_f16 / 1e12
        );
    }
    let rt = match Runtime::with_backend(backend.clone() as Arc<dyn Backend>, RuntimeConfig::default()) {
        Ok(r) => r,
        Err(e) => {
            println!("FAIL gemm_bench: runtime: {e}");
            std::process::exit(1);
        }
    };
    let mut failed = false;
    for &dt in &dtypes {
        for &shape in &SHAPES {
            let (m, k, n) = shape;
            let f = flops(m, k, n);
            match bench_npurt(&rt, dt, shape, iters) {
                Ok((ms, kernel)) => println!(
                    "GEMM impl=npurt dtype={dt} m={m} k={k} n={n} ms={ms:.4} tflops={:.2} kernel={kernel}",
                    f / ms / 1e9
                ),
                Err(e) => {
                    failed = true;
                    println!("FAIL impl=npurt dtype={dt} m={m} k={k} n={n}: {e}");
                }
            }
            match bench_cublas(dt, shape, iters, tf32) {
                Ok(ms) => println!(
                    "GEMM impl=cublas dtype={dt} m={m} k={k} n={n} ms={ms:.4} tflops={:.2} kernel=cublasGemmEx",
                    f / ms / 1e9
                ),
                Err(e) => {
                    failed = true;
                    println!("FAIL impl=cublas dtype={dt} m={m} k={k} n={n}: {e}");
                }
            }
        }
    }
    for u in rt.utilisation() {
        println!("UTIL {} {}: compute {:.1}% ({})", u.device, u.unit, u.compute * 100.0, u.method);
    }
    std::process::exit(if failed { 1 } else { 0 });
}
