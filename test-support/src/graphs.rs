//! Graphs the tests of several crates build.

use runtime::graph::{Graph, HostTensor};
use runtime::{DType, Op};

/// `steps` rounds of MatMul (by the constant `w`, `n`×`n`) → Add → Tanh, each round reading
/// two values of earlier rounds, so that many intermediates stay live at once and the
/// memory plan reuses bytes between them: any overlap of two live tensors, or two runs
/// sharing intermediates, changes the output. Input `a` is `n`×`n` f32.
pub fn live_chain(n: usize, steps: usize, w: Vec<f32>) -> Graph {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [n, n]);
    let w = g.constant("w", HostTensor::from_vec([n, n], w).expect("w holds n * n floats"));
    let mut live = vec![a];
    for i in 0..steps {
        let src = live[i % live.len()];
        let other = live[(i * 5 + 1) % live.len()];
        let m = g.op(&format!("mm{i}"), Op::MatMul { trans_a: false, trans_b: false }, &[src, w]).expect("MatMul");
        let s = g.op(&format!("add{i}"), Op::Add, &[m, other]).expect("Add");
        let t = g.op(&format!("tanh{i}"), Op::Tanh, &[s]).expect("Tanh");
        live.push(t);
    }
    g.output(*live.last().expect("at least the input"));
    g
}
