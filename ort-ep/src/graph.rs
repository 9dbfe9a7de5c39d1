//! Reading an `OrtGraph` that ORT passes to `GetCapability` and `Compile`: its nodes, their
//! operands (name, element type, shape, whether a constant initializer) and attributes,
//! copied out (ORT's strings and arrays live only as long as the call).

use core::ffi::{CStr, c_char, c_void};
use std::collections::HashMap;
use std::ptr;

use ort_sys::{OrtOpAttr, OrtOpAttrType, OrtTensorTypeAndShapeInfo, OrtTypeInfo, OrtValueInfo};

use crate::abi::{ONNXTensorElementDataType, OrtGraph, OrtNode};
use crate::ort::{EpError, Ort};

/// One operand of a node (or of a graph) as ORT declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueMeta {
    /// The value's name, unique in the model.
    pub name: String,
    /// The ONNX element type (`ONNXTensorElementDataType` as an integer); 0 when the value is
    /// not a tensor.
    pub elem: i32,
    /// The dims, -1 for a symbolic or unknown one; `None` when the rank is unknown.
    pub dims: Option<Vec<i64>>,
    /// Per dim, its symbolic name (`dim_param`, e.g. `batch`), empty for a fixed or an
    /// unnamed dim; empty when ORT reports none.
    pub symbols: Vec<String>,
    /// A constant initializer (a weight): its data is readable at `Compile`.
    pub constant: bool,
    /// The values of a small int64, int32 or bool constant initializer (at most
    /// [`SMALL_CONSTANT`] elements: a `Reshape`'s shape, a `Slice`'s bounds), read while the
    /// graph is walked;
    /// also the values folded on the host (`crate::ops::walk`).
    pub data: Option<Vec<i64>>,
    /// ORT's handle, valid only during the call that produced it.
    pub handle: *const OrtValueInfo,
}

impl ValueMeta {
    /// True when every dim is known.
    pub fn is_static(&self) -> bool {
        self.dims.as_ref().is_some_and(|d| d.iter().all(|&x| x >= 0))
    }

    /// The symbolic name of dim `i`, if it has one and is not fixed.
    pub fn symbol(&self, i: usize) -> Option<&str> {
        let fixed = self.dims.as_ref().is_some_and(|d| d.get(i).is_some_and(|&x| x >= 0));
        self.symbols.get(i).map(String::as_str).filter(|s| !s.is_empty() && !fixed)
    }
}

/// The most elements of an integer constant whose values [`ValueMeta::data`] holds: enough for
/// a shape, a list of axes, or the position-id buffer of an encoder export that a shape
/// subgraph slices (`[1, max_positions]`).
pub const SMALL_CONSTANT: usize = 4096;

/// An attribute value, as far as the ops the EP maps need.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    String(String),
    /// A tensor (a ConstantOfShape's `value`): its ONNX element type, and its bytes when its
    /// elements have a fixed width ([`elem_size`]) and number at most [`SMALL_CONSTANT`].
    Tensor {
        elem: i32,
        bytes: Option<Vec<u8>>,
    },
    /// Any other kind (graphs, string lists, float lists): never accepted.
    Other,
}

/// One node of a graph. `node` and the `handle`s of its operands are valid only during the
/// call that produced it; the rest is owned data.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: *const OrtNode,
    pub name: String,
    pub op_type: String,
    /// The op's domain; empty for the default ONNX domain.
    pub domain: String,
    /// The opset version of the op's definition.
    pub since_version: i32,
    /// Inputs in order; `None` for a missing optional one.
    pub inputs: Vec<Option<ValueMeta>>,
    /// Outputs in order; `None` for a missing optional one.
    pub outputs: Vec<Option<ValueMeta>>,
    pub attrs: HashMap<String, Attr>,
}

/// For each node, the nodes among `nodes` that produce one of its inputs (a value made
/// outside `nodes`, a graph input or an initializer, has no producer here).
pub fn predecessors(nodes: &[NodeInfo]) -> Vec<Vec<usize>> {
    let producer: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().flatten().map(move |v| (v.name.as_str(), i)))
        .collect();
    nodes
        .iter()
        .map(|n| n.inputs.iter().flatten().filter_map(|v| producer.get(v.name.as_str()).copied()).collect())
        .collect()
}

impl NodeInfo {
    /// `op_type` in `domain`, as messages name it (`Relu`, `com.microsoft:Attention`).
    pub fn qualified_op(&self) -> String {
        if self.is_onnx() { self.op_type.clone() } else { format!("{}:{}", self.domain, self.op_type) }
    }

    /// True for the default ONNX domain.
    pub fn is_onnx(&self) -> bool {
        self.domain.is_empty() || self.domain == "ai.onnx"
    }

    /// How messages name the node: `"name" (Op)`, or the first output's name when the
    /// node has none.
    pub fn label(&self) -> String {
        let name = if self.name.is_empty() {
            self.outputs.iter().flatten().next().map(|v| v.name.as_str()).unwrap_or("")
        } else {
            &self.name
        };
        format!("{name:?} ({})", self.qualified_op())
    }
}

/// Copies a string ORT returns (null is empty).
///
/// # Safety
/// `s` is null or a NUL-terminated string valid for the call.
unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
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
    // SAFETY: each handle is one of the graph's nodes, valid for this call.
    handles.into_iter().map(|node| unsafe { node_info(ort, node) }).collect()
}

/// Everything the EP reads of one node.
///
/// # Safety
/// `node` is a node ORT passed (or listed) during the current call.
pub unsafe fn node_info(ort: &Ort, node: *const OrtNode) -> Result<NodeInfo, EpError> {
    let string =
        |call: &'static str,
         f: unsafe extern "system" fn(*const OrtNode, *mut *const c_char) -> ort_sys::OrtStatusPtr| {
            let mut s: *const c_char = ptr::null();
            // SAFETY: node is valid for this call; ORT returns a string owned by the node (or null).
            ort.check(call, unsafe { f(node, &mut s) })?;
            // SAFETY: as above.
            Ok::<_, EpError>(unsafe { text(s) })
        };
    let mut since_version = 0i32;
    // SAFETY: node is valid; the out-parameter is written.
    ort.check("Node_GetSinceVersion", unsafe { (ort.api.Node_GetSinceVersion)(node, &mut since_version) })?;
    Ok(NodeInfo {
        node,
        name: string("Node_GetName", ort.api.Node_GetName)?,
        op_type: string("Node_GetOperatorType", ort.api.Node_GetOperatorType)?,
        domain: string("Node_GetDomain", ort.api.Node_GetDomain)?,
        since_version,
        // SAFETY: node is valid for this call.
        inputs: unsafe { operands(ort, node, true) }?,
        // SAFETY: as above.
        outputs: unsafe { operands(ort, node, false) }?,
        // SAFETY: as above.
        attrs: unsafe { attributes(ort, node) }?,
    })
}

/// The inputs (or outputs) of a node.
///
/// # Safety
/// `node` is valid for the current call.
unsafe fn operands(ort: &Ort, node: *const OrtNode, inputs: bool) -> Result<Vec<Option<ValueMeta>>, EpError> {
    let mut n = 0usize;
    let mut handles: Vec<*const OrtValueInfo>;
    if inputs {
        // SAFETY: node is valid; n is written, then handles has room for n.
        ort.check("Node_GetNumInputs", unsafe { (ort.api.Node_GetNumInputs)(node, &mut n) })?;
        handles = vec![ptr::null(); n];
        // SAFETY: as above.
        ort.check("Node_GetInputs", unsafe { (ort.api.Node_GetInputs)(node, handles.as_mut_ptr(), n) })?;
    } else {
        // SAFETY: as above.
        ort.check("Node_GetNumOutputs", unsafe { (ort.api.Node_GetNumOutputs)(node, &mut n) })?;
        handles = vec![ptr::null(); n];
        // SAFETY: as above.
        ort.check("Node_GetOutputs", unsafe { (ort.api.Node_GetOutputs)(node, handles.as_mut_ptr(), n) })?;
    }
    handles
        .into_iter()
        // SAFETY: each non-null handle is a value info of the node, valid for this call.
        .map(|h| if h.is_null() { Ok(None) } else { unsafe { value_meta(ort, h) }.map(Some) })
        .collect()
}

/// Name, element type, dims and constness of a value.
///
/// # Safety
/// `vi` is a non-null value info valid for the current call.
pub unsafe fn value_meta(ort: &Ort, vi: *const OrtValueInfo) -> Result<ValueMeta, EpError> {
    let mut name: *const c_char = ptr::null();
    // SAFETY: vi is valid; ORT returns a string it owns.
    ort.check("GetValueInfoName", unsafe { (ort.api.GetValueInfoName)(vi, &mut name) })?;
    let mut constant = false;
    // SAFETY: vi is valid; the out-parameter is written.
    ort.check("ValueInfo_IsConstantInitializer", unsafe {
        (ort.api.ValueInfo_IsConstantInitializer)(vi, &mut constant)
    })?;
    let mut meta = ValueMeta {
        // SAFETY: name is ORT's NUL-terminated string (or null).
        name: unsafe { text(name) },
        elem: 0,
        dims: None,
        symbols: Vec::new(),
        constant,
        data: None,
        handle: vi,
    };
    let mut ti: *const OrtTypeInfo = ptr::null();
    // SAFETY: vi is valid; the type info is owned by vi (not released here).
    ort.check("GetValueInfoTypeInfo", unsafe { (ort.api.GetValueInfoTypeInfo)(vi, &mut ti) })?;
    if ti.is_null() {
        return Ok(meta);
    }
    let mut tsi: *const OrtTensorTypeAndShapeInfo = ptr::null();
    // SAFETY: ti is valid; a non-tensor type gives null (owned by ti).
    ort.check("CastTypeInfoToTensorInfo", unsafe { (ort.api.CastTypeInfoToTensorInfo)(ti, &mut tsi) })?;
    if tsi.is_null() {
        return Ok(meta);
    }
    // SAFETY: tsi is a valid tensor info.
    let (elem, dims) = unsafe { tensor_info(ort, tsi) }?;
    // SAFETY: as above. Without a shape ORT reports rank 0: the rank is unknown (dims stay None).
    if !unsafe { (ort.api.TensorTypeAndShape_HasShape)(tsi) } {
        meta.elem = elem as i32;
        return Ok(meta);
    }
    if dims.iter().any(|&d| d < 0) {
        let mut names: Vec<*const c_char> = vec![ptr::null(); dims.len()];
        // SAFETY: names has room for one string per dim; ORT fills them with strings it owns.
        let st = unsafe { (ort.api.GetSymbolicDimensions)(tsi, names.as_mut_ptr(), names.len()) };
        ort.check("GetSymbolicDimensions", st)?;
        // SAFETY: each entry is null or ORT's NUL-terminated string, valid for this call.
        meta.symbols = names.into_iter().map(|s| unsafe { text(s) }).collect();
    }
    meta.elem = elem as i32;
    if constant && matches!(meta.elem, 6 | 7 | 9) {
        // SAFETY: vi is a constant initializer valid for this call.
        meta.data = unsafe { small_ints(ort, vi) }?;
    }
    meta.dims = Some(dims);
    Ok(meta)
}

/// The values of an int64, int32 or bool constant initializer of at most
/// [`SMALL_CONSTANT`] elements (`None` when ORT has no data for it).
///
/// # Safety
/// `vi` is a constant initializer valid for the current call.
unsafe fn small_ints(ort: &Ort, vi: *const OrtValueInfo) -> Result<Option<Vec<i64>>, EpError> {
    let mut value: *const ort_sys::OrtValue = ptr::null();
    // SAFETY: vi is valid; ORT returns a value it owns (or null).
    ort.check("ValueInfo_GetInitializerValue", unsafe { (ort.api.ValueInfo_GetInitializerValue)(vi, &mut value) })?;
    if value.is_null() {
        return Ok(None);
    }
    // SAFETY: value is a valid tensor owned by ORT during this call.
    let (elem, bytes) = unsafe { tensor_raw(ort, value) }?;
    Ok(bytes.and_then(|b| ints_of(elem, &b)))
}

/// Element type and dims of a tensor type-and-shape info.
///
/// # Safety
/// `tsi` is valid for the current call.
pub unsafe fn tensor_info(
    ort: &Ort,
    tsi: *const OrtTensorTypeAndShapeInfo,
) -> Result<(ONNXTensorElementDataType, Vec<i64>), EpError> {
    let mut elem = ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    // SAFETY: tsi is valid; out-parameters are written.
    ort.check("GetTensorElementType", unsafe { (ort.api.GetTensorElementType)(tsi, &mut elem) })?;
    let mut rank = 0usize;
    // SAFETY: as above.
    ort.check("GetDimensionsCount", unsafe { (ort.api.GetDimensionsCount)(tsi, &mut rank) })?;
    let mut dims = vec![0i64; rank];
    // SAFETY: dims has room for rank values.
    ort.check("GetDimensions", unsafe { (ort.api.GetDimensions)(tsi, dims.as_mut_ptr(), rank) })?;
    Ok((elem, dims))
}

/// The attributes of a node.
///
/// # Safety
/// `node` is valid for the current call.
unsafe fn attributes(ort: &Ort, node: *const OrtNode) -> Result<HashMap<String, Attr>, EpError> {
    let mut n = 0usize;
    // SAFETY: node is valid; n is written.
    ort.check("Node_GetNumAttributes", unsafe { (ort.api.Node_GetNumAttributes)(node, &mut n) })?;
    let mut handles: Vec<*const OrtOpAttr> = vec![ptr::null(); n];
    // SAFETY: handles has room for n attributes.
    ort.check("Node_GetAttributes", unsafe { (ort.api.Node_GetAttributes)(node, handles.as_mut_ptr(), n) })?;
    let mut out = HashMap::new();
    for a in handles.into_iter().filter(|a| !a.is_null()) {
        let mut name: *const c_char = ptr::null();
        // SAFETY: a is an attribute of node, valid for this call.
        ort.check("OpAttr_GetName", unsafe { (ort.api.OpAttr_GetName)(a, &mut name) })?;
        let mut ty = OrtOpAttrType::ORT_OP_ATTR_UNDEFINED;
        // SAFETY: as above.
        ort.check("OpAttr_GetType", unsafe { (ort.api.OpAttr_GetType)(a, &mut ty) })?;
        // SAFETY: as above.
        let value = unsafe { read_attr(ort, a, ty) }?;
        // SAFETY: name is ORT's string.
        out.insert(unsafe { text(name) }, value);
    }
    Ok(out)
}

/// Reads one attribute's value through `ReadOpAttr` (asking its size first for lists and
/// strings).
///
/// # Safety
/// `a` is valid for the current call.
unsafe fn read_attr(ort: &Ort, a: *const OrtOpAttr, ty: OrtOpAttrType) -> Result<Attr, EpError> {
    let read = |buf: *mut c_void, len: usize| {
        let mut out = 0usize;
        // SAFETY: buf has room for len bytes (or len is 0); out is written.
        let st = unsafe { (ort.api.ReadOpAttr)(a, ty, buf, len, &mut out) };
        (st, out)
    };
    match ty {
        OrtOpAttrType::ORT_OP_ATTR_INT => {
            let mut v = 0i64;
            let (st, _) = read((&mut v as *mut i64).cast(), size_of::<i64>());
            ort.check("ReadOpAttr", st)?;
            Ok(Attr::Int(v))
        }
        OrtOpAttrType::ORT_OP_ATTR_FLOAT => {
            let mut v = 0f32;
            let (st, _) = read((&mut v as *mut f32).cast(), size_of::<f32>());
            ort.check("ReadOpAttr", st)?;
            Ok(Attr::Float(v))
        }
        OrtOpAttrType::ORT_OP_ATTR_INTS | OrtOpAttrType::ORT_OP_ATTR_STRING => {
            // The first call (no room) reports the size and a status, dropped here.
            let (st, bytes) = read(ptr::null_mut(), 0);
            let _ = ort.check("ReadOpAttr", st);
            let mut buf = vec![0i64; bytes.div_ceil(8)];
            if bytes > 0 {
                let (st, _) = read(buf.as_mut_ptr().cast(), bytes);
                ort.check("ReadOpAttr", st)?;
            }
            if ty == OrtOpAttrType::ORT_OP_ATTR_INTS {
                buf.truncate(bytes / 8);
                return Ok(Attr::Ints(buf));
            }
            let raw: &[u8] = &bytemuck::cast_slice::<i64, u8>(&buf)[..bytes];
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            Ok(Attr::String(String::from_utf8_lossy(&raw[..end]).into_owned()))
        }
        // SAFETY: a is a tensor attribute valid for this call.
        OrtOpAttrType::ORT_OP_ATTR_TENSOR => unsafe { tensor_attr(ort, a) },
        _ => Ok(Attr::Other),
    }
}

/// A tensor attribute's element type and, for a tensor of a fixed-width element type and at
/// most [`SMALL_CONSTANT`] elements, its bytes.
///
/// # Safety
/// `a` is a tensor attribute valid for the current call.
unsafe fn tensor_attr(ort: &Ort, a: *const OrtOpAttr) -> Result<Attr, EpError> {
    let mut value: *mut ort_sys::OrtValue = ptr::null_mut();
    // SAFETY: a is valid; ORT makes a new value the caller releases.
    ort.check("OpAttr_GetTensorAttributeAsOrtValue", unsafe {
        (ort.api.OpAttr_GetTensorAttributeAsOrtValue)(a, &mut value)
    })?;
    if value.is_null() {
        return Ok(Attr::Other);
    }
    // SAFETY: value is the tensor ORT just made, released right after.
    let read = unsafe { tensor_raw(ort, value) };
    // SAFETY: value came from OpAttr_GetTensorAttributeAsOrtValue and is released once.
    unsafe { (ort.api.ReleaseValue)(value) };
    let (elem, bytes) = read?;
    Ok(Attr::Tensor { elem, bytes })
}

/// The size in bytes of one element of ONNX element type `elem`; `None` for strings and the
/// sub-byte and complex types.
pub fn elem_size(elem: i32) -> Option<usize> {
    match elem {
        2 | 3 | 9 => Some(1),
        4 | 5 | 10 | 16 => Some(2),
        1 | 6 | 12 => Some(4),
        7 | 11 | 13 => Some(8),
        _ => None,
    }
}

/// The elements of an int64, int32, uint8 or bool tensor's little-endian `bytes` as i64;
/// `None` for another element type or a length that is not a whole number of elements.
pub fn ints_of(elem: i32, bytes: &[u8]) -> Option<Vec<i64>> {
    let w = match elem {
        7 | 6 | 2 | 9 => elem_size(elem)?,
        _ => return None,
    };
    if !bytes.len().is_multiple_of(w) {
        return None;
    }
    let ints = bytes.chunks_exact(w).map(|c| match c.len() {
        8 => i64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
        4 => i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4]))),
        _ => i64::from(c[0]),
    });
    Some(ints.collect())
}

/// The ONNX element type and the dims of a tensor, the dims borrowed from ORT.
///
/// # Safety
/// `value` is a valid tensor for the lifetime `'a` the caller picks (the current call).
pub unsafe fn tensor_type_and_dims<'a>(
    ort: &Ort,
    value: *const ort_sys::OrtValue,
) -> Result<(i32, &'a [i64]), EpError> {
    let mut elem = ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    let mut dims: *const i64 = ptr::null();
    let mut rank = 0usize;
    // SAFETY: value is valid; ORT returns a pointer to its own shape array.
    ort.check("GetTensorElementTypeAndShapeDataReference", unsafe {
        (ort.api.GetTensorElementTypeAndShapeDataReference)(value, &mut elem, &mut dims, &mut rank)
    })?;
    let dims: &[i64] = if rank == 0 || dims.is_null() {
        &[]
    } else {
        // SAFETY: ORT's array of `rank` dims, alive with the value (for 'a).
        unsafe { std::slice::from_raw_parts(dims, rank) }
    };
    Ok((elem as i32, dims))
}

/// The element type of a host tensor and, for one of a fixed-width element type
/// ([`elem_size`]) and at most [`SMALL_CONSTANT`] elements, its bytes.
///
/// # Safety
/// `value` is a valid tensor for the current call.
unsafe fn tensor_raw(ort: &Ort, value: *const ort_sys::OrtValue) -> Result<(i32, Option<Vec<u8>>), EpError> {
    // SAFETY: value is a valid tensor for the current call, as this function's caller promises.
    let (elem, dims) = unsafe { tensor_type_and_dims(ort, value) }?;
    let n = dims.iter().try_fold(1usize, |n, &d| usize::try_from(d).ok().and_then(|d| n.checked_mul(d)));
    let (Some(n), Some(w)) = (n.filter(|&n| n <= SMALL_CONSTANT), elem_size(elem)) else { return Ok((elem, None)) };
    if n == 0 {
        return Ok((elem, Some(Vec::new())));
    }
    let mut data: *const c_void = ptr::null();
    // SAFETY: value is a valid tensor; ORT returns its data pointer.
    ort.check("GetTensorData", unsafe { (ort.api.GetTensorData)(value, &mut data) })?;
    if data.is_null() {
        return Ok((elem, None));
    }
    // SAFETY: a host tensor of n elements of w bytes each (n * w <= 8 * SMALL_CONSTANT).
    Ok((elem, Some(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), n * w) }.to_vec())))
}
