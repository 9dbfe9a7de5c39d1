//! Constants shared by the graphs compiled from one model: the device copy of each weight
//! (and what the backend prepared for it, e.g. packed panels) is made by the first compile
//! that needs it and reused by every later one, so compiling another input shape of a
//! loaded model uploads and packs nothing, and device memory does not grow with the number
//! of shapes beyond their arenas.

use super::ir::{Graph, HostTensor, Node, ValueId, ValueKind};
use crate::backend::Prepacked;
use crate::dtype::DType;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What identifies a constant across the graphs of one model.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) struct Key {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub device: usize,
    /// [`HostBytes::fingerprint`](super::ir::HostBytes::fingerprint) of the bytes.
    pub fingerprint: u64,
}

/// A constant's device copy and how it was prepared.
#[derive(Clone)]
pub(super) struct Entry {
    pub tensor: Tensor,
    /// The kernel the device bytes were laid out for, when the backend asked for another
    /// layout (only that kernel can read them).
    pub relayout_for: Option<String>,
    /// The kernel, and what the backend prepared for it, of the node that read it.
    pub prepacked: Option<(String, Prepacked)>,
    /// The kernel of the node that read it when the backend prepared nothing for that
    /// node: a later compile running that kernel need not offer the bytes again (reading
    /// them would make a derived weight, [`super::ir::HostBytes::derived`]).
    pub declined_for: Option<String>,
}

/// The device copies of a model's constants, shared by every graph compiled with
/// [`CompiledGraph::compile_shared`](super::CompiledGraph::compile_shared).
///
/// A constant is identified by its value name, dtype, shape and device: graphs compiled
/// with one store must come from the same weights (the graphs of one model at different
/// input shapes, as the embedder compiles them). The store keeps the device copies alive
/// while it or any graph using them lives.
///
/// `Send + Sync`: concurrent compiles may share a store; each lookup and insertion is
/// atomic, and two compiles missing the same constant at once each upload it, the second
/// keeping its own copy.
#[derive(Default)]
pub struct SharedConstants {
    map: Mutex<HashMap<Key, Entry>>,
    /// Device copies handed to compiles in place of an upload.
    served: AtomicUsize,
}

impl std::fmt::Debug for SharedConstants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedConstants({} constants, {} bytes)", self.len(), self.device_bytes())
    }
}

impl SharedConstants {
    pub fn new() -> SharedConstants {
        SharedConstants::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Constants held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times a compile took a constant's device copy from the store instead of
    /// uploading it (each constant of each compile counts once).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }

    /// Device bytes of the constants held.
    pub fn device_bytes(&self) -> usize {
        self.lock().values().map(|e| e.tensor.nbytes()).sum()
    }

    pub(super) fn get(&self, key: &Key) -> Option<Entry> {
        self.lock().get(key).cloned()
    }

    /// Keeps `entry` unless the key is taken already.
    pub(super) fn offer(&self, key: Key, entry: Entry) {
        self.lock().entry(key).or_insert(entry);
    }
}

// ---- the compile's side (`CompiledGraph::compile_shared`) ----

/// A compile's use of a [`SharedConstants`] store; without one, the compile uploads and
/// prepares every constant itself.
pub(super) struct Sharing<'s> {
    store: Option<&'s SharedConstants>,
    /// The keys of the graph's constants not yet offered to the store.
    keys: HashMap<ValueId, Key>,
    /// The graph's constants the store holds and may still serve.
    hits: HashMap<ValueId, Entry>,
    /// What this compile prepared, offered with the constants it uploads.
    prepared: HashMap<ValueId, Prepared>,
    /// The kernels for which the backend prepared nothing, by constant read.
    declined: HashMap<ValueId, String>,
}

impl<'s> Sharing<'s> {
    /// The store's side of compiling `graph` for `device` (keys taken before any constant
    /// is laid out anew).
    pub(super) fn new(store: Option<&'s SharedConstants>, graph: &Graph, device: usize) -> Sharing<'s> {
        let keys = store.map_or_else(HashMap::new, |_| keys(graph, device));
        let hits = store.map_or_else(HashMap::new, |st| hits(st, &keys));
        Sharing { store, keys, hits, prepared: HashMap::new(), declined: HashMap::new() }
    }

    /// `kernel` when there is a store to share what is prepared for it.
    pub(super) fn kernel<'k>(&self, kernel: &'k str) -> Option<&'k str> {
        self.store.map(|_| kernel)
    }

    /// See [`reuse`].
    pub(super) fn reuse(&mut self, graph: &Graph, n: &Node, kernel: Option<&str>) -> Option<Option<Prepacked>> {
        reuse(graph, n, kernel, &mut self.hits)
    }

    /// Notes that the backend prepared nothing for a node reading `inputs` (the constants
    /// among them) with `kernel`.
    pub(super) fn decline(&mut self, graph: &Graph, inputs: &[ValueId], kernel: &str) {
        for v in inputs.iter().filter(|v| matches!(graph.values[v.0].kind, ValueKind::Constant(_))) {
            self.declined.entry(*v).or_insert_with(|| kernel.to_string());
        }
    }

    /// See [`note`].
    pub(super) fn note(
        &mut self,
        graph: &Graph,
        inputs: &[ValueId],
        relaid: &[ValueId],
        kernel: &str,
        prepacked: &Prepacked,
    ) {
        note(graph, inputs, relaid, kernel, prepacked, &mut self.hits, &mut self.prepared);
    }

    /// The store's device copy of constant `id`, when it serves it.
    pub(super) fn hit(&self, id: ValueId) -> Option<Tensor> {
        let t = self.hits.get(&id).map(|e| e.tensor.clone())?;
        if let Some(st) = self.store {
            st.served.fetch_add(1, Ordering::Relaxed);
        }
        Some(t)
    }

    /// Offers the store the device copy of constant `id` this compile uploaded (with what
    /// it prepared for it).
    pub(super) fn offer(&mut self, id: ValueId, device_copy: &Tensor) {
        if let (Some(st), Some(k)) = (self.store, self.keys.remove(&id)) {
            let mut e = entry(device_copy, self.prepared.remove(&id));
            e.declined_for = self.declined.remove(&id);
            st.offer(k, e);
        }
    }
}

/// The key of constant `t` named `name` on `device`.
fn key(name: &str, t: &HostTensor, device: usize) -> Key {
    Key {
        name: name.to_string(),
        dtype: t.dtype,
        dims: t.shape.dims().to_vec(),
        device,
        fingerprint: t.bytes.fingerprint(),
    }
}

/// The keys of the graph's constants (taken before any is laid out anew for a kernel).
fn keys(graph: &Graph, device: usize) -> HashMap<ValueId, Key> {
    graph
        .values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match &v.kind {
            ValueKind::Constant(t) => Some((ValueId(i), key(&v.name, t, device))),
            _ => None,
        })
        .collect()
}

/// What a compile prepared for a constant it uploads: the kernel of the node that read it,
/// what the backend prepared for that node, and whether its bytes were laid out anew.
struct Prepared {
    kernel: String,
    prepacked: Prepacked,
    relaid: bool,
}

/// The store's entry for a constant this compile uploaded.
fn entry(tensor: &Tensor, prepared: Option<Prepared>) -> Entry {
    match prepared {
        Some(p) => Entry {
            tensor: tensor.clone(),
            relayout_for: p.relaid.then(|| p.kernel.clone()),
            prepacked: Some((p.kernel, p.prepacked)),
            declined_for: None,
        },
        None => Entry { tensor: tensor.clone(), relayout_for: None, prepacked: None, declined_for: None },
    }
}

/// The graph's constants (by their `keys`) the store holds.
fn hits(store: &SharedConstants, keys: &HashMap<ValueId, Key>) -> HashMap<ValueId, Entry> {
    keys.iter().filter_map(|(v, k)| store.get(k).map(|e| (*v, e))).collect()
}

/// When every constant node `n` (running `kernel`) reads comes from the store: what was
/// prepared for that kernel (`Some(Some(_))`), or `Some(None)` when the backend prepared
/// nothing for it before; `None` when that is not known (the compile asks the backend).
/// Drops from `hits` the constants laid out for another kernel (the compile uploads them
/// afresh).
fn reuse(
    graph: &Graph,
    n: &Node,
    kernel: Option<&str>,
    hits: &mut HashMap<ValueId, Entry>,
) -> Option<Option<Prepacked>> {
    let kernel = kernel?;
    let consts: Vec<ValueId> =
        n.inputs.iter().filter(|v| matches!(graph.values[v.0].kind, ValueKind::Constant(_))).copied().collect();
    for v in &consts {
        if hits.get(v).is_some_and(|e| e.relayout_for.as_deref().is_some_and(|k| k != kernel)) {
            hits.remove(v);
        }
    }
    if consts.is_empty() || !consts.iter().all(|v| hits.contains_key(v)) {
        return None;
    }
    if let Some(p) = consts.iter().find_map(|v| hits[v].prepacked.as_ref().filter(|(k, _)| k == kernel)) {
        return Some(Some(p.1.clone()));
    }
    consts.iter().all(|v| hits[v].declined_for.as_deref() == Some(kernel)).then_some(None)
}

/// Notes what the backend prepared for a node reading `inputs` (the constants among them)
/// with `kernel`; the constants laid out anew (`relaid`) can no longer come from the store.
fn note(
    graph: &Graph,
    inputs: &[ValueId],
    relaid: &[ValueId],
    kernel: &str,
    prepacked: &Prepacked,
    hits: &mut HashMap<ValueId, Entry>,
    prepared: &mut HashMap<ValueId, Prepared>,
) {
    for v in inputs.iter().filter(|v| matches!(graph.values[v.0].kind, ValueKind::Constant(_))) {
        let relaid = relaid.contains(v);
        if relaid {
            hits.remove(v);
        }
        prepared.entry(*v).or_insert_with(|| Prepared {
            kernel: kernel.to_string(),
            prepacked: prepacked.clone(),
            relaid,
        });
    }
}
