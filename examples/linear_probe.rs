use npurt::{DType, Op, Runtime};
use std::time::Instant;
fn main() {
    let rt = Runtime::new().unwrap();
    let (h, s, d) = (16usize, 512usize, 64usize);
    let q = rt.from_slice(&(0..h * s * d).map(|i| ((i * 31 % 97) as f32 - 48.0) / 97.0).collect::<Vec<_>>(), [1, h, s, d], 0).unwrap();
    let m = rt.from_slice(&vec![0f32; s], [1, 1, 1, s], 0).unwrap();
    let o = rt.empty(DType::F32, [1, h, s, d], 0).unwrap();
    let op = Op::Attention { scale: None };
    let mut t = vec![];
    for _ in 0..30 {
        let t0 = Instant::now();
        rt.execute(&op, &[&q, &q, &q, &m], &[&o]).unwrap();
        t.push(t0.elapsed().as_secs_f64());
    }
    t.sort_by(|a, b| a.total_cmp(b));
    let f = 4.0 * (h * s * s * d) as f64;
    println!("attention 16x512x64: {:.2} ms, {:.1} GF/s", t[15] * 1e3, f / t[15] / 1e9);
}
