//! Precision int8 on every backend: the CPU with AMX-INT8 or AVX-512-VNNI runs every
//! Linear of a tiny BERT as a dynamic int8 product (outputs not equal to f32's, within
//! cosine 0.99 of them); a backend or CPU without an int8 unit runs the graph in f32.

mod common;

use common::{bert_inputs, cosine};
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{Precision, Tensor};
use runtime::graph::{CompileOptions, CompiledGraph};

on_every_backend!(int8_precision_stays_close_to_f32_or_runs_f32, |b| {
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(11), 2, 16).unwrap();
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let f32_opts = CompileOptions { precision: Precision::F32, ..CompileOptions::from_config(rt.config(), 0) };
    let want = CompiledGraph::compile(&rt, &bg.graph, f32_opts.clone()).unwrap().run(&refs).unwrap();
    let cg = CompiledGraph::compile(&rt, &bg.graph, CompileOptions { precision: Precision::Int8, ..f32_opts }).unwrap();
    assert_eq!(cg.options().precision, Precision::Int8);
    let got = cg.run(&refs).unwrap();
    let cos = cosine(&want[0], &got[0]);
    let f = backend_cpu::features::get();
    let int8_unit = b.name() == "cpu" && backend_cpu::kernels::gemm_i8::Path::best(f).is_some();
    println!("{}: int8 unit {int8_unit}, cosine against f32 {cos}", b.name());
    if int8_unit {
        let (x, y) = (want[0].to_ndarray::<f32>().unwrap(), got[0].to_ndarray::<f32>().unwrap());
        assert!(x != y, "int8 products differ from f32 on the CPU");
        assert!(cos > 0.99, "int8 vs f32 on the CPU: cosine {cos}");
    } else {
        assert!(cos > 0.99999, "without an int8 unit {} runs f32: cosine {cos}", b.name());
    }
});
