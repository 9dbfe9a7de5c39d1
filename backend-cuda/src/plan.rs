//! Host-side launch planning: the parameter block every generated kernel receives, dim
//! collapsing, broadcast strides, and the cuBLAS call plan. Pure functions (no GPU).

use runtime::{GeluApprox, Op};

/// Most dimensions a kernel indexes (after collapsing).
pub const MAX_RANK: usize = 8;

/// The parameter block passed by value to every generated kernel; mirrors `struct P` in
/// the CUDA prelude (see [`crate::kernels::source`]). Field meaning depends on the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KParams {
    /// Work items (output elements or rows).
    pub n: i64,
    /// Dimensions used in `dims`.
    pub rank: i64,
    pub dims: [i64; MAX_RANK],
    pub sa: [i64; MAX_RANK],
    pub sb: [i64; MAX_RANK],
    pub sc: [i64; MAX_RANK],
    pub i: [i64; 8],
    pub f: [f64; 4],
}

/// Unary op codes of the generated kernels.
pub fn unary_code(op: &Op) -> Option<(i64, f64)> {
    Some(match op {
        Op::Relu => (0, 1.0),
        Op::Gelu(GeluApprox::Erf) => (1, 1.0),
        Op::Gelu(GeluApprox::Tanh) => (2, 1.0),
        Op::Tanh => (3, 1.0),
        Op::Erf => (4, 1.0),
        Op::Exp => (5, 1.0),
        Op::Sqrt => (6, 1.0),
        Op::Scale { factor } => (7, *factor as f64),
        Op::Neg => (8, 1.0),
        Op::Sigmoid => (9, 1.0),
        Op::Silu => (10, 1.0),
        _ => return None,
    })
}

/// Binary op codes of the generated kernels.
pub fn binary_code(op: &Op) -> Option<i64> {
    Some(match op {
        Op::Add => 0,
        Op::Sub => 1,
        Op::Mul => 2,
        Op::Div => 3,
        Op::Pow => 4,
        _ => return None,
    })
}

pub fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

/// Row-major strides in elements.
pub fn contiguous_strides(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; dims.len()];
    let mut acc = 1i64;
    for i in (0..dims.len()).rev() {
        s[i] = acc;
        acc = acc.saturating_mul(dims[i].max(1) as i64);
    }
    s
}

/// Strides reading a contiguous operand of `dims` broadcast to `out` (0 on broadcast
/// dimensions), aligned to the right.
pub fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<i64> {
    let own = contiguous_strides(dims);
    let lead = out.len().saturating_sub(dims.len());
    (0..out.len()).map(|i| if i < lead || dims[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

/// Drops size-1 dimensions and merges neighbours that are contiguous with each other in
/// every stride list. The element order is unchanged.
pub fn collapse(dims: &[usize], lists: &[Vec<i64>]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let mut od: Vec<usize> = Vec::new();
    let mut ol: Vec<Vec<i64>> = vec![Vec::new(); lists.len()];
    for (d, &n) in dims.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let mergeable =
            !od.is_empty() && lists.iter().zip(&ol).all(|(l, o)| o.last().is_some_and(|&prev| prev == l[d] * n as i64));
        if mergeable {
            let last = od.len() - 1;
            od[last] *= n;
            for (l, o) in lists.iter().zip(ol.iter_mut()) {
                let k = o.len() - 1;
                o[k] = l[d];
            }
        } else {
            od.push(n);
            for (l, o) in lists.iter().zip(ol.iter_mut()) {
                o.push(l[d]);
            }
        }
    }
    (od, ol)
}

fn put(dst: &mut [i64; MAX_RANK], src: &[i64]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
}

fn rank_ok(what: &str, r: usize) -> Result<(), String> {
    if r > MAX_RANK { Err(format!("{what} has {r} dimensions after collapsing; at most {MAX_RANK}")) } else { Ok(()) }
}

/// Output `out`, inputs read through `lists` (one stride list per input, over `out`).
pub fn indexed(out: &[usize], lists: &[Vec<i64>]) -> Result<KParams, String> {
    let (d, l) = collapse(out, lists);
    rank_ok("the operand", d.len())?;
    let mut p = KParams { n: numel(out) as i64, rank: d.len() as i64, ..Default::default() };
    put(&mut p.dims, &d.iter().map(|&x| x as i64).collect::<Vec<_>>());
    let slots = [&mut p.sa, &mut p.sb, &mut p.sc];
    for (slot, list) in slots.into_iter().zip(&l) {
        put(slot, list);
    }
    Ok(p)
}

/// Element-wise binary op with broadcasting.
pub fn binary(op: &Op, a: &[usize], b: &[usize], out: &[usize]) -> Result<KParams, String> {
    let code = binary_code(op).ok_or("not a binary op")?;
    let mut p = indexed(out, &[broadcast_strides(a, out), broadcast_strides(b, out)])?;
    p.i[0] = code;
    Ok(p)
}

/// `a == b` with broadcasting (u8 output).
pub fn equal(a: &[usize], b: &[usize], out: &[usize]) -> Result<KParams, String> {
    indexed(out, &[broadcast_strides(a, out), broadcast_strides(b, out)])
}

/// `condition ? x : y` with the three operands broadcast to `out` (strides sa, sb, sc).
pub fn select(c: &[usize], x: &[usize], y: &[usize], out: &[usize]) -> Result<KParams, String> {
    indexed(out, &[broadcast_strides(c, out), broadcast_strides(x, out), broadcast_strides(y, out)])
}

/// Concat: per input, a placing copy of its elements (strides sa) to the output's
/// (strides sb, over the input's dims; the launch offsets the output to the input's block
/// along `axis`).
pub fn concat<'a>(ins: impl Iterator<Item = &'a [usize]>, out: &[usize], axis: usize) -> Result<Vec<KParams>, String> {
    let os = contiguous_strides(out);
    ins.map(|d| {
        if d.len() != out.len() || axis >= d.len() {
            return Err("a concat input differs from the output in rank".to_string());
        }
        indexed(d, &[contiguous_strides(d), os.clone()])
    })
    .collect()
}

/// A resolved Slice of a contiguous operand of `dims`: the copy's parameters (strides
/// `step * stride`, negative for a backward axis) and the element offset of the window's
/// first element.
pub fn slice(dims: &[usize], w: &[runtime::op::SliceAxis]) -> Result<(KParams, u64), String> {
    if w.len() != dims.len() {
        return Err("the slice window differs from the operand in rank".into());
    }
    let st = contiguous_strides(dims);
    let first: i64 = w.iter().zip(&st).map(|(a, s)| a.start as i64 * s).sum();
    let out: Vec<usize> = w.iter().map(|a| a.len).collect();
    let strides: Vec<i64> = w.iter().zip(&st).map(|(a, s)| a.step * s).collect();
    Ok((indexed(&out, &[strides])?, first as u64))
}

/// Element-wise unary op (contiguous).
pub fn unary(op: &Op, n: usize) -> Result<KParams, String> {
    let (code, factor) = unary_code(op).ok_or("not a unary op")?;
    let mut p = KParams { n: n as i64, ..Default::default() };
    p.i[0] = code;
    p.f[0] = factor;
    Ok(p)
}

/// `gelu(x + bias)` with `bias` over the last axis of length `cols`.
pub fn bias_gelu(approx: GeluApprox, n: usize, cols: usize) -> KParams {
    let mut p = KParams { n: n as i64, ..Default::default() };
    p.i[0] = if approx == GeluApprox::Erf { 1 } else { 2 };
    p.i[2] = cols.max(1) as i64;
    p
}

/// Softmax over `axis`: `n` = rows, `i = [outer, len, inner]`.
pub fn softmax(dims: &[usize], axis: usize) -> KParams {
    let outer = numel(&dims[..axis]);
    let len = dims[axis];
    let inner = numel(&dims[axis + 1..]);
    let mut p = KParams { n: (outer * inner) as i64, ..Default::default() };
    p.i[0] = outer as i64;
    p.i[1] = len as i64;
    p.i[2] = inner as i64;
    p
}

/// (Add+)LayerNorm over the last axis: `n` = rows, `i = [rows, width, _, residual]`.
pub fn layer_norm(dims: &[usize], eps: f32, residual: bool) -> KParams {
    let width = dims.last().copied().unwrap_or(1);
    let rows = numel(dims).checked_div(width).unwrap_or(0);
    let mut p = KParams { n: rows as i64, ..Default::default() };
    p.i[0] = rows as i64;
    p.i[1] = width as i64;
    p.i[3] = residual as i64;
    p.f[0] = eps as f64;
    p
}

/// (Add)RmsNorm over the last axis of `dims`: `n` = rows, `i = [rows, width, _, residual,
/// weight]`, `f[0]` = eps.
pub fn rms_norm(dims: &[usize], eps: f32, residual: bool, weight: bool) -> KParams {
    let mut p = layer_norm(dims, eps, residual);
    p.i[4] = weight as i64;
    p
}

/// SwiGlu of an output of `n` elements whose last axis is `half` long: `i = [_, half,
/// two inputs]`.
pub fn swiglu(n: usize, half: usize, two: bool) -> KParams {
    let mut p = KParams { n: n as i64, ..Default::default() };
    p.i[1] = half.max(1) as i64;
    p.i[2] = two as i64;
    p
}

/// ReduceSum/Mean over the normalised `axes`: kept dims in `dims`/`sa`, reduced sizes in
/// `sb` and strides in `sc`, `i = [reduced rank, count, mean]`.
pub fn reduce(dims: &[usize], axes: &[usize], mean: bool) -> Result<KParams, String> {
    let st = contiguous_strides(dims);
    let kept: Vec<usize> = (0..dims.len()).filter(|a| !axes.contains(a)).collect();
    let kd: Vec<usize> = kept.iter().map(|&a| dims[a]).collect();
    let ks: Vec<i64> = kept.iter().map(|&a| st[a]).collect();
    let rd: Vec<usize> = axes.iter().map(|&a| dims[a]).collect();
    let rs: Vec<i64> = axes.iter().map(|&a| st[a]).collect();
    let (kd2, ks2) = collapse(&kd, &[ks]);
    let (rd2, rs2) = collapse(&rd, &[rs]);
    rank_ok("the kept part", kd2.len())?;
    rank_ok("the reduced part", rd2.len())?;
    let mut p = KParams { n: numel(&kd) as i64, rank: kd2.len() as i64, ..Default::default() };
    put(&mut p.dims, &kd2.iter().map(|&x| x as i64).collect::<Vec<_>>());
    put(&mut p.sa, &ks2[0]);
    put(&mut p.sb, &rd2.iter().map(|&x| x as i64).collect::<Vec<_>>());
    put(&mut p.sc, &rs2[0]);
    p.i[0] = rd2.len() as i64;
    p.i[1] = numel(&rd) as i64;
    p.i[2] = mean as i64;
    Ok(p)
}

/// Gather along `axis`: `i = [outer, axis len, count, inner]`.
pub fn gather(data: &[usize], axis: usize, count: usize) -> KParams {
    let outer = numel(&data[..axis]);
    let len = data[axis];
    let inner = numel(&data[axis + 1..]);
    let mut p = KParams { n: (outer * count * inner) as i64, ..Default::default() };
    p.i[0] = outer as i64;
    p.i[1] = len as i64;
    p.i[2] = count as i64;
    p.i[3] = inner as i64;
    p
}

/// Permute of a contiguous input: output dims and the input strides that read them.
pub fn permute(dims: &[usize], perm: &[usize]) -> Result<KParams, String> {
    let st = contiguous_strides(dims);
    let out: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let s: Vec<i64> = perm.iter().map(|&p| st[p]).collect();
    indexed(&out, &[s])
}

/// A matrix product in the form every matmul kernel (and cuBLAS) takes.
#[derive(Clone, Debug, PartialEq)]
pub struct MatmulPlan {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// op(a) is the transpose of the stored matrix.
    pub trans_a: bool,
    pub trans_b: bool,
    /// Row length (elements) of the stored a / b matrices.
    pub lda: usize,
    pub ldb: usize,
    /// Batch dims of the output (collapsed) and each operand's batch strides (elements).
    pub batch_dims: Vec<usize>,
    pub batch_sa: Vec<i64>,
    pub batch_sb: Vec<i64>,
    pub alpha: f32,
    pub beta: f32,
    /// Strides of the third operand (c or bias) over `[m, n]`, when there is one.
    pub c_strides: Option<(i64, i64)>,
}

impl MatmulPlan {
    /// Plans MatMul / Gemm / Linear from the input dims and the output dims.
    pub fn new(op: &Op, ins: &[&[usize]], out: &[usize]) -> Result<MatmulPlan, String> {
        let mat = |d: &[usize]| (d[d.len() - 2], d[d.len() - 1]);
        match op {
            Op::MatMul { trans_a, trans_b } | Op::Gemm { trans_a, trans_b, .. } => {
                let (a, b) = (ins[0], ins[1]);
                let (ar, ac) = mat(a);
                let (br, bc) = mat(b);
                let r = out.len();
                let (m, n) = (out[r - 2], out[r - 1]);
                let k = if *trans_a { ar } else { ac };
                let ob = &out[..r - 2];
                let sa: Vec<i64> =
                    broadcast_strides(&a[..a.len() - 2], ob).iter().map(|s| s * (ar * ac) as i64).collect();
                let sb: Vec<i64> =
                    broadcast_strides(&b[..b.len() - 2], ob).iter().map(|s| s * (br * bc) as i64).collect();
                let (bd, bl) = collapse(ob, &[sa, sb]);
                rank_ok("the batch", bd.len())?;
                let (alpha, beta, c_strides) = match op {
                    Op::Gemm { alpha, beta, .. } => {
                        let cs = ins.get(2).map(|c| {
                            let s = broadcast_strides(c, &[m, n]);
                            (s[0], s[1])
                        });
                        (*alpha, if cs.is_some() { *beta } else { 0.0 }, cs)
                    }
                    _ => (1.0, 0.0, None),
                };
                Ok(MatmulPlan {
                    m,
                    n,
                    k,
                    trans_a: *trans_a,
                    trans_b: *trans_b,
                    lda: ac,
                    ldb: bc,
                    batch_dims: bd,
                    batch_sa: bl[0].clone(),
                    batch_sb: bl[1].clone(),
                    alpha,
                    beta,
                    c_strides,
                })
            }
            Op::Linear => {
                let (x, w) = (ins[0], ins[1]);
                let k = *x.last().ok_or("x has no dimensions")?;
                let n = w[0];
                let m = numel(&x[..x.len() - 1]);
                Ok(MatmulPlan {
                    m,
                    n,
                    k,
                    trans_a: false,
                    trans_b: true,
                    lda: k,
                    ldb: k,
                    batch_dims: vec![],
                    batch_sa: vec![],
                    batch_sb: vec![],
                    alpha: 1.0,
                    beta: if ins.len() > 2 { 1.0 } else { 0.0 },
                    c_strides: (ins.len() > 2).then_some((0, 1)),
                })
            }
            _ => Err(format!("{} is not a matrix product", op.name())),
        }
    }

    pub fn batch(&self) -> usize {
        numel(&self.batch_dims)
    }

    /// Strides of op(a) along m and k, and of op(b) along k and n (elements).
    pub fn operand_strides(&self) -> (i64, i64, i64, i64) {
        let (am, ak) = if self.trans_a { (1, self.lda as i64) } else { (self.lda as i64, 1) };
        let (bk, bn) = if self.trans_b { (1, self.ldb as i64) } else { (self.ldb as i64, 1) };
        (am, ak, bk, bn)
    }

    /// The parameter block of the NVRTC matmul kernels.
    pub fn params(&self) -> KParams {
        let mut p = KParams {
            n: (self.batch() * self.m * self.n) as i64,
            rank: self.batch_dims.len() as i64,
            ..Default::default()
        };
        put(&mut p.dims, &self.batch_dims.iter().map(|&x| x as i64).collect::<Vec<_>>());
        put(&mut p.sa, &self.batch_sa);
        put(&mut p.sb, &self.batch_sb);
        let (am, ak, bk, bn) = self.operand_strides();
        p.i = [self.m as i64, self.n as i64, self.k as i64, am, ak, bk, bn, 0];
        if let Some((cm, cn)) = self.c_strides {
            p.sc[0] = cm;
            p.sc[1] = cn;
            p.sc[2] = 1;
        }
        p.f[0] = self.alpha as f64;
        p.f[1] = self.beta as f64;
        p
    }

    /// cuBLAS calls: each `(offset_a, offset_b, offset_c, count, stride_a, stride_b)` is one
    /// strided-batched GEMM over `count` matrices (offsets and strides in elements;
    /// the output stride is `m * n`).
    pub fn blas_calls(&self) -> Vec<(i64, i64, i64, usize, i64, i64)> {
        let mn = (self.m * self.n) as i64;
        let r = self.batch_dims.len();
        if r == 0 {
            return vec![(0, 0, 0, 1, 0, 0)];
        }
        let count = self.batch_dims[r - 1];
        let (sa_in, sb_in) = (self.batch_sa[r - 1], self.batch_sb[r - 1]);
        let outer = &self.batch_dims[..r - 1];
        let mut calls = Vec::with_capacity(numel(outer));
        for lin in 0..numel(outer) {
            let (mut rest, mut oa, mut ob) = (lin, 0i64, 0i64);
            for d in (0..outer.len()).rev() {
                let i = rest % outer[d];
                rest /= outer[d];
                oa += i as i64 * self.batch_sa[d];
                ob += i as i64 * self.batch_sb[d];
            }
            calls.push((oa, ob, lin as i64 * count as i64 * mn, count, sa_in, sb_in));
        }
        calls
    }
}

/// Attention: `i = [B*H, S, T, D, Dv, mask mode, H, 2·G + causal]`, mask strides over
/// `[B, H, S, T]` in `sc`, `f[0]` = scale. Mask mode: 0 none, 1 u8 keep-mask, 2 additive
/// (q's dtype). `G = H / H_kv` query heads share a kv head (grouped-query; k's heads are
/// `k[1]`); causal: query `i` sees keys `j <= i + T - S`.
pub fn attention(
    q: &[usize],
    k: &[usize],
    v: &[usize],
    mask: Option<(&[usize], bool)>,
    scale: Option<f32>,
    causal: bool,
) -> KParams {
    let (b, h, s, d) = (q[0], q[1], q[2], q[3]);
    let (t, dv) = (k[2], v[3]);
    let group = h.checked_div(k[1]).unwrap_or(1).max(1);
    let mut p = KParams { n: (b * h * s * dv) as i64, ..Default::default() };
    p.i = [(b * h) as i64, s as i64, t as i64, d as i64, dv as i64, 0, h as i64, 2 * group as i64 + i64::from(causal)];
    if let Some((md, is_u8)) = mask {
        p.i[5] = if is_u8 { 1 } else { 2 };
        put(&mut p.sc, &broadcast_strides(md, &[b, h, s, t]));
    }
    p.f[0] = scale.map_or(1.0 / (d.max(1) as f64).sqrt(), |x| x as f64);
    p
}

/// KvCacheWrite: one work item per element of the key rows `[N, KVH, D]`; i = [cache
/// slots NB · BS, row elements KVH · D].
pub fn kv_write(cache: &[usize], rows: &[usize]) -> KParams {
    let row = cache[2] * cache[3];
    let mut p = KParams { n: (rows[0] * row) as i64, ..Default::default() };
    p.i[0] = (cache[0] * cache[1]) as i64;
    p.i[1] = row as i64;
    p
}

/// PagedAttention: one work item per output element of q `[B, H, D]`; i = [H, D, BS,
/// KVH, MB, NB], f[0] = scale (default 1/sqrt(D)).
pub fn paged_attention(q: &[usize], cache: &[usize], tables: &[usize], scale: Option<f32>) -> KParams {
    let (h, d) = (q[1], q[2]);
    let mut p = KParams { n: (q[0] * h * d) as i64, ..Default::default() };
    p.i[..6].copy_from_slice(&[
        h as i64,
        d as i64,
        cache[1] as i64,
        cache[2] as i64,
        tables[1] as i64,
        cache[0] as i64,
    ]);
    p.f[0] = scale.map_or(1.0 / (d.max(1) as f64).sqrt(), |x| x as f64);
    p
}

/// Rope over a contiguous x of `dims` (`[B, H, S, D]` or, with `bsnd`, `[B, S, H, D]`) with
/// f32 tables of `positions` rows: `i = [B, H, S, D, P, bsnd, interleaved]`, one work item
/// per output element.
pub fn rope(dims: &[usize], positions: usize, bsnd: bool, interleaved: bool) -> KParams {
    let [b, h, s, d] = if bsnd { [dims[0], dims[2], dims[1], dims[3]] } else { [dims[0], dims[1], dims[2], dims[3]] };
    let mut p = KParams { n: numel(dims) as i64, ..Default::default() };
    p.i[..7].copy_from_slice(&[b, h, s, d, positions, usize::from(bsnd), usize::from(interleaved)].map(|v| v as i64));
    p
}

/// 1-D launch shape for `n` work items with `block` threads, at most `max_blocks` blocks.
pub fn grid_1d(n: usize, block: u32, max_blocks: u32) -> (u32, u32) {
    let blocks = n.div_ceil(block as usize).clamp(1, max_blocks.max(1) as usize);
    (blocks as u32, block)
}
