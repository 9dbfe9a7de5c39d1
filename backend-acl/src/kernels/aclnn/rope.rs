//! Rope composed of basic aclnn operators, on every SoC (the 910 included: no fused
//! rotary operator there, and no host tier needed): the cos and sin rows of the tokens'
//! positions gathered on the device (aclnnIndexSelect, which faults on a position outside
//! the tables: the error surfaces at the stream's synchronize), then, in f32 (x and the
//! tables cast where they are not), each half of every pair formed from strided views of
//! x and of the output — the halves `[.., :D/2]` and `[.., D/2:]` (rotate-half) or the
//! even and odd features (interleaved) — by aclnnMul and aclnnSub / aclnnAdd, the gathered
//! rows broadcast over the heads through a zero stride; the result cast to x's dtype.
//!
//! On Atlas A2/A3, [`rope_fused`]: the gathered rows laid out as full-width tables of x's
//! dtype (each half-row written twice by aclnnCast into strided views: `[c, c]` for
//! rotate-half, `[c0, c0, c1, c1, ..]` interleaved), then one aclnnRotaryPositionEmbedding
//! (mode 0 half, 1 interleave) with the tables as `[B, 1, S, D]` (bnsd) or `[B, S, 1, D]`
//! (bsnd).

use super::call::{BResult, Call, View, align512};
use super::data::index_select;
use super::elementwise::{add_sub, cast, mul_div};
use acl_sys::result::aclnn as nn;
use runtime::{AttentionLayout, DType};

/// `out = rope(x)` with the tables `cos`, `sin` (`[P, D/2]`) at `positions` (`[B, S]`).
pub(super) fn rope(c: &mut Call, ins: &[View], out: &View, interleaved: bool, layout: AttentionLayout) -> BResult<()> {
    let (x, cos, sin, pos) = (&ins[0], &ins[1], &ins[2], &ins[3]);
    let d = x.dims[3];
    let half = d / 2;
    let [b, _, s, _] = layout.bhsd(&x.dims);
    let tokens = b * s;
    let n = x.dims.iter().product::<usize>();
    let f32_bytes = |k: usize| align512(k * 4);
    let (x_f32, t_f32, o_f32) = (x.dtype == DType::F32, cos.dtype == DType::F32, out.dtype == DType::F32);
    // Scratch: the gathered rows (table dtype, then f32), x and y in f32, two products.
    let gathered = align512(tokens * half * cos.dtype.size());
    let sizes = [
        gathered,
        gathered,
        if t_f32 { 0 } else { f32_bytes(tokens * half) },
        if t_f32 { 0 } else { f32_bytes(tokens * half) },
        if x_f32 { 0 } else { f32_bytes(n) },
        if o_f32 { 0 } else { f32_bytes(n) },
        f32_bytes(n / 2),
        f32_bytes(n / 2),
    ];
    let base = c.scratch(sizes.iter().sum())?;
    let mut at = Vec::with_capacity(sizes.len());
    let mut off = base;
    for sz in sizes {
        at.push(off);
        off += sz as u64;
    }
    let idx = pos.reshaped(&[tokens]);
    let mut rows = Vec::with_capacity(2);
    for (i, table) in [cos, sin].into_iter().enumerate() {
        let g = View::contiguous(at[i], table.dtype, &[tokens, half]);
        index_select(c, table, 0, &idx, &g)?;
        rows.push(if t_f32 {
            g
        } else {
            let g32 = View::contiguous(at[2 + i], DType::F32, &[tokens, half]);
            cast(c, &g, DType::F32, &g32)?;
            g32
        });
    }
    let x32 = if x_f32 {
        x.clone()
    } else {
        let v = View::contiguous(at[4], DType::F32, &x.dims);
        cast(c, x, DType::F32, &v)?;
        v
    };
    let y32 = if o_f32 { out.clone() } else { View::contiguous(at[5], DType::F32, &out.dims) };
    // Views of `[B, H, S, D/2]` in x's layout: the two halves of the pairs, and a gathered
    // table row per (batch, token), the same for every head.
    let halves = |v: &View| {
        let (step, second) = if interleaved { (2, 1) } else { (1, half) };
        let mut a = v.clone();
        a.dims[3] = half;
        a.strides[3] *= step;
        let mut bv = a.clone();
        bv.offset += second * v.strides[3];
        (a, bv)
    };
    let per_head = |g: &View| {
        let mut v = g.clone();
        v.dims = x.dims[..3].iter().copied().chain([half]).collect();
        v.strides = match layout {
            AttentionLayout::Bnsd => vec![s * half, 0, half, 1],
            AttentionLayout::Bsnd => vec![s * half, half, 0, 1],
        };
        v
    };
    let (cv, sv) = (per_head(&rows[0]), per_head(&rows[1]));
    let ((xa, xb), (ya, yb)) = (halves(&x32), halves(&y32));
    let dims: Vec<usize> = xa.dims.clone();
    let (t1, t2) = (View::contiguous(at[6], DType::F32, &dims), View::contiguous(at[7], DType::F32, &dims));
    // ya = xa·c − xb·s; yb = xb·c + xa·s.
    for (p, q, sub, y) in [(&xa, &xb, true, &ya), (&xb, &xa, false, &yb)] {
        mul_div(c, false, p, &cv, &t1)?;
        mul_div(c, false, q, &sv, &t2)?;
        add_sub(c, sub, &t1, &t2, y)?;
    }
    if !o_f32 {
        cast(c, &y32, out.dtype, out)?;
    }
    Ok(())
}

/// Rope as one aclnnRotaryPositionEmbedding after gathering and widening the table rows
/// (see the module documentation); the kernel table offers it where the operator's
/// documented shapes allow.
pub(super) fn rope_fused(
    c: &mut Call,
    ins: &[View],
    out: &View,
    interleaved: bool,
    layout: AttentionLayout,
) -> BResult<()> {
    let (x, cos, sin, pos) = (&ins[0], &ins[1], &ins[2], &ins[3]);
    let d = x.dims[3];
    let half = d / 2;
    let [b, _, s, _] = layout.bhsd(&x.dims);
    let tokens = b * s;
    let gathered = align512(tokens * half * cos.dtype.size());
    let full = align512(tokens * d * x.dtype.size());
    let base = c.scratch(2 * gathered + 2 * full)?;
    let idx = pos.reshaped(&[tokens]);
    let table_dims = match layout {
        AttentionLayout::Bnsd => [b, 1, s, d],
        AttentionLayout::Bsnd => [b, s, 1, d],
    };
    let mut wide = Vec::with_capacity(2);
    for (i, table) in [cos, sin].into_iter().enumerate() {
        let g = View::contiguous(base + (i * gathered) as u64, table.dtype, &[tokens, half]);
        index_select(c, table, 0, &idx, &g)?;
        let w = View::contiguous(base + (2 * gathered + i * full) as u64, x.dtype, &[tokens, d]);
        let (step, second) = if interleaved { (2, 1) } else { (1, half) };
        for first in [true, false] {
            let mut v = w.clone();
            v.dims = vec![tokens, half];
            v.strides = vec![d, step];
            v.offset += if first { 0 } else { second };
            cast(c, &g, x.dtype, &v)?;
        }
        wide.push(w.reshaped(&table_dims));
    }
    let (tx, tc, ts, to) = (c.tensor(x)?, c.tensor(&wide[0])?, c.tensor(&wide[1])?, c.output(out)?);
    let mode = i64::from(interleaved);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::rotary_position_embedding_get_workspace_size(c.api, tx, tc, ts, mode, to) };
    c.run(p1, nn::rotary_position_embedding)
}
