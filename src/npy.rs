//! Reading and writing NumPy `.npy` files (C order; f32, f16, f64 read as f32, i32, i64,
//! u8 and bool).

use runtime::{DType, Error, Result, size};
use std::io::Read;
use std::path::Path;

/// An array read from a `.npy` file: dtype, shape and little-endian element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::format(format!("{path}: {msg}"))
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

/// A value of the header dict: the Python literals a `.npy` header uses.
enum Lit {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// A recursive-descent reader of the header, a Python dict literal such as
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
struct Header<'a> {
    s: &'a [u8],
    i: usize,
}

impl Header<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) { Ok(()) } else { Err(format!("expected '{}' at byte {}", c as char, self.i)) }
    }
    fn string(&mut self, quote: u8) -> Result<String, String> {
        self.i += 1;
        let len = self.s[self.i..].iter().position(|&c| c == quote || c == b'\\');
        match len.map(|n| (n, self.s[self.i + n])) {
            Some((n, q)) if q == quote => {
                let v = String::from_utf8_lossy(&self.s[self.i..self.i + n]).into_owned();
                self.i += n + 1;
                Ok(v)
            }
            _ => Err("unterminated or escaped string".into()),
        }
    }
    fn int(&mut self) -> Result<usize, String> {
        self.peek();
        let n = self.s[self.i..].iter().take_while(|c| c.is_ascii_digit()).count();
        let text = std::str::from_utf8(&self.s[self.i..self.i + n]).unwrap_or("");
        let v = text.parse().map_err(|_| format!("bad integer at byte {}", self.i))?;
        self.i += n;
        self.i += usize::from(self.s.get(self.i) == Some(&b'L')); // Python 2 long
        Ok(v)
    }
    fn value(&mut self) -> Result<Lit, String> {
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => self.string(q).map(Lit::Str),
            Some(b'(') => {
                self.i += 1;
                let mut dims = Vec::new();
                while !self.eat(b')') {
                    dims.push(self.int()?);
                    if !self.eat(b',') {
                        self.expect(b')')?;
                        if dims.len() == 1 {
                            return Err("a one-element tuple needs a trailing comma".into());
                        }
                        break;
                    }
                }
                Ok(Lit::Tuple(dims))
            }
            _ => {
                for (word, v) in [("True", true), ("False", false)] {
                    if self.s[self.i..].starts_with(word.as_bytes()) {
                        self.i += word.len();
                        return Ok(Lit::Bool(v));
                    }
                }
                Err(format!("unexpected value at byte {}", self.i))
            }
        }
    }
    /// `(descr, fortran_order, shape)`; exactly these three keys, nothing after the dict.
    fn parse(mut self) -> Result<(String, bool, Vec<usize>), String> {
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        self.expect(b'{')?;
        while !self.eat(b'}') {
            let key = match self.peek() {
                Some(q @ (b'\'' | b'"')) => self.string(q)?,
                _ => return Err(format!("expected a string key at byte {}", self.i)),
            };
            self.expect(b':')?;
            let fresh = match (key.as_str(), self.value()?) {
                ("descr", Lit::Str(d)) => descr.replace(d).is_none(),
                ("fortran_order", Lit::Bool(b)) => fortran.replace(b).is_none(),
                ("shape", Lit::Tuple(t)) => shape.replace(t).is_none(),
                _ => false,
            };
            if !fresh {
                return Err(format!("key {key:?} is unknown, repeated or of the wrong type"));
            }
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        if self.peek().is_some() {
            return Err("trailing data after the header dict".into());
        }
        match (descr, fortran, shape) {
            (Some(d), Some(f), Some(s)) => Ok((d, f, s)),
            _ => Err("the header needs 'descr', 'fortran_order' and 'shape'".into()),
        }
    }
}

/// The largest header npurt reads (1 MiB; NumPy writes a few hundred bytes and reads at
/// most 10,000 by default).
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// What a `.npy` header declares: where the data starts and how many bytes it has.
struct Layout {
    /// Offset of the data: magic, version, length field and header.
    data_start: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// The stored dtype, as the header spells it.
    descr: String,
    /// Bytes of data the shape needs, as stored.
    need: usize,
    /// Stored as f64, loaded as f32.
    convert_f64: bool,
}

impl Layout {
    fn mismatch(&self, path: &str, have: impl std::fmt::Display) -> Error {
        let (shape, d, need) = (&self.shape, &self.descr, self.need);
        bad(path, format!("data has {have} bytes, shape {shape:?} of {d} needs {need}"))
    }
}

/// Where the header of `prefix` (the file's first bytes, at least 12 of them when the
/// file has them) ends; at most [`MAX_HEADER_BYTES`] past the length field.
fn header_end(prefix: &[u8], path: &str) -> Result<(usize, usize)> {
    if prefix.len() < 10 || &prefix[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file (bad magic)"));
    }
    let (hlen, start) = match prefix[6] {
        1 => (u16::from_le_bytes([prefix[8], prefix[9]]) as usize, 10),
        2 | 3 if prefix.len() >= 12 => {
            (u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]) as usize, 12)
        }
        2 | 3 => return Err(bad(path, "truncated header")),
        v => return Err(bad(path, format!("unsupported .npy version {v}"))),
    };
    if hlen > MAX_HEADER_BYTES {
        return Err(bad(path, format!("a {hlen}-byte header exceeds the limit of {MAX_HEADER_BYTES} bytes")));
    }
    Ok((start, size::add(format_args!("{path}: header end"), start, hlen)?))
}

/// The layout `bytes` (at least the whole header) declare.
fn layout(bytes: &[u8], path: &str) -> Result<Layout> {
    let (start, end) = header_end(bytes, path)?;
    let header = bytes.get(start..end).ok_or_else(|| bad(path, "truncated header"))?;
    let (d, fortran, shape) = Header { s: header, i: 0 }.parse().map_err(|e| bad(path, format!("bad header: {e}")))?;
    if fortran {
        return Err(bad(path, "Fortran-order arrays are not supported; save with np.ascontiguousarray"));
    }
    let (dtype, file_size, convert_f64) = match d.as_str() {
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
    size::bytes(format_args!("{path}: shape"), &shape, dtype)?;
    let n = size::numel(format_args!("{path}: shape"), &shape)?;
    let need = size::mul(format_args!("{path}: data bytes of {d}"), n, file_size)?;
    Ok(Layout { data_start: end, dtype, shape, descr: d, need, convert_f64 })
}

/// The array of `l` from its stored data `body` (exactly `l.need` bytes).
fn array(l: Layout, body: Vec<u8>) -> NpyArray {
    let data = if l.convert_f64 {
        body.chunks_exact(8)
            .flat_map(|c| (f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).to_le_bytes())
            .collect()
    } else {
        body
    };
    NpyArray { dtype: l.dtype, shape: l.shape, data }
}

/// Parses `.npy` bytes. The data must be exactly as long as the header's shape needs.
pub fn parse(bytes: &[u8], path: &str) -> Result<NpyArray> {
    let l = layout(bytes, path)?;
    let body = &bytes[l.data_start..];
    if body.len() != l.need {
        return Err(l.mismatch(path, body.len()));
    }
    Ok(array(l, body.to_vec()))
}

/// Reads the `.npy` file `path`: a regular file ([`crate::files::open_regular`]), its
/// header first (at most [`MAX_HEADER_BYTES`]), then its data only when the file's size is
/// exactly the header plus the bytes its shape declares ("data has … bytes" otherwise,
/// decided from the size before any data is read).
pub fn read(path: impl AsRef<Path>) -> Result<NpyArray> {
    let p = path.as_ref();
    let name = p.display().to_string();
    let (mut file, len) = crate::files::open_regular(p)?;
    let io = |e| Error::io(name.clone(), e);
    // The magic, version and length field (12 bytes at most), then the header they give.
    let mut prefix = Vec::new();
    (&mut file).take(12).read_to_end(&mut prefix).map_err(io)?;
    let (_, end) = header_end(&prefix, &name)?;
    if end as u64 > len {
        return Err(bad(&name, "truncated header"));
    }
    let more = (end as u64).saturating_sub(prefix.len() as u64);
    (&mut file).take(more).read_to_end(&mut prefix).map_err(io)?;
    if prefix.len() < end {
        return Err(bad(&name, "truncated header"));
    }
    let l = layout(&prefix, &name)?;
    let have = len - end as u64;
    if have != l.need as u64 {
        return Err(l.mismatch(&name, have));
    }
    let mut body = Vec::new();
    body.try_reserve_exact(l.need).map_err(|_| bad(&name, format!("{} bytes of data cannot be allocated", l.need)))?;
    // A tiny version-1 header leaves the first data bytes in the prefix.
    body.extend_from_slice(&prefix[end..]);
    (&mut file).take((l.need - body.len()) as u64).read_to_end(&mut body).map_err(io)?;
    if body.len() != l.need {
        // The file shrank while it was read.
        return Err(l.mismatch(&name, body.len()));
    }
    Ok(array(l, body))
}

/// Serialises to `.npy` (version 1.0); the data must be exactly as long as the shape needs.
pub fn to_bytes(a: &NpyArray) -> Result<Vec<u8>> {
    let d = descr(a.dtype).ok_or_else(|| Error::Unsupported(format!("{} has no .npy dtype", a.dtype)))?;
    let need = size::bytes("npy shape", &a.shape, a.dtype)?;
    if a.data.len() != need {
        return Err(Error::format(format!(
            "npy: {} bytes for {} {:?}, which needs {need}",
            a.data.len(),
            a.dtype,
            a.shape
        )));
    }
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
    let hlen =
        u16::try_from(header.len()).map_err(|_| Error::format(format!("npy: a {}-byte header", header.len())))?;
    let mut out = Vec::with_capacity(10 + header.len() + a.data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&hlen.to_le_bytes());
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

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("npurt-npy-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A valid header followed by a 3 GiB (sparse) tail is refused from the file's size:
    /// "data has … bytes", without reading the data.
    #[test]
    fn a_huge_tail_is_refused_from_the_size() {
        let d = scratch("tail");
        let a = NpyArray { dtype: DType::F32, shape: vec![2, 3], data: vec![0; 24] };
        let bytes = to_bytes(&a).unwrap();
        let p = d.join("tail.npy");
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read(&p).unwrap(), a);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        let len = (bytes.len() as u64 - 24) + (3 << 30);
        f.set_len(len).unwrap();
        let e = read(&p).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Format { .. }), "{e:?}");
        assert!(msg.contains(&format!("{}: data has {} bytes", p.display(), 3u64 << 30)), "{msg}");
        // Too short: the same words, from the size.
        f.set_len(bytes.len() as u64 - 1).unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("data has 23 bytes"));
        // A header length past the file, or past the limit, is refused before it is read.
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&p, &v2).unwrap();
        let msg = read(&p).unwrap_err().to_string();
        assert!(msg.contains("exceeds the limit"), "{msg}");
        v2[8..12].copy_from_slice(&100u32.to_le_bytes());
        std::fs::write(&p, &v2).unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("truncated header"));
        std::fs::remove_dir_all(&d).ok();
    }

    /// `/dev/zero` and a directory are refused before anything is read, naming the path.
    #[test]
    fn non_regular_files_are_refused() {
        let d = scratch("kinds");
        for p in [std::path::PathBuf::from("/dev/zero"), d.clone()] {
            let msg = read(&p).unwrap_err().to_string();
            assert!(msg.contains(&format!("{}: not a regular file", p.display())), "{msg}");
        }
        std::fs::remove_dir_all(&d).ok();
    }

    /// A file whose data begins inside the first 12 bytes (a version-1 header of 0 or 1
    /// bytes) reads those bytes as data.
    #[test]
    fn data_inside_the_prefix_is_kept() {
        let d = scratch("prefix");
        let p = d.join("short.npy");
        let mut f = b"\x93NUMPY\x01\x00\x00\x00".to_vec();
        f.extend_from_slice(&[1, 2]);
        std::fs::write(&p, &f).unwrap();
        // The empty header is refused by the parser, the same way from bytes and from a file.
        assert_eq!(read(&p).unwrap_err().to_string(), parse(&f, &p.display().to_string()).unwrap_err().to_string());
        std::fs::remove_dir_all(&d).ok();
    }
}
