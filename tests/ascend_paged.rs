//! The paged KV cache on Ascend (over acl-emu, both SoCs): PagedAttention and KvCacheWrite
//! run on the aclnn tier (no host tier; PagedAttention as one aclnnIncreFlashAttentionV4 on
//! the 910B2 at fp16/bf16 with a block size of 16) and match the CPU, and a compiled decode step
//! (caches as inputs, KvCacheWrite then PagedAttention, the host tier denied) run again
//! with new slots, padding slots among them, block tables and lengths makes no phase-1
//! call: slots, lengths and tables are device tensors read by the recorded executors, the
//! length mask and the padding rows' redirection built on the device. Also: acl-emu's
//! model-only switch counts and models what a computing run does.
#![cfg(feature = "acl")]

mod common;

use common::AclEmu;
use npurt::{DType, Op, Precision, Tensor};
use npurt_test_support::emu::Emu;
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, ScheduleStrategy};

/// The phase-1 entry points the PagedAttention composition (and the graph's other nodes)
/// may call.
const PHASE1: &[&str] = &[
    "aclnnAddGetWorkspaceSize",
    "aclnnAddsGetWorkspaceSize",
    "aclnnAmaxGetWorkspaceSize",
    "aclnnBatchMatMulGetWorkspaceSize",
    "aclnnCastGetWorkspaceSize",
    "aclnnEqScalarGetWorkspaceSize",
    "aclnnEqTensorGetWorkspaceSize",
    "aclnnIncreFlashAttentionV4GetWorkspaceSize",
    "aclnnIndexSelectGetWorkspaceSize",
    "aclnnInplaceCopyGetWorkspaceSize",
    "aclnnInplaceMaskedFillScalarGetWorkspaceSize",
    "aclnnMatmulGetWorkspaceSize",
    "aclnnMulsGetWorkspaceSize",
    "aclnnReluGetWorkspaceSize",
    "aclnnSWhereGetWorkspaceSize",
    "aclnnScatterNdUpdateGetWorkspaceSize",
    "aclnnScatterPaKvCacheGetWorkspaceSize",
    "aclnnSoftmaxGetWorkspaceSize",
    "aclnnSubGetWorkspaceSize",
];

/// (phase-1 calls, phase-2 calls) since the emulator was configured.
fn calls(ctl: &Emu) -> (u64, u64) {
    let p1 = PHASE1.iter().map(|n| ctl.calls(n)).sum();
    let p2 = PHASE1.iter().map(|n| ctl.calls(n.trim_end_matches("GetWorkspaceSize"))).sum();
    (p1, p2)
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 + seed * 11) as f32 * 0.173).sin()).collect()
}

fn upload(rt: &Runtime, dtype: DType, shape: &[usize], v: &[f32]) -> Tensor {
    let t = rt.from_slice(v, shape.to_vec(), 0).unwrap();
    if dtype == DType::F32 { t } else { rt.run(&Op::Cast { to: dtype }, &[&t]).unwrap().remove(0) }
}

fn to_f32(rt: &Runtime, t: &Tensor) -> Vec<f32> {
    let t =
        if t.dtype() == DType::F32 { t.clone() } else { rt.run(&Op::Cast { to: DType::F32 }, &[t]).unwrap().remove(0) };
    t.to_ndarray::<f32>().unwrap().iter().copied().collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max)
}

/// One batch: sequences of lengths `lens` over 9 blocks of `bs` slots, 2 kv heads for 4
/// query heads, blocks out of order, table entries past a length holding -9 (never read),
/// with `seed` varying the operands.
fn batch(rt: &Runtime, dtype: DType, seed: usize, tables: &[i32], lens: &[i32], bs: usize) -> Vec<Tensor> {
    let (nb, kvh, h, d, b) = (9, 2, 4, 8, lens.len());
    let c = nb * bs * kvh * d;
    vec![
        upload(rt, dtype, &[b, h, d], &values(b * h * d, seed)),
        upload(rt, dtype, &[nb, bs, kvh, d], &values(c, seed + 1)),
        upload(rt, dtype, &[nb, bs, kvh, d], &values(c, seed + 2)),
        rt.from_slice(tables, vec![b, tables.len() / b], 0).unwrap(),
        rt.from_slice(lens, vec![b], 0).unwrap(),
    ]
}

fn cpu() -> Runtime {
    common::runtime(&common::backend("cpu").unwrap())
}

/// PagedAttention over acl-emu: the selected kernel is one aclnnIncreFlashAttentionV4 on the
/// 910B2 for fp16 and bf16 with a block size of 16, the aclnn composition otherwise (the
/// fp16compute one for f32 on the 910A), and its result is the CPU's within the dtype's
/// tolerance, a zero-length sequence's rows 0. Bad tables and lengths fail on the device
/// on both paths.
#[test]
fn paged_attention_runs_on_the_aclnn_tier_on_both_socs() {
    for (soc, dtypes) in
        [("Ascend910A", &[DType::F32, DType::F16][..]), ("Ascend910B2", &[DType::F32, DType::F16, DType::BF16][..])]
    {
        let Some(emu) = AclEmu::on(soc, "paged_attention_runs_on_the_aclnn_tier_on_both_socs") else { return };
        let rt = common::runtime(&emu.backend);
        let cpu = cpu();
        for (&dt, bs) in dtypes.iter().flat_map(|d| [(d, 4), (d, 16)]) {
            let tables = [2, 0, -9, -9, -9, -9, 5, 1, 3];
            let lens = if bs == 4 { [5, 0, 12] } else { [5, 0, 40] };
            let ins = batch(&rt, dt, 3, &tables, &lens, bs);
            let want_ins = batch(&cpu, dt, 3, &tables, &lens, bs);
            let op = Op::PagedAttention { scale: None };
            let metas: Vec<npurt::TensorMeta> = ins.iter().map(|t| t.meta().clone()).collect();
            let k = rt.select_kernel(&op, &metas).unwrap();
            let fused = soc == "Ascend910B2" && dt != DType::F32 && bs == 16;
            if fused {
                assert_eq!(k.name, "pagedattention.aclnn-fused.cube", "{soc} {dt} block size {bs}");
            } else {
                assert!(k.name.starts_with("pagedattention.aclnn"), "{soc} {dt}: kernel {}", k.name);
                assert!(!k.name.contains("fused"), "{soc} {dt} block size {bs}: kernel {}", k.name);
            }
            let (before, ifa) = (emu.ctl.calls("aclnnIndexSelect"), emu.ctl.calls("aclnnIncreFlashAttentionV4"));
            let got = to_f32(&rt, &rt.run(&op, &ins.iter().collect::<Vec<_>>()).unwrap()[0]);
            assert!(emu.ctl.calls("aclnnIndexSelect") > before, "{soc} {dt}: no aclnnIndexSelect launch");
            let launched = emu.ctl.calls("aclnnIncreFlashAttentionV4") - ifa;
            assert_eq!(launched, u64::from(fused), "{soc} {dt} block size {bs}: aclnnIncreFlashAttentionV4 launches");
            let want = to_f32(&cpu, &cpu.run(&op, &want_ins.iter().collect::<Vec<_>>()).unwrap()[0]);
            let tol = if dt == DType::F32 && soc != "Ascend910A" { 1e-5 } else { 3e-2 };
            let diff = max_diff(&got, &want);
            assert!(diff <= tol, "{soc} {dt}: max diff {diff} from the CPU");
            assert!(got[32..64].iter().all(|&x| x == 0.0), "{soc} {dt}: the zero-length sequence's row is 0");
        }
        // A used block id outside [0, NB) and a length above MB·BS fail on the device: an
        // error, not a result (block size 16: the fused kernel on the 910B2).
        for (tables, lens) in [([2, 9, 0], [20]), ([2, 0, 1], [49]), ([2, 0, 1], [-1])] {
            let ins = batch(&rt, DType::F16, 1, &tables, &lens, 16);
            let r = rt
                .run(&Op::PagedAttention { scale: None }, &ins.iter().collect::<Vec<_>>())
                .and_then(|o| rt.run(&Op::Cast { to: DType::F32 }, &[&o[0]]))
                .and_then(|o| o[0].to_ndarray::<f32>().map(|_| ()));
            assert!(r.is_err(), "{soc}: tables {tables:?}, lengths {lens:?} gave a result");
        }
        drop(rt);
        let c = emu.finish();
        assert_eq!((c.device_allocations, c.executors, c.descriptors), (0, 0, 0), "{soc}: {c:?}");
    }
}

/// KvCacheWrite over acl-emu, eagerly: the aclnn kernel is selected (one
/// aclnnScatterPaKvCache for fp16 and bf16 on the 910B2, aclnnScatterNdUpdate elsewhere),
/// the caches match the CPU's bit for bit with padding slots (-1) skipped, i32 and i64
/// slots, a step of padding only changes nothing, and a slot past the cache is an error.
#[test]
fn kv_cache_write_runs_on_the_aclnn_tier_on_both_socs() {
    for (soc, dtypes) in
        [("Ascend910A", &[DType::F32, DType::F16][..]), ("Ascend910B2", &[DType::F32, DType::F16, DType::BF16][..])]
    {
        let Some(emu) = AclEmu::on(soc, "kv_cache_write_runs_on_the_aclnn_tier_on_both_socs") else { return };
        let rt = common::runtime(&emu.backend);
        let cpu = cpu();
        let shape = [6, 4, 2, 8];
        let cc = values(6 * 4 * 2 * 8, 5);
        for &dt in dtypes {
            let fused = soc == "Ascend910B2" && dt != DType::F32;
            let (kc, vc) = (upload(&rt, dt, &shape, &cc), upload(&rt, dt, &shape, &values(cc.len(), 6)));
            let (ek, ev) = (upload(&cpu, dt, &shape, &cc), upload(&cpu, dt, &shape, &values(cc.len(), 6)));
            let cases: [&[i64]; 4] = [&[9, -1, 20], &[-1, 3, -1], &[-1, -1, -1], &[23, 0, -1]];
            for (i, slots) in cases.iter().enumerate() {
                let mk = |r: &Runtime, wide: bool| {
                    let s = if wide {
                        r.from_slice(slots, vec![3], 0).unwrap()
                    } else {
                        let s32: Vec<i32> = slots.iter().map(|&s| s as i32).collect();
                        r.from_slice(&s32, vec![3], 0).unwrap()
                    };
                    vec![
                        upload(r, dt, &[3, 2, 8], &values(48, i + 50)),
                        upload(r, dt, &[3, 2, 8], &values(48, i + 60)),
                        s,
                    ]
                };
                let (a, w) = (mk(&rt, i % 2 == 1), mk(&cpu, i % 2 == 1));
                let ins = [&kc, &vc, &a[0], &a[1], &a[2]];
                let metas: Vec<npurt::TensorMeta> = ins.iter().map(|t| t.meta().clone()).collect();
                let k = rt.select_kernel(&Op::KvCacheWrite, &metas).unwrap();
                let want_kernel = if fused { "kvcachewrite.aclnn-fused" } else { "kvcachewrite.aclnn.vector" };
                assert!(k.name.starts_with(want_kernel), "{soc} {dt}: kernel {}", k.name);
                let (pa, nd) = (emu.ctl.calls("aclnnScatterPaKvCache"), emu.ctl.calls("aclnnScatterNdUpdate"));
                rt.execute(&Op::KvCacheWrite, &ins, &[&kc, &vc]).unwrap();
                cpu.execute(&Op::KvCacheWrite, &[&ek, &ev, &w[0], &w[1], &w[2]], &[&ek, &ev]).unwrap();
                let launched =
                    (emu.ctl.calls("aclnnScatterPaKvCache") - pa, emu.ctl.calls("aclnnScatterNdUpdate") - nd);
                assert_eq!(launched, if fused { (1, 0) } else { (0, 2) }, "{soc} {dt} {slots:?}: scatters launched");
                for (got, want, what) in [(&kc, &ek, "key"), (&vc, &ev, "value")] {
                    let d = max_diff(&to_f32(&rt, got), &to_f32(&cpu, want));
                    assert_eq!(d, 0.0, "{soc} {dt} slots {slots:?}: the {what} cache differs from the CPU's");
                }
            }
        }
        // A slot past the cache fails on the device: an error, not a silent write.
        let kc = upload(&rt, DType::F16, &shape, &cc);
        let vc = upload(&rt, DType::F16, &shape, &cc);
        let bad = [
            upload(&rt, DType::F16, &[1, 2, 8], &values(16, 1)),
            upload(&rt, DType::F16, &[1, 2, 8], &values(16, 2)),
            rt.from_slice(&[24i32], vec![1], 0).unwrap(),
        ];
        let r = rt
            .execute(&Op::KvCacheWrite, &[&kc, &vc, &bad[0], &bad[1], &bad[2]], &[&kc, &vc])
            .and_then(|_| rt.synchronize(0));
        assert!(r.is_err(), "{soc}: slot 24 of 24 gave no error");
        drop((kc, vc, bad));
        drop(rt);
        let c = emu.finish();
        assert_eq!((c.device_allocations, c.executors, c.descriptors), (0, 0, 0), "{soc}: {c:?}");
    }
}

/// caches `[6, 16, 2, 8]` of `dt` and a step of 2 sequences: KvCacheWrite then
/// PagedAttention on the updated caches.
fn decode_graph(dt: DType) -> Graph {
    let (nb, bs, kvh, h, d, b, mb) = (6, 16, 2, 4, 8, 2, 3);
    let mut g = Graph::new();
    let kc = g.input("key_cache", dt, [nb, bs, kvh, d]);
    let vc = g.input("value_cache", dt, [nb, bs, kvh, d]);
    let k = g.input("key", dt, [b, kvh, d]);
    let v = g.input("value", dt, [b, kvh, d]);
    let slots = g.input("slots", DType::I32, [b]);
    let q = g.input("q", dt, [b, h, d]);
    let bt = g.input("block_tables", DType::I32, [b, mb]);
    let lens = g.input("context_lens", DType::I32, [b]);
    let upd = g.op_multi("write", Op::KvCacheWrite, &[kc, vc, k, v, slots]).unwrap();
    let out = g.op("attend", Op::PagedAttention { scale: None }, &[q, upd[0], upd[1], bt, lens]).unwrap();
    g.output(out);
    g
}

/// Three decode steps of a compiled graph with the host tier denied, with different slots
/// (a padding slot, then padding only), block tables and lengths: compiling records the
/// executors, no step makes a phase-1 call (slots, lengths and tables are device data, so
/// the recorded executors stay valid), every step launches the same set, and each gives
/// the CPU's result and caches (bit for bit). f32 and f16; on the 910B2 at f16 the cache
/// write is one aclnnScatterPaKvCache and the attention one aclnnIncreFlashAttentionV4. Before
/// the third step the caches move (copies): the executors follow them, the fused
/// attention's through its tensor lists' members (aclSetDynamicInputTensorAddr).
#[test]
fn a_warm_decode_step_makes_no_phase1_call() {
    for soc in ["Ascend910A", "Ascend910B2"] {
        let Some(emu) = AclEmu::on(soc, "a_warm_decode_step_makes_no_phase1_call") else { return };
        for dt in [DType::F32, DType::F16] {
            let rt = common::runtime(&emu.backend);
            let cpu = cpu();
            let opts = CompileOptions {
                device: 0,
                fuse: true,
                memory_reuse: true,
                parallel: false,
                strategy: ScheduleStrategy::Latency,
                max_streams: 1,
                precision: if dt == DType::F32 { Precision::F32 } else { Precision::F16 },
                max_arenas: 2,
                deny_host_tier: true,
                graph_capture: runtime::GraphCapture::Off,
                store_slow_precision: false,
            };
            let g = decode_graph(dt);
            let before = calls(&emu.ctl);
            let cg = CompiledGraph::compile(&rt, &g, opts).unwrap();
            let after = calls(&emu.ctl);
            let compiled = (after.0 - before.0, after.1 - before.1);
            assert!(cg.runs_frozen(), "{soc} {dt}");
            assert!(
                compiled.0 > 0 && compiled.1 == 0,
                "{soc} {dt}: compiling records, launching nothing: {compiled:?}"
            );
            let cc = values(6 * 16 * 2 * 8, 9);
            let (mut kc, mut vc) = (upload(&rt, dt, &[6, 16, 2, 8], &cc), upload(&rt, dt, &[6, 16, 2, 8], &cc));
            let (ek, ev) = (upload(&cpu, dt, &[6, 16, 2, 8], &cc), upload(&cpu, dt, &[6, 16, 2, 8], &cc));
            let mut counts = Vec::new();
            let steps: [([i32; 2], [i32; 6], [i32; 2]); 3] = [
                ([9, 20], [2, -9, -9, 5, 0, -9], [2, 5]),
                ([10, -1], [2, -9, -9, 1, 5, 3], [3, 20]),
                ([-1, -1], [2, -9, -9, 1, 5, 3], [3, 40]),
            ];
            let scatters = |c: &Emu| (c.calls("aclnnScatterPaKvCache"), c.calls("aclnnScatterNdUpdate"));
            let ifa = emu.ctl.calls("aclnnIncreFlashAttentionV4");
            let first = scatters(&emu.ctl);
            let mut moved = 0;
            for (step, (slots, tables, lens)) in steps.iter().enumerate() {
                if step == 2 {
                    // The caches move: the recorded executors follow them (the fused
                    // attention's through its tensor lists' members).
                    moved = emu.ctl.calls("aclSetDynamicInputTensorAddr");
                    kc = rt.run(&Op::Copy, &[&kc]).unwrap().remove(0);
                    vc = rt.run(&Op::Copy, &[&vc]).unwrap().remove(0);
                }
                let mk = |r: &Runtime| {
                    vec![
                        upload(r, dt, &[2, 2, 8], &values(32, step + 20)),
                        upload(r, dt, &[2, 2, 8], &values(32, step + 30)),
                        r.from_slice(&slots[..], vec![2], 0).unwrap(),
                        upload(r, dt, &[2, 4, 8], &values(64, step + 40)),
                        r.from_slice(&tables[..], vec![2, 3], 0).unwrap(),
                        r.from_slice(&lens[..], vec![2], 0).unwrap(),
                    ]
                };
                let (a, w) = (mk(&rt), mk(&cpu));
                let (before, all_before) = (calls(&emu.ctl), emu.run.counters().unwrap().phase1_calls);
                let got = cg.run(&[&kc, &vc, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]]).unwrap();
                let (after, all_after) = (calls(&emu.ctl), emu.run.counters().unwrap().phase1_calls);
                counts.push((after.0 - before.0, after.1 - before.1));
                // Every aclnn*GetWorkspaceSize, listed above or not.
                assert_eq!(all_after - all_before, 0, "{soc} {dt} step {step}: phase-1 calls in a warm step");
                cpu.execute(&Op::KvCacheWrite, &[&ek, &ev, &w[0], &w[1], &w[2]], &[&ek, &ev]).unwrap();
                let want = cpu.run(&Op::PagedAttention { scale: None }, &[&w[3], &ek, &ev, &w[4], &w[5]]).unwrap();
                let diff = max_diff(&to_f32(&rt, &got[0]), &to_f32(&cpu, &want[0]));
                // The 910A computes f32 products in fp16.
                let tol = if soc == "Ascend910A" || dt != DType::F32 { 2e-2 } else { 1e-5 };
                assert!(diff <= tol, "{soc} {dt} step {step}: max diff {diff} from the CPU");
                assert_eq!(max_diff(&to_f32(&rt, &kc), &to_f32(&cpu, &ek)), 0.0, "{soc} {dt} step {step}: key cache");
                assert_eq!(max_diff(&to_f32(&rt, &vc), &to_f32(&cpu, &ev)), 0.0, "{soc} {dt} step {step}: value cache");
            }
            let last = scatters(&emu.ctl);
            let fused = soc == "Ascend910B2" && dt == DType::F16;
            let per_run = if fused { (1, 0) } else { (0, 2) };
            assert_eq!((last.0 - first.0, last.1 - first.1), (3 * per_run.0, 3 * per_run.1), "{soc} {dt}: scatters");
            // The fused decode attention on the 910B2 at f16, its lengths in the mask.
            let ifa = emu.ctl.calls("aclnnIncreFlashAttentionV4") - ifa;
            assert_eq!(ifa, if fused { 3 } else { 0 }, "{soc} {dt}: aclnnIncreFlashAttentionV4 launches");
            // Both caches' list members patched once when they moved.
            let moved = emu.ctl.calls("aclSetDynamicInputTensorAddr") - moved;
            assert_eq!(moved, if fused { 2 } else { 0 }, "{soc} {dt}: list members patched");
            println!("{soc} {dt}: (phase 1, phase 2) at compile time {compiled:?}, per step: {counts:?}");
            assert!(counts[0].1 > 0, "{soc} {dt}: the first step launches: {counts:?}");
            for (k, c) in counts.iter().enumerate() {
                assert_eq!(c.0, 0, "{soc} {dt}: step {k} made phase-1 calls: {counts:?}");
                assert_eq!(c.1, counts[0].1, "{soc} {dt}: step {k} launched another set: {counts:?}");
            }
        }
        let c = emu.finish();
        assert_eq!((c.device_allocations, c.executors, c.descriptors), (0, 0, 0), "{soc}: {c:?}");
    }
}

/// acl-emu's model-only switch (`compute=0`, which `ACL_EMU_COMPUTE=0` sets at start): the
/// `llama-tiny` preset's prefill and decode steps count the same aclnn calls, copies,
/// allocations, synchronisations and modelled time (every unit, and the roofline) as a
/// computing run, on both SoCs; only the arithmetic is skipped. A first computing run warms
/// whatever the backend keeps between runtimes, so the two compared start alike.
#[test]
fn a_model_only_emulator_counts_and_models_what_a_computing_one_does() {
    use npurt::llm::{Llm, LlmOptions, SamplingParams};
    let test = "a_model_only_emulator_counts_and_models_what_a_computing_one_does";
    for soc in ["Ascend910A", "Ascend910B2"] {
        let Some(emu) = AclEmu::on(soc, test) else { return };
        let mut seen = Vec::new();
        for compute in ["1", "1", "0"] {
            assert_eq!(emu.ctl.configure(&format!("compute={compute}")), 0, "{soc}: compute={compute}");
            let rt = common::runtime(&emu.backend);
            let options = LlmOptions { max_seq_len: Some(64), max_batch: 2, ..LlmOptions::default() };
            let llm = Llm::preset(&rt, "llama-tiny", 3, options).expect("llama-tiny");
            emu.run.reset().unwrap();
            let params = SamplingParams { stop_token_ids: Some(vec![]), ..SamplingParams::greedy(4) };
            let out = llm.generate_ids(&[vec![5, 9, 14, 2, 7], vec![3, 8]], &params);
            seen.push((compute, out.map(|g| g.len()), emu.run.counters().unwrap()));
            drop((llm, rt));
        }
        assert_eq!(emu.ctl.configure("compute=1"), 0, "{soc}: restore computing");
        for (compute, out, c) in &seen {
            assert_eq!(out.as_ref().ok(), Some(&2), "{soc} compute={compute}: {out:?}");
            assert!(c.phase2_calls > 0 && c.modelled.as_nanos() > 0, "{soc} compute={compute}: {c:?}");
        }
        assert_eq!(seen[2].2, seen[1].2, "{soc}: model-only counters differ from computing ones");
        let c = emu.finish();
        assert_eq!((c.device_allocations, c.executors, c.descriptors), (0, 0, 0), "{soc}: {c:?}");
    }
}

/// The `llama-tiny` preset generating at precision f16 over acl-emu: the engine's KV caches
/// are f16 (half the pool bytes of f32 caches), so on the 910B2 each decode step's attention
/// is one aclnnIncreFlashAttentionV4 per layer and each cache write one
/// aclnnScatterPaKvCache, while the 910A keeps its composition (no fused launch); a warm
/// decode step makes no phase-1 call, with graph capture off (every launch counted) and
/// on (`auto`: the steps replay their capture, the fused kernels launched when recorded);
/// the greedy tokens are the CPU's at f16.
#[test]
fn llm_decode_at_f16_reaches_the_fused_attention() {
    use npurt::llm::{Llm, LlmOptions, SamplingParams};
    let test = "llm_decode_at_f16_reaches_the_fused_attention";
    let options = || LlmOptions { max_seq_len: Some(64), max_batch: 2, ..LlmOptions::default() };
    let prompts = [vec![5, 9, 14, 2, 7], vec![3, 8]];
    let params = SamplingParams { stop_token_ids: Some(vec![]), ..SamplingParams::greedy(6) };
    let f16 = |backend, graph_capture| {
        let cfg = npurt::RuntimeConfig { precision: Precision::F16, graph_capture, ..npurt::RuntimeConfig::default() };
        Runtime::with_backend(backend, cfg).expect("runtime")
    };
    let cpu_backend = common::backend("cpu").unwrap();
    let cpu_llm = Llm::preset(&f16(cpu_backend, runtime::GraphCapture::Off), "llama-tiny", 3, options()).unwrap();
    let want: Vec<Vec<u32>> =
        cpu_llm.generate_ids(&prompts, &params).unwrap().into_iter().map(|g| g.token_ids).collect();
    for soc in ["Ascend910A", "Ascend910B2"] {
        let Some(emu) = AclEmu::on(soc, test) else { return };
        for capture in [runtime::GraphCapture::Off, runtime::GraphCapture::Auto] {
            let rt = f16(emu.backend.clone(), capture);
            let pool = |rt: &Runtime| rt.pool_stats(0).map(|s| s.in_use_bytes + s.system_bytes).unwrap();
            let before = pool(&rt);
            let llm = Llm::preset(&rt, "llama-tiny", 3, options()).unwrap();
            let held = pool(&rt) - before;
            let what = format!("{soc} capture {capture:?}");
            assert_eq!(llm.cache_shape().dtype, DType::F16, "{what}");
            assert_eq!(held, llm.kv_cache_bytes(), "{what}: pool bytes of the caches");
            let f32_caches = LlmOptions { kv_cache_dtype: Some(DType::F32), ..options() };
            let before = pool(&rt);
            let wide = Llm::preset(&rt, "llama-tiny", 3, f32_caches).unwrap();
            assert_eq!(pool(&rt) - before, 2 * held, "{what}: f16 caches take half the bytes of f32 ones");
            drop(wide);
            // The first call compiles (and records); the second runs warm graphs.
            let ifa = |e: &AclEmu| e.ctl.calls("aclnnIncreFlashAttentionV4");
            let first = ifa(&emu);
            llm.generate_ids(&prompts, &params).unwrap();
            let fused = soc == "Ascend910B2";
            assert_eq!(ifa(&emu) > first, fused, "{what}: aclnnIncreFlashAttentionV4 launched");
            let layers = llm.config().num_hidden_layers as u64;
            let read = |e: &AclEmu| {
                let c = e.run.counters().unwrap();
                (c.phase1_calls, ifa(e), e.ctl.calls("aclnnScatterPaKvCache"))
            };
            let (mut steps, mut last, mut events) = (Vec::new(), None, 0);
            let out = llm
                .generate_ids_stream(&prompts, &params, |_| {
                    events += 1;
                    // One event per sequence per step: read at the end of each step.
                    if events % prompts.len() == 0 {
                        let now = read(&emu);
                        if let Some((p, i, s)) = last {
                            steps.push((now.0 - p, now.1 - i, now.2 - s));
                        }
                        last = Some(now);
                    }
                    Ok(())
                })
                .unwrap();
            let got: Vec<Vec<u32>> = out.into_iter().map(|g| g.token_ids).collect();
            println!("{what}: per warm decode step (phase-1 calls, IFA, ScatterPaKvCache launches) {steps:?}");
            assert_eq!(steps.len(), 5, "{what}: decode steps");
            for (k, s) in steps.iter().enumerate() {
                assert_eq!(s.0, 0, "{what}: decode step {k} made phase-1 calls");
                if capture == runtime::GraphCapture::Off {
                    let launched = if fused { (layers, layers) } else { (0, 0) };
                    assert_eq!((s.1, s.2), launched, "{what}: decode step {k}'s fused launches");
                }
            }
            assert_eq!(got, want, "{what}: greedy ids at f16 against the CPU's");
            drop((llm, rt));
        }
        let c = emu.finish();
        assert_eq!((c.device_allocations, c.executors, c.descriptors), (0, 0, 0), "{soc}: {c:?}");
    }
}
