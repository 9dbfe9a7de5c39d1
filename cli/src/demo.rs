//! `npurt demo`: the whole walkthrough on the chosen backend, with measured values.

use npurt::ndarray::{ArrayD, IxDyn};
use npurt::{BlockKind, DType, ExecReport, Op, Result, Runtime, Stream, Task, Tensor};
use std::time::{Duration, Instant};

fn mib(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Deterministic pseudo-random values in [-1, 1).
fn random(shape: &[usize], seed: u64) -> ArrayD<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap_or_else(|_| ArrayD::zeros(IxDyn(shape)))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn section(title: &str) {
    println!("\n== {title}");
}

/// The three 1024-square MatMul operands of section 1, kept for the later sections.
struct MatMulOperands {
    a: Tensor,
    b: Tensor,
    c: Tensor,
}

pub fn run(rt: &Runtime) -> Result<()> {
    println!("npurt demo on backend {} ({} device(s))", rt.backend_name(), rt.device_count());
    let mm = Op::MatMul { trans_a: false, trans_b: false };

    let (ops, r) = matmul_1024(rt, &mm)?;
    pool_reuse(rt)?;
    alignment(rt, &ops);
    // The tensors each section leaves allocated stay alive to the end, so that the memory
    // figures of sections 8 and 9 count them.
    let _streams = two_streams(rt, &mm)?;
    let _units = hardware_units(rt, &r)?;

    section("6. Utilisation per unit");
    for u in rt.utilisation() {
        println!("{u}");
    }

    let _mismatched = validation(rt, &mm, &ops.a)?;
    memory_info(rt)?;
    allocation_paths(rt)?;
    let _submitted = submission(rt)?;
    let host = copy_back(&ops)?;
    zero_copy(rt, &ops.c, &host)?;
    println!("\ndemo finished");
    Ok(())
}

/// Section 1: one timed 1024-cube MatMul after a warm-up.
fn matmul_1024(rt: &Runtime, mm: &Op) -> Result<(MatMulOperands, ExecReport)> {
    section("1. MatMul 1024 x 1024 x 1024");
    let a = rt.from_ndarray(&random(&[1024, 1024], 1), 0)?;
    let b = rt.from_ndarray(&random(&[1024, 1024], 2), 0)?;
    let c = rt.empty(DType::F32, [1024, 1024], 0)?;
    rt.execute(mm, &[&a, &b], &[&c])?; // warm-up
    let r = rt.execute(mm, &[&a, &b], &[&c])?;
    println!("implementation: {} (tier {})", r.implementation, r.tier);
    println!("device: {}, unit: {}", r.device, r.unit);
    println!("time: {:.3} ms, {:.1} GFLOP/s", ms(r.elapsed.unwrap_or_default()), r.gflops().unwrap_or(0.0));
    Ok((MatMulOperands { a, b, c }, r))
}

/// Section 2: the pool's free space before and after dropping a tensor, and its reuse.
fn pool_reuse(rt: &Runtime) -> Result<()> {
    section("2. Memory pool: free space before and after dropping a tensor");
    let before = rt.pool_stats(0)?;
    let big = rt.empty(DType::F32, [1024, 1024], 0)?;
    let during = rt.pool_stats(0)?;
    drop(big);
    let after = rt.pool_stats(0)?;
    println!(
        "cached (free) bytes: before {:.2} MiB, with a 4 MiB tensor {:.2} MiB, after dropping it {:.2} MiB",
        mib(before.cached_bytes),
        mib(during.cached_bytes),
        mib(after.cached_bytes)
    );
    println!(
        "in use: {:.2} MiB -> {:.2} MiB -> {:.2} MiB",
        mib(before.in_use_bytes),
        mib(during.in_use_bytes),
        mib(after.in_use_bytes)
    );
    let again = rt.empty(DType::F32, [1024, 1024], 0)?;
    let reused = rt.pool_stats(0)?;
    println!(
        "allocating the same size again: served from the cache = {} (system allocations {} -> {})",
        reused.system_allocations == after.system_allocations,
        after.system_allocations,
        reused.system_allocations
    );
    drop(again);
    Ok(())
}

/// Section 3: the alignment of each operand's `data_ptr`.
fn alignment(rt: &Runtime, ops: &MatMulOperands) {
    section("3. Alignment of data_ptr");
    let align = rt.config().pool.alignment;
    for (name, t) in [("a", &ops.a), ("b", &ops.b), ("c", &ops.c)] {
        println!("{name}: {:#x}  aligned to {align} bytes: {}", t.data_ptr(), t.data_ptr() % align as u64 == 0);
    }
}

/// Section 4: two MatMul chains on one stream, then on two. Returns its inputs and outputs.
fn two_streams(rt: &Runtime, mm: &Op) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    section("4. Two streams vs serial");
    let shape = [384, 384];
    let xs: Vec<Tensor> = (0..4).map(|i| rt.from_ndarray(&random(&shape, 10 + i), 0)).collect::<Result<_>>()?;
    let outs: Vec<Tensor> = (0..4).map(|_| rt.empty(DType::F32, shape, 0)).collect::<Result<_>>()?;
    let reps = 8;
    let serial = {
        let s = rt.stream(0)?;
        let t0 = Instant::now();
        for _ in 0..reps {
            for i in 0..2 {
                rt.execute_on(&s, mm, &[&xs[2 * i], &xs[2 * i + 1]], &[&outs[i]])?;
            }
        }
        s.synchronize()?;
        t0.elapsed()
    };
    let parallel = {
        let s1 = rt.stream(0)?;
        let s2 = rt.stream(0)?;
        let t0 = Instant::now();
        for _ in 0..reps {
            rt.execute_on(&s1, mm, &[&xs[0], &xs[1]], &[&outs[0]])?;
            rt.execute_on(&s2, mm, &[&xs[2], &xs[3]], &[&outs[1]])?;
        }
        s1.synchronize()?;
        s2.synchronize()?;
        t0.elapsed()
    };
    println!(
        "{} MatMuls {:?}: one stream {:.2} ms, two streams {:.2} ms, speed-up {:.2}x",
        2 * reps,
        shape,
        ms(serial),
        ms(parallel),
        serial.as_secs_f64() / parallel.as_secs_f64()
    );
    println!("(each MatMul already uses every core, so two streams mostly overlap the gaps between ops)");
    Ok((xs, outs))
}

/// Section 5: the unit each op ran on. Returns the ReLU's input.
fn hardware_units(rt: &Runtime, r: &ExecReport) -> Result<Tensor> {
    section("5. Hardware units");
    let x = rt.from_ndarray(&random(&[256, 1024], 3), 0)?;
    let relu = rt.run_with_report(&Op::Relu, &[&x])?.1;
    println!("MatMul -> {} via {}", r.unit, r.implementation);
    println!("ReLU   -> {} via {}", relu.unit, relu.implementation);
    Ok(x)
}

/// Section 7: a MatMul with mismatched shapes is refused. Returns the mismatched operand.
fn validation(rt: &Runtime, mm: &Op, a: &Tensor) -> Result<Tensor> {
    section("7. Validation");
    let small = rt.empty(DType::F32, [512, 512], 0)?;
    match rt.run(mm, &[a, &small]) {
        Err(e) => println!("error (expected): {e}"),
        Ok(_) => println!("unexpected: the mismatched MatMul ran"),
    }
    Ok(small)
}

/// Section 8: the device's memory and the pool's statistics.
fn memory_info(rt: &Runtime) -> Result<()> {
    section("8. Memory info");
    let m = rt.memory_info(0)?;
    println!(
        "device total {:.1} GiB, used by tensors {:.2} MiB, held by the pool {:.2} MiB, system free {}",
        m.total_bytes as f64 / (1u64 << 30) as f64,
        mib(m.used_bytes),
        mib(m.pool_bytes),
        m.system_free_bytes.map_or("unknown".into(), |f| format!("{:.1} GiB", f as f64 / (1u64 << 30) as f64))
    );
    let s = rt.pool_stats(0)?;
    println!("{s}");
    Ok(())
}

/// Section 9: which allocation path a small and a large tensor take.
fn allocation_paths(rt: &Runtime) -> Result<()> {
    section("9. Small vs large allocation path");
    let threshold = rt.config().pool.small_threshold;
    let before = rt.pool_stats(0)?;
    let small_t = rt.empty(DType::F32, [1024], 0)?;
    let mid = rt.pool_stats(0)?;
    let large_t = rt.empty(DType::F32, [4096, 1024], 0)?;
    let after = rt.pool_stats(0)?;
    println!("threshold {threshold} bytes");
    println!(
        "4 KiB tensor: {} (system allocations +{})",
        path_name(small_t.nbytes() <= threshold),
        mid.system_allocations - before.system_allocations
    );
    println!(
        "16 MiB tensor: {} (system allocations +{}, direct-from-system bytes now {:.1} MiB)",
        path_name(large_t.nbytes() <= threshold),
        after.system_allocations - mid.system_allocations,
        mib(after.system_bytes)
    );
    drop((small_t, large_t));
    Ok(())
}

/// What section 10 leaves allocated: its input, outputs, tasks and stream.
struct Submitted {
    _input: Tensor,
    _outputs: Vec<Tensor>,
    _tasks: Vec<Task>,
    _stream: Stream,
}

/// Section 10: the same ReLUs submitted synchronously, asynchronously and as one batch.
fn submission(rt: &Runtime) -> Result<Submitted> {
    section("10. Submission: synchronous, asynchronous, batch");
    let n_ops = 200;
    let v = rt.from_ndarray(&random(&[64, 64], 5), 0)?;
    let vo: Vec<Tensor> = (0..n_ops).map(|_| rt.empty(DType::F32, [64, 64], 0)).collect::<Result<_>>()?;
    let t0 = Instant::now();
    for o in &vo {
        rt.execute(&Op::Relu, &[&v], &[o])?;
    }
    let sync_t = t0.elapsed();
    let s = rt.stream(0)?;
    let t0 = Instant::now();
    for o in &vo {
        rt.execute_on(&s, &Op::Relu, &[&v], &[o])?;
    }
    let submit_t = t0.elapsed();
    s.synchronize()?;
    let async_t = t0.elapsed();
    let tasks: Vec<Task> =
        vo.iter().map(|o| Task { op: Op::Relu, inputs: vec![v.clone()], outputs: vec![o.clone()] }).collect();
    let t0 = Instant::now();
    {
        let _scope = rt.stream_scope(&s);
        rt.execute_batch(&tasks)?;
    }
    let batch_submit = t0.elapsed();
    s.synchronize()?;
    let batch_t = t0.elapsed();
    println!("{n_ops} ReLU [64, 64]:");
    println!(
        "  synchronous (default stream): {:.3} ms total, {:.2} us/op",
        ms(sync_t),
        sync_t.as_secs_f64() * 1e6 / n_ops as f64
    );
    println!("  asynchronous (user stream):   {:.3} ms to submit, {:.3} ms to finish", ms(submit_t), ms(async_t));
    println!("  batch (one submission):       {:.3} ms to submit, {:.3} ms to finish", ms(batch_submit), ms(batch_t));
    Ok(Submitted { _input: v, _outputs: vo, _tasks: tasks, _stream: s })
}

/// Section 11: the MatMul result copied back and checked against ndarray. Returns the copy.
fn copy_back(ops: &MatMulOperands) -> Result<ArrayD<f32>> {
    section("11. Copy-back");
    let host = ops.c.to_ndarray::<f32>()?;
    let ah = ops.a.to_ndarray::<f32>()?;
    let bh = ops.b.to_ndarray::<f32>()?;
    let (a2, b2) = (
        ah.view()
            .into_dimensionality::<npurt::ndarray::Ix2>()
            .map_err(|e| npurt::Error::invalid("MatMul", e.to_string()))?,
        bh.view()
            .into_dimensionality::<npurt::ndarray::Ix2>()
            .map_err(|e| npurt::Error::invalid("MatMul", e.to_string()))?,
    );
    let expect = a2.dot(&b2);
    let max_err = host.iter().zip(expect.iter()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let ok = host.iter().zip(expect.iter()).all(|(x, y)| (x - y).abs() <= 1e-4 + 1e-4 * y.abs());
    println!("MatMul result copied back: allclose(rtol=1e-4, atol=1e-4) vs ndarray = {ok} (max |diff| {max_err:.2e})");
    Ok(host)
}

/// Section 12: reading the result in place where the backend allows it.
fn zero_copy(rt: &Runtime, c: &Tensor, host: &ArrayD<f32>) -> Result<()> {
    section("12. Zero-copy host access");
    println!("supports_zero_copy: {}", rt.supports_zero_copy(0));
    if c.supports_zero_copy() {
        let first = c.with_host_view::<f32, _>(|v| v[[0, 0]])?;
        println!("c[0, 0] read in place (no copy): {first:.6} (copied: {:.6})", host[[0, 0]]);
    }
    Ok(())
}

fn path_name(small: bool) -> &'static str {
    if small { "pooled segment (small path)" } else { "direct from the system (large path)" }
}

#[allow(dead_code)]
fn kind_name(k: BlockKind) -> &'static str {
    match k {
        BlockKind::Small => "small",
        BlockKind::Large => "large",
    }
}
