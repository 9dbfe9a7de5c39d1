//! `"key=value;..."` option strings: the runtime's knobs and a compiled graph's.

use crate::error::{CResult, Fail};
use npurt::{Precision, RuntimeConfig};

/// The pairs of `"key=value;key=value"`: keys and values trimmed, empty items skipped, a
/// key given twice or an item without `=` rejected.
pub(crate) fn pairs(text: Option<&str>, what: &str) -> CResult<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for item in text.unwrap_or("").split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            return Err(Fail::arg(format!("{what}: {item:?} is not key=value")));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(Fail::arg(format!("{what}: {item:?} has no key")));
        }
        if out.iter().any(|(o, _)| o == k) {
            return Err(Fail::arg(format!("{what}: {k:?} is given twice")));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// The runtime options and the `NPURT_*` variable each one sets.
const RUNTIME_KEYS: &[(&str, &str)] = &[
    ("backend", "NPURT_BACKEND"),
    ("devices", "NPURT_DEVICES"),
    ("cpu_devices", "NPURT_CPU_DEVICES"),
    ("threads", "NPURT_THREADS"),
    ("pool_limit", "NPURT_POOL_LIMIT"),
    ("alignment", "NPURT_ALIGNMENT"),
    ("memory_reuse", "NPURT_MEMORY_REUSE"),
    ("max_streams", "NPURT_MAX_STREAMS"),
    ("scheduling", "NPURT_SCHEDULING"),
    ("hw_mapping", "NPURT_HW_MAPPING"),
    ("precision", "NPURT_PRECISION"),
];

/// The configuration `npurt_runtime_new` uses: the defaults, then the `NPURT_*`
/// environment, then `options` (each key with the syntax of its environment variable).
pub(crate) fn runtime_config(options: Option<&str>) -> CResult<RuntimeConfig> {
    let mut c = RuntimeConfig::default();
    c.apply_env().map_err(Fail::from)?;
    for (k, v) in pairs(options, "runtime options")? {
        let Some(&(_, var)) = RUNTIME_KEYS.iter().find(|(key, _)| *key == k) else {
            let known: Vec<&str> = RUNTIME_KEYS.iter().map(|(k, _)| *k).collect();
            return Err(Fail::arg(format!("unknown runtime option {k:?}; known: {}", known.join(", "))));
        };
        c.apply_overrides(|name| (name == var).then(|| v.clone()))
            .map_err(|e| Fail::arg(format!("runtime option {k}={v:?}: {e}")))?;
    }
    c.validate().map_err(Fail::from)?;
    Ok(c)
}

/// What `npurt_graph_from_bert` takes from its options.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GraphOptions {
    pub(crate) precision: Option<Precision>,
    /// Most streams one run uses.
    pub(crate) streams: Option<usize>,
    /// Most runs in flight at once.
    pub(crate) max_arenas: Option<usize>,
    pub(crate) device: usize,
    /// Seed of a preset's random weights.
    pub(crate) seed: u64,
}

pub(crate) fn graph_options(options: Option<&str>) -> CResult<GraphOptions> {
    let mut g = GraphOptions { precision: None, streams: None, max_arenas: None, device: 0, seed: 42 };
    let count = |k: &str, v: &str| -> CResult<usize> {
        v.parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Fail::arg(format!("graph option {k}={v:?}: expected a count of at least 1")))
    };
    for (k, v) in pairs(options, "graph options")? {
        match k.as_str() {
            "precision" => {
                g.precision = Some(Precision::parse(&v).ok_or_else(|| {
                    Fail::arg(format!("graph option precision={v:?}: not a precision of compiled graphs"))
                })?)
            }
            "streams" => g.streams = Some(count(&k, &v)?),
            "max_arenas" => g.max_arenas = Some(count(&k, &v)?),
            "device" => {
                g.device =
                    v.parse().map_err(|_| Fail::arg(format!("graph option device={v:?}: expected a device index")))?
            }
            "seed" => {
                g.seed = v.parse().map_err(|_| Fail::arg(format!("graph option seed={v:?}: expected an integer")))?
            }
            _ => {
                return Err(Fail::arg(format!(
                    "unknown graph option {k:?}; known: precision, streams, max_arenas, device, seed"
                )));
            }
        }
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NPURT_ERR_INVALID_ARGUMENT;

    #[test]
    fn option_strings_parse_and_reject_what_they_do_not_know() {
        assert_eq!(pairs(None, "o").unwrap(), vec![]);
        assert_eq!(
            pairs(Some(" a = 1 ;; b=x,y; "), "o").unwrap(),
            vec![("a".into(), "1".into()), ("b".into(), "x,y".into())]
        );
        assert!(pairs(Some("a"), "o").unwrap_err().msg.contains("not key=value"));
        assert!(pairs(Some("a=1;a=2"), "o").unwrap_err().msg.contains("twice"));
        let c = runtime_config(Some("backend=cpu;threads=2;pool_limit=64M;memory_reuse=off;max_streams=4")).unwrap();
        assert_eq!(c.backend.as_deref(), Some("cpu"));
        assert_eq!(c.threads, Some(2));
        assert_eq!(c.pool.limit_bytes, Some(64 << 20));
        assert!(!c.pool.reuse);
        assert_eq!(c.max_streams, 4);
        let e = runtime_config(Some("colour=blue")).unwrap_err();
        assert_eq!(e.status, NPURT_ERR_INVALID_ARGUMENT);
        assert!(e.msg.contains("unknown runtime option \"colour\""), "{}", e.msg);
        let e = runtime_config(Some("threads=lots")).unwrap_err();
        assert!(e.msg.starts_with("runtime option threads=\"lots\""), "{}", e.msg);
        assert_eq!(runtime_config(Some("max_streams=0")).unwrap_err().status, NPURT_ERR_INVALID_ARGUMENT);
    }

    #[test]
    fn graph_options_parse() {
        let g = graph_options(Some("precision=bf16;streams=2;max_arenas=3;seed=7")).unwrap();
        assert_eq!(g.precision, Some(Precision::Bf16));
        assert_eq!((g.streams, g.max_arenas, g.seed), (Some(2), Some(3), 7));
        assert_eq!(graph_options(Some("precision=f8")).unwrap_err().status, NPURT_ERR_INVALID_ARGUMENT);
        assert_eq!(graph_options(Some("streams=0")).unwrap_err().status, NPURT_ERR_INVALID_ARGUMENT);
        assert!(graph_options(Some("fast=yes")).unwrap_err().msg.contains("unknown graph option"));
    }
}
