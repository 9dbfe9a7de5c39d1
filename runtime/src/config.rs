//! Runtime configuration: every knob, its validation and its environment overrides.

use crate::env;
use crate::error::{Error, Result};
pub use crate::kernel::HwMapping;
use crate::kernel::Tier;
use std::ffi::OsString;

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
    /// At most two streams, and no more than the backend says pay
    /// ([`crate::Backend::graph_streams`]: one on a CPU device of up to 4 threads). The
    /// default.
    Balanced,
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
    /// Linear weights stored in fp16 once at compile time (half the bytes), products with
    /// fp16 weights and f32 accumulation, activations, LayerNorm and Softmax statistics in
    /// f32. A node the backend can only run with fp16 weights on its reference tier keeps
    /// its f32 weight. On a CPU without AVX-512-FP16 the weights are widened to f32 as each
    /// product reads them (F16C): fp16's rounding, f32's arithmetic.
    F16,
    /// Dynamic int8 products for every Linear whose weight is a constant, where the
    /// backend has an int8 unit ([`crate::Backend::prepack_int8`]: the CPU with AMX-INT8
    /// or AVX-512-VNNI): the weight quantised once at compile time per output channel
    /// (symmetric s8, an f32 scale per row), the activations per row at run time, i32
    /// accumulation, dequantised with the bias in f32. Everything else runs in f32. Where
    /// the backend has no int8 unit, one warning per graph says why and the graph runs
    /// in f32.
    Int8,
    /// The precision the device computes well, chosen per device when a graph is compiled
    /// ([`Precision::resolve`]).
    Auto,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Some(Precision::F32),
            "bf16" => Some(Precision::Bf16),
            "f16" | "fp16" | "half" => Some(Precision::F16),
            "int8" | "i8" => Some(Precision::Int8),
            "auto" => Some(Precision::Auto),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
            Precision::Int8 => "int8",
            Precision::Auto => "auto",
        }
    }
    /// This precision with `Auto` replaced by `auto`, what `Auto` means on the device at
    /// hand ([`crate::Backend::auto_precision`]). Any other precision is returned as it is.
    pub fn resolve(self, auto: Precision) -> Precision {
        match self {
            Precision::Auto => auto,
            p => p,
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
    /// Most bytes the pool may hold from the system; `None` = the device's memory. At
    /// least [`PoolConfig::min_limit`]; below `segment_bytes`, small requests come from
    /// segments the size of the limit.
    pub limit_bytes: Option<usize>,
    /// Alignment of every block: a power of two in 16..=[`MAX_ALIGNMENT`].
    pub alignment: usize,
    /// Requests up to this size are carved from pooled segments; larger ones are
    /// allocated directly from the system.
    pub small_threshold: usize,
    /// Size of each pooled segment for small requests: a multiple of the alignment, at
    /// least `small_threshold`, at most [`MAX_SEGMENT_BYTES`].
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
    /// Logical devices the CPU backend presents, in 1..=[`MAX_CPU_DEVICES`].
    pub cpu_devices: usize,
    pub pool: PoolConfig,
    /// Most user streams per device (graph scheduling and `Runtime::stream`), in
    /// 1..=[`max_streams_bound`].
    pub max_streams: usize,
    pub scheduling: Scheduling,
    /// Requests per batch in batched submission and the BERT driver, in
    /// 1..=[`MAX_BATCH_SIZE`].
    pub batch_size: usize,
    pub hw_mapping: HwMapping,
    /// Compute-unit utilisation cap; on the CPU the number of worker threads per device
    /// (`None` = all cores), in 1..=[`max_threads`] (`max(8 × available cores, 64)`).
    pub threads: Option<usize>,
    pub optimizations: Optimizations,
    /// Forces one implementation tier (validation runs); `None` = automatic.
    pub forced_tier: Option<Tier>,
    /// Precision of compiled graphs' matrix products (env `NPURT_PRECISION`).
    pub precision: Precision,
    /// Whether compiled graphs are captured once and replayed where the backend can
    /// (env `NPURT_ACL_GRAPH_CAPTURE`: `on`, `off` or `auto`, the default).
    pub graph_capture: GraphCapture,
}

/// Graph capture of compiled graphs ([`RuntimeConfig::graph_capture`],
/// [`crate::graph::CompileOptions::graph_capture`]): each arena's launches recorded once
/// by the device runtime (`aclmdlRICaptureBegin`/`End` on Ascend) and replayed as one
/// submission per run. Backends without capture ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GraphCapture {
    /// Capture where the device runtime offers it; where it does not, or capture fails,
    /// run node by node (one log line says why).
    #[default]
    Auto,
    /// Capture, and fail a run that cannot be captured.
    On,
    /// Never capture.
    Off,
}

impl GraphCapture {
    pub fn parse(s: &str) -> Option<GraphCapture> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(GraphCapture::Auto),
            "on" | "1" | "true" => Some(GraphCapture::On),
            "off" | "0" | "false" => Some(GraphCapture::Off),
            _ => None,
        }
    }
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
            precision: Precision::Auto,
            graph_capture: GraphCapture::Auto,
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

/// Largest accepted pool alignment (64 KiB, the largest common page size).
pub const MAX_ALIGNMENT: usize = 64 << 10;
/// Largest accepted pool segment (1 GiB).
pub const MAX_SEGMENT_BYTES: usize = 1 << 30;
/// Most logical devices the CPU backend may present.
pub const MAX_CPU_DEVICES: usize = 64;
/// Largest accepted `batch_size`.
pub const MAX_BATCH_SIZE: usize = 1 << 16;
/// Upper end of [`max_streams_bound`], whatever the core count.
pub const MAX_STREAMS: usize = 1024;

/// Cores this process may use (`std::thread::available_parallelism`, 1 if unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Most worker threads per device `threads` accepts: `max(8 × available cores, 64)`
/// (64 on a 2-core machine, 1024 on 128 cores). More only oversubscribes the cores.
pub fn max_threads() -> usize {
    available_cores().saturating_mul(8).max(64)
}

/// Most user streams per device `max_streams` accepts: `max(8 × available cores, 64)`,
/// at most [`MAX_STREAMS`] (each CPU stream is served by its own threads).
pub fn max_streams_bound() -> usize {
    available_cores().saturating_mul(8).clamp(64, MAX_STREAMS)
}

impl PoolConfig {
    /// Smallest block the pool hands out: one small size class (512 bytes, or the
    /// alignment when it is larger). A limit below it could never serve a request.
    pub fn min_limit(&self) -> usize {
        self.alignment.max(512)
    }

    /// Checks every pool value; the error names the knob and what it accepts.
    ///
    /// * `alignment` (`NPURT_ALIGNMENT`): a power of two in 16..=[`MAX_ALIGNMENT`];
    /// * `segment_bytes`: a multiple of the alignment in alignment..=[`MAX_SEGMENT_BYTES`],
    ///   at least `small_threshold`;
    /// * `limit_bytes` (`NPURT_POOL_LIMIT`): at least [`PoolConfig::min_limit`] bytes; a
    ///   limit below the segment size is served by segments the size of the limit.
    pub fn validate(&self) -> Result<()> {
        let a = self.alignment;
        if !(16..=MAX_ALIGNMENT).contains(&a) || !a.is_power_of_two() {
            return Err(Error::Config(format!(
                "pool alignment (NPURT_ALIGNMENT) must be a power of two in 16..={MAX_ALIGNMENT}, got {a}"
            )));
        }
        if self.segment_bytes < self.small_threshold {
            return Err(Error::Config(format!(
                "pool segment size ({}) must be at least the small-allocation threshold ({})",
                self.segment_bytes, self.small_threshold
            )));
        }
        if self.segment_bytes == 0 || !self.segment_bytes.is_multiple_of(a) || self.segment_bytes > MAX_SEGMENT_BYTES {
            return Err(Error::Config(format!(
                "pool segment size must be a non-zero multiple of the alignment {a}, at most {MAX_SEGMENT_BYTES}, got {}",
                self.segment_bytes
            )));
        }
        if let Some(l) = self.limit_bytes {
            let min = self.min_limit();
            if l < min {
                return Err(Error::Config(format!(
                    "pool limit (NPURT_POOL_LIMIT) must be at least {min} bytes (one block), got {l}"
                )));
            }
        }
        Ok(())
    }
}

impl RuntimeConfig {
    /// Checks every value; the error names the knob (and its environment variable) and
    /// what it accepts:
    ///
    /// * the pool: see [`PoolConfig::validate`];
    /// * `max_streams` (`NPURT_MAX_STREAMS`): 1..=[`max_streams_bound`];
    /// * `threads` (`NPURT_THREADS`): 1..=[`max_threads`];
    /// * `cpu_devices` (`NPURT_CPU_DEVICES`): 1..=[`MAX_CPU_DEVICES`];
    /// * `batch_size`: 1..=[`MAX_BATCH_SIZE`];
    /// * `devices` (`NPURT_DEVICES`): non-empty, no index twice (each must exist: checked
    ///   against the backend when the runtime is made);
    /// * `backend` (`NPURT_BACKEND`): `cpu`, `cuda`, `acl` (`ascend`) or `auto`.
    pub fn validate(&self) -> Result<()> {
        self.pool.validate()?;
        let streams = max_streams_bound();
        if self.max_streams == 0 || self.max_streams > streams {
            return Err(Error::Config(format!(
                "max_streams (NPURT_MAX_STREAMS) must be in 1..={streams} (8 per core, at least 64, at most {MAX_STREAMS}), got {}",
                self.max_streams
            )));
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            return Err(Error::Config(format!("batch_size must be in 1..={MAX_BATCH_SIZE}, got {}", self.batch_size)));
        }
        if self.cpu_devices == 0 || self.cpu_devices > MAX_CPU_DEVICES {
            return Err(Error::Config(format!(
                "cpu_devices (NPURT_CPU_DEVICES) must be in 1..={MAX_CPU_DEVICES}, got {}",
                self.cpu_devices
            )));
        }
        if let Some(t) = self.threads {
            let max = max_threads();
            if t == 0 || t > max {
                return Err(Error::Config(format!(
                    "threads (NPURT_THREADS) must be in 1..={max} (8 per available core, at least 64; {} cores), got {t}",
                    available_cores()
                )));
            }
        }
        if let Some(b) = &self.backend
            && !matches!(b.as_str(), "cpu" | "cuda" | "acl" | "ascend" | "auto")
        {
            return Err(Error::Config(format!("backend (NPURT_BACKEND) must be cpu, cuda, acl or auto, got {b:?}")));
        }
        if let Some(d) = &self.devices {
            if d.is_empty() {
                return Err(Error::Config("device list (NPURT_DEVICES) is empty".into()));
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(dup) = d.iter().find(|&&i| !seen.insert(i)) {
                return Err(Error::Config(format!("device list (NPURT_DEVICES) names device {dup} twice: {d:?}")));
            }
        }
        Ok(())
    }

    /// Applies `NPURT_*` environment overrides (see README), then validates.
    pub fn with_env(mut self) -> Result<RuntimeConfig> {
        self.apply_env()?;
        self.validate()?;
        Ok(self)
    }

    /// Applies the `NPURT_*` variables of the process environment (by the rule of
    /// [`crate::env`]: a set variable that is not UTF-8, is empty or is not a value its
    /// knob accepts is an [`Error::Config`] naming it). Does not validate.
    pub fn apply_env(&mut self) -> Result<()> {
        self.apply_overrides(|k| std::env::var_os(k))
    }

    /// Applies overrides read through `get` (an environment lookup in practice; `None`:
    /// unset), by the rule of [`crate::env`].
    pub fn apply_overrides<V: Into<OsString>>(&mut self, get: impl Fn(&str) -> Option<V>) -> Result<()> {
        let get = |k: &str| env::value(k, get(k).map(Into::into));
        if let Some(v) = get("NPURT_BACKEND")? {
            self.backend = if v.eq_ignore_ascii_case("auto") { None } else { Some(v.to_ascii_lowercase()) };
        }
        if let Some(v) = get("NPURT_DEVICES")? {
            let list: std::result::Result<Vec<usize>, _> =
                v.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse()).collect();
            self.devices =
                Some(list.map_err(|_| env::bad("NPURT_DEVICES", &v, "a comma-separated list of device indices"))?);
        }
        let count = |k: &str, v: &str, what: &str| env::parse(k, v, what, |v| v.parse::<usize>().ok());
        if let Some(v) = get("NPURT_CPU_DEVICES")? {
            self.cpu_devices = count("NPURT_CPU_DEVICES", &v, "a device count")?;
        }
        if let Some(v) = get("NPURT_THREADS")? {
            self.threads = Some(count("NPURT_THREADS", &v, "a thread count")?);
        }
        if let Some(v) = get("NPURT_POOL_LIMIT")? {
            self.pool.limit_bytes = Some(env::parse("NPURT_POOL_LIMIT", &v, "a size such as 512M or 8G", parse_bytes)?);
        }
        if let Some(v) = get("NPURT_ALIGNMENT")? {
            self.pool.alignment = count("NPURT_ALIGNMENT", &v, "a power of two in 16..=65536")?;
        }
        if let Some(v) = get("NPURT_MEMORY_REUSE")? {
            self.pool.reuse = env::switch("NPURT_MEMORY_REUSE", &v)?;
            self.optimizations.memory_reuse = self.pool.reuse;
        }
        if let Some(v) = get("NPURT_MAX_STREAMS")? {
            self.max_streams = count("NPURT_MAX_STREAMS", &v, "a stream count")?;
        }
        if let Some(v) = get("NPURT_SCHEDULING")? {
            self.scheduling = env::choice(
                "NPURT_SCHEDULING",
                &v,
                &[
                    ("latency", Scheduling::Latency),
                    ("throughput", Scheduling::Throughput),
                    ("balanced", Scheduling::Balanced),
                ],
            )?;
        }
        if let Some(v) = get("NPURT_HW_MAPPING")? {
            self.hw_mapping = env::choice(
                "NPURT_HW_MAPPING",
                &v,
                &[
                    ("auto", HwMapping::Auto),
                    ("cube_prefer", HwMapping::CubePrefer),
                    ("vector_prefer", HwMapping::VectorPrefer),
                ],
            )?;
        }
        if let Some(v) = get("NPURT_PRECISION")? {
            self.precision = env::parse("NPURT_PRECISION", &v, "f32, f16, bf16, int8 or auto", Precision::parse)?;
        }
        if let Some(v) = get("NPURT_ACL_GRAPH_CAPTURE")? {
            self.graph_capture = env::parse("NPURT_ACL_GRAPH_CAPTURE", &v, "on, off or auto", GraphCapture::parse)?;
        }
        if let Some(v) = get("NPURT_IMPL")? {
            self.forced_tier = if v.eq_ignore_ascii_case("auto") {
                None
            } else {
                Some(env::parse("NPURT_IMPL", &v, "reference, generic, fast or auto", Tier::parse)?)
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    /// The error of `c.validate()`, which must name `what`.
    fn rejected(c: &RuntimeConfig, what: &str) -> String {
        let e = c.validate().expect_err(&format!("{c:?} accepted"));
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains(what), "{what}: {msg}");
        msg
    }

    #[test]
    fn rejects_bad_alignment_and_env() {
        let mut c = RuntimeConfig::default();
        c.pool.alignment = 48;
        assert!(c.validate().unwrap_err().to_string().contains("power of two"));
        let mut c = RuntimeConfig::default();
        let e = c.apply_overrides(|k| (k == "NPURT_CPU_DEVICES").then(|| "many".to_string()));
        assert!(e.unwrap_err().to_string().contains("NPURT_CPU_DEVICES"));
        c.apply_overrides(|k| match k {
            "NPURT_POOL_LIMIT" => Some("64M".to_string()),
            "NPURT_DEVICES" => Some("0,2".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.pool.limit_bytes, Some(64 << 20));
        assert_eq!(c.devices, Some(vec![0, 2]));
    }

    #[test]
    fn the_defaults_are_valid() {
        RuntimeConfig::default().validate().unwrap();
        PoolConfig::default().validate().unwrap();
    }

    #[test]
    fn threads_are_capped_relative_to_the_core_count() {
        let max = max_threads();
        assert!(max >= 64 && max >= 8 * available_cores(), "{max}");
        for ok in [1, available_cores(), 64, max] {
            RuntimeConfig { threads: Some(ok), ..RuntimeConfig::default() }.validate().unwrap();
        }
        for bad in [0, max + 1, usize::MAX] {
            let msg = rejected(&RuntimeConfig { threads: Some(bad), ..RuntimeConfig::default() }, "NPURT_THREADS");
            assert!(msg.contains(&max.to_string()), "the bound is not stated: {msg}");
        }
        // The environment path: a count over the cap parses but does not validate.
        for v in [(max + 1).to_string(), "100000".to_string()] {
            let mut c = RuntimeConfig::default();
            c.apply_overrides(env(&[("NPURT_THREADS", v.as_str())])).unwrap();
            if c.threads.is_some_and(|t| t > max) {
                rejected(&c, "NPURT_THREADS");
            }
        }
        let mut c = RuntimeConfig::default();
        c.apply_overrides(env(&[("NPURT_THREADS", max.to_string().as_str())])).unwrap();
        c.validate().unwrap();
    }

    #[test]
    fn max_streams_admit_sixteen_and_are_bounded() {
        let bound = max_streams_bound();
        assert!((64..=MAX_STREAMS).contains(&bound), "{bound}");
        for ok in [1, 8, 16, 64, bound] {
            RuntimeConfig { max_streams: ok, ..RuntimeConfig::default() }.validate().unwrap();
        }
        for bad in [0, bound + 1, MAX_STREAMS + 1] {
            rejected(&RuntimeConfig { max_streams: bad, ..RuntimeConfig::default() }, "max_streams");
        }
        let mut c = RuntimeConfig::default();
        c.apply_overrides(env(&[("NPURT_MAX_STREAMS", "16")])).unwrap();
        c.validate().unwrap();
        assert_eq!(c.max_streams, 16);
    }

    #[test]
    fn alignment_is_a_power_of_two_up_to_64_kib() {
        for ok in [16, 64, 128, 4096, MAX_ALIGNMENT] {
            let mut c = RuntimeConfig::default();
            c.pool.alignment = ok;
            c.validate().unwrap();
        }
        for bad in [0, 8, 48, 100, MAX_ALIGNMENT * 2, 1 << 40] {
            let mut c = RuntimeConfig::default();
            c.pool.alignment = bad;
            rejected(&c, "power of two");
        }
        let mut c = RuntimeConfig::default();
        c.apply_overrides(env(&[("NPURT_ALIGNMENT", "64")])).unwrap();
        c.validate().unwrap();
        assert!(c.apply_overrides(env(&[("NPURT_ALIGNMENT", "-64")])).is_err());
    }

    #[test]
    fn pool_limits_from_one_block_up_are_accepted() {
        for (v, bytes) in [("2G", 2usize << 30), ("1M", 1 << 20), ("64k", 64 << 10), ("512", 512)] {
            let mut c = RuntimeConfig::default();
            c.apply_overrides(env(&[("NPURT_POOL_LIMIT", v)])).unwrap();
            assert_eq!(c.pool.limit_bytes, Some(bytes), "{v}");
            c.validate().unwrap_or_else(|e| panic!("{v}: {e}"));
        }
        for bad in [0, 1, 511] {
            let mut c = RuntimeConfig::default();
            c.pool.limit_bytes = Some(bad);
            rejected(&c, "NPURT_POOL_LIMIT");
        }
        // The least limit follows a large alignment.
        let mut c = RuntimeConfig::default();
        c.pool.alignment = 4096;
        c.pool.limit_bytes = Some(2048);
        rejected(&c, "4096");
        let mut c = RuntimeConfig::default();
        for bad in ["lots", "1.5G", "-1M", "99999999999999999999G"] {
            assert!(c.apply_overrides(env(&[("NPURT_POOL_LIMIT", bad)])).is_err(), "{bad}");
        }
    }

    #[test]
    fn segment_and_threshold_are_checked() {
        let seg = |segment_bytes: usize, small_threshold: usize| PoolConfig {
            segment_bytes,
            small_threshold,
            ..PoolConfig::default()
        };
        seg(1088, 1040).validate().unwrap();
        seg(MAX_SEGMENT_BYTES, 1 << 20).validate().unwrap();
        seg(4096, 0).validate().unwrap();
        for (s, t, what) in [
            (0, 0, "segment size"),
            (1000, 512, "multiple of the alignment"),
            (MAX_SEGMENT_BYTES * 2, 1 << 20, "at most"),
            (1 << 20, 2 << 20, "threshold"),
        ] {
            let e = seg(s, t).validate().unwrap_err().to_string();
            assert!(e.contains(what), "{s}/{t}: {e}");
        }
    }

    #[test]
    fn device_counts_batches_and_lists_are_bounded() {
        for ok in [1, 3, MAX_CPU_DEVICES] {
            RuntimeConfig { cpu_devices: ok, ..RuntimeConfig::default() }.validate().unwrap();
        }
        for bad in [0, MAX_CPU_DEVICES + 1] {
            rejected(&RuntimeConfig { cpu_devices: bad, ..RuntimeConfig::default() }, "NPURT_CPU_DEVICES");
        }
        for ok in [1, 32, MAX_BATCH_SIZE] {
            RuntimeConfig { batch_size: ok, ..RuntimeConfig::default() }.validate().unwrap();
        }
        for bad in [0, MAX_BATCH_SIZE + 1] {
            rejected(&RuntimeConfig { batch_size: bad, ..RuntimeConfig::default() }, "batch_size");
        }
        RuntimeConfig { devices: Some(vec![0, 2]), ..RuntimeConfig::default() }.validate().unwrap();
        rejected(&RuntimeConfig { devices: Some(vec![]), ..RuntimeConfig::default() }, "empty");
        rejected(&RuntimeConfig { devices: Some(vec![1, 0, 1]), ..RuntimeConfig::default() }, "device 1 twice");
        let mut c = RuntimeConfig::default();
        assert!(c.apply_overrides(env(&[("NPURT_DEVICES", "0,x")])).is_err());
        rejected(&RuntimeConfig { backend: Some("tpu".into()), ..RuntimeConfig::default() }, "backend");
        for bad in [
            ("NPURT_SCHEDULING", "fast"),
            ("NPURT_HW_MAPPING", "gpu"),
            ("NPURT_PRECISION", "f8"),
            ("NPURT_ACL_GRAPH_CAPTURE", "sometimes"),
        ] {
            let e = RuntimeConfig::default().apply_overrides(env(&[bad])).unwrap_err().to_string();
            assert!(e.contains(bad.0), "{e}");
        }
        let e = RuntimeConfig::default().apply_overrides(env(&[("NPURT_MEMORY_REUSE", "maybe")])).unwrap_err();
        assert!(e.to_string().contains("NPURT_MEMORY_REUSE"), "{e}");
    }

    /// Every knob `apply_overrides` reads refuses a non-UTF-8, empty, blank or unknown
    /// value alike, with a config error naming the variable.
    #[test]
    fn every_runtime_knob_refuses_bad_values_naming_the_variable() {
        use std::os::unix::ffi::OsStringExt;
        let knobs = [
            "NPURT_BACKEND",
            "NPURT_DEVICES",
            "NPURT_CPU_DEVICES",
            "NPURT_THREADS",
            "NPURT_POOL_LIMIT",
            "NPURT_ALIGNMENT",
            "NPURT_MEMORY_REUSE",
            "NPURT_MAX_STREAMS",
            "NPURT_SCHEDULING",
            "NPURT_HW_MAPPING",
            "NPURT_PRECISION",
            "NPURT_ACL_GRAPH_CAPTURE",
            "NPURT_IMPL",
        ];
        for k in knobs {
            assert!(crate::env::KNOBS.contains(&k), "{k} is not in env::KNOBS");
            let values = [OsString::from_vec(b"on\xff".to_vec()), "".into(), "  ".into(), "zzz".into()];
            for v in values {
                let mut c = RuntimeConfig::default();
                // NPURT_BACKEND takes any name at parse time and is refused by validate.
                let e = c.apply_overrides(|n| (n == k).then(|| v.clone())).and_then(|()| c.validate());
                let e = e.expect_err(&format!("{k}={v:?} accepted"));
                assert!(matches!(&e, Error::Config(m) if m.contains(k)), "{k}={v:?}: {e:?}");
            }
        }
        // Surrounding whitespace is trimmed and names are case-insensitive.
        let mut c = RuntimeConfig::default();
        c.apply_overrides(env(&[("NPURT_SCHEDULING", " Latency "), ("NPURT_MEMORY_REUSE", "OFF")])).unwrap();
        assert_eq!((c.scheduling, c.pool.reuse), (Scheduling::Latency, false));
    }
}
