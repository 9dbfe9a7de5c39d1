//! The micro-kernels' own speed, apart from the product around them: each kernel of a path,
//! on one thread, run through the macro-kernel (the production loop order) over packed A
//! and B panels of one k slice that stay in the caches, then again with every call reading
//! its B panels from a new place in a buffer larger than the caches. What a whole product
//! loses beyond these two figures is its packing, its C traffic and its threads.
//!
//! `npurt bench peak --kernels` prints them next to the FMA peak.

use super::driver::{APanels, B_IN_L1_MIN_PANELS, macro_kernel};
use super::layout::{MicroKernel, RowPlan};
use super::scalar::ScalarKernel;
#[cfg(target_arch = "x86_64")]
use super::x86;
use std::time::{Duration, Instant};

/// The B panels of one call (an item's column block of 4 micro-panels).
const B_PANELS: usize = 4;
/// The A micro-panels of one call where one A panel stays in L1 (the others stream from L2).
const A_PANELS: usize = 8;

/// One micro-kernel's measured speed on one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRate {
    /// The kernel: `"avx512-fma 12x32"`, …
    pub kernel: String,
    pub mr: usize,
    pub nr: usize,
    /// The k depth of each call (the kernel's `KC`).
    pub kc: usize,
    /// The rows of A (`mr` × panels) and the columns of B of each call.
    pub rows: usize,
    pub cols: usize,
    /// Median GFLOP/s with A, B and C resident in L1/L2.
    pub in_cache_gflops: f64,
    /// Median GFLOP/s with each call's B panels read from memory first.
    pub b_from_memory_gflops: f64,
}

/// Measures every micro-kernel of `isa` (the 12×32 and 8×32 AVX-512 kernels, AVX2's 6×16,
/// the portable 4×8) on this thread, in cache and with B from memory (see `rate.rs`):
/// `runs` timed runs of about `run_time` each per figure, after a warm-up. `stream_bytes`
/// is the buffer B's panels are streamed from (a few times the last-level cache; at least
/// two calls' worth is used).
pub fn kernel_rates(
    isa: crate::features::Isa,
    run_time: std::time::Duration,
    runs: usize,
    stream_bytes: usize,
) -> Result<Vec<KernelRate>, crate::features::IsaError> {
    use crate::features::Isa as Cpu;
    crate::features::get().check(isa)?;
    let runs = runs.max(1);
    let mut out = Vec::new();
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX-512F (with AVX2 and FMA) on this CPU.
        Cpu::Avx512 => unsafe {
            out.push(rate::<x86::Avx512>("avx512-fma", run_time, runs, stream_bytes));
            out.push(rate::<x86::Avx512x8>("avx512-fma", run_time, runs, stream_bytes));
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX2 and FMA on this CPU.
        Cpu::Avx2Fma => unsafe { out.push(rate::<x86::Avx2>("avx2-fma", run_time, runs, stream_bytes)) },
        // SAFETY: the portable kernel has no CPU-feature requirement.
        _ => unsafe { out.push(rate::<ScalarKernel>("scalar", run_time, runs, stream_bytes)) },
    }
    Ok(out)
}

/// Both figures of kernel `K`.
///
/// # Safety
/// The CPU supports `K`'s target features.
pub(super) unsafe fn rate<K: MicroKernel>(
    name: &str,
    run_time: Duration,
    runs: usize,
    stream_bytes: usize,
) -> KernelRate {
    let kc = K::BLOCKING.kc;
    // Enough A panels for the kernel's own loop order to be the one the driver takes.
    let a_panels = if K::B_PANEL_IN_L1 { B_IN_L1_MIN_PANELS } else { A_PANELS };
    let (rows, cols) = (a_panels * K::MR, B_PANELS * K::NR);
    let a = a_values(rows * kc);
    let region = kc * cols;
    let regions = (stream_bytes / 4 / region).max(2);
    let b: Vec<f32> = (0..region * regions).map(|i| (i % 5) as f32 / 1024.0).collect();
    let mut c = vec![0.0f32; rows * cols];
    let flops = 2.0 * (rows * cols * kc) as f64;
    let mut call = |r: usize, from_memory: bool| {
        let bp = &b[r * region..][..region];
        // SAFETY: `K` is supported (our precondition); A holds `a_panels` packed panels of
        // depth `kc`, B `B_PANELS` of them, C `rows × cols` at row stride `cols`, written by
        // this thread only.
        unsafe {
            let plan = RowPlan::uniform(rows, K::MR);
            let (ap, cp) = (APanels::Packed(&a), c.as_mut_ptr());
            macro_kernel::<K, true>(kc, ap, plan, bp, cols, cp, cols, 1.0, 1.0, None, from_memory, |_| std::ptr::null())
        };
    };
    let mut measure = |stream: bool| {
        let mut next = 0usize;
        let mut timed = |calls: usize| {
            let t = Instant::now();
            for _ in 0..calls {
                call(if stream { next } else { 0 }, stream);
                next = (next + 1) % regions;
            }
            t.elapsed()
        };
        // Warm up, then size the runs from the warm-up's speed.
        let mut calls = 1usize;
        let mut warm = timed(calls);
        while warm < run_time / 8 && calls < 1 << 24 {
            calls *= 2;
            warm = timed(calls);
        }
        let per_run = ((calls as f64 * run_time.as_secs_f64() / warm.as_secs_f64().max(1e-9)) as usize).max(1);
        crate::kernels::common::upper_median(
            (0..runs).map(|_| flops * per_run as f64 / timed(per_run).as_secs_f64().max(1e-12) / 1e9).collect(),
        )
    };
    let in_cache_gflops = measure(false);
    let b_from_memory_gflops = measure(true);
    KernelRate {
        kernel: format!("{name} {}x{}", K::MR, K::NR),
        mr: K::MR,
        nr: K::NR,
        kc,
        rows,
        cols,
        in_cache_gflops,
        b_from_memory_gflops,
    }
}

/// A's values in the measurements: `len` floats near 1 (no denormals, no overflow).
fn a_values(len: usize) -> Vec<f32> {
    (0..len).map(|i| 1.0 + (i % 7) as f32 / 64.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{self, Isa};

    #[test]
    fn every_path_of_this_cpu_reports_its_kernels() {
        for isa in Isa::ALL {
            match kernel_rates(isa, Duration::from_millis(2), 3, 1 << 20) {
                Ok(rates) => {
                    assert!(!rates.is_empty());
                    for r in rates {
                        assert!(r.kernel.contains(&format!("{}x{}", r.mr, r.nr)), "{r:?}");
                        assert_eq!((r.rows % r.mr, r.cols % r.nr), (0, 0), "{r:?}");
                        for g in [r.in_cache_gflops, r.b_from_memory_gflops] {
                            assert!(g.is_finite() && g > 0.0, "{r:?}");
                        }
                    }
                }
                Err(e) => {
                    println!("SKIP {isa}: {e}");
                    assert_eq!(features::get().check(isa), Err(e));
                }
            }
        }
    }

    /// This thread's CPU time: unlike the wall clock, it does not count the time the host
    /// gave to other processes.
    #[cfg(target_os = "linux")]
    fn thread_cpu() -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// Each variant's median time (seconds) as GFLOP/s of a product of `macs`
    /// multiply-adds.
    #[cfg(target_os = "linux")]
    fn median_rates(times: &mut [Vec<f64>], macs: usize) -> Vec<f64> {
        times
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                2.0 * macs as f64 / v[v.len() / 2] / 1e9
            })
            .collect()
    }

    /// `len` floats from `mmap`, 2 MiB-aligned, on transparent huge pages when `huge` (a
    /// hint the kernel may refuse), on 4 KiB pages otherwise; never freed (a test).
    #[cfg(target_os = "linux")]
    fn mapped(len: usize, huge: bool) -> &'static mut [f32] {
        let bytes = len * 4 + (2 << 20);
        // SAFETY: an anonymous private mapping of `bytes`, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of {bytes} bytes");
        let start = (p as usize).next_multiple_of(2 << 20) as *mut f32;
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: `[start, start + len)` lies inside the mapping (2 MiB of slack for the
        // alignment); advice changes no contents.
        let rc = unsafe { libc::madvise(start.cast(), len * 4, advice) };
        assert_eq!(rc, 0, "madvise");
        // SAFETY: zero-filled, writable, inside the mapping, never unmapped or aliased.
        unsafe { std::slice::from_raw_parts_mut(start, len) }
    }

    /// Floats of each B buffer the measurements read from memory (256 MiB).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    const B_FLOATS: usize = (256 << 20) / 4;

    /// What the AVX-512 measurements below share: `None` (having said why) without AVX-512,
    /// else one B buffer of [`B_FLOATS`] per entry of `huge` (on huge pages where true),
    /// filled with small values.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn avx512_b_in_memory<const N: usize>(huge: [bool; N]) -> Option<[&'static [f32]; N]> {
        if let Err(e) = features::get().check(Isa::Avx512) {
            println!("SKIP: {e}");
            return None;
        }
        Some(huge.map(|huge| {
            let b = mapped(B_FLOATS, huge);
            for (i, x) in b.iter_mut().enumerate() {
                *x = (i % 5) as f32 / 1024.0;
            }
            &*b
        }))
    }

    /// The macro-kernel with and without B prefetching, B read from a new place in a
    /// 256 MiB buffer each call (an item of a prepacked product whose weights come from
    /// memory), and with B on huge pages, alternated in batches, on this thread's CPU
    /// time. A measurement, not a check:
    /// `cargo test --release -p backend-cpu --lib streaming_b -- --ignored --nocapture`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    #[ignore = "a measurement; run it by hand in a release build"]
    fn streaming_b_against_plain_b() {
        let Some([small, huge]) = avx512_b_in_memory([false, true]) else { return };
        type K = x86::Avx512x8;
        let kc = 512;
        for (rows, cols) in [(32usize, 64usize), (32, 96), (128, 96), (128, 192)] {
            let a = a_values(rows * kc);
            let region = kc * cols.div_ceil(32) * 32;
            let regions = B_FLOATS / region;
            let mut c = vec![0.0f32; rows * cols];
            let mut next = 0;
            // Variant 0: plain, 1: streaming, 2: streaming with B on huge pages.
            let mut batch = |variant: usize| {
                let b: &[f32] = if variant == 2 { huge } else { small };
                let t = thread_cpu();
                for _ in 0..200 {
                    let bp = &b[next * region..][..region];
                    next = (next + 1) % regions;
                    let (ap, cp, plan) = (APanels::Packed(&a), c.as_mut_ptr(), RowPlan::uniform(rows, K::MR));
                    // SAFETY: AVX-512 checked above; A holds rows/8 panels of depth kc, B
                    // the panels of `cols` columns, C rows × cols.
                    unsafe {
                        if variant == 0 {
                            macro_kernel::<K, false>(kc, ap, plan, bp, cols, cp, cols, 1.0, 0.0, None, true, |_| {
                                std::ptr::null()
                            })
                        } else {
                            macro_kernel::<K, true>(kc, ap, plan, bp, cols, cp, cols, 1.0, 0.0, None, true, |_| {
                                std::ptr::null()
                            })
                        }
                    }
                }
                (thread_cpu() - t).as_secs_f64() / 200.0
            };
            let mut times = [Vec::new(), Vec::new(), Vec::new()];
            for round in 0..24 {
                for v in 0..3 {
                    let v = (v + round) % 3;
                    times[v].push(batch(v));
                }
            }
            let g = median_rates(&mut times, rows * cols * kc);
            println!(
                "{rows}x{cols} kc {kc}: plain {:.1} GF/s, streaming {:.1} ({:+.0} %), streaming on huge pages {:.1} ({:+.0} %)",
                g[0],
                g[1],
                (g[1] / g[0] - 1.0) * 100.0,
                g[2],
                (g[2] / g[0] - 1.0) * 100.0
            );
        }
    }

    /// A whole product on one thread with its weight read from memory (a new place in a
    /// 256 MiB buffer each call, as a model's weights are read once per run): f32 prepacked
    /// against a bf16 weight widened into the same kernel (`run_bf16_pairs`, the bf16
    /// products of a CPU whose `vdpbf16ps` runs at half rate), on this thread's CPU time.
    /// A measurement, not a check:
    /// `cargo test --release -p backend-cpu --lib weights_from_memory -- --ignored --nocapture`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    #[ignore = "a measurement; run it by hand in a release build"]
    fn weights_from_memory_f32_against_bf16_pairs() {
        use super::super::{BMatrix, PackedBLayout, Sgemm, Strided};
        let Some([buf]) = avx512_b_in_memory([false]) else { return };
        let words: &[u32] = bytemuck::cast_slice(buf);
        for (m, k, n) in [(128usize, 768usize, 768usize), (128, 768, 3072), (128, 3072, 768), (512, 1024, 4096)] {
            let a = a_values(m * k);
            let mut c = vec![0.0f32; m * n];
            let layout = PackedBLayout::for_cpu(Isa::Avx512, k, n);
            let (f32_region, bf16_region) = (layout.len(), n.div_ceil(32) * 32 * k.div_ceil(2));
            let (mut next_f32, mut next_bf16) = (0, 0);
            let calls = (2 << 30) / (m * n * k);
            let calls = calls.clamp(3, 50);
            let mut batch = |bf16: bool| {
                let t = thread_cpu();
                for _ in 0..calls {
                    if bf16 {
                        let w = &words[next_bf16 * bf16_region..][..bf16_region];
                        next_bf16 = (next_bf16 + 1) % (words.len() / bf16_region);
                        super::super::run_bf16_pairs((m, n, k), &a, w, 0.0, &mut c, 1);
                    } else {
                        let data = &buf[next_f32 * f32_region..][..f32_region];
                        next_f32 = (next_f32 + 1) % (buf.len() / f32_region);
                        super::super::run(Sgemm {
                            isa: Isa::Avx512,
                            m,
                            n,
                            k,
                            alpha: 1.0,
                            a: Strided { data: &a, rs: k, cs: 1 },
                            b: BMatrix::Packed { layout: &layout, data },
                            beta: 0.0,
                            bias: None,
                            c: &mut c,
                            ldc: n,
                            threads: 1,
                        });
                    }
                }
                (thread_cpu() - t).as_secs_f64() / calls as f64
            };
            let mut times = [Vec::new(), Vec::new()];
            for round in 0..12 {
                for v in 0..2 {
                    let v = (v + round) % 2;
                    times[v].push(batch(v == 1));
                }
            }
            let g = median_rates(&mut times, m * n * k);
            println!(
                "{m}x{k}x{n}, one thread, weights from memory: f32 prepacked {:.1} GF/s, bf16 widened {:.1} ({:+.0} %)",
                g[0],
                g[1],
                (g[1] / g[0] - 1.0) * 100.0
            );
        }
    }

    /// The macro-kernel at 512 rows with B from memory (a prepacked weight's item), beta 1
    /// (a second k slice), its C rows at strides of the item's own width, of the BERT
    /// outputs' widths (768 … 4096 floats: the multiples of 2 KiB put a tile's rows into one
    /// or two L1 sets), and of 4096 + 16. A measurement:
    /// `cargo test --release -p backend-cpu --lib c_strides -- --ignored --nocapture`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    #[ignore = "a measurement; run it by hand in a release build"]
    fn c_strides() {
        let Some([b]) = avx512_b_in_memory([false]) else { return };
        type K = x86::Avx512;
        let (kc, rows, cols) = (512usize, 512usize, 128usize);
        let plan = RowPlan::new(rows, K::MR, 10);
        let a = a_values(plan.tiles() * K::MR * kc);
        let region = kc * cols;
        let regions = B_FLOATS / region;
        let strides = [cols, 768, 1024, 1152, 1536, 2048, 2304, 3072, 4096, 4096 + 16];
        let mut c = vec![0.0f32; rows * (4096 + 16)];
        let mut next = 0;
        let calls = 20;
        let mut batch = |variant: usize| {
            let ldc = strides[variant];
            let t = thread_cpu();
            for _ in 0..calls {
                next = (next + 1) % regions;
                let bp = &b[next * region..][..region];
                // SAFETY: AVX-512 checked above; A holds the plan's panels of depth kc, B
                // the panels of `cols` columns, C rows × cols at stride ldc (<= its length).
                unsafe {
                    macro_kernel::<K, true>(
                        kc,
                        APanels::Packed(&a),
                        plan,
                        bp,
                        cols,
                        c.as_mut_ptr(),
                        ldc,
                        1.0,
                        1.0,
                        None,
                        true,
                        |_| std::ptr::null(),
                    )
                }
            }
            (thread_cpu() - t).as_secs_f64() / calls as f64
        };
        let mut times = vec![Vec::new(); strides.len()];
        for round in 0..24 {
            for v in 0..strides.len() {
                let v = (v + round) % strides.len();
                times[v].push(batch(v));
            }
        }
        let g = median_rates(&mut times, rows * cols * kc);
        for (ldc, g) in strides.iter().zip(g) {
            println!("{rows}x{cols} kc {kc}, B from memory, beta 1, ldc {ldc}: {g:.1} GF/s");
        }
    }

    /// A 32 × 384 × 384 product with B from memory on two threads, as the driver cuts it
    /// into 6 column blocks of 64: split rows too (12 items, thread t the row half t of
    /// every block: both cores read all of B) or not (thread t the blocks t, t+2, t+4 with
    /// all rows), on the two threads' CPU time. A measurement:
    /// `cargo test --release -p backend-cpu --lib split_rows -- --ignored --nocapture`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    #[ignore = "a measurement; run it by hand in a release build"]
    fn split_rows_against_whole_blocks() {
        use std::sync::Barrier;
        let Some([b]) = avx512_b_in_memory([false]) else { return };
        type K = x86::Avx512x8;
        let (m, k, cols, blocks) = (32usize, 384usize, 64usize, 6usize);
        let region = k * cols;
        let products = B_FLOATS / (region * blocks);
        let a = a_values(m * k);
        let (rounds, per) = (16, 100);
        let mut cpu = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for v in [round % 2, 1 - round % 2] {
                let barrier = Barrier::new(2);
                let spent: Vec<f64> = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..2)
                        .map(|t| {
                            let (a, barrier) = (&a, &barrier);
                            s.spawn(move || {
                                let mut c = vec![0.0f32; m * cols];
                                let mut used = Duration::ZERO;
                                for q in 0..per {
                                    barrier.wait();
                                    let t0 = thread_cpu();
                                    let base = ((round * per + q) % products) * region * blocks;
                                    for jb in 0..blocks {
                                        let bp = &b[base + jb * region..][..region];
                                        let (rows, ap) = match v {
                                            0 => (16, &a[t * 16 * k..]),
                                            _ if jb % 2 == t => (32, &a[..]),
                                            _ => continue,
                                        };
                                        // SAFETY: AVX-512 checked above; A holds `rows`/8
                                        // panels of depth k, B 2 panels, C rows × cols.
                                        unsafe {
                                            macro_kernel::<K, true>(
                                                k,
                                                APanels::Packed(ap),
                                                RowPlan::uniform(rows, K::MR),
                                                bp,
                                                cols,
                                                c.as_mut_ptr(),
                                                cols,
                                                1.0,
                                                0.0,
                                                None,
                                                true,
                                                |_| std::ptr::null(),
                                            )
                                        }
                                    }
                                    used += thread_cpu() - t0;
                                }
                                used.as_secs_f64() / per as f64
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).collect()
                });
                cpu[v].push(spent.iter().sum::<f64>());
            }
        }
        let us: Vec<f64> = cpu
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2] * 1e6
            })
            .collect();
        println!(
            "32x384x384, B from memory, CPU time of both threads per product: rows split {:.1} us, whole blocks {:.1} us",
            us[0], us[1]
        );
    }

    /// AVX2's short tiles against whole ones: the rows of A cut as the driver cuts them
    /// (32 rows: 6, 6, 5, 5, 5, 5) or in 6-row tiles only (36 rows computed), one k slice
    /// against four B panels in cache, alternated in batches on this thread's CPU time, as
    /// GFLOP/s of the `m` rows. A measurement:
    /// `cargo test --release -p backend-cpu --lib short_tiles -- --ignored --nocapture`.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    #[ignore = "a measurement; run it by hand in a release build"]
    fn short_tiles_against_whole_tiles() {
        if let Err(e) = features::get().check(Isa::Avx2Fma) {
            println!("SKIP: {e}");
            return;
        }
        type K = x86::Avx2;
        let (kc, cols) = (K::BLOCKING.kc, 4 * K::NR);
        for m in [32usize, 128, 20, 65] {
            let plans = [RowPlan::new(m, K::MR, K::SHORT_ROWS), RowPlan::uniform(m, K::MR)];
            let a = a_values(plans[1].tiles() * K::MR * kc);
            let b = a_values(kc * cols);
            let mut c = vec![0.0f32; m * cols];
            let mut batch = |plan: RowPlan| {
                let t = thread_cpu();
                for _ in 0..400 {
                    // SAFETY: AVX2 and FMA checked above; A holds the panels of both plans,
                    // B four panels, C m × cols.
                    unsafe {
                        macro_kernel::<K, false>(
                            kc,
                            APanels::Packed(&a),
                            plan,
                            &b,
                            cols,
                            c.as_mut_ptr(),
                            cols,
                            1.0,
                            0.0,
                            None,
                            false,
                            |_| std::ptr::null(),
                        )
                    }
                }
                (thread_cpu() - t).as_secs_f64() / 400.0
            };
            let mut times = [Vec::new(), Vec::new()];
            for round in 0..16 {
                for v in [round % 2, 1 - round % 2] {
                    times[v].push(batch(plans[v]));
                }
            }
            let g = median_rates(&mut times, m * cols * kc);
            println!(
                "{m} rows ({:?}): short tiles {:.1} GF/s, 6-row tiles {:.1} GF/s ({:+.1} %)",
                (0..plans[0].tiles()).map(|q| plans[0].height(q)).collect::<Vec<_>>(),
                g[0],
                g[1],
                (g[0] / g[1] - 1.0) * 100.0
            );
        }
    }
}
