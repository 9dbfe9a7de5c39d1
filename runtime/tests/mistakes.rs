//! Mistakes a caller can make when building graphs and passing tensors around, each
//! refused with an error that names its subject: repeated names in a graph (inputs,
//! nodes, outputs) and a tensor of another runtime.

use npurt_test_support::host_backend::HostBackend;
use runtime::{CompileOptions, CompiledGraph, DType, Graph, Op, Runtime, RuntimeConfig};

fn runtime() -> Runtime {
    Runtime::with_backend(HostBackend::shared(), RuntimeConfig::default()).expect("runtime")
}

#[test]
fn a_tensor_of_another_runtime_is_named_as_such() {
    let (mine, theirs) = (runtime(), runtime());
    let x = theirs.from_slice(&[1f32, -2.0], [2], 0).unwrap();
    let y = mine.empty(DType::F32, [2], 0).unwrap();
    let e = mine.execute(&Op::Relu, &[&x], &[&y]).unwrap_err().to_string();
    assert!(e.contains("input 0") && e.contains("belongs to another runtime"), "{e}");
    // Both sides are named, although both are host:0.
    assert!(e.contains("its host:0") && e.contains("this runtime's host:0/default"), "{e}");
    let e = mine.run(&Op::Relu, &[&x]).unwrap_err().to_string();
    assert!(e.contains("belongs to another runtime"), "{e}");
    // An output of another runtime likewise.
    let x = mine.from_slice(&[1f32, -2.0], [2], 0).unwrap();
    let y = theirs.empty(DType::F32, [2], 0).unwrap();
    let e = mine.execute(&Op::Relu, &[&x], &[&y]).unwrap_err().to_string();
    assert!(e.contains("output 0") && e.contains("belongs to another runtime"), "{e}");
}

#[test]
fn a_repeated_node_name_is_refused_naming_it() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]);
    let a = g.op("a", Op::Relu, &[x]).unwrap();
    let e = g.op("a", Op::Relu, &[a]).unwrap_err().to_string();
    assert!(e.contains("\"a\"") && e.contains("given twice"), "{e}");
    // A node may not take an input's name either.
    let e = g.op("x", Op::Relu, &[a]).unwrap_err().to_string();
    assert!(e.contains("\"x\"") && e.contains("given twice"), "{e}");
    assert_eq!(g.nodes.len(), 1, "a refused node is not added");
}

#[test]
fn repeated_input_and_output_names_fail_validation() {
    let mut g = Graph::new();
    let x1 = g.input("x", DType::F32, [2]);
    let x2 = g.input("x", DType::F32, [2]);
    let d = g.op("d", Op::Sub, &[x1, x2]).unwrap();
    g.output(d);
    let e = g.validate().unwrap_err().to_string();
    assert!(e.contains("\"x\"") && e.contains("given twice"), "{e}");
    let rt = runtime();
    let e = CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0))
        .err()
        .expect("compiled a graph with two inputs named x")
        .to_string();
    assert!(e.contains("\"x\"") && e.contains("given twice"), "{e}");

    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]);
    let y = g.op("y", Op::Relu, &[x]).unwrap();
    g.output(y);
    g.output(y);
    let e = g.validate().unwrap_err().to_string();
    assert!(e.contains("output \"y\"") && e.contains("given twice"), "{e}");
}

#[test]
fn try_input_constant_and_output_refuse_a_repeated_name_at_once() {
    let mut g = Graph::new();
    let x = g.try_input("x", DType::F32, [2]).unwrap();
    let e = g.try_input("x", DType::F32, [3]).unwrap_err().to_string();
    assert!(e.contains("input \"x\"") && e.contains("given twice") && e.contains("already has an input"), "{e}");
    let w = runtime::HostTensor::from_vec([2], vec![1f32, 2.0]).unwrap();
    let e = g.try_constant("x", w.clone()).unwrap_err().to_string();
    assert!(e.contains("constant \"x\"") && e.contains("given twice"), "{e}");
    let w = g.try_constant("w", w).unwrap();
    let y = g.op("y", Op::Add, &[x, w]).unwrap();
    g.try_output(y).unwrap();
    let e = g.try_output(y).unwrap_err().to_string();
    assert!(e.contains("output \"y\" is given twice"), "{e}");
    let e = g.try_output(runtime::graph::ValueId(99)).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!((g.inputs.len(), g.outputs.len(), g.values.len()), (1, 1, 3), "refused calls add nothing");
    g.validate().unwrap();
}
