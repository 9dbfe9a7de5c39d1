//! Reading `.safetensors` files (an 8-byte little-endian header length, a JSON header
//! naming each tensor's dtype, shape and byte range, then the data) through the
//! `safetensors` crate, over a memory map.
//!
//! [`SafetensorsFile::open`] maps the file and validates the whole header before any
//! tensor is read: byte ranges contiguous and inside the file, every size computed with
//! checked arithmetic, each range exactly the size its dtype and shape need. A tensor's
//! bytes are copied out of the map only when asked for ([`SafetensorsFile::tensor`]), and
//! the pages they came from are then handed back to the kernel, so loading a model holds
//! its weights once, not twice.

use memmap2::Mmap;
use runtime::{DType, HostBytes, HostTensor};
use safetensors::tensor::{Dtype, Metadata, TensorInfo};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The header length the `safetensors` crate accepts at most (100 MB).
const MAX_HEADER_BYTES: usize = 100_000_000;

/// Why a safetensors file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The first 8 bytes, or the header length they give, do not fit the file.
    #[error("{path}: {msg}")]
    Framing { path: String, msg: String },
    /// The JSON header is malformed or inconsistent (as the `safetensors` crate validates
    /// it: offsets, sizes, overflow).
    #[error("{path}: header: {source}")]
    Header {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: tensor {name}: unsupported dtype {dtype:?}")]
    UnsupportedDtype { path: String, name: String, dtype: Dtype },
    #[error("{path}: no tensor named {name}")]
    Missing { path: String, name: String },
    /// Not a regular file (a directory, `/dev/zero`, a FIFO).
    #[error(transparent)]
    File(crate::files::FileError),
}

impl From<crate::files::FileError> for SafetensorsError {
    /// A failed open stays [`SafetensorsError::Io`]; a refused file is
    /// [`SafetensorsError::File`].
    fn from(e: crate::files::FileError) -> SafetensorsError {
        match e {
            crate::files::FileError::Io { path, source } => SafetensorsError::Io { path, source },
            e => SafetensorsError::File(e),
        }
    }
}

impl From<SafetensorsError> for runtime::Error {
    /// A failed read is [`runtime::Error::Io`] (keeping the `io::Error`); malformed
    /// content is [`runtime::Error::Format`] with this error as its source.
    fn from(e: SafetensorsError) -> runtime::Error {
        match e {
            SafetensorsError::Io { path, source } => runtime::Error::io(path, source),
            SafetensorsError::File(f) => f.into(),
            e => runtime::Error::format_from(String::new(), e),
        }
    }
}

type SResult<T> = std::result::Result<T, SafetensorsError>;

/// A memory-mapped, validated safetensors file.
pub struct SafetensorsFile {
    path: String,
    map: Mmap,
    /// Offset of the data section in the file (8 + header length).
    data_start: usize,
    metadata: Metadata,
    /// Tensors a caller marked as checked ([`SafetensorsFile::mark_checked`]).
    checked: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile").field("path", &self.path).field("tensors", &self.len()).finish()
    }
}

/// The header of `bytes` (a whole safetensors file): where the data starts and the
/// validated metadata.
fn read_header(bytes: &[u8], path: &str) -> SResult<(usize, Metadata)> {
    let framing = |msg: String| SafetensorsError::Framing { path: path.to_string(), msg };
    let len_bytes: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| framing(format!("{} bytes is too short for a safetensors file", bytes.len())))?;
    let n = u64::from_le_bytes(len_bytes);
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_HEADER_BYTES)
        .ok_or_else(|| framing(format!("header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes")))?;
    let data_start = 8 + n;
    let header = bytes
        .get(8..data_start)
        .ok_or_else(|| framing(format!("header length {n} runs past the end of the file ({} bytes)", bytes.len())))?;
    // The crate's own deserializer validates the tensors (offsets in order, sizes from
    // dtype and shape with checked arithmetic).
    let metadata: Metadata =
        serde_json::from_slice(header).map_err(|source| SafetensorsError::Header { path: path.to_string(), source })?;
    // A shape the runtime could not hold is refused even when its zero dim makes it empty:
    // its element count, and its bytes in the dtype it loads as.
    for (name, info) in metadata.tensors() {
        let what = format_args!("tensor {name} {:?}", info.shape);
        let r = match runtime_dtype(info.dtype) {
            Some(dt) => runtime::size::bytes(what, &info.shape, dt).map(drop),
            None => runtime::size::numel(what, &info.shape).map(drop),
        };
        if let Err(e) = r {
            return Err(framing(e.to_string()));
        }
    }
    let data_len = bytes.len() - data_start;
    if metadata.data_len() != data_len {
        return Err(framing(format!(
            "the header describes {} bytes of data but the file holds {data_len}",
            metadata.data_len()
        )));
    }
    Ok((data_start, metadata))
}

/// The runtime dtype a stored dtype is loaded as (F64 becomes F32, BOOL becomes U8).
fn runtime_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 | Dtype::F64 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::U8 | Dtype::BOOL => DType::U8,
        _ => return None,
    })
}

/// `raw` (the bytes of one tensor, as stored) as a host tensor.
fn to_host(raw: &[u8], info: &TensorInfo, name: &str, path: &str) -> SResult<HostTensor> {
    let dtype = runtime_dtype(info.dtype).ok_or_else(|| SafetensorsError::UnsupportedDtype {
        path: path.to_string(),
        name: name.to_string(),
        dtype: info.dtype,
    })?;
    let bytes = if info.dtype == Dtype::F64 {
        let mut v = Vec::with_capacity(raw.len() / 2);
        for c in raw.chunks_exact(8) {
            let x = f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            v.extend_from_slice(&(x as f32).to_le_bytes());
        }
        v
    } else {
        raw.to_vec()
    };
    Ok(HostTensor { dtype, shape: info.shape.clone().into(), bytes: bytes.into() })
}

impl SafetensorsFile {
    /// Maps `path` (a regular file: anything else is refused, naming it) and validates
    /// its header.
    pub fn open(path: impl AsRef<Path>) -> SResult<SafetensorsFile> {
        let p = path.as_ref();
        let name = p.display().to_string();
        let io = |source| SafetensorsError::Io { path: name.clone(), source };
        // A regular file only: a device such as /dev/zero maps (or reads) without end.
        let (file, _) = crate::files::open_regular(p)?;
        // SAFETY: the map is read-only and private to this value; its bytes are only read
        // (copied out). A model file must not be truncated or rewritten while it is loaded,
        // the usual condition of reading a file through a memory map.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (data_start, metadata) = read_header(&map, &name)?;
        Ok(SafetensorsFile { path: name, map, data_start, metadata, checked: Mutex::default() })
    }

    /// The file's path, as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.metadata.offset_keys().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tensor names in file order.
    pub fn names(&self) -> Vec<String> {
        self.metadata.offset_keys()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.metadata.info(name).is_some()
    }

    /// The stored dtype and shape of `name`, read from the header (no data is touched).
    pub fn info(&self, name: &str) -> Option<(Dtype, &[usize])> {
        self.metadata.info(name).map(|i| (i.dtype, i.shape.as_slice()))
    }

    /// The tensor `name`, copied out of the map (f32 / f16 / bf16 / integers as stored;
    /// F64 as f32; BOOL as U8).
    pub fn tensor(&self, name: &str) -> SResult<HostTensor> {
        let (info, s, e) = self.locate(name)?;
        let t = to_host(&self.map[s..e], info, name, &self.path)?;
        self.release(s, e - s);
        Ok(t)
    }

    /// The tensor `name` as [`tensor`](Self::tensor) gives it, but reading the map in
    /// place where the stored bytes are the loaded ones (no F64 or BOOL conversion) and
    /// aligned for their dtype: building a graph from it then copies nothing, and the
    /// pages are handed back to the kernel when the last clone of the bytes is dropped.
    /// Otherwise a copy, as `tensor` makes it.
    pub fn tensor_shared(self: &Arc<Self>, name: &str) -> SResult<HostTensor> {
        let (info, s, e) = self.locate(name)?;
        let as_stored =
            matches!(info.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::I64 | Dtype::I32 | Dtype::U8);
        let dtype = runtime_dtype(info.dtype);
        let aligned = dtype.is_some_and(|d| self.map[s..e].as_ptr().align_offset(d.size()) == 0);
        match dtype {
            Some(dtype) if as_stored && aligned => Ok(HostTensor {
                dtype,
                shape: info.shape.clone().into(),
                bytes: HostBytes::from_owner(MappedBytes { file: Arc::clone(self), start: s, end: e }),
            }),
            _ => self.tensor(name),
        }
    }

    /// Tensor `name`'s header entry and its byte range in the map. In bounds:
    /// `read_header` checked that the data section holds every range.
    fn locate(&self, name: &str) -> SResult<(&TensorInfo, usize, usize)> {
        let info = self
            .metadata
            .info(name)
            .ok_or_else(|| SafetensorsError::Missing { path: self.path.clone(), name: name.to_string() })?;
        Ok((info, self.data_start + info.data_offsets.0, self.data_start + info.data_offsets.1))
    }

    /// Records that the caller checked tensor `name` (e.g. found it finite), so that a
    /// later build from the same file need not read it again ([`is_checked`](Self::is_checked)).
    pub fn mark_checked(&self, name: &str) {
        self.checked.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string());
    }

    pub fn is_checked(&self, name: &str) -> bool {
        self.checked.lock().unwrap_or_else(|p| p.into_inner()).contains(name)
    }

    /// Every tensor, by name.
    pub fn tensors(&self) -> SResult<HashMap<String, HostTensor>> {
        self.names().into_iter().map(|n| Ok((n.clone(), self.tensor(&n)?))).collect()
    }

    /// Hands the pages of `offset..offset + len` back to the kernel once they were copied
    /// (they are read again from the file if asked for again), so that they do not count
    /// twice in the resident set while a model loads.
    fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        {
            if len == 0 {
                return;
            }
            // SAFETY: the map is a read-only shared mapping of a file: dropping its pages
            // does not change what it reads as (the kernel reloads them from the file on
            // the next access), so slices of the range that are still borrowed stay valid.
            let r = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
            if let Err(e) = r {
                log::debug!("{}: madvise(DONTNEED) of {len} bytes: {e}", self.path);
            }
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }
}

/// The bytes of one tensor read in place in a shared file's map (see
/// [`SafetensorsFile::tensor_shared`]); their pages are handed back when dropped.
struct MappedBytes {
    file: Arc<SafetensorsFile>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MappedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.file.map[self.start..self.end]
    }
}

impl Drop for MappedBytes {
    fn drop(&mut self) {
        self.file.release(self.start, self.end - self.start);
    }
}

/// Every tensor of the safetensors file at `path`, by name (f32 and f16/bf16 kept as
/// stored; F64 converted to f32; integer tensors as i64/i32).
pub fn load(path: impl AsRef<Path>) -> runtime::Result<HashMap<String, HostTensor>> {
    Ok(SafetensorsFile::open(path)?.tensors()?)
}

/// [`load`] of a file already in memory; `name` labels errors.
pub fn parse(bytes: &[u8], name: &str) -> runtime::Result<HashMap<String, HostTensor>> {
    let (data_start, metadata) = read_header(bytes, name)?;
    let mut out = HashMap::new();
    for (k, info) in metadata.tensors() {
        let (s, e) = (data_start + info.data_offsets.0, data_start + info.data_offsets.1);
        let t = to_host(&bytes[s..e], info, &k, name)?;
        out.insert(k, t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn parses_a_small_file() {
        let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}"#;
        let data: Vec<u8> = [1f32, 2f32].iter().flat_map(|x| x.to_le_bytes()).collect();
        let f = file(header, &data);
        let m = parse(&f, "mem").unwrap();
        assert_eq!(m["a"].shape.dims(), &[2]);
        assert_eq!(&m["a"].bytes[4..8], &2f32.to_le_bytes());
        assert!(parse(&f[..12], "mem").is_err());
    }

    #[test]
    fn f64_becomes_f32() {
        let header = r#"{"x":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}"#;
        let data: Vec<u8> = [1.5f64, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let m = parse(&file(header, &data), "mem").unwrap();
        assert_eq!(m["x"].dtype, DType::F32);
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, f32>(&m["x"].bytes), vec![1.5, -2.0]);
    }

    /// Shapes whose byte size overflows, or that the data does not cover, are header
    /// errors, whether or not the tensor is ever read.
    #[test]
    fn overflowing_and_inconsistent_headers_are_errors() {
        let cases = [
            // [2^62] f32: the byte size overflows.
            r#"{"unused":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}}"#,
            // [2^62] u8 with 0 bytes.
            r#"{"unused":{"dtype":"U8","shape":[4611686018427387904],"data_offsets":[0,0]}}"#,
            // [2^62, 384] with no data.
            r#"{"w":{"dtype":"F32","shape":[4611686018427387904,384],"data_offsets":[0,0]}}"#,
            // Empty, but 2^62 f32 elements per row need 2^64 bytes.
            r#"{"e":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]}}"#,
            // Ranges overlapping, reversed, or past the data.
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}}"#,
            r#"{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#,
            // Ranges that sum past usize::MAX.
            r#"{"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]},"b":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[9223372036854775807,18446744073709551614]}}"#,
            // Not an object, unknown dtype, negative dimension.
            r#"[1,2]"#,
            r#"{"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,4]}}"#,
            r#"{"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}"#,
        ];
        for h in cases {
            let f = file(h, &[0u8; 4]);
            let e = parse(&f, "mem").expect_err(h);
            assert!(e.to_string().starts_with("format: mem: "), "{h}: {e}");
        }
        // A header length past the file, or past usize.
        let mut f = file("{}", &[]);
        f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&f, "mem").unwrap_err().to_string().contains("header length"));
        f[..8].copy_from_slice(&1000u64.to_le_bytes());
        assert!(parse(&f, "mem").unwrap_err().to_string().contains("past the end"));
    }

    #[test]
    fn unsupported_dtypes_name_the_tensor() {
        let header = r#"{"q":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}}"#;
        let e = parse(&file(header, &[1, 2, 3, 4]), "mem").unwrap_err();
        assert!(e.to_string().contains("tensor q: unsupported dtype I8"), "{e}");
    }

    #[test]
    fn a_mapped_file_reads_like_parse() {
        let dir = std::env::temp_dir().join(format!("npurt-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.safetensors");
        let header = r#"{"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}}"#;
        let mut data = vec![7u8; 8];
        data.extend_from_slice(&(-3i64).to_le_bytes());
        std::fs::write(&p, file(header, &data)).unwrap();
        let f = SafetensorsFile::open(&p).unwrap();
        assert_eq!(f.names(), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(f.info("a"), Some((Dtype::F16, &[2usize, 2][..])));
        let b = f.tensor("b").unwrap();
        assert_eq!((b.dtype, b.bytes.as_slice()), (DType::I64, &(-3i64).to_le_bytes()[..]));
        // Read twice: the released pages come back from the file.
        assert_eq!(f.tensor("b").unwrap().bytes, b.bytes);
        assert_eq!(f.tensors().unwrap()["a"].bytes.as_slice(), &[7u8; 8]);
        assert!(matches!(f.tensor("c"), Err(SafetensorsError::Missing { .. })));
        assert!(matches!(SafetensorsFile::open(dir.join("absent")), Err(SafetensorsError::Io { .. })));
        // Neither a directory nor a device is mapped: each is refused, naming it.
        for p in [dir.clone(), std::path::PathBuf::from("/dev/zero")] {
            let e = SafetensorsFile::open(&p).unwrap_err();
            assert!(matches!(e, SafetensorsError::File(_)), "{e}");
            assert!(e.to_string().contains(&format!("{}: not a regular file", p.display())), "{e}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// `tensor_shared` reads aligned tensors in place (the bytes outlive the caller's
    /// handle) and copies the others; either way it reads what `tensor` reads.
    #[test]
    fn shared_tensors_read_the_map_in_place() {
        let dir = std::env::temp_dir().join(format!("npurt-st-shared-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.safetensors");
        // Header of 8 + 112 bytes: the data starts 8-aligned in the (page-aligned) map.
        // `w` sits at 0 (aligned), `odd` at 18 (not 4-aligned), `d` is F64 (converted).
        let mut header = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"pad":{"dtype":"U8","shape":[2],"data_offsets":[16,18]},"odd":{"dtype":"F32","shape":[1],"data_offsets":[18,22]},"d":{"dtype":"F64","shape":[1],"data_offsets":[22,30]}}"#.to_string();
        while !(8 + header.len()).is_multiple_of(8) {
            header.push(' ');
        }
        let mut data: Vec<u8> = [1f32, -2.0, 3.5, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        data.extend_from_slice(&[0, 0]);
        data.extend_from_slice(&9f32.to_le_bytes());
        data.extend_from_slice(&0.25f64.to_le_bytes());
        std::fs::write(&p, file(&header, &data)).unwrap();
        let f = Arc::new(SafetensorsFile::open(&p).unwrap());
        for name in ["w", "pad", "odd", "d"] {
            let (shared, copied) = (f.tensor_shared(name).unwrap(), f.tensor(name).unwrap());
            assert_eq!(shared, copied, "{name}");
        }
        let w = f.tensor_shared("w").unwrap();
        let in_map = f.map.as_ptr_range();
        assert!(in_map.contains(&w.bytes.as_ptr()), "an aligned f32 tensor is read in place");
        assert!(!in_map.contains(&f.tensor_shared("odd").unwrap().bytes.as_ptr()), "an unaligned one is copied");
        assert_eq!(f.tensor_shared("d").unwrap().dtype, DType::F32);
        assert!(matches!(f.tensor_shared("c"), Err(SafetensorsError::Missing { .. })));
        drop(f);
        assert_eq!(
            bytemuck::pod_collect_to_vec::<u8, f32>(&w.bytes),
            vec![1.0, -2.0, 3.5, 4.0],
            "the bytes keep the map alive"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
