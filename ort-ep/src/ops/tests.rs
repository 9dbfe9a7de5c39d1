use super::*;

fn value(name: &str, elem: i32, dims: &[i64]) -> Option<ValueMeta> {
    Some(ValueMeta {
        name: name.into(),
        elem,
        dims: Some(dims.to_vec()),
        symbols: vec![],
        constant: false,
        data: None,
        handle: std::ptr::null(),
    })
}

fn node(op: &str, since: i32, inputs: Vec<Option<ValueMeta>>, out: &[i64]) -> NodeInfo {
    NodeInfo {
        node: std::ptr::null(),
        name: "n".into(),
        op_type: op.into(),
        domain: String::new(),
        since_version: since,
        inputs,
        outputs: vec![value("y", 1, out)],
        attrs: HashMap::new(),
    }
}

#[test]
fn every_claimed_spelling_is_the_op_name_tables() {
    for (onnx, kind, _) in CLAIMED {
        assert_eq!(names::lookup(onnx), Some(kind), "{onnx}");
    }
}

#[test]
fn claims_f32_static_nodes_that_npurt_validates() {
    let n = node("Add", 14, vec![value("a", 1, &[2, 3]), value("b", 1, &[3])], &[2, 3]);
    assert_eq!(map_node(&n).unwrap().op, Op::Add);
    let n = node("MatMul", 13, vec![value("a", 1, &[2, 3]), value("b", 1, &[3, 4])], &[2, 4]);
    assert!(map_node(&n).is_ok());
    let mut n = node("Relu", 14, vec![value("a", 10, &[3])], &[3]);
    n.outputs = vec![value("y", 10, &[3])];
    assert!(map_node(&n).is_ok(), "f16");
}

#[test]
fn declines_what_npurt_computes_differently_or_not_at_all() {
    let cases = [
        // 1-D MatMul operand whose promoted product ORT declares otherwise.
        node("MatMul", 13, vec![value("a", 1, &[3]), value("b", 1, &[3, 4])], &[1, 4]),
        // Symbolic dim.
        node("Relu", 14, vec![value("a", 1, &[-1, 3])], &[-1, 3]),
        // Not f32 or f16.
        node("Relu", 14, vec![value("a", 11, &[3])], &[3]),
        node("Relu", 14, vec![value("a", 16, &[3])], &[3]),
        // Softmax before opset 13.
        node("Softmax", 11, vec![value("a", 1, &[2, 3])], &[2, 3]),
        // Not in the table, or not claimed.
        node("Conv", 11, vec![value("a", 1, &[1, 1, 3, 3])], &[1, 1, 3, 3]),
        // A Reshape whose shape is not a constant.
        node("Reshape", 14, vec![value("a", 1, &[6]), value("s", 7, &[2])], &[2, 3]),
        // Not the ONNX spelling.
        node("relu", 14, vec![value("a", 1, &[3])], &[3]),
        // Output shape differs from what npurt infers.
        node("Add", 14, vec![value("a", 1, &[2, 3]), value("b", 1, &[3])], &[3, 2]),
        // LayerNormalization without bias.
        node("LayerNormalization", 17, vec![value("x", 1, &[2, 4]), value("s", 1, &[4])], &[2, 4]),
    ];
    for n in cases {
        assert!(map_node(&n).is_err(), "{n:?}");
    }
}

fn sym(name: &str, dims: &[i64], symbols: &[&str]) -> Option<ValueMeta> {
    let mut v = value(name, 1, dims).unwrap();
    v.symbols = symbols.iter().map(|s| s.to_string()).collect();
    Some(v)
}

#[test]
fn named_symbolic_dims_are_claimed_and_bound_per_run() {
    let mut n = node("MatMul", 13, vec![sym("a", &[-1, -1, 3], &["b", "s", ""]), value("w", 1, &[3, 4])], &[]);
    n.outputs = vec![sym("y", &[-1, -1, 4], &["b", "s", ""])];
    assert!(map_node(&n).is_ok());
    // Bound from the tensors ORT feeds, then made static.
    let mut b = Bindings::new();
    let a = n.inputs[0].as_ref().unwrap();
    bind(a, &TensorMeta::new(DType::F32, [2, 5, 3]), &mut b).unwrap();
    let c = concretize(&n, &b).unwrap();
    assert_eq!(c.outputs[0].as_ref().unwrap().dims, Some(vec![2, 5, 4]));
    assert!(map_node(&c).is_ok());
    // A bound symbol must agree, fixed dims must match, dtypes too.
    assert!(bind(a, &TensorMeta::new(DType::F32, [3, 5, 3]), &mut b).is_err());
    assert!(bind(a, &TensorMeta::new(DType::F32, [2, 5, 4]), &mut Bindings::new()).is_err());
    assert!(bind(a, &TensorMeta::new(DType::F16, [2, 5, 3]), &mut Bindings::new()).is_err());
}

#[test]
fn symbolic_dims_npurt_cannot_relate_are_declined() {
    // An output dim no input names (ORT's `unk__0` after a broadcast of two symbols).
    let mut n = node("Add", 14, vec![sym("a", &[-1], &["n"]), sym("b", &[-1], &["m"])], &[]);
    n.outputs = vec![sym("y", &[-1], &["unk__0"])];
    assert!(map_node(&n).is_err());
    // Two symbols that only broadcast if equal or 1.
    n.outputs = vec![sym("y", &[-1], &["n"])];
    assert!(map_node(&n).is_err());
    // A symbol against a fixed dim.
    let mut n = node("Add", 14, vec![sym("a", &[-1], &["n"]), value("b", 1, &[5])], &[]);
    n.outputs = vec![value("y", 1, &[5])];
    assert!(map_node(&n).is_err());
}

#[test]
fn reshape_takes_its_constant_shape_with_onnx_zeros() {
    let shape = |v: &[i64]| {
        Some(ValueMeta { constant: true, data: Some(v.to_vec()), ..value("s", 7, &[v.len() as i64]).unwrap() })
    };
    // ONNX's 0 copies the input's dim (npurt's would be a zero-size dim).
    let n = node("Reshape", 14, vec![value("a", 1, &[2, 3, 4]), shape(&[0, -1])], &[2, 12]);
    let m = map_node(&n).unwrap();
    assert_eq!(m.op, Op::Reshape { shape: vec![2, -1] });
    assert_eq!(m.inputs.len(), 1, "the shape is not an operand");
    let mut z = n.clone();
    z.attrs.insert("allowzero".into(), Attr::Int(1));
    assert!(map_node(&z).is_err());
    let n = node("Reshape", 14, vec![value("a", 1, &[2, 3, 4]), shape(&[4, 0, 2])], &[4, 3, 2]);
    assert_eq!(map_node(&n).unwrap().op, Op::Reshape { shape: vec![4, 3, 2] });
}

#[test]
fn attributes_map_or_decline() {
    let mut n = node("Softmax", 13, vec![value("a", 1, &[2, 3])], &[2, 3]);
    n.attrs.insert("axis".into(), Attr::Int(0));
    assert_eq!(map_node(&n).unwrap().op, Op::Softmax { axis: 0 });
    n.attrs.insert("unknown".into(), Attr::Int(0));
    assert!(map_node(&n).unwrap_err().0.contains("unknown"));
    let mut g = node("Gelu", 20, vec![value("a", 1, &[3])], &[3]);
    g.attrs.insert("approximate".into(), Attr::String("tanh".into()));
    assert_eq!(map_node(&g).unwrap().op, Op::Gelu(GeluApprox::Tanh));
    let mut ln =
        node("LayerNormalization", 17, vec![value("x", 1, &[2, 4]), value("s", 1, &[4]), value("b", 1, &[4])], &[2, 4]);
    assert!(map_node(&ln).is_ok());
    ln.attrs.insert("axis".into(), Attr::Int(0));
    assert!(map_node(&ln).is_err());
    let mut c = node("Cast", 19, vec![value("a", 1, &[3])], &[3]);
    c.outputs = vec![value("y", 7, &[3])];
    c.attrs.insert("to".into(), Attr::Int(7));
    assert_eq!(map_node(&c).unwrap().op, Op::Cast { to: DType::I64 });
    c.attrs.insert("round_mode".into(), Attr::String("up".into()));
    assert_eq!(map_node(&c).unwrap().op, Op::Cast { to: DType::I64 }, "round_mode is float8e8m0's only");
    c.attrs.insert("to".into(), Attr::Int(9));
    assert!(map_node(&c).is_err(), "bool is not npurt's u8");
}

fn konst(name: &str, data: &[i64]) -> Option<ValueMeta> {
    Some(ValueMeta { constant: true, data: Some(data.to_vec()), ..value(name, 7, &[data.len() as i64]).unwrap() })
}

#[test]
fn the_ops_a_transformer_export_needs_are_claimed() {
    for op in ["Neg", "Sigmoid"] {
        assert!(map_node(&node(op, 13, vec![value("a", 1, &[2, 3])], &[2, 3])).is_ok(), "{op}");
    }
    let p = node("Pow", 15, vec![value("a", 1, &[2, 3]), value("b", 1, &[])], &[2, 3]);
    assert_eq!(map_node(&p).unwrap().op, Op::Pow);
    // An integer exponent (ONNX allows it, npurt does not).
    assert!(map_node(&node("Pow", 15, vec![value("a", 1, &[2, 3]), value("b", 7, &[])], &[2, 3])).is_err());
    // Equal's bool output is npurt's u8; i64 operands compare exactly.
    let mut e = node("Equal", 13, vec![value("a", 7, &[2, 3]), value("b", 7, &[3])], &[]);
    e.outputs = vec![value("y", BOOL, &[2, 3])];
    assert_eq!(map_node(&e).unwrap().op, Op::Equal);
    // A Cast to bool is not npurt's Cast to u8 (which truncates 0.5 to 0).
    let mut c = node("Cast", 19, vec![value("a", 1, &[3])], &[]);
    c.outputs = vec![value("y", BOOL, &[3])];
    c.attrs.insert("to".into(), Attr::Int(BOOL as i64));
    assert!(map_node(&c).is_err());
    // Gather of f32 rows by i64 indices (negative ones wrap in npurt as in ONNX), any axis.
    let g = node("Gather", 13, vec![value("w", 1, &[10, 4]), value("i", 7, &[2, 5])], &[2, 5, 4]);
    assert_eq!(map_node(&g).unwrap().op, Op::Gather { axis: 0 });
    let mut g = node("Gather", 13, vec![value("w", 1, &[10, 4]), value("i", 6, &[3])], &[10, 3]);
    g.attrs.insert("axis".into(), Attr::Int(-1));
    assert_eq!(map_node(&g).unwrap().op, Op::Gather { axis: 1 });
    // Integer data is moved whole; float indices are not indices.
    let mut g = node("Gather", 13, vec![value("w", 7, &[10]), value("i", 7, &[3])], &[]);
    g.outputs = vec![value("y", 7, &[3])];
    assert!(map_node(&g).is_ok());
    assert!(map_node(&node("Gather", 13, vec![value("w", 1, &[10, 4]), value("i", 1, &[2])], &[2, 4])).is_err());
    // Gather before opset 11 (negative indices undefined) is not claimed.
    assert!(map_node(&node("Gather", 1, vec![value("w", 1, &[10, 4]), value("i", 7, &[2])], &[2, 4])).is_err());
}

#[test]
fn unsqueeze_squeeze_and_flatten_are_reshapes_of_any_dtype() {
    let mut u = node("Unsqueeze", 13, vec![value("m", 7, &[2, 5]), konst("ax", &[1, -2])], &[]);
    u.outputs = vec![value("y", 7, &[2, 1, 1, 5])];
    let m = map_node(&u).unwrap();
    assert_eq!(m.op, Op::Reshape { shape: vec![2, 1, 1, 5] });
    assert_eq!(m.inputs.len(), 1, "the axes are not an operand");
    let s = node("Squeeze", 13, vec![value("x", 1, &[2, 1, 5]), konst("ax", &[1])], &[2, 5]);
    assert_eq!(map_node(&s).unwrap().op, Op::Reshape { shape: vec![2, 5] });
    let s = node("Squeeze", 13, vec![value("x", 1, &[2, 1, 5]), konst("ax", &[0])], &[1, 5]);
    assert!(map_node(&s).is_err(), "a dim that is not 1");
    let s = node("Squeeze", 13, vec![value("x", 1, &[1, 3, 1])], &[3]);
    assert_eq!(map_node(&s).unwrap().op, Op::Reshape { shape: vec![3] });
    let mut f = node("Flatten", 13, vec![value("x", 1, &[2, 3, 4])], &[6, 4]);
    f.attrs.insert("axis".into(), Attr::Int(-1));
    assert_eq!(map_node(&f).unwrap().op, Op::Reshape { shape: vec![6, 4] });
    // Axes that are not a constant.
    let u = node("Unsqueeze", 13, vec![value("m", 1, &[2]), value("ax", 7, &[1])], &[1, 2]);
    assert!(map_node(&u).is_err());
}

#[test]
fn matmul_with_a_1d_operand_is_promoted_as_onnx_does() {
    let n = node("MatMul", 13, vec![value("a", 1, &[3]), value("b", 1, &[2, 3, 4])], &[2, 4]);
    let m = map_node(&n).unwrap();
    assert_eq!(m.pre, vec![Some(vec![1, 3]), None]);
    assert_eq!(m.post, Some(vec![2, 4]));
    let n = node("MatMul", 13, vec![value("a", 1, &[5, 3]), value("b", 1, &[3])], &[5]);
    assert_eq!(map_node(&n).unwrap().post, Some(vec![5]));
    let n = node("MatMul", 13, vec![value("a", 1, &[3]), value("b", 1, &[3])], &[]);
    assert_eq!(map_node(&n).unwrap().post, Some(vec![]));
    let n = node("MatMul", 13, vec![value("a", 1, &[3]), value("b", 1, &[4])], &[]);
    assert!(map_node(&n).is_err());
}

fn typed(name: &str, elem: i32, dims: &[i64]) -> Option<ValueMeta> {
    value(name, elem, dims)
}

fn with_out(mut n: NodeInfo, outs: Vec<Option<ValueMeta>>) -> NodeInfo {
    n.outputs = outs;
    n
}

#[test]
fn where_takes_a_bool_condition_and_any_one_dtype() {
    let w = node("Where", 16, vec![typed("c", BOOL, &[2, 1]), value("x", 1, &[3]), value("y", 1, &[2, 3])], &[2, 3]);
    assert_eq!(map_node(&w).unwrap().op, Op::Where);
    let w = with_out(
        node("Where", 16, vec![typed("c", BOOL, &[3]), typed("x", 7, &[3]), typed("y", 7, &[])], &[]),
        vec![typed("z", 7, &[3])],
    );
    assert_eq!(map_node(&w).unwrap().inputs.len(), 3, "i64 x and y");
    // A uint8 condition is not ONNX's bool; x and y of two dtypes are npurt's refusal.
    let w = node("Where", 16, vec![typed("c", 2, &[3]), value("x", 1, &[3]), value("y", 1, &[3])], &[3]);
    assert!(map_node(&w).unwrap_err().0.contains("not bool"));
    let w = node("Where", 16, vec![typed("c", BOOL, &[3]), value("x", 1, &[3]), typed("y", 10, &[3])], &[3]);
    assert!(map_node(&w).unwrap_err().0.contains("npurt refuses"));
}

#[test]
fn concat_maps_its_axis_and_npurt_validates_the_operands() {
    let mut c = node("Concat", 13, vec![value("a", 1, &[2, 3]), value("b", 1, &[2, 5])], &[2, 8]);
    c.attrs.insert("axis".into(), Attr::Int(-1));
    assert_eq!(map_node(&c).unwrap().op, Op::Concat { axis: -1 });
    // Other dims differ: npurt's validation refuses it.
    let mut bad = node("Concat", 13, vec![value("a", 1, &[2, 3]), value("b", 1, &[3, 3])], &[5, 3]);
    bad.attrs.insert("axis".into(), Attr::Int(1));
    assert!(map_node(&bad).is_err());
    // No axis.
    assert!(map_node(&node("Concat", 13, vec![value("a", 1, &[2])], &[2])).unwrap_err().0.contains("axis"));
}

#[test]
fn reductions_take_their_axes_from_an_attribute_or_a_constant_input() {
    let x = || value("x", 1, &[2, 3, 4]);
    // ReduceMean-13: axes an attribute, keepdims 1 by default.
    let mut m = node("ReduceMean", 13, vec![x()], &[2, 3, 1]);
    m.attrs.insert("axes".into(), Attr::Ints(vec![-1]));
    assert_eq!(map_node(&m).unwrap().op, Op::ReduceMean { axes: vec![-1], keepdims: true });
    // ReduceMean-18 and ReduceSum-13: axes a constant input, which is not an operand.
    let mut m = node("ReduceMean", 18, vec![x(), konst("a", &[0, 2])], &[3]);
    m.attrs.insert("keepdims".into(), Attr::Int(0));
    let mapped = map_node(&m).unwrap();
    assert_eq!(mapped.op, Op::ReduceMean { axes: vec![0, 2], keepdims: false });
    assert_eq!(mapped.inputs.len(), 1, "the axes are an attribute");
    let s = node("ReduceSum", 13, vec![x(), konst("a", &[1])], &[2, 1, 4]);
    assert_eq!(map_node(&s).unwrap().op, Op::ReduceSum { axes: vec![1], keepdims: true });
    // No axes: every axis, as npurt's empty list.
    let s = node("ReduceSum", 13, vec![x()], &[1, 1, 1]);
    assert_eq!(map_node(&s).unwrap().op, Op::ReduceSum { axes: vec![], keepdims: true });
    // Declined: no axes with noop_with_empty_axes, axes computed at run time, an axes
    // attribute where opset 18 takes an input, an out-of-range axis, a bad keepdims, an
    // integer input, opset 1's semantics, and ORT declaring another output shape.
    let mut s = node("ReduceSum", 13, vec![x()], &[2, 3, 4]);
    s.attrs.insert("noop_with_empty_axes".into(), Attr::Int(1));
    assert!(map_node(&s).unwrap_err().0.contains("noop_with_empty_axes"));
    let s = node("ReduceSum", 13, vec![x(), value("a", 7, &[1])], &[2, 1, 4]);
    assert!(map_node(&s).unwrap_err().0.contains("not a constant"));
    let mut m = node("ReduceMean", 18, vec![x()], &[2, 3, 1]);
    m.attrs.insert("axes".into(), Attr::Ints(vec![-1]));
    assert!(map_node(&m).unwrap_err().0.contains("`axes` is not mapped"));
    let s = node("ReduceSum", 13, vec![x(), konst("a", &[3])], &[2, 3, 4]);
    assert!(map_node(&s).unwrap_err().0.contains("npurt refuses"));
    let mut s = node("ReduceSum", 13, vec![x(), konst("a", &[1])], &[2, 1, 4]);
    s.attrs.insert("keepdims".into(), Attr::Int(2));
    assert!(map_node(&s).unwrap_err().0.contains("keepdims"));
    let s = node("ReduceSum", 13, vec![value("x", 7, &[2, 3]), konst("a", &[1])], &[2, 1]);
    assert!(map_node(&s).is_err(), "an int64 input is declined");
    assert!(map_node(&node("ReduceSum", 1, vec![x()], &[1, 1, 1])).unwrap_err().0.contains("opset 1"));
    let s = node("ReduceSum", 13, vec![x(), konst("a", &[1])], &[2, 4]);
    assert!(map_node(&s).unwrap_err().0.contains("declares"));
}

#[test]
fn slice_and_expand_take_constant_or_folded_index_inputs() {
    let s = node(
        "Slice",
        13,
        vec![
            value("x", 1, &[4, 6]),
            konst("s", &[1, -1]),
            konst("e", &[i64::MAX, -7]),
            konst("a", &[0, 1]),
            konst("p", &[2, -2]),
        ],
        &[2, 3],
    );
    let m = map_node(&s).unwrap();
    assert_eq!(m.op, Op::Slice { starts: vec![1, -1], ends: vec![i64::MAX, -7], axes: vec![0, 1], steps: vec![2, -2] });
    assert_eq!(m.inputs.len(), 1, "the bounds are attributes");
    // Starts computed at run time, a zero step, Slice-1's attributes.
    let s = node("Slice", 13, vec![value("x", 1, &[4]), value("s", 7, &[1]), konst("e", &[3])], &[3]);
    assert!(map_node(&s).unwrap_err().0.contains("not a constant"));
    let s = node(
        "Slice",
        13,
        vec![value("x", 1, &[4]), konst("s", &[0]), konst("e", &[3]), konst("a", &[0]), konst("p", &[0])],
        &[3],
    );
    assert!(map_node(&s).unwrap_err().0.contains("npurt refuses"));
    assert!(map_node(&node("Slice", 1, vec![value("x", 1, &[4])], &[4])).is_err());
    let e = node("Expand", 13, vec![value("x", 1, &[3, 1]), konst("s", &[2, 1, 4])], &[2, 3, 4]);
    assert_eq!(map_node(&e).unwrap().op, Op::Expand { shape: vec![2, 1, 4] });
    let e = node("Expand", 13, vec![value("x", 1, &[3]), konst("s", &[-1])], &[3]);
    assert!(map_node(&e).unwrap_err().0.contains("shape entry -1"));
    let e = node("Expand", 13, vec![value("x", 1, &[3]), konst("s", &[2])], &[3]);
    assert!(map_node(&e).is_err(), "3 and 2 do not broadcast");
}

#[test]
fn split_is_one_slice_per_output() {
    let slice =
        |s: i64, e: i64, axis: isize| Op::Slice { starts: vec![s], ends: vec![e], axes: vec![axis], steps: vec![] };
    // Sizes from the input (opset 13).
    let n = with_out(
        node("Split", 13, vec![value("x", 1, &[2, 5]), konst("sp", &[2, 3])], &[]),
        vec![value("y0", 1, &[2, 2]), value("y1", 1, &[2, 3])],
    );
    let mut n = n;
    n.attrs.insert("axis".into(), Attr::Int(-1));
    let m = map_node(&n).unwrap();
    assert_eq!((m.op, m.rest), (slice(0, 2, 1), vec![slice(2, 5, 1)]));
    // The attribute (opset 11), equal parts, num_outputs' uneven last chunk (opset 18).
    let mut a =
        with_out(node("Split", 11, vec![value("x", 1, &[6])], &[]), vec![value("y0", 1, &[1]), value("y1", 1, &[5])]);
    a.attrs.insert("split".into(), Attr::Ints(vec![1, 5]));
    assert_eq!(map_node(&a).unwrap().rest, vec![slice(1, 6, 0)]);
    let eq =
        with_out(node("Split", 13, vec![value("x", 1, &[6])], &[]), vec![value("y0", 1, &[3]), value("y1", 1, &[3])]);
    assert_eq!(map_node(&eq).unwrap().op, slice(0, 3, 0));
    let outs = vec![value("y0", 7, &[3]), value("y1", 7, &[3]), value("y2", 7, &[1])];
    let mut u = with_out(node("Split", 18, vec![typed("x", 7, &[7])], &[]), outs);
    u.attrs.insert("num_outputs".into(), Attr::Int(3));
    assert_eq!(map_node(&u).unwrap().rest, vec![slice(3, 6, 0), slice(6, 7, 0)]);
    // Not evenly divisible without sizes; sizes that do not add up; sizes computed at run time.
    let odd =
        with_out(node("Split", 13, vec![value("x", 1, &[5])], &[]), vec![value("y0", 1, &[2]), value("y1", 1, &[3])]);
    assert!(map_node(&odd).unwrap_err().0.contains("equal parts"));
    let bad = with_out(
        node("Split", 13, vec![value("x", 1, &[5]), konst("sp", &[2, 2])], &[]),
        vec![value("y0", 1, &[2]), value("y1", 1, &[2])],
    );
    assert!(map_node(&bad).unwrap_err().0.contains("split sizes"));
    let run = with_out(
        node("Split", 13, vec![value("x", 1, &[5]), value("sp", 7, &[2])], &[]),
        vec![value("y0", 1, &[2]), value("y1", 1, &[3])],
    );
    assert!(map_node(&run).unwrap_err().0.contains("not a constant"));
}

#[test]
fn integer_arithmetic_is_claimed_and_integer_pow_is_not() {
    for (elem, op) in [(6, "Add"), (7, "Sub"), (2, "Mul"), (7, "Div"), (6, "Div")] {
        let n = with_out(
            node(op, 14, vec![typed("a", elem, &[2, 3]), typed("b", elem, &[3])], &[]),
            vec![typed("y", elem, &[2, 3])],
        );
        assert!(map_node(&n).is_ok(), "{op} of element type {elem}");
    }
    let p = with_out(node("Pow", 15, vec![typed("a", 7, &[3]), typed("b", 7, &[3])], &[]), vec![typed("y", 7, &[3])]);
    assert!(map_node(&p).is_err());
    // Operands of two dtypes are npurt's refusal (ONNX requires one).
    let n = with_out(node("Add", 14, vec![typed("a", 6, &[3]), typed("b", 7, &[3])], &[]), vec![typed("y", 7, &[3])]);
    assert!(map_node(&n).is_err());
}

#[test]
fn layer_norm_stash_type_0_or_1() {
    let ln = |elem: i32, stash: i64| {
        let mut n = with_out(
            node(
                "LayerNormalization",
                17,
                vec![typed("x", elem, &[2, 4]), typed("s", elem, &[4]), typed("b", elem, &[4])],
                &[],
            ),
            vec![typed("y", elem, &[2, 4])],
        );
        n.attrs.insert("stash_type".into(), Attr::Int(stash));
        map_node(&n)
    };
    assert!(ln(1, 0).is_ok() && ln(10, 0).is_ok());
    assert!(ln(1, 1).is_ok() && ln(10, 1).is_ok());
    assert!(ln(1, 10).unwrap_err().0.contains("stash_type 10"));
}

#[test]
fn a_float_constant_of_shape_is_an_expand_of_its_value() {
    let tensor = |elem: i32, bytes: Vec<u8>| Attr::Tensor { elem, bytes: Some(bytes) };
    let mut n = node("ConstantOfShape", 20, vec![konst("s", &[2, 3])], &[2, 3]);
    n.attrs.insert("value".into(), tensor(1, 2.5f32.to_le_bytes().to_vec()));
    let m = map_node(&n).unwrap();
    assert_eq!(m.op, Op::Expand { shape: vec![2, 3] });
    let fill = m.fill.as_ref().unwrap();
    assert_eq!((fill.dtype, fill.shape.rank(), fill.bytes.as_ref()), (DType::F32, 0, &2.5f32.to_le_bytes()[..]));
    assert!(m.operand_names(&n).is_empty(), "the shape is not an operand");
    // No value: an f32 0.
    let z = node("ConstantOfShape", 20, vec![konst("s", &[4])], &[4]);
    assert_eq!(map_node(&z).unwrap().fill.unwrap().bytes.as_ref(), &[0u8; 4][..]);
    // A bf16 value, a value of two elements, a shape computed at run time, a negative dim.
    let mut b = n.clone();
    b.attrs.insert("value".into(), tensor(16, vec![0, 0]));
    assert!(map_node(&b).is_err());
    b.attrs.insert("value".into(), tensor(1, vec![0; 8]));
    assert!(map_node(&b).is_err());
    let mut r = node("ConstantOfShape", 20, vec![value("s", 7, &[2])], &[2, 3]);
    r.attrs = n.attrs.clone();
    assert!(map_node(&r).unwrap_err().0.contains("not a constant"));
    let mut neg = node("ConstantOfShape", 20, vec![konst("s", &[-1])], &[2]);
    neg.attrs = n.attrs.clone();
    assert!(map_node(&neg).is_err());
}

#[test]
fn tensor_bytes_read_as_integers_by_element_type() {
    use crate::graph::ints_of;
    assert_eq!(ints_of(7, &(-3i64).to_le_bytes()), Some(vec![-3]));
    assert_eq!(ints_of(6, &[1, 0, 0, 0, 255, 255, 255, 255]), Some(vec![1, -1]));
    assert_eq!(ints_of(9, &[1, 0]), Some(vec![1, 0]));
    assert_eq!(ints_of(1, &[0; 4]), None, "float");
    assert_eq!(ints_of(7, &[0; 5]), None, "not whole elements");
}

#[test]
fn rms_normalization_is_claimed_on_the_last_axis_with_f32_statistics() {
    let mut n = node("RMSNormalization", 23, vec![value("x", 1, &[2, 3, 8]), value("s", 1, &[8])], &[2, 3, 8]);
    assert_eq!(map_node(&n).unwrap().op, Op::RmsNorm { eps: 1e-5 });
    n.attrs.insert("epsilon".into(), Attr::Float(1e-6));
    n.attrs.insert("axis".into(), Attr::Int(2));
    assert_eq!(map_node(&n).unwrap().op, Op::RmsNorm { eps: 1e-6 });
    // Another axis, statistics in the input's dtype, a scale npurt does not take, an f16 input
    // with its own f16 scale (claimed), an older opset or an unknown attribute: declined
    // where npurt differs.
    n.attrs.insert("axis".into(), Attr::Int(1));
    assert!(map_node(&n).is_err());
    n.attrs.insert("axis".into(), Attr::Int(-1));
    n.attrs.insert("stash_type".into(), Attr::Int(0));
    assert!(map_node(&n).is_err());
    n.attrs.remove("stash_type");
    let scale_of_one = node("RMSNormalization", 23, vec![value("x", 1, &[2, 8]), value("s", 1, &[1])], &[2, 8]);
    assert!(map_node(&scale_of_one).is_err());
    let mut half = node("RMSNormalization", 23, vec![value("x", 10, &[2, 8]), value("s", 10, &[8])], &[2, 8]);
    half.outputs = vec![value("y", 10, &[2, 8])];
    assert!(map_node(&half).is_ok());
    let mut old = n.clone();
    old.since_version = 22;
    assert!(map_node(&old).is_err());
    n.attrs.insert("beta".into(), Attr::Float(0.0));
    assert!(map_node(&n).is_err());
}

#[test]
fn rotary_embedding_23_with_position_ids_is_npurts_rope() {
    let x = || value("x", 1, &[2, 3, 5, 8]);
    let rope = |ins: Vec<Option<ValueMeta>>| node("RotaryEmbedding", 23, ins, &[2, 3, 5, 8]);
    let full = vec![x(), value("c", 1, &[16, 4]), value("s", 1, &[16, 4]), value("p", 7, &[2, 5])];
    let mut n = rope(full.clone());
    assert_eq!(map_node(&n).unwrap().op, Op::Rope { interleaved: false, layout: runtime::AttentionLayout::Bnsd });
    n.attrs.insert("interleaved".into(), Attr::Int(1));
    assert_eq!(map_node(&n).unwrap().op, Op::Rope { interleaved: true, layout: runtime::AttentionLayout::Bnsd });
    // Declined: no position_ids (per-token caches), a partial rotation, a 3-D X, float
    // positions, an older opset.
    let no_pos = rope(vec![x(), value("c", 1, &[2, 5, 4]), value("s", 1, &[2, 5, 4])]);
    assert!(map_node(&no_pos).unwrap_err().0.contains("position_ids"));
    let mut part = rope(full.clone());
    part.attrs.insert("rotary_embedding_dim".into(), Attr::Int(4));
    assert!(map_node(&part).unwrap_err().0.contains("rotates part"));
    let mut flat = rope(vec![value("x", 1, &[2, 5, 24]), full[1].clone(), full[2].clone(), full[3].clone()]);
    flat.outputs = vec![value("y", 1, &[2, 5, 24])];
    flat.attrs.insert("num_heads".into(), Attr::Int(3));
    assert!(map_node(&flat).unwrap_err().0.contains("not 4-D"));
    let float_pos = rope(vec![x(), full[1].clone(), full[2].clone(), value("p", 1, &[2, 5])]);
    assert!(map_node(&float_pos).is_err());
    let old = node("RotaryEmbedding", 22, full, &[2, 3, 5, 8]);
    assert!(map_node(&old).is_err());
}

#[test]
fn attention_23_is_claimed_where_its_causal_alignment_is_npurts() {
    let att = |q: &[i64], k: &[i64], out: &[i64]| {
        node("Attention", 23, vec![value("q", 1, q), value("k", 1, k), value("v", 1, k)], out)
    };
    // Grouped-query 4:1, no causal, with a scale.
    let mut n = att(&[1, 8, 5, 4], &[1, 2, 7, 4], &[1, 8, 5, 4]);
    n.attrs.insert("scale".into(), Attr::Float(0.5));
    let bnsd = runtime::AttentionLayout::Bnsd;
    assert_eq!(map_node(&n).unwrap().op, Op::Attention { scale: Some(0.5), layout: bnsd, causal: false });
    // Causal with as many queries as keys: ONNX's top-left mask is npurt's bottom-right one.
    let mut c = att(&[1, 4, 6, 4], &[1, 2, 6, 4], &[1, 4, 6, 4]);
    c.attrs.insert("is_causal".into(), Attr::Int(1));
    assert_eq!(map_node(&c).unwrap().op, Op::Attention { scale: None, layout: bnsd, causal: true });
    // Causal over more keys than queries: the alignments differ.
    let mut t = att(&[1, 4, 2, 4], &[1, 2, 6, 4], &[1, 4, 2, 4]);
    t.attrs.insert("is_causal".into(), Attr::Int(1));
    assert!(map_node(&t).unwrap_err().0.contains("top-left"));
    // A mask, a softcap, a present_key output, mismatched kv_num_heads: declined.
    let mut m = att(&[1, 4, 6, 4], &[1, 2, 6, 4], &[1, 4, 6, 4]);
    m.inputs.push(value("mask", 9, &[6, 6]));
    assert!(map_node(&m).unwrap_err().0.contains("attn_mask"));
    let mut s = att(&[1, 4, 6, 4], &[1, 2, 6, 4], &[1, 4, 6, 4]);
    s.attrs.insert("softcap".into(), Attr::Float(30.0));
    assert!(map_node(&s).unwrap_err().0.contains("softcap"));
    let p = with_out(
        att(&[1, 4, 6, 4], &[1, 2, 6, 4], &[1, 4, 6, 4]),
        vec![value("y", 1, &[1, 4, 6, 4]), value("pk", 1, &[1, 2, 6, 4])],
    );
    assert!(map_node(&p).unwrap_err().0.contains("present_key"));
    let mut h = att(&[1, 4, 6, 4], &[1, 2, 6, 4], &[1, 4, 6, 4]);
    h.attrs.insert("kv_num_heads".into(), Attr::Int(4));
    assert!(map_node(&h).unwrap_err().0.contains("kv_num_heads"));
}
