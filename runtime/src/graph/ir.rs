//! The graph IR and its builder.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::op::{Op, TensorMeta};
use crate::shape::Shape;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// The bytes of a constant, read-only and shared by its clones: owned (`From<Vec<u8>>`),
/// borrowed from an owner that keeps them alive, such as a memory-mapped weights file
/// ([`HostBytes::from_owner`]), so that building a graph need not copy its weights, or
/// derived from other bytes on first read ([`HostBytes::derived`]), so that a rewrite of a
/// weight (a transposition) costs nothing when the compile finds its result already on the
/// device.
///
/// `Send + Sync`: the bytes never change once made, any number of threads may read them; a
/// derived value is made once, by the first reader, while the others wait.
#[derive(Clone)]
pub struct HostBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    /// The length, known without making derived bytes.
    len: usize,
    /// The [`HostBytes::fingerprint`] when known without reading the bytes: for derived
    /// bytes, or given ([`HostBytes::from_owner_with_fingerprint`]).
    known: Option<u64>,
    /// For derived bytes, their maker (also `owner`).
    derived: Option<Arc<Derived>>,
}

/// How derived bytes are made (taken by the first reader).
type Maker = Box<dyn FnOnce() -> Vec<u8> + Send>;

/// Bytes made from a source by a function, on first read.
struct Derived {
    bytes: std::sync::OnceLock<Vec<u8>>,
    make: std::sync::Mutex<Option<Maker>>,
}

impl AsRef<[u8]> for Derived {
    fn as_ref(&self) -> &[u8] {
        self.bytes.get_or_init(|| {
            let make = self.make.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            make.map(|f| f()).unwrap_or_default()
        })
    }
}

impl HostBytes {
    /// The bytes `owner` holds, without a copy; they live as long as a clone does.
    pub fn from_owner(owner: impl AsRef<[u8]> + Send + Sync + 'static) -> HostBytes {
        let len = owner.as_ref().len();
        HostBytes { owner: Arc::new(owner), len, known: None, derived: None }
    }

    /// Like [`HostBytes::from_owner`], with the owner's bytes' fingerprint taken earlier
    /// (`HostBytes::fingerprint_of` of the same bytes, e.g. while writing them to the file
    /// that `owner` maps), so a compile that finds them on the device already reads none
    /// of them.
    pub fn from_owner_with_fingerprint(owner: impl AsRef<[u8]> + Send + Sync + 'static, fingerprint: u64) -> HostBytes {
        HostBytes { known: Some(fingerprint), ..HostBytes::from_owner(owner) }
    }

    /// `len` bytes that `make` computes from `source` when they are first read (and never,
    /// if nothing reads them); `source` is kept alive until then. `rule` names the
    /// function (and its parameters): two derived values with the same source bytes and
    /// the same rule are taken to hold the same bytes (their [`fingerprint`]s are equal).
    /// `make` must return exactly `len` bytes.
    ///
    /// [`fingerprint`]: HostBytes::fingerprint
    pub fn derived(
        source: &HostBytes,
        rule: &str,
        len: usize,
        make: impl FnOnce(&[u8]) -> Vec<u8> + Send + 'static,
    ) -> HostBytes {
        HostBytes::derived_from(std::slice::from_ref(source), rule, len, move |s| make(s[0]))
    }

    /// [`HostBytes::derived`] from several sources (in order), e.g. weights stacked into
    /// one: `make` reads them all; the fingerprint is of theirs, in order, and `rule`.
    pub fn derived_from(
        sources: &[HostBytes],
        rule: &str,
        len: usize,
        make: impl FnOnce(&[&[u8]]) -> Vec<u8> + Send + 'static,
    ) -> HostBytes {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for s in sources {
            s.fingerprint().hash(&mut h);
        }
        rule.hash(&mut h);
        len.hash(&mut h);
        let src = sources.to_vec();
        let derived = Arc::new(Derived {
            bytes: std::sync::OnceLock::new(),
            make: std::sync::Mutex::new(Some(Box::new(move || {
                let slices: Vec<&[u8]> = src.iter().map(HostBytes::as_slice).collect();
                make(&slices)
            }))),
        });
        HostBytes { owner: derived.clone(), len, known: Some(h.finish()), derived: Some(derived) }
    }

    pub fn as_slice(&self) -> &[u8] {
        (*self.owner).as_ref()
    }

    /// True for derived bytes ([`HostBytes::derived`]) that nothing has read yet, so they
    /// have not been made.
    pub fn pending(&self) -> bool {
        self.derived.as_ref().is_some_and(|d| d.bytes.get().is_none())
    }

    /// The number of bytes (without making derived ones).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A hash that tells apart constants that merely share a name, dtype and shape
    /// ([`HostBytes::fingerprint_of`] of the bytes); for derived bytes, of the source's
    /// fingerprint and the rule, so they are not made.
    pub fn fingerprint(&self) -> u64 {
        self.known.unwrap_or_else(|| HostBytes::fingerprint_of(self.as_slice()))
    }

    /// A hash of `bytes`' length, of their first and last 64 bytes and of 64 words spread
    /// over the rest: it reads a few pages whatever the size (the bytes may be a memory map).
    pub fn fingerprint_of(bytes: &[u8]) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.len().hash(&mut h);
        if bytes.len() <= 1024 {
            bytes.hash(&mut h);
        } else {
            bytes[..64].hash(&mut h);
            bytes[bytes.len() - 64..].hash(&mut h);
            let step = (bytes.len() - 8) / 64;
            for i in 0..64 {
                bytes[i * step..i * step + 8].hash(&mut h);
            }
        }
        h.finish()
    }
}

impl Default for HostBytes {
    fn default() -> HostBytes {
        HostBytes::from(Vec::new())
    }
}

impl From<Vec<u8>> for HostBytes {
    fn from(v: Vec<u8>) -> HostBytes {
        HostBytes::from_owner(v)
    }
}

impl std::ops::Deref for HostBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for HostBytes {
    fn eq(&self, other: &HostBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBytes({} bytes)", self.len())
    }
}

/// Host data of a constant (weights), little-endian element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Shape,
    pub bytes: HostBytes,
}

impl HostTensor {
    /// A constant of `shape` holding `v`; [`Error::Overflow`] when the shape's size
    /// overflows, [`Error::Invalid`] when `v` has another length.
    pub fn from_vec<T: Element>(shape: impl Into<Shape>, v: Vec<T>) -> Result<HostTensor> {
        let shape = shape.into();
        shape.checked_bytes("constant", T::DTYPE)?;
        if shape.numel() != v.len() {
            return Err(Error::invalid("Constant", format!("{} values for shape {shape}", v.len())));
        }
        Ok(HostTensor { dtype: T::DTYPE, shape, bytes: bytemuck::cast_slice(&v).to_vec().into() })
    }
    pub fn meta(&self) -> TensorMeta {
        TensorMeta { dtype: self.dtype, shape: self.shape.clone() }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// Fed at run time.
    Input,
    /// Known at build time; uploaded once at compile time.
    Constant(HostTensor),
    /// Produced by a node.
    Node(NodeId),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    pub meta: TensorMeta,
    pub kind: ValueKind,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// A dataflow graph in topological order (nodes only read values defined earlier).
///
/// `Send + Sync`, plain data: building takes `&mut self`; shared references may be read
/// (and compiled) from many threads at once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v.0]
    }
    pub fn meta(&self, v: ValueId) -> &TensorMeta {
        &self.values[v.0].meta
    }

    /// A run-time input. Every value's name (inputs, constants, nodes' outputs) must be
    /// new: a repeated one is refused by [`Graph::validate`] (so by compiling), or at once
    /// by [`Graph::try_input`].
    pub fn input(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>) -> ValueId {
        let id = ValueId(self.values.len());
        self.values.push(Value { name: name.into(), meta: TensorMeta::new(dtype, shape), kind: ValueKind::Input });
        self.inputs.push(id);
        id
    }

    /// A run-time input, refused ("given twice") when a value of the graph already has
    /// its name.
    pub fn try_input(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>) -> Result<ValueId> {
        self.check_new_name("input", name)?;
        Ok(self.input(name, dtype, shape))
    }

    /// A constant (weights); its name must be new, as [`Graph::input`] says.
    pub fn constant(&mut self, name: &str, t: HostTensor) -> ValueId {
        let id = ValueId(self.values.len());
        self.values.push(Value { name: name.into(), meta: t.meta(), kind: ValueKind::Constant(t) });
        id
    }

    /// A constant, refused ("given twice") when a value of the graph already has its name.
    pub fn try_constant(&mut self, name: &str, t: HostTensor) -> Result<ValueId> {
        self.check_new_name("constant", name)?;
        Ok(self.constant(name, t))
    }

    /// What already has the name `name`: the kind of the value ("input", "constant" or
    /// "node") of that name, if any.
    fn holder(&self, name: &str) -> Option<&'static str> {
        self.values.iter().find(|v| v.name == name).map(|v| v.kind.word())
    }

    /// Refuses `name` for a new `what` when a value of the graph already has it: the one
    /// check of repeated names, which build calls and [`Graph::validate`] share.
    fn check_new_name(&self, what: &str, name: &str) -> Result<()> {
        match self.holder(name) {
            Some(held) => Err(repeated(what, name, held)),
            None => Ok(()),
        }
    }

    /// Adds a node; validates it and infers its output. Errors name the node.
    pub fn op(&mut self, name: &str, op: Op, inputs: &[ValueId]) -> Result<ValueId> {
        Ok(self.op_multi(name, op, inputs)?[0])
    }

    pub fn op_multi(&mut self, name: &str, op: Op, inputs: &[ValueId]) -> Result<Vec<ValueId>> {
        for v in inputs {
            if v.0 >= self.values.len() {
                return Err(Error::invalid(op.name(), format!("node {name:?}: input {} does not exist", v.0)));
            }
        }
        let metas: Vec<TensorMeta> = inputs.iter().map(|v| self.values[v.0].meta.clone()).collect();
        let outs = op.infer(&metas).map_err(|e| node_error(name, e))?;
        let vnames: Vec<String> =
            (0..outs.len()).map(|i| if i == 0 { name.to_string() } else { format!("{name}:{i}") }).collect();
        for v in &vnames {
            self.check_new_name("node", v)?;
        }
        let nid = NodeId(self.nodes.len());
        let mut ids = Vec::new();
        for (m, vname) in outs.into_iter().zip(vnames) {
            let id = ValueId(self.values.len());
            self.values.push(Value { name: vname, meta: m, kind: ValueKind::Node(nid) });
            ids.push(id);
        }
        self.nodes.push(Node { name: name.into(), op, inputs: inputs.to_vec(), outputs: ids.clone() });
        Ok(ids)
    }

    /// Marks a value as a graph output. A value marked twice (so two outputs of one name)
    /// is refused by [`Graph::validate`], or at once by [`Graph::try_output`].
    pub fn output(&mut self, v: ValueId) {
        self.outputs.push(v);
    }

    /// Marks a value as a graph output; refused when it does not exist or is an output
    /// already ("given twice", naming it).
    pub fn try_output(&mut self, v: ValueId) -> Result<()> {
        let Some(value) = self.values.get(v.0) else {
            return Err(Error::invalid("Graph", format!("output {}: the value does not exist", v.0)));
        };
        if self.outputs.contains(&v) {
            return Err(Error::invalid("Graph", format!("output {:?} is given twice", value.name)));
        }
        self.outputs.push(v);
        Ok(())
    }

    /// Checks the whole graph: topological order, every node's shapes, outputs exist;
    /// every input's and constant's size fits (see [`crate::size`]) and each constant
    /// holds exactly the bytes of its shape (so [`crate::CompiledGraph::graph`], whose
    /// constants live on the device only, does not validate).
    pub fn validate(&self) -> Result<()> {
        let mut names: HashMap<&str, &'static str> = HashMap::with_capacity(self.values.len());
        for v in &self.values {
            if let Some(held) = names.insert(&v.name, v.kind.word()) {
                return Err(repeated(v.kind.word(), &v.name, held));
            }
        }
        let mut defined = vec![false; self.values.len()];
        for (i, v) in self.values.iter().enumerate() {
            let what = match &v.kind {
                ValueKind::Input => "input",
                ValueKind::Constant(_) => "constant",
                ValueKind::Node(_) => continue,
            };
            let need = crate::size::operand_bytes(
                "Graph",
                format_args!("{what} {:?}", v.name),
                v.meta.shape.dims(),
                v.meta.dtype,
            )?;
            if let ValueKind::Constant(t) = &v.kind
                && (t.meta() != v.meta || t.bytes.len() != need)
            {
                return Err(Error::invalid(
                    "Graph",
                    format!(
                        "constant {:?} is {} with {} bytes, recorded as {}",
                        v.name,
                        t.meta(),
                        t.bytes.len(),
                        v.meta
                    ),
                ));
            }
            defined[i] = true;
        }
        for n in &self.nodes {
            for v in &n.inputs {
                if !defined.get(v.0).copied().unwrap_or(false) {
                    return Err(Error::invalid(
                        n.op.name(),
                        format!(
                            "node {:?} reads {:?} before it is defined",
                            n.name,
                            self.values.get(v.0).map(|x| &x.name)
                        ),
                    ));
                }
            }
            let metas: Vec<TensorMeta> = n.inputs.iter().map(|v| self.values[v.0].meta.clone()).collect();
            let outs = n.op.infer(&metas).map_err(|e| node_error(&n.name, e))?;
            if n.outputs.len() != outs.len() {
                return Err(Error::invalid(
                    n.op.name(),
                    format!("node {:?} records {} outputs but its op has {}", n.name, n.outputs.len(), outs.len()),
                ));
            }
            for (o, m) in n.outputs.iter().zip(&outs) {
                let Some(value) = self.values.get(o.0) else {
                    return Err(Error::invalid(
                        n.op.name(),
                        format!("node {:?} writes value {} that does not exist", n.name, o.0),
                    ));
                };
                if defined[o.0] {
                    return Err(Error::invalid(
                        n.op.name(),
                        format!("node {:?} writes value {:?} that is already defined", n.name, value.name),
                    ));
                }
                if value.meta != *m {
                    return Err(Error::invalid(
                        n.op.name(),
                        format!("node {:?}: output recorded as {} but infers {m}", n.name, self.values[o.0].meta),
                    ));
                }
                defined[o.0] = true;
            }
        }
        if self.outputs.is_empty() {
            return Err(Error::invalid("Graph", "the graph has no outputs"));
        }
        for (k, o) in self.outputs.iter().enumerate() {
            if !defined.get(o.0).copied().unwrap_or(false) {
                return Err(Error::invalid("Graph", format!("output {} is never defined", o.0)));
            }
            if self.outputs[..k].contains(o) {
                return Err(Error::invalid("Graph", format!("output {:?} is given twice", self.values[o.0].name)));
            }
        }
        Ok(())
    }

    /// For each value, the nodes that read it.
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut c = vec![Vec::new(); self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for v in &n.inputs {
                if !c[v.0].contains(&NodeId(i)) {
                    c[v.0].push(NodeId(i));
                }
            }
        }
        c
    }

    /// Total FLOPs of one run (saturating).
    pub fn flops(&self) -> u64 {
        self.nodes.iter().fold(0u64, |acc, n| {
            let i: Vec<TensorMeta> = n.inputs.iter().map(|v| self.meta(*v).clone()).collect();
            let o: Vec<TensorMeta> = n.outputs.iter().map(|v| self.meta(*v).clone()).collect();
            acc.saturating_add(n.op.flops(&i, &o))
        })
    }

    /// Bytes of all constants (saturating).
    pub fn constant_bytes(&self) -> usize {
        let consts = self.values.iter().filter(|v| matches!(v.kind, ValueKind::Constant(_)));
        consts.fold(0usize, |acc, v| acc.saturating_add(v.meta.bytes()))
    }

    /// A readable listing: one line per input, constant summary, node and output.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let name = |v: &ValueId| format!("%{}", self.values[v.0].name);
        for i in &self.inputs {
            let _ = writeln!(s, "input  {} : {}", name(i), self.values[i.0].meta);
        }
        let consts = self.values.iter().filter(|v| matches!(v.kind, ValueKind::Constant(_))).count();
        let _ = writeln!(s, "consts {consts} ({} bytes)", self.constant_bytes());
        for n in &self.nodes {
            let ins: Vec<String> = n.inputs.iter().map(name).collect();
            let outs: Vec<String> =
                n.outputs.iter().map(|o| format!("{} : {}", name(o), self.values[o.0].meta)).collect();
            let _ = writeln!(s, "{} = {:?}({})", outs.join(", "), n.op, ins.join(", "));
        }
        for o in &self.outputs {
            let _ = writeln!(s, "output {}", name(o));
        }
        s
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dump())
    }
}

impl ValueKind {
    /// "input", "constant" or "node", as errors name a value's kind.
    fn word(&self) -> &'static str {
        match self {
            ValueKind::Input => "input",
            ValueKind::Constant(_) => "constant",
            ValueKind::Node(_) => "node",
        }
    }
}

/// A `what` named `name` where a value of kind `held` already has the name.
fn repeated(what: &str, name: &str, held: &str) -> Error {
    Error::invalid(
        "Graph",
        format!(
            "{what} {name:?}: the name is given twice (the graph already has {} {held} {name:?}; names are unique)",
            article(held)
        ),
    )
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
}

fn node_error(node: &str, e: Error) -> Error {
    match e {
        Error::Invalid { op, msg, operands } => Error::Invalid { op, msg: format!("node {node:?}: {msg}"), operands },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_infers_and_names_nodes_in_errors() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [2, 3]);
        let w = g.constant("w", HostTensor::from_vec([4, 3], vec![0f32; 12]).unwrap());
        let y = g.op("fc", Op::Linear, &[x, w]).unwrap();
        assert_eq!(g.meta(y).shape, Shape::from([2, 4]));
        let bad = g.op("mm", Op::MatMul { trans_a: false, trans_b: false }, &[x, x]).unwrap_err();
        assert!(bad.to_string().contains("node \"mm\""), "{bad}");
        g.output(y);
        g.validate().unwrap();
        assert!(g.dump().contains("%fc : f32 [2, 4] = Linear(%x, %w)"));
    }

    #[test]
    fn derived_bytes_are_made_once_on_first_read_and_named_by_their_source_and_rule() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let made = Arc::new(AtomicUsize::new(0));
        let source = HostBytes::from((0u8..200).collect::<Vec<u8>>());
        let reversed = |made: &Arc<AtomicUsize>| {
            let made = made.clone();
            HostBytes::derived(&source, "reverse", 200, move |s| {
                made.fetch_add(1, Ordering::SeqCst);
                s.iter().rev().copied().collect()
            })
        };
        let d = reversed(&made);
        // Length and identity without making the bytes.
        assert_eq!((d.len(), d.pending()), (200, true));
        assert_eq!(d.fingerprint(), reversed(&made).fingerprint(), "same source and rule");
        assert_ne!(d.fingerprint(), HostBytes::derived(&source, "other", 200, |s| s.to_vec()).fingerprint());
        assert_ne!(d.fingerprint(), source.fingerprint());
        assert_eq!(made.load(Ordering::SeqCst), 0, "nothing read them yet");
        // Four threads read a clone each at once: made once, by one of them, for all.
        let clones: Vec<HostBytes> = (0..4).map(|_| d.clone()).collect();
        std::thread::scope(|s| {
            for c in &clones {
                s.spawn(move || assert_eq!(c.as_slice()[0], 199));
            }
        });
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert!(!d.pending());
        assert_eq!(d.as_slice(), (0u8..200).rev().collect::<Vec<u8>>().as_slice());
        assert!(!source.pending(), "owned bytes are never pending");
    }

    #[test]
    fn bytes_derived_from_several_sources_read_them_in_order() {
        let (a, b) = (HostBytes::from(vec![1u8, 2]), HostBytes::from(vec![3u8, 4, 5]));
        let joined = |srcs: &[HostBytes]| HostBytes::derived_from(srcs, "concat", 5, |s| s.concat());
        let ab = joined(&[a.clone(), b.clone()]);
        assert!(ab.pending());
        assert_eq!(ab.fingerprint(), joined(&[a.clone(), b.clone()]).fingerprint());
        assert_ne!(ab.fingerprint(), joined(&[b.clone(), a.clone()]).fingerprint(), "order is part of the identity");
        assert_eq!(ab.as_slice(), &[1, 2, 3, 4, 5]);
        // One source: the same identity as `derived`.
        let one = HostBytes::derived(&a, "concat", 5, |s| s.to_vec());
        assert_eq!(one.fingerprint(), HostBytes::derived_from(&[a], "concat", 5, |s| s.concat()).fingerprint());
    }
}
