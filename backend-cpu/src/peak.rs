//! The machine's FMA peak, measured: the ceiling every GEMM figure is a fraction of.
//!
//! Each thread runs a tight loop of fused multiply-adds on independent vector
//! accumulators, with no loads or stores: [`AVX2_ACCUMULATORS`] ymm or
//! [`AVX512_ACCUMULATORS`] zmm registers, enough to cover the FMA latency times the
//! number of FMA pipes (4 cycles × 2 pipes = 8 in flight on Zen 2–4 and Skylake for ymm;
//! 4 × 2 on Skylake-SP's two 512-bit ports, 4 × 1 on Zen 4's double-pumped zmm). 1 thread
//! and N threads run the same loop, started together; a run's figure is the FLOPs of all
//! threads over the time from the start to the last thread's end, and [`measure`] reports
//! the median of several runs after a warm-up.

use crate::features::{self, Isa, IsaError};
use std::hint::black_box;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Independent ymm accumulators of the AVX2 loop.
pub const AVX2_ACCUMULATORS: usize = 12;
/// Independent zmm accumulators of the AVX-512 loop.
pub const AVX512_ACCUMULATORS: usize = 16;

/// Iterations of the calibration run that sizes the timed runs.
const CALIBRATION_ITERS: u64 = 1 << 18;

/// Why a peak could not be measured.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PeakError {
    #[error("{0}")]
    Isa(#[from] IsaError),
    #[error("the {0} path has no FMA instructions to measure a peak with (measure avx2 or avx512)")]
    NoFma(Isa),
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    #[error("starting a measuring thread: {0}")]
    Spawn(String),
}

/// One measured peak.
#[derive(Clone, Debug, PartialEq)]
pub struct Peak {
    pub isa: Isa,
    pub threads: usize,
    /// Independent accumulators per thread.
    pub accumulators: usize,
    /// GFLOP/s of each timed run, in order.
    pub runs: Vec<f64>,
    /// The median of `runs` (the upper one of an even count).
    pub gflops: f64,
    /// Loop iterations per thread and run (each is `accumulators` FMAs of `lanes` lanes).
    pub iterations: u64,
}

impl Peak {
    /// FLOPs one thread does per loop iteration.
    pub fn flops_per_iteration(isa: Isa) -> Option<u64> {
        let acc = accumulators(isa)?;
        Some((acc * isa.lanes() * 2) as u64)
    }
}

/// The accumulators of `isa`'s loop; `None` for the scalar path (no FMA loop).
pub fn accumulators(isa: Isa) -> Option<usize> {
    match isa {
        Isa::Avx512 => Some(AVX512_ACCUMULATORS),
        Isa::Avx2Fma => Some(AVX2_ACCUMULATORS),
        Isa::Scalar => None,
    }
}

/// The paths this CPU can measure, widest first.
pub fn measurable() -> Vec<Isa> {
    let f = features::get();
    Isa::ALL.into_iter().filter(|&i| accumulators(i).is_some() && f.check(i).is_ok()).collect()
}

/// Measures the FMA peak of `isa` on `threads` threads: one warm-up, then `runs` runs of
/// about `run_time` each; GFLOP/s of all threads together.
pub fn measure(isa: Isa, threads: usize, runs: usize, run_time: Duration) -> Result<Peak, PeakError> {
    if threads == 0 {
        return Err(PeakError::Zero { what: "threads" });
    }
    if runs == 0 {
        return Err(PeakError::Zero { what: "runs" });
    }
    features::get().check(isa)?;
    let (Some(acc), Some(per_iter)) = (accumulators(isa), Peak::flops_per_iteration(isa)) else {
        return Err(PeakError::NoFma(isa));
    };
    // Size the runs from one thread's speed (warming the vector unit up on the way).
    let mut cal = timed_run(isa, 1, CALIBRATION_ITERS)?;
    if cal < Duration::from_millis(1) {
        cal = timed_run(isa, 1, CALIBRATION_ITERS)?;
    }
    let scale = run_time.as_secs_f64() / cal.as_secs_f64().max(1e-9);
    let iterations = ((CALIBRATION_ITERS as f64 * scale) as u64).clamp(1 << 12, 1 << 36);
    timed_run(isa, threads, iterations)?;
    let flops = (per_iter * iterations) as f64 * threads as f64;
    let mut figures = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = timed_run(isa, threads, iterations)?;
        figures.push(flops / t.as_secs_f64().max(1e-12) / 1e9);
    }
    let gflops = upper_median(figures.clone());
    Ok(Peak { isa, threads, accumulators: acc, runs: figures, gflops, iterations })
}

/// The median of `v` (the upper one of an even count); `v` is not empty.
pub(crate) fn upper_median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Start states of a run: threads spin until `GO`, or leave on `ABORT`.
const WAIT: u8 = 0;
const GO: u8 = 1;
const ABORT: u8 = 2;

/// One run of `iterations` on `threads` threads (the caller's among them), started
/// together: the time from the start to the last thread's end.
fn timed_run(isa: Isa, threads: usize, iterations: u64) -> Result<Duration, PeakError> {
    let state = AtomicU8::new(WAIT);
    let ready = AtomicUsize::new(0);
    let work = || -> Option<Instant> {
        ready.fetch_add(1, Ordering::AcqRel);
        loop {
            match state.load(Ordering::Acquire) {
                GO => break,
                ABORT => return None,
                _ => std::hint::spin_loop(),
            }
        }
        black_box(fma_loop(isa, iterations, black_box(0.999_999_9)));
        Some(Instant::now())
    };
    std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads - 1);
        for i in 1..threads {
            match std::thread::Builder::new().name(format!("npurt-peak{i}")).spawn_scoped(s, work) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    state.store(ABORT, Ordering::Release);
                    return Err(PeakError::Spawn(e.to_string()));
                }
            }
        }
        while ready.load(Ordering::Acquire) < threads - 1 {
            std::hint::spin_loop();
        }
        let start = Instant::now();
        state.store(GO, Ordering::Release);
        let mut end = work().unwrap_or(start);
        for h in handles {
            // A measuring thread runs no code that panics; one that did counts as ending now.
            let t = h.join().ok().flatten().unwrap_or_else(Instant::now);
            end = end.max(t);
        }
        Ok(end.duration_since(start))
    })
}

/// `iterations` rounds of the loop of `isa` on this thread; returns the accumulators' sum
/// (so the work cannot be optimised away).
fn fma_loop(isa: Isa, iterations: u64, m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `measure` checked that this CPU has AVX-512F (and AVX2, FMA) before any
        // run; the loop touches no memory.
        Isa::Avx512 => return unsafe { x86::fma_avx512::<AVX512_ACCUMULATORS>(iterations, m) },
        // SAFETY: `measure` checked AVX2 and FMA; the loop touches no memory.
        Isa::Avx2Fma => return unsafe { x86::fma_avx2::<AVX2_ACCUMULATORS>(iterations, m) },
        Isa::Scalar => {}
    }
    let _ = (isa, iterations);
    m
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `acc = acc * m + c` on `N` independent ymm accumulators; `m` just under 1 and `c`
    /// small keep every value near 1 (no overflow, no denormals).
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn fma_avx2<const N: usize>(iterations: u64, m: f32) -> f32 {
        let mv = _mm256_set1_ps(m);
        let cv = _mm256_set1_ps(1.0 - m);
        let mut acc = [_mm256_set1_ps(1.0); N];
        for _ in 0..iterations {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, mv, cv);
            }
        }
        let mut sum = _mm256_setzero_ps();
        for a in acc {
            sum = _mm256_add_ps(sum, a);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds the 8 floats an unaligned 256-bit store writes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        lanes.iter().sum()
    }

    /// The AVX-512 loop: as [`fma_avx2`] on zmm accumulators.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) fn fma_avx512<const N: usize>(iterations: u64, m: f32) -> f32 {
        let mv = _mm512_set1_ps(m);
        let cv = _mm512_set1_ps(1.0 - m);
        let mut acc = [_mm512_set1_ps(1.0); N];
        for _ in 0..iterations {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, mv, cv);
            }
        }
        let mut sum = _mm512_setzero_ps();
        for a in acc {
            sum = _mm512_add_ps(sum, a);
        }
        _mm512_reduce_add_ps(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_measurable_path_reports_positive_finite_figures() {
        let paths = measurable();
        if paths.is_empty() {
            println!("SKIP: this CPU has neither AVX2+FMA nor AVX-512");
            return;
        }
        for isa in paths {
            let p = measure(isa, 2, 3, Duration::from_millis(5)).expect("peak");
            assert_eq!((p.isa, p.threads, p.runs.len()), (isa, 2, 3));
            assert!(p.runs.iter().all(|g| g.is_finite() && *g > 0.0), "{p:?}");
            assert!(p.runs.contains(&p.gflops));
        }
    }

    #[test]
    fn the_loop_keeps_its_values_near_one() {
        for isa in measurable() {
            let lanes = (accumulators(isa).unwrap() * isa.lanes()) as f32;
            let s = fma_loop(isa, 10_000, 0.999_999_9);
            assert!((s - lanes).abs() < 1e-3 * lanes, "{isa}: {s} vs {lanes}");
        }
    }

    #[test]
    fn bad_requests_are_errors() {
        let ms = Duration::from_millis(1);
        assert_eq!(measure(Isa::Scalar, 1, 1, ms), Err(PeakError::NoFma(Isa::Scalar)));
        assert_eq!(measure(Isa::Avx2Fma, 0, 1, ms), Err(PeakError::Zero { what: "threads" }));
        assert_eq!(measure(Isa::Avx2Fma, 1, 0, ms), Err(PeakError::Zero { what: "runs" }));
        for isa in Isa::ALL {
            if let Err(e) = features::get().check(isa) {
                assert_eq!(measure(isa, 1, 1, ms), Err(PeakError::Isa(e)));
            }
        }
    }
}
