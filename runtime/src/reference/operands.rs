//! Operand views over host bytes, element loaders and stores (dtype conversion), and the
//! index helpers every host kernel shares: the reference tier here, the CPU backend's
//! tiers, the Ascend backend's host tier and acl-emu.

use crate::dtype::DType;
use crate::kernel::{KernelError, KernelResult};
use crate::shape::{Layout, Shape};
use half::{bf16, f16};
use std::borrow::Cow;

/// An input operand: its elements start at `bytes[0]` (the view's offset is applied).
/// Every op except `Copy` receives contiguous inputs.
pub struct In<'a> {
    pub dtype: DType,
    pub dims: &'a [usize],
    pub strides: &'a [usize],
    pub bytes: &'a [u8],
}

/// An output operand: contiguous, `bytes.len() == numel * dtype.size()`.
pub struct Out<'a> {
    pub dtype: DType,
    pub dims: &'a [usize],
    pub bytes: &'a mut [u8],
}

pub fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

impl In<'_> {
    pub fn numel(&self) -> usize {
        numel(self.dims)
    }
    pub fn f32s(&self) -> Option<&[f32]> {
        (self.dtype == DType::F32).then(|| bytemuck::try_cast_slice(&self.bytes[..self.numel() * 4]).ok()).flatten()
    }
}

impl Out<'_> {
    pub fn numel(&self) -> usize {
        numel(self.dims)
    }
    pub fn f32s_mut(&mut self) -> Option<&mut [f32]> {
        let n = self.numel() * 4;
        if self.dtype != DType::F32 {
            return None;
        }
        bytemuck::try_cast_slice_mut(&mut self.bytes[..n]).ok()
    }
}

macro_rules! cast_slice {
    ($bytes:expr, $t:ty, $n:expr) => {
        bytemuck::try_cast_slice::<u8, $t>(&$bytes[..$n * std::mem::size_of::<$t>()])
            .map_err(|e| KernelError::misaligned("operand", e))?
    };
}

/// Reads a contiguous operand as f64 values.
pub fn load_f64(x: &In) -> Result<Vec<f64>, KernelError> {
    let n = x.numel();
    Ok(match x.dtype {
        DType::F32 => cast_slice!(x.bytes, f32, n).iter().map(|&v| v as f64).collect(),
        DType::F16 => cast_slice!(x.bytes, f16, n).iter().map(|v| v.to_f64()).collect(),
        DType::BF16 => cast_slice!(x.bytes, bf16, n).iter().map(|v| v.to_f64()).collect(),
        DType::I32 => cast_slice!(x.bytes, i32, n).iter().map(|&v| v as f64).collect(),
        DType::I64 => cast_slice!(x.bytes, i64, n).iter().map(|&v| v as f64).collect(),
        DType::U8 => x.bytes[..n].iter().map(|&v| v as f64).collect(),
    })
}

/// Reads a contiguous operand as f32 values, borrowing when it already is f32.
pub fn load_f32<'a>(x: &'a In) -> Result<Cow<'a, [f32]>, KernelError> {
    let n = x.numel();
    Ok(match x.dtype {
        DType::F32 => Cow::Borrowed(cast_slice!(x.bytes, f32, n)),
        DType::F16 => {
            let s = cast_slice!(x.bytes, f16, n);
            let mut v = vec![0f32; n];
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(s, &mut v);
            Cow::Owned(v)
        }
        DType::BF16 => {
            let s = cast_slice!(x.bytes, bf16, n);
            let mut v = vec![0f32; n];
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(s, &mut v);
            Cow::Owned(v)
        }
        DType::I32 => Cow::Owned(cast_slice!(x.bytes, i32, n).iter().map(|&v| v as f32).collect()),
        DType::I64 => Cow::Owned(cast_slice!(x.bytes, i64, n).iter().map(|&v| v as f32).collect()),
        DType::U8 => Cow::Owned(x.bytes[..n].iter().map(|&v| v as f32).collect()),
    })
}

/// Reads a contiguous integer (or any) operand as i64 values.
pub fn load_i64(x: &In) -> Result<Vec<i64>, KernelError> {
    let n = x.numel();
    Ok(match x.dtype {
        DType::I32 => cast_slice!(x.bytes, i32, n).iter().map(|&v| v as i64).collect(),
        DType::I64 => cast_slice!(x.bytes, i64, n).to_vec(),
        DType::U8 => x.bytes[..n].iter().map(|&v| v as i64).collect(),
        _ => load_f64(x)?.into_iter().map(|v| v as i64).collect(),
    })
}

macro_rules! cast_slice_mut {
    ($bytes:expr, $t:ty, $n:expr) => {
        bytemuck::try_cast_slice_mut::<u8, $t>(&mut $bytes[..$n * std::mem::size_of::<$t>()])
            .map_err(|e| KernelError::misaligned("operand", e))?
    };
}

/// Writes f64 values (rounded to the output dtype; integers saturate, NaN becomes 0).
pub fn store_f64(o: &mut Out, v: &[f64]) -> KernelResult {
    let n = o.numel();
    if v.len() != n {
        return Err(KernelError::Internal(format!("{} values for {n} outputs", v.len())));
    }
    match o.dtype {
        DType::F32 => cast_slice_mut!(o.bytes, f32, n).iter_mut().zip(v).for_each(|(d, s)| *d = *s as f32),
        DType::F16 => cast_slice_mut!(o.bytes, f16, n).iter_mut().zip(v).for_each(|(d, s)| *d = f16::from_f64(*s)),
        DType::BF16 => cast_slice_mut!(o.bytes, bf16, n).iter_mut().zip(v).for_each(|(d, s)| *d = bf16::from_f64(*s)),
        DType::I32 => cast_slice_mut!(o.bytes, i32, n).iter_mut().zip(v).for_each(|(d, s)| *d = *s as i32),
        DType::I64 => cast_slice_mut!(o.bytes, i64, n).iter_mut().zip(v).for_each(|(d, s)| *d = *s as i64),
        DType::U8 => o.bytes[..n].iter_mut().zip(v).for_each(|(d, s)| *d = *s as u8),
    }
    Ok(())
}

/// Writes f32 values (rounded to the output dtype).
pub fn store_f32(o: &mut Out, v: &[f32]) -> KernelResult {
    let n = o.numel();
    if v.len() != n {
        return Err(KernelError::Internal(format!("{} values for {n} outputs", v.len())));
    }
    match o.dtype {
        DType::F32 => cast_slice_mut!(o.bytes, f32, n).copy_from_slice(v),
        DType::F16 => half::slice::HalfFloatSliceExt::convert_from_f32_slice(cast_slice_mut!(o.bytes, f16, n), v),
        DType::BF16 => half::slice::HalfFloatSliceExt::convert_from_f32_slice(cast_slice_mut!(o.bytes, bf16, n), v),
        _ => {
            let w: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            return store_f64(o, &w);
        }
    }
    Ok(())
}

/// Writes i64 values to an integer output, keeping the low bits (two's-complement
/// wrapping, as ONNX `Cast` defines integer narrowing).
pub fn store_i64(o: &mut Out, v: &[i64]) -> KernelResult {
    let n = o.numel();
    if v.len() != n {
        return Err(KernelError::Internal(format!("{} values for {n} outputs", v.len())));
    }
    match o.dtype {
        DType::I32 => cast_slice_mut!(o.bytes, i32, n).iter_mut().zip(v).for_each(|(d, s)| *d = *s as i32),
        DType::I64 => cast_slice_mut!(o.bytes, i64, n).copy_from_slice(v),
        DType::U8 => o.bytes[..n].iter_mut().zip(v).for_each(|(d, s)| *d = *s as u8),
        _ => {
            let w: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            return store_f64(o, &w);
        }
    }
    Ok(())
}

/// Strides (in elements) that read an operand of `dims` broadcast to `out` (0 on
/// broadcast dimensions), aligned to the right.
pub fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<usize> {
    let own = Shape::new(dims.to_vec()).contiguous_strides();
    let lead = out.len() - dims.len();
    (0..out.len()).map(|i| if i < lead || dims[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

/// For every output position, the source offset given per-dimension strides.
pub fn gather_offsets(out: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut v = Vec::with_capacity(numel(out));
    crate::shape::for_each_index(out, |_, idx| v.push(idx.iter().zip(strides).map(|(i, s)| i * s).sum()));
    v
}

/// `(outer, axis_len, inner)` around `axis`.
pub fn split_axis(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (numel(&dims[..axis]), dims[axis], numel(&dims[axis + 1..]))
}

/// Integer division as the op table defines it: truncating toward zero, `x / 0 = 0`,
/// and `MIN / -1` wraps to `MIN` (two's complement, as NumPy and C runtimes give).
pub fn int_div(a: i64, b: i64) -> i64 {
    if b == 0 { 0 } else { a.wrapping_div(b) }
}

/// Integer `Add`/`Sub`/`Mul`/`Div` with broadcasting, exact and wrapping in the operands'
/// dtype (i32 results are the low 32 bits of the i64 result), shared by every tier.
pub fn int_binary(op: &crate::op::Op, a: &In, b: &In, o: &mut Out) -> KernelResult {
    use crate::op::Op;
    let (x, y) = (load_i64(a)?, load_i64(b)?);
    let od = o.dims.to_vec();
    let oa = gather_offsets(&od, &broadcast_strides(a.dims, &od));
    let ob = gather_offsets(&od, &broadcast_strides(b.dims, &od));
    let wide: Vec<i64> = oa
        .iter()
        .zip(&ob)
        .map(|(&i, &j)| match op {
            Op::Add => x[i].wrapping_add(y[j]),
            Op::Sub => x[i].wrapping_sub(y[j]),
            Op::Mul => x[i].wrapping_mul(y[j]),
            _ => int_div(x[i], y[j]),
        })
        .collect();
    // `i32::MIN / -1` is `2^31` in i64; its low 32 bits are `i32::MIN`, the wrapped quotient.
    store_i64(o, &wide)
}

/// `a == b` with broadcasting into a u8 output of 1 or 0: integers compared exactly in
/// i64, floats in f64 (exact for every float dtype: NaN equals nothing, `-0 == 0`).
/// Shared by every tier so all agree.
pub fn equal(a: &In, b: &In, o: &mut Out) -> KernelResult {
    let od = o.dims.to_vec();
    let oa = gather_offsets(&od, &broadcast_strides(a.dims, &od));
    let ob = gather_offsets(&od, &broadcast_strides(b.dims, &od));
    let v: Vec<i64> = if a.dtype.is_int() {
        let (x, y) = (load_i64(a)?, load_i64(b)?);
        oa.iter().zip(&ob).map(|(&i, &j)| i64::from(x[i] == y[j])).collect()
    } else {
        let (x, y) = (load_f64(a)?, load_f64(b)?);
        oa.iter().zip(&ob).map(|(&i, &j)| i64::from(x[i] == y[j])).collect()
    };
    store_i64(o, &v)
}

/// Element-wise cast of raw bytes between any two dtypes, as ONNX `Cast` defines it
/// where it defines it: integer to integer keeps the low bits (two's complement:
/// `200 -> -56` for i8); float to float rounds to nearest even (out of range gives
/// ±inf); integer to float rounds to nearest even. Float to integer, which ONNX leaves
/// undefined out of range, truncates toward zero and saturates, NaN giving 0. Shared by
/// every tier so all agree.
pub fn cast(x: &In, o: &mut Out) -> KernelResult {
    if x.dtype == o.dtype {
        let n = x.numel() * x.dtype.size();
        o.bytes[..n].copy_from_slice(&x.bytes[..n]);
        return Ok(());
    }
    if x.dtype.is_int() && o.dtype.is_int() {
        return store_i64(o, &load_i64(x)?);
    }
    if x.dtype == DType::I64 && o.dtype == DType::F32 {
        // Direct i64 -> f32 rounds once; through f64 it could round twice.
        let n = o.numel();
        let v = cast_slice!(x.bytes, i64, n);
        cast_slice_mut!(o.bytes, f32, n).iter_mut().zip(v).for_each(|(d, &s)| *d = s as f32);
        return Ok(());
    }
    if x.dtype.is_float() && o.dtype.is_float() && x.dtype != DType::F32 && o.dtype != DType::F32 {
        // f16 <-> bf16 through f32 is exact for the widening step.
        let v = load_f32(x)?;
        return store_f32(o, &v);
    }
    let v = load_f64(x)?;
    store_f64(o, &v)
}

/// Copies a possibly strided input into the contiguous output, element by element.
pub fn strided_copy(x: &In, o: &mut Out) -> KernelResult {
    let es = x.dtype.size();
    let n = x.numel();
    if n == 0 {
        return Ok(());
    }
    let contiguous =
        Layout { shape: Shape::new(x.dims.to_vec()), strides: x.strides.to_vec(), offset: 0 }.is_contiguous();
    if contiguous {
        o.bytes[..n * es].copy_from_slice(&x.bytes[..n * es]);
        return Ok(());
    }
    let offs = gather_offsets(x.dims, x.strides);
    for (i, off) in offs.into_iter().enumerate() {
        o.bytes[i * es..(i + 1) * es].copy_from_slice(&x.bytes[off * es..(off + 1) * es]);
    }
    Ok(())
}

/// Moves whole elements: `out[i] = in[src[i]]` for any dtype (permute, gather).
pub fn move_elements(x: &In, o: &mut Out, src: &[usize]) {
    let es = x.dtype.size();
    match es {
        4 => {
            for (i, &s) in src.iter().enumerate() {
                o.bytes[i * 4..i * 4 + 4].copy_from_slice(&x.bytes[s * 4..s * 4 + 4]);
            }
        }
        _ => {
            for (i, &s) in src.iter().enumerate() {
                o.bytes[i * es..(i + 1) * es].copy_from_slice(&x.bytes[s * es..(s + 1) * es]);
            }
        }
    }
}

/// Source element of every output element of a permutation.
pub fn permute_sources(dims: &[usize], perm: &[usize]) -> Vec<usize> {
    let st = Shape::new(dims.to_vec()).contiguous_strides();
    let out: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let ps: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    gather_offsets(&out, &ps)
}

/// Resolves gather indices against an axis of length `n` (negative counts from the end).
pub fn resolve_indices(idx: &In, n: usize) -> Result<Vec<usize>, KernelError> {
    let raw = load_i64(idx)?;
    raw.iter()
        .map(|&i| {
            let j = if i < 0 { i + n as i64 } else { i };
            if j < 0 || j >= n as i64 { Err(KernelError::IndexOutOfRange { index: i, len: n }) } else { Ok(j as usize) }
        })
        .collect()
}

/// Source element of every output element of `Gather { axis }`.
pub fn gather_sources(dims: &[usize], axis: usize, idx: &[usize]) -> Vec<usize> {
    let (outer, n, inner) = split_axis(dims, axis);
    let mut v = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &i in idx {
            let base = (o * n + i) * inner;
            v.extend(base..base + inner);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_cast(from: DType, bytes: &[u8], n: usize, to: DType) -> Vec<u8> {
        let dims = [n];
        let x = In { dtype: from, dims: &dims, strides: &[1], bytes };
        let mut buf = vec![0u64; (n * to.size()).div_ceil(8)];
        let out: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
        let mut o = Out { dtype: to, dims: &dims, bytes: &mut out[..n * to.size()] };
        cast(&x, &mut o).expect("cast");
        o.bytes.to_vec()
    }

    #[test]
    fn cast_wraps_integers_and_saturates_floats() {
        let v: [i64; 5] = [(1 << 40) + 5, -1, 1 << 31, 300, -200];
        let b: &[u8] = bytemuck::cast_slice(&v);
        let i32s: Vec<i32> = bytemuck::cast_slice(&run_cast(DType::I64, b, 5, DType::I32)).to_vec();
        assert_eq!(i32s, [5, -1, i32::MIN, 300, -200]);
        assert_eq!(run_cast(DType::I64, b, 5, DType::U8), [5, 255, 0, 44, 56]);
        let f: [f32; 8] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9, -3e9, 2.9, -2.9, 1e20];
        let fb: &[u8] = bytemuck::cast_slice(&f);
        let i32s: Vec<i32> = bytemuck::cast_slice(&run_cast(DType::F32, fb, 8, DType::I32)).to_vec();
        assert_eq!(i32s, [0, i32::MAX, i32::MIN, i32::MAX, i32::MIN, 2, -2, i32::MAX]);
        assert_eq!(run_cast(DType::F32, fb, 8, DType::U8), [0, 255, 0, 255, 0, 2, 0, 255]);
        // i64 -> f32 rounds once: 2^60 + 2^36 + 1 is nearer 2^60 + 2^37 than 2^60.
        let big = [(1i64 << 60) + (1 << 36) + 1];
        let f32s: Vec<f32> =
            bytemuck::cast_slice(&run_cast(DType::I64, bytemuck::cast_slice(&big), 1, DType::F32)).to_vec();
        assert_eq!(f32s[0], ((1i64 << 60) + (1 << 37)) as f32);
    }

    #[test]
    fn integer_arithmetic_wraps_and_division_by_zero_is_zero() {
        let (a, b) = ([i32::MIN, i32::MAX, 7, -7, i32::MIN], [-1, 1, 0, 2, 1]);
        let dims = [5];
        let ia = In { dtype: DType::I32, dims: &dims, strides: &[1], bytes: bytemuck::cast_slice(&a) };
        let ib = In { dtype: DType::I32, dims: &dims, strides: &[1], bytes: bytemuck::cast_slice(&b) };
        let mut got = [0i32; 5];
        for (op, want) in [
            (crate::op::Op::Div, [i32::MIN, i32::MAX, 0, -3, i32::MIN]),
            (crate::op::Op::Add, [i32::MAX, i32::MIN, 7, -5, i32::MIN + 1]),
            (crate::op::Op::Sub, [i32::MIN + 1, i32::MAX - 1, 7, -9, i32::MAX]),
            (crate::op::Op::Mul, [i32::MIN, i32::MAX, 0, -14, i32::MIN]),
        ] {
            let mut o = Out { dtype: DType::I32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut got) };
            int_binary(&op, &ia, &ib, &mut o).expect("int_binary");
            assert_eq!(got, want, "{op:?}");
        }
    }
}
