//! What the op mapping's parts share: the reason a node is declined, and attribute readers.

use std::collections::HashMap;

use runtime::DType;

use crate::graph::Attr;

/// Why a node stays on ORT. `Send + Sync`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline(pub String);

/// `Err` of a [`Decline`] with `msg`.
pub fn decline<T>(msg: impl Into<String>) -> Result<T, Decline> {
    Err(Decline(msg.into()))
}

/// Attribute readers that refuse any attribute the mapping does not know.
/// `Send + Sync`: it borrows owned data.
pub struct Attrs<'a> {
    pub map: &'a HashMap<String, Attr>,
}

impl Attrs<'_> {
    pub fn only(&self, known: &[&str]) -> Result<(), Decline> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => decline(format!("attribute `{k}` is not mapped")),
            None => Ok(()),
        }
    }
    pub fn int(&self, name: &str, default: i64) -> Result<i64, Decline> {
        match self.map.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(_) => decline(format!("attribute `{name}` is not an int")),
        }
    }
    pub fn float(&self, name: &str, default: f32) -> Result<f32, Decline> {
        match self.map.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(_) => decline(format!("attribute `{name}` is not a float")),
        }
    }
    pub fn string(&self, name: &str, default: &str) -> Result<String, Decline> {
        match self.map.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::String(v)) => Ok(v.clone()),
            Some(_) => decline(format!("attribute `{name}` is not a string")),
        }
    }
    pub fn flag(&self, name: &str) -> Result<bool, Decline> {
        match self.int(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => decline(format!("attribute `{name}` = {v}")),
        }
    }
}

/// npurt's dtype for a tensor of ONNX element type `elem` that a node reads or writes: as
/// [`dtype_of`], and ONNX's bool (9) as npurt's u8, whose 0 and 1 are the same bytes. Sound
/// because no claimed op reads a bool other than as its 0/1 bytes (Cast from bool gives 0
/// or 1, a reshape, Concat, Slice, Split, Expand or Where's x and y move bytes, Where's
/// condition tests them for non-zero, Equal compares them) and none writes one but Equal
/// (0 or 1) and the ops that move bools they read.
pub fn operand_dtype(elem: i32) -> Option<DType> {
    if elem == BOOL { Some(DType::U8) } else { dtype_of(elem) }
}

/// ONNX's element type of bool.
pub const BOOL: i32 = 9;

/// npurt's dtype for an ONNX element type (`ONNXTensorElementDataType`) as a value type, such
/// as a Cast's `to`; `None` for the ones npurt has not (bool included: a Cast to bool is
/// `x != 0`, npurt's Cast to u8 truncates).
pub fn dtype_of(elem: i32) -> Option<DType> {
    match elem {
        1 => Some(DType::F32),
        2 => Some(DType::U8),
        6 => Some(DType::I32),
        7 => Some(DType::I64),
        10 => Some(DType::F16),
        16 => Some(DType::BF16),
        _ => None,
    }
}
