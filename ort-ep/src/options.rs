//! The EP options of `NpurtExecutionProvider`: parsed from the key/value pairs that ONNX Runtime
//! passes (the `provider_options` dict of `SessionOptions.add_provider_for_devices`, or session
//! config entries under the prefix [`OPTION_PREFIX`]). Pure Rust, no FFI: the ABI layer hands the
//! pairs over as strings.
//!
//! Every type here is `Send + Sync` (plain data).

use thiserror::Error;

/// The prefix ONNX Runtime puts before an EP option in the session config: `ep.` + the EP name
/// in lower case + `.` (ORT's `OrtSessionOptions::GetProviderOptionPrefix`).
pub const OPTION_PREFIX: &str = "ep.npurtexecutionprovider.";

/// The option keys, in the order the docs list them.
pub const KEYS: [&str; 5] = ["backend", "device_id", "precision", "graph_capture", "log_level"];

/// A bad EP option: the error names the key (and the value) that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OptionError {
    #[error(
        "unknown NpurtExecutionProvider option `{key}` (known: backend, device_id, precision, graph_capture, log_level)"
    )]
    UnknownKey { key: String },
    #[error("bad value `{value}` for NpurtExecutionProvider option `{key}`: expected {expected}")]
    BadValue { key: String, value: String, expected: &'static str },
    #[error("NpurtExecutionProvider option `{key}` given twice")]
    GivenTwice { key: String },
}

/// Which npurt backend runs the claimed nodes (`backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// `NPURT_BACKEND`, else the best backend present (npurt's discovery).
    #[default]
    Auto,
    Cpu,
    Acl,
    Cuda,
}

impl BackendChoice {
    /// The option's value: `auto`, `cpu`, `acl` or `cuda` (npurt's backend names).
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Acl => "acl",
            BackendChoice::Cuda => "cuda",
        }
    }
}

/// The compute precision of the compiled graphs (`precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// `NPURT_PRECISION` when set (npurt's rule), else the model's own dtypes (as `f32`).
    #[default]
    Auto,
    F32,
    F16,
    Bf16,
    /// Dynamic int8 Linear layers (npurt's `int8`; the EP also takes `i8`, as the CLI's
    /// `--precision` and `NPURT_PRECISION` do).
    Int8,
}

/// Whether compiled graphs are captured and replayed where the backend can (`graph_capture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphCapture {
    #[default]
    Auto,
    On,
    Off,
}

/// The parsed EP options; [`Default`] is what an application that gives none gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpOptions {
    pub backend: BackendChoice,
    /// The device index within the backend; `None`: the backend's first.
    pub device_id: Option<u32>,
    pub precision: Precision,
    pub graph_capture: GraphCapture,
    /// `log_level`; `None` leaves the `log` filter as the host set it.
    pub log_level: Option<log::LevelFilter>,
}

impl EpOptions {
    /// Parses option pairs whose keys carry no prefix. An unknown key, a bad value or a key given
    /// twice is an error naming it; keys and values are matched exactly (lower case).
    pub fn parse<'a, I>(pairs: I) -> Result<Self, OptionError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut out = EpOptions::default();
        let mut seen: Vec<&str> = Vec::new();
        for (key, value) in pairs {
            let Some(known) = KEYS.iter().copied().find(|k| *k == key) else {
                return Err(OptionError::UnknownKey { key: key.to_string() });
            };
            if seen.contains(&known) {
                return Err(OptionError::GivenTwice { key: key.to_string() });
            }
            seen.push(known);
            out.set(known, value)?;
        }
        Ok(out)
    }

    /// Parses the EP's entries out of a whole session config: the keys under [`OPTION_PREFIX`],
    /// with the prefix removed; every other key is not ours and is ignored.
    pub fn from_session_config<'a, I>(entries: I) -> Result<Self, OptionError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        Self::parse(entries.into_iter().filter_map(|(k, v)| k.strip_prefix(OPTION_PREFIX).map(|k| (k, v))))
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        let bad =
            |expected: &'static str| OptionError::BadValue { key: key.to_string(), value: value.to_string(), expected };
        match key {
            "backend" => {
                self.backend = match value {
                    "auto" => BackendChoice::Auto,
                    "cpu" => BackendChoice::Cpu,
                    "acl" => BackendChoice::Acl,
                    "cuda" => BackendChoice::Cuda,
                    _ => return Err(bad("one of auto, cpu, acl, cuda")),
                }
            }
            "device_id" => {
                // Digits only: `u32::from_str` would also take a leading `+`.
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("a device index (0, 1, ...)"));
                }
                self.device_id = Some(value.parse().map_err(|_| bad("a device index (0, 1, ...)"))?);
            }
            "precision" => {
                self.precision = match value {
                    "auto" => Precision::Auto,
                    "f32" => Precision::F32,
                    "f16" => Precision::F16,
                    "bf16" => Precision::Bf16,
                    "int8" | "i8" => Precision::Int8,
                    _ => return Err(bad("one of auto, f32, f16, bf16, int8")),
                }
            }
            "graph_capture" => {
                self.graph_capture = match value {
                    "auto" => GraphCapture::Auto,
                    "on" => GraphCapture::On,
                    "off" => GraphCapture::Off,
                    _ => return Err(bad("one of auto, on, off")),
                }
            }
            "log_level" => {
                self.log_level = Some(match value {
                    "off" => log::LevelFilter::Off,
                    "error" => log::LevelFilter::Error,
                    "warn" => log::LevelFilter::Warn,
                    "info" => log::LevelFilter::Info,
                    "debug" => log::LevelFilter::Debug,
                    "trace" => log::LevelFilter::Trace,
                    _ => return Err(bad("one of off, error, warn, info, debug, trace")),
                })
            }
            _ => return Err(OptionError::UnknownKey { key: key.to_string() }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_options_is_the_default() {
        assert_eq!(EpOptions::parse([]).unwrap(), EpOptions::default());
        assert_eq!(EpOptions::default().backend, BackendChoice::Auto);
    }

    #[test]
    fn every_key_parses() {
        let o = EpOptions::parse([
            ("backend", "cuda"),
            ("device_id", "3"),
            ("precision", "bf16"),
            ("graph_capture", "off"),
            ("log_level", "debug"),
        ])
        .unwrap();
        assert_eq!(o.backend, BackendChoice::Cuda);
        assert_eq!(o.device_id, Some(3));
        assert_eq!(o.precision, Precision::Bf16);
        assert_eq!(o.graph_capture, GraphCapture::Off);
        assert_eq!(o.log_level, Some(log::LevelFilter::Debug));
    }

    #[test]
    fn precision_int8_parses_in_the_cli_spellings() {
        for v in ["int8", "i8"] {
            let o = EpOptions::parse([("precision", v)]).unwrap();
            assert_eq!(o.precision, Precision::Int8, "{v}");
        }
        let e = EpOptions::parse([("precision", "u8")]).unwrap_err();
        assert!(e.to_string().contains("int8"), "the error lists int8: {e}");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = EpOptions::parse([("backend", "cpu"), ("device", "0")]).unwrap_err();
        assert_eq!(e, OptionError::UnknownKey { key: "device".into() });
        assert!(e.to_string().contains("`device`"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_value() {
        for (key, value) in [
            ("backend", "tpu"),
            ("backend", "CPU"),
            ("device_id", "-1"),
            ("device_id", "+1"),
            ("device_id", ""),
            ("device_id", "4294967296"),
            ("device_id", "0x1"),
            ("precision", "fp8"),
            ("precision", "int4"),
            ("precision", "INT8"),
            ("graph_capture", "yes"),
            ("log_level", "loud"),
        ] {
            let e = EpOptions::parse([(key, value)]).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, OptionError::BadValue { .. }), "{key}={value}: {e:?}");
            assert!(text.contains(&format!("`{key}`")) && text.contains(&format!("`{value}`")), "{text}");
        }
    }

    #[test]
    fn a_key_given_twice_is_an_error() {
        let e = EpOptions::parse([("precision", "f32"), ("precision", "f16")]).unwrap_err();
        assert_eq!(e, OptionError::GivenTwice { key: "precision".into() });
        assert!(e.to_string().contains("given twice"));
    }

    #[test]
    fn session_config_keeps_only_prefixed_keys() {
        let o = EpOptions::from_session_config([
            ("session.intra_op.allow_spinning", "0"),
            ("ep.npurtexecutionprovider.backend", "cpu"),
            ("ep.otherep.backend", "whatever"),
        ])
        .unwrap();
        assert_eq!(o.backend, BackendChoice::Cpu);
        let e = EpOptions::from_session_config([("ep.npurtexecutionprovider.colour", "red")]).unwrap_err();
        assert_eq!(e, OptionError::UnknownKey { key: "colour".into() });
    }
}
