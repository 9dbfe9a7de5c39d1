//! Checked size arithmetic.
//!
//! Element counts, byte sizes and byte offsets derived from user input (shapes, strides,
//! offsets, file headers) are computed here, so that an overflow is an
//! [`Error::Overflow`] naming the operand rather than a wrapped value that a kernel later
//! indexes with.
//!
//! A shape is *representable* when the product of its non-zero dimensions, times the
//! element size, is at most [`MAX_BYTES`]. Zero-extent dimensions do not excuse the others
//! (as in `ndarray`): `[2^62, 0, 2^62]` is rejected although it holds no element, because
//! loops over its dimensions would still run for ever.

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::fmt::Display;

/// The largest byte size of one buffer or view: Rust allocations and pointer offsets
/// are bounded by `isize::MAX`.
pub const MAX_BYTES: usize = isize::MAX as usize;

/// Product of the non-zero dims times `elem`, when it is at most [`MAX_BYTES`]; the
/// returned value is the true product (0 when some dim is 0).
fn product(dims: &[usize], elem: usize) -> Option<usize> {
    let mut nonzero = elem;
    let mut empty = false;
    for &d in dims {
        if d == 0 {
            empty = true;
        } else {
            nonzero = nonzero.checked_mul(d)?;
        }
    }
    (nonzero <= MAX_BYTES).then_some(if empty { 0 } else { nonzero })
}

fn dims_text(dims: &[usize]) -> String {
    let d: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("[{}]", d.join(", "))
}

/// Element count of `dims`; an overflow error names `what` and the shape.
pub fn numel(what: impl Display, dims: &[usize]) -> Result<usize> {
    product(dims, 1).ok_or_else(|| Error::Overflow {
        what: format!("{what} {} has more than isize::MAX elements", dims_text(dims)),
    })
}

/// Byte size of `dims` elements of `dtype`; an overflow error names `what`, the shape
/// and the dtype.
pub fn bytes(what: impl Display, dims: &[usize], dtype: DType) -> Result<usize> {
    product(dims, dtype.size()).ok_or_else(|| Error::Overflow {
        what: format!("{what} {} of {dtype} needs more than isize::MAX bytes", dims_text(dims)),
    })
}

/// `a * b`; an overflow error names `what`.
pub fn mul(what: impl Display, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::Overflow { what: format!("{what}: {a} * {b}") })
}

/// `a + b`; an overflow error names `what`.
pub fn add(what: impl Display, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or_else(|| Error::Overflow { what: format!("{what}: {a} + {b}") })
}

/// [`bytes`] for an operand of `op`: an overflow becomes [`Error::Invalid`] naming the op,
/// as every other validation failure of an op does.
pub fn operand_bytes(op: &'static str, what: impl Display, dims: &[usize], dtype: DType) -> Result<usize> {
    bytes(what, dims, dtype).map_err(|e| Error::invalid(op, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_are_checked() {
        assert_eq!(numel("x", &[2, 3, 4]).unwrap(), 24);
        assert_eq!(numel("x", &[]).unwrap(), 1);
        assert_eq!(numel("x", &[5, 0]).unwrap(), 0);
        assert_eq!(bytes("x", &[2, 3], DType::F32).unwrap(), 24);
        assert_eq!(bytes("x", &[MAX_BYTES / 4], DType::F32).unwrap(), MAX_BYTES / 4 * 4);
        let e = bytes("x", &[2, 1 << 63], DType::F32).unwrap_err();
        assert_eq!(e.to_string(), "size overflow: x [2, 9223372036854775808] of f32 needs more than isize::MAX bytes");
        assert!(bytes("x", &[(1 << 62) + 1, 4], DType::F32).is_err());
        assert!(bytes("x", &[1 << 62], DType::F32).is_err(), "2^64 bytes");
        assert!(bytes("x", &[1 << 62], DType::U8).is_ok());
        assert!(numel("x", &[1 << 32, 1 << 32]).is_err());
        assert!(numel("x", &[1 << 62, 0, 1 << 62]).is_err(), "zero dims do not excuse the others");
        assert!(matches!(mul("m", usize::MAX, 2), Err(Error::Overflow { .. })));
        assert_eq!(add("a", 2, 3).unwrap(), 5);
        assert!(add("view end", usize::MAX - 3, 16).unwrap_err().to_string().contains("view end"));
        let e = operand_bytes("Add", "output", &[1 << 32, 1 << 32], DType::F32).unwrap_err();
        assert!(matches!(e, Error::Invalid { op: "Add", .. }), "{e}");
    }
}
