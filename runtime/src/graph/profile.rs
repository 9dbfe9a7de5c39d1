//! Profiles of compiled-graph runs: per-node timings, totals per op, and the Chrome trace.

use crate::kernel::Unit;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Timing of one node in one run.
#[derive(Clone, Debug)]
pub struct NodeProfile {
    pub name: String,
    pub op: &'static str,
    pub implementation: std::borrow::Cow<'static, str>,
    pub unit: Unit,
    pub stream: usize,
    /// Start relative to the run's start.
    pub start: Duration,
    pub elapsed: Duration,
    pub flops: u64,
    pub bytes: u64,
}

/// A profiled run.
#[derive(Clone, Debug, Default)]
pub struct RunProfile {
    pub total: Duration,
    pub nodes: Vec<NodeProfile>,
}

impl RunProfile {
    /// Chrome-trace JSON (opens in Perfetto / chrome://tracing): one track per stream.
    pub fn chrome_trace(&self) -> String {
        let streams: BTreeSet<usize> = self.nodes.iter().map(|n| n.stream).collect();
        let mut events: Vec<Value> = streams
            .iter()
            .map(|st| json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": st, "args": {"name": format!("stream {st}")}}))
            .collect();
        events.extend(self.nodes.iter().map(|n| {
            json!({
                "name": n.name,
                "cat": n.op,
                "ph": "X",
                "pid": 1,
                "tid": n.stream,
                "ts": n.start.as_secs_f64() * 1e6,
                "dur": n.elapsed.as_secs_f64() * 1e6,
                "args": {"implementation": n.implementation, "unit": n.unit.label, "flops": n.flops, "bytes": n.bytes},
            })
        }));
        let mut s = json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string();
        s.push('\n');
        s
    }

    /// Time, FLOPs and bytes per (op, implementation), largest time first.
    pub fn by_op(&self) -> Vec<(String, Duration, u64, usize)> {
        /// One (op, implementation)'s nodes together.
        #[derive(Default)]
        struct Totals {
            time: Duration,
            flops: u64,
            nodes: usize,
        }
        let mut m: HashMap<String, Totals> = HashMap::new();
        for n in &self.nodes {
            let e = m.entry(format!("{} [{}]", n.op, n.implementation)).or_default();
            e.time += n.elapsed;
            e.flops += n.flops;
            e.nodes += 1;
        }
        let mut v: Vec<_> = m.into_iter().map(|(k, t)| (k, t.time, t.flops, t.nodes)).collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }
}
