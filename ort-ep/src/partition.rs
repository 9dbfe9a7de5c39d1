//! Grouping the claimed nodes into fused nodes without cycles.
//!
//! ORT replaces each group by one fused node; if a path left a group through a node ORT
//! runs (or through another group) and came back into it, the fused node would depend on
//! itself. [`groups`] walks the nodes in topological order and puts a claimed node into the
//! group of one of its claimed producers unless a path from that group reaches the node
//! through a node outside it (the group's "taint"); otherwise the node starts a new group.
//! Every group is therefore convex (no path between two of its nodes leaves it), and a chain
//! or tree of claimed nodes fed only by each other becomes one group. This is greedy: two
//! groups are never merged after the fact, so two claimed branches that meet at a claimed
//! node join the group of its first claimed producer and leave the other its own.

use std::collections::BTreeSet;

/// The nodes in topological order (Kahn), given each node's producers; `None` when the
/// producers form a cycle or name a node that does not exist.
pub fn topological(preds: &[Vec<usize>]) -> Option<Vec<usize>> {
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
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &s in succs[i].iter().rev() {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.push(s);
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// Groups of claimed nodes (`claimed[i]`), each listed in topological order; `preds[i]` are
/// the nodes producing node `i`'s inputs. `None` when the producers form a cycle.
pub fn groups(claimed: &[bool], preds: &[Vec<usize>]) -> Option<Vec<Vec<usize>>> {
    let order = topological(preds)?;
    let n = preds.len();
    let mut group: Vec<Option<usize>> = vec![None; n];
    // taint[i]: groups with a path to node i that passes through a node outside the group.
    let mut taint: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    let mut out: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let mut tainted = BTreeSet::new();
        let mut direct = Vec::new();
        for &p in &preds[i] {
            tainted.extend(taint[p].iter().copied());
            if let Some(g) = group[p]
                && !direct.contains(&g)
            {
                direct.push(g);
            }
        }
        let chosen = if claimed[i] {
            let g = direct.iter().copied().find(|g| !tainted.contains(g)).unwrap_or_else(|| {
                out.push(Vec::new());
                out.len() - 1
            });
            out[g].push(i);
            Some(g)
        } else {
            None
        };
        group[i] = chosen;
        tainted.extend(direct.into_iter().filter(|&g| Some(g) != chosen));
        taint[i] = tainted;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when some path from a node of a group leaves it and comes back.
    fn has_cycle_through_outside(groups: &[Vec<usize>], preds: &[Vec<usize>]) -> bool {
        let n = preds.len();
        let mut succs = vec![Vec::new(); n];
        for (i, ps) in preds.iter().enumerate() {
            for &p in ps {
                succs[p].push(i);
            }
        }
        for g in groups {
            // Nodes reachable from the group by a path that has left it.
            let mut outside: Vec<usize> = g.iter().flat_map(|&m| succs[m].clone()).filter(|s| !g.contains(s)).collect();
            let mut seen = vec![false; n];
            while let Some(x) = outside.pop() {
                if seen[x] {
                    continue;
                }
                seen[x] = true;
                if g.contains(&x) {
                    return true;
                }
                outside.extend(succs[x].iter().copied());
            }
        }
        false
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
        for _ in 0..300 {
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
    fn a_cycle_in_the_producers_is_refused() {
        assert!(groups(&[true, true], &[vec![1], vec![0]]).is_none());
        assert!(topological(&[vec![3]]).is_none());
    }
}
