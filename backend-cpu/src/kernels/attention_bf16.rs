//! Attention with both products on the bf16 unit: AMX tiles where the CPU has them,
//! AVX-512-BF16 dot products (`vdpbf16ps`) otherwise; the softmax in f32 registers.
//!
//! `out = softmax(scale · Q Kᵀ + mask) · V`, flash-style per block of [`BLOCK`] query rows:
//! the block's scores (`BLOCK × t` f32, 64 KiB at t = 512) are produced, scaled, masked
//! and normalised while in L1/L2, rounded to bf16 and multiplied by V at once; the `s × t`
//! score matrix is never materialised, and no generic GEMM is called (the products are
//! too small for its per-call packing and dispatch).
//!
//! Operands are f32 or bf16 (q, k and v of one dtype, as the op requires); they are
//! rounded to bf16 while being laid out for the unit:
//!
//! * a head's K once per head (per unit of work), as the products' B operand: per block of
//!   16 keys, per k-pair of the head dimension, one 64-byte row of 16 words (the pair of
//!   key `n`: features `2p` and `2p + 1`), which is AMX's tile B layout and the rows
//!   `vdpbf16ps` reads;
//! * a head's V once likewise: per block of 16 output features, per pair of keys, the 16
//!   features' pairs (keys `2p` and `2p + 1`);
//! * the block's query rows and its probabilities as plain bf16 rows (A operands).
//!
//! Sizes are padded with zeros to whole tiles: d and dv to 32, t to 32 (a zero key adds a
//! zero score that the softmax never reads, and its probability is 0 against a zero V
//! row). Per (32 rows × 32 columns) output block, four 16×16 f32 accumulator tiles (or 16
//! zmm accumulators per 8 rows) run over the whole k.
//!
//! Work: the heads are the units when there are as many as threads (K and V laid out once
//! per head), else each head's blocks are shared among the threads. Causal attention
//! computes each block only against the keys its last row sees; a row's own keys are
//! normalised and the rest weigh 0.
//!
//! Extreme rows as on every tier: a row whose scores hold a NaN or +inf gives NaN; a row
//! whose every score is -inf (all keys masked out, or none seen) gives 0, whatever V holds.
//! Accuracy: q, k, v and the probabilities are rounded to bf16 (8 significant bits), the
//! sums are f32.

use super::attention::Mask;
use super::common::*;
use super::simd_math::softmax_in_place;
use crate::features::CpuFeatures;
use rayon::prelude::*;
use runtime::{AttentionLayout, DType, Op};

/// Query rows per block (two AMX tile rows).
pub const BLOCK: usize = 32;

/// The kernel entry: `Attention` (any layout, causal or not, grouped-query) with f32 or
/// bf16 q, k, v, on a CPU with AVX-512-BF16 (and AMX where `ctx.features` has it).
pub fn run(op: &Op, ins: &[In], outs: &mut [Out], ctx: &Ctx) -> KResult {
    let Op::Attention { scale, layout, causal } = *op else {
        return Err(KernelError::Internal(format!("bf16 attention asked to run {}", op.name())));
    };
    attention(ins, &mut outs[0], scale, layout, causal, ctx, crate::features::get())
}

/// An operand's elements as stored.
#[derive(Clone, Copy)]
enum Src<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

impl<'a> Src<'a> {
    fn new(x: &'a In, what: &'static str) -> Result<Src<'a>, KernelError> {
        let n = x.numel();
        let short = |got: usize| KernelError::TooShort { what, needed: n, got };
        match x.dtype {
            DType::F32 => {
                let b = x.bytes.get(..n * 4).ok_or_else(|| short(x.bytes.len() / 4))?;
                Ok(Src::F32(bytemuck::try_cast_slice(b).map_err(|e| KernelError::misaligned(what, e))?))
            }
            DType::BF16 => {
                let b = x.bytes.get(..n * 2).ok_or_else(|| short(x.bytes.len() / 2))?;
                Ok(Src::Bf16(bytemuck::try_cast_slice(b).map_err(|e| KernelError::misaligned(what, e))?))
            }
            other => Err(KernelError::Internal(format!("bf16 attention got {what} of {other}"))),
        }
    }

    /// `n` elements from `at`, rounded to bf16, into `dst` (at least `n` long); the rest
    /// of `dst` is zeroed.
    fn row_to_bf16(self, at: usize, n: usize, dst: &mut [u16], f: &CpuFeatures) {
        match self {
            Src::F32(x) => f32_to_bf16(&x[at..at + n], &mut dst[..n], f),
            Src::Bf16(x) => dst[..n].copy_from_slice(&x[at..at + n]),
        }
        dst[n..].fill(0);
    }

    /// Element `i` as f32 (the rare paths: NaN rows formed again).
    fn get(self, i: usize) -> f32 {
        match self {
            Src::F32(x) => x[i],
            Src::Bf16(x) => half::bf16::from_bits(x[i]).to_f32(),
        }
    }
}

/// `Cast` between f32 and bf16 (the casts the precision pass puts around a bf16
/// Attention): rounded to nearest even on AVX-512-BF16, widened exactly back, split over
/// the threads for large tensors.
pub fn cast(op: &Op, ins: &[In], outs: &mut [Out], ctx: &Ctx) -> KResult {
    const CHUNK: usize = 1 << 14;
    let (n, f) = (ins[0].numel(), ctx.features);
    let par = ctx.threads > 1 && n >= 4 * CHUNK;
    let out = &mut outs[0];
    let short = |got: usize| KernelError::TooShort { what: "cast output", needed: n, got };
    match (Src::new(&ins[0], "cast input")?, out.dtype) {
        (Src::F32(x), DType::BF16) => {
            let b = out.bytes.get_mut(..n * 2).ok_or_else(|| short(0))?;
            let o: &mut [u16] =
                bytemuck::try_cast_slice_mut(b).map_err(|e| KernelError::misaligned("cast output", e))?;
            if par {
                o.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(d, s)| f32_to_bf16(s, d, f));
            } else {
                f32_to_bf16(x, o, f);
            }
        }
        (Src::Bf16(x), DType::F32) => {
            let b = out.bytes.get_mut(..n * 4).ok_or_else(|| short(0))?;
            let o: &mut [f32] =
                bytemuck::try_cast_slice_mut(b).map_err(|e| KernelError::misaligned("cast output", e))?;
            if par {
                o.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(d, s)| bf16_to_f32(s, d, f));
            } else {
                bf16_to_f32(x, o, f);
            }
        }
        _ => return Err(KernelError::Internal(format!("the bf16 cast asked to run {}", op.name()))),
    }
    Ok(())
}

/// bf16 bits → f32 (exact).
fn bf16_to_f32(src: &[u16], dst: &mut [f32], f: &CpuFeatures) {
    #[cfg(target_arch = "x86_64")]
    if f.avx512bf16 {
        // SAFETY: AVX-512F/BW were detected (`avx512bf16` implies them).
        unsafe { x86::from_bf16(src, dst) };
        return;
    }
    let _ = f;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((*s as u32) << 16);
    }
}

/// f32 → bf16 bits, round to nearest even (NaN stays NaN): the pairs of the bf16
/// product's conversion ([`super::gemm_bf16::to_pairs`]) where `dst` holds whole aligned
/// words, element by element otherwise.
fn f32_to_bf16(src: &[f32], dst: &mut [u16], f: &CpuFeatures) {
    let n = src.len().min(dst.len());
    let even = n & !1;
    let rest = match bytemuck::try_cast_slice_mut::<u16, u32>(&mut dst[..even]) {
        Ok(words) => {
            super::gemm_bf16::to_pairs(&src[..even], words, f.avx512bf16);
            even
        }
        Err(_) => 0,
    };
    for (d, s) in dst[rest..n].iter_mut().zip(&src[rest..n]) {
        *d = half::bf16::from_f32(*s).to_bits();
    }
}

/// The output (f32, or bf16 rounded from the f32 rows), written row by row by the units
/// of work.
#[derive(Clone, Copy)]
struct RowsOut {
    ptr: *mut u8,
    /// Elements.
    len: usize,
    bf16: bool,
    f: &'static CpuFeatures,
}

// SAFETY: the units write through the pointer only (`RowsOut::put`), each to the output
// rows of its own (head, query block) pairs, which no other unit writes; the buffer
// outlives the units (they are joined before `attention` returns).
unsafe impl Send for RowsOut {}
// SAFETY: as for `Send`: sharing `&RowsOut` shares only the address.
unsafe impl Sync for RowsOut {}

impl RowsOut {
    /// Writes `row` to elements `at..at + row.len()`; panics outside the buffer.
    fn put(self, at: usize, row: &[f32]) {
        assert!(at + row.len() <= self.len, "attention output row outside the output");
        if !self.bf16 {
            // SAFETY: in bounds (asserted; `ptr` holds `len` f32, aligned: checked where
            // made); only this unit writes these elements, and no reference to them is
            // live (see the `Send` impl).
            unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), (self.ptr as *mut f32).add(at), row.len()) };
            return;
        }
        let mut buf = [0u16; 256];
        for (i, c) in row.chunks(256).enumerate() {
            f32_to_bf16(c, &mut buf[..c.len()], self.f);
            // SAFETY: as above, for `len` u16.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), (self.ptr as *mut u16).add(at + i * 256), c.len()) };
        }
    }
}

/// Padded sizes of one head: `dp` (d to 32), `tp` (t to 32), `dvp` (dv to 32).
#[derive(Clone, Copy)]
struct Dims {
    d: usize,
    dv: usize,
    t: usize,
    dp: usize,
    tp: usize,
    dvp: usize,
}

/// A thread's buffers, kept across its units.
#[derive(Default)]
struct Scratch {
    /// K of the head: `tp / 16` blocks of `dp / 2` rows of 16 words.
    kp: Vec<u32>,
    /// V of the head: `dvp / 16` blocks of `tp / 2` rows of 16 words.
    vp: Vec<u32>,
    /// The block's query rows, `BLOCK × dp` bf16.
    q: Vec<u16>,
    /// The block's probabilities, `BLOCK × tp` bf16.
    p: Vec<u16>,
    /// The block's scores, `BLOCK × tp` f32.
    s: Vec<f32>,
    /// The block's output, `BLOCK × dvp` f32.
    o: Vec<f32>,
    /// One row rounded to bf16 (packing).
    row: Vec<u16>,
}

/// How one product runs: AMX tiles, or `vdpbf16ps` on zmm registers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Amx,
    Avx512Bf16,
}

/// `c[32 × 32] = a[32 rows of lda words] · (b0 | b1)` over `kc` k-pairs (`kc % 16 == 0`):
/// `b0` and `b1` are two blocks of 16 columns, `kc` rows of 16 words each.
#[allow(clippy::too_many_arguments)]
fn product(unit: Unit, kc: usize, a: &[u32], lda: usize, b0: &[u32], b1: &[u32], c: &mut [f32], ldc: usize) {
    assert!(kc.is_multiple_of(16) && lda >= kc && a.len() >= 31 * lda + kc, "bf16 attention: A operand too short");
    assert!(b0.len() >= kc * 16 && b1.len() >= kc * 16, "bf16 attention: B operand too short");
    assert!(ldc >= 32 && c.len() >= 31 * ldc + 32, "bf16 attention: output block too short");
    #[cfg(target_arch = "x86_64")]
    match unit {
        // SAFETY: tiles are configured on this thread (the unit of work holds a
        // `Tiles`); the operands hold what the asserts above check.
        Unit::Amx => unsafe { x86::amx_32x32(kc, a.as_ptr(), lda, b0.as_ptr(), b1.as_ptr(), c.as_mut_ptr(), ldc) },
        // SAFETY: AVX-512-BF16 is present (only such CPUs select this kernel); the
        // operands hold what the asserts above check.
        Unit::Avx512Bf16 => unsafe {
            for r in (0..32).step_by(8) {
                x86::dp_8x32(
                    kc,
                    a.as_ptr().add(r * lda),
                    lda,
                    b0.as_ptr(),
                    b1.as_ptr(),
                    c.as_mut_ptr().add(r * ldc),
                    ldc,
                )
            }
        },
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (unit, kc, a, lda, b0, b1, c, ldc);
        unreachable!("the bf16 attention is registered on x86-64 only")
    }
}

/// Views a bf16 buffer (even length) as its k-pairs.
fn words(x: &[u16]) -> &[u32] {
    bytemuck::cast_slice(x)
}

/// `dst[p * 16 + r] = src[r * w + p]`: 16 rows of `w` words transposed.
fn transpose16(src: &[u32], w: usize, dst: &mut [u32], f: &CpuFeatures) {
    assert!(src.len() >= 16 * w && dst.len() >= 16 * w, "bf16 attention: transpose operands too short");
    #[cfg(target_arch = "x86_64")]
    if f.avx512bf16 {
        // SAFETY: AVX-512F was detected; the lengths are asserted above.
        unsafe { x86::transpose16(src.as_ptr(), w, dst.as_mut_ptr()) };
        return;
    }
    let _ = f;
    for p in 0..w {
        for r in 0..16 {
            dst[p * 16 + r] = src[r * w + p];
        }
    }
}

/// Lays out the K of one head (rows at `k0 + n * stride`) into `sc.kp`.
fn pack_k(sc: &mut Scratch, src: Src<'_>, k0: usize, stride: usize, dm: Dims, f: &CpuFeatures) {
    let (kp2, blocks) = (dm.dp / 2, dm.tp / 16);
    sc.kp.clear();
    sc.kp.resize(blocks * kp2 * 16, 0);
    sc.row.resize(16 * dm.dp, 0);
    for n0 in (0..dm.t).step_by(16) {
        // Sixteen keys as rows, then their words transposed into the block.
        for (r, row) in sc.row.chunks_exact_mut(dm.dp).enumerate() {
            if n0 + r < dm.t {
                src.row_to_bf16(k0 + (n0 + r) * stride, dm.d, row, f);
            } else {
                row.fill(0);
            }
        }
        let blk = &mut sc.kp[(n0 / 16) * kp2 * 16..][..kp2 * 16];
        transpose16(words(&sc.row), kp2, blk, f);
    }
}

/// `dst[i] = lo[i] | hi[i] << 16` (16 each): two keys' values made feature pairs.
fn interleave(lo: &[u16], hi: &[u16], dst: &mut [u32], f: &CpuFeatures) {
    #[cfg(target_arch = "x86_64")]
    if f.avx512bf16 {
        // SAFETY: AVX-512F/BW were detected (`avx512bf16` implies them); the slices'
        // lengths are checked inside.
        unsafe { x86::interleave16(lo, hi, dst) };
        return;
    }
    let _ = f;
    for ((d, &l), &h) in dst.iter_mut().zip(lo).zip(hi) {
        *d = l as u32 | (h as u32) << 16;
    }
}

/// Lays out the V of one head (rows at `v0 + j * stride`) into `sc.vp`.
fn pack_v(sc: &mut Scratch, src: Src<'_>, v0: usize, stride: usize, dm: Dims, f: &CpuFeatures) {
    let (tp2, blocks) = (dm.tp / 2, dm.dvp / 16);
    sc.vp.clear();
    sc.vp.resize(blocks * tp2 * 16, 0);
    sc.row.resize(2 * dm.dvp, 0);
    for p in 0..dm.t.div_ceil(2) {
        let (lo, hi) = sc.row.split_at_mut(dm.dvp);
        src.row_to_bf16(v0 + 2 * p * stride, dm.dv, lo, f);
        if 2 * p + 1 < dm.t {
            src.row_to_bf16(v0 + (2 * p + 1) * stride, dm.dv, hi, f);
        } else {
            hi.fill(0);
        }
        for c in (0..dm.dv).step_by(16) {
            let dst = &mut sc.vp[((c / 16) * tp2 + p) * 16..][..16];
            interleave(&lo[c..c + 16], &hi[c..c + 16], dst, f);
        }
    }
}

/// The row's probabilities up to a factor: `p = bf16(e)` with `e` proportional to
/// `softmax(scale · row + mask)` (the mask `(values, stride)`), and the factor that
/// normalises them (what the row's product is multiplied by); `None` for a row whose every
/// score is -inf (then `p` is not written). `scale · x` even for scale 0, so that a
/// non-finite score stays NaN. Two passes on AVX-512 for a contiguous or broadcast mask
/// (the normalisation left to the product's `dv` outputs), else the shared row softmax.
fn probabilities(
    row: &mut [f32],
    scale: f32,
    mask: Option<(&[f32], usize)>,
    p: &mut [u16],
    f: &CpuFeatures,
) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    if f.avx512bf16 && mask.is_none_or(|(_, st)| st <= 1) {
        // SAFETY: AVX-512F/BW/VL and AVX-512-BF16 were detected; the mask, when given,
        // holds `row.len()` values (stride 1) or one (stride 0), as `Mask::row` gives it.
        return unsafe { x86::softmax_to_bf16(row, scale, mask, p) };
    }
    row.iter_mut().for_each(|x| *x *= scale);
    if softmax_in_place(f.isa, row, mask) {
        return None;
    }
    f32_to_bf16(row, p, f);
    Some(1.0)
}

/// Everything a unit of work reads.
struct Job<'a> {
    q: Src<'a>,
    k: Src<'a>,
    v: Src<'a>,
    mask: Option<&'a Mask<'a>>,
    dm: Dims,
    /// Batch size, query heads, query rows, query heads per kv head.
    bhsg: [usize; 4],
    /// Element strides of (batch, head, row) of q, k, v and the output.
    st: [[usize; 4]; 4],
    scale: f32,
    causal: bool,
    f: &'a CpuFeatures,
    unit: Unit,
    out: RowsOut,
}

impl Job<'_> {
    /// The element offset of row `i` of head `bh` (batch · heads + head) in operand `o`
    /// (0 q, 3 output), or of kv head row `i` (1 k, 2 v) for query head `bh`.
    fn at(&self, o: usize, bh: usize, i: usize) -> usize {
        let [_, h, _, g] = self.bhsg;
        let st = self.st[o];
        let head = if o == 1 || o == 2 { bh % h / g } else { bh % h };
        (bh / h) * st[0] + head * st[1] + i * st[2]
    }

    /// Query blocks `b0..b1` of head `bh`: K and V laid out, then each block.
    fn head(&self, bh: usize, b0: usize, b1: usize, sc: &mut Scratch) {
        let dm = self.dm;
        pack_k(sc, self.k, self.at(1, bh, 0), self.st[1][2], dm, self.f);
        pack_v(sc, self.v, self.at(2, bh, 0), self.st[2][2], dm, self.f);
        sc.q.resize(BLOCK * dm.dp, 0);
        sc.p.resize(BLOCK * dm.tp, 0);
        sc.s.resize(BLOCK * dm.tp, 0.0);
        sc.o.resize(BLOCK * dm.dvp, 0.0);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Unit::Amx` is chosen only where the features say the OS enabled AMX.
        let _tiles = (self.unit == Unit::Amx).then(|| unsafe { super::gemm_bf16::Tiles::configure() });
        for blk in b0..b1 {
            self.block(bh, blk, sc);
        }
    }

    /// One block of query rows of head `bh`.
    fn block(&self, bh: usize, blk: usize, sc: &mut Scratch) {
        let (dm, s) = (self.dm, self.bhsg[2]);
        let (i0, rows) = (blk * BLOCK, BLOCK.min(s - blk * BLOCK));
        // The keys the block's last row sees, in whole 32-key steps.
        let seen = |i: usize| if self.causal { runtime::reference::causal_keys(i, s, dm.t) } else { dm.t };
        let keys = seen(i0 + rows - 1);
        let out_at = |r: usize| self.at(3, bh, i0 + r);
        if keys == 0 {
            let zero = vec![0f32; dm.dv];
            (0..rows).for_each(|r| self.out.put(out_at(r), &zero));
            return;
        }
        let kt = keys.next_multiple_of(32);
        for r in 0..BLOCK {
            let row = &mut sc.q[r * dm.dp..][..dm.dp];
            if r < rows {
                self.q.row_to_bf16(self.at(0, bh, i0 + r), dm.d, row, self.f);
            } else {
                row.fill(0);
            }
        }
        let (kp2, tp2) = (dm.dp / 2, dm.tp / 2);
        for n in (0..kt).step_by(32) {
            let b = &sc.kp[(n / 16) * kp2 * 16..];
            product(self.unit, kp2, words(&sc.q), kp2, b, &b[kp2 * 16..], &mut sc.s[n..], dm.tp);
        }
        let mut zero_row = [false; BLOCK];
        // What each row's product is multiplied by: 1 / the sum of its exponentials.
        let mut inv = [1f32; BLOCK];
        let (bi, hh) = (bh / self.bhsg[1], bh % self.bhsg[1]);
        for (r, zero) in zero_row.iter_mut().enumerate().take(rows) {
            let lim = seen(i0 + r);
            let row = &mut sc.s[r * dm.tp..][..lim];
            let p = &mut sc.p[r * dm.tp..][..dm.tp];
            let norm = match lim {
                0 => None,
                _ => {
                    probabilities(row, self.scale, self.mask.map(|m| m.row(bi, hh, i0 + r, lim)), &mut p[..lim], self.f)
                }
            };
            *zero = norm.is_none();
            inv[r] = norm.unwrap_or(0.0);
            if *zero {
                p.fill(0);
            } else {
                p[lim..].fill(0);
            }
        }
        for c in (0..dm.dvp).step_by(32) {
            let b = &sc.vp[(c / 16) * tp2 * 16..];
            let o = &mut sc.o[c..];
            product(self.unit, kt / 2, words(&sc.p), tp2, b, &b[tp2 * 16..], o, dm.dvp);
        }
        for (r, &zero) in zero_row.iter().enumerate().take(rows) {
            let o = &mut sc.o[r * dm.dvp..][..dm.dv];
            if zero {
                o.fill(0.0);
                self.out.put(out_at(r), o);
                continue;
            }
            o.iter_mut().for_each(|x| *x *= inv[r]);
            if self.causal && o.iter().any(|x| x.is_nan()) {
                // Formed again from the row's own keys only (a key it does not see weighs
                // 0 here, and `0 · inf` is NaN).
                self.own_keys(bh, &sc.p[r * dm.tp..][..seen(i0 + r)], o);
            }
            self.out.put(out_at(r), o);
        }
    }

    /// An output row of head `bh` from its probabilities `p` (bf16) over its own keys.
    fn own_keys(&self, bh: usize, p: &[u16], o: &mut [f32]) {
        let (v0, sv) = (self.at(2, bh, 0), self.st[2][2]);
        for (c, x) in o.iter_mut().enumerate() {
            *x = p
                .iter()
                .enumerate()
                .map(|(j, &w)| half::bf16::from_bits(w).to_f32() * self.v.get(v0 + j * sv + c))
                .sum();
        }
    }
}

/// [`run`] on the units `ctx.features` names, each checked against `detected`.
fn attention(
    ins: &[In],
    out: &mut Out,
    scale: Option<f32>,
    layout: AttentionLayout,
    causal: bool,
    ctx: &Ctx,
    detected: &CpuFeatures,
) -> KResult {
    let f = ctx.features;
    // `CpuFeatures`' fields are public: a hand-built set claiming AMX or AVX-512-BF16 that
    // this CPU (`detected`) lacks is refused here, before any of their instructions runs.
    super::gemm_bf16::check_units(f, detected)?;
    let (q, k, v) = (Src::new(&ins[0], "q")?, Src::new(&ins[1], "k")?, Src::new(&ins[2], "v")?);
    let [bsz, h, s, d] = layout.bhsd(ins[0].dims);
    let ([_, hkv, t, _], [_, _, _, dv]) = (layout.bhsd(ins[1].dims), layout.bhsd(ins[2].dims));
    let group = h.checked_div(hkv).unwrap_or(1).max(1);
    let st = [
        layout.strides([bsz, h, s, d]),
        layout.strides([bsz, hkv, t, d]),
        layout.strides([bsz, hkv, t, dv]),
        layout.strides([bsz, h, s, dv]),
    ];
    let mask_vals = ins.get(3).map(Mask::values).transpose()?;
    let mask = mask_vals.as_deref().zip(ins.get(3)).map(|(vals, m)| Mask::new(vals, m, [bsz, h, s, t]));
    let r32 = |x: usize| x.max(1).next_multiple_of(32);
    let dm = Dims { d, dv, t, dp: r32(d), tp: r32(t), dvp: r32(dv) };
    let unit = if f.amx_bf16 && cfg!(target_arch = "x86_64") { Unit::Amx } else { Unit::Avx512Bf16 };
    let scale = scale.unwrap_or(1.0 / (d as f32).sqrt());
    let body = |out: RowsOut| -> KResult {
        if s * dv == 0 || bsz * h == 0 || t == 0 {
            // (t == 0: the buffer was zeroed by the caller.)
            return Ok(());
        }
        let job = Job { q, k, v, mask: mask.as_ref(), dm, bhsg: [bsz, h, s, group], st, scale, causal, f, unit, out };
        let (heads, blocks) = (bsz * h, s.div_ceil(BLOCK));
        // Units: whole heads where they keep the threads busy, else parts of heads.
        let threads = ctx.threads.max(1);
        let parts = if heads >= threads { 1 } else { threads.div_ceil(heads).min(blocks) };
        let per = blocks.div_ceil(parts);
        let unit_of = |u: usize, sc: &mut Scratch| {
            let (bh, part) = (u / parts, u % parts);
            let b0 = (part * per).min(blocks);
            job.head(bh, b0, (b0 + per).min(blocks), sc);
        };
        if threads > 1 && heads * parts > 1 {
            (0..heads * parts).into_par_iter().for_each_init(Scratch::default, |sc, u| unit_of(u, sc));
        } else {
            let mut sc = Scratch::default();
            (0..heads * parts).for_each(|u| unit_of(u, &mut sc));
        }
        Ok(())
    };
    if out.dtype == DType::BF16 {
        // Written in bf16 directly: no f32 buffer and no pass to round it.
        let n = out.numel();
        let b = out.bytes.get_mut(..n * 2).ok_or(KernelError::TooShort { what: "output", needed: n, got: 0 })?;
        let o: &mut [u16] = bytemuck::try_cast_slice_mut(b).map_err(|e| KernelError::misaligned("output", e))?;
        if t == 0 {
            o.fill(0);
        }
        return body(RowsOut { ptr: o.as_mut_ptr() as *mut u8, len: n, bf16: true, f });
    }
    with_f32_out(out, |o| {
        if t == 0 {
            o.fill(0.0);
        }
        body(RowsOut { ptr: o.as_mut_ptr() as *mut u8, len: o.len(), bf16: false, f })
    })
}

/// The x86-64 code: conversions and the two micro-kernels.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::kernels::simd_math::avx512::exp16;
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// `src` widened to f32 into `dst` (the shorter length of the two).
    ///
    /// # Safety
    /// AVX-512F and AVX-512BW must be supported.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn from_bf16(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i < n {
            let k: __mmask16 = ((1u32 << (n - i).min(16)) - 1) as u16;
            // SAFETY: the lanes in `k` lie inside both slices.
            unsafe {
                let h = _mm256_maskz_loadu_epi16(k, src.as_ptr().add(i) as *const _);
                let w = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h));
                _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), k, _mm512_castsi512_ps(w));
            }
            i += 16;
        }
    }

    /// `dst[i] = lo[i] | hi[i] << 16` for 16 elements.
    ///
    /// # Safety
    /// AVX-512F and AVX-512BW must be supported.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn interleave16(lo: &[u16], hi: &[u16], dst: &mut [u32]) {
        assert!(lo.len() >= 16 && hi.len() >= 16 && dst.len() >= 16, "interleave16: operands too short");
        // SAFETY: 16 elements of each, asserted above.
        unsafe {
            let l = _mm512_cvtepu16_epi32(_mm256_loadu_si256(lo.as_ptr() as *const _));
            let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(hi.as_ptr() as *const _));
            _mm512_storeu_si512(dst.as_mut_ptr() as *mut _, _mm512_or_si512(l, _mm512_slli_epi32::<16>(h)));
        }
    }

    /// `dst[p * 16 + r] = src[r * w + p]` for 16 rows of `w` words.
    ///
    /// # Safety
    /// AVX-512F must be supported; `src` and `dst` hold `16 * w` words.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn transpose16(src: *const u32, w: usize, dst: *mut u32) {
        let idx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(w as i32),
        );
        for p in 0..w {
            // SAFETY: the gathered words `r * w + p` (r < 16) lie in `src`; 16 words at
            // `p * 16` in `dst`.
            unsafe {
                let v = _mm512_i32gather_epi32::<4>(idx, src.add(p) as *const _);
                _mm512_storeu_si512(dst.add(p * 16) as *mut _, v);
            }
        }
    }

    /// `p = bf16(exp(scale · row + mask - max))` and `1 / sum` of the exponentials (f32,
    /// before rounding); `None` (nothing written) when every score is -inf. A NaN or +inf
    /// score makes the row NaN; the maximum ignores NaN. Two passes over the row: the
    /// maximum, then the exponentials (the row is read, never written).
    ///
    /// # Safety
    /// AVX-512F/BW/VL and AVX-512-BF16 must be supported; a mask holds `row.len()` values
    /// at stride 1, or one at stride 0.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    pub unsafe fn softmax_to_bf16(
        row: &[f32],
        scale: f32,
        mask: Option<(&[f32], usize)>,
        p: &mut [u16],
    ) -> Option<f32> {
        let n = row.len();
        assert!(p.len() >= n, "softmax_to_bf16: p too short");
        let (mvals, bcast) = match mask {
            Some((m, 1)) => {
                assert!(m.len() >= n, "softmax_to_bf16: mask too short");
                (Some(m), 0.0)
            }
            Some((m, _)) => (None, m[0]),
            None => (None, 0.0),
        };
        let (sv, bv, ninf) = (_mm512_set1_ps(scale), _mm512_set1_ps(bcast), _mm512_set1_ps(f32::NEG_INFINITY));
        let lanes = |i: usize| -> __mmask16 { ((1u32 << (n - i).min(16)) - 1) as u16 };
        // SAFETY: the lanes in `k` lie inside `row` (and the mask, when read).
        let score = |i: usize, k: __mmask16| unsafe {
            let x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row.as_ptr().add(i)), sv);
            match mvals {
                Some(m) => _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, m.as_ptr().add(i))),
                None => _mm512_add_ps(x, bv),
            }
        };
        let mut mx = ninf;
        let mut i = 0;
        while i + 16 <= n {
            mx = _mm512_max_ps(score(i, 0xffff), mx);
            i += 16;
        }
        if i < n {
            let k = lanes(i);
            mx = _mm512_max_ps(_mm512_mask_mov_ps(ninf, k, score(i, k)), mx);
        }
        let m = _mm512_reduce_max_ps(mx);
        if m == f32::NEG_INFINITY {
            // Only -inf and NaN: NaN if any NaN, else the row is masked out entirely.
            let mut nan = false;
            let mut i = 0;
            while i < n {
                let k = lanes(i);
                let x = score(i, k);
                nan |= _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(k, x, x) != 0;
                i += 16;
            }
            return nan.then(|| {
                p[..n].fill(0x7fc0);
                f32::NAN
            });
        }
        let (mv, mut sum) = (_mm512_set1_ps(m), _mm512_setzero_ps());
        i = 0;
        while i < n {
            let k = lanes(i);
            let e = _mm512_maskz_mov_ps(k, exp16::<false>(_mm512_sub_ps(score(i, k), mv)));
            sum = _mm512_add_ps(sum, e);
            let b: __m256bh = _mm512_cvtneps_pbh(e);
            // SAFETY: the lanes in `k` lie inside `p` (`p.len() >= n`).
            unsafe {
                _mm256_mask_storeu_epi16(
                    p.as_mut_ptr().add(i) as *mut _,
                    k,
                    std::mem::transmute::<__m256bh, __m256i>(b),
                )
            };
            i += 16;
        }
        Some(1.0 / _mm512_reduce_add_ps(sum))
    }

    /// `c[8 × 32] = a · (b0 | b1)` over `kc` k-pairs with `vdpbf16ps`.
    ///
    /// # Safety
    /// AVX-512F and AVX-512-BF16 must be supported; `a` holds 8 rows of stride `lda` with
    /// `kc` words each, `b0` and `b1` `kc * 16` words, `c` 8 rows of stride `ldc` with 32
    /// columns each.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dp_8x32(
        kc: usize,
        a: *const u32,
        lda: usize,
        b0: *const u32,
        b1: *const u32,
        c: *mut f32,
        ldc: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; 8];
        for p in 0..kc {
            // SAFETY: `p < kc`: inside every operand by the contract.
            unsafe {
                let x0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b0.add(p * 16) as *const _));
                let x1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b1.add(p * 16) as *const _));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let w: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + p) as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], w, x0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], w, x1);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: row `r < 8` of `c`, 32 columns.
            unsafe {
                _mm512_storeu_ps(c.add(r * ldc), acc[0]);
                _mm512_storeu_ps(c.add(r * ldc + 16), acc[1]);
            }
        }
    }

    /// `c[32 × 32] = a · (b0 | b1)` over `kc` k-pairs on AMX: per step of 16 k-pairs, two
    /// tiles of a's rows and the two B blocks' tiles feed four `tdpbf16ps` into four
    /// accumulator tiles.
    ///
    /// # Safety
    /// Tiles configured on this thread as `gemm_bf16::Tiles` does (eight 16 × 64-byte
    /// tiles); `kc % 16 == 0`; `a` holds 32 rows of stride `lda` words with `kc` words
    /// each, `b0` and `b1` `kc * 16` words, `c` 32 rows of stride `ldc` with 32 columns.
    pub unsafe fn amx_32x32(
        kc: usize,
        a: *const u32,
        lda: usize,
        b0: *const u32,
        b1: *const u32,
        c: *mut f32,
        ldc: usize,
    ) {
        let (sa, sc) = (lda * 4, ldc * 4);
        // SAFETY (every tile load and store): 16 rows of 64 bytes at the given stride,
        // inside `a`, `b0`, `b1` or `c` by the contract.
        unsafe {
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
            for step in 0..kc / 16 {
                let a0 = a.add(step * 16);
                asm!(
                    "tileloadd tmm4, [{a0} + {sa}*1]",
                    "tileloadd tmm6, [{b0} + {sb}*1]",
                    "tileloadd tmm7, [{b1} + {sb}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tileloadd tmm5, [{a1} + {sa}*1]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) a0, a1 = in(reg) a0.add(16 * lda),
                    b0 = in(reg) b0.add(step * 256), b1 = in(reg) b1.add(step * 256),
                    sa = in(reg) sa, sb = in(reg) 64usize,
                    options(nostack, readonly)
                );
            }
            let (c1, c2, c3) = (c.add(16), c.add(16 * ldc), c.add(16 * ldc + 16));
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c0 = in(reg) c, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
                options(nostack)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::Shape;

    /// One case: layout, batch, heads, kv heads, query rows, keys, d, dv, mask, causal.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        layout: AttentionLayout,
        b: usize,
        h: usize,
        hkv: usize,
        s: usize,
        t: usize,
        d: usize,
        dv: usize,
        mask: MaskKind,
        causal: bool,
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum MaskKind {
        None,
        /// f32 `[b, 1, 1, t]`: 0 or -10000 (BERT's padding mask).
        Padding,
        /// u8 `[t]`.
        Bytes,
        /// f32 `[b, 1, 1, t]` with every key of the first batch masked out (-inf).
        AllMasked,
    }

    fn fill(n: usize, m: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * m % 97) as f32 - 48.0) / 40.0).collect()
    }

    fn rounded(x: &[f32]) -> Vec<f32> {
        x.iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect()
    }

    fn dims(c: &Case, heads: usize, rows: usize, width: usize) -> Vec<usize> {
        c.layout.dims([c.b, heads, rows, width]).to_vec()
    }

    /// Runs the case with operands of `dtype` on `features` and `threads`; also returns
    /// the reference tier's output on the bf16-rounded operands (f64 sums).
    fn run_case(c: &Case, dtype: DType, f: &'static CpuFeatures, threads: usize) -> (Vec<f32>, Vec<f32>) {
        let (dq, dk, dvv) = (dims(c, c.h, c.s, c.d), dims(c, c.hkv, c.t, c.d), dims(c, c.hkv, c.t, c.dv));
        let n = |d: &[usize]| d.iter().product::<usize>();
        let (q, k, v) = (rounded(&fill(n(&dq), 31)), rounded(&fill(n(&dk), 17)), rounded(&fill(n(&dvv), 23)));
        let (mask, mdims, mdtype): (Vec<u8>, Vec<usize>, DType) = match c.mask {
            MaskKind::None => (vec![], vec![], DType::F32),
            MaskKind::Padding | MaskKind::AllMasked => {
                let m: Vec<f32> = (0..c.b * c.t)
                    .map(|i| match (c.mask, i / c.t, i % c.t) {
                        (MaskKind::AllMasked, 0, _) => f32::NEG_INFINITY,
                        (_, bi, j) if j + 3 * bi >= c.t.saturating_sub(2) && j > 0 => -10000.0,
                        _ => 0.0,
                    })
                    .collect();
                (bytemuck::cast_slice(&m).to_vec(), vec![c.b, 1, 1, c.t], DType::F32)
            }
            MaskKind::Bytes => ((0..c.t).map(|j| u8::from(j % 5 != 3)).collect(), vec![c.t], DType::U8),
        };
        let bytes = |x: &[f32], dt: DType| -> Vec<u8> {
            if dt == DType::BF16 {
                x.iter().flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes()).collect()
            } else {
                bytemuck::cast_slice(x).to_vec()
            }
        };
        let mask_bytes = |dt: DType| {
            if mdtype == DType::F32 && !mask.is_empty() {
                let m: Vec<f32> = mask.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
                bytes(&m, dt)
            } else {
                mask.clone()
            }
        };
        let op = Op::Attention { scale: None, layout: c.layout, causal: c.causal };
        let od = dims(c, c.h, c.s, c.dv);
        let go = |dt: DType, kernel: &dyn Fn(&[In], &mut [Out])| -> Vec<f32> {
            let (qb, kb, vb) = (bytes(&q, dt), bytes(&k, dt), bytes(&v, dt));
            let mdt = if mdtype == DType::U8 { DType::U8 } else { dt };
            let mb = mask_bytes(dt);
            let st = |d: &[usize]| Shape::new(d.to_vec()).contiguous_strides();
            let (sq, sk, sv, sm) = (st(&dq), st(&dk), st(&dvv), st(&mdims));
            let mut ins = vec![
                In { dtype: dt, dims: &dq, strides: &sq, bytes: &qb },
                In { dtype: dt, dims: &dk, strides: &sk, bytes: &kb },
                In { dtype: dt, dims: &dvv, strides: &sv, bytes: &vb },
            ];
            if c.mask != MaskKind::None {
                ins.push(In { dtype: mdt, dims: &mdims, strides: &sm, bytes: &mb });
            }
            let mut o = vec![0f32; n(&od)];
            let mut outs = [Out { dtype: DType::F32, dims: &od, bytes: bytemuck::cast_slice_mut(&mut o) }];
            kernel(&ins, &mut outs);
            o
        };
        let ctx = Ctx { threads, features: f, prepacked: None };
        let got = go(dtype, &|ins, outs| run(&op, ins, outs, &ctx).unwrap());
        let want = go(DType::F32, &|ins, outs| runtime::reference::run(&op, ins, outs).unwrap());
        (got, want)
    }

    fn check(c: &Case, dtype: DType, f: &'static CpuFeatures, threads: usize) {
        let (got, want) = run_case(c, dtype, f, threads);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let ok = if w.is_nan() { g.is_nan() } else { (g - w).abs() <= 1e-2 * (1.0 + w.abs()) };
            assert!(ok, "{c:?} {dtype:?} amx {} threads {threads} [{i}]: {g} vs {w}", f.amx_bf16);
        }
    }

    /// The features to test: AMX where this CPU has it, and AVX-512-BF16 alone.
    fn paths() -> Option<Vec<&'static CpuFeatures>> {
        let f = crate::features::get();
        if !f.avx512bf16 || f.isa != crate::features::Isa::Avx512 {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 attention is not offered here)");
            return None;
        }
        if !f.amx_bf16 {
            println!("AMX not available here: only the AVX-512-BF16 path is tested");
        }
        Some(if f.amx_bf16 { vec![f, crate::features::without_amx()] } else { vec![f] })
    }

    fn case(layout: AttentionLayout, [b, h, hkv, s, t, d, dv]: [usize; 7], mask: MaskKind, causal: bool) -> Case {
        Case { layout, b, h, hkv, s, t, d, dv, mask, causal }
    }

    /// Against the f64 reference on bf16-rounded operands, within what rounding the
    /// probabilities to bf16 costs: both layouts, s and t off the 32-row blocks, d 32 / 64
    /// / 80, grouped-query, padding and u8 masks, causal, f32 and bf16 operands, one and two
    /// threads, on AMX and on AVX-512-BF16.
    #[test]
    fn matches_the_reference_at_every_edge() {
        let Some(paths) = paths() else { return };
        use AttentionLayout::{Bnsd, Bsnd};
        use MaskKind::*;
        let cases = [
            case(Bnsd, [1, 2, 2, 5, 7, 8, 8], None, false),
            case(Bsnd, [2, 4, 2, 33, 40, 32, 32], Padding, false),
            case(Bsnd, [1, 3, 1, 130, 64, 64, 64], Bytes, false),
            case(Bnsd, [1, 1, 1, 128, 128, 64, 64], None, false),
            case(Bsnd, [2, 2, 2, 17, 50, 80, 80], Padding, false),
            case(Bnsd, [1, 2, 1, 40, 40, 64, 48], None, true),
            case(Bsnd, [1, 2, 2, 20, 70, 32, 32], Padding, true),
            case(Bsnd, [1, 2, 2, 70, 20, 32, 32], None, true),
            case(Bnsd, [1, 4, 2, 7, 3, 4, 4], Padding, true),
        ];
        for c in &cases {
            for f in &paths {
                for threads in [1, 2] {
                    check(c, DType::BF16, f, threads);
                }
                check(c, DType::F32, f, 2);
            }
        }
    }

    /// A hand-built `CpuFeatures` claiming a unit the CPU lacks is refused before any of
    /// its instructions runs (checked against a `detected` set without that unit, so that
    /// the refusal is exercised on every CPU).
    #[test]
    fn units_the_cpu_lacks_are_refused() {
        let base = crate::features::get().clone();
        let with = |bf16: bool, amx: bool| -> &'static CpuFeatures {
            Box::leak(Box::new(CpuFeatures { avx512bf16: bf16, amx_bf16: amx, ..base.clone() }))
        };
        let c = case(AttentionLayout::Bnsd, [1, 1, 1, 4, 4, 8, 8], MaskKind::None, false);
        let (dq, n) = (dims(&c, 1, 4, 8), 32);
        let st = Shape::new(dq.clone()).contiguous_strides();
        let x = vec![0u8; n * 4];
        let ins = [0, 1, 2].map(|_| In { dtype: DType::F32, dims: &dq, strides: &st, bytes: &x });
        let refused = |claim: &'static CpuFeatures, detected: &CpuFeatures| {
            let mut o = vec![0u8; n * 4];
            let mut out = Out { dtype: DType::F32, dims: &dq, bytes: &mut o };
            let ctx = Ctx { threads: 1, features: claim, prepacked: None };
            let r = attention(&ins, &mut out, None, AttentionLayout::Bnsd, false, &ctx, detected);
            matches!(r, Err(KernelError::MissingFeature(_)))
        };
        // AMX claimed where only AVX-512-BF16 is detected; AVX-512-BF16 claimed where it is not.
        assert!(refused(with(true, true), with(true, false)));
        assert!(refused(with(true, false), with(false, false)));
        assert!(refused(with(false, false), with(true, true)));
        if paths().is_some() {
            // What this CPU has is run.
            assert!(!refused(with(true, base.amx_bf16), &base));
        }
    }

    /// A row whose keys are all masked out (-inf) is 0; the other batch's rows are not.
    #[test]
    fn a_row_with_every_key_masked_is_zero() {
        let Some(paths) = paths() else { return };
        let c = case(AttentionLayout::Bsnd, [2, 2, 2, 9, 12, 32, 32], MaskKind::AllMasked, false);
        for f in paths {
            let (got, want) = run_case(&c, DType::BF16, f, 2);
            let half = got.len() / 2;
            assert!(got[..half].iter().all(|x| *x == 0.0), "masked rows: {:?}", &got[..8]);
            assert!(got[half..].iter().any(|x| *x != 0.0));
            check(&c, DType::BF16, f, 1);
            assert_eq!(got.len(), want.len());
        }
    }

    /// The bf16 casts round as `half` does (to nearest even, NaN kept, inf kept) and widen
    /// exactly, on one and two threads, at lengths off the vector width.
    #[test]
    fn casts_round_to_nearest_even_and_widen_exactly() {
        if paths().is_none() {
            return;
        }
        let f = crate::features::get();
        for n in [1, 15, 17, 100, 70_001] {
            let x: Vec<f32> = (0..n)
                .map(|i| match i % 7 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => -1.0 - (i as f32) * 1e-3,
                    3 => f32::from_bits(0x3f80_8000), // a tie: rounds to even
                    _ => (i as f32).sin() * 1e5,
                })
                .collect();
            let want: Vec<u16> = x.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
            let dims = [n];
            let st = [1usize];
            for threads in [1, 2] {
                let ctx = Ctx { threads, features: f, prepacked: None };
                let ins = [In { dtype: DType::F32, dims: &dims, strides: &st, bytes: bytemuck::cast_slice(&x) }];
                let mut got = vec![0u16; n];
                let mut outs = [Out { dtype: DType::BF16, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut got) }];
                cast(&Op::Cast { to: DType::BF16 }, &ins, &mut outs, &ctx).unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let nan = |b: u16| half::bf16::from_bits(b).is_nan();
                    assert!(g == w || nan(*g) && nan(*w), "n {n} [{i}] {}: {g:#x} vs {w:#x}", x[i]);
                }
                let ins = [In { dtype: DType::BF16, dims: &dims, strides: &st, bytes: bytemuck::cast_slice(&got) }];
                let mut back = vec![0f32; n];
                let mut outs = [Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut back) }];
                cast(&Op::Cast { to: DType::F32 }, &ins, &mut outs, &ctx).unwrap();
                for (b, g) in back.iter().zip(&got) {
                    assert_eq!(b.to_bits(), (*g as u32) << 16);
                }
            }
        }
    }

    /// A bf16 output holds the f32 output's rows rounded to bf16, exactly.
    #[test]
    fn a_bf16_output_is_the_f32_output_rounded() {
        let Some(paths) = paths() else { return };
        let (dims, n) = (vec![1usize, 37, 3, 40], 37 * 3 * 40);
        let st = Shape::new(dims.clone()).contiguous_strides();
        let x: Vec<u16> = fill(n, 29).iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
        let ins: Vec<In> = (0..3)
            .map(|_| In { dtype: DType::BF16, dims: &dims, strides: &st, bytes: bytemuck::cast_slice(&x) })
            .collect();
        let op = Op::Attention { scale: None, layout: AttentionLayout::Bsnd, causal: false };
        for f in paths {
            let ctx = Ctx { threads: 2, features: f, prepacked: None };
            let mut o32 = vec![0f32; n];
            run(
                &op,
                &ins,
                &mut [Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut o32) }],
                &ctx,
            )
            .unwrap();
            let mut o16 = vec![0u16; n];
            run(
                &op,
                &ins,
                &mut [Out { dtype: DType::BF16, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut o16) }],
                &ctx,
            )
            .unwrap();
            for (a, b) in o32.iter().zip(&o16) {
                assert_eq!(half::bf16::from_f32(*a).to_bits(), *b);
            }
        }
    }

    /// The registry offers the kernel for bf16 q, k, v only (f32 keeps the f32 kernel).
    #[test]
    fn chosen_for_bf16_operands_only() {
        use runtime::TensorMeta;
        if crate::features::get().isa != crate::features::Isa::Avx512 || !crate::kernels::gemm_bf16::available() {
            println!("skipped: no AVX-512-BF16 here");
            return;
        }
        let table = crate::kernels::table(crate::features::get());
        let op = Op::Attention { scale: None, layout: AttentionLayout::Bsnd, causal: false };
        let meta = |dt| TensorMeta::new(dt, Shape::new(vec![1, 8, 2, 32]));
        let pick = |dt| {
            let ins = vec![meta(dt), meta(dt), meta(dt)];
            let outs = op.infer(&ins).unwrap();
            let q = runtime::KernelQuery { op: &op, inputs: &ins, outputs: &outs };
            table
                .infos()
                .iter()
                .find(|k| k.op == runtime::OpKind::Attention && (k.supports)(&q).is_ok())
                .map(|k| k.unit.label)
        };
        assert!(pick(DType::BF16).is_some_and(|l| l.contains("bf16")), "{:?}", pick(DType::BF16));
        assert!(pick(DType::F32).is_some_and(|l| !l.contains("bf16")), "{:?}", pick(DType::F32));
    }
}

/// Times at the BERT shapes (run with `cargo test --release -p backend-cpu --lib
/// attention_bf16::timing -- --ignored --nocapture`): prints medians, asserts nothing.
#[cfg(test)]
mod timing {
    use super::*;
    use runtime::Shape;

    type KernelRef<'k> = dyn Fn(&[In], &mut [Out], &Ctx) + Sync + 'k;

    fn median_us(mut f: impl FnMut()) -> f64 {
        let mut t: Vec<f64> = (0..41)
            .map(|_| {
                let t0 = std::time::Instant::now();
                f();
                t0.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[20]
    }

    #[test]
    #[ignore = "a measurement, not a check"]
    fn bert_shapes() {
        let f = crate::features::get();
        if !f.avx512bf16 {
            println!("skipped: no AVX-512-BF16");
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (name, h, s, d) in [("bert-base", 12, 128, 64), ("minilm s128", 12, 128, 32), ("minilm s32", 12, 32, 32)] {
            let dims = vec![1, s, h, d];
            let st = Shape::new(dims.clone()).contiguous_strides();
            let x: Vec<f32> = (0..s * h * d).map(|i| ((i * 31 % 97) as f32 - 48.0) / 40.0).collect();
            let xb: Vec<u16> = x.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
            let mask = vec![0f32; s];
            let (md, ms) = (vec![1, 1, 1, s], vec![s, s, s, 1]);
            let op = Op::Attention { scale: None, layout: AttentionLayout::Bsnd, causal: false };
            let mut o = vec![0f32; x.len()];
            for threads in [1, 2] {
                for (label, feat) in [("amx", f), ("avx512-bf16", crate::features::without_amx())] {
                    let ctx = Ctx { threads, features: feat, prepacked: None };
                    let mut time = |dt: DType, bytes: &[u8], k: &KernelRef| {
                        let mb: Vec<u8> =
                            if dt == DType::BF16 { vec![0; 2 * s] } else { bytemuck::cast_slice(&mask).to_vec() };
                        let mut ins: Vec<In> =
                            (0..3).map(|_| In { dtype: dt, dims: &dims, strides: &st, bytes }).collect();
                        ins.push(In { dtype: dt, dims: &md, strides: &ms, bytes: &mb });
                        pool.install(|| {
                            median_us(|| {
                                let mut outs =
                                    [Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut o) }];
                                k(&ins, &mut outs, &ctx)
                            })
                        })
                    };
                    let f32k = time(DType::F32, bytemuck::cast_slice(&x), &|i, o, c| {
                        crate::kernels::fast::run(&op, i, o, c).unwrap()
                    });
                    let bf_f = time(DType::F32, bytemuck::cast_slice(&x), &|i, o, c| run(&op, i, o, c).unwrap());
                    let bf_b = time(DType::BF16, bytemuck::cast_slice(&xb), &|i, o, c| run(&op, i, o, c).unwrap());
                    println!(
                        "TIMING {name} threads {threads} {label}: f32 kernel {f32k:.0} us, bf16 kernel on f32 {bf_f:.0} us, on bf16 {bf_b:.0} us"
                    );
                }
            }
        }
    }
}
