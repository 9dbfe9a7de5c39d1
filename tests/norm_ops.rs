//! The decoder-LLM row ops outside the conformance suite: AddRmsNorm's two outputs through
//! eager `execute` with caller-given tensors, and through compiled graphs (`op_multi`),
//! where its sum feeds later nodes as a transformer's residual stream does.

mod common;

use npurt::{DType, Op, Precision, Tensor};
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, ScheduleStrategy};

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().unwrap().iter().copied().collect()
}

/// `n` values in about [-2, 2], different per `seed`.
fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed * 97)) % 4001) as f32 / 1000.0 - 2.0)
        .collect()
}

/// `x / rms(x) * w` per row, in f64.
fn rms(x: &[f32], w: &[f32], eps: f64) -> Vec<f32> {
    let d = w.len();
    x.chunks(d)
        .flat_map(|r| {
            let ms = r.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / d as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            r.iter().zip(w).map(move |(&v, &g)| (v as f64 * inv * g as f64) as f32)
        })
        .collect()
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}: element {i}: got {g}, want {w}");
    }
}

/// True (after printing why) when `rt` has no kernel for `op`.
fn no_kernel(rt: &Runtime, op: &Op, ins: &[&Tensor], backend: &str) -> bool {
    match rt.run(op, ins) {
        Err(npurt::Error::NoKernel { .. }) => {
            eprintln!("SKIP {} on {backend}: no kernel", op.name());
            true
        }
        _ => false,
    }
}

on_every_backend!(add_rms_norm_writes_both_given_outputs, |b| {
    let rt = common::runtime(&b);
    let (rows, d) = (3, 37);
    let (x, r, w) = (data(rows * d, 1), data(rows * d, 2), data(d, 3));
    let xt = rt.from_slice(&x, vec![rows, d], 0).unwrap();
    let rt_ = rt.from_slice(&r, vec![rows, d], 0).unwrap();
    let wt = rt.from_slice(&w, vec![d], 0).unwrap();
    let op = Op::AddRmsNorm { eps: 1e-6 };
    if no_kernel(&rt, &op, &[&xt, &rt_, &wt], b.name()) {
        return;
    }
    let (y, s) = (rt.empty(DType::F32, vec![rows, d], 0).unwrap(), rt.empty(DType::F32, vec![rows, d], 0).unwrap());
    rt.execute(&op, &[&xt, &rt_, &wt], &[&y, &s]).unwrap();
    let sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
    close(&vals(&s), &sum, "the sum output");
    close(&vals(&y), &rms(&sum, &w, 1e-6), "the normalised output");
    // One output where the op has two is refused before anything runs.
    let e = rt.execute(&op, &[&xt, &rt_, &wt], &[&y]).unwrap_err().to_string();
    assert!(e.contains("expects 2 outputs"), "{e}");
});

/// Two decoder half-layers: `(h, res) = AddRmsNorm(x, res0)`, `g = SwiGlu(h · up)`, then
/// `(y, res2) = AddRmsNorm(g, res)`: the first sum feeds the second op, both outputs of
/// the second are graph outputs.
fn two_layers(d: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 5, d]);
    let r0 = g.input("res0", DType::F32, [2, 5, d]);
    let w1 = g.constant("w1", HostTensor::from_vec([d], data(d, 4)).unwrap());
    let w2 = g.constant("w2", HostTensor::from_vec([d], data(d, 5)).unwrap());
    let up = g.constant("up", HostTensor::from_vec([2 * d, d], data(2 * d * d, 6)).unwrap());
    let n1 = g.op_multi("norm1", Op::AddRmsNorm { eps: 1e-5 }, &[x, r0, w1]).unwrap();
    let h = g.op("gate_up", Op::Linear, &[n1[0], up]).unwrap();
    let act = g.op("act", Op::SwiGlu, &[h]).unwrap();
    let n2 = g.op_multi("norm2", Op::AddRmsNorm { eps: 1e-5 }, &[act, n1[1], w2]).unwrap();
    let last = g.op("final", Op::RmsNorm { eps: 1e-5 }, &[n2[1], w1]).unwrap();
    g.output(n2[0]);
    g.output(n2[1]);
    g.output(last);
    g
}

on_every_backend!(add_rms_norm_outputs_flow_through_compiled_graphs, |b| {
    let rt = common::runtime(&b);
    let d = 16;
    let g = two_layers(d);
    let x = rt.from_slice(&data(2 * 5 * d, 7), vec![2, 5, d], 0).unwrap();
    let r0 = rt.from_slice(&data(2 * 5 * d, 8), vec![2, 5, d], 0).unwrap();
    let w = rt.from_slice(&data(d, 4), vec![d], 0).unwrap();
    if no_kernel(&rt, &Op::AddRmsNorm { eps: 1e-5 }, &[&x, &r0, &w], b.name()) {
        return;
    }
    let mut want: Option<Vec<Vec<f32>>> = None;
    for (fuse, reuse, parallel) in [(false, false, false), (true, true, false), (true, true, true)] {
        let options = CompileOptions {
            device: 0,
            fuse,
            memory_reuse: reuse,
            parallel,
            strategy: ScheduleStrategy::Latency,
            max_streams: 4,
            precision: Precision::F32,
            max_arenas: runtime::graph::DEFAULT_MAX_ARENAS,
            deny_host_tier: false,
            graph_capture: runtime::GraphCapture::Auto,
            store_slow_precision: false,
        };
        let cg = CompiledGraph::compile(&rt, &g, options).unwrap();
        for _ in 0..2 {
            let outs = cg.run(&[&x, &r0]).unwrap();
            assert_eq!(outs.len(), 3);
            let got: Vec<Vec<f32>> = outs.iter().map(vals).collect();
            // The second sum is the first sum plus the activation: finite and not all zero.
            assert!(got[1].iter().all(|v| v.is_finite()) && got[1].iter().any(|&v| v != 0.0));
            match &want {
                None => want = Some(got),
                Some(w) => {
                    for (k, (a, e)) in got.iter().zip(w).enumerate() {
                        close(a, e, &format!("output {k}, fuse={fuse} reuse={reuse} parallel={parallel}"));
                    }
                }
            }
        }
    }
    // The last output is RmsNorm of the second sum, as its eager form computes it.
    let w = want.unwrap();
    close(&w[2], &rms(&w[1], &data(d, 4), 1e-5), "final RmsNorm of the passed-on sum");
});
