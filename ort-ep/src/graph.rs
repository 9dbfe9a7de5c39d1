//! Reading an `OrtGraph` that ORT passes to `GetCapability`: its nodes, with their op type,
//! domain and name copied out (ORT's strings live only as long as the call).

use core::ffi::{CStr, c_char};
use std::ptr;

use crate::abi::{OrtGraph, OrtNode};
use crate::ort::{EpError, Ort};

/// One node of a graph, as `GetCapability` sees it. `Send + Sync` apart from `node`, a handle
/// valid only during the call that produced it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: *const OrtNode,
    pub name: String,
    pub op_type: String,
    /// The op's domain; empty for the default ONNX domain.
    pub domain: String,
}

impl NodeInfo {
    /// `op_type` in `domain`, as messages name it (`Relu`, `com.microsoft:Attention`).
    pub fn qualified_op(&self) -> String {
        if self.domain.is_empty() || self.domain == "ai.onnx" {
            self.op_type.clone()
        } else {
            format!("{}:{}", self.domain, self.op_type)
        }
    }
}

/// The nodes of `graph`, in ORT's order.
///
/// # Safety
/// `graph` is the graph ORT passed to the current call.
pub unsafe fn nodes(ort: &Ort, graph: *const OrtGraph) -> Result<Vec<NodeInfo>, EpError> {
    let mut n = 0usize;
    // SAFETY: graph is valid for this call; n is written.
    ort.check("Graph_GetNumNodes", unsafe { (ort.api.Graph_GetNumNodes)(graph, &mut n) })?;
    let mut handles: Vec<*const OrtNode> = vec![ptr::null(); n];
    // SAFETY: handles has room for n node pointers.
    ort.check("Graph_GetNodes", unsafe { (ort.api.Graph_GetNodes)(graph, handles.as_mut_ptr(), n) })?;
    handles
        .into_iter()
        .map(|node| {
            let text = |call: &'static str, f: unsafe extern "system" fn(*const OrtNode, *mut *const c_char) -> ort_sys::OrtStatusPtr| {
                let mut s: *const c_char = ptr::null();
                // SAFETY: node is one of the graph's nodes, valid for this call.
                ort.check(call, unsafe { f(node, &mut s) })?;
                // SAFETY: ORT returns a NUL-terminated string owned by the node (or null).
                Ok::<_, EpError>(if s.is_null() { String::new() } else { unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned() })
            };
            Ok(NodeInfo {
                node,
                name: text("Node_GetName", ort.api.Node_GetName)?,
                op_type: text("Node_GetOperatorType", ort.api.Node_GetOperatorType)?,
                domain: text("Node_GetDomain", ort.api.Node_GetDomain)?,
            })
        })
        .collect()
}
