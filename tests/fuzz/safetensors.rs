//! The safetensors loader (`npurt::models::safetensors`): random valid files (written
//! here by hand, or by the `safetensors` crate) round trip through `parse` and through the
//! memory-mapped `SafetensorsFile`; mutated headers, header lengths and truncated files
//! give typed errors, never a panic or an allocation sized from the header.

use crate::alloc::largest_allocation;
use crate::files::TempDir;
use npurt::DType;
use npurt::models::safetensors::{self as st, SafetensorsError, SafetensorsFile};
use proptest::prelude::*;
use runtime::graph::HostTensor;
use serde_json::{Value, json};
use std::collections::HashMap;

/// A stored dtype: its name in the header, its element size, and what it loads as.
#[derive(Clone, Copy, Debug)]
struct Stored {
    name: &'static str,
    size: usize,
    loads_as: Option<DType>,
}

const STORED: &[Stored] = &[
    Stored { name: "F32", size: 4, loads_as: Some(DType::F32) },
    Stored { name: "F64", size: 8, loads_as: Some(DType::F32) },
    Stored { name: "F16", size: 2, loads_as: Some(DType::F16) },
    Stored { name: "BF16", size: 2, loads_as: Some(DType::BF16) },
    Stored { name: "I64", size: 8, loads_as: Some(DType::I64) },
    Stored { name: "I32", size: 4, loads_as: Some(DType::I32) },
    Stored { name: "U8", size: 1, loads_as: Some(DType::U8) },
    Stored { name: "BOOL", size: 1, loads_as: Some(DType::U8) },
    Stored { name: "I8", size: 1, loads_as: None },
    Stored { name: "U16", size: 2, loads_as: None },
    Stored { name: "U64", size: 8, loads_as: None },
];

#[derive(Clone, Debug)]
struct Tensor {
    name: String,
    dtype: Stored,
    shape: Vec<usize>,
    data: Vec<u8>,
}

prop_compose! {
    fn tensor()(
        name in "[a-z][a-z0-9_.]{0,12}",
        d in 0..STORED.len(),
        shape in prop::collection::vec(0usize..=5, 0..=4),
    )
        (data in prop::collection::vec(any::<u8>(), shape.iter().product::<usize>() * STORED[d].size),
         name in Just(name), d in Just(d), shape in Just(shape)) -> Tensor {
        Tensor { name, dtype: STORED[d], shape, data }
    }
}

/// Up to six tensors with distinct names.
fn tensors() -> impl Strategy<Value = Vec<Tensor>> {
    prop::collection::vec(tensor(), 0..=6).prop_map(|mut v| {
        let mut seen = std::collections::HashSet::new();
        v.retain(|t| seen.insert(t.name.clone()));
        v
    })
}

/// The header of `ts`, laid out contiguously in order, with optional `__metadata__`.
fn header(ts: &[Tensor], metadata: bool) -> serde_json::Map<String, Value> {
    let mut h = serde_json::Map::new();
    if metadata {
        h.insert("__metadata__".into(), json!({"format": "pt"}));
    }
    let mut at = 0;
    for t in ts {
        h.insert(
            t.name.clone(),
            json!({"dtype": t.dtype.name, "shape": t.shape, "data_offsets": [at, at + t.data.len()]}),
        );
        at += t.data.len();
    }
    h
}

/// A file of a JSON header (padded with `pad` spaces) and the tensors' data.
fn file(header: &str, pad: usize, ts: &[Tensor]) -> Vec<u8> {
    let h = format!("{header}{}", " ".repeat(pad));
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(h.as_bytes());
    for t in ts {
        f.extend_from_slice(&t.data);
    }
    f
}

/// What `t` must load as.
fn expected(t: &Tensor) -> Option<(DType, Vec<u8>)> {
    let dtype = t.dtype.loads_as?;
    let bytes = if t.dtype.name == "F64" {
        t.data.chunks_exact(8).flat_map(|c| (f64::from_le_bytes(c.try_into().unwrap()) as f32).to_le_bytes()).collect()
    } else {
        t.data.clone()
    };
    Some((dtype, bytes))
}

/// A loaded tensor is consistent: a representable shape and exactly its bytes.
fn check_loaded(name: &str, t: &HostTensor) {
    let dims = t.shape.dims();
    let need = runtime::size::bytes(name, dims, t.dtype)
        .unwrap_or_else(|e| panic!("tensor {name}: an accepted shape is not representable: {e}"));
    assert_eq!(t.bytes.len(), need, "tensor {name}: {} {:?}", t.dtype, t.shape);
}

/// `st::parse` of `bytes`: the tensors, checked, or the error, checked to be the loader's
/// `Io` error naming the input; the allocation bound holds either way.
fn parse_checked(bytes: &[u8]) -> Result<HashMap<String, HostTensor>, String> {
    let (r, largest) = largest_allocation(|| st::parse(bytes, "fuzz.safetensors"));
    // A copy of the data, the parsed header (serde_json's values and the crate's maps are
    // a small multiple of its text) and an error message.
    let bound = 8 * bytes.len() + (64 << 10);
    assert!(largest <= bound, "{largest} bytes allocated at once for a {}-byte file", bytes.len());
    match r {
        Ok(m) => {
            for (k, t) in &m {
                check_loaded(k, t);
            }
            Ok(m)
        }
        Err(e @ npurt::Error::Format { .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with("format: fuzz.safetensors: "), "{msg}");
            Err(msg)
        }
        Err(e) => panic!("an untyped error for a safetensors file: {e:?}"),
    }
}

/// `SafetensorsFile::open` of `bytes` written to a file, every tensor read; errors are
/// `SafetensorsError`s naming the path.
fn open_checked(bytes: &[u8]) -> Result<HashMap<String, HostTensor>, String> {
    let dir = TempDir::new("st");
    let p = dir.write("m.safetensors", bytes);
    let path = p.display().to_string();
    let r = SafetensorsFile::open(&p).and_then(|f| {
        assert_eq!(f.len(), f.names().len());
        for n in f.names() {
            assert!(f.contains(&n) && f.info(&n).is_some(), "{n}");
        }
        f.tensors()
    });
    match r {
        Ok(m) => {
            for (k, t) in &m {
                check_loaded(k, t);
            }
            Ok(m)
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{path}: ")), "{msg}");
            assert!(!matches!(e, SafetensorsError::Io { .. }), "an I/O error for a readable file: {e}");
            Err(msg)
        }
    }
}

/// The parse of a valid file of `ts`: every tensor as written, or the first unsupported
/// dtype named.
fn check_round_trip(f: &[u8], ts: &[Tensor]) -> Result<(), TestCaseError> {
    let unsupported = ts.iter().find(|t| t.dtype.loads_as.is_none());
    for got in [parse_checked(f), open_checked(f)] {
        match (got, unsupported) {
            (Ok(m), None) => {
                prop_assert_eq!(m.len(), ts.len());
                for t in ts {
                    let (dtype, bytes) = expected(t).unwrap();
                    let g = &m[&t.name];
                    prop_assert_eq!((g.dtype, g.shape.dims(), g.bytes.as_slice()), (dtype, &t.shape[..], &bytes[..]));
                }
            }
            (Err(msg), Some(_)) => prop_assert!(msg.contains("unsupported dtype"), "{}", msg),
            (got, u) => prop_assert!(false, "{:?} for unsupported {:?}", got.map(|m| m.len()), u.map(|t| &t.name)),
        }
    }
    Ok(())
}

/// Header values as a hostile file may hold them.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0u64..16).prop_map(Value::from),
        prop_oneof![Just(1u64 << 32), Just(1 << 62), Just(1 << 63), Just(u64::MAX)].prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[A-Z0-9_]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Dims for a shape: small, huge, or zero beside huge ones.
fn dim() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..6, 1 => Just(1u64 << 32), 1 => Just(1 << 62), 1 => Just(1 << 63), 1 => Just(u64::MAX)]
}

/// A change to one tensor's entry in the header.
#[derive(Clone, Debug)]
enum Edit {
    Shape(Vec<u64>),
    Offsets(u64, u64),
    Dtype(String),
    Field(String, Value),
    Remove(String),
    Replace(Value),
}

fn edit() -> impl Strategy<Value = Edit> {
    let field = prop_oneof![Just("dtype".to_string()), Just("shape".to_string()), Just("data_offsets".to_string())];
    prop_oneof![
        prop::collection::vec(dim(), 0..5).prop_map(Edit::Shape),
        (prop_oneof![0u64..64, any::<u64>()], prop_oneof![0u64..64, any::<u64>()])
            .prop_map(|(a, b)| Edit::Offsets(a, b)),
        prop_oneof![Just("F8_E4M3".to_string()), Just("f32".to_string()), "[A-Z0-9_]{0,6}"].prop_map(Edit::Dtype),
        (field.clone(), json_value()).prop_map(|(k, v)| Edit::Field(k, v)),
        field.prop_map(Edit::Remove),
        json_value().prop_map(Edit::Replace),
    ]
}

proptest! {
    #![proptest_config(crate::config(1000))]

    /// Random files written here (keys in any order, optional `__metadata__`, padding)
    /// load as written, through `parse` and through the memory map.
    #[test]
    fn safetensors_round_trips(ts in tensors(), metadata in any::<bool>(), pad in 0usize..9, reverse in any::<bool>()) {
        let mut h = header(&ts, metadata);
        if reverse {
            h = h.into_iter().rev().collect();
        }
        check_round_trip(&file(&Value::Object(h).to_string(), pad, &ts), &ts)?;
    }

    /// Files the `safetensors` crate writes load as written.
    #[test]
    fn safetensors_crate_files_round_trip(ts in tensors()) {
        let dtype = |n: &str| -> safetensors::Dtype { serde_json::from_value(json!(n)).unwrap() };
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = ts
            .iter()
            .map(|t| {
                let v = safetensors::tensor::TensorView::new(dtype(t.dtype.name), t.shape.clone(), &t.data).unwrap();
                (t.name.clone(), v)
            })
            .collect();
        let f = safetensors::serialize(views, None).unwrap();
        check_round_trip(&f, &ts)?;
    }

    /// One to three edits of tensors' header entries (shapes up to `u64::MAX`, offsets,
    /// dtypes, fields of any JSON type): the tensors, consistent, or a typed error.
    #[test]
    fn safetensors_mutated_headers_are_ok_or_typed_errors(
        ts in tensors(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), edit()), 1..4),
    ) {
        let mut h = header(&ts, false);
        let names: Vec<String> = h.keys().cloned().collect();
        for (i, e) in &edits {
            let name = if names.is_empty() { "t".to_string() } else { names[i.index(names.len())].clone() };
            let entry = h.entry(name).or_insert_with(|| json!({}));
            match (e, entry.as_object_mut()) {
                (Edit::Shape(s), Some(o)) => { o.insert("shape".into(), json!(s)); }
                (Edit::Offsets(a, b), Some(o)) => { o.insert("data_offsets".into(), json!([a, b])); }
                (Edit::Dtype(d), Some(o)) => { o.insert("dtype".into(), json!(d)); }
                (Edit::Field(k, v), Some(o)) => { o.insert(k.clone(), v.clone()); }
                (Edit::Remove(k), Some(o)) => { o.remove(k); }
                (_, _) => *entry = match e { Edit::Replace(v) => v.clone(), _ => json!(null) },
            }
        }
        let f = file(&Value::Object(h).to_string(), 0, &ts);
        let (a, b) = (parse_checked(&f), open_checked(&f));
        prop_assert_eq!(a.is_ok(), b.is_ok(), "parse and open disagree: {:?} / {:?}", a.err(), b.err());
    }

    /// A header length of any value, a file cut anywhere, or a few bytes changed: the
    /// tensors, consistent, or a typed error.
    #[test]
    fn safetensors_framing_and_bytes_are_ok_or_typed_errors(
        ts in tensors(),
        len in prop_oneof![Just(None), (0u64..512).prop_map(Some), any::<u64>().prop_map(Some)],
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut f = file(&Value::Object(header(&ts, true)).to_string(), 0, &ts);
        if let Some(n) = len {
            f[..8].copy_from_slice(&n.to_le_bytes());
        }
        for (at, b) in &flips {
            let i = at.index(f.len());
            f[i] = *b;
        }
        if do_cut {
            f.truncate(cut.index(f.len() + 1));
        }
        let (a, b) = (parse_checked(&f), open_checked(&f));
        prop_assert_eq!(a.is_ok(), b.is_ok(), "parse and open disagree: {:?} / {:?}", a.err(), b.err());
    }
}

/// Shapes with a zero dim beside huge ones hold no element but are not representable:
/// the loader refuses them as the npy parser and the runtime do.
#[test]
fn safetensors_zero_sized_shapes_beside_huge_dims_are_refused() {
    for shape in [json!([1u64 << 62, 0, 1u64 << 62]), json!([0, u64::MAX, u64::MAX])] {
        let h = json!({"z": {"dtype": "U8", "shape": shape, "data_offsets": [0, 0]}}).to_string();
        let f = file(&h, 0, &[]);
        assert!(parse_checked(&f).is_err(), "{shape} accepted");
        assert!(open_checked(&f).is_err(), "{shape} accepted");
    }
}
