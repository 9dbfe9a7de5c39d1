//! No silent slowdowns: compiling a graph in a precision the CPU backend cannot run
//! natively logs exactly one warning naming the missing feature, and the weights take the
//! fastest correct path (f32 for bf16 without AVX-512-BF16); where it is native, nothing is
//! logged and the weights are converted.

mod common;

use backend_cpu::Isa;
use runtime::graph::{Graph, HostTensor};
use runtime::{DType, Op, Precision};

/// Two Linears with constant f32 weights.
fn graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [8, 64]);
    let w1 = g.constant("w1", HostTensor::from_vec([64, 64], vec![0.01f32; 64 * 64]).unwrap());
    let w2 = g.constant("w2", HostTensor::from_vec([32, 64], vec![0.02f32; 32 * 64]).unwrap());
    let h = g.op("fc1", Op::Linear, &[x, w1]).unwrap();
    let y = g.op("fc2", Op::Linear, &[h, w2]).unwrap();
    g.output(y);
    g
}

/// The warnings compiling [`graph`] in `precision` on the backend forced to `isa` logs, and
/// how many Linear weights end up in `dtype`.
fn compile(isa: Isa, precision: Precision, dtype: DType) -> Option<(Vec<String>, usize)> {
    let c = common::compile(isa, None, precision, &graph())?;
    let g = c.cg.graph();
    let converted = g.nodes.iter().filter(|n| matches!(n.op, Op::Linear) && g.meta(n.inputs[1]).dtype == dtype).count();
    Some((c.warned, converted))
}

#[test]
fn a_precision_the_cpu_cannot_run_natively_warns_once_naming_the_feature() {
    let cpu = backend_cpu::features::get();
    for isa in Isa::ALL {
        let Some((warned, converted)) = compile(isa, Precision::Bf16, DType::BF16) else {
            println!("SKIP {isa}: this CPU cannot run it");
            continue;
        };
        let native = isa == Isa::Avx512 && cpu.avx512bf16;
        println!("{isa}: bf16 native: {native}; warnings: {warned:?}");
        if native {
            assert!(warned.is_empty(), "{isa}: {warned:?}");
            assert_eq!(converted, 2, "{isa}: bf16 weights");
        } else {
            assert_eq!(warned.len(), 1, "{isa}: {warned:?}");
            assert!(warned[0].contains("AVX-512-BF16") && warned[0].contains("stay f32"), "{}", warned[0]);
            assert_eq!(converted, 0, "{isa}: weights stay f32");
        }
        // f32 never warns; f16 warns exactly where the CPU lacks F16C.
        let (w32, _) = compile(isa, Precision::F32, DType::F32).unwrap();
        assert!(w32.is_empty(), "{w32:?}");
        let (w16, converted16) = compile(isa, Precision::F16, DType::F16).unwrap();
        assert_eq!(converted16, 2, "fp16 weights are stored in fp16 on every path");
        if cpu.f16c {
            assert!(w16.is_empty(), "{w16:?}");
        } else {
            assert!(w16.len() == 1 && w16[0].contains("F16C"), "{w16:?}");
        }
    }
}
