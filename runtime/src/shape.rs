//! Shapes, strides and strided views.

use crate::dtype::DType;
use crate::error::Result;
use std::fmt;

/// The extent of each dimension of a tensor, outermost first.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    pub fn new(dims: impl Into<Vec<usize>>) -> Shape {
        Shape(dims.into())
    }
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Number of elements (1 for a scalar, 0 if any dimension is 0). Saturates at
    /// `usize::MAX` instead of wrapping; a tensor's shape never does (allocation and
    /// views check it with [`Shape::checked_bytes`]).
    pub fn numel(&self) -> usize {
        self.0.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }
    /// Number of elements, or [`crate::Error::Overflow`] naming `what` (see [`crate::size`]).
    pub fn checked_numel(&self, what: &str) -> Result<usize> {
        crate::size::numel(what, &self.0)
    }
    /// Bytes of this many `dtype` elements, at most `isize::MAX`, or
    /// [`crate::Error::Overflow`] naming `what` (see [`crate::size`]).
    pub fn checked_bytes(&self, what: &str, dtype: DType) -> Result<usize> {
        crate::size::bytes(what, &self.0, dtype)
    }
    /// Last dimension, or 1 for a scalar.
    pub fn last(&self) -> usize {
        self.0.last().copied().unwrap_or(1)
    }
    /// Row-major strides in elements.
    pub fn contiguous_strides(&self) -> Vec<usize> {
        let mut s = vec![0; self.rank()];
        let mut acc = 1usize;
        for i in (0..self.rank()).rev() {
            s[i] = acc;
            acc = acc.saturating_mul(self.0[i].max(1));
        }
        s
    }
    /// NumPy broadcasting of two shapes; `None` when they are incompatible.
    pub fn broadcast(a: &Shape, b: &Shape) -> Option<Shape> {
        let r = a.rank().max(b.rank());
        let mut out = vec![0; r];
        for (i, o) in out.iter_mut().enumerate() {
            let da = if i + a.rank() >= r { a.0[i + a.rank() - r] } else { 1 };
            let db = if i + b.rank() >= r { b.0[i + b.rank() - r] } else { 1 };
            *o = if da == db {
                da
            } else if da == 1 {
                db
            } else if db == 1 {
                da
            } else {
                return None;
            };
        }
        Some(Shape(out))
    }
    /// Normalises a possibly negative axis against this rank.
    pub fn axis(&self, axis: isize) -> Option<usize> {
        let r = self.rank() as isize;
        let a = if axis < 0 { axis + r } else { axis };
        (0..r).contains(&a).then_some(a as usize)
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Shape {
        Shape(v)
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Shape {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Shape {
        Shape(v.to_vec())
    }
}

/// How a tensor's elements sit in its buffer: shape, strides (in elements) and an
/// element offset from the start of the buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Shape,
    pub strides: Vec<usize>,
    pub offset: usize,
}

impl Layout {
    pub fn contiguous(shape: impl Into<Shape>) -> Layout {
        let shape = shape.into();
        let strides = shape.contiguous_strides();
        Layout { shape, strides, offset: 0 }
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }
    /// True when the elements are dense and in row-major order.
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut acc = 1usize;
        for i in (0..self.shape.rank()).rev() {
            let d = self.shape.0[i];
            if d != 1 && self.strides[i] != acc {
                return false;
            }
            acc = acc.saturating_mul(d);
        }
        true
    }
    /// One past the largest element index reachable through this layout.
    pub fn span(&self) -> usize {
        if self.numel() == 0 {
            return self.offset;
        }
        let last = self
            .shape
            .0
            .iter()
            .zip(&self.strides)
            .fold(0usize, |a, (d, s)| a.saturating_add((d - 1).saturating_mul(*s)));
        self.offset.saturating_add(last).saturating_add(1)
    }
    /// A reshaped view; `None` when the layout is not contiguous.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Option<Layout> {
        let shape = shape.into();
        if shape.numel() != self.numel() || !self.is_contiguous() {
            return None;
        }
        let mut l = Layout::contiguous(shape);
        l.offset = self.offset;
        Some(l)
    }
    /// A view with dimensions reordered: output dim `i` is input dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Option<Layout> {
        if perm.len() != self.shape.rank() {
            return None;
        }
        let mut seen = vec![false; perm.len()];
        for &p in perm {
            if p >= perm.len() || seen[p] {
                return None;
            }
            seen[p] = true;
        }
        Some(Layout {
            shape: Shape(perm.iter().map(|&p| self.shape.0[p]).collect()),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }
    /// Swaps two dimensions.
    pub fn transpose(&self, a: usize, b: usize) -> Option<Layout> {
        let mut perm: Vec<usize> = (0..self.shape.rank()).collect();
        if a >= perm.len() || b >= perm.len() {
            return None;
        }
        perm.swap(a, b);
        self.permute(&perm)
    }
    /// A view broadcast to `shape` (stride 0 on expanded dimensions).
    pub fn broadcast_to(&self, shape: &Shape) -> Option<Layout> {
        let r = shape.rank();
        if self.shape.rank() > r {
            return None;
        }
        let lead = r - self.shape.rank();
        let mut strides = vec![0; r];
        for (i, s) in strides.iter_mut().enumerate().skip(lead) {
            let d = self.shape.0[i - lead];
            if d == shape.0[i] {
                *s = self.strides[i - lead];
            } else if d == 1 {
                *s = 0;
            } else {
                return None;
            }
        }
        Some(Layout { shape: shape.clone(), strides, offset: self.offset })
    }
    /// Element index (within the buffer) of the multi-index `idx`.
    pub fn index(&self, idx: &[usize]) -> usize {
        idx.iter().zip(&self.strides).fold(self.offset, |a, (i, s)| a.saturating_add(i.saturating_mul(*s)))
    }
}

/// Iterates over every multi-index of `shape` in row-major order, calling `f` with the
/// linear position and the index. Does nothing for a shape whose element count
/// overflows (no tensor has one).
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(0);
    if n == 0 {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    for lin in 0..n {
        f(lin, &idx);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        let a = Shape::from([2, 1, 3]);
        let b = Shape::from([4, 1]);
        assert_eq!(Shape::broadcast(&a, &b), Some(Shape::from([2, 4, 3])));
        assert_eq!(Shape::broadcast(&Shape::from([2, 3]), &Shape::from([4])), None);
        assert_eq!(Shape::broadcast(&Shape::scalar(), &Shape::from([5])), Some(Shape::from([5])));
    }

    #[test]
    fn views() {
        let l = Layout::contiguous([2, 3, 4]);
        assert!(l.is_contiguous());
        let t = l.transpose(1, 2).unwrap();
        assert_eq!(t.dims(), &[2, 4, 3]);
        assert_eq!(t.strides, vec![12, 1, 4]);
        assert!(!t.is_contiguous());
        assert!(t.reshape([24]).is_none());
        assert_eq!(l.reshape([6, 4]).unwrap().strides, vec![4, 1]);
        assert!(l.permute(&[0, 0, 1]).is_none());
        let b = Layout::contiguous([3, 1]).broadcast_to(&Shape::from([2, 3, 5])).unwrap();
        assert_eq!(b.strides, vec![0, 1, 0]);
        assert_eq!(l.span(), 24);
    }

    #[test]
    fn sizes_saturate_or_fail_instead_of_wrapping() {
        let huge = Shape::from([2, 1 << 63]);
        assert_eq!(huge.numel(), usize::MAX);
        assert_eq!(Shape::from([usize::MAX, 2, 0]).numel(), 0);
        assert!(huge.checked_numel("x").is_err());
        let e = Shape::from([(1 << 62) + 1, 4]).checked_bytes("x", DType::F32).unwrap_err();
        assert!(matches!(e, crate::Error::Overflow { .. }), "{e}");
        assert_eq!(Shape::from([2, 3]).checked_bytes("x", DType::F16).unwrap(), 12);
        let wide = Layout { shape: huge, strides: vec![1 << 63, 1], offset: 0 };
        assert_eq!(wide.span(), usize::MAX);
        let mut calls = 0;
        for_each_index(&[1 << 32, 1 << 32], |_, _| calls += 1);
        assert_eq!(calls, 0);
    }
}
