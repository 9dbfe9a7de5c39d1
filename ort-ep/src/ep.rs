//! The `OrtEp` one session uses. So far it claims no node: `GetCapability` leaves the whole
//! graph to ORT's other EPs, so a session with the EP selected runs, and computes exactly what
//! it would without it.

use core::ffi::c_char;
use std::ptr;

use crate::abi::{
    EP_API_VERSION, OrtEp, OrtEpGraphSupportInfo, OrtGraph, OrtLogger, OrtNode, OrtNodeComputeInfo, StatusPtr,
};
use crate::names::EP_NAME;
use crate::options::{BackendChoice, EpOptions};
use crate::ort::{EpError, Ort};

/// One EP instance (one per session). `base` comes first so that the `OrtEp*` ORT passes back
/// points at the whole struct. Immutable after creation: ORT may call it from several threads.
#[repr(C)]
pub struct Ep {
    base: OrtEp,
    ort: Ort,
    options: EpOptions,
    /// The session's logger (valid for the EP's life).
    logger: *const OrtLogger,
}

impl Ep {
    /// A new EP for a session with `options`. The backend is npurt's CPU backend: `auto` and
    /// `cpu` select it; `acl` and `cuda` are refused until their devices are offered.
    pub fn new(ort: Ort, options: EpOptions, logger: *const OrtLogger) -> Result<Box<Ep>, EpError> {
        match options.backend {
            BackendChoice::Auto | BackendChoice::Cpu => {}
            BackendChoice::Acl | BackendChoice::Cuda => {
                let name = if options.backend == BackendChoice::Acl { "acl" } else { "cuda" };
                return Err(EpError::NotImplemented(format!(
                    "option `backend` = `{name}`: this version of the EP runs on npurt's CPU backend only (use `auto` or `cpu`)"
                )));
            }
        }
        Ok(Box::new(Ep {
            base: OrtEp {
                ort_version_supported: EP_API_VERSION,
                GetName: Some(get_name),
                GetCapability: Some(get_capability),
                Compile: Some(compile),
                ReleaseNodeComputeInfos: Some(release_node_compute_infos),
                GetPreferredDataLayout: None,
                ShouldConvertDataLayoutForOp: None,
                SetDynamicOptions: None,
                OnRunStart: None,
                OnRunEnd: None,
                CreateAllocator: None,
                CreateSyncStreamForDevice: None,
                GetCompiledModelCompatibilityInfo: Some(get_compatibility_info),
                GetKernelRegistry: None,
                IsConcurrentRunSupported: Some(is_concurrent_run_supported),
            },
            ort,
            options,
            logger,
        }))
    }

    /// The parsed options this EP was created with.
    pub fn options(&self) -> &EpOptions {
        &self.options
    }

    pub fn into_raw(self: Box<Self>) -> *mut OrtEp {
        Box::into_raw(self).cast()
    }

    /// # Safety
    /// `p` came from [`Ep::into_raw`] and is not used afterwards.
    pub unsafe fn from_raw(p: *mut OrtEp) -> Box<Ep> {
        // SAFETY: per the contract, p is a Box<Ep> whose first field is the OrtEp.
        unsafe { Box::from_raw(p.cast::<Ep>()) }
    }

    /// # Safety
    /// `p` came from [`Ep::into_raw`] and is not yet released.
    unsafe fn get<'a>(p: *const OrtEp) -> &'a Ep {
        // SAFETY: per the contract; `base` is the first field of the repr(C) Ep.
        unsafe { &*p.cast::<Ep>() }
    }
}

unsafe extern "system" fn get_name(_this: *const OrtEp) -> *const c_char {
    EP_NAME.as_ptr()
}

unsafe extern "system" fn get_capability(
    this: *mut OrtEp,
    graph: *const OrtGraph,
    support: *mut OrtEpGraphSupportInfo,
) -> StatusPtr {
    // SAFETY: ORT passes back an EP made by CreateEp.
    let ep = unsafe { Ep::get(this) };
    ep.ort.guard("GetCapability", || {
        if graph.is_null() || support.is_null() {
            return Err(EpError::Null("graph"));
        }
        // SAFETY: ORT's graph, valid during this call.
        let nodes = unsafe { crate::graph::nodes(&ep.ort, graph) }?;
        // No node is claimed yet: the graph stays with ORT's other EPs.
        let ops: Vec<String> = nodes.iter().map(|n| format!("{} ({})", n.name, n.qualified_op())).collect();
        let msg = format!("NpurtExecutionProvider declines all {} node(s): {}", nodes.len(), ops.join(", "));
        log::debug!("{msg}");
        // SAFETY: the session's logger, valid for the EP's life.
        unsafe { ep.ort.log(ep.logger, ort_sys::OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE, &msg) };
        Ok(())
    })
}

unsafe extern "system" fn compile(
    this: *mut OrtEp,
    _graphs: *mut *const OrtGraph,
    _fused_nodes: *mut *const OrtNode,
    count: usize,
    _node_compute_infos: *mut *mut OrtNodeComputeInfo,
    _ep_context_nodes: *mut *mut OrtNode,
) -> StatusPtr {
    // SAFETY: ORT passes back an EP made by CreateEp.
    let ep = unsafe { Ep::get(this) };
    ep.ort.guard("Compile", || {
        Err(EpError::NotImplemented(format!("asked to compile {count} fused node(s), but this EP claims none yet")))
    })
}

unsafe extern "system" fn release_node_compute_infos(
    _this: *mut OrtEp,
    _node_compute_infos: *mut *mut OrtNodeComputeInfo,
    _num: usize,
) {
    // compile never hands any out.
}

unsafe extern "system" fn get_compatibility_info(_this: *mut OrtEp, _graph: *const OrtGraph) -> *const c_char {
    // No pre-compiled (EPContext) models: nothing to be compatible with (an empty string, never
    // null, which ORT would copy into a std::string).
    c"".as_ptr()
}

unsafe extern "system" fn is_concurrent_run_supported(_this: *mut OrtEp, is_supported: *mut bool) -> StatusPtr {
    // The EP holds no per-run state.
    if !is_supported.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *is_supported = true };
    }
    ptr::null_mut()
}
