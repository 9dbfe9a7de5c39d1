//! Rope in f32 for the generic and fast tiers: each row of D features (one token of one
//! head) turns its pairs by the angles of its token's position, read from the cos and sin
//! tables ([`runtime::op::rope_tables`]). The positions are checked against the tables
//! first (a position outside `[0, P)` is an error, as on the reference tier). The fast
//! tier splits the rows over its threads; the generic tier runs them in order.

use super::common::*;
use rayon::prelude::*;
use runtime::AttentionLayout;
use runtime::reference::rope::{rope_positions, rope_token};

/// Rows per parallel job of the fast tier.
const ROWS_PER_JOB: usize = 64;

pub fn rope(ins: &[In], out: &mut Out, interleaved: bool, layout: AttentionLayout, parallel: bool) -> KResult {
    let (x, cos, sin) = (load_f32(&ins[0])?, load_f32(&ins[1])?, load_f32(&ins[2])?);
    let dims = ins[0].dims;
    let d = dims[3];
    let half = d / 2;
    let pos = rope_positions(&ins[3], ins[1].dims[0])?;
    if x.len() < out.numel() || cos.len() < ins[1].dims[0] * half || sin.len() < cos.len() {
        return Err("Rope: operands shorter than their shapes".into());
    }
    with_f32_out(out, |o| {
        if d == 0 {
            return Ok(());
        }
        // Row `r` of x into `or`: its token's table rows, then the pairs.
        let row = |r: usize, or: &mut [f32]| {
            let p = pos[rope_token(layout, dims, r)];
            let xr = &x[r * d..(r + 1) * d];
            let (c, s) = (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
            if interleaved {
                for i in 0..half {
                    let (a, b) = (xr[2 * i], xr[2 * i + 1]);
                    or[2 * i] = a * c[i] - b * s[i];
                    or[2 * i + 1] = b * c[i] + a * s[i];
                }
            } else {
                let (xa, xb) = xr.split_at(half);
                let (oa, ob) = or.split_at_mut(half);
                // Plain slices of one length: the loop vectorises.
                for i in 0..half {
                    oa[i] = xa[i] * c[i] - xb[i] * s[i];
                    ob[i] = xb[i] * c[i] + xa[i] * s[i];
                }
            }
        };
        if parallel && o.len() >= ROWS_PER_JOB * d * 4 {
            o.par_chunks_mut(ROWS_PER_JOB * d).enumerate().for_each(|(j, chunk)| {
                for (i, or) in chunk.chunks_mut(d).enumerate() {
                    row(j * ROWS_PER_JOB + i, or);
                }
            });
        } else {
            o.chunks_mut(d).enumerate().for_each(|(r, or)| row(r, or));
        }
        Ok(())
    })
}
