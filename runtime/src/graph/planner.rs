//! The static memory planner: offsets of a compiled graph's intermediates in one arena.
//!
//! Two buffers may share bytes only when one's last use happens-before the other's first
//! write (through stream order or an event, not merely program order). Three orderings are
//! tried — by size, by first use, by lifetime length — each placed first-fit at the lowest
//! offset that does not collide with a conflicting buffer already placed; the smallest
//! arena wins.
//!
//! Sizes, offsets and the arena's end are checked: a plan whose arena would exceed
//! [`size::MAX_BYTES`] is an [`Error::Overflow`], although buffers that never conflict
//! may sum to more than `usize::MAX`.

use crate::error::{Error, Result};
use crate::size;

/// One buffer to place: its size and the positions (in the schedule's order) of the node
/// that writes it first and the node that reads it last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub size: usize,
    pub def: usize,
    pub last: usize,
}

/// The chosen placement.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPlan {
    /// Offset of each buffer in the arena (aligned).
    pub offsets: Vec<usize>,
    pub arena_bytes: usize,
    /// The most bytes live at once in the schedule's order (a lower bound).
    pub load_bytes: usize,
    /// Ordering that gave this plan.
    pub strategy: &'static str,
    /// Arena size of every ordering tried.
    pub candidates: Vec<(&'static str, usize)>,
}

impl MemoryPlan {
    /// `arena_bytes / load_bytes` (1.0 for an empty plan).
    pub fn ratio(&self) -> f64 {
        if self.load_bytes == 0 { 1.0 } else { self.arena_bytes as f64 / self.load_bytes as f64 }
    }
}

/// `x` rounded up to a multiple of `a` (non-zero).
fn align_up(x: usize, a: usize) -> Result<usize> {
    size::mul(format_args!("memory plan: a {x}-byte buffer aligned to {a} bytes"), x.div_ceil(a), a)
}

/// The most bytes live at once, with lifetimes as closed position intervals. An
/// [`Error::Overflow`] when an aligned size or that maximum does not fit in `usize`.
pub fn load(buffers: &[Buffer], align: usize) -> Result<usize> {
    let align = align.max(1);
    // Positions are widened so that `last + 1` cannot wrap; the running sum is kept in
    // `i128`, which holds the sum of the sizes of any slice of buffers.
    let mut events: Vec<(u128, i128)> = Vec::with_capacity(2 * buffers.len());
    for b in buffers {
        let s = align_up(b.size, align)? as i128;
        events.push((b.def as u128, s));
        events.push((b.last as u128 + 1, -s));
    }
    events.sort_by_key(|&(p, d)| (p, d));
    let (mut cur, mut best) = (0i128, 0i128);
    for (_, d) in events {
        cur += d;
        best = best.max(cur);
    }
    usize::try_from(best).map_err(|_| Error::Overflow {
        what: format!("memory plan: {best} bytes of {} intermediates live at once", buffers.len()),
    })
}

/// Places `buffers`; `conflict(i, j)` says whether buffers `i` and `j` may be live at
/// the same time. Offsets are multiples of `align` (a power of two). An
/// [`Error::Overflow`] when no ordering gives an arena of at most [`size::MAX_BYTES`].
pub fn plan(buffers: &[Buffer], conflict: &dyn Fn(usize, usize) -> bool, align: usize) -> Result<MemoryPlan> {
    let align = align.max(1);
    let n = buffers.len();
    let aligned: Vec<usize> = buffers.iter().map(|b| align_up(b.size, align)).collect::<Result<_>>()?;
    let lifetime = |b: &Buffer| b.last.saturating_sub(b.def);
    let mut orders: Vec<(&'static str, Vec<usize>)> = Vec::new();
    let mut by_size: Vec<usize> = (0..n).collect();
    by_size.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].def, i));
    orders.push(("greedy-by-size", by_size));
    let mut by_first: Vec<usize> = (0..n).collect();
    by_first.sort_by_key(|&i| (buffers[i].def, std::cmp::Reverse(buffers[i].size), i));
    orders.push(("by-first-use", by_first));
    let mut by_life: Vec<usize> = (0..n).collect();
    by_life.sort_by_key(|&i| (std::cmp::Reverse(lifetime(&buffers[i])), std::cmp::Reverse(buffers[i].size), i));
    orders.push(("by-lifetime", by_life));
    let bound = load(buffers, align)?;
    let mut best: Option<MemoryPlan> = None;
    let mut candidates = Vec::new();
    let by_first = orders[1].1.clone();
    let mut placements: Vec<(&'static str, Option<Vec<usize>>)> =
        orders.into_iter().map(|(name, order)| (name, place(&aligned, &order, conflict))).collect();
    placements.push(("alternate-ends", place_two_ended(&aligned, &by_first, conflict, align, bound)));
    for (name, offsets) in placements {
        // A placement whose end does not fit in `usize` is recorded as `usize::MAX`,
        // which is above `MAX_BYTES` and so never accepted.
        let arena = offsets.as_ref().and_then(|o| arena_end(o, &aligned)).unwrap_or(usize::MAX);
        candidates.push((name, arena));
        let Some(offsets) = offsets.filter(|_| arena <= size::MAX_BYTES) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| arena < b.arena_bytes) {
            best =
                Some(MemoryPlan { offsets, arena_bytes: arena, load_bytes: 0, strategy: name, candidates: Vec::new() });
        }
    }
    let Some(mut p) = best else {
        let smallest = candidates.iter().map(|c| c.1).min().unwrap_or(usize::MAX);
        let need = if smallest == usize::MAX { "at least usize::MAX".to_string() } else { smallest.to_string() };
        return Err(Error::Overflow {
            what: format!("memory plan: the arena for {n} intermediates needs {need} bytes, more than isize::MAX"),
        });
    };
    p.load_bytes = bound;
    p.candidates = candidates;
    Ok(p)
}

/// The highest end `offsets[i] + aligned[i]`; `None` when one does not fit in `usize`.
fn arena_end(offsets: &[usize], aligned: &[usize]) -> Option<usize> {
    offsets.iter().zip(aligned).try_fold(0usize, |m, (&o, &s)| Some(m.max(o.checked_add(s)?)))
}

/// The busy intervals `[offset, end)` of the placed buffers that conflict with `i`;
/// `None` when an end does not fit in `usize`.
fn busy_for(
    i: usize,
    placed: &[usize],
    offsets: &[usize],
    aligned: &[usize],
    conflict: &dyn Fn(usize, usize) -> bool,
) -> Option<Vec<(usize, usize)>> {
    placed
        .iter()
        .filter(|&&j| conflict(i, j))
        .map(|&j| Some((offsets[j], offsets[j].checked_add(aligned[j])?)))
        .collect()
}

/// The lowest offset at or above 0 where `size` bytes fit between the busy intervals;
/// `None` when the end of that offset does not fit in `usize`.
fn first_fit(busy: &mut [(usize, usize)], size: usize) -> Option<usize> {
    busy.sort_unstable();
    let mut at = 0usize;
    for &(s, e) in busy.iter() {
        // `at + size` past `usize::MAX` cannot fit below `s`.
        if at.checked_add(size).is_some_and(|end| end <= s) {
            break;
        }
        at = at.max(e);
    }
    at.checked_add(size).map(|_| at)
}

/// Free gaps `[start, end)` below `limit` between the busy intervals (sorted, merged).
fn gaps(busy: &mut [(usize, usize)], limit: usize) -> Vec<(usize, usize)> {
    busy.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0;
    for &(s, e) in busy.iter() {
        if s > at {
            out.push((at, s.min(limit)));
        }
        at = at.max(e);
        if at >= limit {
            break;
        }
    }
    if at < limit {
        out.push((at, limit));
    }
    out.retain(|(s, e)| e > s);
    out
}

/// Placement in first-use order that alternates between the bottom and the top of an
/// arena of `bound` bytes (the LOAD lower bound), so that chains of different sizes pack
/// to exactly the bound; buffers that fit neither end go first-fit above. `aligned` holds
/// the buffers' aligned sizes; `None` when an offset or an end does not fit in `usize`.
fn place_two_ended(
    aligned: &[usize],
    order: &[usize],
    conflict: &dyn Fn(usize, usize) -> bool,
    align: usize,
    bound: usize,
) -> Option<Vec<usize>> {
    let mut offsets = vec![usize::MAX; aligned.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(aligned.len());
    for (k, &i) in order.iter().enumerate() {
        let size = aligned[i];
        let mut busy = busy_for(i, &placed, &offsets, aligned, conflict)?;
        let free = gaps(&mut busy, bound);
        let low = free.iter().find(|(s, e)| e - s >= size).map(|(s, _)| *s);
        let high = free.iter().rev().find(|(s, e)| e - s >= size).map(|(_, e)| (e - size) / align * align);
        let high = high.filter(|h| free.iter().any(|(s, e)| *h >= *s && h + size <= *e));
        let pick = if k % 2 == 0 { low.or(high) } else { high.or(low) };
        offsets[i] = match pick {
            Some(o) => o,
            // First fit, possibly above the bound.
            None => first_fit(&mut busy, size)?,
        };
        placed.push(i);
    }
    Some(offsets)
}

/// First-fit placement in the given order. `aligned` holds the buffers' aligned sizes;
/// `None` when an offset or an end does not fit in `usize`.
fn place(aligned: &[usize], order: &[usize], conflict: &dyn Fn(usize, usize) -> bool) -> Option<Vec<usize>> {
    let mut offsets = vec![usize::MAX; aligned.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(aligned.len());
    for &i in order {
        let mut busy = busy_for(i, &placed, &offsets, aligned, conflict)?;
        offsets[i] = first_fit(&mut busy, aligned[i])?;
        placed.push(i);
    }
    Some(offsets)
}

/// Interval conflict for a single stream: lifetimes `[def, last]` overlap.
pub fn interval_conflict(buffers: &[Buffer]) -> impl Fn(usize, usize) -> bool + '_ {
    move |i, j| {
        let (a, b) = (&buffers[i], &buffers[j]);
        a.def <= b.last && b.def <= a.last
    }
}

/// True when no two conflicting buffers overlap in the arena (and every end fits in
/// `usize`).
pub fn is_valid(buffers: &[Buffer], offsets: &[usize], conflict: &dyn Fn(usize, usize) -> bool) -> bool {
    for i in 0..buffers.len() {
        for j in i + 1..buffers.len() {
            if buffers[i].size == 0 || buffers[j].size == 0 || !conflict(i, j) {
                continue;
            }
            let (Some(a1), Some(b1)) =
                (offsets[i].checked_add(buffers[i].size), offsets[j].checked_add(buffers[j].size))
            else {
                return false;
            };
            if offsets[i] < b1 && offsets[j] < a1 {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// The optimum by exhaustive search: every buffer sits at 0 or on top of another.
    fn brute_force(bufs: &[Buffer]) -> usize {
        // Any placement can be pushed down until each buffer sits at 0 or on top of a
        // buffer it conflicts with, so trying every buffer next, at every such offset,
        // finds the optimum.
        fn go(bufs: &[Buffer], offs: &mut Vec<Option<usize>>, placed: usize, best: &mut usize) {
            let cur = (0..bufs.len()).filter_map(|k| offs[k].map(|o| o + bufs[k].size)).max().unwrap_or(0);
            if cur >= *best {
                return;
            }
            if placed == bufs.len() {
                *best = cur;
                return;
            }
            for i in 0..bufs.len() {
                if offs[i].is_some() {
                    continue;
                }
                let mut cands = vec![0];
                cands.extend((0..bufs.len()).filter_map(|k| offs[k].map(|o| o + bufs[k].size)));
                cands.sort_unstable();
                cands.dedup();
                for c in cands {
                    let ok = (0..bufs.len()).all(|k| match offs[k] {
                        None => true,
                        Some(o) => {
                            let conflict = bufs[k].def <= bufs[i].last && bufs[i].def <= bufs[k].last;
                            !conflict || c + bufs[i].size <= o || o + bufs[k].size <= c
                        }
                    });
                    if ok {
                        offs[i] = Some(c);
                        go(bufs, offs, placed + 1, best);
                        offs[i] = None;
                    }
                }
            }
        }
        let mut best = bufs.iter().map(|b| b.size).sum::<usize>() + 1;
        go(bufs, &mut vec![None; bufs.len()], 0, &mut best);
        best
    }

    #[test]
    fn chains_reach_the_lower_bound() {
        // x0 -> x1 -> ... : each buffer is live while the next is written.
        for n in [1, 2, 5, 30] {
            let bufs: Vec<Buffer> = (0..n).map(|i| Buffer { size: 64 * (1 + i % 3), def: i, last: i + 1 }).collect();
            let c = interval_conflict(&bufs);
            let p = plan(&bufs, &c, 64).unwrap();
            assert!(is_valid(&bufs, &p.offsets, &c));
            assert_eq!(p.ratio(), 1.0, "{n}: arena {} load {}", p.arena_bytes, p.load_bytes);
        }
    }

    #[test]
    fn random_intervals_against_brute_force() {
        let mut rng = Rng(0x1234_5678);
        let mut worst: f64 = 1.0;
        for _ in 0..200 {
            let n = 1 + rng.below(5);
            let bufs: Vec<Buffer> = (0..n)
                .map(|_| {
                    let def = rng.below(8);
                    Buffer { size: 1 + rng.below(8), def, last: def + rng.below(4) }
                })
                .collect();
            let c = interval_conflict(&bufs);
            let p = plan(&bufs, &c, 1).unwrap();
            assert!(is_valid(&bufs, &p.offsets, &c), "{bufs:?} -> {:?}", p.offsets);
            let opt = brute_force(&bufs);
            assert!(p.arena_bytes >= opt, "beat the optimum? {bufs:?}");
            assert!(p.load_bytes <= opt);
            worst = worst.max(p.arena_bytes as f64 / opt as f64);
        }
        // The heuristics are not optimal in general, but stay close on small cases.
        assert!(worst <= 1.5, "worst ratio to the optimum {worst}");
    }

    #[test]
    fn sizes_summing_past_usize_max_are_checked() {
        const BIG: usize = 1 << 61;
        // Nine 2^61-byte buffers sum past usize::MAX; as a chain only two are live at
        // once, so the plan fits.
        let chain: Vec<Buffer> = (0..9).map(|i| Buffer { size: BIG, def: i, last: i + 1 }).collect();
        let c = interval_conflict(&chain);
        let p = plan(&chain, &c, 64).unwrap();
        assert!(is_valid(&chain, &p.offsets, &c));
        assert_eq!((p.arena_bytes, p.load_bytes), (2 * BIG, 2 * BIG));
        // All live at once: the live bytes do not fit in usize.
        let together: Vec<Buffer> = (0..9).map(|_| Buffer { size: BIG, def: 0, last: 1 }).collect();
        let c = interval_conflict(&together);
        assert!(matches!(load(&together, 64), Err(Error::Overflow { .. })));
        let e = plan(&together, &c, 64).unwrap_err();
        assert!(matches!(e, Error::Overflow { .. }), "{e}");
        // 3 * 2^62 fits in usize but not in one allocation.
        let three: Vec<Buffer> = (0..3).map(|_| Buffer { size: 1 << 62, def: 0, last: 0 }).collect();
        let c = interval_conflict(&three);
        assert_eq!(load(&three, 64).unwrap(), 3 << 62);
        let e = plan(&three, &c, 64).unwrap_err();
        assert!(e.to_string().contains("more than isize::MAX"), "{e}");
        // Rounding a size up to the alignment overflows.
        let huge = [Buffer { size: usize::MAX, def: 0, last: 0 }];
        let c = interval_conflict(&huge);
        assert!(matches!(plan(&huge, &c, 64), Err(Error::Overflow { .. })));
        assert!(plan(&huge, &c, 1).unwrap_err().to_string().contains("at least usize::MAX bytes"));
        // A last use at the final position does not wrap.
        assert_eq!(load(&[Buffer { size: 8, def: usize::MAX, last: usize::MAX }], 8).unwrap(), 8);
    }

    #[test]
    fn placements_whose_end_overflows_are_refused() {
        let aligned = [1 << 63, 1 << 63];
        let all = |_: usize, _: usize| true;
        assert_eq!(place(&aligned, &[0, 1], &all), None);
        assert_eq!(place_two_ended(&aligned, &[0, 1], &all, 1, usize::MAX), None);
        assert_eq!(arena_end(&[usize::MAX], &[1]), None);
        let bufs = [Buffer { size: 2, def: 0, last: 0 }, Buffer { size: 2, def: 0, last: 0 }];
        assert!(!is_valid(&bufs, &[usize::MAX, 0], &all));
        let none = |_: usize, _: usize| false;
        assert_eq!(place(&aligned, &[0, 1], &none), Some(vec![0, 0]));
    }
}
