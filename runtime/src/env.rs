//! The `NPURT_*` environment variables: one reading rule for all of them.
//!
//! An unset variable leaves its knob at the default. A set one must be valid UTF-8 and,
//! once surrounding whitespace is trimmed, non-empty; then it must be one of the values
//! its knob accepts (names are matched case-insensitively). Anything else is an
//! [`EnvError`] naming the variable, the value and what was expected, which becomes
//! [`Error::Config`] (the error kind "config"): a bad value is refused, never ignored.
//!
//! Every knob goes through [`var`] (the process environment) or [`value`] (a value read
//! by the caller, so that tests inject one instead of changing the process environment).

use crate::error::Error;
use std::ffi::OsString;
use thiserror::Error;

/// Every variable npurt reads at run time, in the order of the README's table. Variables
/// read only by tests (`NPURT_TEST_REQUIRE`, `NPURT_BLESS`, `NPURT_BIN`, `NPURT_SOAK_SECS`,
/// `NPURT_TEST_MODEL_DIR`) and at build time (`NPURT_TARGET`, ...) are not knobs.
pub const KNOBS: &[&str] = &[
    "NPURT_BACKEND",
    "NPURT_DEVICES",
    "NPURT_CPU_DEVICES",
    "NPURT_THREADS",
    "NPURT_IMPL",
    "NPURT_POOL_LIMIT",
    "NPURT_ALIGNMENT",
    "NPURT_MEMORY_REUSE",
    "NPURT_MAX_STREAMS",
    "NPURT_SCHEDULING",
    "NPURT_HW_MAPPING",
    "NPURT_PRECISION",
    "NPURT_CPU_ISA",
    "NPURT_CPU_PIN",
    "NPURT_AMX",
    "NPURT_GEMM",
    "NPURT_ACL_LIB_DIR",
    "NPURT_ACL_FP32_MATMUL",
    "NPURT_ACL_GRAPH_CAPTURE",
    "NPURT_CUDA_TF32",
    "NPURT_LOG",
];

/// What is wrong with a set variable. `Send + Sync`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The value is not valid UTF-8.
    NotUtf8,
    /// The value is empty or only whitespace.
    Empty,
    /// The value is none of those the knob accepts; the text says which it accepts.
    Expected(String),
}

/// A refused value of an `NPURT_*` variable: the variable, the value as set (non-UTF-8
/// bytes escaped) and what is wrong with it. `Send + Sync + Clone`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{var}={value:?}: {}", match problem {
    Problem::NotUtf8 => "not valid UTF-8".to_string(),
    Problem::Empty => "empty (unset the variable for its default)".to_string(),
    Problem::Expected(e) => format!("expected {e}"),
})]
pub struct EnvError {
    pub var: String,
    pub value: String,
    pub problem: Problem,
}

impl From<EnvError> for Error {
    fn from(e: EnvError) -> Error {
        Error::Config(e.to_string())
    }
}

/// `name`'s value in the process environment, by the rule of this module: `None` when
/// unset, else the trimmed text.
pub fn var(name: &str) -> Result<Option<String>, EnvError> {
    value(name, std::env::var_os(name))
}

/// The rule on a value already read (`raw`, `None` when unset): non-UTF-8 and empty
/// values are refused; the text is returned trimmed.
pub fn value(name: &str, raw: Option<OsString>) -> Result<Option<String>, EnvError> {
    let Some(raw) = raw else { return Ok(None) };
    let s = raw.into_string().map_err(|raw| EnvError {
        var: name.to_string(),
        value: raw.to_string_lossy().into_owned(),
        problem: Problem::NotUtf8,
    })?;
    let t = s.trim();
    if t.is_empty() {
        return Err(EnvError { var: name.to_string(), value: s, problem: Problem::Empty });
    }
    Ok(Some(t.to_string()))
}

/// The error for `v`, a value of `name` that is none of `expected`.
pub fn bad(name: &str, v: &str, expected: &str) -> EnvError {
    EnvError { var: name.to_string(), value: v.to_string(), problem: Problem::Expected(expected.to_string()) }
}

/// `f(v)`, or the error that `v` is none of `expected`.
pub fn parse<T>(name: &str, v: &str, expected: &str, f: impl FnOnce(&str) -> Option<T>) -> Result<T, EnvError> {
    f(v).ok_or_else(|| bad(name, v, expected))
}

/// The value of `choices` whose name is `v` (case-insensitive); the error lists the names.
pub fn choice<T: Copy>(name: &str, v: &str, choices: &[(&str, T)]) -> Result<T, EnvError> {
    if let Some(&(_, t)) = choices.iter().find(|(n, _)| n.eq_ignore_ascii_case(v)) {
        return Ok(t);
    }
    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
    let expected = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    };
    Err(bad(name, v, &expected))
}

/// An on/off switch: `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`.
pub fn switch(name: &str, v: &str) -> Result<bool, EnvError> {
    parse(name, v, "on or off (1/0, true/false, yes/no)", |v| match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    })
}

/// [`var`] then [`switch`]: `None` when unset.
pub fn switch_var(name: &str) -> Result<Option<bool>, EnvError> {
    var(name)?.map(|v| switch(name, &v)).transpose()
}

/// [`var`] then [`choice`]: `None` when unset.
pub fn choice_var<T: Copy>(name: &str, choices: &[(&str, T)]) -> Result<Option<T>, EnvError> {
    var(name)?.map(|v| choice(name, &v, choices)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_utf8() -> OsString {
        use std::os::unix::ffi::OsStringExt;
        OsString::from_vec(vec![b'o', b'n', 0xff])
    }

    #[test]
    fn unset_is_the_default_and_values_are_trimmed() {
        assert_eq!(value("NPURT_X", None), Ok(None));
        assert_eq!(value("NPURT_X", Some(" on\t".into())), Ok(Some("on".into())));
    }

    #[test]
    fn non_utf8_empty_and_blank_values_are_refused_naming_the_variable() {
        let e = value("NPURT_X", Some(not_utf8())).unwrap_err();
        assert_eq!(e.problem, Problem::NotUtf8);
        let msg = Error::from(e).to_string();
        assert!(msg.starts_with("invalid configuration: NPURT_X=\"on\u{fffd}\": not valid UTF-8"), "{msg}");
        for blank in ["", " ", "\t\n"] {
            let e = value("NPURT_Y", Some(blank.into())).unwrap_err();
            assert_eq!((e.var.as_str(), &e.problem), ("NPURT_Y", &Problem::Empty), "{blank:?}");
            assert!(matches!(Error::from(e), Error::Config(m) if m.contains("NPURT_Y") && m.contains("empty")));
        }
    }

    #[test]
    fn unknown_values_are_refused_with_what_is_accepted() {
        let c = [("latency", 1), ("throughput", 2), ("balanced", 3)];
        assert_eq!(choice("NPURT_S", "Latency", &c), Ok(1));
        let e = choice("NPURT_S", "fast", &c).unwrap_err().to_string();
        assert_eq!(e, "NPURT_S=\"fast\": expected latency, throughput or balanced");
        assert_eq!(switch("NPURT_B", "YES"), Ok(true));
        assert_eq!(switch("NPURT_B", "off"), Ok(false));
        let e = switch("NPURT_B", "zzz").unwrap_err();
        assert!(e.to_string().starts_with("NPURT_B=\"zzz\": expected on or off"), "{e}");
        assert!(parse("NPURT_N", "x", "a count", |v| v.parse::<usize>().ok()).is_err());
    }

    #[test]
    fn the_knob_list_has_no_duplicates() {
        let mut seen = std::collections::BTreeSet::new();
        assert!(KNOBS.iter().all(|k| k.starts_with("NPURT_") && seen.insert(*k)), "{KNOBS:?}");
    }
}
