//! Canonicalisation: rewrites the spellings an exporter uses (ONNX as Hugging Face's
//! exporter writes a BERT encoder, which the ONNX Runtime EP hands over) into the ops npurt's
//! own models build, so that [`super::fusion`] and the backends' prepared kernels see the
//! same graph either way. Run by the compile right before fusion (and only when fusion is
//! on), in two rounds over the graph:
//!
//! 1. **Scalar products.** `Mul(x, c)`, `Mul(c, x)` → `Scale(c)(x)` and `Div(x, c)` →
//!    `Scale(1 / c)(x)`, for f32 or f16 `x` and a constant `c` of one element whose
//!    broadcast leaves `x`'s shape as it is. `Scale` is `x * factor`, computed in f32 and
//!    rounded once to `x`'s dtype: a `Mul` becomes bitwise the same (an f16 product of two
//!    f16 values is exact in f32). A `Div` becomes a product by `1 / c` rounded to f32: two
//!    roundings instead of one, bitwise the same where `c` is a power of two (BERT's
//!    `sqrt(64)`), otherwise within two units in the last place. It fires only where `c` is
//!    finite and `1 / c` a normal f32, and where the device has a `Scale` kernel for `x`.
//!    (The CPU and reference kernels compute `Scale` as said; an aclnn `Muls` on f16 may
//!    round the factor to f16 first, which a `Div`'s reciprocal can feel: still within f16
//!    rounding of the `Div`.)
//! 2. **Structure**, on round 1's graph:
//!    * `MatMul(a, Permute(b, [0, 2, 3, 1]))` → `MatMul { trans_b }(a, Permute(b, [0, 2, 1, 3]))`:
//!      the key already transposed for the product becomes the head-split key that
//!      fusion's Attention pattern reads (and folds into its `bsnd` layout where the device
//!      allows). Exact: the same elements are multiplied.
//!    * The erf GELU spelled out, `x · 0.5 · (1 + erf(x · (1/√2)))` (after round 1: `Scale`s,
//!      the two products in any order and nesting; `1/√2` within `x`'s dtype's epsilon, as
//!      an f16 `√2` rounds) → `Gelu(Erf)(x)`, within `x`'s rounding of the expansion. Fusion then makes `BiasGelu` out of it.
//!    * `Add(MatMul(x, W), b)` (either operand order) with `W` a constant `[K, N]` and `b` a
//!      constant `[N]` → `Linear(x, Wᵀ, b)`; a `MatMul(x, W)` with no such bias → `Linear(x, Wᵀ)`.
//!      `Gemm(a, W, c)` with `alpha` 1, `beta` 1 (or no `c`), `a` not transposed, `W` a
//!      constant (`[K, N]`, or `[N, K]` with `trans_b`, then used as it is) and `c` a
//!      constant `[N]` or absent → `Linear` too. ONNX Runtime's level-1 transformations hand
//!      an EP a 3-D `MatMul` + `Add` as `Reshape(x, [M, K])` → `Gemm` → `Reshape(L ++ R)`,
//!      with a neighbouring reshape merged in (BERT's head split makes `R` `[H, D]`; its head
//!      merge makes `x` `[B, S, H, D]`): where the leading dims `L` multiply to `M`, the
//!      `Linear` reads `x` seen as `L ++ [K]` (a `Reshape` view only where `x` is not so
//!      already) and is reshaped to `R` only where `R` is not `[N]` — npurt's own layer's
//!      `Reshape`s, no more. Only `Linear` gets the
//!      backends' prepared weights (packed panels on the CPU) and the precision rewrite's
//!      bf16/f16 weights, as npurt's own layers do. Where the device has no `Linear` kernel
//!      for the operands, the `MatMul` or `Gemm` stays.
//!
//! **The weight is held once.** `Linear` reads `w` as `[N, K]`; the rewrite transposes the
//! constant's host bytes *in place of the original* (the same value, the same name; the
//! `[K, N]` bytes are dropped with the graph the compile owns), and only where the `MatMul`
//! is the constant's sole reader and the graph does not return it. Nothing else holds the
//! `[K, N]` form, and under `compile_shared` the transposed constant is what the store keys
//! (name, dtype, shape and a fingerprint of the bytes, all the same for every input shape
//! of the model): the second shape's compile transposes its host copy again (host work,
//! like the precision rewrite's conversion) but uploads and packs nothing; the device copy
//! is the first compile's. What a compile holds for a moment: the transposed host bytes of
//! the rewritten weights, each until its upload (or store hit) releases it, beside the
//! `[K, N]` bytes where the caller still shares them (`compile` rather than
//! `compile_owned`/`compile_shared` with the graph handed over) — one more host copy of
//! those weights at the peak, none after the compile.
//!
//! Like fusion, a rewrite fires only when its intermediates have no other reader and are
//! not graph outputs; [`CanonicalStats`] counts each.

pub use super::fusion::CanonicalStats;
use super::fusion::{Emit, Group, KernelOf, Matcher, Src, rebuild};
use super::ir::{Graph, HostBytes, HostTensor, ValueId, ValueKind};
use crate::dtype::DType;
use crate::error::Result;
use crate::op::{GeluApprox, Op, TensorMeta};
use std::collections::HashMap;

/// The graph with the rewrites of the module docs applied, and their counts. Takes the
/// graph so that a transposed weight replaces the original bytes instead of joining them.
pub fn canonicalize(g: Graph, kernel_of: KernelOf<'_>) -> Result<(Graph, CanonicalStats)> {
    let mut stats = CanonicalStats::default();
    let groups = Matcher { g: &g, consumers: g.consumers(), kernel_of }.scalar_products(&mut stats);
    // The graph taken is dropped once rebuilt: were it kept to the end (a shadowed binding
    // lives on), it would hold every weight's original bytes through the transposes below.
    let g = if groups.is_empty() {
        g
    } else {
        let rebuilt = rebuild(&g, &groups)?;
        drop(g);
        rebuilt
    };
    let m = Matcher { g: &g, consumers: g.consumers(), kernel_of };
    let (groups, transpose) = m.structure(&mut stats);
    if groups.is_empty() {
        return Ok((g, stats));
    }
    let mut g = g;
    for w in transpose {
        if let ValueKind::Constant(t) = &mut g.values[w.0].kind {
            *t = transposed(t);
            g.values[w.0].meta = t.meta();
        }
    }
    Ok((rebuild(&g, &groups)?, stats))
}

/// A 2-D constant `[K, N]` as `[N, K]`, transposed when first read: a compile that finds
/// the result on the device already ([`super::SharedConstants`], keyed on the source's
/// bytes and this rule) never makes it, so compiling another input shape of a model does
/// not hold a second copy of its weights.
fn transposed(t: &HostTensor) -> HostTensor {
    let (k, n) = (t.shape.dims()[0], t.shape.dims()[1]);
    let size = t.dtype.size();
    let make = move |src: &[u8]| {
        let mut out = vec![0u8; src.len()];
        match size {
            4 => transpose_blocks::<4>(src, &mut out, k, n),
            2 => transpose_blocks::<2>(src, &mut out, k, n),
            1 => transpose_blocks::<1>(src, &mut out, k, n),
            _ => transpose_blocks::<8>(src, &mut out, k, n),
        }
        out
    };
    let rule = format!("transpose {k}x{n}x{size}");
    let bytes = HostBytes::derived(&t.bytes, &rule, t.bytes.len(), make);
    HostTensor { dtype: t.dtype, shape: [n, k].into(), bytes }
}

/// `dst` `[n, k]` = `src` `[k, n]` transposed, elements of `E` bytes, in 32 × 32 tiles (a
/// BERT-Large's weights are a gigabyte: row-by-row strides would miss the cache on every
/// element).
fn transpose_blocks<const E: usize>(src: &[u8], dst: &mut [u8], k: usize, n: usize) {
    const TILE: usize = 32;
    for r0 in (0..k).step_by(TILE) {
        for c0 in (0..n).step_by(TILE) {
            for r in r0..(r0 + TILE).min(k) {
                for c in c0..(c0 + TILE).min(n) {
                    let (from, to) = ((r * n + c) * E, (c * k + r) * E);
                    dst[to..to + E].copy_from_slice(&src[from..from + E]);
                }
            }
        }
    }
}

/// Records `group`, rooted at node `i`, and marks its nodes taken.
fn take(i: usize, group: Group, taken: &mut [bool], groups: &mut HashMap<usize, Group>) {
    for &a in &group.absorbed {
        taken[a] = true;
    }
    taken[i] = true;
    groups.insert(i, group);
}

/// The value of a one-element f32 or f16 constant, as f32.
fn scalar(g: &Graph, v: ValueId) -> Option<f32> {
    let ValueKind::Constant(t) = &g.values[v.0].kind else { return None };
    if t.shape.numel() != 1 {
        return None;
    }
    let b = t.bytes.as_slice();
    match t.dtype {
        DType::F32 => Some(f32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::F16 => Some(half::f16::from_le_bytes(b.get(..2)?.try_into().ok()?).to_f32()),
        _ => None,
    }
}

/// Whether the rewrites treat values of `dtype`.
fn float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16)
}

impl Matcher<'_> {
    /// Round 1: every `Mul`/`Div` by a one-element constant, as a `Scale`.
    fn scalar_products(&self, stats: &mut CanonicalStats) -> HashMap<usize, Group> {
        let g = self.g;
        let mut groups = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            let factor = match (&n.op, &n.inputs[..]) {
                (Op::Mul, &[a, b]) => match (scalar(g, a), scalar(g, b)) {
                    (_, Some(c)) => Some((a, c)),
                    (Some(c), None) => Some((b, c)),
                    (None, None) => None,
                },
                (Op::Div, &[a, b]) => {
                    scalar(g, b).filter(|c| c.is_finite() && (1.0 / c).is_normal()).map(|c| (a, 1.0 / c))
                }
                _ => None,
            };
            let Some((x, factor)) = factor else { continue };
            if !factor.is_finite() || !float(g.meta(x).dtype) || g.meta(x) != g.meta(n.outputs[0]) {
                continue;
            }
            let op = Op::Scale { factor };
            if (self.kernel_of)(&op, std::slice::from_ref(g.meta(x))).is_none() {
                continue;
            }
            groups.insert(i, Group::one(vec![], &n.name, op, &[x]));
            stats.scale += 1;
        }
        groups
    }

    /// Round 2: the trans_b, GELU and bias-`Linear` rewrites, then a bias-free `Linear` for
    /// each `MatMul` by a constant left; the groups, and the weights to transpose.
    fn structure(&self, stats: &mut CanonicalStats) -> (HashMap<usize, Group>, Vec<ValueId>) {
        let g = self.g;
        let mut groups: HashMap<usize, Group> = HashMap::new();
        let mut taken = vec![false; g.nodes.len()];
        let mut transpose = Vec::new();
        for (i, n) in g.nodes.iter().enumerate() {
            let found = match &n.op {
                Op::MatMul { trans_a: false, trans_b: false } => {
                    self.key_transposed(i, &taken).inspect(|_| stats.matmul_trans_b += 1)
                }
                Op::Mul | Op::Scale { .. } => self.erf_gelu(i, &taken).inspect(|_| stats.gelu += 1),
                Op::Gemm { .. } => self.gemm_linear(i, &taken).map(|(group, w, biased, collapsed)| {
                    transpose.extend(w);
                    stats.linear += 1;
                    stats.linear_bias += usize::from(biased);
                    stats.gemm += 1;
                    stats.gemm_reshapes += usize::from(collapsed);
                    group
                }),
                Op::Add => self.linear_bias(i, &taken).map(|(group, w)| {
                    transpose.push(w);
                    stats.linear += 1;
                    stats.linear_bias += 1;
                    group
                }),
                _ => None,
            };
            if let Some(group) = found {
                take(i, group, &mut taken, &mut groups);
            }
        }
        for (i, n) in g.nodes.iter().enumerate() {
            if taken[i] || n.op != (Op::MatMul { trans_a: false, trans_b: false }) {
                continue;
            }
            if let Some(w) = self.constant_weight(i) {
                let group = Group::one(vec![], &n.name, Op::Linear, &[n.inputs[0], w]);
                transpose.push(w);
                stats.linear += 1;
                take(i, group, &mut taken, &mut groups);
            }
        }
        (groups, transpose)
    }

    /// `MatMul(a, Permute(b, [0, 2, 3, 1]))` rooted at node `i` → `MatMul { trans_b }(a,
    /// Permute(b, [0, 2, 1, 3]))`.
    fn key_transposed(&self, i: usize, taken: &[bool]) -> Option<Group> {
        let g = self.g;
        let n = &g.nodes[i];
        let p = self.sole(n.inputs[1], i).filter(|&p| !taken[p])?;
        if g.nodes[p].op != (Op::Permute { perm: vec![0, 2, 3, 1] }) {
            return None;
        }
        let split = Emit {
            name: g.nodes[p].name.clone(),
            op: Op::Permute { perm: vec![0, 2, 1, 3] },
            inputs: vec![Src::Old(g.nodes[p].inputs[0])],
        };
        let product = Emit {
            name: n.name.clone(),
            op: Op::MatMul { trans_a: false, trans_b: true },
            inputs: vec![Src::Old(n.inputs[0]), Src::Emitted(0)],
        };
        Some(Group { absorbed: vec![p], emit: vec![split, product], stands_for: None })
    }

    /// The constant weight `w` of node `i` (`x @ w`, `x` of rank ≥ 2 seen as `xm`), `[K, N]`
    /// when `kn` (then the node must be its sole reader, and the graph must not return it),
    /// else `[N, K]`; `None` unless the device has a `Linear` kernel for `x` and the `[N, K]` form
    /// (with `bias`, when given).
    fn linear_weight(
        &self,
        i: usize,
        x: ValueId,
        xm: &TensorMeta,
        w: ValueId,
        kn: bool,
        bias: Option<ValueId>,
    ) -> Option<ValueId> {
        let g = self.g;
        let wm = g.meta(w);
        let ValueKind::Constant(_) = g.values[w.0].kind else { return None };
        if wm.shape.rank() != 2 || xm.shape.rank() < 2 || xm.dtype != wm.dtype || !float(xm.dtype) || x == w {
            return None;
        }
        if kn && (self.consumers[w.0] != [super::ir::NodeId(i)] || g.outputs.contains(&w)) {
            return None;
        }
        let [r, c] = [wm.shape.dims()[0], wm.shape.dims()[1]];
        let (nn, k) = if kn { (c, r) } else { (r, c) };
        if xm.shape.last() != k {
            return None;
        }
        let mut metas = vec![xm.clone(), TensorMeta::new(wm.dtype, [nn, k])];
        metas.extend(bias.map(|b| g.meta(b).clone()));
        (self.kernel_of)(&Op::Linear, &metas)?;
        Some(w)
    }

    /// [`Self::linear_weight`] of a `MatMul` node `i` with no bias.
    fn constant_weight(&self, i: usize) -> Option<ValueId> {
        let n = &self.g.nodes[i];
        self.linear_weight(i, n.inputs[0], self.g.meta(n.inputs[0]), n.inputs[1], true, None)
    }

    /// `Add(MatMul(x, W), b)` or `Add(b, MatMul(x, W))` rooted at the `Add`, node `i` →
    /// `Linear(x, Wᵀ, b)`; the group and `W`.
    fn linear_bias(&self, i: usize, taken: &[bool]) -> Option<(Group, ValueId)> {
        let g = self.g;
        let n = &g.nodes[i];
        let (a, b) = (n.inputs[0], n.inputs[1]);
        let matmul = |v: ValueId| {
            self.sole(v, i).filter(|&p| !taken[p] && g.nodes[p].op == (Op::MatMul { trans_a: false, trans_b: false }))
        };
        let (mm, bias) = match (matmul(a), matmul(b)) {
            (Some(mm), _) if self.is_bias(b, a) => (mm, b),
            (_, Some(mm)) if self.is_bias(a, b) => (mm, a),
            _ => return None,
        };
        let x = g.nodes[mm].inputs[0];
        let w = self.linear_weight(mm, x, g.meta(x), g.nodes[mm].inputs[1], true, Some(bias))?;
        Some((Group::one(vec![mm], &n.name, Op::Linear, &[x, w, bias]), w))
    }

    /// `Gemm(a, W, c)` rooted at node `i`, with `alpha` and `beta` 1, no transposed `a`, a
    /// constant `W` (`[K, N]`, or `[N, K]` with `trans_b`) and a constant `[N]` bias `c` or
    /// none → `Linear`; with the reshapes around it where [`Self::rows_split`] finds them.
    /// The group, the weight to transpose, whether it took a bias and the reshapes.
    fn gemm_linear(&self, i: usize, taken: &[bool]) -> Option<(Group, Option<ValueId>, bool, bool)> {
        let g = self.g;
        let n = &g.nodes[i];
        let Op::Gemm { trans_a: false, trans_b, alpha, beta } = n.op else { return None };
        let bias = n.inputs.get(2).copied();
        if alpha != 1.0 || bias.is_some_and(|c| beta != 1.0 || !self.is_bias(c, n.outputs[0])) {
            return None;
        }
        let around = self.rows_split(i, taken);
        let a = n.inputs[0];
        let (x, xm) = match &around {
            Some(r) => (r.x, TensorMeta::new(g.meta(a).dtype, r.x_dims.clone())),
            None => (a, g.meta(a).clone()),
        };
        let w = self.linear_weight(i, x, &xm, n.inputs[1], !trans_b, bias)?;
        let transpose = (!trans_b).then_some(w);
        let Some(r) = around else {
            let ins: Vec<ValueId> = [a, w].into_iter().chain(bias).collect();
            return Some((Group::one(vec![], &n.name, Op::Linear, &ins), transpose, bias.is_some(), false));
        };
        let (inner, outer) = (&g.nodes[r.inner], &g.nodes[r.outer]);
        let dims = |d: &[usize]| d.iter().map(|&v| v as isize).collect::<Vec<isize>>();
        let mut emit = Vec::new();
        let xs = if g.meta(x).shape.dims() == r.x_dims.as_slice() {
            Src::Old(x)
        } else {
            let op = Op::Reshape { shape: dims(&r.x_dims) };
            emit.push(Emit { name: inner.name.clone(), op, inputs: vec![Src::Old(x)] });
            Src::Emitted(0)
        };
        let out_dims = g.meta(outer.outputs[0]).shape.dims();
        let split_cols = out_dims.len() != r.x_dims.len();
        // The last node is named as the value it stands for, which may be a graph output.
        let name = if split_cols { n.name.clone() } else { outer.name.clone() };
        let inputs = [xs, Src::Old(w)].into_iter().chain(bias.map(Src::Old)).collect();
        emit.push(Emit { name, op: Op::Linear, inputs });
        if split_cols {
            let y = Src::Emitted(emit.len() - 1);
            emit.push(Emit { name: outer.name.clone(), op: Op::Reshape { shape: dims(out_dims) }, inputs: vec![y] });
        }
        let group = Group { absorbed: vec![r.inner, r.outer], emit, stands_for: Some(outer.outputs[0]) };
        Some((group, transpose, bias.is_some(), true))
    }

    /// The reshapes around the 2-D product node `i` (`[M, K]` → `[M, N]`) that ONNX Runtime
    /// puts there: `Reshape(x, [M, K])` before it and a `Reshape` to `L ++ R` after it, where
    /// the leading dims `L` (the longest prefix) multiply to `M` and so `R` to `N` (e.g. `[B,
    /// S, N]`, or `[B, S, H, D]` where a head split was merged in). Each read only there and
    /// not a graph output. The product is then `Linear` of `x` seen as `L ++ [K]`, reshaped
    /// to `L ++ R` where `R` is not `[N]`.
    fn rows_split(&self, i: usize, taken: &[bool]) -> Option<RowsSplit> {
        let g = self.g;
        let n = &g.nodes[i];
        let reshape = |p: usize| !taken[p] && matches!(g.nodes[p].op, Op::Reshape { .. });
        let inner = self.sole(n.inputs[0], i).filter(|&p| reshape(p))?;
        let out = n.outputs[0];
        let [super::ir::NodeId(outer)] = self.consumers[out.0][..] else { return None };
        if !reshape(outer) || g.outputs.contains(&out) {
            return None;
        }
        let &[m, k] = g.meta(n.inputs[0]).shape.dims() else { return None };
        let o = g.meta(g.nodes[outer].outputs[0]).shape.dims();
        if m == 0 {
            return None;
        }
        let mut lead = None;
        let mut prod = 1usize;
        for (j, &d) in o.iter().enumerate() {
            prod = prod.checked_mul(d)?;
            if prod == m {
                lead = Some(j + 1);
            } else if prod > m {
                break;
            }
        }
        let lead = lead.filter(|&l| l < o.len())?;
        let x_dims = o[..lead].iter().copied().chain([k]).collect();
        Some(RowsSplit { x: g.nodes[inner].inputs[0], inner, outer, x_dims })
    }

    /// Whether `b` is a constant `[N]` bias for the product `y` (`[.., N]`), of its dtype.
    fn is_bias(&self, b: ValueId, y: ValueId) -> bool {
        let g = self.g;
        let (bm, ym) = (g.meta(b), g.meta(y));
        matches!(g.values[b.0].kind, ValueKind::Constant(_))
            && bm.dtype == ym.dtype
            && ym.shape.rank() >= 1
            && bm.shape.dims() == [ym.shape.last()]
    }
}

/// The reshapes around a 2-D `Gemm` (see [`Matcher::rows_split`]).
struct RowsSplit {
    /// What the first reshape flattens.
    x: ValueId,
    /// The reshape nodes before and after the product.
    inner: usize,
    outer: usize,
    /// `L ++ [K]`: how the `Linear` sees `x`.
    x_dims: Vec<usize>,
}

/// The factors of a product tree (`Mul`s and `Scale`s read only by the tree).
struct Product {
    /// The operands that are not such products, in order.
    leaves: Vec<ValueId>,
    /// The product of the `Scale` factors.
    factor: f32,
    /// The tree's nodes below its root.
    nodes: Vec<usize>,
}

impl Matcher<'_> {
    /// The product tree rooted at node `i` (at most 4 nodes deep).
    fn product(&self, i: usize, taken: &[bool]) -> Product {
        let mut p = Product { leaves: Vec::new(), factor: 1.0, nodes: Vec::new() };
        self.factors(i, 0, taken, &mut p);
        p
    }

    fn factors(&self, i: usize, depth: usize, taken: &[bool], p: &mut Product) {
        let n = &self.g.nodes[i];
        if let Op::Scale { factor } = n.op {
            p.factor *= factor;
        }
        for &v in &n.inputs {
            let inner = self
                .sole(v, i)
                .filter(|&q| depth < 4 && !taken[q] && matches!(self.g.nodes[q].op, Op::Mul | Op::Scale { .. }));
            match inner {
                Some(q) if self.g.meta(v) == self.g.meta(n.outputs[0]) => {
                    p.nodes.push(q);
                    self.factors(q, depth + 1, taken, p);
                }
                _ => p.leaves.push(v),
            }
        }
    }

    /// `x · 0.5 · (1 + erf(x · (1/√2)))` rooted at node `i` (a `Mul` or `Scale`) →
    /// `Gelu(Erf)(x)`.
    fn erf_gelu(&self, i: usize, taken: &[bool]) -> Option<Group> {
        let g = self.g;
        let n = &g.nodes[i];
        let p = self.product(i, taken);
        if p.factor != 0.5 || p.leaves.len() != 2 {
            return None;
        }
        let out = g.meta(n.outputs[0]);
        let (x, inner) = [(p.leaves[0], p.leaves[1]), (p.leaves[1], p.leaves[0])]
            .into_iter()
            .find_map(|(x, e)| Some((x, self.one_plus_erf(x, e, &p, i)?)))?;
        let gelu = Op::Gelu(GeluApprox::Erf);
        if g.meta(x) != out || !float(out.dtype) || (self.kernel_of)(&gelu, std::slice::from_ref(out)).is_none() {
            return None;
        }
        let mut absorbed = p.nodes;
        absorbed.extend(inner);
        if absorbed.iter().any(|&a| taken[a]) {
            return None;
        }
        Some(Group::one(absorbed, &n.name, gelu, &[x]))
    }

    /// The nodes of `e = 1 + erf(x · (1/√2))` (`Add`, `Erf`, `Scale`), each read only by
    /// the next, `e` only by the product tree `p` rooted at `root`.
    fn one_plus_erf(&self, x: ValueId, e: ValueId, p: &Product, root: usize) -> Option<[usize; 3]> {
        let g = self.g;
        let reader = std::iter::once(root).chain(p.nodes.iter().copied()).find(|&r| g.nodes[r].inputs.contains(&e))?;
        let add = self.sole(e, reader)?;
        let Op::Add = g.nodes[add].op else { return None };
        let (a, b) = (g.nodes[add].inputs[0], g.nodes[add].inputs[1]);
        let erf_out = match (scalar(g, a), scalar(g, b)) {
            (_, Some(1.0)) => a,
            (Some(1.0), _) => b,
            _ => return None,
        };
        if g.meta(erf_out) != g.meta(e) {
            return None;
        }
        let erf = self.sole(erf_out, add).filter(|&q| g.nodes[q].op == Op::Erf)?;
        let sc = self.sole(g.nodes[erf].inputs[0], erf)?;
        let Op::Scale { factor } = g.nodes[sc].op else { return None };
        // 1/√2 as the exporter could write it in `x`'s dtype (√2 rounded, then inverted).
        let eps = g.meta(x).dtype.epsilon() as f32;
        let within = (factor - std::f32::consts::FRAC_1_SQRT_2).abs() <= eps;
        (within && g.nodes[sc].inputs[0] == x).then_some([add, erf, sc])
    }
}
