//! Op validation and shape inference (`Op::infer`, `Runtime::select_kernel`,
//! `op_from_attrs`) on arbitrary ops, attributes, dtypes and shapes (rank 0 to 6, dims 0
//! to `usize::MAX`): `Ok` with representable outputs, or `Error::Invalid` naming the op.
//! When inference accepts small operands, running the op on the CPU backend (contiguous
//! or strided inputs, ordinary or extreme values) gives outputs of the inferred metas or a
//! typed error.

use npurt::runtime_op::op_from_attrs;
use npurt::{DType, Error, GeluApprox, Op, OpKind, Tensor, TensorMeta, bf16, f16};
use proptest::prelude::*;

pub fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

/// A dim: mostly small, sometimes at the edges of u32 / usize.
fn dim(huge: bool) -> BoxedStrategy<usize> {
    if huge {
        prop_oneof![
            8 => 0usize..=4,
            2 => 5usize..=17,
            1 => prop::sample::select(vec![
                1 << 31, 1 << 32, (1 << 32) + 1, 1 << 62, (1 << 62) + 1, 1 << 63, usize::MAX,
            ]),
        ]
        .boxed()
    } else {
        (0usize..=4).boxed()
    }
}

fn float_attr() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => prop::sample::select(vec![1.0f32, 0.0, -1.0, 0.5, 1e-5, 2.0]),
        1 => prop::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e-30, f32::MAX]),
    ]
}

fn axis() -> impl Strategy<Value = isize> + Clone {
    prop_oneof![8 => -7isize..7, 1 => prop::sample::select(vec![isize::MIN, isize::MAX, 1 << 40])]
}

fn approx() -> impl Strategy<Value = GeluApprox> {
    prop_oneof![Just(GeluApprox::Erf), Just(GeluApprox::Tanh)]
}

/// Any op, with attributes valid or not.
pub fn op() -> impl Strategy<Value = Op> {
    let perm = prop_oneof![
        3 => (0usize..=6).prop_flat_map(|r| Just((0..r).collect::<Vec<_>>()).prop_shuffle()),
        1 => prop::collection::vec(prop_oneof![0usize..7, Just(usize::MAX)], 0..7),
    ];
    let reshape_dim = prop_oneof![
        6 => 0isize..9,
        2 => Just(-1isize),
        1 => prop::sample::select(vec![-2isize, isize::MIN, isize::MAX, 1 << 32, 1 << 62]),
    ];
    let reshape = prop::collection::vec(reshape_dim, 0..6);
    let axes = prop::collection::vec(axis(), 0..4);
    prop_oneof![
        (any::<bool>(), any::<bool>()).prop_map(|(trans_a, trans_b)| Op::MatMul { trans_a, trans_b }),
        (any::<bool>(), any::<bool>(), float_attr(), float_attr())
            .prop_map(|(trans_a, trans_b, alpha, beta)| Op::Gemm { trans_a, trans_b, alpha, beta }),
        Just(Op::Linear),
        Just(Op::Add),
        Just(Op::Sub),
        Just(Op::Mul),
        Just(Op::Div),
        Just(Op::Pow),
        Just(Op::Equal),
        Just(Op::Where),
        axis().prop_map(|axis| Op::Concat { axis }),
        (
            prop::collection::vec(any::<i64>(), 0..4),
            prop::collection::vec(prop_oneof![-9i64..9, any::<i64>()], 0..4),
            prop::collection::vec(axis(), 0..4),
            prop::collection::vec(prop_oneof![-3i64..4, any::<i64>()], 0..4),
        )
            .prop_map(|(starts, ends, axes, steps)| Op::Slice { starts, ends, axes, steps }),
        prop::collection::vec(prop_oneof![0usize..5, Just(usize::MAX)], 0..5).prop_map(|shape| Op::Expand { shape }),
        Just(Op::Relu),
        approx().prop_map(Op::Gelu),
        Just(Op::Tanh),
        Just(Op::Erf),
        Just(Op::Exp),
        Just(Op::Sqrt),
        Just(Op::Neg),
        Just(Op::Sigmoid),
        axis().prop_map(|axis| Op::Softmax { axis }),
        float_attr().prop_map(|eps| Op::LayerNorm { eps: eps.abs() * 1e-5 }),
        float_attr().prop_map(|eps| Op::LayerNorm { eps }),
        perm.prop_map(|perm| Op::Permute { perm }),
        reshape.prop_map(|shape| Op::Reshape { shape }),
        prop_oneof![0usize..5, Just(usize::MAX)].prop_map(|axis| Op::Gather { axis }),
        dtype().prop_map(|to| Op::Cast { to }),
        (axes.clone(), any::<bool>()).prop_map(|(axes, keepdims)| Op::ReduceSum { axes, keepdims }),
        (axes, any::<bool>()).prop_map(|(axes, keepdims)| Op::ReduceMean { axes, keepdims }),
        float_attr().prop_map(|factor| Op::Scale { factor }),
        Just(Op::Copy),
        (prop::option::of(float_attr()), prop::bool::ANY, prop::bool::ANY).prop_map(|(scale, bsnd, causal)| {
            Op::Attention {
                scale,
                layout: if bsnd { npurt::AttentionLayout::Bsnd } else { npurt::AttentionLayout::Bnsd },
                causal,
            }
        }),
        (prop::bool::ANY, prop::bool::ANY).prop_map(|(interleaved, bsnd)| Op::Rope {
            interleaved,
            layout: if bsnd { npurt::AttentionLayout::Bsnd } else { npurt::AttentionLayout::Bnsd },
        }),
        approx().prop_map(Op::BiasGelu),
        float_attr().prop_map(|eps| Op::AddLayerNorm { eps: eps.abs() * 1e-5 }),
        Just(Op::Silu),
        float_attr().prop_map(|eps| Op::RmsNorm { eps: eps.abs() * 1e-5 }),
        float_attr().prop_map(|eps| Op::RmsNorm { eps }),
        float_attr().prop_map(|eps| Op::AddRmsNorm { eps: eps.abs() * 1e-5 }),
        Just(Op::SwiGlu),
        Just(Op::KvCacheWrite),
        prop::option::of(float_attr()).prop_map(|scale| Op::PagedAttention { scale }),
    ]
}

/// How an operand's shape relates to the first operand's, so that many cases get past
/// the first checks.
#[derive(Clone, Debug)]
enum Derive {
    Same,
    /// The last `n` dims.
    Suffix(usize),
    /// The last two dims swapped.
    SwapLast,
    /// Dims at these positions (mod rank) set to 1.
    Ones(Vec<usize>),
    /// Unrelated.
    Own(Vec<usize>),
}

fn derive(huge: bool) -> impl Strategy<Value = Derive> {
    prop_oneof![
        4 => Just(Derive::Same),
        3 => (0usize..4).prop_map(Derive::Suffix),
        1 => Just(Derive::SwapLast),
        1 => prop::collection::vec(0usize..6, 1..3).prop_map(Derive::Ones),
        2 => prop::collection::vec(dim(huge), 0..=6).prop_map(Derive::Own),
    ]
}

fn shape_of(base: &[usize], d: &Derive) -> Vec<usize> {
    let r = base.len();
    match d {
        Derive::Same => base.to_vec(),
        Derive::Suffix(n) => base[r - (*n).min(r)..].to_vec(),
        Derive::SwapLast if r >= 2 => {
            let mut s = base.to_vec();
            s.swap(r - 2, r - 1);
            s
        }
        Derive::SwapLast => base.to_vec(),
        Derive::Ones(at) => {
            let mut s = base.to_vec();
            for &i in at {
                if r > 0 {
                    s[i % r] = 1;
                }
            }
            s
        }
        Derive::Own(s) => s.clone(),
    }
}

/// An op and its operands' metas: the number of operands within the op's arity most of
/// the time, their dtypes mostly the first one's.
pub fn case(huge: bool) -> impl Strategy<Value = (Op, Vec<TensorMeta>)> {
    let base = prop::collection::vec(dim(huge), 0..=6);
    let operand = (derive(huge), prop_oneof![6 => Just(None), 1 => dtype().prop_map(Some)]);
    (op(), base, dtype(), prop::collection::vec(operand, 6), 0usize..8).prop_map(|(op, base, d0, ops, pick)| {
        let (lo, hi) = op.arity();
        // 0..=hi-lo extra operands past the minimum, or (rarely) a wrong count.
        let n = if pick == 7 { (pick + lo) % 6 } else { lo + pick % (hi - lo + 1) }.min(ops.len());
        let metas = ops[..n]
            .iter()
            .enumerate()
            .map(|(i, (d, dt))| {
                let shape = if i == 0 { base.clone() } else { shape_of(&base, d) };
                // Gather's indices are integers; the others follow the first operand.
                let dt = match (&op, i, dt) {
                    (_, _, Some(t)) => *t,
                    (Op::Gather { .. }, 1, None) => DType::I64,
                    _ => d0,
                };
                TensorMeta::new(dt, shape)
            })
            .collect();
        (op, metas)
    })
}

/// Infers and checks the answer; returns the outputs when accepted.
pub fn infer_checked(op: &Op, metas: &[TensorMeta]) -> Option<Vec<TensorMeta>> {
    match op.infer(metas) {
        Ok(outs) => {
            assert!(!outs.is_empty(), "{op:?} has no output");
            for o in &outs {
                runtime::size::bytes("output", o.shape.dims(), o.dtype)
                    .unwrap_or_else(|e| panic!("{op:?} on {metas:?} gave an unrepresentable output: {e}"));
            }
            // Costs saturate, never overflow.
            let _ = (op.flops(metas, &outs), op.bytes(metas, &outs));
            Some(outs)
        }
        Err(Error::Invalid { op: name, msg, .. }) => {
            assert_eq!(name, op.name(), "{msg}");
            assert!(!msg.is_empty());
            None
        }
        Err(e) => panic!("{op:?} on {metas:?}: an error of the wrong kind: {e:?}"),
    }
}

/// A value pattern for the elements of an operand.
#[derive(Clone, Copy, Debug)]
pub enum Fill {
    /// Small values (indices in range for a gather of a small table).
    Small(u64),
    /// Extremes too: ±inf, NaN, f32::MAX, integer MIN / MAX, negative indices.
    Extreme(u64),
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![4 => any::<u64>().prop_map(Fill::Small), 1 => any::<u64>().prop_map(Fill::Extreme)]
}

/// The `i`-th value of the pattern, as f64.
fn value(f: Fill, i: usize) -> f64 {
    const SMALL: [f64; 8] = [0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 2.0];
    const EXTREME: [f64; 8] = [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 3e38, -3e38, -0.0, 1e-40, -7.0];
    let (seed, table) = match f {
        Fill::Small(s) => (s, &SMALL),
        Fill::Extreme(s) => (s, if (s >> (i % 61)) & 1 == 1 { &EXTREME } else { &SMALL }),
    };
    let h = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59;
    table[h as usize % 8]
}

/// A tensor of `meta` on the CPU filled by `f`; strided (a transposed view) when `strided`
/// and the rank allows.
pub fn tensor(rt: &runtime::Runtime, meta: &TensorMeta, f: Fill, strided: bool) -> Tensor {
    let dims = meta.shape.dims();
    let r = dims.len();
    let transposed = strided && r >= 2;
    let mut alloc = dims.to_vec();
    if transposed {
        alloc.swap(r - 2, r - 1);
    }
    let n: usize = alloc.iter().product();
    let int = |i: usize| -> i64 {
        let v = value(f, i);
        match (f, v) {
            (Fill::Extreme(_), x) if x.is_infinite() => {
                if x > 0.0 {
                    i64::MAX
                } else {
                    i64::MIN
                }
            }
            (Fill::Extreme(_), x) if x.is_nan() => -1,
            (_, x) => x.abs() as i64 % 3,
        }
    };
    let t = match meta.dtype {
        DType::F32 => rt.from_slice(&(0..n).map(|i| value(f, i) as f32).collect::<Vec<_>>(), alloc, 0),
        DType::F16 => rt.from_slice(&(0..n).map(|i| f16::from_f64(value(f, i))).collect::<Vec<_>>(), alloc, 0),
        DType::BF16 => rt.from_slice(&(0..n).map(|i| bf16::from_f64(value(f, i))).collect::<Vec<_>>(), alloc, 0),
        DType::I32 => rt.from_slice(
            &(0..n).map(|i| int(i).clamp(i32::MIN as i64, i32::MAX as i64) as i32).collect::<Vec<_>>(),
            alloc,
            0,
        ),
        DType::I64 => rt.from_slice(&(0..n).map(int).collect::<Vec<_>>(), alloc, 0),
        DType::U8 => rt.from_slice(&(0..n).map(|i| int(i) as u8).collect::<Vec<_>>(), alloc, 0),
    }
    .expect("a small tensor");
    if transposed { t.transpose(r - 2, r - 1).expect("a transposed view") } else { t }
}

/// Reads every element back (as the host would), so that a wrong layout or size shows.
pub fn read_back(t: &Tensor) {
    let n = t.numel();
    let got = match t.dtype() {
        DType::F32 => t.to_ndarray::<f32>().map(|a| a.len()),
        DType::F16 => t.to_ndarray::<f16>().map(|a| a.len()),
        DType::BF16 => t.to_ndarray::<bf16>().map(|a| a.len()),
        DType::I32 => t.to_ndarray::<i32>().map(|a| a.len()),
        DType::I64 => t.to_ndarray::<i64>().map(|a| a.len()),
        DType::U8 => t.to_ndarray::<u8>().map(|a| a.len()),
    };
    assert_eq!(got.expect("an output reads back"), n);
}

/// Elements of the largest operand or output a case may run with.
const RUN_LIMIT: usize = 4096;

fn small(ms: &[TensorMeta]) -> bool {
    ms.iter().all(|m| m.shape.dims().iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_some_and(|n| n <= RUN_LIMIT))
}

/// Attribute keys and values as the CLI passes them.
fn attrs() -> impl Strategy<Value = Vec<(String, String)>> {
    let key = prop_oneof![
        6 => prop::sample::select(vec![
            "trans_a", "trans_b", "alpha", "beta", "approx", "axis", "eps", "perm", "shape", "to", "axes",
            "keepdims", "factor", "scale",
        ]).prop_map(str::to_string),
        1 => "[a-z_]{1,8}",
    ];
    let value = prop_oneof![
        6 => prop::sample::select(vec![
            "0", "1", "-1", "2", "true", "false", "erf", "tanh", "f16", "i64", "bf16", "1,0", "0,1,2", "2,-1",
            "-1,-1", "", ",", "nan", "inf", "-inf", "1e-5", "1e40", "9223372036854775807",
            "9223372036854775808", "-9223372036854775808", "18446744073709551615", "0,0", " 1 , 2 ",
        ]).prop_map(str::to_string),
        1 => "[-0-9a-z,. ]{0,12}",
    ];
    prop::collection::vec((key, value), 0..4)
}

proptest! {
    #![proptest_config(crate::config(1000))]

    /// Inference on arbitrary ops and operands (dims up to `usize::MAX`): representable
    /// outputs or `Invalid` naming the op; kernel selection answers either way.
    #[test]
    fn op_inference_is_ok_or_invalid((op, metas) in case(true)) {
        let outs = infer_checked(&op, &metas);
        let rt = crate::runtime();
        match rt.select_kernel(&op, &metas) {
            Ok(k) => prop_assert!(outs.is_some(), "a kernel {k:?} for a call inference refused"),
            Err(Error::Invalid { .. }) => prop_assert!(outs.is_none()),
            Err(e) => prop_assert!(matches!(e, Error::NoKernel { .. } | Error::Unsupported(_)), "{e:?}"),
        }
    }

    /// `op_from_attrs` on any kind and attribute strings: an op or `Invalid`; the op
    /// built then infers without panicking.
    #[test]
    fn op_attributes_parse_to_ops_or_invalid(
        kind in prop::sample::select(OpKind::ALL.to_vec()),
        attrs in attrs(),
        rank in 0usize..5,
        (_, metas) in case(false),
    ) {
        match op_from_attrs(kind, &attrs, rank) {
            Ok(op) => {
                prop_assert_eq!(op.kind(), kind);
                infer_checked(&op, &metas);
            }
            Err(Error::Invalid { op, .. }) => prop_assert_eq!(op, kind.name()),
            Err(e) => prop_assert!(false, "{:?}", e),
        }
    }
}

/// Calls inference accepts, on operands of at most 4096 elements, run on the CPU: the
/// outputs have the inferred dtypes and shapes and read back, or the error is typed.
#[test]
fn accepted_small_ops_run_or_fail_typed() {
    // A runtime of its own: `synchronize` below would otherwise also report (and take)
    // failures of other tests' streams (see `graph::STOLEN_ERRORS`).
    let rt = &crate::cpu_runtime();
    let counts = crate::Counts::default();
    let strategy = (case(false), prop::collection::vec(fill(), 6), prop::collection::vec(any::<bool>(), 6));
    let n = crate::run_cases("small_ops", 1000, strategy, &counts, |((op, metas), fills, strided)| {
        let Some(outs) = infer_checked(&op, &metas) else { return Ok(()) };
        if !small(&metas) || !small(&outs) {
            return Ok(());
        }
        let ins: Vec<Tensor> = metas.iter().enumerate().map(|(i, m)| tensor(rt, m, fills[i], strided[i])).collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        prop_assert_eq!(&rt.infer(&op, &refs).unwrap(), &outs, "Runtime::infer and Op::infer differ");
        match rt.run(&op, &refs) {
            Ok(got) => {
                counts.add("ran");
                prop_assert_eq!(got.len(), outs.len());
                for (g, want) in got.iter().zip(&outs) {
                    prop_assert_eq!(&g.meta(), want);
                    read_back(g);
                }
            }
            // An index out of range fails in the kernel, reported by the backend.
            Err(e) => {
                counts.add("failed typed");
                prop_assert!(
                    matches!(
                        e,
                        Error::Invalid { .. }
                            | Error::NoKernel { .. }
                            | Error::Unsupported(_)
                            | Error::Backend { .. }
                            | Error::Async { .. }
                    ),
                    "{:?} on {:?}: {:?}",
                    op,
                    metas,
                    e
                );
            }
        }
        rt.synchronize(0).unwrap();
        Ok(())
    });
    assert!(counts.get("ran") * 5 >= n, "too few accepted calls ran");
}
