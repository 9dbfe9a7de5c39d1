//! RmsNorm, AddRmsNorm, Silu and SwiGlu on Ascend (over acl-emu), on both SoCs: the fused
//! aclnn operators on Atlas A2 (910B2), compositions of the operators the 910A has there
//! (CANN documents the fused ones unsupported on Atlas training products), never the host
//! tier; the aclnn calls each makes are counted, the results match the CPU's reference
//! tier, and a compiled graph of them makes no phase-1 call once warm.
#![cfg(feature = "acl")]

mod common;

use common::AclEmu;
use npurt::{DType, Op, Precision, RuntimeConfig, Tensor, Tier};
use npurt_test_support::emu::Emu;
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, ScheduleStrategy};

/// The aclnn operators these ops may call.
const CALLS: &[&str] = &[
    "aclnnRmsNorm",
    "aclnnAddRmsNorm",
    "aclnnSwiGlu",
    "aclnnSilu",
    "aclnnLayerNorm",
    "aclnnNeg",
    "aclnnMuls",
    "aclnnMul",
    "aclnnAdd",
];

/// Phase-2 calls of each of [`CALLS`] (same order).
fn counts(ctl: &Emu) -> Vec<u64> {
    CALLS.iter().map(|n| ctl.calls(n)).collect()
}

/// Phase-1 calls of all of [`CALLS`].
fn phase1(ctl: &Emu) -> u64 {
    CALLS.iter().map(|n| ctl.calls(&format!("{n}GetWorkspaceSize"))).sum()
}

/// The calls made between `a` and `b`, by name, the zero ones left out.
fn made(a: &[u64], b: &[u64]) -> Vec<(&'static str, u64)> {
    CALLS.iter().zip(a.iter().zip(b)).filter(|(_, (x, y))| y > x).map(|(n, (x, y))| (*n, y - x)).collect()
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed * 977) % 4001) as f32 / 1000.0 - 2.0)
        .collect()
}

fn upload(rt: &Runtime, dt: DType, dims: &[usize], v: &[f32]) -> Tensor {
    let t = rt.from_slice(v, dims.to_vec(), 0).unwrap();
    if dt == DType::F32 { t } else { rt.run(&Op::Cast { to: dt }, &[&t]).unwrap().remove(0) }
}

fn floats(rt: &Runtime, t: &Tensor) -> Vec<f32> {
    let t =
        if t.dtype() == DType::F32 { t.clone() } else { rt.run(&Op::Cast { to: DType::F32 }, &[t]).unwrap().remove(0) };
    t.to_ndarray::<f32>().unwrap().iter().copied().collect()
}

/// Each case: op, input shapes (all of one dtype), and the calls it makes on (910A, 910B2).
type Case = (Op, Vec<Vec<usize>>, [&'static [(&'static str, u64)]; 2]);

fn cases() -> Vec<Case> {
    let (rows, d) = (6, 64);
    vec![
        (
            Op::RmsNorm { eps: 1e-6 },
            vec![vec![2, 3, d], vec![d]],
            [&[("aclnnLayerNorm", 1), ("aclnnNeg", 1), ("aclnnMuls", 1), ("aclnnMul", 1)], &[("aclnnRmsNorm", 1)]],
        ),
        (
            Op::RmsNorm { eps: 1e-5 },
            vec![vec![rows, d]],
            [
                &[("aclnnLayerNorm", 1), ("aclnnNeg", 1), ("aclnnMuls", 2)],
                &[("aclnnLayerNorm", 1), ("aclnnNeg", 1), ("aclnnMuls", 2)],
            ],
        ),
        (
            Op::AddRmsNorm { eps: 1e-5 },
            vec![vec![rows, d], vec![rows, d], vec![d]],
            [
                &[("aclnnLayerNorm", 1), ("aclnnNeg", 1), ("aclnnMuls", 1), ("aclnnMul", 1), ("aclnnAdd", 1)],
                &[("aclnnAddRmsNorm", 1)],
            ],
        ),
        (Op::Silu, vec![vec![rows, d]], [&[("aclnnSilu", 1)], &[("aclnnSilu", 1)]]),
        (Op::SwiGlu, vec![vec![rows, 2 * d]], [&[("aclnnSilu", 1), ("aclnnMul", 1)], &[("aclnnSwiGlu", 1)]]),
        (
            Op::SwiGlu,
            vec![vec![rows, d], vec![rows, d]],
            [&[("aclnnSilu", 1), ("aclnnMul", 1)], &[("aclnnSilu", 1), ("aclnnMul", 1)]],
        ),
    ]
}

#[test]
fn the_decoder_row_ops_map_onto_aclnn_on_both_socs() {
    let cpu = npurt::cpu_backend(&RuntimeConfig::default()).unwrap();
    let reference =
        Runtime::with_backend(cpu, RuntimeConfig { forced_tier: Some(Tier::Reference), ..RuntimeConfig::default() })
            .unwrap();
    for (k, soc) in ["Ascend910A", "Ascend910B2"].into_iter().enumerate() {
        let Some(emu) = AclEmu::on(soc, "the_decoder_row_ops_map_onto_aclnn_on_both_socs") else { return };
        {
            let rt = common::runtime(&emu.backend);
            let dtypes: &[DType] =
                if k == 0 { &[DType::F32, DType::F16] } else { &[DType::F32, DType::F16, DType::BF16] };
            for (op, shapes, calls) in cases() {
                for &dt in dtypes {
                    let vals: Vec<Vec<f32>> =
                        shapes.iter().enumerate().map(|(i, s)| data(s.iter().product(), i as u32 + 1)).collect();
                    let ins: Vec<Tensor> = shapes.iter().zip(&vals).map(|(s, v)| upload(&rt, dt, s, v)).collect();
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    let before = counts(&emu.ctl);
                    let (outs, report) = rt.run_with_report(&op, &refs).unwrap();
                    let after = counts(&emu.ctl);
                    let what = format!("{soc} {op:?} {dt}");
                    assert!(report.implementation.contains("aclnn"), "{what}: ran {}", report.implementation);
                    assert_eq!(made(&before, &after), calls[k].to_vec(), "{what}: aclnn calls");
                    let rins: Vec<Tensor> =
                        shapes.iter().zip(&vals).map(|(s, v)| upload(&reference, dt, s, v)).collect();
                    let want = reference.run(&op, &rins.iter().collect::<Vec<_>>()).unwrap();
                    assert_eq!(outs.len(), want.len(), "{what}");
                    let tol = if dt == DType::F32 {
                        1e-5
                    } else if dt == DType::F16 {
                        4e-3
                    } else {
                        2e-2
                    };
                    for (o, w) in outs.iter().zip(&want) {
                        let (g, w) = (floats(&rt, o), floats(&reference, w));
                        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                            assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}: element {i}: {a} vs {b}");
                        }
                    }
                }
            }
        }
        emu.finish();
    }
}

/// A decoder layer's row ops: `(h, sum) = AddRmsNorm(x, res)`, `g = SwiGlu(h ‖ h)`
/// through a Linear, `y = RmsNorm(g + sum)`.
fn layer(d: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, d]);
    let r = g.input("res", DType::F32, [4, d]);
    let w = g.constant("w", HostTensor::from_vec([d], data(d, 5)).unwrap());
    let up = g.constant("up", HostTensor::from_vec([2 * d, d], data(2 * d * d, 6)).unwrap());
    let n = g.op_multi("norm", Op::AddRmsNorm { eps: 1e-5 }, &[x, r, w]).unwrap();
    let h = g.op("gate_up", Op::Linear, &[n[0], up]).unwrap();
    let a = g.op("act", Op::SwiGlu, &[h]).unwrap();
    let s = g.op("residual", Op::Add, &[a, n[1]]).unwrap();
    let y = g.op("final", Op::RmsNorm { eps: 1e-5 }, &[s, w]).unwrap();
    g.output(y);
    g.output(n[1]);
    g
}

#[test]
fn a_warm_compiled_layer_makes_no_phase_one_call() {
    for soc in ["Ascend910A", "Ascend910B2"] {
        let Some(emu) = AclEmu::on(soc, "a_warm_compiled_layer_makes_no_phase_one_call") else { return };
        {
            let rt = common::runtime(&emu.backend);
            let d = 32;
            let options = CompileOptions {
                device: 0,
                fuse: true,
                memory_reuse: true,
                parallel: false,
                strategy: ScheduleStrategy::Latency,
                max_streams: 1,
                precision: Precision::F32,
                max_arenas: 2,
                deny_host_tier: true,
                graph_capture: runtime::GraphCapture::Off,
                store_slow_precision: false,
            };
            let cg = CompiledGraph::compile(&rt, &layer(d), options).unwrap();
            assert!(cg.runs_frozen(), "{soc}");
            let mut firsts = Vec::new();
            for seed in 0..3 {
                let x = rt.from_slice(&data(4 * d, 10 + seed), vec![4, d], 0).unwrap();
                let r = rt.from_slice(&data(4 * d, 20 + seed), vec![4, d], 0).unwrap();
                let (p1, c0) = (phase1(&emu.ctl), counts(&emu.ctl));
                let outs = cg.run(&[&x, &r]).unwrap();
                let (p1b, c1) = (phase1(&emu.ctl), counts(&emu.ctl));
                assert!(!made(&c0, &c1).is_empty(), "{soc}: run {seed} launched nothing");
                if seed > 0 {
                    assert_eq!(p1b - p1, 0, "{soc}: warm run {seed} made phase-1 calls");
                }
                firsts.push(floats(&rt, &outs[0])[0]);
                // The sum output is x + res.
                let want: Vec<f32> =
                    data(4 * d, 10 + seed).iter().zip(data(4 * d, 20 + seed)).map(|(a, b)| a + b).collect();
                let got = floats(&rt, &outs[1]);
                assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-6 * (1.0 + b.abs())), "{soc}: the sum");
            }
            assert!(firsts[0] != firsts[1], "{soc}: different inputs, different results");
        }
        emu.finish();
    }
}
