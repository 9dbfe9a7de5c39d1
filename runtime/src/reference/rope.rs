//! Rope's reference kernel and the indexing every host tier shares: which token of
//! `positions` a row of x belongs to, and the positions checked against the tables.

use super::operands::{In, Out, load_f64, load_i64, store_f64};
use crate::kernel::{KernelError, KernelResult};
use crate::op::AttentionLayout;

/// The positions as row indices of tables of `rows` rows: a position outside
/// `[0, rows)` is [`KernelError::IndexOutOfRange`] (no counting from the end).
pub fn rope_positions(pos: &In, rows: usize) -> Result<Vec<usize>, KernelError> {
    load_i64(pos)?
        .into_iter()
        .map(|p| {
            if p < 0 || p >= rows as i64 {
                Err(KernelError::IndexOutOfRange { index: p, len: rows })
            } else {
                Ok(p as usize)
            }
        })
        .collect()
}

/// The token (`b · S + s`, an index into `positions`) of row `r` (of D features, in
/// memory order) of a contiguous x of `dims` held in `layout`.
pub fn rope_token(layout: AttentionLayout, dims: &[usize], r: usize) -> usize {
    match layout {
        // [B, H, S, D]: row r = (b·H + h)·S + s.
        AttentionLayout::Bnsd => {
            let (h, s) = (dims[1], dims[2]);
            (r / (h * s)) * s + r % s
        }
        // [B, S, H, D]: row r = (b·S + s)·H + h.
        AttentionLayout::Bsnd => r / dims[2],
    }
}

/// The index pairs one rotation turns together, as `(first, second)` for pair `i` of a
/// row of `d` features: `(i, i + d/2)` rotate-half, `(2i, 2i + 1)` interleaved.
pub fn rope_pair(interleaved: bool, d: usize, i: usize) -> (usize, usize) {
    if interleaved { (2 * i, 2 * i + 1) } else { (i, i + d / 2) }
}

/// Rope in f64: each pair `(a, b)` of a row becomes `(a·c − b·s, b·c + a·s)` with `c`, `s`
/// the tables' entries at the token's position.
pub fn rope(ins: &[In], o: &mut Out, interleaved: bool, layout: AttentionLayout) -> KernelResult {
    let (x, cos, sin) = (load_f64(&ins[0])?, load_f64(&ins[1])?, load_f64(&ins[2])?);
    let d = ins[0].dims[3];
    let half = d / 2;
    let pos = rope_positions(&ins[3], ins[1].dims[0])?;
    let mut out = vec![0.0; x.len()];
    if d == 0 {
        return store_f64(o, &out);
    }
    for (r, (xr, or)) in x.chunks(d).zip(out.chunks_mut(d)).enumerate() {
        let p = pos[rope_token(layout, ins[0].dims, r)];
        for i in 0..half {
            let (c, s) = (cos[p * half + i], sin[p * half + i]);
            let (ia, ib) = rope_pair(interleaved, d, i);
            or[ia] = xr[ia] * c - xr[ib] * s;
            or[ib] = xr[ib] * c + xr[ia] * s;
        }
    }
    store_f64(o, &out)
}
