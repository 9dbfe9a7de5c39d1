//! The weights of a fused group with symbolic dims, kept to compile later input shapes without
//! a second copy in memory.
//!
//! npurt's copy of a weight is the one its compiled graphs read (the device copy in the
//! group's [`SharedConstants`](runtime::graph::SharedConstants) store). It cannot stand in for
//! the ONNX bytes: the CPU backend packs a Linear weight in place for the kernel that reads it,
//! and a later shape whose node picks another kernel needs the original bytes again. So at
//! `Compile` each weight is written straight from ONNX Runtime's buffer into an unlinked
//! temporary file (the way npurt's own loader reads a model's weights from a memory-mapped
//! file), and each compile maps the weights it reads, one mapping per weight, handed over to
//! the graph alone: npurt frees each as soon as its device copy is made (or found in the
//! store), so the weights' bytes are in memory once, as npurt's, between compiles and, but
//! for the one being uploaded, during them.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use runtime::graph::{HostBytes, HostTensor};
use runtime::{DType, Shape};

use crate::ort::EpError;

/// Where each weight's bytes start in the file: aligned for any element type.
const ALIGN: u64 = 64;

/// Weights in an unlinked temporary file. `Send + Sync`: written only while it is built
/// (`&mut self`), then only read (each [`Stash::get`] maps its own region).
#[derive(Debug)]
pub struct Stash {
    /// `None` when no file could be made there: the weights are then kept in memory (a
    /// warning said so).
    file: Option<File>,
    entries: HashMap<String, Entry>,
    /// The end of the last weight written.
    end: u64,
    /// Bytes mapped by the [`HostTensor`]s handed out and still alive.
    mapped: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct Entry {
    dtype: DType,
    shape: Shape,
    offset: u64,
    len: usize,
    /// `HostBytes::fingerprint_of` the bytes, taken as they were written, so a compile
    /// that finds the weight in its store reads nothing of the mapping.
    fingerprint: u64,
    /// The bytes, when there is no file.
    held: Option<HostBytes>,
}

/// One weight's mapping, owned by the [`HostBytes`] of the constant that reads it.
struct Mapped {
    map: memmap2::Mmap,
    mapped: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        self.mapped.fetch_sub(self.map.len(), Ordering::Relaxed);
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> EpError {
    move |e| EpError::Graph(format!("{what}: {e}"))
}

impl Default for Stash {
    /// [`Stash::new`].
    fn default() -> Stash {
        Stash::new()
    }
}

/// A new file in `dir`, unlinked at once.
fn create_file(dir: &std::path::Path) -> Result<File, EpError> {
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = dir.join(format!("npurt-ort-ep-{}-{nanos}-{attempt}.weights", std::process::id()));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
            Ok(file) => {
                std::fs::remove_file(&path).map_err(io(format!("unlinking {}", path.display())))?;
                return Ok(file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io(format!("creating the weights file {}", path.display()))(e)),
        }
    }
    Err(EpError::Graph(format!("creating a weights file in {}: {last:?}", dir.display())))
}

impl Stash {
    /// An empty stash: a new file in the temporary directory (`TMPDIR`), unlinked at once.
    pub fn new() -> Stash {
        Stash::new_in(&std::env::temp_dir())
    }

    /// An empty stash in a new file in `dir`, unlinked at once; where none can be made there,
    /// one that keeps the weights in memory, with a warning.
    pub fn new_in(dir: &std::path::Path) -> Stash {
        let file = match create_file(dir) {
            Ok(f) => Some(f),
            Err(e) => {
                log::warn!("{e}; the weights of a fused group with symbolic dims stay in memory (held twice)");
                None
            }
        };
        Stash { file, entries: HashMap::new(), end: 0, mapped: Arc::default() }
    }

    /// Whether the weights are in a file (else in memory).
    pub fn in_file(&self) -> bool {
        self.file.is_some()
    }

    /// Writes weight `name` (its little-endian element bytes); a name written already keeps
    /// its first bytes.
    pub fn put(&mut self, name: &str, dtype: DType, shape: Shape, bytes: &[u8]) -> Result<(), EpError> {
        if self.entries.contains_key(name) {
            return Ok(());
        }
        let offset = self.end.div_ceil(ALIGN).checked_mul(ALIGN);
        let end = offset.and_then(|o| o.checked_add(bytes.len() as u64));
        let (Some(offset), Some(end)) = (offset, end) else {
            return Err(EpError::Graph(format!("weight {name:?}: the weights file would pass 2^64 bytes")));
        };
        let held = match &self.file {
            Some(f) => {
                f.write_all_at(bytes, offset).map_err(io(format!("writing weight {name:?} to the weights file")))?;
                None
            }
            None => Some(HostBytes::from(bytes.to_vec())),
        };
        let fingerprint = HostBytes::fingerprint_of(bytes);
        self.entries.insert(name.to_string(), Entry { dtype, shape, offset, len: bytes.len(), fingerprint, held });
        self.end = end;
        Ok(())
    }

    /// Weight `name`, its bytes a read-only mapping of the file that lives as long as the
    /// tensor's bytes do; `None` when it was not written.
    pub fn get(&self, name: &str) -> Option<Result<HostTensor, EpError>> {
        let e = self.entries.get(name)?;
        let tensor = |bytes| HostTensor { dtype: e.dtype, shape: e.shape.clone(), bytes };
        let file = match (&e.held, &self.file) {
            (Some(held), _) => return Some(Ok(tensor(held.clone()))),
            _ if e.len == 0 => return Some(Ok(tensor(HostBytes::default()))),
            (None, Some(f)) => f,
            (None, None) => return Some(Err(EpError::Graph(format!("weight {name:?} has no bytes")))),
        };
        let mut options = memmap2::MmapOptions::new();
        options.offset(e.offset).len(e.len);
        // SAFETY: the file is this stash's own, unlinked at creation: only this process's descriptor reaches
        // it (or one that could write this process's memory through /proc anyway). The stash only appends
        // past the regions it wrote, never rewriting a mapped one: the mapped bytes never change.
        let map = unsafe { options.map(file) };
        let map = match map {
            Ok(m) => m,
            Err(err) => return Some(Err(io(format!("mapping weight {name:?}"))(err))),
        };
        self.mapped.fetch_add(map.len(), Ordering::Relaxed);
        let mapped = Mapped { map, mapped: self.mapped.clone() };
        Some(Ok(tensor(HostBytes::from_owner_with_fingerprint(mapped, e.fingerprint))))
    }

    /// Whether weight `name` was written.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Weights written.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the weights written (in the file, when there is one).
    pub fn bytes(&self) -> usize {
        self.entries.values().map(|e| e.len).sum()
    }

    /// Bytes mapped by the tensors [`Stash::get`] handed out that are still alive: 0 between
    /// compiles, when the compiled graphs hold npurt's copies only.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_come_back_from_the_file_and_are_unmapped_with_their_last_reader() {
        let mut s = Stash::new();
        assert!(s.in_file());
        let a: Vec<u8> = (0..1000u32).flat_map(|x| (x as f32).to_le_bytes()).collect();
        s.put("a", DType::F32, Shape::from(vec![10, 100]), &a).unwrap();
        s.put("b", DType::U8, Shape::from(vec![3]), &[7, 8, 9]).unwrap();
        s.put("e", DType::F32, Shape::from(vec![0]), &[]).unwrap();
        s.put("a", DType::F32, Shape::from(vec![1]), &[0; 4]).unwrap();
        assert_eq!((s.len(), s.bytes(), s.mapped_bytes()), (3, 4003, 0));
        let ta = s.get("a").unwrap().unwrap();
        assert_eq!((ta.dtype, ta.shape.dims()), (DType::F32, &[10usize, 100][..]));
        assert_eq!(&ta.bytes[..], &a[..]);
        assert_eq!(ta.bytes.as_ptr() as usize % ALIGN as usize, 0, "aligned for any element type");
        // The fingerprint taken at `put` is the one npurt would take from the mapping.
        let owned = HostBytes::from(a.clone());
        assert_eq!(ta.bytes.fingerprint(), owned.fingerprint());
        let tb = s.get("b").unwrap().unwrap();
        assert_eq!(&tb.bytes[..], &[7, 8, 9]);
        assert_eq!(tb.bytes.as_ptr() as usize % ALIGN as usize, 0);
        assert!(s.get("e").unwrap().unwrap().bytes.is_empty());
        assert!(s.get("nope").is_none());
        assert_eq!(s.mapped_bytes(), 4003);
        let clone = ta.clone();
        drop(ta);
        assert_eq!(s.mapped_bytes(), 4003, "a clone keeps the mapping");
        drop((clone, tb));
        assert_eq!(s.mapped_bytes(), 0);
    }

    #[test]
    fn without_a_file_the_weights_stay_in_memory() {
        let mut s = Stash::new_in(std::path::Path::new("/nonexistent/npurt-ort-ep"));
        assert!(!s.in_file());
        s.put("b", DType::U8, Shape::from(vec![3]), &[7, 8, 9]).unwrap();
        s.put("e", DType::F32, Shape::from(vec![0]), &[]).unwrap();
        assert_eq!(&s.get("b").unwrap().unwrap().bytes[..], &[7, 8, 9]);
        assert!(s.get("e").unwrap().unwrap().bytes.is_empty());
        assert_eq!((s.len(), s.bytes(), s.mapped_bytes()), (2, 3, 0));
    }
}
