//! `npurt_runtime`: making one, what it reports (devices, units, memory), synchronising
//! and releasing cached memory.

use crate::error::{
    CResult, Fail, NPURT_ERR_BACKEND_UNAVAILABLE, NPURT_ERR_INVALID_ARGUMENT, NPURT_ERR_OUT_OF_MEMORY, guard,
    npurt_status,
};
use crate::ffi::{opt_str_arg, out_ptr, write, write_text};
use crate::handles::{Kind, Object, get, insert, release};
use crate::options::runtime_config;
use std::ffi::c_char;

/// A runtime over one backend and its visible devices. Opaque; made by
/// `npurt_runtime_new`, freed by `npurt_runtime_free`. Send and Sync (a `Runtime`).
pub struct npurt_runtime {
    pub(crate) rt: npurt::Runtime,
}

impl Object for npurt_runtime {
    const KIND: Kind = Kind::Runtime;
}

/// Every statistic of one device's memory pool, and the device's memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct npurt_memory_info {
    /// Device memory size in bytes (0 when unknown).
    pub total_bytes: u64,
    /// Free device memory according to the driver; -1 when unknown.
    pub system_free_bytes: i64,
    /// Bytes the pool holds from the system (segments).
    pub pool_bytes: u64,
    /// Bytes in blocks handed out to tensors.
    pub in_use_bytes: u64,
    /// Bytes held but not handed out (free plus pending blocks).
    pub cached_bytes: u64,
    /// Bytes of large requests served directly from the system, in use.
    pub system_bytes: u64,
    /// Highest `in_use_bytes` seen.
    pub peak_in_use_bytes: u64,
    /// Highest `pool_bytes` seen.
    pub peak_pool_bytes: u64,
    /// Largest block that could be handed out now without asking the system.
    pub largest_free_block: u64,
    /// `1 - largest_free_block / free bytes` (0 when nothing is free).
    pub fragmentation: f64,
    /// Blocks waiting for queued work before they can be reused.
    pub pending_blocks: u64,
    /// Segments the pool holds.
    pub segments: u64,
    /// Calls to the backend's allocator so far.
    pub system_allocations: u64,
    /// Requests served from the cache so far.
    pub cache_hits: u64,
    /// Requests served so far.
    pub allocations: u64,
    /// The pool's limit in bytes; 0 when it has none.
    pub limit_bytes: u64,
}

/// Makes a runtime. `options` is NULL or `"key=value;..."` with the keys `backend` (`cpu`,
/// `cuda`, `acl`, `auto`), `devices` (`0,2`), `cpu_devices`, `threads`, `pool_limit`
/// (`512M`), `alignment`, `memory_reuse` (`on`/`off`), `max_streams`, `scheduling`
/// (`latency`/`throughput`/`balanced`), `hw_mapping` (`auto`/`cube_prefer`/`vector_prefer`)
/// and `precision` (`f32`, `bf16`, ...), each with the syntax of its `NPURT_*` environment
/// variable; options override the environment, which overrides the defaults. Unknown
/// keys are rejected. `NPURT_ERR_BACKEND_UNAVAILABLE` when the backend asked for is not
/// present. On success `*out` is the new runtime.
///
/// # Safety
/// `options` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_runtime_new(options: *const c_char, out: *mut *mut npurt_runtime) -> npurt_status {
    guard(|| {
        out_ptr(out, "out")?;
        // SAFETY: `options` is NULL or NUL-terminated (the caller's contract).
        let options = unsafe { opt_str_arg(options, "options") }?;
        let config = runtime_config(options)?;
        let rt = npurt::Runtime::with_config(config).map_err(|e| {
            let mut f = Fail::from(e);
            if f.status != NPURT_ERR_INVALID_ARGUMENT && f.status != NPURT_ERR_OUT_OF_MEMORY {
                f.status = NPURT_ERR_BACKEND_UNAVAILABLE;
            }
            f
        })?;
        let h = insert(npurt_runtime { rt })?;
        // SAFETY: `out` was checked non-NULL; the caller guarantees it is writable.
        unsafe { write(out, h) };
        Ok(())
    })
}

/// Frees a runtime (NULL is accepted: `NPURT_OK`). Tensors, streams, events, graphs and
/// embedders made from it stay valid: each keeps what it needs alive until it is freed
/// itself. A handle already freed, or not a runtime, is `NPURT_ERR_INVALID_HANDLE`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_runtime_free(rt: *mut npurt_runtime) -> npurt_status {
    guard(|| {
        drop(release(rt, "runtime")?);
        Ok(())
    })
}

/// The runtime's backend, devices and their units as JSON:
/// `{"backend":"cpu","devices":[{"index":0,"label":"cpu:0","name":...,"memory_bytes":...,
/// "host_shared":true,"units":[{"label":...,"class":"Cube","peak_flops":...,
/// "peak_bytes_per_s":...}]}]}`. A size query: `*needed` (when `needed` is not NULL) is
/// set to the length plus the terminating NUL; with `buf == NULL` or `len == 0` nothing
/// is written and `NPURT_OK` returned; with `len` too small, `NPURT_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes; `needed` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_runtime_info(
    rt: *const npurt_runtime,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        let text = info_json(rt)?;
        // SAFETY: `buf`/`needed` as the caller guarantees.
        unsafe { write_text(&text, buf, len, needed) }
    })
}

fn info_json(rt: &npurt::Runtime) -> CResult<String> {
    let mut devices = Vec::new();
    for d in 0..rt.device_count() {
        let info = rt.device_info(d)?;
        let units: Vec<serde_json::Value> = info
            .units
            .iter()
            .map(|u| {
                serde_json::json!({
                    "label": u.unit.label,
                    "class": u.unit.class.name(),
                    "peak_flops": u.peak_flops,
                    "peak_bytes_per_s": u.peak_bytes_per_s,
                })
            })
            .collect();
        devices.push(serde_json::json!({
            "index": d,
            "label": rt.device_label(d),
            "name": info.name,
            "memory_bytes": info.memory_bytes,
            "host_shared": info.host_shared,
            "units": units,
        }));
    }
    Ok(serde_json::json!({ "backend": rt.backend_name(), "devices": devices }).to_string())
}

/// The number of visible devices.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_device_count(rt: *const npurt_runtime, out: *mut i32) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        out_ptr(out, "out")?;
        let n = i32::try_from(rt.device_count()).unwrap_or(i32::MAX);
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, n) };
        Ok(())
    })
}

/// The device index as the runtime takes it.
pub(crate) fn device_index(rt: &npurt::Runtime, device: i32) -> CResult<usize> {
    usize::try_from(device).ok().filter(|&d| d < rt.device_count()).ok_or_else(|| {
        Fail::new(
            crate::error::NPURT_ERR_DEVICE,
            format!("device {device} does not exist ({} has {} visible)", rt.backend_name(), rt.device_count()),
        )
    })
}

/// Waits for all work queued on `device` (every stream); reports the first failure of
/// queued work.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_synchronize(rt: *mut npurt_runtime, device: i32) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        let d = device_index(rt, device)?;
        Ok(rt.synchronize(d)?)
    })
}

/// Returns the memory `device`'s pool caches (free blocks) to the system.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_release_cached(rt: *mut npurt_runtime, device: i32) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        let d = device_index(rt, device)?;
        rt.release_cached(d)?;
        Ok(())
    })
}

/// Fills `*out` with `device`'s memory figures and every pool statistic.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_get_memory_info(
    rt: *const npurt_runtime,
    device: i32,
    out: *mut npurt_memory_info,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        out_ptr(out, "out")?;
        let d = device_index(rt, device)?;
        let m = rt.memory_info(d)?;
        let s = rt.pool_stats(d)?;
        let info = npurt_memory_info {
            total_bytes: m.total_bytes,
            system_free_bytes: m.system_free_bytes.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
            pool_bytes: s.total_bytes as u64,
            in_use_bytes: s.in_use_bytes as u64,
            cached_bytes: s.cached_bytes as u64,
            system_bytes: s.system_bytes as u64,
            peak_in_use_bytes: s.peak_in_use_bytes as u64,
            peak_pool_bytes: s.peak_total_bytes as u64,
            largest_free_block: s.largest_free_block as u64,
            fragmentation: s.fragmentation,
            pending_blocks: s.pending_blocks as u64,
            segments: s.segments as u64,
            system_allocations: s.system_allocations,
            cache_hits: s.cache_hits,
            allocations: s.allocations,
            limit_bytes: s.limit_bytes.map_or(0, |l| l as u64),
        };
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, info) };
        Ok(())
    })
}
