//! Measures eager dispatch overhead: a tiny op through the runtime.
use npurt::{DType, Op, Runtime};
use std::time::Instant;

fn main() -> npurt::Result<()> {
    let rt = Runtime::new()?;
    let x = rt.zeros(DType::F32, [16], 0)?;
    let y = rt.empty(DType::F32, [16], 0)?;
    for _ in 0..1000 {
        rt.execute(&Op::Relu, &[&x], &[&y])?;
    }
    let mut v = Vec::new();
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    for _ in 0..rounds {
        let n = 20000;
        let t = Instant::now();
        for _ in 0..n {
            rt.execute(&Op::Relu, &[&x], &[&y])?;
        }
        v.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("execute ReLU[16]: median {:.3} us", v[v.len() / 2]);
    Ok(())
}
