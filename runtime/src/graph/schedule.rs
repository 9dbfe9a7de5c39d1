//! Stream assignment for a graph and the happens-before relation it implies.

use super::ir::{Graph, NodeId, ValueKind};
use crate::config::Scheduling;

/// How many streams a strategy may use and how nodes are prioritised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleStrategy {
    /// Critical path first over up to `max_streams` streams.
    Latency,
    /// One stream: every node gets the whole device (requests overlap across calls).
    Throughput,
    /// Critical path first over at most two streams.
    Balanced,
}

impl From<Scheduling> for ScheduleStrategy {
    fn from(s: Scheduling) -> Self {
        match s {
            Scheduling::Latency => ScheduleStrategy::Latency,
            Scheduling::Throughput => ScheduleStrategy::Throughput,
            Scheduling::Balanced => ScheduleStrategy::Balanced,
        }
    }
}

/// A schedule: the stream of each node, a global submission order (topological), the
/// cross-stream producers each node waits for, and reachability for happens-before.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub streams: usize,
    /// Stream index of each node (indexed by `NodeId`).
    pub stream_of: Vec<usize>,
    /// Nodes in submission order.
    pub order: Vec<NodeId>,
    /// Position of each node in `order`.
    pub position: Vec<usize>,
    /// For each node, producers on other streams it must wait for (via events).
    pub waits: Vec<Vec<NodeId>>,
    /// Estimated start of each node in cost units (for thread budgets and display).
    pub est_start: Vec<f64>,
    /// Nodes that may run at the same time as each node (estimated), >= 1.
    pub concurrency: Vec<usize>,
    /// `reach[b]` has bit `a` when node `a` finishes before node `b` starts.
    reach: Vec<Vec<u64>>,
}

/// Producers (nodes) of each node's inputs, and for a node updating a value in place the
/// nodes that read the value before it ([`super::inplace::write_after_read`]).
pub fn dependencies(g: &Graph) -> Vec<Vec<usize>> {
    let war = super::inplace::write_after_read(g);
    g.nodes
        .iter()
        .zip(war)
        .map(|(n, war)| {
            let mut d: Vec<usize> = n
                .inputs
                .iter()
                .filter_map(|v| if let ValueKind::Node(p) = g.values[v.0].kind { Some(p.0) } else { None })
                .chain(war)
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect()
}

impl Schedule {
    /// All nodes on one stream in graph order.
    pub fn sequential(g: &Graph) -> Schedule {
        let n = g.nodes.len();
        Self::finish(g, 1, vec![0; n], (0..n).map(|i| i as f64).collect(), vec![1.0; n])
    }

    /// List scheduling with the critical path first. `cost[i]` estimates node `i`'s time.
    pub fn build(g: &Graph, strategy: ScheduleStrategy, max_streams: usize, cost: &[f64]) -> Schedule {
        let n = g.nodes.len();
        let k = match strategy {
            ScheduleStrategy::Throughput => 1,
            ScheduleStrategy::Balanced => max_streams.clamp(1, 2),
            ScheduleStrategy::Latency => max_streams.max(1),
        };
        if k == 1 || n == 0 {
            return Self::sequential(g);
        }
        let deps = dependencies(g);
        let mut succ = vec![Vec::new(); n];
        for (i, d) in deps.iter().enumerate() {
            for &p in d {
                succ[p].push(i);
            }
        }
        let c: Vec<f64> = (0..n).map(|i| cost.get(i).copied().unwrap_or(1.0).max(1e-9)).collect();
        // Bottom level: longest path from the node to an exit.
        let mut bottom = vec![0.0; n];
        for i in (0..n).rev() {
            bottom[i] = c[i] + succ[i].iter().map(|&s| bottom[s]).fold(0.0, f64::max);
        }
        let mut remaining: Vec<usize> = deps.iter().map(|d| d.len()).collect();
        let mut ready: Vec<usize> = (0..n).filter(|&i| remaining[i] == 0).collect();
        let mut finish = vec![0.0f64; n];
        let mut start = vec![0.0f64; n];
        let mut stream_free = vec![0.0f64; k];
        let mut stream_of = vec![0usize; n];
        let mut last_on = vec![usize::MAX; k];
        while !ready.is_empty() {
            // Highest bottom level first; ties by graph order.
            let (ri, &node) = ready
                .iter()
                .enumerate()
                .max_by(|a, b| bottom[*a.1].total_cmp(&bottom[*b.1]).then(b.1.cmp(a.1)))
                .unwrap_or((0, &ready[0]));
            ready.swap_remove(ri);
            let dep_ready = deps[node].iter().map(|&p| finish[p]).fold(0.0, f64::max);
            // Prefer the stream of the main producer (no event needed) when it is not later.
            let mut best = 0;
            let mut best_t = f64::INFINITY;
            for s in 0..k {
                let t = stream_free[s].max(dep_ready);
                let affinity = deps[node].iter().any(|&p| stream_of[p] == s && last_on[s] == p);
                let t_adj = if affinity { t - 1e-12 } else { t };
                if t_adj < best_t {
                    best_t = t_adj;
                    best = s;
                }
            }
            let t0 = stream_free[best].max(dep_ready);
            start[node] = t0;
            finish[node] = t0 + c[node];
            stream_free[best] = finish[node];
            stream_of[node] = best;
            last_on[best] = node;
            for &s in &succ[node] {
                remaining[s] -= 1;
                if remaining[s] == 0 {
                    ready.push(s);
                }
            }
        }
        // Renumber streams in order of first use.
        let mut map = vec![usize::MAX; k];
        let mut next = 0;
        let mut by_start: Vec<usize> = (0..n).collect();
        by_start.sort_by(|a, b| start[*a].total_cmp(&start[*b]).then(a.cmp(b)));
        for &i in &by_start {
            if map[stream_of[i]] == usize::MAX {
                map[stream_of[i]] = next;
                next += 1;
            }
        }
        let stream_of: Vec<usize> = stream_of.iter().map(|&s| map[s]).collect();
        // Concurrency estimate: nodes whose estimated intervals overlap.
        let conc: Vec<f64> = (0..n)
            .map(|i| {
                (0..n)
                    .filter(|&j| start[j] < finish[i] && start[i] < finish[j])
                    .map(|j| stream_of[j])
                    .collect::<std::collections::BTreeSet<_>>()
                    .len() as f64
            })
            .collect();
        Self::finish(g, next.max(1), stream_of, start, conc)
    }

    fn finish(g: &Graph, streams: usize, stream_of: Vec<usize>, start: Vec<f64>, conc: Vec<f64>) -> Schedule {
        let n = g.nodes.len();
        let deps = dependencies(g);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|a, b| start[*a].total_cmp(&start[*b]).then(a.cmp(b)));
        // Enforce topological order (start times respect dependencies, but be safe).
        let mut placed = vec![false; n];
        let mut topo = Vec::with_capacity(n);
        let mut pending = order.clone();
        while !pending.is_empty() {
            let before = pending.len();
            pending.retain(|&i| {
                if deps[i].iter().all(|&d| placed[d]) {
                    placed[i] = true;
                    topo.push(i);
                    false
                } else {
                    true
                }
            });
            if pending.len() == before {
                // A cycle cannot occur in a validated graph; keep the rest in graph order.
                topo.append(&mut pending);
            }
        }
        let mut position = vec![0; n];
        for (p, &i) in topo.iter().enumerate() {
            position[i] = p;
        }
        let waits: Vec<Vec<NodeId>> = (0..n)
            .map(|i| deps[i].iter().filter(|&&p| stream_of[p] != stream_of[i]).map(|&p| NodeId(p)).collect())
            .collect();
        // Reachability over data edges plus same-stream order.
        let words = n.div_ceil(64).max(1);
        let mut reach = vec![vec![0u64; words]; n];
        let mut last_on_stream: Vec<Option<usize>> = vec![None; streams];
        for &i in &topo {
            let mut r = vec![0u64; words];
            let mut preds: Vec<usize> = deps[i].clone();
            if let Some(p) = last_on_stream.get(stream_of[i]).copied().flatten() {
                preds.push(p);
            }
            for p in preds {
                r[p / 64] |= 1 << (p % 64);
                for w in 0..words {
                    r[w] |= reach[p][w];
                }
            }
            reach[i] = r;
            if let Some(slot) = last_on_stream.get_mut(stream_of[i]) {
                *slot = Some(i);
            }
        }
        Schedule {
            streams,
            stream_of,
            order: topo.into_iter().map(NodeId).collect(),
            position,
            waits,
            est_start: start,
            concurrency: conc.iter().map(|&c| (c as usize).max(1)).collect(),
            reach,
        }
    }

    /// True when node `a` is guaranteed to finish before node `b` starts.
    pub fn happens_before(&self, a: usize, b: usize) -> bool {
        a != b && self.reach.get(b).is_some_and(|r| r[a / 64] >> (a % 64) & 1 == 1)
    }
}
