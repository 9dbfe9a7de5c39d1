//! PagedAttention composed of basic aclnn operators (both SoCs, every float dtype): each
//! sequence's cache blocks gathered through its block table (aclnnIndexSelect on the
//! cache viewed `[NB, BS·KVH·D]`), the scores as products batched over the kv heads
//! (q viewed `[B, KVH, G, D]`, the gathered keys read through strides, no copy), the
//! length mask built on the device from the `context_lens` tensor, a masked softmax and
//! the product with the gathered values. The lengths stay device data, so a recorded
//! executor stays valid when they change from step to step.

use super::call::BResult;
use super::call::{Call, View, align512};
use super::data::index_select;
use super::elementwise::{add_sub, adds, cast, eq, muls, s_where, unary};
use super::matmul::matmul;
use super::norm::softmax;
use super::reduce::{all_minus_inf, zero_rows};
use crate::error::AclBackendError;
use acl_sys::result::aclnn as nn;
use runtime::{DType, Op};

/// Scratch offsets, bumped in 512-byte aligned pieces.
pub(super) struct Bump {
    pub(super) base: u64,
    pub(super) at: usize,
}

impl Bump {
    pub(super) fn take(&mut self, dtype: DType, dims: &[usize]) -> View {
        let v = View::contiguous(self.base + self.at as u64, dtype, dims);
        self.at += align512(dims.iter().product::<usize>() * dtype.size());
        v
    }
}

pub(super) fn bytes(dtype: DType, dims: &[usize]) -> usize {
    align512(dims.iter().product::<usize>() * dtype.size())
}

/// `[0, 1, .., n-1]` (i32 or i64, `a` `[n]`) written into `a` on the device: a[0] = 0 through
/// aclnnInplaceMaskedFillScalar under an always-true mask (`lens == lens`: integers are
/// never NaN), then doubling, a[k..2k] = a[0..k] + k (aclnnAdds): ⌈log2 t⌉ operators and no
/// host constant, so one-shot launches and recordings build it the same way.
pub(super) fn arange(c: &mut Call, a: &View, lens: &View, truth: &View) -> BResult<()> {
    let t = a.dims[0];
    let first = lens.reshaped(&[1]);
    eq(c, &first, &first, truth)?;
    let (ta, tb) = (c.tensor(&a.reshaped(&[1]))?, c.bool_tensor(truth)?);
    let zero = c.scalar_for(a.dtype, 0.0)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::inplace_masked_fill_scalar_get_workspace_size(c.api, ta, tb, zero) };
    c.run(p1, nn::inplace_masked_fill_scalar)?;
    let mut k = 1;
    while k < t {
        let n = k.min(t - k);
        let src = a.reshaped(&[n]);
        let mut dst = src.clone();
        dst.offset = a.offset + k;
        adds(c, &src, k as f64, &dst)?;
        k *= 2;
    }
    Ok(())
}

/// `x[i] = v` where `mask` (bool over u8, broadcast to `x`) is true, in place
/// (aclnnInplaceMaskedFillScalar).
fn fill(c: &mut Call, x: &View, mask: &View, v: f64) -> BResult<()> {
    let (tx, tm) = (c.tensor(x)?, c.bool_tensor(mask)?);
    let sv = c.scalar_for(x.dtype, v)?;
    // SAFETY: live descriptors owned by `c`; `x` is read and written in place.
    let p1 = unsafe { nn::inplace_masked_fill_scalar_get_workspace_size(c.api, tx, tm, sv) };
    c.run(p1, nn::inplace_masked_fill_scalar)
}

/// PagedAttention's operands and sizes, checked once for the composition and the fused
/// kernel (`ifa.rs`): q `[B, H, D]`, the caches `[NB, BS, KVH, D]`, block_tables `[B, MB]`
/// and context_lens `[B]` i32, H a multiple of KVH. `Send + Sync` (borrows).
pub(super) struct PagedOperands<'a> {
    pub(super) q: &'a View,
    pub(super) kc: &'a View,
    pub(super) vc: &'a View,
    pub(super) bt: &'a View,
    pub(super) lens: &'a View,
    pub(super) b: usize,
    pub(super) h: usize,
    pub(super) d: usize,
    pub(super) nb: usize,
    pub(super) bs: usize,
    pub(super) kvh: usize,
    pub(super) mb: usize,
    /// `T = MB·BS`: the positions a table reaches.
    pub(super) t: usize,
    /// The scale, 1/sqrt(D) unless the op sets one.
    pub(super) scale: f32,
}

/// [`PagedOperands`] of `op` (PagedAttention) over `ins`, `name` the op in errors. Refused:
/// another op, another operand count or rank, tables or lengths not i32, a batch of 0
/// (nothing to launch: a kernel is never asked for it), kv heads that do not divide the
/// heads, and sizes whose scratch (`B·T·max(H, KVH·D)` elements of 4 bytes at most, `T + 1`
/// and `B·MB` entries) overflows.
pub(super) fn paged_operands<'a>(name: &str, op: &Op, ins: &'a [View]) -> BResult<PagedOperands<'a>> {
    let bad = |why: String| AclBackendError::BadRequest(format!("{name}: {why}"));
    let Op::PagedAttention { scale } = op else {
        return Err(bad("not PagedAttention".into()));
    };
    let [q, kc, vc, bt, lens] = ins else {
        return Err(bad(format!("takes 5 operands, got {}", ins.len())));
    };
    let ranks = [q.dims.len(), kc.dims.len(), vc.dims.len(), bt.dims.len(), lens.dims.len()];
    if ranks != [3, 4, 4, 2, 1] || vc.dims != kc.dims {
        return Err(bad(format!(
            "q [B, H, D], caches [NB, BS, KVH, D] alike, tables [B, MB], lengths [B]: got {:?}, {:?}, {:?}, {:?}, {:?}",
            q.dims, kc.dims, vc.dims, bt.dims, lens.dims
        )));
    }
    if bt.dtype != DType::I32 || lens.dtype != DType::I32 {
        return Err(bad("block_tables and context_lens must be i32".into()));
    }
    let (b, h, d) = (q.dims[0], q.dims[1], q.dims[2]);
    let (nb, bs, kvh) = (kc.dims[0], kc.dims[1], kc.dims[2]);
    let mb = bt.dims[1];
    if b == 0 {
        return Err(bad("a batch of 0 sequences".into()));
    }
    if kvh == 0 || h % kvh != 0 {
        return Err(bad(format!("{h} heads over {kvh} kv heads")));
    }
    let t = mb.checked_mul(bs).filter(|&t| t < usize::MAX);
    let widest = t.and_then(|t| b.checked_mul(t)?.checked_mul(h.max(kvh.checked_mul(d)?))?.checked_mul(4));
    let tables = b.checked_mul(mb).and_then(|n| n.checked_mul(4));
    let (Some(t), Some(w), Some(_)) = (t, widest, tables) else {
        return Err(bad(format!("sizes overflow: B {b}, H {h}, D {d}, MB {mb}, BS {bs}, KVH {kvh}")));
    };
    if w > isize::MAX as usize {
        return Err(bad(format!("scratch of {w} bytes")));
    }
    let scale = scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
    Ok(PagedOperands { q, kc, vc, bt, lens, b, h, d, nb, bs, kvh, mb, t, scale })
}

/// PagedAttention (see the module documentation) into `out` `[B, H, D]`; `ins`: q
/// `[B, H, D]`, key_cache, value_cache `[NB, BS, KVH, D]`, block_tables `[B, MB]` i32,
/// context_lens `[B]` i32. A zero length masks every key: the row is all -inf, found
/// (aclnnAmax, aclnnEqScalar) and zeroed; the gathered values at masked positions are
/// zeroed too (unwritten slots may hold NaN, and 0 · NaN is NaN).
///
/// Bad tables and lengths fail on the device, as Gather's indices do: the table entries a
/// length does not reach are replaced by block 0 (aclnnSWhere; they are masked anyway),
/// the others go to aclnnIndexSelect as they are, which refuses an id outside [0, NB) at
/// its launch (the stream's error, reported at the next synchronisation, never a read
/// outside the cache); the lengths select from `[0, .., MB·BS]` (aclnnIndexSelect), which
/// refuses a length below 0 or above MB·BS the same way.
pub(super) fn paged_attention(c: &mut Call, op: &Op, ins: &[View], out: &View, cube: i8) -> BResult<()> {
    let p = paged_operands(c.op, op, ins)?;
    let (q, kc, vc, bt, lens) = (p.q, p.kc, p.vc, p.bt, p.lens);
    let (b, h, d, nb, bs, kvh, mb, t, scale) = (p.b, p.h, p.d, p.nb, p.bs, p.kvh, p.mb, p.t, p.scale);
    let (g, dt) = (h / kvh, q.dtype);
    let kv = [b * mb, bs * kvh * d];
    let sc = [b, kvh, g, t];
    let total = 2 * bytes(dt, &kv)
        + 2 * bytes(dt, &sc)
        + bytes(dt, &[b, h])
        + bytes(DType::U8, &[b, h])
        + bytes(DType::I32, &[t + 1])
        + bytes(DType::I32, &[b])
        + bytes(DType::F32, &[t + 1])
        + bytes(DType::F32, &[b])
        + 2 * bytes(DType::F32, &[b, mb])
        + bytes(DType::I32, &[b, mb])
        + bytes(DType::U8, &[b, mb])
        + 2 * bytes(DType::F32, &[b, t])
        + bytes(DType::U8, &[b, t])
        + bytes(DType::U8, &[1]);
    let mut m = Bump { base: c.scratch(total)?, at: 0 };
    let (kg, vg) = (m.take(dt, &kv), m.take(dt, &kv));
    let pair = [m.take(dt, &sc), m.take(dt, &sc)];
    let row_max = m.take(dt, &[b, kvh, g, 1]);
    let masked = m.take(DType::U8, &[b, kvh, g, 1]);
    let ar = m.take(DType::I32, &[t + 1]);
    let checked = m.take(DType::I32, &[b]);
    let (arf, lf) = (m.take(DType::F32, &[t + 1]), m.take(DType::F32, &[b, 1]));
    let (e, re) = (m.take(DType::F32, &[b, mb]), m.take(DType::F32, &[b, mb]));
    let ids = m.take(DType::I32, &[b, mb]);
    let unused = m.take(DType::U8, &[b, mb]);
    let (diff, relu) = (m.take(DType::F32, &[b, t]), m.take(DType::F32, &[b, t]));
    let drop = m.take(DType::U8, &[b, t]);
    let truth = m.take(DType::U8, &[1]);

    // [0, .., T]; the lengths checked against it. The comparisons below run in f32 (exact
    // for these integers), where aclnnRelu is defined: x >= 0 exactly where relu(x) == x.
    arange(c, &ar, lens, &truth)?;
    index_select(c, &ar, 0, &lens.reshaped(&[b]), &checked)?;
    cast(c, &ar, DType::F32, &arf)?;
    cast(c, &lens.reshaped(&[b, 1]), DType::F32, &lf)?;
    // unused[b, j] = j·BS - lens[b] >= 0; those entries become block 0 (ar[0], broadcast).
    let starts = View { dims: vec![1, mb], strides: vec![0, bs], ..arf.clone() };
    add_sub(c, true, &starts, &lf, &e)?;
    unary(c, &Op::Relu, &e, &re)?;
    eq(c, &re, &e, &unused)?;
    let zero = View { dims: vec![1, 1], strides: vec![0, 0], ..ar.clone() };
    s_where(c, &unused, &zero, &bt.reshaped(&[b, mb]), &ids)?;
    // Each sequence's blocks, in table order: [B·MB, BS·KVH·D] = [B, T, KVH, D].
    let ids = ids.reshaped(&[b * mb]);
    index_select(c, &kc.reshaped(&[nb, bs * kvh * d]), 0, &ids, &kg)?;
    index_select(c, &vc.reshaped(&[nb, bs * kvh * d]), 0, &ids, &vg)?;
    // [B, T, KVH, D] read as [B, KVH, T, D] through strides.
    let heads = |v: &View| View { dims: vec![b, kvh, t, d], strides: vec![t * kvh * d, d, kvh * d, 1], ..v.clone() };
    let q4 = q.reshaped(&[b, kvh, g, d]);
    matmul(c, &q4, &heads(&kg).t(true), &pair[0], cube)?;
    muls(c, &pair[0], scale, &pair[1])?;

    // drop[b, p] = p >= lens[b]: d = p - lens[b]; relu(d) == d exactly where d >= 0.
    add_sub(c, true, &arf.reshaped(&[1, t]), &lf, &diff)?;
    unary(c, &Op::Relu, &diff, &relu)?;
    eq(c, &relu, &diff, &drop)?;
    fill(c, &pair[1], &drop.reshaped(&[b, 1, 1, t]), f64::NEG_INFINITY)?;
    fill(c, &vg.reshaped(&[b, t, kvh * d]), &drop.reshaped(&[b, t, 1]), 0.0)?;

    all_minus_inf(c, &pair[1], &row_max, &masked)?;
    softmax(c, &pair[1], -1, &pair[0])?;
    let o4 = out.reshaped(&[b, kvh, g, d]);
    matmul(c, &pair[0], &heads(&vg), &o4, cube)?;
    zero_rows(c, &o4, &masked)
}

#[cfg(test)]
mod tests {
    use super::{View, paged_operands};
    use runtime::{DType, Op};

    fn operands(b: usize, h: usize, kvh: usize, mb: usize, bs: usize) -> Vec<View> {
        let (nb, d) = (4, 8);
        vec![
            View::contiguous(0, DType::F16, &[b, h, d]),
            View::contiguous(0, DType::F16, &[nb, bs, kvh, d]),
            View::contiguous(0, DType::F16, &[nb, bs, kvh, d]),
            View::contiguous(0, DType::I32, &[b, mb]),
            View::contiguous(0, DType::I32, &[b]),
        ]
    }

    fn refused(ins: &[View], why: &str) {
        let op = Op::PagedAttention { scale: None };
        let e = paged_operands("PagedAttention", &op, ins).err().unwrap_or_else(|| panic!("accepted: {why}"));
        assert!(matches!(e, crate::error::AclBackendError::BadRequest(_)), "{e}");
        assert!(e.to_string().contains(why), "{e}: not {why:?}");
    }

    #[test]
    fn paged_operands_are_checked_once_for_both_kernels() {
        let op = Op::PagedAttention { scale: None };
        let ins = operands(2, 4, 2, 3, 16);
        let p = paged_operands("PagedAttention", &op, &ins).unwrap();
        assert_eq!((p.b, p.h, p.kvh, p.mb, p.bs, p.t), (2, 4, 2, 3, 16, 48));
        assert!((p.scale - 1.0 / 8f32.sqrt()).abs() < 1e-7);
        refused(&operands(0, 4, 2, 3, 16), "a batch of 0");
        refused(&operands(2, 3, 2, 3, 16), "3 heads over 2 kv heads");
        refused(&operands(2, 4, 0, 3, 16), "over 0 kv heads");
        // MB·BS overflows, and B·T·H does.
        refused(&operands(2, 4, 2, usize::MAX / 8, 16), "sizes overflow");
        refused(&operands(1 << 20, 4, 2, 1 << 20, 1 << 20), "sizes overflow");
        let mut ins = operands(2, 4, 2, 3, 16);
        ins[4].dtype = DType::I64;
        refused(&ins, "must be i32");
        refused(&ins[..4], "takes 5 operands");
        let mut ins = operands(2, 4, 2, 3, 16);
        ins[2] = View::contiguous(0, DType::F16, &[4, 16, 2]);
        refused(&ins, "got");
        let e = paged_operands("Relu", &Op::Relu, &operands(2, 4, 2, 3, 16)).err().expect("another op");
        assert!(e.to_string().contains("not PagedAttention"), "{e}");
    }
}
