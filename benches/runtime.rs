//! Runtime overheads: element-wise bandwidth, eager dispatch per op (through the runtime
//! vs the kernel alone), and pool allocation vs the system allocator.
//!
//! `cargo bench --bench runtime`

use backend_cpu::kernels::common::{Ctx, In, Out};
use divan::{Bencher, black_box, counter::BytesCount};
use npurt::{DType, Op, PoolConfig, RuntimeConfig};

fn main() {
    divan::main();
}

fn rt() -> npurt::Runtime {
    npurt::Runtime::with_config(RuntimeConfig::default()).unwrap()
}

/// Add of two f32 vectors: bytes moved = 3 x 4 x n.
#[divan::bench(args = [1 << 12, 1 << 16, 1 << 20, 1 << 24], sample_count = 20)]
fn elementwise_add(bencher: Bencher, n: usize) {
    let rt = rt();
    let a = rt.zeros(DType::F32, [n], 0).unwrap();
    let b = rt.zeros(DType::F32, [n], 0).unwrap();
    let c = rt.empty(DType::F32, [n], 0).unwrap();
    bencher.counter(BytesCount::new(12 * n)).bench_local(|| rt.execute(&Op::Add, &[&a, &b], &[&c]).unwrap());
}

/// A tiny op through the whole eager path (validation, selection, launch, report).
#[divan::bench(sample_count = 50, sample_size = 2000)]
fn dispatch_through_runtime(bencher: Bencher) {
    let rt = rt();
    let x = rt.zeros(DType::F32, [16], 0).unwrap();
    let y = rt.empty(DType::F32, [16], 0).unwrap();
    bencher.bench_local(|| rt.execute(&Op::Relu, &[&x], &[&y]).unwrap());
}

/// The same kernel called directly: subtract from the above for the dispatch overhead.
#[divan::bench(sample_count = 50, sample_size = 2000)]
fn kernel_alone(bencher: Bencher) {
    let x = vec![0f32; 16];
    let mut y = vec![0f32; 16];
    let ctx = Ctx { threads: 1, features: backend_cpu::features::get(), prepacked: None };
    let dims = [16usize];
    let strides = [1usize];
    bencher.bench_local(|| {
        let ins = [In { dtype: DType::F32, dims: &dims, strides: &strides, bytes: bytemuck::cast_slice(&x) }];
        let mut outs = [Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut y) }];
        backend_cpu::kernels::fast::run(black_box(&Op::Relu), &ins, &mut outs, &ctx).unwrap();
    });
}

/// Nodes of the tiny-op graph below.
const GRAPH_NODES: usize = 64;

/// A compiled graph of 64 tiny ReLU/Scale nodes on [16] run once per iteration: divide the
/// time by 64 for the per-node cost of compiled execution (kernel included).
#[divan::bench(sample_count = 30, sample_size = 50)]
fn graph_of_64_tiny_nodes(bencher: Bencher) {
    use runtime::graph::{CompileOptions, CompiledGraph, Graph};
    let rt = rt();
    let mut g = Graph::new();
    let mut v = g.input("x", DType::F32, [16]);
    for i in 0..GRAPH_NODES {
        let op = if i % 2 == 0 { Op::Relu } else { Op::Scale { factor: 0.5 } };
        v = g.op(&format!("n{i}"), op, &[v]).unwrap();
    }
    g.output(v);
    let cg = CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0)).unwrap();
    let x = rt.zeros(DType::F32, [16], 0).unwrap();
    bencher.bench_local(|| cg.run(&[&x]).unwrap());
}

const SIZES: [usize; 3] = [4 << 10, 256 << 10, 4 << 20];

/// Pool alloc + free of one block (served from the cache after the first).
#[divan::bench(args = SIZES, sample_count = 30, sample_size = 1000)]
fn pool_alloc_free(bencher: Bencher, bytes: usize) {
    let backend = npurt::cpu_backend(&RuntimeConfig::default()).unwrap();
    let pool = runtime::Pool::new(backend.clone(), 0, PoolConfig::default(), true).unwrap();
    let s = backend.default_stream(0);
    bencher.bench_local(|| {
        let b = pool.alloc(black_box(bytes), s).unwrap();
        pool.free(b, Vec::new()).unwrap();
    });
}

/// 64-byte-aligned chunk, so the system allocator is asked for the pool's alignment.
#[repr(align(64))]
#[derive(Clone, Copy)]
#[allow(dead_code)]
struct Chunk([u8; 64]);

/// The system allocator with the same alignment, for comparison.
#[divan::bench(args = SIZES, sample_count = 30, sample_size = 1000)]
fn system_alloc_free(bencher: Bencher, bytes: usize) {
    bencher.bench_local(|| {
        let v: Vec<Chunk> = Vec::with_capacity(black_box(bytes) / 64);
        black_box(v.as_ptr());
        drop(v);
    });
}

/// The element-wise tail of a BERT-base s128 layer, one kernel call on one thread (no
/// pool around it, so the kernels run serially): `BiasGelu` on the FFN's `[128, 3072]`,
/// `AddLayerNorm` on `[128, 768]`, and the head split `Permute` `[1, 128, 12, 64]` →
/// `[1, 12, 128, 64]`; MiniLM-L6's tokens-first Attention at s32 and s128 (12 heads of 32,
/// float mask) and BERT-Large's at s512 (16 heads of 64: four blocks of query rows per
/// head). Bytes counted: every operand read and written once.
#[divan::bench(
    args = ["biasgelu", "addlayernorm", "permute", "attention-s32", "attention-s128", "attention-large-s512"],
    sample_count = 30,
    sample_size = 20
)]
fn bert_tail_kernel(bencher: Bencher, which: &str) {
    let ctx = Ctx { threads: 1, features: backend_cpu::features::get(), prepacked: None };
    let fill = |n: usize| (0..n).map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0).collect::<Vec<f32>>();
    let (op, dims, out_dims): (Op, Vec<Vec<usize>>, Vec<usize>) = match which {
        "biasgelu" => (Op::BiasGelu(npurt::GeluApprox::Erf), vec![vec![128, 3072], vec![3072]], vec![128, 3072]),
        "addlayernorm" => (
            Op::AddLayerNorm { eps: 1e-12 },
            vec![vec![128, 768], vec![128, 768], vec![768], vec![768]],
            vec![128, 768],
        ),
        "permute" => (Op::Permute { perm: vec![0, 2, 1, 3] }, vec![vec![1, 128, 12, 64]], vec![1, 12, 128, 64]),
        _ => {
            let (s, h, d) = match which {
                "attention-s32" => (32, 12, 32),
                "attention-s128" => (128, 12, 32),
                _ => (512, 16, 64),
            };
            let qkv = vec![1, s, h, d];
            let op = Op::Attention { scale: None, layout: npurt::AttentionLayout::Bsnd, causal: false };
            (op, vec![qkv.clone(), qkv.clone(), qkv.clone(), vec![1, 1, 1, s]], qkv)
        }
    };
    let data: Vec<Vec<f32>> = dims.iter().map(|d| fill(d.iter().product())).collect();
    let strides: Vec<Vec<usize>> = dims.iter().map(|d| npurt::Shape::new(d.clone()).contiguous_strides()).collect();
    let mut y = vec![0f32; out_dims.iter().product()];
    let bytes = 4 * (data.iter().map(Vec::len).sum::<usize>() + y.len());
    bencher.counter(BytesCount::new(bytes)).bench_local(|| {
        let ins: Vec<In> = (0..data.len())
            .map(|j| In {
                dtype: DType::F32,
                dims: &dims[j],
                strides: &strides[j],
                bytes: bytemuck::cast_slice(&data[j]),
            })
            .collect();
        let mut outs = [Out { dtype: DType::F32, dims: &out_dims, bytes: bytemuck::cast_slice_mut(&mut y) }];
        backend_cpu::kernels::fast::run(black_box(&op), &ins, &mut outs, &ctx).unwrap();
    });
}
