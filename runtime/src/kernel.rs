//! Kernel descriptions, implementation tiers, hardware units and implementation selection.

use crate::config::HwMapping;
use crate::error::{Error, Result};
use crate::op::{Op, OpKind, TensorMeta};
use std::fmt;

/// How an implementation is meant to be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Tuned for the hardware (SIMD, blocking, threads, vendor libraries).
    HighPerformance,
    /// Portable and reasonably fast.
    Generic,
    /// Plain loops with wide accumulation: the ground truth for conformance.
    Reference,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::HighPerformance, Tier::Generic, Tier::Reference];

    pub const fn name(self) -> &'static str {
        match self {
            Tier::HighPerformance => "fast",
            Tier::Generic => "generic",
            Tier::Reference => "reference",
        }
    }
    /// Parses `fast` / `hp` / `high-performance`, `generic`, `reference` / `ref`.
    pub fn parse(s: &str) -> Option<Tier> {
        match s.to_ascii_lowercase().as_str() {
            "fast" | "hp" | "high-performance" | "high_performance" => Some(Tier::HighPerformance),
            "generic" => Some(Tier::Generic),
            "reference" | "ref" => Some(Tier::Reference),
            _ => None,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The family of hardware unit an implementation runs on. Ascend calls them Cube
/// (matrix), Vector and Scalar; CUDA has tensor cores (matrix) and CUDA cores (vector);
/// the CPU has wide FMA / dot-product SIMD (matrix work), SIMD (vector) and scalar code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitClass {
    Cube,
    Vector,
    Scalar,
}

impl UnitClass {
    pub const fn name(self) -> &'static str {
        match self {
            UnitClass::Cube => "cube",
            UnitClass::Vector => "vector",
            UnitClass::Scalar => "scalar",
        }
    }
}

/// A hardware unit: its class and the backend's own label (e.g. `avx2-fma`, `Cube`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Unit {
    pub class: UnitClass,
    pub label: &'static str,
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.label, self.class.name())
    }
}

/// What a support predicate is asked about.
#[derive(Debug)]
pub struct KernelQuery<'a> {
    pub op: &'a Op,
    pub inputs: &'a [TensorMeta],
    pub outputs: &'a [TensorMeta],
}

/// A predicate: `Ok(())` when the kernel can run this signature, else why not.
pub type SupportFn = fn(&KernelQuery<'_>) -> Result<(), String>;

/// One implementation a backend offers.
#[derive(Clone, Copy)]
pub struct KernelInfo {
    /// Unique within the backend, e.g. `matmul.f32.gemm-avx2`.
    pub name: &'static str,
    pub op: OpKind,
    pub tier: Tier,
    pub unit: Unit,
    /// Checks dtypes, shapes and the detected hardware (CPU features, SoC version).
    pub supports: SupportFn,
    /// Backend-private index passed back to [`crate::Backend::launch`].
    pub id: usize,
}

impl fmt::Debug for KernelInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelInfo")
            .field("name", &self.name)
            .field("op", &self.op)
            .field("tier", &self.tier)
            .field("unit", &self.unit)
            .finish()
    }
}

/// Renders a signature for messages: `f32 [2, 3], f32 [3]`.
pub fn signature(metas: &[TensorMeta]) -> String {
    metas.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
}

/// Indices of the kernels for `kind`, best first: by the mapping strategy (`Auto`: tier
/// first; `CubePrefer` / `VectorPrefer`: the preferred unit class first, then tier).
pub fn preference_order(kernels: &[KernelInfo], kind: OpKind, mapping: HwMapping) -> Vec<usize> {
    let class_rank = |c: UnitClass| -> u8 {
        match (mapping, c) {
            (HwMapping::Auto, _) => 0,
            (HwMapping::CubePrefer, UnitClass::Cube) => 0,
            (HwMapping::VectorPrefer, UnitClass::Vector) => 0,
            _ => 1,
        }
    };
    let mut v: Vec<usize> = (0..kernels.len()).filter(|&i| kernels[i].op == kind).collect();
    v.sort_by_key(|&i| (class_rank(kernels[i].unit.class), kernels[i].tier));
    v
}

/// Chooses an implementation among `kernels` for `query`, trying them in the order of
/// [`preference_order`]; with `forced`, only that tier. Every rejection is logged at debug
/// level with its reason.
pub fn select<'k>(
    backend: &'static str,
    kernels: &'k [KernelInfo],
    query: &KernelQuery<'_>,
    mapping: HwMapping,
    forced: Option<Tier>,
) -> Result<&'k KernelInfo> {
    let order = preference_order(kernels, query.op.kind(), mapping);
    select_in_order(backend, kernels, &order, query, forced)
}

/// [`select`] with a precomputed preference order (the runtime caches one per op kind).
pub fn select_in_order<'k>(
    backend: &'static str,
    kernels: &'k [KernelInfo],
    order: &[usize],
    query: &KernelQuery<'_>,
    forced: Option<Tier>,
) -> Result<&'k KernelInfo> {
    let kind = query.op.kind();
    let mut reasons = Vec::new();
    for &i in order {
        let Some(k) = kernels.get(i) else { continue };
        if let Some(t) = forced {
            if k.tier != t {
                reasons.push(format!("{} ({}): tier {} is not the forced {}", k.name, k.tier, k.tier, t));
                continue;
            }
        }
        match (k.supports)(query) {
            Ok(()) => {
                if log::log_enabled!(log::Level::Debug) {
                    log::debug!(
                        "{kind}: chose {} (tier {}, unit {}) for {}{}",
                        k.name,
                        k.tier,
                        k.unit,
                        signature(query.inputs),
                        if reasons.is_empty() {
                            String::new()
                        } else {
                            format!("; passed over: {}", reasons.join("; "))
                        }
                    );
                }
                return Ok(k);
            }
            Err(why) => reasons.push(format!("{} ({}): {}", k.name, k.tier, why)),
        }
    }
    if reasons.is_empty() {
        reasons.push("the backend registers no kernel for this op".into());
    }
    Err(Error::NoKernel { op: kind.name(), backend, signature: signature(query.inputs), reasons: reasons.join("; ") })
}
