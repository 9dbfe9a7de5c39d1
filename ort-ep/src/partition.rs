//! Grouping the claimed nodes into fused nodes without cycles.
//!
//! ORT replaces each group by one fused node; if a path left a group through a node ORT
//! runs (or through another group) and came back into it, the fused node would depend on
//! itself. [`groups`] walks the nodes in topological order. A claimed node joins the group of
//! one of its claimed producers unless a path from that group reaches the node through a node
//! outside the group (the group's "taint"); otherwise it starts a new group. When the node has
//! claimed producers in several such groups, those groups are merged into one with it, unless
//! a path between them leaves the merged set (checked by a walk over the nodes before it).
//! Every group is therefore convex (no path between two of its nodes leaves it). Taints are
//! kept per original group and read through the merges, which can only overstate them: a
//! merge never makes a wrong join possible, at worst it refuses one that would have been
//! valid, so the groups are large but not guaranteed maximal.

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

/// Groups of claimed nodes (`claimed[i]`), each listed in topological order, the groups in
/// the order of their first node; `preds[i]` are the nodes producing node `i`'s inputs.
/// `None` when the producers form a cycle.
pub fn groups(claimed: &[bool], preds: &[Vec<usize>]) -> Option<Vec<Vec<usize>>> {
    let order = topological(preds)?;
    let n = preds.len();
    let mut pos = vec![0usize; n];
    for (k, &i) in order.iter().enumerate() {
        pos[i] = k;
    }
    let mut succs = vec![Vec::new(); n];
    for (i, ps) in preds.iter().enumerate() {
        for &p in ps {
            succs[p].push(i);
        }
    }
    let mut sets = Sets { parent: Vec::new(), members: Vec::new() };
    let mut group: Vec<Option<usize>> = vec![None; n];
    // taint[i]: groups with a path to node i that passes through a node outside the group.
    let mut taint: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for &i in &order {
        let mut tainted = BTreeSet::new();
        let mut direct = Vec::new();
        for &p in &preds[i] {
            tainted.extend(taint[p].iter().map(|&g| sets.find(g)));
            if let Some(g) = group[p].map(|g| sets.find(g))
                && !direct.contains(&g)
            {
                direct.push(g);
            }
        }
        let chosen = if claimed[i] {
            let allowed: Vec<usize> = direct.iter().copied().filter(|g| !tainted.contains(g)).collect();
            let g = match allowed.split_first() {
                None => sets.new_set(),
                Some((&first, rest)) => {
                    for &other in rest {
                        if convex_union(&sets, first, other, i, &pos, &succs) {
                            sets.union(first, other);
                        }
                    }
                    sets.find(first)
                }
            };
            sets.members[g].push(i);
            Some(g)
        } else {
            None
        };
        group[i] = chosen;
        tainted.extend(direct.into_iter().map(|g| sets.find(g)).filter(|&g| Some(g) != chosen.map(|c| sets.find(c))));
        taint[i] = tainted;
    }
    let mut out: Vec<Vec<usize>> = (0..sets.parent.len())
        .filter(|&g| sets.parent[g] == g && !sets.members[g].is_empty())
        .map(|g| {
            let mut m = sets.members[g].clone();
            m.sort_by_key(|&i| pos[i]);
            m
        })
        .collect();
    out.sort_by_key(|m| pos[m[0]]);
    Some(out)
}

/// Union-find over group ids; the root holds the members.
struct Sets {
    parent: Vec<usize>,
    members: Vec<Vec<usize>>,
}

impl Sets {
    fn new_set(&mut self) -> usize {
        self.parent.push(self.parent.len());
        self.members.push(Vec::new());
        self.parent.len() - 1
    }
    fn find(&self, mut g: usize) -> usize {
        while self.parent[g] != g {
            g = self.parent[g];
        }
        g
    }
    /// Merges `b`'s set into `a`'s (both roots).
    fn union(&mut self, a: usize, b: usize) {
        let moved = std::mem::take(&mut self.members[b]);
        self.members[a].extend(moved);
        self.parent[b] = a;
    }
}

/// True when groups `a` and `b` together with node `i` stay convex: no path from one of
/// them leaves the set and comes back. Every such path lies among the nodes up to `i` in
/// topological order, all of them placed already.
fn convex_union(sets: &Sets, a: usize, b: usize, i: usize, pos: &[usize], succs: &[Vec<usize>]) -> bool {
    let mut inside = vec![false; pos.len()];
    for &m in sets.members[a].iter().chain(&sets.members[b]).chain(std::iter::once(&i)) {
        inside[m] = true;
    }
    let limit = pos[i];
    let mut seen = vec![false; pos.len()];
    let mut stack: Vec<usize> = (0..pos.len())
        .filter(|&m| inside[m])
        .flat_map(|m| succs[m].iter().copied())
        .filter(|&s| !inside[s] && pos[s] < limit)
        .collect();
    while let Some(x) = stack.pop() {
        if std::mem::replace(&mut seen[x], true) {
            continue;
        }
        for &s in &succs[x] {
            if inside[s] {
                return false;
            }
            if pos[s] < limit {
                stack.push(s);
            }
        }
    }
    true
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
        // 0 a; 1 x = ORT(a); 2 q; 3 m = (x, q) joins q's group; 4 n = (a, q). Merging a's and
        // q's groups with n would hold a and m, joined by a path through x (ORT's).
        let preds = vec![vec![], vec![0], vec![], vec![1, 2], vec![0, 2]];
        let gs = groups(&[true, false, true, true, true], &preds).unwrap();
        assert_eq!(gs, vec![vec![0, 4], vec![2, 3]]);
        assert!(!has_cycle_through_outside(&gs, &preds));
    }

    #[test]
    fn a_cycle_in_the_producers_is_refused() {
        assert!(groups(&[true, true], &[vec![1], vec![0]]).is_none());
        assert!(topological(&[vec![3]]).is_none());
    }
}
