//! A runtime configuration from the settings dictionary the Python layer keeps.
//!
//! The Python layer validates each value's type and range first (its messages name the
//! Python setter); [`RuntimeConfig::validate`] then checks the runtime's own bounds.

use crate::errors;
use npurt::{HwMapping, Precision, ReuseStrategy, RuntimeConfig, Scheduling, Tier};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn get<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract::<T>().map_err(Into::into)?)),
    }
}

/// `settings` over the defaults (and the `NPURT_*` environment when `env`).
pub(crate) fn build(py: Python<'_>, settings: &Bound<'_, PyDict>, env: bool) -> PyResult<RuntimeConfig> {
    let mut c = RuntimeConfig::default();
    if env {
        errors::check(py, c.apply_env())?;
    }
    let bad = |k: &str, v: &str| errors::invalid(py, "config", format!("{k}: unknown value {v:?}"));
    if let Some(b) = get::<String>(settings, "backend")? {
        c.backend = if b == "auto" { None } else { Some(b.to_ascii_lowercase()) };
    }
    if let Some(d) = get::<Vec<usize>>(settings, "devices")? {
        c.devices = Some(d);
    }
    if let Some(n) = get::<usize>(settings, "cpu_devices")? {
        c.cpu_devices = n;
    }
    if let Some(n) = get::<usize>(settings, "threads")? {
        c.threads = Some(n);
    }
    if let Some(v) = get::<bool>(settings, "memory_pool")? {
        c.optimizations.memory_pool = v;
    }
    if let Some(v) = get::<bool>(settings, "memory_reuse")? {
        c.optimizations.memory_reuse = v;
        c.pool.reuse = v;
    }
    if let Some(v) = get::<bool>(settings, "parallel_scheduling")? {
        c.optimizations.parallel_scheduling = v;
    }
    if let Some(v) = get::<bool>(settings, "hardware_mapping")? {
        c.optimizations.hardware_mapping = v;
        // "default" mapping: the generic kernels everywhere (as the ablation's baseline).
        c.forced_tier = if v { None } else { Some(Tier::Generic) };
    }
    if let Some(t) = get::<String>(settings, "impl")? {
        c.forced_tier = if t == "auto" { None } else { Some(Tier::parse(&t).ok_or_else(|| bad("impl", &t))?) };
    }
    if let Some(b) = get::<usize>(settings, "pool_limit_bytes")? {
        c.pool.limit_bytes = Some(b);
    }
    if let Some(a) = get::<usize>(settings, "alignment")? {
        c.pool.alignment = a;
    }
    if let Some(s) = get::<String>(settings, "reuse_strategy")? {
        c.pool.strategy = match s.as_str() {
            "best_fit" => ReuseStrategy::BestFit,
            "first_fit" => ReuseStrategy::FirstFit,
            _ => return Err(bad("reuse_strategy", &s)),
        };
    }
    if let Some(n) = get::<usize>(settings, "max_streams")? {
        c.max_streams = n;
    }
    if let Some(s) = get::<String>(settings, "scheduling")? {
        c.scheduling = match s.as_str() {
            "latency" => Scheduling::Latency,
            "throughput" => Scheduling::Throughput,
            "balanced" => Scheduling::Balanced,
            _ => return Err(bad("scheduling", &s)),
        };
    }
    if let Some(n) = get::<usize>(settings, "batch_size")? {
        c.batch_size = n;
    }
    if let Some(s) = get::<String>(settings, "hw_mapping")? {
        c.hw_mapping = match s.as_str() {
            "auto" => HwMapping::Auto,
            "cube_prefer" => HwMapping::CubePrefer,
            "vector_prefer" => HwMapping::VectorPrefer,
            _ => return Err(bad("hw_mapping", &s)),
        };
    }
    if let Some(s) = get::<String>(settings, "precision")? {
        c.precision = Precision::parse(&s).ok_or_else(|| bad("precision", &s))?;
    }
    errors::check(py, c.validate())?;
    Ok(c)
}

/// The configuration as a dictionary (for `Runtime.config()` and reprs).
pub(crate) fn describe<'py>(py: Python<'py>, c: &RuntimeConfig) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("backend", c.backend.clone())?;
    d.set_item("devices", c.devices.clone())?;
    d.set_item("cpu_devices", c.cpu_devices)?;
    d.set_item("threads", c.threads)?;
    d.set_item("memory_pool", c.optimizations.memory_pool)?;
    d.set_item("memory_reuse", c.optimizations.memory_reuse)?;
    d.set_item("parallel_scheduling", c.optimizations.parallel_scheduling)?;
    d.set_item("hardware_mapping", c.optimizations.hardware_mapping)?;
    d.set_item("impl", c.forced_tier.map_or("auto", |t| t.name()))?;
    d.set_item("pool_limit_bytes", c.pool.limit_bytes)?;
    d.set_item("alignment", c.pool.alignment)?;
    d.set_item(
        "reuse_strategy",
        match c.pool.strategy {
            ReuseStrategy::BestFit => "best_fit",
            ReuseStrategy::FirstFit => "first_fit",
        },
    )?;
    d.set_item("max_streams", c.max_streams)?;
    d.set_item(
        "scheduling",
        match c.scheduling {
            Scheduling::Latency => "latency",
            Scheduling::Throughput => "throughput",
            Scheduling::Balanced => "balanced",
        },
    )?;
    d.set_item("batch_size", c.batch_size)?;
    d.set_item(
        "hw_mapping",
        match c.hw_mapping {
            HwMapping::Auto => "auto",
            HwMapping::CubePrefer => "cube_prefer",
            HwMapping::VectorPrefer => "vector_prefer",
        },
    )?;
    d.set_item("precision", c.precision.name())?;
    Ok(d)
}
