//! The conformance cases of the paged KV cache (KvCacheWrite, PagedAttention), which the
//! suite (`crate::conformance`) runs with its own, and the reading of every output of a
//! case (KvCacheWrite has two): the suite compares every output, one after the other, and
//! skips (saying so) a case whose op has no kernel on any tier of a backend (an op not
//! mapped there yet).

use runtime::{DType, Op, Result};

/// An input of a case: dtype, shape, values.
pub type Input = (DType, Vec<usize>, Vec<f64>);

/// `f` of every item, one after the other (every output of a run).
pub fn concat<T>(items: &[T], f: impl Fn(&T) -> Result<Vec<f64>>) -> Result<Vec<f64>> {
    let mut all = Vec::new();
    for x in items {
        all.extend(f(x)?);
    }
    Ok(all)
}

/// The cases of float dtype `f` as (op, inputs, accumulation), random operands from
/// `vals`: KvCacheWrite (padding slots skipped, i32 and i64 slots, block size 1 and 16)
/// and PagedAttention (block sizes 1, 4 and 16, grouped-query heads, a context of length
/// 0, blocks out of order, table entries past a length left unread).
pub fn cases(f: DType, vals: &mut dyn FnMut(DType, &[usize]) -> Vec<f64>) -> Vec<(Op, Vec<Input>, usize)> {
    let mut out = Vec::new();
    let i32s = |s: Vec<usize>, v: Vec<f64>| (DType::I32, s, v);
    for (nb, bs, kvh, d, slots, it) in [
        (3, 4, 2, 3, vec![5.0, -1.0, 0.0, 11.0], DType::I32),
        (4, 1, 1, 8, vec![3.0, 0.0, -7.0], DType::I64),
        (2, 16, 2, 4, vec![31.0, 16.0, 15.0, -1.0, 2.0], DType::I32),
    ] {
        let (c, r) = (vec![nb, bs, kvh, d], vec![slots.len(), kvh, d]);
        let inputs = vec![
            (f, c.clone(), vals(f, &c)),
            (f, c.clone(), vals(f, &c)),
            (f, r.clone(), vals(f, &r)),
            (f, r.clone(), vals(f, &r)),
            (it, vec![slots.len()], slots),
        ];
        out.push((Op::KvCacheWrite, inputs, 1));
    }
    // (NB, BS, KVH, H, D, block table rows, lengths, scale); -9 marks entries past a length.
    for (nb, bs, kvh, h, d, tables, lens, scale) in [
        (
            6,
            4,
            2,
            4,
            8,
            vec![vec![2.0, 0.0, -9.0], vec![-9.0, -9.0, -9.0], vec![5.0, 1.0, 3.0]],
            vec![5.0, 0.0, 12.0],
            None,
        ),
        (9, 1, 1, 3, 5, vec![vec![8.0, 0.0, 4.0, 2.0]], vec![4.0], Some(0.3)),
        (3, 16, 2, 2, 4, vec![vec![2.0, 0.0], vec![1.0, -9.0]], vec![20.0, 16.0], None),
    ] {
        let (b, mb) = (tables.len(), tables[0].len());
        let (c, q) = (vec![nb, bs, kvh, d], vec![b, h, d]);
        let inputs = vec![
            (f, q.clone(), vals(f, &q)),
            (f, c.clone(), vals(f, &c)),
            (f, c.clone(), vals(f, &c)),
            i32s(vec![b, mb], tables.concat()),
            i32s(vec![b], lens),
        ];
        out.push((Op::PagedAttention { scale }, inputs, nb * bs));
    }
    out
}

/// Calls every tier must refuse at run time, for a float `dtype` (none for the others): a
/// slot at NB · BS, a block id outside `[0, NB)` (negative too), a length above MB · BS or
/// below 0.
pub fn error_cases(f: DType) -> Vec<(Op, Vec<Input>)> {
    let mut out = Vec::new();
    if !f.is_float() {
        return out;
    }
    let c = || (f, vec![2, 2, 1, 2], vec![0.5; 8]);
    let rows = (f, vec![1, 1, 2], vec![1.0, 2.0]);
    for slot in [4.0, 1e9] {
        let inputs = vec![c(), c(), rows.clone(), rows.clone(), (DType::I64, vec![1], vec![slot])];
        out.push((Op::KvCacheWrite, inputs));
    }
    for (table, len) in [(2.0, 1.0), (-1.0, 1.0), (0.0, 5.0), (0.0, -1.0)] {
        let inputs = vec![
            (f, vec![1, 2, 2], vec![1.0; 4]),
            c(),
            c(),
            (DType::I32, vec![1, 2], vec![table, 1.0]),
            (DType::I32, vec![1], vec![len]),
        ];
        out.push((Op::PagedAttention { scale: None }, inputs));
    }
    out
}
