//! The handle table: every handle C holds (runtime, tensor, stream, event, graph,
//! embedder) is an entry of one process-wide table, and the pointer C sees is not an
//! address but the entry's number, its type tag and its generation packed into a
//! pointer-sized value. The library never dereferences a handle: it looks it up, so a
//! released handle (its generation is stale), a handle of another type (its tag) or a
//! value npurt never handed out (no such entry, generation 0, unknown tag) is
//! `NPURT_ERR_INVALID_HANDLE` with a message, never a read of freed memory.
//!
//! A lookup clones the entry's `Arc`: a call in flight keeps the object alive even when
//! another thread releases the handle meanwhile; the object is dropped when the last of
//! them lets go. The table is a `RwLock` (lookups share it, making and releasing take it
//! alone); nothing inside it can panic, and a poisoned lock is used as it is.
//!
//! Layout of a handle (`usize::BITS` = 64; halved, eighthed and the rest on other widths):
//! bits 0..32 the entry's index + 1, bits 32..40 the type tag, bits 40..64 the generation
//! (never 0; it wraps after 2^24 - 1 reuses of one entry, and freed entries are reused
//! oldest first, so a stale handle aliases a new one only after that many handles of
//! that entry).

use crate::error::{CResult, Fail, NPURT_ERR_INTERNAL, NPURT_ERR_INVALID_HANDLE, NPURT_ERR_OUT_OF_MEMORY};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, PoisonError, RwLock};

/// The type tag of a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Runtime = 1,
    Tensor = 2,
    Stream = 3,
    Event = 4,
    Graph = 5,
    Embedder = 6,
}

impl Kind {
    const ALL: [Kind; 6] = [Kind::Runtime, Kind::Tensor, Kind::Stream, Kind::Event, Kind::Graph, Kind::Embedder];

    /// The C type of the handle.
    pub(crate) fn c_name(self) -> &'static str {
        match self {
            Kind::Runtime => "npurt_runtime",
            Kind::Tensor => "npurt_tensor",
            Kind::Stream => "npurt_stream",
            Kind::Event => "npurt_event",
            Kind::Graph => "npurt_graph",
            Kind::Embedder => "npurt_embedder",
        }
    }

    fn from_tag(tag: usize) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as usize == tag)
    }
}

/// A value C holds through a handle: its type tag.
pub(crate) trait Object: Any + Send + Sync {
    const KIND: Kind;
}

const INDEX_BITS: u32 = usize::BITS / 2;
const TAG_BITS: u32 = usize::BITS / 8;
const GEN_BITS: u32 = usize::BITS - INDEX_BITS - TAG_BITS;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;
const TAG_MASK: usize = (1 << TAG_BITS) - 1;
const GEN_MASK: usize = (1 << GEN_BITS) - 1;
/// Entries the table can hold (index + 1 must fit its field).
const MAX_ENTRIES: usize = INDEX_MASK;

type Shared = Arc<dyn Any + Send + Sync>;

struct Entry {
    /// The generation of the entry's current (or next) handle; never 0.
    generation: usize,
    /// The live object and its tag; `None` once released.
    live: Option<(Kind, Shared)>,
}

struct Table {
    entries: Vec<Entry>,
    /// Released entries, reused oldest first.
    free: VecDeque<usize>,
    /// Live handles.
    live: usize,
}

static TABLE: RwLock<Table> = RwLock::new(Table { entries: Vec::new(), free: VecDeque::new(), live: 0 });

fn encode(index: usize, kind: Kind, generation: usize) -> usize {
    (index + 1) | ((kind as usize) << INDEX_BITS) | (generation << (INDEX_BITS + TAG_BITS))
}

/// What a handle's bits say: (index, tag, generation); `None` when the index field is 0.
fn decode(h: usize) -> Option<(usize, usize, usize)> {
    let index = (h & INDEX_MASK).checked_sub(1)?;
    Some((index, (h >> INDEX_BITS) & TAG_MASK, (h >> (INDEX_BITS + TAG_BITS)) & GEN_MASK))
}

/// Enters `v` into the table and returns its handle.
pub(crate) fn insert<T: Object>(v: T) -> CResult<*mut T> {
    let shared: Shared = Arc::new(v);
    let mut t = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    let index = match t.free.pop_front() {
        Some(i) => i,
        None => {
            if t.entries.len() >= MAX_ENTRIES {
                return Err(Fail::new(
                    NPURT_ERR_OUT_OF_MEMORY,
                    format!("the handle table is full ({MAX_ENTRIES} handles alive)"),
                ));
            }
            t.entries.push(Entry { generation: 1, live: None });
            t.entries.len() - 1
        }
    };
    let entry = &mut t.entries[index];
    entry.live = Some((T::KIND, shared));
    let h = encode(index, T::KIND, entry.generation);
    t.live += 1;
    Ok(std::ptr::without_provenance_mut(h))
}

/// The entry and object of the live handle `p` of a `T` (passed as `what`), or why it is none.
fn check<T: Object>(t: &Table, p: usize, what: &str) -> Result<(usize, Shared), Fail> {
    let want = T::KIND.c_name();
    let invalid = |msg: String| Fail::new(NPURT_ERR_INVALID_HANDLE, format!("{what}: {msg}"));
    let foreign = || invalid(format!("{p:#x} is not a handle npurt made (expected an {want})"));
    let (index, tag, generation) = decode(p).ok_or_else(foreign)?;
    let kind = Kind::from_tag(tag).ok_or_else(foreign)?;
    // Only bits that name an entry npurt made are read as a handle: any other value (a
    // heap address, say) whose fields happen to decode stays "not a handle npurt made".
    let entry = t.entries.get(index).filter(|_| generation != 0).ok_or_else(foreign)?;
    match &entry.live {
        Some((k, obj)) if *k == kind && entry.generation == generation => {
            if kind != T::KIND {
                return Err(invalid(format!("{p:#x} is an {} handle, not an {want}", kind.c_name())));
            }
            Ok((index, obj.clone()))
        }
        _ if generation < entry.generation => Err(invalid(format!("{want} handle {p:#x} was already released"))),
        _ => Err(foreign()),
    }
}

fn downcast<T: Object>(obj: Shared) -> CResult<Arc<T>> {
    obj.downcast::<T>().map_err(|_| Fail::new(NPURT_ERR_INTERNAL, format!("handle table: not an {}", T::KIND.c_name())))
}

/// The object behind the handle `p` of a `T`. NULL is `NPURT_ERR_INVALID_ARGUMENT`
/// ("`what` is NULL"); a released, foreign or wrong-type handle `NPURT_ERR_INVALID_HANDLE`.
pub(crate) fn get<T: Object>(p: *const T, what: &str) -> CResult<Arc<T>> {
    if p.is_null() {
        return Err(Fail::arg(format!("{what} is NULL")));
    }
    let obj = {
        let t = TABLE.read().unwrap_or_else(PoisonError::into_inner);
        check::<T>(&t, p.addr(), what)?.1
    };
    downcast(obj)
}

/// As [`get`], `None` for NULL.
pub(crate) fn get_opt<T: Object>(p: *const T, what: &str) -> CResult<Option<Arc<T>>> {
    if p.is_null() { Ok(None) } else { get(p, what).map(Some) }
}

/// Removes the handle `p` from the table (its later uses are `NPURT_ERR_INVALID_HANDLE`)
/// and returns the object for the caller to drop, outside the table's lock. NULL is
/// `Ok(None)`.
pub(crate) fn release<T: Object>(p: *mut T, what: &str) -> CResult<Option<Arc<T>>> {
    if p.is_null() {
        return Ok(None);
    }
    let obj = {
        let mut t = TABLE.write().unwrap_or_else(PoisonError::into_inner);
        let (index, _) = check::<T>(&t, p.addr(), what)?;
        let entry = &mut t.entries[index];
        let obj = entry.live.take().map(|(_, o)| o);
        entry.generation = match (entry.generation + 1) & GEN_MASK {
            0 => 1,
            g => g,
        };
        t.free.push_back(index);
        t.live -= 1;
        obj
    };
    obj.map(downcast).transpose()
}

/// The number of live handles.
#[cfg_attr(not(feature = "debug-hooks"), allow(dead_code))]
pub(crate) fn live() -> usize {
    TABLE.read().unwrap_or_else(PoisonError::into_inner).live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NPURT_ERR_INVALID_ARGUMENT;

    #[derive(Debug)]
    struct A(u32);
    impl Object for A {
        const KIND: Kind = Kind::Event;
    }
    #[derive(Debug)]
    struct B;
    impl Object for B {
        const KIND: Kind = Kind::Graph;
    }

    #[test]
    fn released_foreign_and_wrong_type_handles_are_refused() {
        let a = insert(A(7)).unwrap();
        assert_eq!(get(a, "a").unwrap().0, 7);
        let e = get(a.cast::<B>(), "graph").unwrap_err();
        assert_eq!(e.status, NPURT_ERR_INVALID_HANDLE);
        assert!(e.msg.contains("is an npurt_event handle, not an npurt_graph"), "{}", e.msg);
        assert_eq!(release(a, "a").unwrap().unwrap().0, 7);
        let e = get(a, "event").unwrap_err();
        assert_eq!(e.status, NPURT_ERR_INVALID_HANDLE);
        assert!(e.msg.contains("was already released"), "{}", e.msg);
        let e = release(a, "event").unwrap_err();
        assert!(e.msg.contains("was already released"), "{}", e.msg);
        // A new handle may reuse the entry: the old one stays released.
        let a2 = insert(A(8)).unwrap();
        assert_ne!(a, a2);
        assert!(get(a, "event").unwrap_err().msg.contains("already released"));
        assert_eq!(get(a2, "event").unwrap().0, 8);
        // Bits whose tag field names a kind (Graph = 5 in bits 32..40) and whose index is
        // past the table, as a heap address can be: not a handle npurt made.
        let graph_like = 0x5605_ffda_e530usize;
        for bogus in [1usize, 0xdead_beef, usize::MAX, 0x5555_1234_5678, graph_like] {
            let e = get(std::ptr::without_provenance::<A>(bogus), "event").unwrap_err();
            assert_eq!(e.status, NPURT_ERR_INVALID_HANDLE, "{bogus:#x}");
            assert!(e.msg.contains("is not a handle npurt made"), "{}", e.msg);
        }
        let e = get(std::ptr::null::<A>(), "event").unwrap_err();
        assert_eq!((e.status, e.msg.as_str()), (NPURT_ERR_INVALID_ARGUMENT, "event is NULL"));
        assert!(release(std::ptr::null_mut::<A>(), "event").unwrap().is_none());
        release(a2, "a2").unwrap();
    }

    /// Eight threads make, use and release handles at once, and release each other's
    /// handles: each handle is released exactly once (by one thread; the others get
    /// `NPURT_ERR_INVALID_HANDLE`), and every lookup sees its own value.
    #[test]
    fn the_table_is_consistent_under_concurrent_use() {
        let shared: Vec<usize> = (0..64).map(|i| insert(A(1000 + i)).unwrap().addr()).collect();
        let released = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for th in 0..8u32 {
                let shared = &shared;
                let released = &released;
                s.spawn(move || {
                    for i in 0..2000u32 {
                        let v = th * 100_000 + i;
                        let h = insert(A(v)).unwrap();
                        assert_eq!(get(h, "h").unwrap().0, v);
                        assert_eq!(release(h, "h").unwrap().unwrap().0, v);
                        assert_eq!(get(h, "h").unwrap_err().status, NPURT_ERR_INVALID_HANDLE);
                    }
                    for &p in shared {
                        let p = std::ptr::without_provenance_mut::<A>(p);
                        match release(p, "shared") {
                            Ok(Some(_)) => {
                                released.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Ok(None) => panic!("not NULL"),
                            Err(e) => assert_eq!(e.status, NPURT_ERR_INVALID_HANDLE, "{}", e.msg),
                        }
                    }
                });
            }
        });
        assert_eq!(released.into_inner(), shared.len());
    }
}
