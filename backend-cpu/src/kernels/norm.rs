//! RmsNorm, AddRmsNorm and SwiGlu on the generic and fast tiers: memory-bound row ops, f32
//! compute with the sum of squares in f64 (so that a row of values near f32's limit
//! normalises to finite values, as on the reference tier). The fast tier's row loops are
//! compiled per ISA (AVX-512, AVX2+FMA, baseline) and rows run in parallel when large.

use super::common::*;
use super::simd_math::sigmoid_approx;
use crate::features::Isa;
use rayon::prelude::*;
use runtime::reference::norm::round_to;
use runtime::{DType, Op};

/// Elements below which a kernel stays on the calling thread (as the fast tier's).
const PAR_MIN: usize = 1 << 15;

/// True when a kernel may fork: it runs inside a thread pool and the work is large.
fn parallel(n: usize) -> bool {
    n >= PAR_MIN && rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1
}

/// `f(i, row)` on each row (`row` elements) of `out`, in parallel when large.
fn par_rows(out: &mut [f32], row: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if row > 0 {
        par_chunks(out, row, f);
    }
}

/// x's last axis (the row width).
fn width(x: &In) -> usize {
    x.dims.last().copied().unwrap_or(1)
}

/// Rounds a row of f32 sums to `dtype` (no-op for f32), so that the sum normalised is the
/// one passed on.
fn round_row(dtype: DType, row: &mut [f32]) {
    if dtype != DType::F32 {
        for v in row {
            *v = round_to(dtype, *v as f64) as f32;
        }
    }
}

/// The generic tier: plain loops, f32 products, f64 sum of squares.
pub fn generic(op: &Op, ins: &[In], outs: &mut [Out]) -> KResult {
    match op {
        Op::RmsNorm { eps } => {
            let x = load_f32(&ins[0])?;
            let w = ins.get(1).map(load_f32).transpose()?;
            let d = width(&ins[0]);
            with_f32_out(&mut outs[0], |o| {
                for (xr, orow) in x.chunks(d.max(1)).zip(o.chunks_mut(d.max(1))) {
                    rms_generic(xr, w.as_deref(), *eps, orow);
                }
                Ok(())
            })
        }
        Op::AddRmsNorm { eps } => {
            let (x, r, w) = (load_f32(&ins[0])?, load_f32(&ins[1])?, load_f32(&ins[2])?);
            let (d, dt) = (width(&ins[0]).max(1), outs[1].dtype);
            let (y, s) = two_outputs(outs)?;
            with_f32_out(y, |y| {
                with_f32_out(s, |s| {
                    for (i, (yr, sr)) in y.chunks_mut(d).zip(s.chunks_mut(d)).enumerate() {
                        let (xr, rr) = (&x[i * d..(i + 1) * d], &r[i * d..(i + 1) * d]);
                        for ((s, a), b) in sr.iter_mut().zip(xr).zip(rr) {
                            *s = a + b;
                        }
                        round_row(dt, sr);
                        rms_generic(sr, Some(&w), *eps, yr);
                    }
                    Ok(())
                })
            })
        }
        Op::SwiGlu => swiglu_with(ins, outs, |g, u, o| {
            for ((o, &a), &b) in o.iter_mut().zip(g).zip(u) {
                *o = silu_f32(a) * b;
            }
        }),
        _ => Err(KernelError::Internal(format!("{} is not a norm kernel", op.name()))),
    }
}

fn rms_generic(x: &[f32], w: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len().max(1) as f64;
    if !ms.is_finite() {
        // A row holding ±inf or NaN is NaN throughout (as on the reference tier).
        out.fill(f32::NAN);
        return;
    }
    let inv = 1.0 / (ms + eps as f64).sqrt();
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        *o = (v as f64 * inv) as f32 * w.map_or(1.0, |w| w[i]);
    }
}

/// Splits AddRmsNorm's outputs into the normalised sum and the sum.
fn two_outputs<'o, 'a>(outs: &'o mut [Out<'a>]) -> Result<(&'o mut Out<'a>, &'o mut Out<'a>), KernelError> {
    match outs {
        [y, s] => Ok((y, s)),
        _ => Err(KernelError::Internal(format!("AddRmsNorm has 2 outputs, got {}", outs.len()))),
    }
}

/// SwiGlu's two forms as calls of `f(gate, up, out)` on matching slices: per row of the
/// one-input form, once over the whole of the two-input form.
fn swiglu_with(ins: &[In], outs: &mut [Out], f: impl Fn(&[f32], &[f32], &mut [f32]) + Sync) -> KResult {
    let x = load_f32(&ins[0])?;
    match ins.get(1) {
        Some(up) => {
            let u = load_f32(up)?;
            with_f32_out(&mut outs[0], |o| {
                par_chunks(o, 8192, |i, seg| {
                    f(&x[i * 8192..i * 8192 + seg.len()], &u[i * 8192..i * 8192 + seg.len()], seg)
                });
                Ok(())
            })
        }
        None => {
            let n = width(&ins[0]) / 2;
            with_f32_out(&mut outs[0], |o| {
                par_rows(o, n, |r, row| {
                    let at = r * 2 * n;
                    f(&x[at..at + n], &x[at + n..at + 2 * n], row)
                });
                Ok(())
            })
        }
    }
}

/// `f(i, chunk)` on chunks of `c` elements of `out`, in parallel when large.
fn par_chunks(out: &mut [f32], c: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if parallel(out.len()) {
        out.par_chunks_mut(c).enumerate().for_each(|(i, s)| f(i, s));
    } else {
        out.chunks_mut(c).enumerate().for_each(|(i, s)| f(i, s));
    }
}

/// The fast tier.
pub fn fast(op: &Op, ins: &[In], outs: &mut [Out], isa: Isa) -> KResult {
    match op {
        Op::RmsNorm { eps } => {
            let x = load_f32(&ins[0])?;
            let w = ins.get(1).map(load_f32).transpose()?;
            let d = width(&ins[0]);
            with_f32_out(&mut outs[0], |o| {
                par_rows(o, d, |r, row| rms_row(isa, &x[r * d..(r + 1) * d], w.as_deref(), *eps, row));
                Ok(())
            })
        }
        Op::AddRmsNorm { eps } => {
            let (x, r, w) = (load_f32(&ins[0])?, load_f32(&ins[1])?, load_f32(&ins[2])?);
            let (d, dt) = (width(&ins[0]), outs[1].dtype);
            let (y, s) = two_outputs(outs)?;
            with_f32_out(y, |y| {
                with_f32_out(s, |s| {
                    if d == 0 {
                        return Ok(());
                    }
                    let row = |i: usize, (yr, sr): (&mut [f32], &mut [f32])| {
                        add_row(isa, &x[i * d..(i + 1) * d], &r[i * d..(i + 1) * d], sr);
                        round_row(dt, sr);
                        rms_row(isa, sr, Some(&w), *eps, yr);
                    };
                    if parallel(y.len()) {
                        y.par_chunks_mut(d).zip(s.par_chunks_mut(d)).enumerate().for_each(|(i, p)| row(i, p));
                    } else {
                        y.chunks_mut(d).zip(s.chunks_mut(d)).enumerate().for_each(|(i, p)| row(i, p));
                    }
                    Ok(())
                })
            })
        }
        Op::SwiGlu => swiglu_with(ins, outs, |g, u, o| swiglu_row(isa, g, u, o)),
        _ => Err(KernelError::Internal(format!("{} is not a norm kernel", op.name()))),
    }
}

/// Dispatches `$body(args)` to a copy compiled for AVX-512 or AVX2+FMA when `isa` says the
/// CPU has it (the const parameter: fused multiply-adds available), else the baseline.
macro_rules! per_isa {
    ($isa:expr, $body:ident ($($a:ident : $t:ty),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx2,fma")]
            fn avx512($($a: $t),*) {
                $body::<true>($($a),*)
            }
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($a: $t),*) {
                $body::<true>($($a),*)
            }
            match $isa {
                // SAFETY: `Isa::Avx512` is only chosen when AVX-512F and FMA were
                // detected on this CPU at run time (features.rs).
                Isa::Avx512 => return unsafe { avx512($($a),*) },
                // SAFETY: `Isa::Avx2Fma` is only chosen when AVX2 and FMA were detected.
                Isa::Avx2Fma => return unsafe { avx2($($a),*) },
                Isa::Scalar => {}
            }
        }
        $body::<false>($($a),*)
    }};
}

/// `out = x / rms(x) * w` of one row.
fn rms_row(isa: Isa, x: &[f32], w: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    per_isa!(isa, rms_body(x: &[f32], w: Option<&[f32]>, eps: f32, out: &mut [f32]))
}

/// `out = a + b` of one row.
fn add_row(isa: Isa, a: &[f32], b: &[f32], out: &mut [f32]) {
    per_isa!(isa, add_body(a: &[f32], b: &[f32], out: &mut [f32]))
}

/// `out = silu(g) * u` of one row.
fn swiglu_row(isa: Isa, g: &[f32], u: &[f32], out: &mut [f32]) {
    per_isa!(isa, swiglu_body(g: &[f32], u: &[f32], out: &mut [f32]))
}

/// The sum of squares in sixteen independent f64 lanes (one running sum is a dependency
/// chain that does not vectorise).
#[inline(always)]
fn sum_sq(x: &[f32]) -> f64 {
    const L: usize = 16;
    let mut acc = [0f64; L];
    let mut chunks = x.chunks_exact(L);
    for c in &mut chunks {
        for l in 0..L {
            let v = c[l] as f64;
            acc[l] += v * v;
        }
    }
    chunks.remainder().iter().map(|&v| v as f64 * v as f64).sum::<f64>() + acc.iter().sum::<f64>()
}

#[inline(always)]
fn rms_body<const F: bool>(x: &[f32], w: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let ms = sum_sq(x) / x.len().max(1) as f64;
    if !ms.is_finite() {
        // A row holding ±inf or NaN is NaN throughout (as on the reference tier).
        out.fill(f32::NAN);
        return;
    }
    let inv = 1.0 / (ms + eps as f64).sqrt();
    // The scale as f32 where it is a normal f32 with room to spare; otherwise (huge or
    // tiny rows, eps 0 on a zero row) the product in f64, as the reference forms it.
    if (1e-30..=1e30).contains(&inv) {
        let s = inv as f32;
        match w {
            Some(w) => out.iter_mut().zip(x).zip(w).for_each(|((o, &v), &g)| *o = v * s * g),
            None => out.iter_mut().zip(x).for_each(|(o, &v)| *o = v * s),
        }
    } else {
        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
            *o = (v as f64 * inv) as f32 * w.map_or(1.0, |w| w[i]);
        }
    }
}

#[inline(always)]
fn add_body<const F: bool>(a: &[f32], b: &[f32], out: &mut [f32]) {
    out.iter_mut().zip(a).zip(b).for_each(|((o, &x), &y)| *o = x + y);
}

#[inline(always)]
fn swiglu_body<const F: bool>(g: &[f32], u: &[f32], out: &mut [f32]) {
    out.iter_mut().zip(g).zip(u).for_each(|((o, &a), &b)| *o = a * sigmoid_approx::<F>(a) * b);
}
