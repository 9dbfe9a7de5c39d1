//! Tests that need no GPU: probing, error mapping, kernel source generation, NVRTC
//! options, the kernel table and host-side launch planning. They run everywhere.

use backend_cuda::kernels::{self, Impl};
use backend_cuda::plan::{self, KParams, MatmulPlan};
use backend_cuda::{CudaBackend, CudaError, info, memory, nvrtc, probe, source};
use runtime::{DType, GeluApprox, KernelInfo, KernelTable, Op, OpKind, Tier, UnitClass};
use std::collections::HashSet;

/// Every entry of a kernel table with its implementation, in table order.
fn entries(t: &KernelTable<Impl>) -> Vec<(&KernelInfo, Impl)> {
    (0..t.infos().len()).map(|i| t.get(i).map(|(k, imp)| (k, *imp)).unwrap()).collect()
}

#[test]
fn probing_never_panics_and_explains_a_missing_gpu() {
    let r = std::panic::catch_unwind(CudaBackend::probe);
    let r = r.expect("probing panicked");
    match r {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("CUDA not available: "), "unexpected message {msg:?}");
            assert!(e.is_not_available());
            assert!(msg.len() > "CUDA not available: ".len() + 5, "no reason given: {msg:?}");
            eprintln!("probe without a usable GPU: {msg}");
        }
        Ok(b) => {
            use runtime::Backend;
            assert!(b.device_count() > 0);
            eprintln!("probe found {} GPU(s)", b.device_count());
        }
    }
}

#[test]
fn driver_check_names_the_library_it_tried() {
    match probe::check_driver() {
        Err(CudaError::NotAvailable(why)) => {
            assert!(why.contains("libcuda") || why.contains("cu"), "{why}");
        }
        Err(other) => panic!("a missing driver must be NotAvailable, got {other:?}"),
        Ok(f) => {
            assert!(f.devices > 0);
            assert!(f.version > 0);
        }
    }
}

#[test]
fn missing_library_is_an_error_not_a_panic() {
    let e = probe::check_library("npurt-no-such-library", &["x"]).unwrap_err();
    assert!(e.to_string().starts_with("CUDA not available: libnpurt-no-such-library cannot be opened"), "{e}");
    let names = vec!["/nonexistent/libfoo.so".to_string()];
    assert!(probe::open_first(&names).unwrap_err().contains("/nonexistent/libfoo.so"));
}

#[test]
fn required_symbol_lists_cover_what_is_called() {
    for s in ["cuInit", "cuMemAlloc_v2", "cuLaunchKernel", "cuStreamWaitEvent", "cuEventElapsedTime"] {
        assert!(probe::REQUIRED_DRIVER_SYMBOLS.contains(&s), "{s}");
    }
    assert!(probe::REQUIRED_NVRTC_SYMBOLS.contains(&"nvrtcGetCUBIN"));
    assert!(probe::REQUIRED_CUBLAS_SYMBOLS.contains(&"cublasGemmStridedBatchedEx"));
    let unique: HashSet<_> = probe::REQUIRED_DRIVER_SYMBOLS.iter().collect();
    assert_eq!(unique.len(), probe::REQUIRED_DRIVER_SYMBOLS.len());
    assert_eq!(probe::driver_code_name(100), "CUDA_ERROR_NO_DEVICE (100)");
    assert_eq!(probe::driver_code_name(12345), "CUresult 12345");
}

#[test]
fn driver_errors_map_to_typed_errors() {
    use cudarc::driver::{DriverError, sys::CUresult};
    let oom = CudaError::driver("cuMemAlloc", DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY), Some((1, 4096)));
    assert_eq!(oom, CudaError::OutOfMemory { device: 1, bytes: 4096 });
    assert_eq!(oom.to_string(), "device cuda:1 is out of memory (4096 bytes requested)");
    let other = CudaError::driver("cuLaunchKernel", DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS), Some((0, 1)));
    let s = other.to_string();
    assert!(s.starts_with("cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS"), "{s}");
    let plain = CudaError::driver("cuMemAlloc", DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY), None);
    assert!(matches!(plain, CudaError::Driver { .. }));

    let rt: runtime::Error = other.into();
    match rt {
        runtime::Error::Backend { backend, source } => {
            assert_eq!(backend, "cuda");
            assert!(source.to_string().contains("ILLEGAL_ADDRESS"));
            assert!(source.downcast_ref::<CudaError>().is_some(), "the CudaError is the source");
        }
        e => panic!("expected a backend error, got {e:?}"),
    }
    assert!(matches!(runtime::Error::from(CudaError::NoStream(3, 0)), runtime::Error::Device { .. }));
    assert!(matches!(runtime::Error::from(CudaError::NotAvailable("x".into())), runtime::Error::Unsupported(_)));
    let blas = CudaError::cublas(
        "cublasGemmEx",
        cudarc::cublas::result::CublasError(cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE),
    );
    assert!(blas.to_string().contains("CUBLAS_STATUS_INVALID_VALUE"), "{blas}");
}

#[test]
fn panics_inside_library_calls_are_contained() {
    let r: Result<(), CudaError> = backend_cuda::error::guard("cuFake", || panic!("Missing symbol cuFake"));
    match r {
        Err(CudaError::Panic { call, msg }) => {
            assert_eq!(call, "cuFake");
            assert!(msg.contains("Missing symbol"));
        }
        other => panic!("expected a contained panic, got {other:?}"),
    }
    assert_eq!(backend_cuda::error::guard("ok", || Ok(5)), Ok(5));
}

#[test]
fn every_module_defines_its_entry_points() {
    let mut modules = 0;
    for tier in Tier::ALL {
        for dtype in DType::ALL {
            let entries = source::entry_points(tier, dtype);
            match source::module_source(tier, dtype) {
                None => assert!(entries.is_empty(), "{tier} {dtype}: entries without a module"),
                Some(src) => {
                    modules += 1;
                    assert!(!entries.is_empty());
                    for e in &entries {
                        let decl = format!("extern \"C\" __global__ void {e}(");
                        assert_eq!(src.matches(&decl).count(), 1, "{tier} {dtype}: {e} defined once");
                        assert!(e.starts_with("npurt_") && e.ends_with(source::tier_tag(tier)));
                    }
                    assert_eq!(src.matches('{').count(), src.matches('}').count(), "{tier} {dtype}: braces");
                    assert!(src.contains(&format!("dtype {}", dtype.name())));
                }
            }
        }
    }
    // Every dtype on every tier: integer arithmetic (u8 included) is on all three.
    assert_eq!(modules, 6 + 6 + 6);
}

#[test]
fn module_contents_per_dtype() {
    let ref_f16 = source::entry_points(Tier::Reference, DType::F16);
    for k in ["binary", "unary", "bias_gelu", "softmax", "layer_norm", "reduce", "matmul", "attention", "copy"] {
        assert!(ref_f16.contains(&format!("npurt_{k}_f16_ref")), "{k}");
    }
    for to in DType::ALL {
        assert!(ref_f16.contains(&format!("npurt_cast_{}_f16_ref", to.name())));
    }
    assert!(ref_f16.contains(&"npurt_gather_i64_f16_ref".to_string()));
    let ref_u8 = source::entry_points(Tier::Reference, DType::U8);
    assert!(!ref_u8.iter().any(|e| e.contains("matmul")));
    assert!(ref_u8.contains(&"npurt_binary_u8_ref".to_string()));
    assert!(ref_u8.contains(&"npurt_copy_u8_ref".to_string()));
    assert!(ref_u8.contains(&"npurt_equal_u8_ref".to_string()));
    assert_eq!(
        source::entry_points(Tier::Generic, DType::I32),
        vec!["npurt_binary_i32_gen".to_string(), "npurt_equal_i32_gen".to_string()]
    );
    // u8's generic module: wrapping arithmetic and Equal.
    assert_eq!(
        source::entry_points(Tier::Generic, DType::U8),
        vec!["npurt_binary_u8_gen".to_string(), "npurt_equal_u8_gen".to_string()]
    );
    assert_eq!(source::entry_points(Tier::HighPerformance, DType::U8), vec!["npurt_binary_u8_fast".to_string()]);
    let gen_f16 = source::module_source(Tier::Generic, DType::F16).unwrap();
    assert!(gen_f16.contains("(P p, const h16* a, const h16* b, u8* o) { k_equal_gen<h16>(p, a, b, o); }"));
    assert!(!source::entry_points(Tier::HighPerformance, DType::F32).iter().any(|e| e.contains("equal")));
    let fast = source::module_source(Tier::HighPerformance, DType::BF16).unwrap();
    assert!(fast.contains("k_attention_fast<b16>"));
    assert!(fast.contains("k_softmax_fast<b16>"));
    // The prelude needs no toolkit header.
    assert!(!source::PRELUDE.contains("#include"));
    assert_eq!(source::ctype(DType::I64), "ll");
}

#[test]
fn nvrtc_options_follow_tier_and_architecture() {
    let r = nvrtc::options((9, 0), Tier::Reference, nvrtc::Output::Cubin);
    assert_eq!(r[0], "--gpu-architecture=sm_90");
    assert!(r.contains(&"--fmad=false".to_string()));
    assert!(r.contains(&"--prec-div=true".to_string()));
    assert!(r.contains(&"-DNPURT_TIER_REF".to_string()));
    let p = nvrtc::options((8, 6), Tier::HighPerformance, nvrtc::Output::Ptx);
    assert_eq!(p[0], "--gpu-architecture=compute_86");
    assert!(p.contains(&"--fmad=true".to_string()));
    assert!(!p.iter().any(|o| o.contains("fast_math")), "fast math would break the tolerances");
    let g = nvrtc::options((10, 0), Tier::Generic, nvrtc::Output::Cubin);
    assert_eq!(g[0], "--gpu-architecture=sm_100");
    assert!(g.iter().all(|o| o.starts_with('-') && !o.contains(' ')));
}

#[test]
fn kernel_table_covers_every_op_with_a_reference() {
    for (blas, tf32) in [(false, false), (true, false), (true, true)] {
        let t = entries(kernels::table(blas, tf32));
        let names: HashSet<&str> = t.iter().map(|(k, _)| k.name.as_ref()).collect();
        assert_eq!(names.len(), t.len(), "names are unique");
        for (i, (k, _)) in t.iter().enumerate() {
            assert_eq!(k.id, i);
        }
        for kind in OpKind::ALL {
            let has = t.iter().any(|(k, _)| k.op == kind && k.tier == Tier::Reference);
            if kind == OpKind::LinearGelu {
                // A fused op made only where the device has a kernel for it: the graph
                // fusion keeps Linear and BiasGelu on CUDA.
                assert!(!t.iter().any(|(k, _)| k.op == kind), "LinearGelu: a CUDA kernel");
                continue;
            }
            assert!(has, "{kind}: no reference kernel");
        }
        let mm: Vec<_> = t.iter().filter(|(k, _)| k.op == OpKind::MatMul).collect();
        let blas_n = mm.iter().filter(|(_, imp)| *imp == Impl::Blas).count();
        assert_eq!(
            blas_n,
            if !blas {
                0
            } else if tf32 {
                1
            } else {
                2
            }
        );
        if blas {
            let (tc, _) = mm.iter().find(|(k, imp)| *imp == Impl::Blas && k.unit.class == UnitClass::Cube).unwrap();
            assert_eq!(tc.tier, Tier::HighPerformance);
            assert!(tc.name.starts_with("matmul.fast.cublas"));
        }
    }
    let t = kernels::table(true, true).infos();
    assert!(t.iter().any(|k| k.name == "matmul.fast.cublas-tf32"));
    assert!(t.iter().any(|k| k.name == "attention.fast.fused-block-per-query"));
}

#[test]
fn support_predicates_decline_what_kernels_cannot_do() {
    use runtime::{KernelQuery, TensorMeta};
    let t = kernels::table(true, false).infos();
    let find = |name: &str| t.iter().find(|k| k.name == name).unwrap().clone();
    let m = |d: DType, s: &[usize]| TensorMeta::new(d, s.to_vec());
    // Vectorised binary: equal shapes only.
    let add = find("add.fast.vec4");
    let ins = [m(DType::F32, &[3, 4]), m(DType::F32, &[4])];
    let outs = [m(DType::F32, &[3, 4])];
    assert!((add.supports)(&KernelQuery { op: &Op::Add, inputs: &ins, outputs: &outs }).is_err());
    let ins2 = [m(DType::F32, &[3, 4]), m(DType::F32, &[3, 4])];
    assert!((add.supports)(&KernelQuery { op: &Op::Add, inputs: &ins2, outputs: &outs }).is_ok());
    // Warp softmax: last axis only.
    let sm = find("softmax.fast.warp-per-row");
    let x = [m(DType::F16, &[2, 5])];
    assert!((sm.supports)(&KernelQuery { op: &Op::Softmax { axis: 0 }, inputs: &x, outputs: &x }).is_err());
    assert!((sm.supports)(&KernelQuery { op: &Op::Softmax { axis: -1 }, inputs: &x, outputs: &x }).is_ok());
    // cuBLAS sgemm takes f32 only; the tensor-op kernel f16/bf16 only.
    let sg = find("matmul.fast.cublas-sgemm");
    let tc = find("matmul.fast.cublas-tensor-op");
    let op = Op::MatMul { trans_a: false, trans_b: false };
    let h = [m(DType::BF16, &[4, 8]), m(DType::BF16, &[8, 2])];
    let ho = [m(DType::BF16, &[4, 2])];
    assert!((sg.supports)(&KernelQuery { op: &op, inputs: &h, outputs: &ho }).is_err());
    assert!((tc.supports)(&KernelQuery { op: &op, inputs: &h, outputs: &ho }).is_ok());
    // Fused attention: the scores must fit in shared memory.
    let at = find("attention.fast.fused-block-per-query");
    let q = m(DType::F32, &[1, 1, 4, 64]);
    let k = m(DType::F32, &[1, 1, 20000, 64]);
    let o = [m(DType::F32, &[1, 1, 4, 64])];
    let ins = [q.clone(), k.clone(), k];
    assert!(
        (at.supports)(&KernelQuery {
            op: &Op::Attention { scale: None, layout: runtime::AttentionLayout::Bnsd, causal: false },
            inputs: &ins,
            outputs: &o
        })
        .is_err()
    );
}

/// Causal, grouped-query Attention and Rope in the plans and the generated source: the
/// group size and the causal flag travel in `i[7]`, both attention kernels read the kv
/// head and the keys a row sees through them, Rope has an entry per position dtype and
/// declines tables that are not f32.
#[test]
fn causal_gqa_attention_and_rope_in_plans_and_source() {
    let a = plan::attention(&[1, 8, 5, 4], &[1, 2, 9, 4], &[1, 2, 9, 4], None, None, true);
    assert_eq!((a.i[6], a.i[7]), (8, 2 * 4 + 1));
    let r = plan::rope(&[2, 5, 3, 8], 16, true, true);
    assert_eq!((r.n, &r.i[..7]), (2 * 5 * 3 * 8, &[2, 3, 5, 8, 16, 1, 1][..]));
    let src = source::module_source(Tier::Reference, DType::F16).unwrap();
    for needle in ["att_kv(p, bh)", "att_keys(p, i)", "k_rope_ref<h16, int>", "k_rope_ref<h16, ll>", "atomicCAS(err"] {
        assert!(src.contains(needle), "reference module lacks {needle}");
    }
    let fast = source::module_source(Tier::HighPerformance, DType::F32).unwrap();
    assert!(fast.contains("ll kv = att_kv(p, bh), lim = att_keys(p, i);"));
    assert!(fast.contains("for (ll j = 0; j < lim; ++j) acc = fmaf"));
    let entries = source::entry_points(Tier::Reference, DType::BF16);
    assert!(entries.contains(&"npurt_rope_i64_bf16_ref".to_string()));
    assert!(!source::entry_points(Tier::Reference, DType::I32).iter().any(|e| e.contains("rope")));
    use runtime::{KernelQuery, TensorMeta};
    let t = kernels::table(true, false).infos();
    let rope = t.iter().find(|k| k.op == runtime::OpKind::Rope).unwrap();
    let m = |d: DType, s: &[usize]| TensorMeta::new(d, s.to_vec());
    let op = Op::Rope { interleaved: false, layout: runtime::AttentionLayout::Bnsd };
    let ins = |tab| [m(DType::F16, &[1, 2, 3, 8]), m(tab, &[4, 4]), m(tab, &[4, 4]), m(DType::I64, &[1, 3])];
    let outs = [m(DType::F16, &[1, 2, 3, 8])];
    assert!((rope.supports)(&KernelQuery { op: &op, inputs: &ins(DType::F32), outputs: &outs }).is_ok());
    let e = (rope.supports)(&KernelQuery { op: &op, inputs: &ins(DType::F16), outputs: &outs }).unwrap_err();
    assert!(e.contains("f32 cos/sin tables"), "{e}");
    // The fused kernel takes causal and grouped-query signatures (bnsd).
    let at = t.iter().find(|k| k.name == "attention.fast.fused-block-per-query").unwrap();
    let gqa = [m(DType::F32, &[1, 8, 5, 4]), m(DType::F32, &[1, 2, 9, 4]), m(DType::F32, &[1, 2, 9, 4])];
    let o = [m(DType::F32, &[1, 8, 5, 4])];
    let causal = Op::Attention { scale: None, layout: runtime::AttentionLayout::Bnsd, causal: true };
    assert!((at.supports)(&KernelQuery { op: &causal, inputs: &gqa, outputs: &o }).is_ok());
}

#[test]
fn params_block_matches_the_c_struct() {
    // struct P { ll n; ll rank; ll dims[8]; ll sa[8]; ll sb[8]; ll sc[8]; ll i[8]; double f[4]; }
    assert_eq!(std::mem::size_of::<KParams>(), 8 * (2 + 8 * 5 + 4));
    assert_eq!(std::mem::align_of::<KParams>(), 8);
    assert!(
        source::PRELUDE
            .contains("struct P { ll n; ll rank; ll dims[8]; ll sa[8]; ll sb[8]; ll sc[8]; ll i[8]; double f[4]; };")
    );
}

#[test]
fn collapsing_and_broadcasting() {
    assert_eq!(plan::contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    assert_eq!(plan::broadcast_strides(&[3, 1], &[2, 3, 5]), vec![0, 1, 0]);
    assert_eq!(plan::broadcast_strides(&[], &[4]), vec![0]);
    // Contiguous dims merge into one.
    let (d, l) = plan::collapse(&[2, 3, 4], &[plan::contiguous_strides(&[2, 3, 4])]);
    assert_eq!((d, l), (vec![24], vec![vec![1]]));
    // A broadcast operand keeps the split where its stride pattern breaks.
    let out = [4, 3, 9];
    let a = plan::broadcast_strides(&[4, 1, 9], &out);
    let b = plan::broadcast_strides(&[1, 3, 9], &out);
    let (d, l) = plan::collapse(&out, &[a, b]);
    assert_eq!(d, vec![4, 3, 9]);
    assert_eq!(l, vec![vec![9, 0, 1], vec![0, 9, 1]]);
    // Size-1 dims vanish.
    let (d, _) = plan::collapse(&[1, 5, 1], &[vec![5, 1, 1]]);
    assert_eq!(d, vec![5]);
    let p = plan::binary(&Op::Sub, &[2, 1, 5], &[4, 1], &[2, 4, 5]).unwrap();
    assert_eq!(p.n, 40);
    assert_eq!(p.i[0], 1);
    assert_eq!(&p.dims[..p.rank as usize], &[2, 4, 5]);
    assert_eq!(&p.sa[..3], &[5, 0, 1]);
    assert_eq!(&p.sb[..3], &[0, 1, 0]);
    // Too many dims after collapsing is an error, not a crash.
    let dims: Vec<usize> = vec![2; 9];
    let strided: Vec<i64> = (0..9).map(|i| 1 << (2 * i)).collect();
    assert!(plan::indexed(&dims, &[strided]).is_err());
}

#[test]
fn matmul_plans() {
    // Broadcast batch: a [3,1,4,5]^T, b [2,4,7] -> out [3,2,5,7].
    let op = Op::MatMul { trans_a: true, trans_b: false };
    let p = MatmulPlan::new(&op, &[&[3, 1, 4, 5], &[2, 4, 7]], &[3, 2, 5, 7]).unwrap();
    assert_eq!((p.m, p.n, p.k), (5, 7, 4));
    assert_eq!((p.lda, p.ldb), (5, 7));
    assert_eq!(p.batch_dims, vec![3, 2]);
    assert_eq!(p.batch_sa, vec![20, 0]);
    assert_eq!(p.batch_sb, vec![0, 28]);
    let calls = p.blas_calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[1], (20, 0, 70, 2, 0, 28));
    assert_eq!(p.operand_strides(), (1, 5, 7, 1));
    // Same batch on both sides collapses into one strided-batched call.
    let p =
        MatmulPlan::new(&Op::MatMul { trans_a: false, trans_b: true }, &[&[2, 3, 5, 4], &[2, 3, 6, 4]], &[2, 3, 5, 6])
            .unwrap();
    assert_eq!(p.blas_calls(), vec![(0, 0, 0, 6, 20, 24)]);
    // Linear: x [2, 7, 13] w [5, 13] bias [5].
    let l = MatmulPlan::new(&Op::Linear, &[&[2, 7, 13], &[5, 13], &[5]], &[2, 7, 5]).unwrap();
    assert_eq!((l.m, l.n, l.k, l.trans_b, l.beta), (14, 5, 13, true, 1.0));
    assert_eq!(l.c_strides, Some((0, 1)));
    let kp = l.params();
    assert_eq!(kp.n, 70);
    assert_eq!(&kp.i[..7], &[14, 5, 13, 13, 1, 1, 13]);
    // Gemm without c has beta 0 whatever was asked.
    let g = MatmulPlan::new(
        &Op::Gemm { trans_a: false, trans_b: false, alpha: 0.5, beta: 2.0 },
        &[&[4, 3], &[3, 5]],
        &[4, 5],
    )
    .unwrap();
    assert_eq!((g.alpha, g.beta, g.c_strides), (0.5, 0.0, None));
    let g = MatmulPlan::new(
        &Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0 },
        &[&[4, 3], &[3, 5], &[4, 1]],
        &[4, 5],
    )
    .unwrap();
    assert_eq!(g.c_strides, Some((1, 0)));
    assert!(MatmulPlan::new(&Op::Relu, &[&[1]], &[1]).is_err());
}

#[test]
fn row_op_params() {
    let s = plan::softmax(&[2, 3, 19], 1);
    assert_eq!((s.n, s.i[0], s.i[1], s.i[2]), (38, 2, 3, 19));
    let l = plan::layer_norm(&[4, 0], 1e-5, true);
    assert_eq!((l.n, l.i[1], l.i[3]), (0, 0, 1));
    let r = plan::reduce(&[2, 3, 4], &[0, 2], true).unwrap();
    assert_eq!((r.n, r.rank, r.dims[0], r.sa[0]), (3, 1, 3, 4));
    assert_eq!((r.i[0], r.i[1], r.i[2]), (2, 8, 1));
    assert_eq!((r.sb[0], r.sb[1], r.sc[0], r.sc[1]), (2, 4, 12, 1));
    let all = plan::reduce(&[4, 0], &[0, 1], false).unwrap();
    assert_eq!((all.n, all.i[1]), (1, 0));
    let g = plan::gather(&[3, 5, 2], 1, 4);
    assert_eq!((g.n, g.i[0], g.i[1], g.i[2], g.i[3]), (24, 3, 5, 4, 2));
    let a = plan::attention(&[2, 3, 5, 4], &[2, 3, 7, 4], &[2, 3, 7, 6], Some((&[2, 1, 1, 7], true)), None, false);
    assert_eq!(a.n, 2 * 3 * 5 * 6);
    assert_eq!((a.i[5], a.i[7]), (1, 2));
    assert_eq!(&a.sc[..4], &[7, 0, 0, 1]);
    assert!((a.f[0] - 0.5).abs() < 1e-12);
    assert_eq!(plan::unary(&Op::Scale { factor: -1.75 }, 3).unwrap().f[0], -1.75);
    assert_eq!(plan::bias_gelu(GeluApprox::Tanh, 10, 5).i[0], 2);
    let pm = plan::permute(&[2, 3, 4], &[2, 0, 1]).unwrap();
    assert_eq!(&pm.dims[..pm.rank as usize], &[4, 6]);
    assert_eq!(&pm.sa[..2], &[1, 4]);
    assert_eq!(plan::grid_1d(0, 256, 100), (1, 256));
    assert_eq!(plan::grid_1d(1 << 20, 256, 100), (100, 256));
}

/// The allocation table the backend uses (the runtime's, labelled as the backend labels
/// a device), with a releaser that needs no GPU; its errors map into `CudaError`.
#[test]
fn address_checks() {
    use runtime::backend::allocations::{AllocTable, BadAddress, Release};
    use std::error::Error as _;
    struct Keep;
    impl Release for Keep {
        type Record = ();
        fn release(&self, _base: u64, _size: usize, _record: ()) {}
    }
    let t = std::sync::Arc::new(AllocTable::new(memory::device_label(0), Keep));
    t.insert(0x1000, 256, ()).unwrap();
    t.insert(0x2000, 512, ()).unwrap();
    // Freed while queued work still pins it: in the table, but no longer live.
    let _pinned = t.pin(&[(0x2000, 1)]).unwrap();
    t.free(0x2000).unwrap();
    assert_eq!(t.locate(0x1000, 256), Ok(0x1000));
    assert_eq!(t.locate(0x10f0, 16), Ok(0x1000));
    assert!(t.locate(0x10f0, 17).is_err(), "runs past the end");
    assert!(t.locate(0x0fff, 1).is_err(), "before every block");
    assert!(t.locate(0x2000, 1).is_err(), "freed block");
    assert!(t.locate(u64::MAX - 1, 8).is_err(), "overflow");
    let t3 = AllocTable::new(memory::device_label(3), Keep);
    let e = CudaError::from(t3.locate(0x5000, 4).unwrap_err());
    assert_eq!(e.to_string(), "address range 0x5000+4 is not inside a live allocation of cuda:3");
    assert!(e.source().is_some_and(|s| s.downcast_ref::<BadAddress>().is_some()), "the table's error is the source");
}

#[test]
fn peaks_from_the_architecture_table() {
    let h = info::CudaDeviceInfo::from_attributes(
        0,
        "H200".into(),
        (9, 0),
        132,
        1_980_000,
        2_619_000,
        6144,
        141 << 30,
        12040,
    );
    assert_eq!(h.arch.name, "Hopper");
    assert!((h.peak_f16 / 1e12 - 1070.0).abs() < 10.0, "{}", h.peak_f16);
    assert!((h.peak_tf32 * 2.0 - h.peak_f16).abs() < 1.0);
    assert!((h.peak_f32 / 1e12 - 66.9).abs() < 1.0, "{}", h.peak_f32);
    assert!(h.memory_bandwidth > 3.5e12 && h.memory_bandwidth < 5.0e12);
    let units = h.units();
    assert_eq!(units.len(), 3);
    assert_eq!(units[0].unit, info::TENSOR_CORES);
    assert_eq!(units[0].unit.class, UnitClass::Cube);
    assert_eq!(units[1].unit.class, UnitClass::Vector);
    assert!(units.iter().all(|u| u.peak_flops > 0.0 && !u.source.is_empty()));
    // No clock from the driver: the table's clock, and said so.
    let v = info::CudaDeviceInfo::from_attributes(0, "V100".into(), (7, 0), 80, 0, 0, 0, 16 << 30, 12000);
    assert!(!v.clock_from_driver);
    assert_eq!(v.clock_mhz, 1530);
    assert_eq!(v.peak_bf16, 0.0);
    assert!(v.units()[0].source.contains("table clock"));
    assert_eq!(info::arch_rates(8, 9).name, "Ada");
    assert_eq!(info::arch_rates(12, 0).tc_f16_flops, 4096);
}

/// cuBLAS skips the product when alpha is 0 (so 0 × NaN would be 0): its Gemm kernels
/// decline that case and the NVRTC kernel, which multiplies, runs it.
#[test]
fn cublas_declines_gemm_with_alpha_zero() {
    use runtime::{KernelQuery, TensorMeta};
    let t = kernels::table(true, false).infos();
    let m = |s: &[usize]| TensorMeta::new(DType::F32, s.to_vec());
    let (ins, outs) = ([m(&[4, 8]), m(&[8, 2])], [m(&[4, 2])]);
    let gemm = |alpha: f32| Op::Gemm { trans_a: false, trans_b: false, alpha, beta: 0.0 };
    let sg = t.iter().find(|k| k.name == "gemm.fast.cublas-sgemm").unwrap().clone();
    let tiled = t.iter().find(|k| k.name == "gemm.generic.tiled-16x16").unwrap().clone();
    assert!((sg.supports)(&KernelQuery { op: &gemm(0.0), inputs: &ins, outputs: &outs }).is_err());
    assert!((sg.supports)(&KernelQuery { op: &gemm(0.5), inputs: &ins, outputs: &outs }).is_ok());
    assert!((tiled.supports)(&KernelQuery { op: &gemm(0.0), inputs: &ins, outputs: &outs }).is_ok());
}

#[test]
fn data_movement_plans_of_where_concat_and_slice() {
    // Where: three broadcast stride lists over the output.
    let p = plan::select(&[3, 1], &[1, 5], &[5], &[3, 5]).unwrap();
    assert_eq!((p.n, p.rank), (15, 2));
    assert_eq!((&p.sa[..2], &p.sb[..2], &p.sc[..2]), (&[1, 0][..], &[0, 1][..], &[0, 1][..]));
    // Concat along axis 1 of [2, 5]: each input's own strides, placed at the output's.
    let ps = plan::concat([&[2usize, 2][..], &[2, 3][..]].into_iter(), &[2, 5], 1).unwrap();
    assert_eq!((ps[0].n, &ps[0].sa[..2], &ps[0].sb[..2]), (4, &[2, 1][..], &[5, 1][..]));
    assert_eq!((ps[1].n, &ps[1].sa[..2], &ps[1].sb[..2]), (6, &[3, 1][..], &[5, 1][..]));
    // Slice [4, 6] rows 3, 1 (step -2) and every third column from 5 backwards: negative
    // strides from the window's first element (row 3, column 5).
    let w = runtime::op::resolve_slice(&[4, 6], &[3, 5], &[0, -7], &[0, 1], &[-2, -3]).unwrap();
    let (p, first) = plan::slice(&[4, 6], &w).unwrap();
    assert_eq!(first, 3 * 6 + 5);
    assert_eq!((p.n, p.rank, &p.dims[..2], &p.sa[..2]), (4, 2, &[2, 2][..], &[-12, -3][..]));
    // Where, Concat and Slice's copy are in every dtype's reference module.
    for d in DType::ALL {
        let e = source::entry_points(Tier::Reference, d);
        for k in ["where", "place", "copy"] {
            assert!(e.contains(&format!("npurt_{k}_{}_ref", d.name())), "{k} {d}: {e:?}");
        }
    }
}

#[test]
fn paged_cache_kernels_and_plans() {
    use source::Kern;
    // The float reference modules hold both kernels (both slot dtypes for the write).
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let ks = source::kernels(Tier::Reference, dtype);
        for k in [Kern::KvWrite(DType::I32), Kern::KvWrite(DType::I64), Kern::Paged] {
            assert!(ks.contains(&k), "{dtype}: {k:?}");
        }
        let src = source::module_source(Tier::Reference, dtype).unwrap();
        let entry = source::entry_name(Kern::KvWrite(DType::I64), dtype, Tier::Reference);
        assert_eq!(entry, format!("npurt_kv_write_i64_{}_ref", dtype.name()));
        assert!(src.contains(&format!("void {entry}(")));
        assert!(src.contains("k_paged_attention_ref<") && src.contains("k_kv_write_ref<"));
    }
    assert!(!source::kernels(Tier::Reference, DType::I32).contains(&Kern::Paged));
    // Caches [NB 5, BS 16, KVH 2, D 8], 3 rows; q [B 4, H 6, D 8], tables [4, 7].
    let p = plan::kv_write(&[5, 16, 2, 8], &[3, 2, 8]);
    assert_eq!((p.n, p.i[0], p.i[1]), (3 * 16, 80, 16));
    let p = plan::paged_attention(&[4, 6, 8], &[5, 16, 2, 8], &[4, 7], None);
    assert_eq!(p.n, 4 * 6 * 8);
    assert_eq!(&p.i[..6], &[6, 8, 16, 2, 7, 5]);
    assert!((p.f[0] - 1.0 / 8f64.sqrt()).abs() < 1e-12);
    assert_eq!(plan::paged_attention(&[1, 2, 4], &[1, 1, 1, 4], &[1, 1], Some(0.5)).f[0], 0.5);
}

#[test]
fn decoder_row_ops_have_kernels_on_every_float_tier() {
    for tier in Tier::ALL {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let entries = source::entry_points(tier, dt);
            let src = source::module_source(tier, dt).unwrap();
            let (t, tag) = (source::ctype(dt), source::tier_tag(tier));
            for (k, body) in [
                ("rms_norm", format!("k_rms_norm_{tag}<{t}>(p, x, r, g, o, s)")),
                ("swiglu", format!("k_swiglu_{tag}<{t}>(p, x, u, o)")),
            ] {
                assert!(entries.contains(&format!("npurt_{k}_{}_{tag}", dt.name())), "{tier} {dt}: {k}");
                assert!(src.contains(&body), "{tier} {dt}: {body}");
            }
        }
        // No integer module has them.
        assert!(!source::entry_points(tier, DType::I32).iter().any(|e| e.contains("rms") || e.contains("swiglu")));
    }
    // Silu is code 10 of the unary kernels, x times case 9's sigmoid.
    assert_eq!(plan::unary_code(&Op::Silu), Some((10, 1.0)));
    assert!(source::PRELUDE.contains("case 10:"));
    // A non-finite mean square makes the row NaN on every tier; the sum of squares is f64.
    assert_eq!(source::KERNELS.matches("rms_bad(ms) ?").count(), 3);
    let r = plan::rms_norm(&[2, 3, 64], 1e-6, true, true);
    assert_eq!((r.n, r.i[1], r.i[3], r.i[4]), (6, 64, 1, 1));
    assert!((r.f[0] - 1e-6).abs() < 1e-12);
    let r = plan::rms_norm(&[5, 0], 1e-5, false, false);
    assert_eq!((r.n, r.i[1], r.i[3], r.i[4]), (0, 0, 0, 0));
    let s = plan::swiglu(12, 4, false);
    assert_eq!((s.n, s.i[1], s.i[2]), (12, 4, 0));
    assert_eq!(plan::swiglu(0, 0, true).i[1..3], [1, 1]);
    // Every tier registers each of the four ops.
    let t = kernels::table(true, false).infos();
    for kind in [OpKind::RmsNorm, OpKind::AddRmsNorm, OpKind::SwiGlu, OpKind::Silu] {
        for tier in Tier::ALL {
            assert!(t.iter().any(|k| k.op == kind && k.tier == tier), "{kind} {tier}");
        }
    }
    assert!(
        t.iter().any(|k| k.name == "rmsnorm.fast.warp-per-row"),
        "{:?}",
        t.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
}
