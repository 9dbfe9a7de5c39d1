//! What the op mapping's parts share: the reason a node is declined, and attribute readers.

use std::collections::HashMap;

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
