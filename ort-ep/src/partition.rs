//! Grouping the claimed nodes into fused nodes without cycles.
//!
//! ORT replaces each group by one fused node, and the graph it then holds must be acyclic:
//! no group may reach itself through a node ORT runs or through another group. Convex groups
//! (no path between two members leaves the group) are not enough: with `a1 -> b1` and
//! `b2 -> a2`, groups `{a1, a2}` and `{b1, b2}` are each convex, yet each fused node feeds the
//! other. [`groups`] therefore cuts one topological order of the whole graph into runs: the
//! claimed nodes of a run, contiguous in that order, form a group. Every edge between two runs
//! goes forward in the order, so the graph of fused nodes and ORT's nodes is acyclic by
//! construction. The order is chosen to make the runs long: Kahn's algorithm takes, among the
//! ready nodes, those of the run in progress first (claimed ones during a claimed run), and
//! starts a claimed run only when no node ORT runs is ready, so that everything a claimed run
//! could still absorb has been released. The groups are therefore large but not guaranteed
//! maximal, and a group may hold parts that no path joins (independent branches run as one
//! fused node).

/// The nodes in topological order (Kahn), given each node's producers; `None` when the
/// producers form a cycle or name a node that does not exist.
pub fn topological(preds: &[Vec<usize>]) -> Option<Vec<usize>> {
    kahn(preds, |_| false).map(|(order, _)| order)
}

/// Kahn's algorithm over `preds`, taking the ready nodes for which `claimed` equals the kind
/// of the run in progress first; returns the order and, per position, whether a new run
/// starts there. `None` on a cycle or a producer out of range.
fn kahn(preds: &[Vec<usize>], claimed: impl Fn(usize) -> bool) -> Option<(Vec<usize>, Vec<bool>)> {
    let n = preds.len();
    let mut indegree = vec![0usize; n];
    let mut succs = vec![Vec::new(); n];
    for (i, ps) in preds.iter().enumerate() {
        for &p in ps {
            if p >= n {
                return None;
            }
            indegree[i] += 1;
            succs[p].push(i);
        }
    }
    // Two stacks of ready nodes: [0] those ORT runs, [1] the claimed ones.
    let mut ready: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    for i in (0..n).rev().filter(|&i| indegree[i] == 0) {
        ready[claimed(i) as usize].push(i);
    }
    let mut order = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n);
    let mut kind = 0usize;
    loop {
        let k = if !ready[kind].is_empty() {
            kind
        } else if !ready[0].is_empty() {
            0
        } else if !ready[1].is_empty() {
            1
        } else {
            break;
        };
        let i = ready[k].pop()?;
        starts.push(k != kind || order.is_empty());
        kind = k;
        order.push(i);
        for &s in succs[i].iter().rev() {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready[claimed(s) as usize].push(s);
            }
        }
    }
    (order.len() == n).then_some((order, starts))
}

/// Groups of claimed nodes (`claimed[i]`), each listed in topological order, the groups in
/// the order of their first node; `preds[i]` are the nodes producing node `i`'s inputs.
/// `None` when the producers form a cycle.
pub fn groups(claimed: &[bool], preds: &[Vec<usize>]) -> Option<Vec<Vec<usize>>> {
    let is_claimed = |i: usize| claimed.get(i).copied().unwrap_or(false);
    let (order, starts) = kahn(preds, is_claimed)?;
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        if !is_claimed(i) {
            continue;
        }
        match out.last_mut() {
            Some(g) if !starts[k] => g.push(i),
            _ => out.push(vec![i]),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when the graph with every group contracted to one node has a cycle.
    fn has_cycle_through_outside(groups: &[Vec<usize>], preds: &[Vec<usize>]) -> bool {
        let n = preds.len();
        // Each node's contracted id: its group's, or its own past the groups.
        let mut id: Vec<usize> = (groups.len()..groups.len() + n).collect();
        for (g, members) in groups.iter().enumerate() {
            for &m in members {
                id[m] = g;
            }
        }
        let mut cpreds = vec![Vec::new(); groups.len() + n];
        for (i, ps) in preds.iter().enumerate() {
            for &p in ps {
                if id[p] != id[i] {
                    cpreds[id[i]].push(id[p]);
                }
            }
        }
        topological(&cpreds).is_none()
    }

    #[test]
    fn a_chain_is_one_group() {
        let preds = vec![vec![], vec![0], vec![1]];
        assert_eq!(groups(&[true, true, true], &preds).unwrap(), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn a_node_left_to_ort_in_the_middle_splits_the_group() {
        // 0 -> 1 (ORT) -> 2, and 0 -> 2 directly: 2 may not join 0's group.
        let preds = vec![vec![], vec![0], vec![0, 1]];
        let gs = groups(&[true, false, true], &preds).unwrap();
        assert_eq!(gs, vec![vec![0], vec![2]]);
        assert!(!has_cycle_through_outside(&gs, &preds));
    }

    #[test]
    fn a_side_branch_through_ort_that_does_not_return_keeps_the_group() {
        // 0 -> 1 -> 2 claimed, 0 -> 3 (ORT), nothing comes back.
        let preds = vec![vec![], vec![0], vec![1], vec![0]];
        assert_eq!(groups(&[true, true, true, false], &preds).unwrap(), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn no_group_depends_on_itself_on_random_graphs() {
        // A small deterministic generator: every node reads up to three earlier nodes.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let n = 2 + (next() % 12) as usize;
            let preds: Vec<Vec<usize>> = (0..n)
                .map(|i| if i == 0 { vec![] } else { (0..next() % 3).map(|_| (next() as usize) % i).collect() })
                .collect();
            let claimed: Vec<bool> = (0..n).map(|_| next() % 3 != 0).collect();
            let gs = groups(&claimed, &preds).unwrap();
            assert!(!has_cycle_through_outside(&gs, &preds), "{preds:?} {claimed:?} -> {gs:?}");
            let mut all: Vec<usize> = gs.concat();
            all.sort();
            let want: Vec<usize> = (0..n).filter(|&i| claimed[i]).collect();
            assert_eq!(all, want, "every claimed node is in exactly one group");
        }
    }

    #[test]
    fn branches_from_different_groups_merge_where_they_meet() {
        // Relu(x), Relu(y), Add of both: one group.
        let preds = vec![vec![], vec![], vec![0, 1]];
        assert_eq!(groups(&[true, true, true], &preds).unwrap(), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn a_merge_that_would_make_a_cycle_is_refused() {
        // 0 a; 1 x = ORT(a); 2 q; 3 m = (x, q); 4 n = (a, q). Groups {a, n} and {q, m}
        // would feed each other (a -> x -> m, q -> n): m waits for x in a group of its own.
        let preds = vec![vec![], vec![0], vec![], vec![1, 2], vec![0, 2]];
        let gs = groups(&[true, false, true, true, true], &preds).unwrap();
        assert_eq!(gs, vec![vec![0, 2, 4], vec![3]]);
        assert!(!has_cycle_through_outside(&gs, &preds));
    }

    #[test]
    fn two_convex_groups_that_feed_each_other_are_not_formed() {
        // 0 a1, 1 ORT(a1), 2 b1 = f(1), 3 b2, 4 ORT(b2), 5 a2 = g(4): groups {0, 5} and
        // {2, 3} would each be convex, yet each fused node would feed the other.
        let preds = vec![vec![], vec![0], vec![1], vec![], vec![3], vec![4]];
        let claimed = [true, false, true, true, false, true];
        assert!(has_cycle_through_outside(&[vec![0, 5], vec![2, 3]], &preds));
        let gs = groups(&claimed, &preds).unwrap();
        assert!(!has_cycle_through_outside(&gs, &preds), "{gs:?}");
    }

    #[test]
    fn a_cycle_in_the_producers_is_refused() {
        assert!(groups(&[true, true], &[vec![1], vec![0]]).is_none());
        assert!(topological(&[vec![3]]).is_none());
    }
}
