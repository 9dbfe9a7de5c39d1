use npurt::{DType, Op, Runtime};
use std::time::Instant;
fn main() {
    let rt = Runtime::new().unwrap();
    for &(m, k, n) in
        &[(128usize, 768usize, 768usize), (128, 768, 3072), (128, 3072, 768), (512, 1024, 4096), (512, 1024, 1024)]
    {
        let x = rt.from_slice(&vec![0.5f32; m * k], [m, k], 0).unwrap();
        let w = rt.from_slice(&vec![0.25f32; n * k], [n, k], 0).unwrap();
        let b = rt.from_slice(&vec![0.0f32; n], [n], 0).unwrap();
        let y = rt.empty(DType::F32, [m, n], 0).unwrap();
        let mm = rt.empty(DType::F32, [m, n], 0).unwrap();
        let wt = rt.from_slice(&vec![0.25f32; n * k], [k, n], 0).unwrap();
        let mut t1 = vec![];
        let mut t2 = vec![];
        for _ in 0..9 {
            let t = Instant::now();
            rt.execute(&Op::Linear, &[&x, &w, &b], &[&y]).unwrap();
            t1.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            rt.execute(&Op::MatMul { trans_a: false, trans_b: false }, &[&x, &wt], &[&mm]).unwrap();
            t2.push(t.elapsed().as_secs_f64());
        }
        t1.sort_by(|a, b| a.total_cmp(b));
        t2.sort_by(|a, b| a.total_cmp(b));
        let f = 2.0 * (m * k * n) as f64 / 1e9;
        println!("{m}x{k}x{n}: Linear {:.1} GF/s, MatMul {:.1} GF/s", f / t1[4], f / t2[4]);
    }
}
