//! Reading and writing NumPy `.npy` files (C order; f32, f16, f64 read as f32, i32, i64,
//! u8 and bool).

use runtime::{DType, Error, Result};
use std::path::Path;

/// An array read from a `.npy` file: dtype, shape and little-endian element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::Io(format!("{path}: {msg}"))
}

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::BF16 => return None,
    })
}

/// Value of `key` in the header dict, as raw text up to the next top-level comma.
fn field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))?;
    let rest = header[at + key.len() + 2..].trim_start().strip_prefix(':')?.trim_start();
    if rest.starts_with('(') {
        let end = rest.find(')')?;
        Some(&rest[..=end])
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

/// Parses `.npy` bytes.
pub fn parse(bytes: &[u8], path: &str) -> Result<NpyArray> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file (bad magic)"));
    }
    let major = bytes[6];
    let (hlen, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad(path, "truncated header"));
            }
            (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12)
        }
        v => return Err(bad(path, format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(start..start + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad(path, "truncated or non-UTF-8 header"))?;
    let d = field(header, "descr").ok_or_else(|| bad(path, "header has no descr"))?.trim_matches(['\'', '"']);
    let fortran = field(header, "fortran_order").ok_or_else(|| bad(path, "header has no fortran_order"))?;
    if fortran.starts_with("True") {
        return Err(bad(path, "Fortran-order arrays are not supported; save with np.ascontiguousarray"));
    }
    let shape_s = field(header, "shape").ok_or_else(|| bad(path, "header has no shape"))?;
    let shape: Vec<usize> = shape_s
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad(path, format!("bad shape {shape_s}"))))
        .collect::<Result<_>>()?;
    let n: usize = shape.iter().product();
    let body = &bytes[start + hlen..];
    let (dtype, size, convert_f64) = match d {
        "<f4" => (DType::F32, 4, false),
        "<f2" => (DType::F16, 2, false),
        "<f8" => (DType::F32, 8, true),
        "<i4" => (DType::I32, 4, false),
        "<i8" => (DType::I64, 8, false),
        "|u1" | "|b1" | "<u1" => (DType::U8, 1, false),
        other => {
            return Err(bad(path, format!("unsupported dtype {other:?} (use f32, f16, f64, i32, i64, u8, bool)")));
        }
    };
    let need = n.checked_mul(size).ok_or_else(|| bad(path, "shape overflows"))?;
    if body.len() < need {
        return Err(bad(path, format!("data has {} bytes, shape {shape:?} needs {need}", body.len())));
    }
    let data = if convert_f64 {
        body[..need]
            .chunks_exact(8)
            .flat_map(|c| (f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).to_le_bytes())
            .collect()
    } else {
        body[..need].to_vec()
    };
    Ok(NpyArray { dtype, shape, data })
}

pub fn read(path: impl AsRef<Path>) -> Result<NpyArray> {
    let p = path.as_ref();
    let bytes = std::fs::read(p).map_err(|e| bad(&p.display().to_string(), e))?;
    parse(&bytes, &p.display().to_string())
}

/// Serialises to `.npy` (version 1.0).
pub fn to_bytes(a: &NpyArray) -> Result<Vec<u8>> {
    let d = descr(a.dtype).ok_or_else(|| Error::Unsupported(format!("{} has no .npy dtype", a.dtype)))?;
    let shape = match a.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", a.shape[0]),
        _ => format!("({})", a.shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that the data starts on a 64-byte boundary; the header ends with '\n'.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + a.data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    Ok(out)
}

pub fn write(path: impl AsRef<Path>, a: &NpyArray) -> Result<()> {
    let p = path.as_ref();
    std::fs::write(p, to_bytes(a)?).map_err(|e| bad(&p.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let a =
            NpyArray { dtype: DType::I64, shape: vec![2, 3], data: (0..6i64).flat_map(|v| v.to_le_bytes()).collect() };
        let b = parse(&to_bytes(&a).unwrap(), "mem").unwrap();
        assert_eq!(a, b);
        let s = NpyArray { dtype: DType::F32, shape: vec![], data: 1.5f32.to_le_bytes().to_vec() };
        assert_eq!(parse(&to_bytes(&s).unwrap(), "mem").unwrap(), s);
        assert!(parse(b"garbage!!!!!", "mem").is_err());
    }
}
