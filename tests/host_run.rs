//! `CompiledGraph::run_host`: a run over the caller's host buffers. On the CPU backend the
//! buffers are lent to the device and used in place (no byte copied); elsewhere they are
//! staged. Either way the outputs equal `run`'s, and the caller's inputs are left as given.

mod common;

use common::bert_inputs;

use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{DType, Op, Tensor};
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostRun};

/// Host buffers aligned to 64 bytes (as ONNX Runtime's allocator gives them), each `skew`
/// bytes past that alignment.
struct Buffers {
    store: Vec<Vec<u8>>,
    at: Vec<(usize, usize)>,
}

impl Buffers {
    fn new(lens: &[usize], skew: usize) -> Buffers {
        let mut store = Vec::new();
        let mut at = Vec::new();
        for &n in lens {
            let v = vec![0u8; n + 128];
            let off = (64 - (v.as_ptr() as usize) % 64) % 64 + skew;
            at.push((off, n));
            store.push(v);
        }
        Buffers { store, at }
    }
    fn slices(&self) -> Vec<&[u8]> {
        self.store.iter().zip(&self.at).map(|(v, &(o, n))| &v[o..o + n]).collect()
    }
    fn slices_mut(&mut self) -> Vec<&mut [u8]> {
        self.store.iter_mut().zip(&self.at).map(|(v, &(o, n))| &mut v[o..o + n]).collect()
    }
}

fn bytes_of(t: &Tensor) -> Vec<u8> {
    match t.dtype() {
        DType::F32 => bytemuck::cast_slice(&t.to_ndarray::<f32>().unwrap().into_raw_vec_and_offset().0).to_vec(),
        DType::I64 => bytemuck::cast_slice(&t.to_ndarray::<i64>().unwrap().into_raw_vec_and_offset().0).to_vec(),
        other => panic!("no bytes_of for {other}"),
    }
}

/// `ins` into fresh input buffers (skewed by `skew` bytes), a run into fresh outputs.
fn run_host(cg: &CompiledGraph, ins: &[Vec<u8>], skew: usize) -> (HostRun, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let g = cg.graph();
    let mut input = Buffers::new(&ins.iter().map(Vec::len).collect::<Vec<_>>(), skew);
    for (s, b) in input.slices_mut().into_iter().zip(ins) {
        s.copy_from_slice(b);
    }
    let lens: Vec<usize> =
        g.outputs.iter().map(|o| g.meta(*o).shape.checked_bytes("out", g.meta(*o).dtype).unwrap()).collect();
    let mut output = Buffers::new(&lens, skew);
    let r = cg.run_host(&input.slices(), &mut output.slices_mut()).unwrap();
    let back_in = input.slices().iter().map(|s| s.to_vec()).collect();
    let back_out = output.slices().iter().map(|s| s.to_vec()).collect();
    (r, back_in, back_out)
}

on_every_backend!(a_bert_runs_over_host_buffers_in_place_on_the_host, |b| {
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(5), 2, 16).unwrap();
    let cg = CompiledGraph::compile(&rt, &bg.graph, CompileOptions::from_config(rt.config(), 0)).unwrap();
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let want: Vec<Vec<u8>> = cg.run(&refs).unwrap().iter().map(bytes_of).collect();
    let in_bytes: Vec<Vec<u8>> = ins.iter().map(bytes_of).collect();
    let total: usize = in_bytes.iter().map(Vec::len).sum::<usize>() + want.iter().map(Vec::len).sum::<usize>();
    let host = rt.device_info(0).unwrap().host_shared;
    for _ in 0..2 {
        let (r, back_in, got) = run_host(&cg, &in_bytes, 0);
        assert_eq!(got, want, "the outputs equal run()'s");
        assert_eq!(back_in, in_bytes, "the inputs are left as given");
        if host {
            assert!(cg.runs_frozen());
            assert_eq!(r, HostRun { lent_inputs: 3, lent_outputs: want.len(), copied_bytes: 0 }, "nothing copied");
        } else {
            assert_eq!(r, HostRun { lent_inputs: 0, lent_outputs: 0, copied_bytes: total }, "one copy each way");
        }
    }
    // Buffers off the device's alignment are copied, with the same results.
    let (r, _, got) = run_host(&cg, &in_bytes, 4);
    assert_eq!(got, want);
    assert_eq!(r.copied_bytes, total, "{r:?}");
    // An input another run lends at this moment (the same array fed to concurrent runs):
    // this run stages everything instead, with the same results.
    if host {
        let mut held = Buffers::new(&[in_bytes[0].len()], 0);
        held.slices_mut()[0].copy_from_slice(&in_bytes[0]);
        let mut input = Buffers::new(&in_bytes.iter().map(Vec::len).collect::<Vec<_>>(), 0);
        for (s, v) in input.slices_mut().into_iter().zip(&in_bytes) {
            s.copy_from_slice(v);
        }
        let g = cg.graph();
        let lens: Vec<usize> =
            g.outputs.iter().map(|o| g.meta(*o).shape.checked_bytes("out", g.meta(*o).dtype).unwrap()).collect();
        let mut output = Buffers::new(&lens, 0);
        let shared = held.slices()[0];
        let mut ins = input.slices();
        ins[0] = shared;
        b.with_host_ranges(0, &mut [runtime::HostRange::Read(shared)], &mut |_| {
            let r = cg.run_host(&ins, &mut output.slices_mut())?;
            assert_eq!(r, HostRun { lent_inputs: 0, lent_outputs: 0, copied_bytes: total });
            Ok(())
        })
        .unwrap();
        let got: Vec<Vec<u8>> = output.slices().iter().map(|s| s.to_vec()).collect();
        assert_eq!(got, want);
    }
    // Four threads over one graph: each run its own buffers, all equal to the serial run.
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|_| s.spawn(|| run_host(&cg, &in_bytes, 0))).collect();
        for h in hs {
            let (r, _, got) = h.join().unwrap();
            assert_eq!(got, want);
            assert_eq!(r.copied_bytes == 0, host, "{r:?}");
        }
    });
});

on_every_backend!(outputs_that_are_no_run_s_own_are_copied_and_bad_buffers_refused, |b| {
    let rt = common::runtime(&b);
    // Output 0 is the input itself (returned as it is), output 1 a node's output.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 8]);
    let y = g.op("y", Op::Relu, &[x]).unwrap();
    g.output(x);
    g.output(y);
    let cg = CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0)).unwrap();
    let xs: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
    let x_bytes: Vec<u8> = bytemuck::cast_slice(&xs).to_vec();
    let relu: Vec<u8> = bytemuck::cast_slice(&xs.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>()).to_vec();
    let (r, back_in, got) = run_host(&cg, std::slice::from_ref(&x_bytes), 0);
    assert_eq!(back_in[0], x_bytes);
    assert_eq!(got, vec![x_bytes.clone(), relu]);
    if rt.device_info(0).unwrap().host_shared {
        assert_eq!(r, HostRun { lent_inputs: 1, lent_outputs: 1, copied_bytes: 128 }, "output 0 copied");
    } else {
        assert_eq!(r.copied_bytes, 3 * 128);
    }
    // Buffers of the wrong size or number.
    let mut out = [vec![0u8; 128], vec![0u8; 128]];
    let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = cg.run_host(&[&x_bytes[..64]], &mut outs).unwrap_err();
    assert!(e.to_string().contains("input 0 (\"x\") is f32 [4, 8], 128 bytes; the buffer given has 64"), "{e}");
    let e = cg.run_host(&[], &mut outs).unwrap_err();
    assert!(e.to_string().contains("expects 1 inputs, got 0"), "{e}");
    let e = cg.run_host(&[&x_bytes], &mut outs[..1]).unwrap_err();
    assert!(e.to_string().contains("expects 2 outputs, got 1"), "{e}");
});
