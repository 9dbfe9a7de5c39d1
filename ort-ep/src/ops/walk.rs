//! Walking a graph (ORT's whole graph at `GetCapability`, a fused group at `Compile`) in
//! topological order with every value's concrete dims.
//!
//! Each node either folds on the host ([`super::fold`]: a shape subgraph) or maps to an npurt
//! op ([`super::map_concrete`]); its outputs then take the dims it makes, checked against
//! what ORT declares where ORT knows them (a fixed dim equal, a named dim bound once). So a
//! value ORT could not infer (a `Slice` whose end comes from `Shape`, an `unk__0`) gets its
//! dims from the walk. Symbolic dims of the values coming from outside are bound from the
//! tensors ORT feeds at `Compile`, or to probe values at `GetCapability`, where the walk runs
//! twice with different probes, each name a different value, so that a node valid only when
//! two names are equal stays on ORT.

use std::collections::HashMap;

use runtime::TensorMeta;

use super::fold::{self, HostValue, INTS};
use super::{Bindings, Decline, Mapped, decline, map_concrete, operand_dtype};
use crate::graph::{NodeInfo, ValueMeta};

/// What a node becomes. Not `Send`: the node holds ORT's handles (valid during one call).
#[derive(Debug, Clone)]
pub enum Step {
    /// Computed on the host (its output is in [`Env::host`]).
    Folded,
    /// One npurt op: the node with its inputs' concrete dims (and folded data), and the op.
    Mapped(Box<NodeInfo>, Box<Mapped>),
}

/// The values known so far. Not `Send`: its metas hold ORT's handles.
#[derive(Debug, Default)]
pub struct Env {
    /// Concrete metas by value name (every dim fixed where known; `data` set for host values).
    pub metas: HashMap<String, ValueMeta>,
    /// Values known on the host: folded ones, int constant initializers, fed value inputs.
    pub host: HashMap<String, HostValue>,
    pub bindings: Bindings,
    /// Probing: an unbound symbol gets the next probe value; `None` leaves it unknown.
    probe: Option<usize>,
}

impl Env {
    /// An environment that binds every new symbol to a distinct value from `base` on.
    pub fn probing(base: usize) -> Env {
        Env { probe: Some(base), ..Env::default() }
    }

    /// An environment with the given bindings and known values, binding nothing new.
    pub fn bound(bindings: Bindings) -> Env {
        Env { bindings, ..Env::default() }
    }

    /// Records a value known on the host with its meta.
    pub fn set_host(&mut self, name: &str, elem: i32, v: HostValue) {
        let dims = v.dims.iter().map(|&d| d as i64).collect();
        let meta = ValueMeta {
            name: name.into(),
            elem,
            dims: Some(dims),
            symbols: Vec::new(),
            constant: false,
            data: Some(v.data.clone()),
            handle: std::ptr::null(),
        };
        self.metas.insert(name.into(), meta);
        self.host.insert(name.into(), v);
    }

    /// `v`'s dims with its symbols bound (probing binds new ones; else they stay -1).
    fn concretize(&mut self, v: &ValueMeta) -> ValueMeta {
        let mut out = ValueMeta { symbols: Vec::new(), ..v.clone() };
        if let Some(dims) = &mut out.dims {
            for (i, d) in dims.iter_mut().enumerate().filter(|(_, d)| **d < 0) {
                let Some(sym) = v.symbol(i) else { continue };
                let n = self.bindings.len();
                let val = match (self.bindings.get(sym), self.probe) {
                    (Some(&b), _) => b,
                    (None, Some(base)) => {
                        self.bindings.insert(sym.to_string(), base + 2 * n);
                        base + 2 * n
                    }
                    (None, None) => continue,
                };
                *d = val as i64;
            }
        }
        out
    }

    /// The concrete meta of an operand read by a node.
    fn resolve(&mut self, v: &ValueMeta) -> ValueMeta {
        if let Some(m) = self.metas.get(&v.name) {
            return m.clone();
        }
        let out = self.concretize(v);
        if let (true, Some(data), true) = (v.constant, &v.data, out.is_static() && INTS.contains(&v.elem)) {
            let dims = out.dims.as_deref().unwrap_or(&[]).iter().map(|&d| d as usize).collect();
            self.set_host(&v.name, v.elem, HostValue { elem: v.elem, dims, data: data.clone() });
            return self.metas[&v.name].clone();
        }
        self.metas.insert(v.name.clone(), out.clone());
        out
    }

    /// Checks that a node's output made with `dims` and `dtype` is what ORT declares (fixed dims
    /// equal, named ones bound consistently), and records it.
    fn output(&mut self, declared: &ValueMeta, made: &TensorMeta) -> Result<(), Decline> {
        let wrong = || {
            Decline(format!(
                "ORT declares {:?} as {} {:?}, npurt makes {made}",
                declared.name, declared.elem, declared.dims
            ))
        };
        if declared.elem != 0 && operand_dtype(declared.elem) != Some(made.dtype) {
            return Err(wrong());
        }
        let got = made.shape.dims();
        if let Some(dims) = &declared.dims {
            if dims.len() != got.len() {
                return Err(wrong());
            }
            for (i, (&d, &g)) in dims.iter().zip(got).enumerate() {
                if d >= 0 && d as usize != g {
                    return Err(wrong());
                }
                if let Some(sym) = declared.symbol(i) {
                    match self.bindings.get(sym) {
                        Some(&b) if b != g => return Err(wrong()),
                        Some(_) => {}
                        None => {
                            self.bindings.insert(sym.to_string(), g);
                        }
                    }
                }
            }
        }
        let meta = ValueMeta {
            dims: Some(got.iter().map(|&d| d as i64).collect()),
            symbols: Vec::new(),
            constant: false,
            data: None,
            handle: std::ptr::null(),
            ..declared.clone()
        };
        self.metas.insert(declared.name.clone(), meta);
        Ok(())
    }
}

/// The host's element type as an npurt meta (for checking a folded output).
fn host_meta(v: &HostValue) -> Result<TensorMeta, Decline> {
    let dtype = operand_dtype(v.elem).ok_or_else(|| Decline(format!("element type {}", v.elem)))?;
    Ok(TensorMeta::new(dtype, v.dims.clone()))
}

/// One node: folded when its op folds and its inputs are known on the host, else mapped.
/// `const_only`: every input is a constant initializer (then a node that does not fold stays
/// on ORT, which folds such constants itself, rather than making a fused node of constants).
fn step(
    node: &NodeInfo,
    env: &mut Env,
    accept: &dyn Fn(&Mapped) -> Result<(), Decline>,
    const_only: bool,
) -> Result<Step, Decline> {
    if node.is_onnx() && fold::FOLDED.contains(&node.op_type.as_str()) {
        let hosts: Vec<Option<&HostValue>> =
            node.inputs.iter().map(|v| v.as_ref().and_then(|v| env.host.get(&v.name))).collect();
        let first = node.inputs.first().and_then(Option::as_ref).filter(|v| v.is_static());
        let dims: Option<Vec<usize>> =
            first.and_then(|v| v.dims.as_ref()).map(|d| d.iter().map(|&x| x as usize).collect());
        let ready = if node.op_type == "Shape" {
            // The input is fed to the fused node, whose dtype must then be npurt's.
            let known = first.is_some_and(|v| operand_dtype(v.elem).is_some());
            if !known {
                return decline("a Shape of a value whose dtype npurt has not");
            }
            dims.is_some()
        } else {
            node.inputs.iter().zip(&hosts).all(|(v, h)| v.is_none() || h.is_some())
        };
        if ready {
            match fold::eval(node, &hosts, dims.as_deref()) {
                Ok(v) => {
                    let Some(Some(out)) = node.outputs.first() else { return decline("no output") };
                    env.output(out, &host_meta(&v)?)?;
                    env.set_host(&out.name, v.elem, v);
                    return Ok(Step::Folded);
                }
                // Not folded (a float ConstantOfShape or Cast, an integer division by 0): mapped
                // where it maps, its known inputs then constants of the npurt graph.
                Err(d) if const_only => return Err(Decline(format!("{} (of constants only)", d.0))),
                Err(d) => {
                    let (m, inferred) =
                        map_concrete(node).map_err(|e| Decline(format!("not folded: {}; not mapped: {}", d.0, e.0)))?;
                    return mapped(node, env, accept, m, inferred);
                }
            }
        }
    }
    let (m, inferred) = map_concrete(node)?;
    mapped(node, env, accept, m, inferred)
}

/// A node mapped to `m` (its outputs' metas `inferred`), once `accept` agrees.
fn mapped(
    node: &NodeInfo,
    env: &mut Env,
    accept: &dyn Fn(&Mapped) -> Result<(), Decline>,
    m: Mapped,
    inferred: Vec<TensorMeta>,
) -> Result<Step, Decline> {
    accept(&m)?;
    for (declared, made) in node.outputs.iter().flatten().zip(&inferred) {
        env.output(declared, made)?;
    }
    Ok(Step::Mapped(Box::new(node.clone()), Box::new(m)))
}

/// Walks `nodes` in `order`: per node, what it becomes or why it cannot be npurt's. The
/// outputs of a node that is not get ORT's declared dims (bound where the env can).
pub fn walk(
    nodes: &[NodeInfo],
    order: &[usize],
    env: &mut Env,
    accept: &dyn Fn(&Mapped) -> Result<(), Decline>,
) -> Vec<Result<Step, Decline>> {
    let mut out: Vec<Result<Step, Decline>> = (0..nodes.len()).map(|_| decline("not walked")).collect();
    for &i in order {
        let node = &nodes[i];
        let inputs = node.inputs.iter().map(|v| v.as_ref().map(|v| env.resolve(v))).collect();
        let concrete = NodeInfo { inputs, ..node.clone() };
        let const_only = node.inputs.iter().flatten().all(|v| v.constant);
        let r = step(&concrete, env, accept, const_only);
        if r.is_err() {
            for v in node.outputs.iter().flatten() {
                if !env.metas.contains_key(&v.name) {
                    let c = env.concretize(v);
                    env.metas.insert(v.name.clone(), c);
                }
            }
        }
        out[i] = r;
    }
    out
}

/// The first probe value of each walk; the k-th new symbol gets `base + 2k`. Small, so that
/// a sequence probe stays within an export's position table (a `Slice` of it clamps), and the
/// two walks give every name an odd value once and an even value once, so that no name is
/// equal to the same fixed dim in both (nor two names equal to each other in either).
pub const PROBES: [usize; 2] = [5, 6];

/// Per node, taken or why not.
pub type Verdicts = Vec<Result<(), Decline>>;

/// Which nodes of a graph npurt takes (folds or maps, `accept` agreeing) and their groups
/// ([`crate::partition::groups`]): a node is taken when it is under both probes and is not
/// forced out. A node that reads a value folded in another group is forced out (so that a
/// group's folded values come from its own nodes, its constants and its inputs' dims only,
/// whatever the shapes at `Compile`), and the walk redone. Returns per node its verdict, and
/// the groups (`None` when the nodes form a cycle).
pub fn claim(
    nodes: &[NodeInfo],
    accept: &dyn Fn(&Mapped) -> Result<(), Decline>,
) -> (Verdicts, Option<Vec<Vec<usize>>>) {
    let preds = crate::graph::predecessors(nodes);
    let Some(order) = crate::partition::topological(&preds) else {
        return (nodes.iter().map(|_| decline("the graph's nodes form a cycle")).collect(), None);
    };
    let mut forced: HashMap<usize, String> = HashMap::new();
    loop {
        let mut verdict: Vec<Result<(), Decline>> = nodes.iter().map(|_| Ok(())).collect();
        let mut folded_by: HashMap<String, usize> = HashMap::new();
        for base in PROBES {
            let mut env = Env::probing(base);
            let steps = walk_forced(nodes, &order, &mut env, accept, &forced);
            for (i, r) in steps.into_iter().enumerate() {
                if let Ok(Step::Folded) = &r {
                    for v in nodes[i].outputs.iter().flatten() {
                        folded_by.insert(v.name.clone(), i);
                    }
                }
                if let (Err(d), Ok(())) = (r, &verdict[i]) {
                    verdict[i] = Err(d);
                }
            }
        }
        let claimed: Vec<bool> = verdict.iter().map(Result::is_ok).collect();
        let Some(groups) = crate::partition::groups(&claimed, &preds) else { return (verdict, None) };
        let mut group_of = vec![usize::MAX; nodes.len()];
        for (g, members) in groups.iter().enumerate() {
            for &m in members {
                group_of[m] = g;
            }
        }
        let mut again = false;
        for (i, n) in nodes.iter().enumerate().filter(|(i, _)| claimed[*i]) {
            for v in n.inputs.iter().flatten() {
                if let Some(&p) = folded_by.get(&v.name)
                    && group_of[p] != group_of[i]
                    && !forced.contains_key(&i)
                {
                    forced.insert(i, format!("reads {:?}, folded in another fused group", v.name));
                    again = true;
                }
            }
        }
        if !again {
            return (verdict, Some(groups));
        }
    }
}

/// [`walk`] with the nodes of `forced` declined for the reason given.
fn walk_forced(
    nodes: &[NodeInfo],
    order: &[usize],
    env: &mut Env,
    accept: &dyn Fn(&Mapped) -> Result<(), Decline>,
    forced: &HashMap<usize, String>,
) -> Vec<Result<Step, Decline>> {
    if forced.is_empty() {
        return walk(nodes, order, env, accept);
    }
    let masked: Vec<NodeInfo> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| match forced.get(&i) {
            Some(_) => NodeInfo { domain: FORCED_OUT.into(), ..n.clone() },
            None => n.clone(),
        })
        .collect();
    let mut out = walk(&masked, order, env, accept);
    for (i, why) in forced {
        out[*i] = Err(Decline(why.clone()));
    }
    out
}

/// The domain a forced-out node is walked under (no op of it folds or maps).
const FORCED_OUT: &str = "npurt.forced_out";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Attr;

    fn val(name: &str, elem: i32, dims: &[i64], symbols: &[&str]) -> ValueMeta {
        ValueMeta {
            name: name.into(),
            elem,
            dims: Some(dims.to_vec()),
            symbols: symbols.iter().map(|s| s.to_string()).collect(),
            constant: false,
            data: None,
            handle: std::ptr::null(),
        }
    }

    fn konst(name: &str, dims: &[i64], data: &[i64]) -> ValueMeta {
        ValueMeta { constant: true, data: Some(data.to_vec()), ..val(name, 7, dims, &[]) }
    }

    fn node(op: &str, inputs: Vec<ValueMeta>, out: ValueMeta) -> NodeInfo {
        NodeInfo {
            node: std::ptr::null(),
            name: out.name.clone(),
            op_type: op.into(),
            domain: String::new(),
            since_version: 17,
            inputs: inputs.into_iter().map(Some).collect(),
            outputs: vec![Some(out)],
            attrs: HashMap::new(),
        }
    }

    /// x [batch, seq, 8] -> Reshape(x, Concat(Shape(x)[0:2], [2, 4])) with ORT not knowing
    /// the reshaped dims.
    fn computed_reshape() -> Vec<NodeInfo> {
        let x = val("x", 1, &[-1, -1, 8], &["batch", "seq", ""]);
        let mut shape = node("Shape", vec![x.clone()], val("s", 7, &[2], &[]));
        shape.since_version = 15;
        shape.attrs.insert("end".into(), Attr::Int(2));
        let mut cat = node("Concat", vec![val("s", 7, &[2], &[]), konst("k", &[2], &[2, 4])], val("t", 7, &[4], &[]));
        cat.attrs.insert("axis".into(), Attr::Int(0));
        let r =
            node("Reshape", vec![x, val("t", 7, &[4], &[])], val("y", 1, &[-1, -1, -1, -1], &["u0", "u1", "u2", "u3"]));
        let relu = node(
            "Relu",
            vec![val("y", 1, &[-1, -1, -1, -1], &["u0", "u1", "u2", "u3"])],
            val("z", 1, &[-1, -1, 2, 4], &["batch", "seq", "", ""]),
        );
        vec![shape, cat, r, relu]
    }

    #[test]
    fn a_reshape_target_computed_from_shape_is_folded_and_claimed() {
        let nodes = computed_reshape();
        let (v, groups) = claim(&nodes, &|_| Ok(()));
        assert!(v.iter().all(Result::is_ok), "{v:?}");
        assert_eq!(groups, Some(vec![vec![0, 1, 2, 3]]));
        // At compile, with the batch and seq of the tensors fed.
        let mut env = Env::bound([("batch".to_string(), 3), ("seq".to_string(), 5)].into());
        let steps = walk(&nodes, &[0, 1, 2, 3], &mut env, &|_| Ok(()));
        assert!(matches!(steps[0], Ok(Step::Folded)) && matches!(steps[1], Ok(Step::Folded)));
        assert_eq!(env.host["t"].data, vec![3, 5, 2, 4]);
        let Ok(Step::Mapped(_, m)) = &steps[2] else { panic!("{:?}", steps[2]) };
        assert_eq!(m.op, runtime::Op::Reshape { shape: vec![3, 5, 2, 4] });
        assert_eq!(env.metas["z"].dims, Some(vec![3, 5, 2, 4]));
    }

    #[test]
    fn a_shape_value_from_outside_is_not_folded() {
        // The Concat's input comes from a node that is not folded (declined): the Concat is
        // npurt's data-path op, but its value is not known on the host, so the Reshape's shape
        // is unknown and the Reshape declined.
        let mut nodes = computed_reshape();
        nodes[0].op_type = "NotAnOp".into();
        let (v, _) = claim(&nodes, &|_| Ok(()));
        assert!(v[0].is_err() && v[1].is_ok() && v[2].is_err(), "{v:?}");
        assert!(v[2].as_ref().unwrap_err().0.contains("not a small int64 constant"), "{v:?}");
    }

    #[test]
    fn a_node_reading_a_value_folded_in_another_group_stays_on_ort() {
        // t = Concat(Shape(x)[0:2], [2, 4]) feeds a node ORT runs, so the group of Shape and
        // Concat ends there; the Reshape of that node's output by t lands in a later group,
        // where t would come from nowhere: it is left to ORT.
        let mut nodes = computed_reshape();
        nodes.truncate(3);
        let x2 = val("x2", 1, &[-1, -1, 8], &["batch", "seq", ""]);
        let ort =
            node("NotAnOp", vec![val("x", 1, &[-1, -1, 8], &["batch", "seq", ""]), val("t", 7, &[4], &[])], x2.clone());
        nodes.insert(2, ort);
        nodes[3].inputs[0] = Some(x2);
        let (v, groups) = claim(&nodes, &|_| Ok(()));
        assert!(v[0].is_ok() && v[1].is_ok(), "{v:?}");
        assert!(v[2].is_err());
        assert!(v[3].as_ref().unwrap_err().0.contains("folded in another fused group"), "{v:?}");
        assert_eq!(groups, Some(vec![vec![0, 1]]));
    }

    #[test]
    fn a_folded_value_cast_to_float_is_mapped_with_the_value_as_a_constant() {
        // f = Cast(Shape(x)[1:2], float): not folded (a float value), so npurt's Cast of the
        // folded value.
        let x = val("x", 1, &[-1, 8], &["batch", ""]);
        let mut shape = node("Shape", vec![x], val("s", 7, &[1], &[]));
        shape.since_version = 15;
        shape.attrs.insert("start".into(), Attr::Int(1));
        let mut cast = node("Cast", vec![val("s", 7, &[1], &[])], val("f", 1, &[1], &[]));
        cast.attrs.insert("to".into(), Attr::Int(1));
        let (v, groups) = claim(&[shape.clone(), cast.clone()], &|_| Ok(()));
        assert!(v.iter().all(Result::is_ok), "{v:?}");
        assert_eq!(groups, Some(vec![vec![0, 1]]));
        let mut env = Env::bound([("batch".to_string(), 3)].into());
        let steps = walk(&[shape, cast], &[0, 1], &mut env, &|_| Ok(()));
        let Ok(Step::Mapped(_, m)) = &steps[1] else { panic!("{:?}", steps[1]) };
        assert_eq!(m.op, runtime::Op::Cast { to: runtime::DType::F32 });
        assert_eq!(env.host["s"].data, vec![8]);
        // A Cast of a constant initializer alone is left to ORT (a fused node of constants).
        let mut c = node("Cast", vec![konst("k", &[1], &[2])], val("kf", 1, &[1], &[]));
        c.attrs.insert("to".into(), Attr::Int(1));
        let (v, _) = claim(&[c], &|_| Ok(()));
        assert!(v[0].as_ref().unwrap_err().0.contains("of constants only"), "{v:?}");
    }
}
