//! The `OrtEp` one session uses: `GetCapability` claims the nodes npurt computes as ONNX does
//! (`crate::ops`), grouped without cycles (`crate::partition`) into fused nodes; `Compile`
//! turns each into an npurt compiled graph (`crate::kernel`).

use core::ffi::c_char;
use std::ptr;

use crate::abi::{
    EP_API_VERSION, OrtEp, OrtEpGraphSupportInfo, OrtGraph, OrtLogger, OrtNode, OrtNodeComputeInfo,
    OrtNodeFusionOptions, StatusPtr,
};
use crate::graph::NodeInfo;
use crate::names::EP_NAME;
use crate::options::EpOptions;
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
    /// npurt's runtime over the backend the options select.
    rt: npurt::Runtime,
}

impl Ep {
    /// A new EP for a session with `options` on the npurt runtime they select
    /// ([`crate::devices::open_runtime`]): `backend`, `device_id` (else `selected`, npurt's index
    /// of the device the application selected), `precision` and `graph_capture` go into its
    /// configuration; `log_level` sets the `log` filter ([`crate::logging`]).
    pub fn new(
        ort: Ort,
        options: EpOptions,
        selected: Option<u32>,
        logger: *const OrtLogger,
    ) -> Result<Box<Ep>, EpError> {
        crate::logging::set_level(options.log_level);
        let rt = crate::devices::open_runtime(&options, selected)?;
        let msg = format!(
            "NpurtExecutionProvider on npurt's {} backend, device {}, precision {}, graph capture {}",
            rt.backend_name(),
            rt.device_info(0).map(|i| i.name.as_str()).unwrap_or("?"),
            rt.config().precision.name(),
            format!("{:?}", rt.config().graph_capture).to_lowercase(),
        );
        // To ORT's default logger through crate::logging (at the `log` level info).
        log::info!("{msg}");
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
            rt,
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
        let groups = claim(&nodes, &ep.rt);
        let options = OrtNodeFusionOptions { ort_version_supported: EP_API_VERSION, drop_constant_initializers: true };
        for group in &groups.groups {
            let handles: Vec<*const OrtNode> = group.iter().map(|&i| nodes[i].node).collect();
            // SAFETY: the handles are nodes of `graph`; ORT copies the list.
            let st = unsafe {
                (ep.ort.ep.EpGraphSupportInfo_AddNodesToFuse)(support, handles.as_ptr(), handles.len(), &options)
            };
            ep.ort.check("EpGraphSupportInfo_AddNodesToFuse", ort_sys::OrtStatusPtr(st))?;
        }
        let msg = groups.summary(&nodes);
        log::debug!("{msg}");
        // SAFETY: the session's logger, valid for the EP's life.
        unsafe { ep.ort.log(ep.logger, ort_sys::OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE, &msg) };
        Ok(())
    })
}

unsafe extern "system" fn compile(
    this: *mut OrtEp,
    graphs: *mut *const OrtGraph,
    fused_nodes: *mut *const OrtNode,
    count: usize,
    node_compute_infos: *mut *mut OrtNodeComputeInfo,
    _ep_context_nodes: *mut *mut OrtNode,
) -> StatusPtr {
    // SAFETY: ORT passes back an EP made by CreateEp.
    let ep = unsafe { Ep::get(this) };
    ep.ort.guard("Compile", || {
        if count > 0 && (graphs.is_null() || fused_nodes.is_null() || node_compute_infos.is_null()) {
            return Err(EpError::Null("graphs"));
        }
        let mut made = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: ORT passes arrays of `count` entries, valid during this call.
            let (graph, fused) = unsafe { (*graphs.add(i), *fused_nodes.add(i)) };
            // SAFETY: as above. On an error the kernels made so far are dropped with `made`.
            made.push(unsafe { crate::kernel::compile(ep.ort, &ep.rt, graph, fused) }?);
        }
        for (i, k) in made.into_iter().enumerate() {
            // SAFETY: node_compute_infos has `count` slots; ORT releases each through
            // ReleaseNodeComputeInfos.
            unsafe { *node_compute_infos.add(i) = k.into_raw() };
        }
        Ok(())
    })
}

unsafe extern "system" fn release_node_compute_infos(
    _this: *mut OrtEp,
    node_compute_infos: *mut *mut OrtNodeComputeInfo,
    num: usize,
) {
    // Dropping a compiled graph does not panic; if it did, nothing may unwind into ORT.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: ORT hands back the infos Compile made, once.
        unsafe { crate::kernel::release(node_compute_infos, num) }
    });
}

/// What `GetCapability` decided: the groups to fuse and the nodes declined, with why.
pub struct Claim {
    pub groups: Vec<Vec<usize>>,
    pub declined: Vec<(usize, String)>,
}

impl Claim {
    /// One log line: the groups claimed and every node declined with its reason.
    pub fn summary(&self, nodes: &[NodeInfo]) -> String {
        let claimed: usize = self.groups.iter().map(Vec::len).sum();
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| format!("[{}]", g.iter().map(|&i| nodes[i].label()).collect::<Vec<_>>().join(", ")))
            .collect();
        let declined: Vec<String> =
            self.declined.iter().map(|(i, why)| format!("{}: {why}", nodes[*i].label())).collect();
        format!(
            "NpurtExecutionProvider claims {claimed} of {} node(s) in {} fused group(s) {}; declines {}: {}",
            nodes.len(),
            self.groups.len(),
            groups.join(" "),
            self.declined.len(),
            declined.join("; ")
        )
    }
}

/// Decides which nodes npurt runs and how they are grouped: a node the graph walk folds or
/// maps (`crate::ops::walk::claim`), a mapped one only where `rt`'s backend has a kernel.
pub fn claim(nodes: &[NodeInfo], rt: &npurt::Runtime) -> Claim {
    let mut declined = Vec::new();
    let accept = |m: &crate::ops::Mapped| {
        rt.select_kernel(&m.op, &m.inputs)
            .map(|_| ())
            .map_err(|e| crate::ops::Decline(format!("no kernel on npurt's {} backend: {e}", rt.backend_name())))
    };
    let (verdicts, groups) = crate::ops::walk::claim(nodes, &accept);
    for (i, v) in verdicts.into_iter().enumerate() {
        if let Err(d) = v {
            declined.push((i, d.0));
        }
    }
    match groups {
        Some(groups) => Claim { groups, declined },
        None => Claim {
            groups: Vec::new(),
            declined: (0..nodes.len()).map(|i| (i, "the graph's nodes form a cycle".to_string())).collect(),
        },
    }
}

unsafe extern "system" fn get_compatibility_info(_this: *mut OrtEp, _graph: *const OrtGraph) -> *const c_char {
    // No pre-compiled (EPContext) models: nothing to be compatible with (an empty string, never
    // null, which ORT would copy into a std::string).
    c"".as_ptr()
}

unsafe extern "system" fn is_concurrent_run_supported(_this: *mut OrtEp, is_supported: *mut bool) -> StatusPtr {
    // The EP holds no per-run state; each compiled graph runs from several threads at once.
    if !is_supported.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *is_supported = true };
    }
    ptr::null_mut()
}
