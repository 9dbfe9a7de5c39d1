//! 0-d tensors (dims `[]`, one element) on the CPU backend: allocation, host copies,
//! eager elementwise ops with and without broadcasting, and a compiled graph whose
//! input, constant and output are 0-d.

use npurt::{DType, Op, RuntimeConfig};
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor};

fn cpu() -> npurt::Runtime {
    npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() })
        .expect("cpu runtime")
}

fn scalar(t: &npurt::Tensor) -> f32 {
    assert!(t.dims().is_empty(), "rank {} for a 0-d result", t.dims().len());
    let v = t.to_ndarray::<f32>().unwrap();
    assert_eq!(v.ndim(), 0);
    v.iter().copied().next().unwrap()
}

#[test]
fn zero_rank_tensors_hold_one_element() {
    let rt = cpu();
    let t = rt.from_slice(&[2.5f32], [0usize; 0], 0).unwrap();
    assert_eq!((t.numel(), t.meta().bytes()), (1, 4));
    assert_eq!(scalar(&t), 2.5);
    let z = rt.zeros(DType::I64, Vec::<usize>::new(), 0).unwrap();
    assert_eq!(z.to_ndarray::<i64>().unwrap().iter().copied().collect::<Vec<_>>(), vec![0]);
    assert!(rt.from_slice(&[1f32, 2.0], [0usize; 0], 0).is_err(), "two values for a 0-d tensor");
}

#[test]
fn eager_ops_take_zero_rank_operands() {
    let rt = cpu();
    let a = rt.from_slice(&[2.5f32], [0usize; 0], 0).unwrap();
    let b = rt.from_slice(&[-4f32], [0usize; 0], 0).unwrap();
    assert_eq!(scalar(&rt.run(&Op::Add, &[&a, &b]).unwrap()[0]), -1.5);
    assert_eq!(scalar(&rt.run(&Op::Mul, &[&a, &b]).unwrap()[0]), -10.0);
    assert_eq!(scalar(&rt.run(&Op::Relu, &[&b]).unwrap()[0]), 0.0);
    assert_eq!(scalar(&rt.run(&Op::Scale { factor: 2.0 }, &[&a]).unwrap()[0]), 5.0);
    assert_eq!(scalar(&rt.run(&Op::Copy, &[&a]).unwrap()[0]), 2.5);
    let v = rt.from_slice(&[1f32, 2.0, 3.0], [3], 0).unwrap();
    let s = rt.run(&Op::Add, &[&v, &a]).unwrap();
    assert_eq!(s[0].dims(), &[3]);
    assert_eq!(s[0].to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<_>>(), vec![3.5, 4.5, 5.5]);
}

#[test]
fn a_graph_with_zero_rank_values_compiles_and_runs() {
    let rt = cpu();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Vec::<usize>::new());
    let k = g.constant("k", HostTensor::from_vec(Vec::<usize>::new(), vec![3f32]).unwrap());
    let r = g.op("r", Op::Relu, &[x]).unwrap();
    let y = g.op("y", Op::Mul, &[r, k]).unwrap();
    g.output(y);
    let cg = CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0)).unwrap();
    for (input, want) in [(2f32, 6f32), (-1.0, 0.0)] {
        let t = rt.from_slice(&[input], [0usize; 0], 0).unwrap();
        assert_eq!(scalar(&cg.run(&[&t]).unwrap()[0]), want);
    }
}

#[test]
fn from_slice_takes_exactly_the_elements_of_its_shape() {
    let rt = cpu();
    for (n, dims) in [(0usize, vec![2usize, 3]), (5, vec![2, 3]), (7, vec![2, 3]), (2, vec![])] {
        let v = vec![1f32; n];
        let e = rt.from_slice(&v, dims.clone(), 0).err().unwrap_or_else(|| panic!("{n} values for {dims:?}"));
        assert!(e.to_string().contains(&format!("{n} values")), "{e}");
    }
}
