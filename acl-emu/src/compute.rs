//! What a queued aclnn kernel computes. Everything goes through the runtime's reference
//! kernels, except large matrix products: those run as an f32 GEMM (the `gemm` crate)
//! with f32 accumulation, as the Cube accumulates, so that whole models (BERT-base at
//! sequence 128) run over the emulator in seconds instead of minutes. Small products keep
//! the reference kernels' exact answers.

use runtime::reference::{In, Out};
use runtime::{DType, KernelError, KernelResult, Op};

/// Products of at least this many multiply-adds take the GEMM.
const GEMM_FROM: usize = 1 << 18;

/// Computes `op` on contiguous inputs into contiguous outputs.
pub fn run(op: &Op, ins: &[In], outs: &mut [Out]) -> KernelResult {
    let done = match op {
        Op::MatMul { trans_a: false, trans_b: false } => matmul(ins, outs, 1.0, None)?,
        Op::Gemm { trans_a: false, trans_b: false, alpha, beta } if ins.len() == 3 => {
            matmul(ins, outs, *alpha, Some(*beta))?
        }
        _ => false,
    };
    if done { Ok(()) } else { runtime::reference::run(op, ins, outs) }
}

fn float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16)
}

fn to_f32(x: &In) -> Vec<f32> {
    match x.dtype {
        DType::F16 => x.bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        _ => x.bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

fn store(out: &mut Out, v: &[f32]) {
    match out.dtype {
        DType::F16 => {
            for (o, x) in out.bytes.chunks_exact_mut(2).zip(v) {
                o.copy_from_slice(&half::f16::from_f32(*x).to_le_bytes());
            }
        }
        _ => {
            for (o, x) in out.bytes.chunks_exact_mut(4).zip(v) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// `[..., m, k] x [..., k, n]` where both have the same batch dims or one is 2-D, and
/// (`beta`: Addmm) `alpha * a b + beta * c` with `c` a scalar, a row `[n]` / `[1, n]` or a
/// full `[m, n]`. `Ok(false)` leaves any other case (and small ones) to the reference.
fn matmul(ins: &[In], outs: &mut [Out], alpha: f32, beta: Option<f32>) -> Result<bool, KernelError> {
    let (a, b) = (&ins[0], &ins[1]);
    let Some(out) = outs.first_mut() else { return Ok(false) };
    if !float(a.dtype) || !float(b.dtype) || !float(out.dtype) || a.dims.len() < 2 || b.dims.len() < 2 {
        return Ok(false);
    }
    let (ra, rb) = (a.dims.len(), b.dims.len());
    let (m, k, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 1]);
    if b.dims[rb - 2] != k || m * n * k < GEMM_FROM || alpha == 0.0 || !alpha.is_finite() {
        return Ok(false);
    }
    let (ba, bb) = (&a.dims[..ra - 2], &b.dims[..rb - 2]);
    let batch_a: usize = ba.iter().product();
    let batch_b: usize = bb.iter().product();
    let batch = batch_a.max(batch_b);
    if !(ba == bb || batch_a == 1 || batch_b == 1) || out.bytes.len() != batch * m * n * out.dtype.size() {
        return Ok(false);
    }
    let bias = match (beta, ins.get(2)) {
        (Some(beta), Some(c)) if float(c.dtype) && batch == 1 => {
            let cn: usize = c.dims.iter().product();
            let row = cn == n && c.dims.last() == Some(&n);
            if !(cn == 1 || row || cn == m * n) {
                return Ok(false);
            }
            Some((beta, to_f32(c)))
        }
        (None, _) => None,
        _ => return Ok(false),
    };
    let (av, bv) = (to_f32(a), to_f32(b));
    let mut cv = vec![0f32; batch * m * n];
    for i in 0..batch {
        let ao = if batch_a == 1 { 0 } else { i * m * k };
        let bo = if batch_b == 1 { 0 } else { i * k * n };
        let (asl, bsl) = (&av[ao..ao + m * k], &bv[bo..bo + k * n]);
        let csl = &mut cv[i * m * n..(i + 1) * m * n];
        // The slices hold m x k, k x n and m x n f32 values, row-major (row stride = the
        // column count, column stride 1): exactly what these dimensions and strides address.
        // SAFETY: in bounds as above; `csl` is exclusively borrowed, aliases neither input,
        // and is not read (`read_dst` is false).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                csl.as_mut_ptr(),
                1,
                n as isize,
                false,
                asl.as_ptr(),
                1,
                k as isize,
                bsl.as_ptr(),
                1,
                n as isize,
                0.0,
                alpha,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            );
        }
    }
    if let Some((beta, c)) = bias {
        for (i, x) in cv.iter_mut().enumerate() {
            let cval = match c.len() {
                1 => c[0],
                l if l == n => c[i % n],
                _ => c[i],
            };
            *x += beta * cval;
        }
    }
    store(out, &cv);
    Ok(true)
}
