//! `npurt bench gemm --precision int8`: the dynamic int8 Linear product (`x[m×k] · wᵀ`,
//! the weight quantised per channel once, x quantised per row in every run, as a graph
//! compiled in `int8` runs it) on each int8 unit the CPU has (AMX-INT8, AVX-512-VNNI),
//! next to the prepacked bf16 product of the same shape, as GFLOP/s (2·m·k·n per run; the
//! median of the runs after one warm-up).

use super::common::median;
use backend_cpu::kernels::gemm_i8::{self, PackedI8, Path};
use npurt::{Error, Result, RuntimeConfig};
use std::time::Instant;

/// `(m, k, n, batch)`, as `bench gemm`'s table names its shapes.
pub type Shape = (usize, usize, usize, usize);

/// GFLOP/s of the int8 product of shape `s` on `path` with `threads`, or `None` for a
/// batched shape.
fn time_int8(path: Path, s: Shape, runs: usize, threads: usize) -> Result<Option<f64>> {
    let (m, k, n, b) = s;
    if b != 1 {
        return Ok(None);
    }
    let f = backend_cpu::features::get();
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
    let err = |e| Error::backend("cpu", e);
    let Some(pw) = PackedI8::quantise(&w, n, k).map_err(err)? else { return Ok(None) };
    let mut c = vec![0f32; m * n];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Config(format!("thread pool: {e}")))?;
    pool.install(|| {
        let mut once = || gemm_i8::linear(f, path, m, &x, &pw, None, &mut c, threads).map_err(err);
        once()?;
        let mut t = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = Instant::now();
            once()?;
            t.push(t0.elapsed().as_secs_f64().max(1e-12));
        }
        Ok(Some(2.0 * (m * k * n) as f64 / median(&mut t) / 1e9))
    })
}

/// Times every shape on each int8 unit and, through `bf16` (GFLOP/s of a shape), on the
/// bf16 unit; prints the table (and writes it as JSON to `json`).
pub fn run(
    cfg: &RuntimeConfig,
    shapes: &[Shape],
    runs: usize,
    json: Option<&str>,
    bf16: &dyn Fn(Shape) -> Option<f64>,
) -> Result<()> {
    let f = backend_cpu::features::get();
    let paths: Vec<Path> = [Path::Amx, Path::Vnni].into_iter().filter(|p| p.available(f)).collect();
    if paths.is_empty() {
        let why = gemm_i8::missing(f).unwrap_or_default();
        return Err(npurt::Error::Unsupported(format!("no int8 GEMM to time here: {why}")));
    }
    let threads = cfg.threads.unwrap_or(f.cores);
    println!("GEMM int8 (dynamic: x quantised per row in each run), median of {runs} runs, {threads} threads");
    let mut head = format!("{:>16}", "shape");
    for p in &paths {
        head += &format!(" {:>18}", format!("int8 {}", p.name()));
    }
    println!("{head} {:>12} {:>10}", "bf16", "int8/bf16");
    let mut rows = Vec::new();
    for &s in shapes {
        let name = format!("{}x{}x{}", s.0, s.1, s.2);
        let mut line = format!("{name:>16}");
        let mut best: Option<f64> = None;
        let mut row = serde_json::Map::new();
        row.insert("shape".into(), name.clone().into());
        for p in &paths {
            let g = time_int8(*p, s, runs, threads)?;
            line += &format!(" {:>18}", g.map_or("-".into(), |g| format!("{g:.1}")));
            row.insert(format!("int8_{}", p.name()), g.into());
            if let Some(g) = g {
                best = Some(best.map_or(g, |b| b.max(g)));
            }
        }
        let bf16 = bf16(s);
        row.insert("bf16".into(), bf16.into());
        let ratio = best.zip(bf16).map(|(a, b)| a / b);
        println!(
            "{line} {:>12} {:>10}",
            bf16.map_or("-".into(), |g| format!("{g:.1}")),
            ratio.map_or("-".into(), |r| format!("{r:.2}"))
        );
        rows.push(serde_json::Value::Object(row));
    }
    if let Some(path) = json {
        let doc = serde_json::json!({"precision": "int8", "runs": runs, "threads": threads, "rows": rows});
        crate::outputs::write_json(path, &doc)?;
    }
    Ok(())
}
