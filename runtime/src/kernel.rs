//! Kernel descriptions, implementation tiers, hardware units and implementation selection.

use crate::error::{Error, Result};
use crate::op::{Op, OpKind, TensorMeta};
use std::borrow::Cow;
use std::fmt;

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

/// Why a kernel failed on operands that passed validation. Kernels return it; the
/// backend wraps it (with the op, the kernel and the stream) into a [`crate::Error`],
/// keeping it as the `source()`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// An operand's bytes are not aligned for its element type.
    #[error("misaligned {what}: {reason}")]
    Misaligned { what: &'static str, reason: String },
    /// An operand (or a packed constant) holds fewer elements than its shape needs.
    #[error("{what} holds {got} elements where {needed} are needed")]
    TooShort { what: &'static str, needed: usize, got: usize },
    /// An index operand names a position outside its axis.
    #[error("index {index} is out of range for an axis of length {len}")]
    IndexOutOfRange { index: i64, len: usize },
    /// The kernel needs a CPU or device feature this machine lacks.
    #[error("this machine lacks {0}")]
    MissingFeature(&'static str),
    /// An operand's shape does not fit the kernel's view of it.
    #[error("shape: {0}")]
    Shape(#[from] ndarray::ShapeError),
    /// The kernel was reached with a signature its table entry does not cover: a bug
    /// in the kernel table, not in the caller's operands.
    #[error("internal: {0}")]
    Internal(String),
}

impl KernelError {
    pub fn misaligned(what: &'static str, reason: impl fmt::Display) -> KernelError {
        KernelError::Misaligned { what, reason: reason.to_string() }
    }
}

impl From<&'static str> for KernelError {
    /// An invariant the kernel's table entry guarantees did not hold.
    fn from(what: &'static str) -> KernelError {
        KernelError::Internal(what.to_string())
    }
}

/// What every kernel returns.
pub type KernelResult = std::result::Result<(), KernelError>;

/// A predicate: `Ok(())` when the kernel can run this signature, else why not.
pub type SupportFn = fn(&KernelQuery<'_>) -> Result<(), String>;

/// One implementation a backend offers.
#[derive(Clone)]
pub struct KernelInfo {
    /// Unique within the backend, e.g. `matmul.fast.avx2-fma`.
    pub name: Cow<'static, str>,
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

/// A backend's kernel table: the [`KernelInfo`]s the runtime selects among and, beside
/// each, the backend's own implementation handle `I` (a function, an enum naming the
/// vendor call, ...). Every backend declares its table with [`KernelTable::add`], which
/// names a kernel `<op>.<tier>.<label>` and numbers it (`KernelInfo::id` = its index).
///
/// Built once per process or per configuration and then only read: `Send`/`Sync` when
/// `I` is.
pub struct KernelTable<I> {
    infos: Vec<KernelInfo>,
    impls: Vec<I>,
}

impl<I> Default for KernelTable<I> {
    fn default() -> Self {
        KernelTable { infos: Vec::new(), impls: Vec::new() }
    }
}

impl<I> KernelTable<I> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a kernel named `<op>.<tier>.<label>` (`op` in lower case, e.g.
    /// `matmul.fast.avx512-fma`). Earlier entries of the same op and tier are preferred
    /// by [`select`] when both support a query.
    pub fn add(&mut self, op: OpKind, tier: Tier, unit: Unit, label: &str, supports: SupportFn, imp: I) -> &mut Self {
        let name = format!("{}.{}.{label}", op.name().to_ascii_lowercase(), tier.name());
        self.add_named(name, op, tier, unit, supports, imp)
    }

    /// Adds a kernel with a name of the backend's own choosing (unique within the table),
    /// for backends whose kernel names predate the `<op>.<tier>.<label>` scheme.
    pub fn add_named(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        op: OpKind,
        tier: Tier,
        unit: Unit,
        supports: SupportFn,
        imp: I,
    ) -> &mut Self {
        let name = name.into();
        let id = self.infos.len();
        debug_assert!(self.infos.iter().all(|k| k.name != name), "duplicate kernel name {name}");
        self.infos.push(KernelInfo { name, op, tier, unit, supports, id });
        self.impls.push(imp);
        self
    }

    /// The kernels, in table order (`infos()[i].id == i`): what `Backend::kernels` returns.
    pub fn infos(&self) -> &[KernelInfo] {
        &self.infos
    }

    /// The implementation behind kernel `id`, with its description; `None` for an id this
    /// table did not hand out.
    pub fn get(&self, id: usize) -> Option<(&KernelInfo, &I)> {
        Some((self.infos.get(id)?, self.impls.get(id)?))
    }

    /// Looks `kernel` up by id and checks that it is this table's entry (same name), so a
    /// `KernelInfo` from another backend or a forged one is refused.
    pub fn resolve(&self, kernel: &KernelInfo) -> Option<(&KernelInfo, &I)> {
        self.get(kernel.id).filter(|(k, _)| k.name == kernel.name && k.op == kernel.op)
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
        if let Some(t) = forced
            && k.tier != t
        {
            reasons.push(format!("{} ({}): tier {} is not the forced {}", k.name, k.tier, k.tier, t));
            continue;
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
