//! Reading `.safetensors` files: an 8-byte little-endian header length, a JSON header
//! naming each tensor's dtype, shape and byte range, then the data.

use runtime::{DType, Error, HostTensor, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::Io(format!("{path}: {msg}"))
}

/// Every tensor of a safetensors file, by name (f32 and f16/bf16 kept as stored; F64
/// converted to f32; integer tensors as i64/i32).
pub fn load(path: impl AsRef<Path>) -> Result<HashMap<String, HostTensor>> {
    let p = path.as_ref();
    let name = p.display().to_string();
    let bytes = std::fs::read(p).map_err(|e| bad(&name, e))?;
    parse(&bytes, &name)
}

pub fn parse(bytes: &[u8], name: &str) -> Result<HashMap<String, HostTensor>> {
    if bytes.len() < 8 {
        return Err(bad(name, "too short for a safetensors file"));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().map_err(|_| bad(name, "header"))?) as usize;
    let header = bytes.get(8..8usize.saturating_add(n)).ok_or_else(|| bad(name, "truncated header"))?;
    let json: serde_json::Value = serde_json::from_slice(header).map_err(|e| bad(name, format!("header JSON: {e}")))?;
    let data = &bytes[8 + n..];
    let obj = json.as_object().ok_or_else(|| bad(name, "header is not an object"))?;
    let mut out = HashMap::new();
    for (k, v) in obj {
        if k == "__metadata__" {
            continue;
        }
        let dt = v.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| bad(name, format!("{k}: no dtype")))?;
        let shape: Vec<usize> = v
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| bad(name, format!("{k}: no shape")))?
            .iter()
            .map(|d| d.as_u64().map(|x| x as usize).ok_or_else(|| bad(name, format!("{k}: bad shape"))))
            .collect::<Result<_>>()?;
        let offs = v
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .ok_or_else(|| bad(name, format!("{k}: no data_offsets")))?;
        let (s, e) = (offs[0].as_u64().unwrap_or(u64::MAX) as usize, offs[1].as_u64().unwrap_or(0) as usize);
        let raw = data
            .get(s..e)
            .filter(|_| s <= e)
            .ok_or_else(|| bad(name, format!("{k}: data range {s}..{e} out of bounds")))?;
        let (dtype, bytes): (DType, Vec<u8>) = match dt {
            "F32" => (DType::F32, raw.to_vec()),
            "F16" => (DType::F16, raw.to_vec()),
            "BF16" => (DType::BF16, raw.to_vec()),
            "I64" => (DType::I64, raw.to_vec()),
            "I32" => (DType::I32, raw.to_vec()),
            "U8" | "BOOL" => (DType::U8, raw.to_vec()),
            "F64" => (
                DType::F32,
                raw.chunks_exact(8)
                    .flat_map(|c| (f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).to_le_bytes())
                    .collect(),
            ),
            other => return Err(bad(name, format!("{k}: unsupported dtype {other}"))),
        };
        let numel: usize = shape.iter().product();
        if bytes.len() != numel * dtype.size() {
            return Err(bad(name, format!("{k}: {} bytes for {dt} {shape:?}", bytes.len())));
        }
        out.insert(k.clone(), HostTensor { dtype, shape: shape.into(), bytes: Arc::new(bytes) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_small_file() {
        let header = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}"#;
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header);
        f.extend_from_slice(&1f32.to_le_bytes());
        f.extend_from_slice(&2f32.to_le_bytes());
        let m = parse(&f, "mem").unwrap();
        assert_eq!(m["a"].shape.dims(), &[2]);
        assert_eq!(&m["a"].bytes[4..8], &2f32.to_le_bytes());
        assert!(parse(&f[..12], "mem").is_err());
    }
}
