//! Dynamic int8 Linear: `c[m×n] = x[m×k] · wᵀ + bias` with the weight quantised once per
//! output channel (symmetric s8, an f32 scale per row of `w`, [`PackedI8`]) and x per row
//! at run time (symmetric s8, an f32 scale per row), i32 accumulation, dequantised
//! (`acc · sx[i] · sw[j] + bias[j]`, in f32) as it is stored. A compiled graph's
//! `int8` precision packs each Linear's constant weight into this form at compile time.
//!
//! Three paths compute the same i32 sums, so they agree exactly before dequantisation:
//!
//! * [`Path::Amx`] — AMX-INT8 `tdpbssd` (s8 × s8): 32 × 32 blocks in four accumulator
//!   tiles over the whole k (`amx.rs`; `MAX_K` keeps every i32 sum exact), tile loads
//!   software-pipelined, the next group of panels prefetched into L2; x quantised straight
//!   into tile-ready blocks of 32 rows;
//! * [`Path::Vnni`] — AVX-512-VNNI `vpdpbusd` (u8 × s8): x is stored plus 128 as u8, and
//!   the panel's per-column `128 · Σ_k q` ([`PackedI8`]'s compensation) is taken off each
//!   sum; 8 × 32 register tiles (`vnni.rs`);
//! * [`Path::Scalar`] — plain loops over the same layouts, the reference of the tests.
//!
//! x is quantised in one pass into the layout its unit reads, into a buffer each thread
//! keeps between products (no allocation per call). Work is cut by panels of [`NR`] output
//! columns, one range per thread (both threads busy at m = 32 and 128). Rows of x holding ±inf or NaN give NaN rows (their scale is not
//! defined). Files: `pack.rs` the layouts and quantisation, `amx.rs`, `vnni.rs` the units.

#[cfg(target_arch = "x86_64")]
mod amx;
mod pack;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod vnni;

pub use pack::{KSTEP, MAX_K, NR, PackedI8};

use crate::features::CpuFeatures;
use pack::{GROUP_ROWS, QuantisedX, bytes, has_avx512bw, with_quantised};
use runtime::KernelError;

/// The unit an int8 product runs on. Send and Sync (a plain enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// AMX-INT8 tiles.
    Amx,
    /// AVX-512-VNNI dot products.
    Vnni,
    /// Plain loops (tests; never chosen by [`Path::best`]).
    Scalar,
}

impl Path {
    /// The unit's label (the kernel reports it in logs and benchmarks).
    pub fn name(self) -> &'static str {
        match self {
            Path::Amx => "amx-int8",
            Path::Vnni => "avx512-vnni",
            Path::Scalar => "scalar-int8",
        }
    }

    /// Whether this path runs on features `f`: AMX needs AMX-INT8 with the tiles enabled
    /// for the process (`f.amx_int8`: the OS allowed them and `NPURT_AMX` is not off);
    /// VNNI needs the AVX-512 path (not forced below it) and AVX-512-VNNI.
    pub fn available(self, f: &CpuFeatures) -> bool {
        let vnni = f.isa == crate::features::Isa::Avx512 && has_avx512bw() && f.detected.contains(&"avx512vnni");
        match self {
            Path::Amx => cfg!(target_arch = "x86_64") && f.amx_int8,
            Path::Vnni => cfg!(target_arch = "x86_64") && vnni,
            Path::Scalar => true,
        }
    }

    /// The fastest int8 unit of `f`, or `None` where it has neither AMX-INT8 nor
    /// AVX-512-VNNI (int8 products would be slower than f32 there).
    pub fn best(f: &CpuFeatures) -> Option<Path> {
        [Path::Amx, Path::Vnni].into_iter().find(|p| p.available(f))
    }

    /// The path for a product of `m` rows: [`Path::best`], except that fewer than 16 rows
    /// (a decode step) go to VNNI where it exists (an AMX block would be mostly padding).
    pub fn for_rows(f: &CpuFeatures, m: usize) -> Option<Path> {
        match Path::best(f)? {
            Path::Amx if m < 16 && Path::Vnni.available(f) => Some(Path::Vnni),
            p => Some(p),
        }
    }
}

/// Whether `path`, asked for with features `f`, runs on this CPU (`detected`):
/// `CpuFeatures`' fields are public, and one built by hand could claim AMX-INT8 or
/// AVX-512-VNNI where the CPU (or the OS) does not offer them; their instructions would
/// then fault. The scalar path runs everywhere.
fn check_units(path: Path, f: &CpuFeatures, detected: &CpuFeatures) -> Result<(), KernelError> {
    if path.available(f) && path.available(detected) {
        return Ok(());
    }
    Err(KernelError::MissingFeature(match path {
        Path::Amx => "AMX-INT8 (enabled by the OS)",
        _ => "AVX-512-VNNI",
    }))
}

/// Why this CPU has no int8 path, or `None` when it has one.
pub fn missing(f: &CpuFeatures) -> Option<String> {
    if Path::best(f).is_some() {
        return None;
    }
    if f.detected.contains(&"avx512vnni") && f.isa != crate::features::Isa::Avx512 {
        return Some("the CPU ISA is forced below avx512, so AVX-512-VNNI is not used".into());
    }
    Some("this CPU has neither AMX-INT8 nor AVX-512-VNNI".into())
}

/// The output pointer shared by the tasks, each writing its own columns.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: tasks write disjoint column ranges of the output (one range of panels each) and
// the caller holds the `&mut` to the whole output for the call.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

/// What every task reads.
struct Product<'a> {
    m: usize,
    w: &'a PackedI8,
    x: &'a QuantisedX,
    bias: Option<&'a [f32]>,
    c: Out,
}

/// `c[m×n] = x[m×k] · wᵀ + bias` on `path` (see the module). `x` and `c` row-major and
/// contiguous; `threads` the budget (each takes a range of panels).
#[allow(clippy::too_many_arguments)]
pub fn linear(
    f: &CpuFeatures,
    path: Path,
    m: usize,
    x: &[f32],
    w: &PackedI8,
    bias: Option<&[f32]>,
    c: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    let (n, k, kp) = (w.n, w.k, w.kp);
    let short = |what: &str| KernelError::Internal(format!("int8 linear: {what} too short for {m}x{k}x{n}"));
    let mk = m.checked_mul(k).ok_or_else(|| short("x"))?;
    let mn = m.checked_mul(n).ok_or_else(|| short("c"))?;
    if x.len() < mk {
        return Err(short("x"));
    }
    if c.len() < mn {
        return Err(short("c"));
    }
    if bias.is_some_and(|b| b.len() < n) {
        return Err(short("bias"));
    }
    check_units(path, f, crate::features::get())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    // k = 0: no sums to take (every output is its bias), on the plain loops.
    let path = if kp == 0 { Path::Scalar } else { path };
    let rows = if path == Path::Amx { m.div_ceil(GROUP_ROWS) * GROUP_ROWS } else { m };
    with_quantised(|xq| {
        xq.quantise(x, (m, k, kp), rows, path == Path::Amx, path == Path::Vnni, threads);
        let panels = n.div_ceil(NR);
        // Below about 1 MFLOP a second thread costs more than it saves.
        let tasks = if 2 * m * n * k < 1 << 20 { 1 } else { threads.clamp(1, panels) };
        let per = panels.div_ceil(tasks);
        let p = Product { m, w, x: xq, bias, c: Out(c.as_mut_ptr()) };
        let run = |t: usize| {
            let (p0, p1) = (t * per, ((t + 1) * per).min(panels));
            // SAFETY: task `t` writes only columns of panels `p0..p1` of the `m × n` output
            // `c` (checked long enough above), which no other task writes.
            unsafe { task(path, &p, p0, p1) }
        };
        if tasks > 1 {
            use rayon::prelude::*;
            (0..tasks).into_par_iter().for_each(run);
        } else {
            run(0);
        }
    });
    Ok(())
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each thread's sums parked between the k-slices of the AMX product, kept between
    /// products.
    static PARKED: std::cell::Cell<Vec<amx::Block>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Panels `p0..p1` of the product on `path`.
///
/// # Safety
/// `p.c` points to an `m × n` f32 output whose columns of panels `p0..p1` no one else
/// touches during the call; `path` is available on this CPU.
unsafe fn task(path: Path, p: &Product<'_>, p0: usize, p1: usize) {
    let kp = p.w.kp;
    let a = bytes(&p.x.data);
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Amx => {
            // Per group of panels and per k-slice (the whole k up to `amx::KC`), every row
            // block meets every panel of the group (its x slice from L1, the group's
            // slices from L2); the first row block prefetches what the group reads next.
            // Between slices the sums wait in `parked`, each thread's own.
            let blocks = p.m.div_ceil(GROUP_ROWS);
            let slice = amx::slice(kp);
            let mut parked = PARKED.take();
            if slice < kp && parked.len() < blocks * amx::GROUP {
                parked.resize(blocks * amx::GROUP, amx::Block([0; 32 * NR]));
            }
            let mut sums = amx::Block([0; 32 * NR]);
            // SAFETY: AMX enabled and AMX-INT8 present (`path` is available); the guard
            // releases the tiles when the task ends.
            let _tiles = unsafe { crate::kernels::gemm_bf16::Tiles::configure() };
            for g0 in (p0..p1).step_by(amx::GROUP) {
                let g1 = (g0 + amx::GROUP).min(p1);
                for k0 in (0..kp).step_by(slice) {
                    let kc = slice.min(kp - k0);
                    let last = k0 + kc >= kp;
                    for b in 0..blocks {
                        let ab = a[b * GROUP_ROWS * kp + k0 * GROUP_ROWS..].as_ptr();
                        let rows = (p.m - b * GROUP_ROWS).min(GROUP_ROWS);
                        for pi in g0..g1 {
                            let panel = p.w.panel(pi)[k0 * NR..].as_ptr();
                            let next = match (b, last) {
                                (0, false) => panel.wrapping_add(kc * NR),
                                (0, true) if pi + amx::GROUP < p1 => p.w.panel(pi + amx::GROUP).as_ptr(),
                                _ => std::ptr::null(),
                            };
                            let c = if slice < kp { &mut parked[b * amx::GROUP + pi - g0] } else { &mut sums };
                            // x holds rows padded to whole blocks of 32 (`rows` in `linear`)
                            // in the blocked form, so block `b` from byte `k0` holds
                            // `32 · kc` bytes at `ab`; the panel's slice `kc · NR` bytes;
                            // `c` 1024 i32; `kc % KSTEP == 0`, `kc > 0` (`kp > 0`: see
                            // `linear`).
                            // SAFETY: as listed; tiles configured; `next` only prefetched.
                            unsafe { amx::block(kc, ab, panel, next, c.0.as_mut_ptr(), k0 > 0) };
                            if last {
                                // SAFETY: forwarded (this task's columns).
                                unsafe { store(p, &c.0, b * GROUP_ROWS, rows, pi, false) };
                            }
                        }
                    }
                }
            }
            PARKED.set(parked);
        }
        #[cfg(target_arch = "x86_64")]
        Path::Vnni => {
            let mut acc = [0i32; vnni::MR * NR];
            for pi in p0..p1 {
                let panel = p.w.panel(pi);
                for i0 in (0..p.m).step_by(vnni::MR) {
                    let rows = (p.m - i0).min(vnni::MR);
                    // SAFETY: VNNI present (`path` is available); `rows` rows of `kp`
                    // bytes from row `i0` of x, the panel `kp · NR` bytes.
                    unsafe { vnni::tile(rows, kp, a[i0 * kp..].as_ptr(), kp, panel.as_ptr(), &mut acc) };
                    // SAFETY: forwarded (this task's columns).
                    unsafe { store(p, &acc, i0, rows, pi, true) };
                }
            }
        }
        _ => {
            let mut acc = [0i32; NR];
            for pi in p0..p1 {
                let panel = p.w.panel(pi);
                for i in 0..p.m {
                    let row = &a[i * kp..(i + 1) * kp];
                    acc.fill(0);
                    for (g, grp) in panel.chunks_exact(NR * 4).enumerate() {
                        for (j, wj) in grp.chunks_exact(4).enumerate() {
                            for t in 0..4 {
                                acc[j] += row[4 * g + t] as i8 as i32 * wj[t] as i8 as i32;
                            }
                        }
                    }
                    // SAFETY: forwarded (this task's columns).
                    unsafe { store(p, &acc, i, 1, pi, false) };
                }
            }
        }
    }
}

/// Dequantises `rows` rows of i32 sums (`acc`, rows of [`NR`]) for output rows `i0..` and
/// panel `pi` into `p.c`: `acc · sx · sw + bias`, the VNNI offset's share taken off first
/// (`offset`); a row of x that held ±inf or NaN gives NaN.
///
/// # Safety
/// As [`task`], `pi` one of its panels and `i0 + rows ≤ m`.
unsafe fn store(p: &Product<'_>, acc: &[i32], i0: usize, rows: usize, pi: usize, offset: bool) {
    let n = p.w.n;
    let (j0, cols) = (pi * NR, NR.min(n - pi * NR));
    let zeros = [0f32; NR];
    let bias = p.bias.map_or(&zeros[..cols], |b| &b[j0..j0 + cols]);
    let none = [0i32; NR];
    let comp = if offset { &p.w.comp[j0..j0 + cols] } else { &none[..cols] };
    let sw = &p.w.scales[j0..j0 + cols];
    #[cfg(target_arch = "x86_64")]
    if has_avx512bw() {
        let (sx, bad) = (&p.x.scales[i0..i0 + rows], &p.x.bad[i0..i0 + rows]);
        // SAFETY: AVX-512F, BW and VL were detected; `acc` holds `rows` rows of NR i32;
        // `comp`, `sw`, `bias` `cols` values; rows `i0..i0 + rows` × columns
        // `j0..j0 + cols` of the `m × n` output at `p.c` are this task's (contract).
        unsafe { store_block(&acc[..rows * NR], (comp, sw, bias), (sx, bad), p.c.0.add(i0 * n + j0), n) };
        return;
    }
    for r in 0..rows {
        let i = i0 + r;
        // SAFETY: columns `j0..j0 + cols` of row `i < m` lie in this task's part of the
        // `m × n` output (contract).
        let out = unsafe { std::slice::from_raw_parts_mut(p.c.0.add(i * n + j0), cols) };
        if p.x.bad[i] {
            out.fill(f32::NAN);
            continue;
        }
        dequantise(&acc[r * NR..r * NR + cols], comp, p.x.scales[i], sw, bias, out);
    }
}

/// [`dequantise`] of a block of rows (`acc` rows of [`NR`] i32, as many as `sx`) into `out`
/// (row stride `ldc`), `cols = sw.len() ≤ NR` columns; rows flagged `bad` NaN. The same
/// operations in the same order as [`dequantise`], so the same bits.
///
/// # Safety
/// AVX-512F; `comp`, `sw` and `bias` hold `cols` values, `bad` as many as `sx`, `acc`
/// `sx.len() · NR`; `out` is valid for writes of `sx.len()` rows of `cols` at stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_block(
    acc: &[i32],
    (comp, sw, bias): (&[i32], &[f32], &[f32]),
    (sx, bad): (&[f32], &[bool]),
    out: *mut f32,
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let cols = sw.len();
    debug_assert!(cols <= NR && comp.len() == cols && bias.len() == cols && acc.len() >= sx.len() * NR);
    let mask = |from: usize| -> __mmask16 { ((1u32 << cols.saturating_sub(from).min(16)) - 1) as u16 };
    let (m0, m1) = (mask(0), mask(16));
    // SAFETY (loads of comp, sw, bias): `cols` values each (contract), masked to them.
    let (c0, c1, w0, w1, b0, b1) = unsafe {
        (
            _mm512_maskz_loadu_epi32(m0, comp.as_ptr()),
            _mm512_maskz_loadu_epi32(m1, comp.as_ptr().add(16)),
            _mm512_maskz_loadu_ps(m0, sw.as_ptr()),
            _mm512_maskz_loadu_ps(m1, sw.as_ptr().add(16)),
            _mm512_maskz_loadu_ps(m0, bias.as_ptr()),
            _mm512_maskz_loadu_ps(m1, bias.as_ptr().add(16)),
        )
    };
    for (r, (&s, &b)) in sx.iter().zip(bad).enumerate() {
        // SAFETY: row `r` of `out` (contract), masked to `cols`; row `r` of `acc` is NR i32.
        unsafe {
            let dst = out.add(r * ldc);
            if b {
                _mm512_mask_storeu_ps(dst, m0, _mm512_set1_ps(f32::NAN));
                _mm512_mask_storeu_ps(dst.add(16), m1, _mm512_set1_ps(f32::NAN));
                continue;
            }
            let sv = _mm512_set1_ps(s);
            let a = acc.as_ptr().add(r * NR);
            let v0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(a.cast()), c0));
            let v1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(a.add(16).cast()), c1));
            _mm512_mask_storeu_ps(dst, m0, _mm512_add_ps(_mm512_mul_ps(v0, _mm512_mul_ps(sv, w0)), b0));
            _mm512_mask_storeu_ps(dst.add(16), m1, _mm512_add_ps(_mm512_mul_ps(v1, _mm512_mul_ps(sv, w1)), b1));
        }
    }
}

/// `out[j] = (acc[j] - comp[j]) · (sx · sw[j]) + bias[j]` (the subtraction wrapping, as
/// the VNNI sums do), on AVX-512 where the CPU has it.
fn dequantise(acc: &[i32], comp: &[i32], sx: f32, sw: &[f32], bias: &[f32], out: &mut [f32]) {
    #[inline(always)]
    fn body(acc: &[i32], comp: &[i32], sx: f32, sw: &[f32], bias: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (acc, comp, sw, bias) = (&acc[..n], &comp[..n], &sw[..n], &bias[..n]);
        for j in 0..n {
            out[j] = acc[j].wrapping_sub(comp[j]) as f32 * (sx * sw[j]) + bias[j];
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        fn wide(acc: &[i32], comp: &[i32], sx: f32, sw: &[f32], bias: &[f32], out: &mut [f32]) {
            body(acc, comp, sx, sw, bias, out)
        }
        if has_avx512bw() {
            // SAFETY: AVX-512F, BW and VL were detected on this CPU.
            return unsafe { wide(acc, comp, sx, sw, bias, out) };
        }
    }
    body(acc, comp, sx, sw, bias, out)
}

/// The fast tier's Linear when its node was prepared for int8 (`CpuBackend::prepack_int8`):
/// `w` the packed weight, x and the output f32, on the fastest path for its rows.
pub fn linear_node(
    ins: &[super::common::In],
    outs: &mut [super::common::Out],
    ctx: &super::common::Ctx,
    w: &PackedI8,
) -> super::common::KResult {
    use super::common::{load_f32, numel, with_f32_out};
    let (wd, xd) = (ins[1].dims, ins[0].dims);
    if wd != [w.n, w.k] || xd.last() != Some(&w.k) {
        return Err(KernelError::Internal(format!("int8 weight [{}, {}] does not fit {wd:?} and x {xd:?}", w.n, w.k)));
    }
    let x = load_f32(&ins[0])?;
    let bias = match ins.get(2) {
        Some(b) => Some(load_f32(b)?),
        None => None,
    };
    let m = numel(&xd[..xd.len() - 1]);
    let path = Path::for_rows(ctx.features, m).unwrap_or(Path::Scalar);
    with_f32_out(&mut outs[0], |c| linear(ctx.features, path, m, &x, w, bias.as_deref(), c, ctx.threads))
}
