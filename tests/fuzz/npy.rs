//! `npurt::npy`: random well-formed arrays round trip (through `to_bytes` and through
//! headers written here in every form NumPy writes or accepts); random headers and mutated
//! files parse to an array consistent with its header or to a typed error, without a
//! panic and without allocating more than the input's size.

use crate::alloc::largest_allocation;
use npurt::npy::{self, NpyArray};
use npurt::{DType, Error};
use proptest::prelude::*;

/// The most `parse` may allocate at once for an input of `len` bytes: a copy of the data,
/// plus room for the header's strings and an error message.
fn allocation_bound(len: usize) -> usize {
    len + (64 << 10)
}

/// Parses `bytes` and checks the answer: an array whose data is exactly what its dtype and
/// shape need, or an `Io` / `Overflow` error naming the source. Returns the array.
fn parse_checked(bytes: &[u8]) -> Option<NpyArray> {
    let (r, largest) = largest_allocation(|| npy::parse(bytes, "fuzz.npy"));
    assert!(largest <= allocation_bound(bytes.len()), "{largest} bytes allocated for a {}-byte input", bytes.len());
    match r {
        Ok(a) => {
            let need = runtime::size::bytes("shape", &a.shape, a.dtype).expect("an accepted shape is representable");
            assert_eq!(a.data.len(), need, "{:?} {:?}", a.dtype, a.shape);
            Some(a)
        }
        Err(e @ Error::Overflow { .. }) => {
            assert!(e.to_string().contains("fuzz.npy"), "{e}");
            None
        }
        Err(Error::Format { context: msg, .. }) => {
            assert!(msg.starts_with("fuzz.npy: "), "{msg}");
            None
        }
        Err(e) => panic!("an untyped error for npy input: {e:?}"),
    }
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::I32), Just(DType::I64), Just(DType::U8)]
}

/// Shapes of rank 0..=5 with at most a few hundred elements (dims 0..=6).
fn small_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..=6, 0..=5)
}

prop_compose! {
    /// A valid array: a dtype, a small shape and random element bytes.
    fn array()(dtype in dtype(), shape in small_shape())
        (data in prop::collection::vec(any::<u8>(), shape.iter().product::<usize>() * dtype.size()),
         dtype in Just(dtype), shape in Just(shape)) -> NpyArray {
        NpyArray { dtype, shape, data }
    }
}

/// The ways a header may be written (all accepted by NumPy's reader).
#[derive(Clone, Debug)]
struct Style {
    version: u8,
    double_quotes: bool,
    /// Order of the three keys.
    order: [usize; 3],
    trailing_comma: bool,
    spaces: usize,
    long_suffix: bool,
    pad: usize,
}

fn style() -> impl Strategy<Value = Style> {
    let order = Just([0usize, 1, 2]).prop_shuffle().prop_map(|v| [v[0], v[1], v[2]]);
    (1u8..=3, any::<bool>(), order, any::<bool>(), 0usize..3, any::<bool>(), 0usize..80).prop_map(
        |(version, double_quotes, order, trailing_comma, spaces, long_suffix, pad)| Style {
            version,
            double_quotes,
            order,
            trailing_comma,
            spaces,
            long_suffix,
            pad,
        },
    )
}

/// A `.npy` file of `descr`, `shape` (as written, possibly not numbers) and `body`, its
/// header laid out as `style` says.
fn file(descr: &str, fortran: &str, shape: &[String], body: &[u8], s: &Style) -> Vec<u8> {
    let q = if s.double_quotes { '"' } else { '\'' };
    let sp = " ".repeat(s.spaces);
    let tuple = match shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.join(&format!(",{sp}"))),
    };
    let items = [
        format!("{q}descr{q}:{sp}{q}{descr}{q}"),
        format!("{q}fortran_order{q}:{sp}{fortran}"),
        format!("{q}shape{q}:{sp}{tuple}"),
    ];
    let mut header = format!("{{{}", s.order.iter().map(|&i| items[i].as_str()).collect::<Vec<_>>().join(", "));
    header.push_str(if s.trailing_comma { ", }" } else { "}" });
    header.push_str(&" ".repeat(s.pad));
    header.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[s.version, 0]);
    if s.version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(body);
    out
}

fn descr(d: DType) -> &'static str {
    match d {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        _ => "|u1",
    }
}

/// Dims as a header may spell them: small, at the edges of u32 / u64 / usize, or past them.
fn header_dim() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..8).prop_map(|d| d.to_string()),
        1 => Just((1u64 << 32).to_string()),
        1 => Just((1u64 << 62).to_string()),
        1 => Just((1u64 << 63).to_string()),
        1 => Just(u64::MAX.to_string()),
        1 => Just("18446744073709551616".to_string()),
        1 => any::<u64>().prop_map(|d| d.to_string()),
        1 => "[-+0-9a-zL ]{0,4}",
    ]
}

/// A byte-level change to a file.
#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Remove { at, len }),
    ]
}

fn apply(f: &mut Vec<u8>, m: &Mutation) {
    let n = f.len().max(1);
    match m {
        Mutation::Flip { at, bit } => {
            if let Some(b) = f.get_mut(at % n) {
                *b ^= 1 << bit;
            }
        }
        Mutation::Set { at, byte } => {
            if let Some(b) = f.get_mut(at % n) {
                *b = *byte;
            }
        }
        Mutation::Truncate { at } => f.truncate(at % n),
        Mutation::Insert { at, bytes } => {
            let at = at % (f.len() + 1);
            f.splice(at..at, bytes.iter().copied());
        }
        Mutation::Remove { at, len } => {
            let at = at % n;
            let end = (at + len).min(f.len());
            f.drain(at.min(end)..end);
        }
    }
}

proptest! {
    #![proptest_config(crate::config(1000))]

    /// `to_bytes` then `parse` gives the array back.
    #[test]
    fn npy_round_trips(a in array()) {
        let bytes = npy::to_bytes(&a).unwrap();
        prop_assert_eq!(parse_checked(&bytes), Some(a));
    }

    /// Headers in every layout NumPy writes (versions 1 to 3, either quote, any key order,
    /// padding, `L` suffixes), and `<f8` data read as f32, parse to the array written.
    #[test]
    fn npy_hand_written_headers_parse(a in array(), s in style(), as_f64 in any::<bool>()) {
        let dims: Vec<String> =
            a.shape.iter().map(|d| if s.long_suffix { format!("{d}L") } else { d.to_string() }).collect();
        if as_f64 {
            let n = a.shape.iter().product::<usize>();
            let vals: Vec<f64> = a.data.iter().cycle().take(n).map(|&b| b as f64 / 7.0 - 9.0).collect();
            let body: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let got = parse_checked(&file("<f8", "False", &dims, &body, &s)).expect("a valid <f8 file");
            let want: Vec<u8> = vals.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
            prop_assert_eq!((got.dtype, got.shape, got.data), (DType::F32, a.shape, want));
        } else {
            let got = parse_checked(&file(descr(a.dtype), "False", &dims, &a.data, &s));
            prop_assert_eq!(got, Some(a));
        }
    }

    /// Arbitrary dims (up to and past `u64::MAX`), dtypes and flags in a well-framed header,
    /// with a body of any length: a consistent array or a typed error, and no allocation
    /// sized from the header.
    #[test]
    fn npy_arbitrary_headers_are_ok_or_typed_errors(
        dims in prop::collection::vec(header_dim(), 0..=6),
        descr in prop_oneof![
            Just("<f4".to_string()), Just("<f8".to_string()), Just("|b1".to_string()), Just(">f4".to_string()),
            Just("<U8".to_string()), "[<>|=]?[a-zA-Z][0-9]{0,3}",
        ],
        fortran in prop_oneof![Just("False"), Just("True"), Just("0"), Just("None")],
        body_len in 0usize..96,
        s in style(),
    ) {
        let body: Vec<u8> = (0..body_len).map(|i| i as u8).collect();
        parse_checked(&file(&descr, fortran, &dims, &body, &s));
    }

    /// Up to eight byte-level mutations of a valid file: a consistent array or a typed
    /// error.
    #[test]
    fn npy_mutated_files_are_ok_or_typed_errors(
        a in array(),
        s in style(),
        muts in prop::collection::vec(mutation(), 1..8),
    ) {
        let dims: Vec<String> = a.shape.iter().map(|d| d.to_string()).collect();
        let mut f = file(descr(a.dtype), "False", &dims, &a.data, &s);
        for m in &muts {
            apply(&mut f, m);
        }
        parse_checked(&f);
    }

    /// Arbitrary bytes, with and without the magic in front.
    #[test]
    fn npy_arbitrary_bytes_are_ok_or_typed_errors(
        magic in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut f = if magic { b"\x93NUMPY".to_vec() } else { Vec::new() };
        f.extend_from_slice(&bytes);
        parse_checked(&f);
    }
}

/// Shapes whose size overflows are refused whatever the data, and nothing is allocated
/// for them.
#[test]
fn npy_overflowing_shapes_are_errors() {
    let s = Style {
        version: 1,
        double_quotes: false,
        order: [0, 1, 2],
        trailing_comma: true,
        spaces: 1,
        long_suffix: false,
        pad: 0,
    };
    let big = |d: &[u64]| d.iter().map(u64::to_string).collect::<Vec<_>>();
    for dims in [
        big(&[1 << 32, 1 << 32]),
        big(&[1 << 62, 0, 1 << 62]),
        big(&[u64::MAX]),
        big(&[(1 << 62) + 1, 4]),
        big(&[2, 1 << 63]),
    ] {
        let f = file("<f4", "False", &dims, &[], &s);
        assert!(parse_checked(&f).is_none(), "{dims:?} accepted");
    }
}

proptest! {
    #![proptest_config(crate::config(48))]

    /// A valid header on disk followed by a tail of any length up to 4 GiB (sparse, made
    /// with `set_len`): `npy::read` decides from the file's size, before reading any data,
    /// and allocates nothing sized from the tail ("data has N bytes" when it is not what
    /// the shape needs; the array when it is).
    #[test]
    fn npy_files_with_any_tail_are_decided_from_their_size(
        a in array(),
        s in style(),
        tail in prop_oneof![2 => 0u64..64, 1 => (1u64 << 20)..(1u64 << 32), 1 => Just(3u64 << 30)],
    ) {
        let dims: Vec<String> = a.shape.iter().map(|d| d.to_string()).collect();
        let bytes = file(descr(a.dtype), "False", &dims, &a.data, &s);
        let header = (bytes.len() - a.data.len()) as u64;
        let dir = crate::files::TempDir::new("npy-tail");
        let p = dir.write("tail.npy", &bytes);
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(header + tail).unwrap();
        let (r, largest) = largest_allocation(|| npy::read(&p));
        prop_assert!(largest <= a.data.len() + (64 << 10), "{} bytes allocated for a {}-byte tail", largest, tail);
        if tail == a.data.len() as u64 {
            prop_assert_eq!(r.unwrap(), a);
        } else {
            let msg = r.unwrap_err().to_string();
            prop_assert!(msg.contains(&format!("{}: data has {tail} bytes", p.display())), "{}", msg);
        }
    }
}
