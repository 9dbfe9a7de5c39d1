//! Runtime configuration: every knob, its validation and its environment overrides.

use crate::error::{Error, Result};
use crate::kernel::Tier;

/// How the pool picks a cached block for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReuseStrategy {
    /// The smallest cached block that fits (least waste).
    BestFit,
    /// The lowest-addressed cached block that fits (fastest search, more splitting).
    FirstFit,
}

/// How the graph scheduler spreads work over streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduling {
    /// Critical path first, as many streams as help one request finish sooner.
    Latency,
    /// Fewer, fuller streams; more requests in flight.
    Throughput,
    Balanced,
}

/// Hardware-mapping strategy used when choosing among implementations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwMapping {
    /// Best tier first, whatever the unit.
    Auto,
    /// Matrix units (Ascend Cube, tensor cores, FMA GEMM) first.
    CubePrefer,
    /// Vector units first.
    VectorPrefer,
}

/// Precision of the matrix products in compiled graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Everything in the graph's own dtypes.
    F32,
    /// Linear weights stored in bf16 (half the bytes), products on the backend's bf16
    /// unit with f32 accumulation, activations kept in f32. Nodes for which the backend
    /// has no bf16 unit (no kernel whose unit label names bf16) keep their f32 weights.
    Bf16,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Some(Precision::F32),
            "bf16" => Some(Precision::Bf16),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

/// The four optimisation switches of a preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Optimizations {
    /// Allocate through the caching pool (off: every tensor straight from the backend).
    pub memory_pool: bool,
    /// Reuse freed memory (pool cache, graph arenas).
    pub memory_reuse: bool,
    /// Run independent graph nodes on several streams.
    pub parallel_scheduling: bool,
    /// Use fused kernels and the mapping strategy (off: reference mapping, no fusion).
    pub hardware_mapping: bool,
}

impl Optimizations {
    pub const ALL_ON: Optimizations =
        Optimizations { memory_pool: true, memory_reuse: true, parallel_scheduling: true, hardware_mapping: true };
    pub const ALL_OFF: Optimizations =
        Optimizations { memory_pool: false, memory_reuse: false, parallel_scheduling: false, hardware_mapping: false };
}

/// Memory-pool settings.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    /// Most bytes the pool may hold from the system; `None` = the device's memory.
    pub limit_bytes: Option<usize>,
    /// Alignment of every block: a power of two >= 16.
    pub alignment: usize,
    /// Requests up to this size are carved from pooled segments; larger ones are
    /// allocated directly from the system.
    pub small_threshold: usize,
    /// Size of each pooled segment for small requests.
    pub segment_bytes: usize,
    pub reuse: bool,
    pub strategy: ReuseStrategy,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            limit_bytes: None,
            alignment: 64,
            small_threshold: 1 << 20,
            segment_bytes: 2 << 20,
            reuse: true,
            strategy: ReuseStrategy::BestFit,
        }
    }
}

/// Every knob of the runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeConfig {
    /// Backend to use (`cpu`, `cuda`, `acl`); `None` = the best one present.
    pub backend: Option<String>,
    /// Visible device indices; `None` = all.
    pub devices: Option<Vec<usize>>,
    /// Logical devices the CPU backend presents.
    pub cpu_devices: usize,
    pub pool: PoolConfig,
    /// Most user streams per device (graph scheduling and `Runtime::stream`).
    pub max_streams: usize,
    pub scheduling: Scheduling,
    /// Requests per batch in batched submission and the BERT driver.
    pub batch_size: usize,
    pub hw_mapping: HwMapping,
    /// Compute-unit utilisation cap; on the CPU the number of worker threads per device
    /// (`None` = all cores).
    pub threads: Option<usize>,
    pub optimizations: Optimizations,
    /// Forces one implementation tier (validation runs); `None` = automatic.
    pub forced_tier: Option<Tier>,
    /// Precision of compiled graphs' matrix products (env `NPURT_PRECISION`).
    pub precision: Precision,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            backend: None,
            devices: None,
            cpu_devices: 1,
            pool: PoolConfig::default(),
            max_streams: 8,
            scheduling: Scheduling::Balanced,
            batch_size: 1,
            hw_mapping: HwMapping::Auto,
            threads: None,
            optimizations: Optimizations::ALL_ON,
            forced_tier: None,
            precision: Precision::F32,
        }
    }
}

fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.to_ascii_lowercase() {
        ref l if l.ends_with("gib") || l.ends_with('g') => {
            (l.trim_end_matches("gib").trim_end_matches('g').to_string(), 1usize << 30)
        }
        ref l if l.ends_with("mib") || l.ends_with('m') => {
            (l.trim_end_matches("mib").trim_end_matches('m').to_string(), 1 << 20)
        }
        ref l if l.ends_with("kib") || l.ends_with('k') => {
            (l.trim_end_matches("kib").trim_end_matches('k').to_string(), 1 << 10)
        }
        l => (l, 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

impl RuntimeConfig {
    /// Checks every value; the error names the knob and what it accepts.
    pub fn validate(&self) -> Result<()> {
        let a = self.pool.alignment;
        if a < 16 || !a.is_power_of_two() {
            return Err(Error::Config(format!("pool alignment must be a power of two >= 16, got {a}")));
        }
        if self.pool.segment_bytes < self.pool.small_threshold {
            return Err(Error::Config(format!(
                "pool segment size ({}) must be at least the small-allocation threshold ({})",
                self.pool.segment_bytes, self.pool.small_threshold
            )));
        }
        if self.pool.segment_bytes == 0 || self.pool.segment_bytes % a != 0 {
            return Err(Error::Config(format!(
                "pool segment size must be a non-zero multiple of the alignment {a}, got {}",
                self.pool.segment_bytes
            )));
        }
        if self.pool.limit_bytes == Some(0) {
            return Err(Error::Config("pool limit must be > 0 bytes".into()));
        }
        if self.max_streams == 0 || self.max_streams > 1024 {
            return Err(Error::Config(format!("max_streams must be in 1..=1024, got {}", self.max_streams)));
        }
        if self.batch_size == 0 {
            return Err(Error::Config("batch_size must be >= 1".into()));
        }
        if self.cpu_devices == 0 || self.cpu_devices > 64 {
            return Err(Error::Config(format!("cpu_devices must be in 1..=64, got {}", self.cpu_devices)));
        }
        if self.threads == Some(0) {
            return Err(Error::Config("threads must be >= 1".into()));
        }
        if let Some(b) = &self.backend {
            if !matches!(b.as_str(), "cpu" | "cuda" | "acl" | "ascend" | "auto") {
                return Err(Error::Config(format!("backend must be cpu, cuda, acl or auto, got {b:?}")));
            }
        }
        if let Some(d) = &self.devices {
            if d.is_empty() {
                return Err(Error::Config("device list is empty".into()));
            }
        }
        Ok(())
    }

    /// Applies `NPURT_*` environment overrides (see README), then validates.
    pub fn with_env(mut self) -> Result<RuntimeConfig> {
        self.apply_overrides(|k| std::env::var(k).ok())?;
        self.validate()?;
        Ok(self)
    }

    /// Applies overrides read through `get` (an environment lookup in practice).
    pub fn apply_overrides(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<()> {
        let bad = |k: &str, v: &str, want: &str| Error::Config(format!("{k}={v:?}: expected {want}"));
        if let Some(v) = get("NPURT_BACKEND") {
            self.backend = if v == "auto" { None } else { Some(v.to_ascii_lowercase()) };
        }
        if let Some(v) = get("NPURT_DEVICES") {
            let list: std::result::Result<Vec<usize>, _> =
                v.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse()).collect();
            self.devices =
                Some(list.map_err(|_| bad("NPURT_DEVICES", &v, "a comma-separated list of device indices"))?);
        }
        if let Some(v) = get("NPURT_CPU_DEVICES") {
            self.cpu_devices = v.trim().parse().map_err(|_| bad("NPURT_CPU_DEVICES", &v, "a device count"))?;
        }
        if let Some(v) = get("NPURT_THREADS") {
            self.threads = Some(v.trim().parse().map_err(|_| bad("NPURT_THREADS", &v, "a thread count"))?);
        }
        if let Some(v) = get("NPURT_POOL_LIMIT") {
            self.pool.limit_bytes =
                Some(parse_bytes(&v).ok_or_else(|| bad("NPURT_POOL_LIMIT", &v, "a size such as 512M or 8G"))?);
        }
        if let Some(v) = get("NPURT_ALIGNMENT") {
            self.pool.alignment = v.trim().parse().map_err(|_| bad("NPURT_ALIGNMENT", &v, "a power of two >= 16"))?;
        }
        if let Some(v) = get("NPURT_MEMORY_REUSE") {
            self.pool.reuse = parse_bool(&v).ok_or_else(|| bad("NPURT_MEMORY_REUSE", &v, "on or off"))?;
            self.optimizations.memory_reuse = self.pool.reuse;
        }
        if let Some(v) = get("NPURT_MAX_STREAMS") {
            self.max_streams = v.trim().parse().map_err(|_| bad("NPURT_MAX_STREAMS", &v, "a stream count"))?;
        }
        if let Some(v) = get("NPURT_SCHEDULING") {
            self.scheduling = match v.as_str() {
                "latency" => Scheduling::Latency,
                "throughput" => Scheduling::Throughput,
                "balanced" => Scheduling::Balanced,
                _ => {
                    return Err(bad("NPURT_SCHEDULING", &v, "latency, throughput or balanced"));
                }
            };
        }
        if let Some(v) = get("NPURT_HW_MAPPING") {
            self.hw_mapping = match v.as_str() {
                "auto" => HwMapping::Auto,
                "cube_prefer" => HwMapping::CubePrefer,
                "vector_prefer" => HwMapping::VectorPrefer,
                _ => {
                    return Err(bad("NPURT_HW_MAPPING", &v, "auto, cube_prefer or vector_prefer"));
                }
            };
        }
        if let Some(v) = get("NPURT_PRECISION") {
            self.precision = Precision::parse(&v).ok_or_else(|| bad("NPURT_PRECISION", &v, "f32 or bf16"))?;
        }
        if let Some(v) = get("NPURT_IMPL") {
            self.forced_tier = if v == "auto" {
                None
            } else {
                Some(Tier::parse(&v).ok_or_else(|| bad("NPURT_IMPL", &v, "reference, generic, fast or auto"))?)
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_alignment_and_env() {
        let mut c = RuntimeConfig::default();
        c.pool.alignment = 48;
        assert!(c.validate().unwrap_err().to_string().contains("power of two"));
        let mut c = RuntimeConfig::default();
        let e = c.apply_overrides(|k| (k == "NPURT_CPU_DEVICES").then(|| "many".to_string()));
        assert!(e.unwrap_err().to_string().contains("NPURT_CPU_DEVICES"));
        c.apply_overrides(|k| match k {
            "NPURT_POOL_LIMIT" => Some("64M".into()),
            "NPURT_DEVICES" => Some("0,2".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.pool.limit_bytes, Some(64 << 20));
        assert_eq!(c.devices, Some(vec![0, 2]));
    }
}
