//! Building a fused group's graph, and compiling a group with symbolic dims per shape.

use super::*;
use crate::graph::ValueMeta;

fn value(name: &str, dims: &[i64], constant: bool) -> Option<ValueMeta> {
    Some(ValueMeta {
        name: name.into(),
        elem: 1,
        dims: Some(dims.to_vec()),
        symbols: vec![],
        constant,
        data: None,
        handle: ptr::null(),
    })
}

fn node(op: &str, inputs: Vec<Option<ValueMeta>>, out: Option<ValueMeta>) -> NodeInfo {
    NodeInfo {
        node: ptr::null(),
        name: String::new(),
        op_type: op.into(),
        domain: String::new(),
        since_version: 17,
        inputs,
        outputs: vec![out],
        attrs: Default::default(),
    }
}

fn fused(inputs: Vec<Option<ValueMeta>>, outputs: Vec<Option<ValueMeta>>) -> NodeInfo {
    NodeInfo { name: "NpurtExecutionProvider_0".into(), ..node("Fused", inputs, None) }.with_outputs(outputs)
}

impl NodeInfo {
    fn with_outputs(mut self, outputs: Vec<Option<ValueMeta>>) -> NodeInfo {
        self.outputs = outputs;
        self
    }
}

fn metas(f: &NodeInfo) -> Vec<TensorMeta> {
    f.inputs.iter().flatten().map(|v| static_meta(v).unwrap()).collect()
}

fn weights(v: &ValueMeta) -> Result<HostTensor, EpError> {
    let n: i64 = v.dims.as_ref().unwrap().iter().product();
    Ok(HostTensor::from_vec(vec![n as usize], vec![1f32; n as usize]).unwrap())
}

#[test]
fn a_group_becomes_one_graph_with_its_weights_as_constants() {
    let nodes = [
        node("Relu", vec![value("x", &[4], false)], value("r", &[4], false)),
        node("Add", vec![value("r", &[4], false), value("w", &[4], true)], value("z", &[4], false)),
    ];
    let f = fused(vec![value("x", &[4], false)], vec![value("z", &[4], false)]);
    let b = build_graph(&f, &nodes, &metas(&f), ops::Bindings::new(), &mut weights).unwrap();
    assert_eq!(b.graph.nodes.len(), 2);
    assert_eq!(b.graph.inputs.len(), 1);
    assert!(matches!(b.outputs[..], [Out::Graph(0)]));
    assert!(b.graph.values.iter().any(|v| v.name == "w" && matches!(v.kind, runtime::graph::ValueKind::Constant(_))));
}

#[test]
fn a_refused_node_is_named_with_its_op_and_operands() {
    // ORT declares `r` as [2, 3] where it is used, but the Relu made it [4]: npurt's
    // builder refuses the Add, and the error says where.
    let nodes = [
        node("Relu", vec![value("x", &[4], false)], value("r", &[4], false)),
        node("Add", vec![value("r", &[2, 3], false), value("y", &[2, 3], false)], value("z", &[2, 3], false)),
    ];
    let f = fused(vec![value("x", &[4], false), value("y", &[2, 3], false)], vec![value("z", &[2, 3], false)]);
    let e = build_graph(&f, &nodes, &metas(&f), ops::Bindings::new(), &mut weights).unwrap_err().to_string();
    for part in ["NpurtExecutionProvider_0", "\"z\" (Add)", "\"r\" f32 [4]", "\"y\" f32 [2, 3]", "Add:"] {
        assert!(e.contains(part), "{part} not in {e}");
    }
    // An operand that nothing makes, and an op that is not npurt's.
    let nodes = [node("Relu", vec![value("q", &[4], false)], value("r", &[4], false))];
    let f = fused(vec![], vec![value("r", &[4], false)]);
    let e = build_graph(&f, &nodes, &metas(&f), ops::Bindings::new(), &mut weights).unwrap_err().to_string();
    assert!(e.contains("\"r\" (Relu)") && e.contains("\"q\" comes from nowhere"), "{e}");
    let nodes = [node("Conv", vec![value("x", &[4], false)], value("c", &[4], false))];
    let f = fused(vec![value("x", &[4], false)], vec![value("c", &[4], false)]);
    let e = build_graph(&f, &nodes, &metas(&f), ops::Bindings::new(), &mut weights).unwrap_err().to_string();
    assert!(e.contains("\"c\" (Conv) is not npurt's"), "{e}");
}

#[test]
fn a_folded_value_is_a_host_output_and_a_constant_of_the_graph() {
    // s = Shape(x); y = Reshape(x, Concat(s[0..1], [-1])); both s and y leave the group.
    let int = |name: &str, n: i64| Some(ValueMeta { elem: 7, ..value(name, &[n], false).unwrap() });
    let k = Some(ValueMeta { data: Some(vec![-1]), constant: true, ..int("k", 1).unwrap() });
    let mut shape = node("Shape", vec![value("x", &[2, 3, 4], false)], int("s", 3));
    shape.since_version = 15;
    shape.attrs.insert("end".into(), crate::graph::Attr::Int(1));
    let mut cat = node("Concat", vec![int("s", 1), k], int("t", 2));
    cat.attrs.insert("axis".into(), crate::graph::Attr::Int(0));
    shape.outputs = vec![int("s", 1)];
    let reshape = node("Reshape", vec![value("x", &[2, 3, 4], false), int("t", 2)], value("y", &[2, 12], false));
    let f = fused(vec![value("x", &[2, 3, 4], false)], vec![int("s", 1), value("y", &[2, 12], false)]);
    let b = build_graph(&f, &[shape, cat, reshape], &metas(&f), ops::Bindings::new(), &mut weights).unwrap();
    assert_eq!(b.graph.nodes.len(), 1, "only the Reshape is npurt's");
    match &b.outputs[..] {
        [Out::Host(h), Out::Graph(0)] => assert_eq!(h.data, vec![2]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_split_is_one_slice_node_per_output() {
    let k = Some(ValueMeta { elem: 7, data: Some(vec![1, 3]), constant: true, ..value("sp", &[2], true).unwrap() });
    let mut split = node("Split", vec![value("x", &[2, 4], false), k], None);
    split.outputs = vec![value("y0", &[2, 1], false), value("y1", &[2, 3], false)];
    split.attrs.insert("axis".into(), crate::graph::Attr::Int(1));
    let f = fused(vec![value("x", &[2, 4], false)], vec![value("y0", &[2, 1], false), value("y1", &[2, 3], false)]);
    let b = build_graph(&f, &[split], &metas(&f), ops::Bindings::new(), &mut weights).unwrap();
    assert_eq!(b.graph.nodes.len(), 2);
    assert!(b.graph.nodes.iter().all(|n| matches!(n.op, Op::Slice { .. })));
    assert!(matches!(b.outputs[..], [Out::Graph(0), Out::Graph(1)]));
}

#[test]
fn a_constant_of_shape_is_its_value_expanded() {
    // y = ConstantOfShape(Shape(x), 1.5): x is only a Shape's input, so it is not fed.
    let s = Some(ValueMeta { elem: 7, ..value("s", &[2], false).unwrap() });
    let mut shape = node("Shape", vec![value("x", &[2, 3], false)], s.clone());
    shape.since_version = 15;
    let mut c = node("ConstantOfShape", vec![s], value("y", &[2, 3], false));
    let v = crate::graph::Attr::Tensor { elem: 1, bytes: Some(1.5f32.to_le_bytes().to_vec()) };
    c.attrs.insert("value".into(), v);
    let f = fused(vec![value("x", &[2, 3], false)], vec![value("y", &[2, 3], false)]);
    let b = build_graph(&f, &[shape, c], &metas(&f), ops::Bindings::new(), &mut weights).unwrap();
    assert!(matches!(b.graph.nodes[..], [ref n] if n.op == Op::Expand { shape: vec![2, 3] }));
    assert!(b.inputs.is_empty());
}

fn cpu() -> npurt::Runtime {
    let config = runtime::RuntimeConfig { backend: Some("cpu".into()), ..Default::default() };
    npurt::Runtime::with_config(config).unwrap()
}

/// Runs `g` on `x` ([rows, k] f32), returns its one output's elements.
fn run(rt: &npurt::Runtime, g: &Compiled, rows: usize, x: &[f32]) -> Vec<f32> {
    let t = rt.empty(DType::F32, Shape::from(vec![rows, x.len() / rows]), 0).unwrap();
    t.copy_from_bytes(bytemuck::cast_slice(x)).unwrap();
    let outs = g.graph.as_ref().unwrap().run(&[&t]).unwrap();
    outs[0].to_ndarray::<f32>().unwrap().iter().copied().collect()
}

#[test]
fn a_symbolic_group_compiles_each_shape_from_npurt_s_one_copy_of_its_weights() {
    // y = x @ w + b, x [s, 64] with `s` symbolic.
    let (k, n) = (64usize, 48usize);
    let sym = |name: &str, cols: usize| {
        let v = value(name, &[-1, cols as i64], false).unwrap();
        Some(ValueMeta { symbols: vec!["s".into(), String::new()], ..v })
    };
    let nodes = [
        node("MatMul", vec![sym("x", k), value("w", &[k as i64, n as i64], true)], sym("m", n)),
        node("Add", vec![sym("m", n), value("b", &[n as i64], true)], sym("y", n)),
    ];
    let f = fused(vec![sym("x", k)], vec![sym("y", n)]);
    let w: Vec<f32> = (0..k * n).map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| i as f32 / 8.0).collect();
    let mut stash = Stash::new();
    stash.put("w", DType::F32, Shape::from(vec![k, n]), bytemuck::cast_slice(&w)).unwrap();
    stash.put("b", DType::F32, Shape::from(vec![n]), bytemuck::cast_slice(&b)).unwrap();
    let rt = cpu();
    let shapes = Shapes::new(&f, &nodes, stash, CompileOptions::from_config(rt.config(), 0));
    let want = |rows: usize, x: &[f32]| -> Vec<f32> {
        (0..rows * n).map(|i| b[i % n] + (0..k).map(|j| x[i / n * k + j] * w[j * n + i % n]).sum::<f32>()).collect()
    };
    let mut compiled = Vec::new();
    for rows in [3usize, 5] {
        let g = shapes.graph_for(&rt, &[TensorMeta::new(DType::F32, Shape::from(vec![rows, k]))]).unwrap();
        // No host copy of a weight outlives the compile: the graph held the only mapping of
        // each and let it go once npurt had its own copy.
        assert_eq!(shapes.weights.mapped_bytes(), 0, "{rows} rows");
        let x: Vec<f32> = (0..rows * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let got = run(&rt, &g, rows, &x);
        for (i, (a, e)) in got.iter().zip(want(rows, &x)).enumerate() {
            assert!((a - e).abs() <= 1e-4 * (1.0 + e.abs()), "{rows} rows, element {i}: {a} vs {e}");
        }
        compiled.push(g);
    }
    // The first compile uploaded every weight npurt's graph holds; the second uploaded none:
    // each of its constants came from the store, which holds one device copy per weight.
    let held = shapes.shared.len();
    assert!(held >= 2, "{:?}", shapes.shared);
    assert_eq!(shapes.shared.served(), held, "{:?}", shapes.shared);
    assert!(shapes.shared.device_bytes() >= (k * n + n) * 4);
    // A shape seen before is the graph compiled then.
    let again = shapes.graph_for(&rt, &[TensorMeta::new(DType::F32, Shape::from(vec![3, k]))]).unwrap();
    assert!(Arc::ptr_eq(&again, &compiled[0]));
    assert_eq!(shapes.shared.served(), held);
    assert_eq!((shapes.weights.len(), shapes.weights.mapped_bytes()), (2, 0));
}
