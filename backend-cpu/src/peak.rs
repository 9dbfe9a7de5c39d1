//! The machine's peaks, measured: the ceilings every GEMM figure is a fraction of. A
//! [`PeakUnit`] is the f32 FMA unit of one path, the AVX-512-BF16 dot product
//! (`vdpbf16ps`) or the AMX tile unit (`tdpbf16ps`).
//!
//! Each thread runs a tight loop of fused multiply-adds on independent vector
//! accumulators, with no loads or stores: [`AVX2_ACCUMULATORS`] ymm or
//! [`AVX512_ACCUMULATORS`] zmm registers, enough to cover the FMA latency times the
//! number of FMA pipes (4 cycles × 2 pipes = 8 in flight on Zen 2–4 and Skylake for ymm;
//! 4 × 2 on Skylake-SP's two 512-bit ports, 4 × 1 on Zen 4's double-pumped zmm). 1 thread
//! and N threads run the same loop, started together; a run's figure is the FLOPs of all
//! threads over the time from the start to the last thread's end, and [`measure`] reports
//! the median of several runs after a warm-up.
//!
//! The bf16 loops are built the same way: [`AVX512_BF16_ACCUMULATORS`] zmm accumulators
//! each taking one `vdpbf16ps` per iteration (16 lanes × 2 products × 2 = 64 FLOPs), and
//! [`AMX_ACCUMULATORS`] accumulator tiles each taking one `tdpbf16ps` per iteration from
//! two source tiles loaded once before the loop (16 × 16 outputs × 32 products × 2 =
//! 16,384 FLOPs). A unit this CPU lacks (or the OS did not enable) is
//! [`PeakError::Unit`], never an illegal instruction.

use crate::features::{self, Isa, IsaError};
use std::hint::black_box;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Independent ymm accumulators of the AVX2 loop.
pub const AVX2_ACCUMULATORS: usize = 12;
/// Independent zmm accumulators of the AVX-512 loop.
pub const AVX512_ACCUMULATORS: usize = 16;

/// Independent zmm accumulators of the AVX-512-BF16 loop.
pub const AVX512_BF16_ACCUMULATORS: usize = 16;
/// Independent accumulator tiles of the AMX loop (the other four of the eight tiles are
/// its sources, each accumulator taking a different pair of them, as in a 2 × 2 GEMM
/// block; six accumulators sharing two sources run at half this rate).
pub const AMX_ACCUMULATORS: usize = 4;
/// FLOPs of one `tdpbf16ps` on full 16 × 64-byte tiles.
pub const AMX_TILE_FLOPS: u64 = 16 * 16 * 32 * 2;

/// The unit a peak is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeakUnit {
    /// f32 fused multiply-adds on the path's vector registers.
    Fma(Isa),
    /// `vdpbf16ps` on zmm registers.
    Avx512Bf16,
    /// `tdpbf16ps` on AMX tiles.
    AmxBf16,
}

impl PeakUnit {
    /// The bf16 units, the wider first.
    pub const BF16: [PeakUnit; 2] = [PeakUnit::AmxBf16, PeakUnit::Avx512Bf16];

    /// `avx512`, `avx2`, `scalar` (the FMA paths, as [`Isa::name`]), `avx512-bf16`, `amx-bf16`.
    pub fn name(self) -> &'static str {
        match self {
            PeakUnit::Fma(isa) => isa.name(),
            PeakUnit::Avx512Bf16 => "avx512-bf16",
            PeakUnit::AmxBf16 => "amx-bf16",
        }
    }

    /// Parses a name of [`PeakUnit::name`] (an FMA path as [`Isa::parse`] accepts it).
    pub fn parse(s: &str) -> Option<PeakUnit> {
        match s.trim().to_ascii_lowercase().as_str() {
            "avx512-bf16" | "avx512bf16" => Some(PeakUnit::Avx512Bf16),
            "amx-bf16" | "amx" | "amxbf16" => Some(PeakUnit::AmxBf16),
            _ => Isa::parse(s).ok().flatten().map(PeakUnit::Fma),
        }
    }

    /// The vector path the unit's loop is compiled for (the bf16 units need AVX-512).
    pub fn isa(self) -> Isa {
        match self {
            PeakUnit::Fma(isa) => isa,
            PeakUnit::Avx512Bf16 | PeakUnit::AmxBf16 => Isa::Avx512,
        }
    }

    /// Independent accumulators (registers or tiles) of the unit's loop; `None` for the
    /// scalar path (no FMA loop).
    pub fn accumulators(self) -> Option<usize> {
        match self {
            PeakUnit::Fma(isa) => accumulators(isa),
            PeakUnit::Avx512Bf16 => Some(AVX512_BF16_ACCUMULATORS),
            PeakUnit::AmxBf16 => Some(AMX_ACCUMULATORS),
        }
    }

    /// FLOPs one thread does per loop iteration (one instruction per accumulator).
    pub fn flops_per_iteration(self) -> Option<u64> {
        let acc = self.accumulators()? as u64;
        Some(match self {
            PeakUnit::Fma(isa) => acc * isa.lanes() as u64 * 2,
            PeakUnit::Avx512Bf16 => acc * 16 * 2 * 2,
            PeakUnit::AmxBf16 => acc * AMX_TILE_FLOPS,
        })
    }

    /// Whether features `f` run the unit's loop; the error names what is missing.
    pub fn check(self, f: &features::CpuFeatures) -> Result<(), PeakError> {
        let missing = match self {
            PeakUnit::Fma(isa) => {
                f.check(isa)?;
                return if accumulators(isa).is_some() { Ok(()) } else { Err(PeakError::NoFma(isa)) };
            }
            PeakUnit::Avx512Bf16 if !f.avx512bf16 => "AVX-512-BF16",
            PeakUnit::AmxBf16 if !f.amx_bf16 => "AMX-BF16 enabled by the OS (and NPURT_AMX not off)",
            _ => return Ok(()),
        };
        Err(PeakError::Unit { unit: self.name(), missing })
    }
}

impl std::fmt::Display for PeakUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Iterations of the calibration run that sizes the timed runs.
const CALIBRATION_ITERS: u64 = 1 << 18;

/// Why a peak could not be measured.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PeakError {
    #[error("{0}")]
    Isa(#[from] IsaError),
    #[error("the {0} path has no FMA instructions to measure a peak with (measure avx2 or avx512)")]
    NoFma(Isa),
    #[error("the {unit} peak cannot be measured here: this CPU lacks {missing}")]
    Unit { unit: &'static str, missing: &'static str },
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    #[error("starting a measuring thread: {0}")]
    Spawn(String),
}

/// One measured peak (plain data: Send and Sync).
#[derive(Clone, Debug, PartialEq)]
pub struct Peak {
    pub unit: PeakUnit,
    /// The vector path of the loop ([`PeakUnit::isa`]).
    pub isa: Isa,
    pub threads: usize,
    /// Independent accumulators per thread.
    pub accumulators: usize,
    /// GFLOP/s of each timed run, in order.
    pub runs: Vec<f64>,
    /// The median of `runs` (the upper one of an even count).
    pub gflops: f64,
    /// Loop iterations per thread and run (each is one instruction per accumulator).
    pub iterations: u64,
}

impl Peak {
    /// FLOPs one thread does per loop iteration of the FMA loop of `isa`.
    pub fn flops_per_iteration(isa: Isa) -> Option<u64> {
        PeakUnit::Fma(isa).flops_per_iteration()
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

/// The bf16 units this CPU can measure, the wider first.
pub fn measurable_bf16() -> Vec<PeakUnit> {
    PeakUnit::BF16.into_iter().filter(|u| u.check(features::get()).is_ok()).collect()
}

/// Measures the FMA peak of `isa` on `threads` threads (see [`measure_unit`]).
pub fn measure(isa: Isa, threads: usize, runs: usize, run_time: Duration) -> Result<Peak, PeakError> {
    measure_unit(PeakUnit::Fma(isa), threads, runs, run_time)
}

/// Measures the peak of `unit` on `threads` threads: one warm-up, then `runs` runs of
/// about `run_time` each; GFLOP/s of all threads together.
pub fn measure_unit(unit: PeakUnit, threads: usize, runs: usize, run_time: Duration) -> Result<Peak, PeakError> {
    if threads == 0 {
        return Err(PeakError::Zero { what: "threads" });
    }
    if runs == 0 {
        return Err(PeakError::Zero { what: "runs" });
    }
    unit.check(features::get())?;
    let (Some(acc), Some(per_iter)) = (unit.accumulators(), unit.flops_per_iteration()) else {
        return Err(PeakError::NoFma(unit.isa()));
    };
    // Size the runs from one thread's speed (warming the vector unit up on the way).
    let mut cal = timed_run(unit, 1, CALIBRATION_ITERS)?;
    if cal < Duration::from_millis(1) {
        cal = timed_run(unit, 1, CALIBRATION_ITERS)?;
    }
    let scale = run_time.as_secs_f64() / cal.as_secs_f64().max(1e-9);
    let iterations = ((CALIBRATION_ITERS as f64 * scale) as u64).clamp(1 << 12, 1 << 36);
    timed_run(unit, threads, iterations)?;
    let flops = (per_iter * iterations) as f64 * threads as f64;
    let mut figures = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = timed_run(unit, threads, iterations)?;
        figures.push(flops / t.as_secs_f64().max(1e-12) / 1e9);
    }
    let gflops = crate::kernels::common::upper_median(figures.clone());
    Ok(Peak { unit, isa: unit.isa(), threads, accumulators: acc, runs: figures, gflops, iterations })
}

/// Start states of a run: threads spin until `GO`, or leave on `ABORT`.
const WAIT: u8 = 0;
const GO: u8 = 1;
const ABORT: u8 = 2;

/// One run of `iterations` on `threads` threads (the caller's among them), started
/// together: the time from the start to the last thread's end.
fn timed_run(unit: PeakUnit, threads: usize, iterations: u64) -> Result<Duration, PeakError> {
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
        black_box(unit_loop(unit, iterations));
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

/// `iterations` rounds of the loop of `unit` on this thread; returns the accumulators' sum
/// (so the work cannot be optimised away). The caller checked the unit ([`PeakUnit::check`]).
fn unit_loop(unit: PeakUnit, iterations: u64) -> f32 {
    match unit {
        PeakUnit::Fma(isa) => fma_loop(isa, iterations, black_box(0.999_999_9)),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `measure_unit` checked AVX-512-BF16 (with AVX-512F) on this CPU; the loop
        // touches no memory.
        PeakUnit::Avx512Bf16 => unsafe { x86::dpbf16_avx512::<AVX512_BF16_ACCUMULATORS>(iterations) },
        #[cfg(target_arch = "x86_64")]
        PeakUnit::AmxBf16 => {
            // SAFETY: `measure_unit` checked that the OS enabled AMX for this process.
            let _tiles = unsafe { crate::kernels::gemm_bf16::Tiles::configure() };
            // SAFETY: tiles configured on this thread just above.
            unsafe { x86::tdpbf16_loop(iterations) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => 0.0,
    }
}

/// The FMA loop of `isa` (see [`unit_loop`]).
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

    /// `acc += a · b` by `vdpbf16ps` on `N` independent zmm accumulators, every bf16 of
    /// `a` and `b` 1/64: each instruction adds exactly 1/2048 to every lane.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) fn dpbf16_avx512<const N: usize>(iterations: u64) -> f32 {
        // bf16 1/64 is 0x3c80; two per 32-bit lane.
        let v: __m512bh = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0 / 64.0), _mm512_set1_ps(1.0 / 64.0));
        let (a, b) = (std::hint::black_box(v), std::hint::black_box(v));
        let mut acc = [_mm512_setzero_ps(); N];
        for _ in 0..iterations {
            for c in acc.iter_mut() {
                *c = _mm512_dpbf16_ps(*c, a, b);
            }
        }
        let mut sum = _mm512_setzero_ps();
        for c in acc {
            sum = _mm512_add_ps(sum, c);
        }
        _mm512_reduce_add_ps(sum)
    }

    /// `tdpbf16ps` into [`super::AMX_ACCUMULATORS`] (4) accumulator tiles tmm0–tmm3, each
    /// from its own pair of the sources tmm4–tmm7, every bf16 of which is 1/64 (each
    /// instruction adds 32 · 1/4096 = 1/128 to each of its 256 outputs); returns the sum of
    /// all outputs.
    ///
    /// # Safety
    /// Tiles configured on this thread as 16 rows × 64 bytes
    /// ([`crate::kernels::gemm_bf16::Tiles::configure`]).
    pub(super) unsafe fn tdpbf16_loop(iterations: u64) -> f32 {
        use std::arch::asm;
        #[repr(C, align(64))]
        struct Buf([u32; 256]);
        let src = Buf([0x3c80_3c80; 256]);
        let mut out = Buf([0; 256]);
        let mut sum = 0f32;
        // SAFETY: the tiles are configured (the caller's contract); the loads read the 1 KiB
        // of `src` (16 rows of 64 bytes), the stores write the 1 KiB of `out`.
        unsafe {
            asm!(
                "tileloadd tmm4, [{s} + {st}*1]",
                "tileloadd tmm5, [{s} + {st}*1]",
                "tileloadd tmm6, [{s} + {st}*1]",
                "tileloadd tmm7, [{s} + {st}*1]",
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                s = in(reg) src.0.as_ptr(), st = in(reg) 64usize,
                options(nostack, readonly)
            );
            let mut n = iterations;
            while n > 0 {
                asm!(
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    options(nostack, nomem)
                );
                n -= 1;
            }
            macro_rules! drain {
                ($($t:literal)*) => {$(
                    asm!(concat!("tilestored [{o} + {st}*1], tmm", $t), o = in(reg) out.0.as_mut_ptr(), st = in(reg) 64usize, options(nostack));
                    sum += out.0.iter().map(|&w| f32::from_bits(w)).sum::<f32>();
                )*};
            }
            drain!(0 1 2 3);
        }
        sum
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
    fn the_bf16_loops_do_exactly_the_flops_they_count() {
        let units = measurable_bf16();
        if units.is_empty() {
            println!("SKIP: this CPU has neither AVX-512-BF16 nor AMX-BF16");
        }
        for unit in units {
            // Every product is 1/64 · 1/64 and each output gains exactly 2 or 32 of them per
            // instruction: the sum of all outputs is the loop's FLOPs / 2 / 4096.
            let iters = 1000;
            let got = unit_loop(unit, iters) as f64;
            let want = (unit.flops_per_iteration().unwrap() * iters) as f64 / 2.0 / 4096.0;
            assert_eq!(got, want, "{unit}");
        }
        assert_eq!(PeakUnit::AmxBf16.flops_per_iteration(), Some(4 * 16384));
        assert_eq!(PeakUnit::Avx512Bf16.flops_per_iteration(), Some(16 * 64));
        assert_eq!(PeakUnit::Fma(Isa::Avx512).flops_per_iteration(), Some(16 * 32));
        assert_eq!(Peak::flops_per_iteration(Isa::Avx2Fma), Some(12 * 16));
        for u in [PeakUnit::AmxBf16, PeakUnit::Avx512Bf16, PeakUnit::Fma(Isa::Avx2Fma)] {
            assert_eq!(PeakUnit::parse(u.name()), Some(u));
        }
        assert_eq!(PeakUnit::parse("avx1024"), None);
    }

    #[test]
    fn a_unit_the_cpu_lacks_is_a_typed_error_before_any_instruction() {
        // Features without the bf16 units: the check refuses them, naming what is missing.
        let f = features::CpuFeatures { avx512bf16: false, amx_bf16: false, ..features::get().clone() };
        assert_eq!(
            PeakUnit::AmxBf16.check(&f),
            Err(PeakError::Unit { unit: "amx-bf16", missing: "AMX-BF16 enabled by the OS (and NPURT_AMX not off)" })
        );
        assert_eq!(
            PeakUnit::Avx512Bf16.check(&f),
            Err(PeakError::Unit { unit: "avx512-bf16", missing: "AVX-512-BF16" })
        );
        // On this CPU: measured where present, the same typed error where not.
        let ms = Duration::from_millis(2);
        for unit in PeakUnit::BF16 {
            match unit.check(features::get()) {
                Ok(()) => {
                    let p = measure_unit(unit, 1, 1, ms).expect("peak");
                    assert!(p.gflops > 0.0 && p.unit == unit && p.isa == Isa::Avx512, "{p:?}");
                }
                Err(e) => {
                    println!("SKIP measuring {unit}: {e}");
                    assert_eq!(measure_unit(unit, 1, 1, ms), Err(e));
                }
            }
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

    #[test]
    fn each_bf16_kernel_this_cpu_has_reports_a_positive_rate_against_its_peak() {
        for (amx, unit) in [(true, PeakUnit::AmxBf16), (false, PeakUnit::Avx512Bf16)] {
            let Some(r) = crate::kernels::gemm_bf16::kernel_rate(amx, Duration::from_millis(20), 3) else {
                println!("SKIP {unit}: not offered on this CPU");
                assert!(unit.check(crate::features::get()).is_err());
                continue;
            };
            assert!(r.in_cache_gflops.is_finite() && r.in_cache_gflops > 0.0, "{r:?}");
            assert!(r.kernel.contains(&format!("{}x", r.rows)) && r.cols % 32 == 0, "{r:?}");
            let peak = measure_unit(unit, 1, 3, Duration::from_millis(20)).unwrap().gflops;
            println!(
                "{}: {:.0} GF/s, {unit} peak {peak:.0} GF/s ({:.0} %)",
                r.kernel,
                r.in_cache_gflops,
                100.0 * r.in_cache_gflops / peak
            );
        }
    }
}
