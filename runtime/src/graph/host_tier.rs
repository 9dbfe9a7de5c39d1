//! Nodes a compiled graph would run on a device backend's host tier, and why.
//!
//! A device backend (Ascend) keeps the runtime's reference kernels as a last resort, run
//! on host copies of the operands ([`HOST_UNIT`]): correct, but far slower than the device
//! and paid for in PCIe copies. A graph meant for the device should have none; compiling
//! lists them, `npurt bench bert` prints them, and [`super::CompileOptions::deny_host_tier`]
//! makes them an error.

use super::ir::Graph;
use crate::kernel::{KernelQuery, Tier, Unit, UnitClass};
use crate::op::TensorMeta;
use crate::runtime::Runtime;

/// The unit of a device backend's host tier (the label backends give it).
pub const HOST_UNIT: Unit = Unit { class: UnitClass::Scalar, label: "host" };

/// A node whose chosen kernel runs on the host tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTierNode {
    /// The node's name in the graph.
    pub node: String,
    /// Its op.
    pub op: &'static str,
    /// Why each faster kernel of the op declined, `kernel: reason; ...`.
    pub reason: String,
}

/// The nodes of `graph` that `rt` would run on the host tier.
pub(super) fn find(rt: &Runtime, graph: &Graph) -> Vec<HostTierNode> {
    let mut found = Vec::new();
    for n in &graph.nodes {
        let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        let Ok(k) = rt.select_kernel(&n.op, &ins) else { continue };
        if k.unit != HOST_UNIT {
            continue;
        }
        let outs: Vec<TensorMeta> = n.outputs.iter().map(|v| graph.meta(*v).clone()).collect();
        let q = KernelQuery { op: &n.op, inputs: &ins, outputs: &outs };
        let reasons: Vec<String> = rt
            .kernels()
            .iter()
            .filter(|c| c.op == n.op.kind() && c.tier != Tier::Reference && c.unit != HOST_UNIT)
            .map(|c| match (c.supports)(&q) {
                Err(why) => format!("{}: {why}", c.name),
                Ok(()) => format!("{}: not chosen (forced tier or mapping)", c.name),
            })
            .collect();
        let reason =
            if reasons.is_empty() { "the backend has no other kernel for it".into() } else { reasons.join("; ") };
        found.push(HostTierNode { node: n.name.clone(), op: n.op.name(), reason });
    }
    found
}
