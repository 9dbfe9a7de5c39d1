//! A conformance case, and the constructor and constants the case generators share.

use runtime::{DType, Op};

/// One case: an op and its host inputs (dtype, shape, values as f64).
#[derive(Clone, Debug)]
pub struct Case {
    pub op: Op,
    pub inputs: Vec<(DType, Vec<usize>, Vec<f64>)>,
    /// Longest accumulation in the op (matmul K, softmax axis, norm width), for tolerances.
    pub accumulation: usize,
}

pub(super) const INF: f64 = f64::INFINITY;
pub(super) const NAN: f64 = f64::NAN;

pub(super) fn fixed(op: Op, inputs: Vec<(DType, Vec<usize>, Vec<f64>)>, accumulation: usize) -> Case {
    Case { op, inputs, accumulation }
}
