//! KvCacheWrite on aclnn, in place, on both SoCs: the key and value rows scattered into
//! the caches by slot, the slots read on the device (a recorded executor stays valid when
//! they change from step to step).
//!
//! Neither scatter skips a negative (padding) slot — aclnnScatterNdUpdate's indices and
//! aclnnScatterPaKvCache's slotMapping must lie in `[0, NB·BS)` — so the rows are first
//! redirected on the device, with no host read: padding row `i` is replaced by a real row
//! `f` (its slot and its key and value rows), so that it writes what row `f` writes, to
//! the same place; the scatter's result is the same whichever of the two lands last.
//! `f` is the last row holding the largest slot (aclnnAmax of the slots, aclnnEqTensor,
//! aclnnSWhere over `[0, .., N)`, aclnnAmax), real when that slot is not negative. When no
//! row is real, every row writes slot 0's current contents back to slot 0 (gathered before
//! the scatter, in stream order), which changes nothing.
//!
//! The scatter: one `aclnnScatterPaKvCache` (cacheMode "Norm", both caches) on Atlas A2/A3
//! for FLOAT16 and BFLOAT16 caches where the toolkit exports it; elsewhere (the 910 family,
//! FLOAT caches, older toolkits) one `aclnnScatterNdUpdate` per cache viewed
//! `[NB·BS, KVH·D]` with the slots as `[N, 1]` indices. A slot at or past `NB·BS` reaches
//! the scatter as it is: the launch fails on the device (the stream's error, reported at
//! the next synchronisation), never a write outside the cache.

use super::call::{BResult, Call, View};
use super::data::index_select;
use super::elementwise::{cast, eq, s_where, unary};
use super::paged::{Bump, arange, bytes};
use crate::error::AclBackendError;
use acl_sys::result::aclnn as nn;
use runtime::{DType, Op};

/// The redirected rows: `t` (i64 `[N]`) the slot each row writes, `r` (i64 `[N]`) the row
/// it takes its key and value from, `any` (bool `[1]`) whether a row is real.
struct Redirect {
    t: View,
    r: View,
    any: View,
}

/// The slots of `slots` (`[N]`, i32 or i64) redirected as the module documentation says,
/// in scratch taken from `m`.
fn redirect(c: &mut Call, slots: &View, m: &mut Bump) -> BResult<Redirect> {
    let n = slots.dims[0];
    let sd = slots.dtype;
    let (sf, rf) = (m.take(DType::F32, &[n]), m.take(DType::F32, &[n]));
    let valid = m.take(DType::U8, &[n]);
    let top = m.take(sd, &[1]);
    let is_top = m.take(DType::U8, &[n]);
    let ar = m.take(DType::I64, &[n]);
    let truth = m.take(DType::U8, &[1]);
    let sel = m.take(DType::I64, &[n]);
    let f = m.take(DType::I64, &[1]);
    let (tf, tr) = (m.take(DType::F32, &[1]), m.take(DType::F32, &[1]));
    let any = m.take(DType::U8, &[1]);
    let r = m.take(DType::I64, &[n]);
    let picked = m.take(sd, &[n]);
    let wide = m.take(DType::I64, &[n]);
    let t = m.take(DType::I64, &[n]);

    // valid[i] = slot >= 0, in f32 (exact in sign), where relu(x) == x exactly for x >= 0.
    cast(c, slots, DType::F32, &sf)?;
    unary(c, &Op::Relu, &sf, &rf)?;
    eq(c, &rf, &sf, &valid)?;
    // f: the last row holding the largest slot; real when that slot is >= 0.
    amax0(c, slots, &top)?;
    let bcast = |v: &View| View { dims: vec![n], strides: vec![0], ..v.clone() };
    eq(c, slots, &bcast(&top), &is_top)?;
    arange(c, &ar, slots, &truth)?;
    let zero = bcast(&ar.reshaped(&[1]));
    s_where(c, &is_top, &ar, &zero, &sel)?;
    amax0(c, &sel, &f)?;
    cast(c, &top, DType::F32, &tf)?;
    unary(c, &Op::Relu, &tf, &tr)?;
    eq(c, &tr, &tf, &any)?;
    // r[i] = i for a real row, f for padding; t = slots[r] (slot 0 when no row is real).
    s_where(c, &valid, &ar, &bcast(&f), &r)?;
    let t_src = if sd == DType::I64 { &wide } else { &picked };
    index_select(c, slots, 0, &r, t_src)?;
    if sd != DType::I64 {
        cast(c, &picked, DType::I64, &wide)?;
    }
    s_where(c, &bcast(&any), &wide, &zero, &t)?;
    Ok(Redirect { t, r, any })
}

/// The maximum of a 1-D `x` into `out` (`[1]`, x's dtype) through aclnnAmax.
fn amax0(c: &mut Call, x: &View, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let dims = c.ints(&[0])?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::amax_get_workspace_size(c.api, tx, dims, true, to) };
    c.run(p1, nn::amax)
}

/// The scratch [`redirect`] and the gathered rows take.
fn scratch_bytes(n: usize, sd: DType, dt: DType, w: usize) -> usize {
    4 * bytes(DType::F32, &[n])
        + 3 * bytes(DType::U8, &[n])
        + 2 * bytes(sd, &[n])
        + 5 * bytes(DType::I64, &[n])
        + bytes(sd, &[1])
        + 2 * bytes(DType::F32, &[1])
        + 2 * bytes(DType::U8, &[1])
        + bytes(DType::I64, &[1])
        + 4 * bytes(dt, &[n, w])
}

/// KvCacheWrite (see the module documentation); `ins`: key_cache, value_cache
/// `[NB, BS, KVH, D]` (the outputs' memory: updated in place), key, value `[N, KVH, D]`,
/// slots `[N]` i32 or i64. `fused`: aclnnScatterPaKvCache may serve (Atlas A2/A3).
pub(super) fn kv_cache_write(c: &mut Call, fused: bool, ins: &[View]) -> BResult<()> {
    let (kc, vc, key, value, slots) = (&ins[0], &ins[1], &ins[2], &ins[3], &ins[4]);
    if !matches!(slots.dtype, DType::I32 | DType::I64) {
        return Err(AclBackendError::BadRequest(format!("{}: slots must be i32 or i64", c.op)));
    }
    let (nb, bs, kvh, d) = (kc.dims[0], kc.dims[1], kc.dims[2], kc.dims[3]);
    let (n, w, dt) = (key.dims[0], kvh * d, kc.dtype);
    let mut m = Bump { base: c.scratch(scratch_bytes(n, slots.dtype, dt, w))?, at: 0 };
    let rd = redirect(c, slots, &mut m)?;
    // Each row's key and value (row r[i]), or slot 0's current rows when no row is real.
    let rows = |c: &mut Call, m: &mut Bump, src: &View, cache: &View| -> BResult<View> {
        let (g, out) = (m.take(dt, &[n, w]), m.take(dt, &[n, w]));
        index_select(c, &src.reshaped(&[n, w]), 0, &rd.r, &g)?;
        let row0 = View { dims: vec![n, w], strides: vec![0, 1], ..cache.clone() };
        let any = View { dims: vec![n, w], strides: vec![0, 0], ..rd.any.clone() };
        s_where(c, &any, &g, &row0, &out)?;
        Ok(out)
    };
    let kw = rows(c, &mut m, key, kc)?;
    let vw = rows(c, &mut m, value, vc)?;
    // Both symbols are optional: a toolkit without them takes aclnnScatterNdUpdate.
    let exported = c.api.aclnnScatterPaKvCacheGetWorkspaceSize().is_ok() && c.api.aclnnScatterPaKvCache().is_ok();
    let fused = fused && matches!(dt, DType::F16 | DType::BF16) && exported;
    if fused {
        let (tk, tkc, ts) = (c.tensor(&kw.reshaped(&[n, kvh, d]))?, c.tensor(kc)?, c.tensor(&rd.t)?);
        let (tv, tvc) = (c.tensor(&vw.reshaped(&[n, kvh, d]))?, c.tensor(vc)?);
        let (lens, offs, seqs) = (c.absent(false), c.absent(false), c.absent(false));
        // SAFETY: live descriptors owned by `c`; the cache mode is a NUL-terminated string
        // the operator only reads; NULL for the compression inputs, the scatter mode ("None")
        // and the strides and offsets of "Nct" mode, as the operator documents them.
        let p1 = unsafe {
            nn::scatter_pa_kv_cache_get_workspace_size(
                c.api,
                tk,
                tkc,
                ts,
                tv,
                tvc,
                lens,
                offs,
                seqs,
                c"Norm".as_ptr().cast_mut(),
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        return c.run(p1, nn::scatter_pa_kv_cache);
    }
    for (rows, cache) in [(&kw, kc), (&vw, vc)] {
        let (tc, ti, tu) =
            (c.tensor(&cache.reshaped(&[nb * bs, w]))?, c.tensor(&rd.t.reshaped(&[n, 1]))?, c.tensor(rows)?);
        // SAFETY: live descriptors owned by `c`; the cache is read and written in place.
        let p1 = unsafe { nn::scatter_nd_update_get_workspace_size(c.api, tc, ti, tu) };
        c.run(p1, nn::scatter_nd_update)?;
    }
    Ok(())
}
