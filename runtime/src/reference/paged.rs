//! The block-paged KV cache, shared by every host tier (the reference tier, the CPU
//! backend's generic and fast tiers, the Ascend backend's host tier and acl-emu): the
//! run-time checks of slots, block tables and context lengths, the cache write (whole
//! elements moved, so every dtype is exact) and the reference PagedAttention (f64).
//!
//! KvCacheWrite updates its caches in place ([`crate::Op::in_place`]): its kernels find
//! the caches' elements in outputs 0 and 1 and leave inputs 0 and 1 unread (host tiers
//! are passed no bytes for them).

use super::operands::{In, Out, load_f64, load_i64, store_f64};
use crate::kernel::{KernelError, KernelResult};

/// `[NB, BS, KVH, D]` of a cache operand.
pub fn cache_dims(dims: &[usize]) -> Result<[usize; 4], KernelError> {
    match dims {
        [nb, bs, kvh, d] => Ok([*nb, *bs, *kvh, *d]),
        _ => Err(KernelError::Internal("a paged cache must be [NB, BS, KVH, D]".into())),
    }
}

/// The slots of KvCacheWrite checked against a cache of `total` slots (NB · BS): `None`
/// for a negative slot (padding, skipped), an error for one ≥ `total`.
pub fn resolve_slots(slots: &In, total: usize) -> Result<Vec<Option<usize>>, KernelError> {
    load_i64(slots)?
        .into_iter()
        .map(|s| match usize::try_from(s) {
            Err(_) => Ok(None),
            Ok(u) if u < total => Ok(Some(u)),
            Ok(_) => Err(KernelError::IndexOutOfRange { index: s, len: total }),
        })
        .collect()
}

/// The sequences of a PagedAttention, checked: each one's context length, and the cache
/// block of each of its positions' blocks (`blocks[b · MB + j]`, valid for `j` below
/// `ceil(len / BS)`; the entries past a sequence's length are never read, so they may
/// hold anything). Plain data: Send and Sync.
pub struct PagedSeqs {
    pub lens: Vec<usize>,
    pub blocks: Vec<usize>,
    /// MB, the block table's width.
    pub width: usize,
}

impl PagedSeqs {
    /// Checks block_tables `[B, MB]` and context_lens `[B]` against a cache of `nb`
    /// blocks of `bs` slots: a length that is negative or above MB · BS, or a block id
    /// (among those a length covers) outside `[0, NB)`, is an error.
    pub fn resolve(block_tables: &In, context_lens: &In, nb: usize, bs: usize) -> Result<PagedSeqs, KernelError> {
        let width = block_tables.dims.get(1).copied().unwrap_or(0);
        let table = load_i64(block_tables)?;
        let raw = load_i64(context_lens)?;
        let cap = width.checked_mul(bs).ok_or(KernelError::Internal("MB · BS overflows".into()))?;
        let mut lens = Vec::with_capacity(raw.len());
        let mut blocks = vec![0usize; table.len()];
        for (b, &l) in raw.iter().enumerate() {
            let len = usize::try_from(l).ok().filter(|&n| n <= cap);
            let len = len.ok_or(KernelError::IndexOutOfRange { index: l, len: cap.saturating_add(1) })?;
            let used = if bs == 0 { 0 } else { len.div_ceil(bs) };
            for j in 0..used {
                let id = table[b * width + j];
                blocks[b * width + j] = usize::try_from(id)
                    .ok()
                    .filter(|&i| i < nb)
                    .ok_or(KernelError::IndexOutOfRange { index: id, len: nb })?;
            }
            lens.push(len);
        }
        Ok(PagedSeqs { lens, blocks, width })
    }

    /// The cache slot of position `p` of sequence `b` (`p` below its length).
    pub fn slot(&self, b: usize, p: usize, bs: usize) -> usize {
        self.blocks[b * self.width + p / bs] * bs + p % bs
    }
}

/// KvCacheWrite on host memory: key and value rows (`ins[2]`, `ins[3]`, `[N, KVH, D]`) moved
/// whole into the caches held by `outs[0]` and `outs[1]` at `ins[4]`'s slots. Every slot
/// is checked before anything is written, so an error leaves the caches unchanged.
pub fn kv_cache_write(ins: &[In], outs: &mut [Out]) -> KernelResult {
    let [nb, bs, kvh, d] = cache_dims(outs[0].dims)?;
    let total = nb.checked_mul(bs).ok_or(KernelError::Internal("NB · BS overflows".into()))?;
    let slots = resolve_slots(&ins[4], total)?;
    let row = kvh * d * ins[2].dtype.size();
    for (src, dst) in [(&ins[2], 0), (&ins[3], 1)] {
        if src.bytes.len() < slots.len() * row || outs[dst].bytes.len() < total * row {
            return Err(KernelError::TooShort {
                what: "KvCacheWrite operand",
                needed: slots.len() * row,
                got: src.bytes.len(),
            });
        }
        for (i, s) in slots.iter().enumerate() {
            if let Some(s) = s {
                outs[dst].bytes[s * row..(s + 1) * row].copy_from_slice(&src.bytes[i * row..(i + 1) * row]);
            }
        }
    }
    Ok(())
}

/// The reference PagedAttention (f64): per sequence and query head, the softmax of the
/// scaled scores over the sequence's positions, applied to their values. A zero length,
/// or scores all -inf, give a zero row; a NaN or +inf score gives NaN (as Attention).
pub fn paged_attention(ins: &[In], out: &mut Out, scale: Option<f32>) -> KernelResult {
    let [nb, bs, kvh, d] = cache_dims(ins[1].dims)?;
    let (b, h) = (ins[0].dims[0], ins[0].dims[1]);
    let group = h.checked_div(kvh).unwrap_or(1);
    let seqs = PagedSeqs::resolve(&ins[3], &ins[4], nb, bs)?;
    let (q, kc, vc) = (load_f64(&ins[0])?, load_f64(&ins[1])?, load_f64(&ins[2])?);
    let scale = scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
    let mut o = vec![0f64; b * h * d];
    for bi in 0..b {
        let len = seqs.lens[bi];
        for hh in 0..h {
            let qrow = &q[(bi * h + hh) * d..][..d];
            let kv_at = |p: usize| (seqs.slot(bi, p, bs) * kvh + hh / group) * d;
            let scores: Vec<f64> = (0..len)
                .map(|p| {
                    let s: f64 = qrow.iter().zip(&kc[kv_at(p)..][..d]).map(|(a, b)| a * b).sum();
                    s * scale
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let orow = &mut o[(bi * h + hh) * d..][..d];
            if len == 0 || m == f64::NEG_INFINITY {
                continue;
            }
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (p, w) in e.iter().enumerate() {
                for (acc, v) in orow.iter_mut().zip(&vc[kv_at(p)..][..d]) {
                    *acc += w / sum * v;
                }
            }
        }
    }
    store_f64(out, &o)
}
