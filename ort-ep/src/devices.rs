//! Which npurt backend and device an EP runs on: the runtime configuration its options make
//! ([`runtime_config`]), and the devices the factory offers ORT ([`discover`]), both by npurt's
//! own discovery (`NPURT_BACKEND`, else the best backend present: Ascend, then CUDA, then the
//! CPU; `npurt::Runtime::new`). Pure Rust, no FFI.
//!
//! Every type here is `Send + Sync` (plain data).

use npurt::{Precision as NpurtPrecision, RuntimeConfig};
use runtime::GraphCapture as NpurtCapture;

use crate::options::{BackendChoice, EpOptions, GraphCapture, Precision};
use crate::ort::EpError;

/// Huawei's PCI vendor id, the vendor of the Ascend NPU devices the factory creates.
pub const HUAWEI_VENDOR_ID: u32 = 0x19e5;
/// NVIDIA's PCI vendor id (the GPUs ORT enumerates that CUDA devices pair with).
pub const NVIDIA_VENDOR_ID: u32 = 0x10de;

/// One device of the backend npurt's discovery selected, as the factory offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// npurt's CPU backend: pairs with ORT's CPU hardware device.
    Cpu,
    /// An Ascend device (ORT does not enumerate NPUs): an `OrtHardwareDevice` of type NPU is
    /// created for it. `ordinal` is npurt's device index, `soc` the SoC name
    /// (`aclrtGetSocName`), `emulated` whether CANN is acl-emu.
    Npu { ordinal: u32, soc: String, emulated: bool },
    /// A CUDA device: pairs with the `ordinal`-th NVIDIA GPU ORT found.
    Gpu { ordinal: u32, name: String },
}

impl Offer {
    /// The npurt backend of this device (`npurt.backend` in the device's EP metadata).
    pub fn backend(&self) -> &'static str {
        match self {
            Offer::Cpu => "cpu",
            Offer::Npu { .. } => "acl",
            Offer::Gpu { .. } => "cuda",
        }
    }

    /// npurt's device index (`npurt.device` in the EP metadata).
    pub fn ordinal(&self) -> u32 {
        match self {
            Offer::Cpu => 0,
            Offer::Npu { ordinal, .. } | Offer::Gpu { ordinal, .. } => *ordinal,
        }
    }

    /// The EP metadata of the `OrtEpDevice` (ORT adds `library_path`; the factory adds
    /// `version`).
    pub fn ep_metadata(&self) -> Vec<(&'static str, String)> {
        let mut m = vec![("npurt.backend", self.backend().to_string()), ("npurt.device", self.ordinal().to_string())];
        match self {
            Offer::Cpu => {}
            Offer::Npu { soc, emulated, .. } => {
                m.push(("npurt.soc", soc.clone()));
                m.push(("npurt.emulated", if *emulated { "1" } else { "0" }.to_string()));
            }
            Offer::Gpu { name, .. } => m.push(("npurt.name", name.clone())),
        }
        m
    }
}

/// The SoC of an Ascend device from the name npurt's Ascend backend gives it
/// (`"<SoC> (acl:<n>)"`, the SoC being what `aclrtGetSocName` returned).
pub fn soc_of(device_name: &str) -> &str {
    device_name.split(" (").next().unwrap_or(device_name).trim()
}

/// The devices of the backend npurt's discovery selects in this process (`NPURT_BACKEND` and
/// the other `NPURT_*` variables, else the best backend present): what `GetSupportedDevices`
/// offers. The runtime opened to look is closed again; each EP opens its own.
pub fn discover() -> Result<Vec<Offer>, EpError> {
    let config = RuntimeConfig::default()
        .with_env()
        .map_err(|source| EpError::Npurt { context: "reading npurt's NPURT_* variables".into(), source })?;
    let rt = npurt::Runtime::with_config(config)
        .map_err(|source| EpError::Npurt { context: "npurt's backend discovery".into(), source })?;
    let backend = rt.backend_name();
    let mut offers = Vec::new();
    for d in 0..rt.device_count() {
        let ordinal = u32::try_from(d).map_err(|_| EpError::Graph(format!("device index {d} out of range")))?;
        let name = rt.device_info(d).map(|i| i.name.clone()).unwrap_or_default();
        offers.push(match backend {
            "acl" => Offer::Npu { ordinal, soc: soc_of(&name).to_string(), emulated: emulated(&rt) },
            "cuda" => Offer::Gpu { ordinal, name },
            // The CPU backend presents one device per `NPURT_CPU_DEVICES`; ORT has one CPU.
            _ if d == 0 => Offer::Cpu,
            _ => continue,
        });
    }
    log::info!("NpurtExecutionProvider: npurt's {backend} backend, {} device(s) offered", offers.len());
    Ok(offers)
}

#[cfg(feature = "acl")]
fn emulated(rt: &npurt::Runtime) -> bool {
    rt.acl_emulator().is_some()
}

#[cfg(not(feature = "acl"))]
fn emulated(_rt: &npurt::Runtime) -> bool {
    false
}

/// The npurt runtime configuration of an EP: `base` (npurt's defaults with the `NPURT_*`
/// variables applied) with the EP options over it. `selected` is npurt's device index of the
/// `OrtEpDevice` the application selected, used when `device_id` is not given.
/// `precision_env` is whether `NPURT_PRECISION` is set: `precision` = `auto` keeps that
/// variable's choice, else computes in the model's own dtypes (f32), as ONNX does.
pub fn runtime_config(
    options: &EpOptions,
    mut base: RuntimeConfig,
    selected: Option<u32>,
    precision_env: bool,
) -> RuntimeConfig {
    base.backend = match options.backend {
        BackendChoice::Auto => base.backend,
        BackendChoice::Cpu => Some("cpu".into()),
        BackendChoice::Acl => Some("acl".into()),
        BackendChoice::Cuda => Some("cuda".into()),
    };
    if let Some(d) = options.device_id.or(selected) {
        base.devices = Some(vec![d as usize]);
    }
    base.precision = match options.precision {
        Precision::Auto if precision_env => base.precision,
        Precision::Auto | Precision::F32 => NpurtPrecision::F32,
        Precision::F16 => NpurtPrecision::F16,
        Precision::Bf16 => NpurtPrecision::Bf16,
        Precision::Int8 => NpurtPrecision::Int8,
    };
    base.graph_capture = match options.graph_capture {
        GraphCapture::Auto => base.graph_capture,
        GraphCapture::On => NpurtCapture::On,
        GraphCapture::Off => NpurtCapture::Off,
    };
    base
}

/// Opens the npurt runtime an EP with `options` runs on. An error names the option that
/// selected what did not open (`backend`, `device_id`) and npurt's reason.
pub fn open_runtime(options: &EpOptions, selected: Option<u32>) -> Result<npurt::Runtime, EpError> {
    let base = RuntimeConfig::default()
        .with_env()
        .map_err(|source| EpError::Npurt { context: "reading npurt's NPURT_* variables".into(), source })?;
    let precision_env = std::env::var_os("NPURT_PRECISION").is_some();
    let config = runtime_config(options, base, selected, precision_env);
    let what = match options.backend {
        BackendChoice::Auto => format!(
            "option `backend` = `auto` (npurt's choice{})",
            config.backend.as_deref().map(|b| format!(": NPURT_BACKEND={b}")).unwrap_or_default()
        ),
        BackendChoice::Cpu => "option `backend` = `cpu`".into(),
        BackendChoice::Acl => "option `backend` = `acl`: npurt's Ascend backend (CANN or acl-emu) did not open".into(),
        BackendChoice::Cuda => "option `backend` = `cuda`: npurt's CUDA backend did not open".into(),
    };
    let device = match (options.device_id, selected) {
        (Some(d), _) => format!(", option `device_id` = `{d}`"),
        (None, Some(d)) => format!(", the selected device {d}"),
        (None, None) => String::new(),
    };
    npurt::Runtime::with_config(config)
        .map_err(|source| EpError::Npurt { context: format!("opening npurt's backend for {what}{device}"), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> EpOptions {
        EpOptions::parse(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn the_defaults_compute_in_f32_on_npurts_choice() {
        let c = runtime_config(&EpOptions::default(), RuntimeConfig::default(), None, false);
        assert_eq!(c.backend, None);
        assert_eq!(c.devices, None);
        assert_eq!(c.precision, NpurtPrecision::F32);
        assert_eq!(c.graph_capture, NpurtCapture::Auto);
    }

    #[test]
    fn options_override_the_environment() {
        let env = RuntimeConfig {
            backend: Some("acl".into()),
            precision: NpurtPrecision::Bf16,
            graph_capture: NpurtCapture::Off,
            ..RuntimeConfig::default()
        };
        // `auto` keeps what the variables chose.
        let c = runtime_config(&EpOptions::default(), env.clone(), None, true);
        assert_eq!(
            (c.backend.as_deref(), c.precision, c.graph_capture),
            (Some("acl"), NpurtPrecision::Bf16, NpurtCapture::Off)
        );
        let o = opts(&[("backend", "cpu"), ("precision", "f16"), ("graph_capture", "on"), ("device_id", "2")]);
        let c = runtime_config(&o, env, Some(1), true);
        assert_eq!(c.backend.as_deref(), Some("cpu"));
        assert_eq!(c.precision, NpurtPrecision::F16);
        assert_eq!(c.graph_capture, NpurtCapture::On);
        assert_eq!(c.devices, Some(vec![2]), "device_id wins over the selected device");
    }

    #[test]
    fn each_precision_and_backend_maps() {
        for (v, want) in [("f32", NpurtPrecision::F32), ("f16", NpurtPrecision::F16), ("bf16", NpurtPrecision::Bf16)] {
            let c = runtime_config(&opts(&[("precision", v)]), RuntimeConfig::default(), None, true);
            assert_eq!(c.precision, want, "{v}");
        }
        for v in ["cpu", "acl", "cuda"] {
            let c = runtime_config(&opts(&[("backend", v)]), RuntimeConfig::default(), None, false);
            assert_eq!(c.backend.as_deref(), Some(v));
        }
        let c = runtime_config(&EpOptions::default(), RuntimeConfig::default(), Some(3), false);
        assert_eq!(c.devices, Some(vec![3]), "the selected device is used without device_id");
    }

    #[test]
    fn precision_int8_maps_to_npurts_int8() {
        for v in ["int8", "i8"] {
            let c = runtime_config(&opts(&[("precision", v)]), RuntimeConfig::default(), None, true);
            assert_eq!(c.precision, NpurtPrecision::Int8, "{v}");
        }
    }

    #[test]
    fn soc_comes_from_the_device_name() {
        assert_eq!(soc_of("Ascend910B2 (acl:0)"), "Ascend910B2");
        assert_eq!(soc_of("Ascend910A"), "Ascend910A");
    }

    #[test]
    fn offers_carry_their_metadata() {
        let npu = Offer::Npu { ordinal: 1, soc: "Ascend910B2".into(), emulated: true };
        assert_eq!(npu.backend(), "acl");
        let m = npu.ep_metadata();
        assert!(m.contains(&("npurt.soc", "Ascend910B2".into())) && m.contains(&("npurt.device", "1".into())), "{m:?}");
        assert_eq!(Offer::Cpu.ep_metadata(), vec![("npurt.backend", "cpu".into()), ("npurt.device", "0".into())]);
    }

    #[test]
    fn a_device_past_the_backends_is_an_error_naming_the_option() {
        let e = open_runtime(&opts(&[("backend", "cpu"), ("device_id", "7")]), None).unwrap_err().to_string();
        assert!(e.contains("`device_id` = `7`") && e.contains("device 7"), "{e}");
    }
}
