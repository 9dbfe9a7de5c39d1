//! Reused executors over acl-emu: the emulator's address setters follow CANN's rules
//! (`aclSetInputTensorAddr` & co., `aclnn/acl_meta.h`), and compiled graphs whose nodes are compositions of several aclnn
//! operators (intermediates of their own, Gather with negative indices) give, run after
//! run, what a node-by-node run gives, with no phase 1 after the first run except for
//! the ops CANN excludes from repeatable executors.

mod common;

use acl_sys::codes::*;
use acl_sys::*;
use backend_acl::{AclBackend, AclConfig, Fp32Matmul};
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, ScheduleStrategy};
use runtime::{Backend, DType, GeluApprox, Op, Precision, Runtime, RuntimeConfig, Tensor};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

/// A 16 KiB device allocation and a stream on the emulator, with the calls the setter
/// checks make on them.
struct EmuMemory<'a> {
    api: &'a Api,
    p: *mut c_void,
    s: aclrtStream,
}

impl<'a> EmuMemory<'a> {
    fn open(api: &'a Api) -> Self {
        // SAFETY: the emulator's functions have exactly these prototypes (checked at its
        // compile time); every pointer passed below is valid for the call.
        unsafe {
            let _ = api.aclInit().unwrap()(std::ptr::null());
            assert_eq!(api.aclrtSetDevice().unwrap()(0), 0);
            let mut p: *mut c_void = null_mut();
            assert_eq!(api.aclrtMalloc().unwrap()(&mut p, 16384, ACL_MEM_MALLOC_HUGE_FIRST), 0);
            let mut s: aclrtStream = null_mut();
            assert_eq!(api.aclrtCreateStream().unwrap()(&mut s), 0);
            EmuMemory { api, p, s }
        }
    }

    /// The device address `o` bytes into the allocation.
    fn at(&self, o: usize) -> *mut c_void {
        (self.p as usize + o) as *mut c_void
    }

    fn put(&self, o: usize, v: &[f32]) {
        // SAFETY: as in `open`; `v` is valid for its length in bytes.
        unsafe {
            let b: &[u8] = std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4);
            assert_eq!(
                self.api.aclrtMemcpy().unwrap()(
                    self.at(o),
                    b.len(),
                    b.as_ptr().cast(),
                    b.len(),
                    ACL_MEMCPY_HOST_TO_DEVICE
                ),
                0
            );
        }
    }

    fn get(&self, o: usize) -> [f32; 4] {
        let mut v = [0f32; 4];
        let b = v.as_mut_ptr().cast::<c_void>();
        // SAFETY: as in `open`; `v` holds the 16 bytes copied.
        unsafe {
            assert_eq!(self.api.aclrtMemcpy().unwrap()(b, 16, self.at(o), 16, ACL_MEMCPY_DEVICE_TO_HOST), 0);
        }
        v
    }

    /// A contiguous FLOAT descriptor of `dims` (1-D or 2-D) at offset `o`.
    fn tensor(&self, dims: &[i64], o: usize) -> *mut aclTensor {
        let strides: Vec<i64> = if dims.len() == 2 { vec![dims[1], 1] } else { vec![1] };
        // SAFETY: as in `open`; dims and strides outlive the call.
        unsafe {
            self.api.aclCreateTensor().unwrap()(
                dims.as_ptr(),
                dims.len() as u64,
                ACL_FLOAT,
                strides.as_ptr(),
                0,
                ACL_FORMAT_ND,
                dims.as_ptr(),
                dims.len() as u64,
                self.at(o),
            )
        }
    }

    fn sync(&self) {
        // SAFETY: as in `open`.
        unsafe { assert_eq!(self.api.aclrtSynchronizeStream().unwrap()(self.s), 0) }
    }
}

/// Relu's executor: refused unless repeatable, then launched at new addresses, through
/// aclSetTensorAddr's joint count, and every check with CANN's codes.
fn relu_setters(d: &EmuMemory, x: *mut aclTensor, y: *mut aclTensor) {
    let (api, s) = (d.api, d.s);
    // SAFETY: as in `EmuMemory::open`.
    unsafe {
        let (relu1, relu2) = (api.aclnnReluGetWorkspaceSize().unwrap(), api.aclnnRelu().unwrap());
        let set_in = api.aclSetInputTensorAddr().unwrap();
        let set_out = api.aclSetOutputTensorAddr().unwrap();
        let set_any = api.aclSetTensorAddr().unwrap();
        let (mut ws, mut ex) = (0u64, null_mut());
        // Not repeatable: refused.
        assert_eq!(relu1(x, y, &mut ws, &mut ex), 0);
        assert_eq!(set_in(ex, 0, x, d.at(1536)), ACLNN_ERR_PARAM_INVALID);
        assert_eq!(relu2(null_mut(), ws, ex, s), 0);
        // Repeatable: phase 2 after new addresses reads and writes them.
        assert_eq!(relu1(x, y, &mut ws, &mut ex), 0);
        assert_eq!(api.aclSetAclOpExecutorRepeatable().unwrap()(ex), 0);
        assert_eq!(relu2(null_mut(), ws, ex, s), 0);
        assert_eq!(set_in(ex, 0, x, d.at(1536)), 0);
        assert_eq!(set_out(ex, 0, y, d.at(1024)), 0);
        assert_eq!(relu2(null_mut(), ws, ex, s), 0);
        d.sync();
        assert_eq!(d.get(512), [1., 0., 3., 0.], "the first launch kept its addresses");
        assert_eq!(d.get(1024), [0., 6., 0., 8.], "the second launch used the new ones");
        // aclSetTensorAddr counts inputs, then outputs.
        assert_eq!(set_any(ex, 1, y, d.at(512)), 0);
        assert_eq!(set_any(ex, 0, x, d.at(0)), 0);
        assert_eq!(relu2(null_mut(), ws, ex, s), 0);
        d.sync();
        assert_eq!(d.get(512), [1., 0., 3., 0.]);
        // The checks, with CANN's codes.
        assert_eq!(set_in(ex, 1, x, d.at(0)), ACLNN_ERR_PARAM_INVALID, "index out of range");
        assert_eq!(set_out(ex, 1, y, d.at(0)), ACLNN_ERR_PARAM_INVALID, "index out of range");
        assert_eq!(set_any(ex, 2, y, d.at(0)), ACLNN_ERR_PARAM_INVALID, "index out of range");
        assert_eq!(set_in(ex, 0, y, d.at(0)), ACLNN_ERR_PARAM_INVALID, "not the tensor at that index");
        assert_eq!(set_in(ex, 0, x, d.at(2)), ACLNN_ERR_PARAM_INVALID, "not 32-byte aligned");
        assert_eq!(set_in(ex, 0, x, null_mut()), ACLNN_ERR_PARAM_NULLPTR, "NULL address");
        assert_eq!(set_in(null_mut(), 0, x, d.at(0)), ACLNN_ERR_INNER_NULLPTR, "NULL executor");
        assert_eq!(set_in(ex, 0, null_mut(), d.at(0)), ACLNN_ERR_INNER_NULLPTR, "NULL tensor");
        assert_eq!(set_in(ex, 0, x, d.at(16384 - 32 + 64)), ACLNN_ERR_PARAM_INVALID, "past the allocation");
        assert_eq!(api.aclDestroyAclOpExecutor().unwrap()(ex), 0);
    }
}

/// Addmm's inputs in prototype order: self (the bias), mat1, mat2. Returns its tensors
/// (c, a, b, o) and its scalar, for the caller to destroy.
fn addmm_setters(d: &EmuMemory) -> ([*mut aclTensor; 4], *mut aclScalar) {
    let api = d.api;
    let (c, a, b, o) =
        (d.tensor(&[2], 2048), d.tensor(&[2, 2], 2560), d.tensor(&[2, 2], 3072), d.tensor(&[2, 2], 3584));
    // SAFETY: as in `EmuMemory::open`.
    unsafe {
        let set_in = api.aclSetInputTensorAddr().unwrap();
        let (mut ws, mut ex) = (0u64, null_mut());
        let one = 1f32;
        let sc = api.aclCreateScalar().unwrap()((&one as *const f32).cast_mut().cast(), ACL_FLOAT);
        assert_eq!(api.aclnnAddmmGetWorkspaceSize().unwrap()(c, a, b, sc, sc, o, 1, &mut ws, &mut ex), 0);
        assert_eq!(api.aclSetAclOpExecutorRepeatable().unwrap()(ex), 0);
        assert_eq!(set_in(ex, 0, c, d.at(4096)), 0);
        assert_eq!(set_in(ex, 1, a, d.at(4608)), 0);
        assert_eq!(set_in(ex, 2, b, d.at(5120)), 0);
        assert_eq!(set_in(ex, 0, a, d.at(4608)), ACLNN_ERR_PARAM_INVALID);
        assert_eq!(set_in(ex, 3, a, d.at(4608)), ACLNN_ERR_PARAM_INVALID);
        assert_eq!(api.aclDestroyAclOpExecutor().unwrap()(ex), 0);
        ([c, a, b, o], sc)
    }
}

/// An optional tensor that was NULL at phase 1 cannot get an address. Returns LayerNorm's
/// tensors (x, out) and its shape array, for the caller to destroy.
fn layer_norm_setters(d: &EmuMemory) -> ([*mut aclTensor; 2], *mut aclIntArray) {
    let api = d.api;
    // SAFETY: as in `EmuMemory::open`.
    unsafe {
        let set_in = api.aclSetInputTensorAddr().unwrap();
        let (mut ws, mut ex) = (0u64, null_mut());
        let dims = [4i64];
        let ns = api.aclCreateIntArray().unwrap()(dims.as_ptr(), 1);
        let ln1 = api.aclnnLayerNormGetWorkspaceSize().unwrap();
        let (lx, lo) = (d.tensor(&[1, 4], 0), d.tensor(&[1, 4], 512));
        assert_eq!(ln1(lx, ns, null_mut(), null_mut(), 1e-5, lo, null_mut(), null_mut(), &mut ws, &mut ex), 0);
        assert_eq!(api.aclSetAclOpExecutorRepeatable().unwrap()(ex), 0);
        assert_eq!(set_in(ex, 1, lx, d.at(0)), ACLNN_ERR_PARAM_INVALID, "weight was NULL");
        assert_eq!(set_in(ex, 0, lx, d.at(1536)), 0);
        assert_eq!(api.aclDestroyAclOpExecutor().unwrap()(ex), 0);
        ([lx, lo], ns)
    }
}

/// A fault injected into a setter fails that call, and only that one.
fn setter_fault(d: &EmuMemory, ctl: &common::Emu, x: *mut aclTensor, y: *mut aclTensor) {
    let api = d.api;
    // SAFETY: as in `EmuMemory::open`.
    unsafe {
        let relu1 = api.aclnnReluGetWorkspaceSize().unwrap();
        let set_out = api.aclSetOutputTensorAddr().unwrap();
        let (mut ws, mut ex) = (0u64, null_mut());
        assert_eq!(ctl.configure("fail=aclSetOutputTensorAddr:1:507899"), 0);
        assert_eq!(relu1(x, y, &mut ws, &mut ex), 0);
        assert_eq!(api.aclSetAclOpExecutorRepeatable().unwrap()(ex), 0);
        assert_eq!(set_out(ex, 0, y, d.at(1024)), 507899);
        assert_eq!(set_out(ex, 0, y, d.at(1024)), 0);
        assert_eq!(api.aclDestroyAclOpExecutor().unwrap()(ex), 0);
        assert_eq!(ctl.configure("fail="), 0);
    }
}

#[test]
fn address_setters_follow_canns_rules() {
    let Some(emu) = common::emu_or_skip("address_setters_follow_canns_rules") else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    assert_eq!(ctl.configure("fail="), 0);
    let tk = common::fake_toolkit("setters", &emu);
    let api = Api::load(&LoadConfig { lib_dir: Some(tk.join("lib64")), no_system_loader: true }).expect("load");
    let d = EmuMemory::open(&api);
    d.put(0, &[1., -2., 3., -4.]);
    d.put(1536, &[-5., 6., -7., 8.]);
    let (x, y) = (d.tensor(&[4], 0), d.tensor(&[4], 512));
    relu_setters(&d, x, y);
    let ([c, a, b, o], sc) = addmm_setters(&d);
    let ([lx, lo], ns) = layer_norm_setters(&d);
    assert!(ctl.calls("aclSetInputTensorAddr") >= 10 && ctl.calls("aclSetOutputTensorAddr") >= 2);
    setter_fault(&d, &ctl, x, y);
    // SAFETY: as in `EmuMemory::open`; each handle is destroyed once.
    unsafe {
        for t in [x, y, c, a, b, o, lx, lo] {
            assert_eq!(api.aclDestroyTensor().unwrap()(t), 0);
        }
        assert_eq!(api.aclDestroyScalar().unwrap()(sc), 0);
        assert_eq!(api.aclDestroyIntArray().unwrap()(ns), 0);
        assert_eq!(api.aclrtDestroyStream().unwrap()(d.s), 0);
        assert_eq!(api.aclrtFree().unwrap()(d.p), 0);
        assert_eq!(api.aclrtResetDevice().unwrap()(0), 0);
    }
    let c = ctl.counters();
    assert_eq!((c.device_allocations, c.executors, c.descriptors, c.streams), (0, 0, 0, 0), "{c:?}");
}

const PHASE1: &[&str] = &[
    "aclnnAddGetWorkspaceSize",
    "aclnnAddmmGetWorkspaceSize",
    "aclnnAddsGetWorkspaceSize",
    "aclnnCastGetWorkspaceSize",
    "aclnnGeluV2GetWorkspaceSize",
    "aclnnIndexSelectGetWorkspaceSize",
    "aclnnInplaceCopyGetWorkspaceSize",
    "aclnnLayerNormGetWorkspaceSize",
    "aclnnMatmulGetWorkspaceSize",
    "aclnnMulsGetWorkspaceSize",
];

fn phase1(ctl: &common::Emu) -> (u64, u64) {
    (PHASE1.iter().map(|n| ctl.calls(n)).sum(), ctl.calls("aclnnInplaceCopyGetWorkspaceSize"))
}

fn consts(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.05).collect()
}

/// Gather (negative indices) from a constant table, a Linear, a Gemm with alpha and no
/// bias, BiasGelu and Add+LayerNorm (intermediates of their own), and a Reshape output
/// (aclnnInplaceCopy: one-shot).
fn graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 8]);
    let idx = g.input("idx", DType::I64, [3]);
    let table = g.constant("table", HostTensor::from_vec([5, 8], consts(40, 1)).unwrap());
    let w = g.constant("w", HostTensor::from_vec([6, 8], consts(48, 2)).unwrap());
    let bias = g.constant("bias", HostTensor::from_vec([6], consts(6, 3)).unwrap());
    let w2 = g.constant("w2", HostTensor::from_vec([6, 8], consts(48, 4)).unwrap());
    let gamma = g.constant("gamma", HostTensor::from_vec([6], consts(6, 5)).unwrap());
    let beta = g.constant("beta", HostTensor::from_vec([6], consts(6, 6)).unwrap());
    let rows = g.op("rows", Op::Gather { axis: 0 }, &[table, idx]).unwrap();
    let lin = g.op("lin", Op::Linear, &[x, w, bias]).unwrap();
    let gemm = Op::Gemm { trans_a: false, trans_b: true, alpha: 0.5, beta: 1.0 };
    let gm = g.op("gemm", gemm, &[x, w2]).unwrap();
    let act = g.op("act", Op::BiasGelu(GeluApprox::Erf), &[lin, bias]).unwrap();
    let ln = g.op("ln", Op::AddLayerNorm { eps: 1e-5 }, &[act, gm, gamma, beta]).unwrap();
    let flat = g.op("flat", Op::Reshape { shape: vec![24] }, &[ln]).unwrap();
    g.output(rows);
    g.output(flat);
    g
}

fn options(reuse: bool, precision: Precision) -> CompileOptions {
    CompileOptions {
        device: 0,
        fuse: false,
        memory_reuse: reuse,
        parallel: false,
        strategy: ScheduleStrategy::Throughput,
        max_streams: 1,
        precision,
        max_arenas: 2,
        deny_host_tier: false,
        // Per-node launches: what this file tests (capture: tests/ascend_reuse.rs).
        graph_capture: runtime::GraphCapture::Off,
        store_slow_precision: false,
    }
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().unwrap().iter().copied().collect()
}

#[test]
fn composed_nodes_reuse_their_executors() {
    let Some(emu) = common::emu_or_skip("composed_nodes_reuse_their_executors") else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    assert_eq!(ctl.configure("soc=Ascend910B2;fail="), 0);
    let tk = common::fake_toolkit("reuse", &emu);
    for precision in [Precision::F32, Precision::F16] {
        let cfg = AclConfig { lib_dir: Some(tk.join("lib64")), fp32_matmul: Fp32Matmul::Fp16 };
        let b: Arc<dyn Backend> = Arc::new(AclBackend::new(cfg).unwrap());
        {
            let rt = Runtime::with_backend(b, RuntimeConfig::default()).unwrap();
            let g = graph();
            let before = phase1(&ctl);
            let cg = CompiledGraph::compile(&rt, &g, options(true, precision)).unwrap();
            let after = phase1(&ctl);
            assert!(
                after.0 - before.0 >= 10,
                "{precision:?}: compiling records the executors: {before:?} -> {after:?}"
            );
            assert!(cg.runs_frozen() && cg.host_tier().is_empty(), "{:?}", cg.host_tier());
            let plain = CompiledGraph::compile(&rt, &g, options(false, precision)).unwrap();
            let table = consts(40, 1);
            let mut keep = Vec::new();
            for run in 0..3i64 {
                let x = rt.from_slice(&consts(32, 7 + run as usize), [4, 8], 0).unwrap();
                let idx = rt.from_slice(&[-1 - run, run, -5 + run], [3], 0).unwrap();
                let before = phase1(&ctl);
                let got = cg.run(&[&x, &idx]).unwrap();
                let after = phase1(&ctl);
                let want = plain.run(&[&x, &idx]).unwrap();
                // Rows -1-run, run and -5+run of the table.
                let rows: Vec<f32> =
                    [4 - run, run, run].iter().flat_map(|&r| table[r as usize * 8..][..8].to_vec()).collect();
                assert_eq!(host(&got[0]), rows, "{precision:?} run {run}: gathered rows");
                let (a, w) = (host(&got[1]), host(&want[1]));
                let d = a.iter().zip(&w).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
                assert!(d < 1e-5, "{precision:?} run {run}: max diff {d} from the node-by-node run");
                // Only the Reshape (aclnnInplaceCopy) calls phase 1, in every run.
                assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "{precision:?} run {run}");
                keep.push((x, idx, got));
            }
        }
        let c = ctl.counters();
        assert_eq!((c.device_allocations, c.executors, c.descriptors, c.streams), (0, 0, 0, 0), "{c:?}");
    }
    assert_eq!(ctl.configure("soc=Ascend910A;fail="), 0);
}

/// Attention with and without an additive mask, fp16, on the 910B2: both nodes are one
/// aclnnFlashAttentionScore each (the masked one with q scaled before it and its fully
/// masked rows zeroed after it). Runs on new addresses give what a node-by-node run gives,
/// with no phase 1 in any run (it ran at compile time): q (the scaling's input), k, v, the mask (pse and the
/// row test) and the outputs (output 3 of the operator, then the in-place fill) are patched.
#[test]
fn flash_attention_nodes_reuse_their_executors() {
    let Some(emu) = common::emu_or_skip("flash_attention_nodes_reuse_their_executors") else { return };
    let _g = common::serial();
    let ctl = common::Emu::open(&emu);
    assert_eq!(ctl.configure("soc=Ascend910B2;fail="), 0);
    let tk = common::fake_toolkit("reuse-flash", &emu);
    {
        let cfg = AclConfig { lib_dir: Some(tk.join("lib64")), fp32_matmul: Fp32Matmul::Fp16 };
        let b: Arc<dyn Backend> = Arc::new(AclBackend::new(cfg).unwrap());
        let rt = Runtime::with_backend(b, RuntimeConfig::default()).unwrap();
        let (bs, h, s, d) = (2usize, 2usize, 6usize, 4usize);
        let mut g = Graph::new();
        let q = g.input("q", DType::F16, [bs, h, s, d]);
        let k = g.input("k", DType::F16, [bs, h, s, d]);
        let v = g.input("v", DType::F16, [bs, h, s, d]);
        let mask = g.input("mask", DType::F16, [bs, 1, 1, s]);
        let masked = g
            .op(
                "masked",
                Op::Attention { scale: None, layout: runtime::AttentionLayout::Bnsd, causal: false },
                &[q, k, v, mask],
            )
            .unwrap();
        let plain_att = g
            .op(
                "plain",
                Op::Attention { scale: Some(0.3), layout: runtime::AttentionLayout::Bnsd, causal: false },
                &[q, k, v],
            )
            .unwrap();
        g.output(masked);
        g.output(plain_att);
        let before = flash_phase1(&ctl);
        let cg = CompiledGraph::compile(&rt, &g, options(true, Precision::F16)).unwrap();
        assert!(flash_phase1(&ctl) - before >= 6, "compiling records the executors");
        assert!(cg.runs_frozen() && cg.host_tier().is_empty(), "{:?}", cg.host_tier());
        let plain = CompiledGraph::compile(&rt, &g, options(false, Precision::F16)).unwrap();
        let f16s = |v: Vec<f32>| v.into_iter().map(half::f16::from_f32).collect::<Vec<_>>();
        let mut keep = Vec::new();
        for run in 0..3usize {
            let t = |seed: usize| rt.from_slice(&f16s(consts(bs * h * s * d, seed + run)), [bs, h, s, d], 0).unwrap();
            let (qt, kt, vt) = (t(1), t(2), t(3));
            // Run 1 masks every key of batch 1 (its rows are 0); the others mask some keys.
            let m: Vec<f32> = (0..bs * s)
                .map(|i| if (run == 1 && i >= s) || (i + run) % 4 == 3 { f32::NEG_INFINITY } else { 0.0 })
                .collect();
            let mt = rt.from_slice(&f16s(m), [bs, 1, 1, s], 0).unwrap();
            let ins = [&qt, &kt, &vt, &mt];
            let before = (flash_phase1(&ctl), ctl.calls("aclnnFlashAttentionScore"));
            let got = cg.run(&ins).unwrap();
            let after = (flash_phase1(&ctl), ctl.calls("aclnnFlashAttentionScore"));
            assert_eq!(after.1 - before.1, 2, "run {run}: one aclnnFlashAttentionScore per node");
            assert_eq!(after.0, before.0, "run {run}: phase 1 in a run");
            let want = plain.run(&ins).unwrap();
            for (o, (a, w)) in got.iter().zip(&want).enumerate() {
                let cast = |x: &Tensor| host(&rt.run(&Op::Cast { to: DType::F32 }, &[x]).unwrap()[0]);
                let (a, w) = (cast(a), cast(w));
                assert_eq!(a, w, "run {run}, output {o}: differs from the node-by-node run");
                assert!(a.iter().all(|x| x.is_finite()), "run {run}, output {o}: {a:?}");
                if run == 1 && o == 0 {
                    assert!(a[a.len() / 2..].iter().all(|&x| x == 0.0), "fully masked rows are 0: {a:?}");
                }
            }
            keep.push((qt, kt, vt, mt, got));
        }
    }
    let c = ctl.counters();
    assert_eq!((c.device_allocations, c.executors, c.descriptors, c.streams), (0, 0, 0, 0), "{c:?}");
    assert_eq!(ctl.configure("soc=Ascend910A;fail="), 0);
}

/// Phase-1 calls of the operators a flash Attention node uses.
fn flash_phase1(ctl: &common::Emu) -> u64 {
    [
        "aclnnFlashAttentionScoreGetWorkspaceSize",
        "aclnnMulsGetWorkspaceSize",
        "aclnnAmaxGetWorkspaceSize",
        "aclnnEqScalarGetWorkspaceSize",
        "aclnnInplaceMaskedFillScalarGetWorkspaceSize",
    ]
    .iter()
    .map(|n| ctl.calls(n))
    .sum()
}
