//! The static memory planner: offsets of a compiled graph's intermediates in one arena.
//!
//! Two buffers may share bytes only when one's last use happens-before the other's first
//! write (through stream order or an event, not merely program order). Three orderings are
//! tried — by size, by first use, by lifetime length — each placed first-fit at the lowest
//! offset that does not collide with a conflicting buffer already placed; the smallest
//! arena wins.

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

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// The most bytes live at once, with lifetimes as closed position intervals.
pub fn load(buffers: &[Buffer], align: usize) -> usize {
    let mut events: Vec<(usize, i64)> = Vec::new();
    for b in buffers {
        let s = align_up(b.size, align) as i64;
        events.push((b.def, s));
        events.push((b.last + 1, -s));
    }
    events.sort_by_key(|&(p, d)| (p, d));
    let (mut cur, mut best) = (0i64, 0i64);
    for (_, d) in events {
        cur += d;
        best = best.max(cur);
    }
    best as usize
}

/// Places `buffers`; `conflict(i, j)` says whether buffers `i` and `j` may be live at
/// the same time. Offsets are multiples of `align` (a power of two).
pub fn plan(buffers: &[Buffer], conflict: &dyn Fn(usize, usize) -> bool, align: usize) -> MemoryPlan {
    let align = align.max(1);
    let n = buffers.len();
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
    let bound = load(buffers, align);
    let mut best: Option<MemoryPlan> = None;
    let mut candidates = Vec::new();
    let by_first = orders[1].1.clone();
    let mut placements: Vec<(&'static str, Vec<usize>)> =
        orders.into_iter().map(|(name, order)| (name, place(buffers, &order, conflict, align))).collect();
    placements.push(("alternate-ends", place_two_ended(buffers, &by_first, conflict, align, bound)));
    for (name, offsets) in placements {
        let arena = (0..n).map(|i| offsets[i] + align_up(buffers[i].size, align)).max().unwrap_or(0);
        candidates.push((name, arena));
        if best.as_ref().is_none_or(|b| arena < b.arena_bytes) {
            best =
                Some(MemoryPlan { offsets, arena_bytes: arena, load_bytes: 0, strategy: name, candidates: Vec::new() });
        }
    }
    let mut p = best.unwrap_or(MemoryPlan {
        offsets: Vec::new(),
        arena_bytes: 0,
        load_bytes: 0,
        strategy: "empty",
        candidates: Vec::new(),
    });
    p.load_bytes = bound;
    p.candidates = candidates;
    p
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
/// to exactly the bound; buffers that fit neither end go first-fit above.
fn place_two_ended(
    buffers: &[Buffer],
    order: &[usize],
    conflict: &dyn Fn(usize, usize) -> bool,
    align: usize,
    bound: usize,
) -> Vec<usize> {
    let mut offsets = vec![usize::MAX; buffers.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(buffers.len());
    for (k, &i) in order.iter().enumerate() {
        let size = align_up(buffers[i].size, align);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| conflict(i, j))
            .map(|&j| (offsets[j], offsets[j] + align_up(buffers[j].size, align)))
            .collect();
        let free = gaps(&mut busy, bound);
        let low = free.iter().find(|(s, e)| e - s >= size).map(|(s, _)| *s);
        let high = free.iter().rev().find(|(s, e)| e - s >= size).map(|(_, e)| (e - size) / align * align);
        let high = high.filter(|h| free.iter().any(|(s, e)| *h >= *s && h + size <= *e));
        let pick = if k % 2 == 0 { low.or(high) } else { high.or(low) };
        offsets[i] = match pick {
            Some(o) => o,
            None => {
                // First fit, possibly above the bound.
                busy.sort_unstable();
                let mut at = 0;
                for (s, e) in busy {
                    if at + size <= s {
                        break;
                    }
                    at = at.max(e);
                }
                at
            }
        };
        placed.push(i);
    }
    offsets
}

/// First-fit placement in the given order.
fn place(buffers: &[Buffer], order: &[usize], conflict: &dyn Fn(usize, usize) -> bool, align: usize) -> Vec<usize> {
    let mut offsets = vec![usize::MAX; buffers.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(buffers.len());
    for &i in order {
        let size = align_up(buffers[i].size, align);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| conflict(i, j))
            .map(|&j| (offsets[j], offsets[j] + align_up(buffers[j].size, align)))
            .collect();
        busy.sort_unstable();
        let mut at = 0;
        for (s, e) in busy {
            if at + size <= s {
                break;
            }
            at = at.max(e);
        }
        offsets[i] = at;
        placed.push(i);
    }
    offsets
}

/// Interval conflict for a single stream: lifetimes `[def, last]` overlap.
pub fn interval_conflict(buffers: &[Buffer]) -> impl Fn(usize, usize) -> bool + '_ {
    move |i, j| {
        let (a, b) = (&buffers[i], &buffers[j]);
        a.def <= b.last && b.def <= a.last
    }
}

/// True when no two conflicting buffers overlap in the arena.
pub fn is_valid(buffers: &[Buffer], offsets: &[usize], conflict: &dyn Fn(usize, usize) -> bool) -> bool {
    for i in 0..buffers.len() {
        for j in i + 1..buffers.len() {
            if buffers[i].size == 0 || buffers[j].size == 0 || !conflict(i, j) {
                continue;
            }
            let (a0, a1) = (offsets[i], offsets[i] + buffers[i].size);
            let (b0, b1) = (offsets[j], offsets[j] + buffers[j].size);
            if a0 < b1 && b0 < a1 {
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
            let p = plan(&bufs, &c, 64);
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
            let p = plan(&bufs, &c, 1);
            assert!(is_valid(&bufs, &p.offsets, &c), "{bufs:?} -> {:?}", p.offsets);
            let opt = brute_force(&bufs);
            assert!(p.arena_bytes >= opt, "beat the optimum? {bufs:?}");
            assert!(p.load_bytes <= opt);
            worst = worst.max(p.arena_bytes as f64 / opt as f64);
        }
        // The heuristics are not optimal in general, but stay close on small cases.
        assert!(worst <= 1.5, "worst ratio to the optimum {worst}");
    }
}
