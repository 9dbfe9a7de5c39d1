//! The `OrtEpFactory` of `NpurtExecutionProvider`: names, the devices offered, and the creation
//! of one `OrtEp` per session.

use core::ffi::c_char;
use std::ptr;
use std::sync::Mutex;

use crate::abi::{
    EP_API_VERSION, ORT_COMPILED_MODEL_COMPATIBILITY_EP_NOT_APPLICABLE, OrtAllocator, OrtCompiledModelCompatibility,
    OrtCustomOpDomain, OrtDataTransferImpl, OrtEp, OrtEpDevice, OrtEpFactory, OrtHardwareDevice, OrtHardwareDeviceType,
    OrtKeyValuePairs, OrtLogger, OrtMemoryDevice, OrtMemoryInfo, OrtSessionOptions, OrtSyncStreamImpl, StatusPtr,
};
use crate::devices::{self, Offer};
use crate::ep::Ep;
use crate::names::{EP_NAME, EP_VENDOR, EP_VERSION};
use crate::options::EpOptions;
use crate::ort::{EpError, Ort};

/// The factory ORT holds. `base` comes first so that the `OrtEpFactory*` ORT passes back is a
/// pointer to the whole struct. `Send + Sync`: immutable after creation but for the list of
/// hardware devices it created, behind a mutex.
#[repr(C)]
pub struct Factory {
    base: OrtEpFactory,
    pub(crate) ort: Ort,
    /// NPU hardware devices made with `CreateHardwareDevice`, released on drop.
    created: Mutex<Vec<HardwareDevice>>,
}

impl Factory {
    pub fn new(ort: Ort) -> Box<Factory> {
        Box::new(Factory {
            base: OrtEpFactory {
                ort_version_supported: EP_API_VERSION,
                GetName: Some(get_name),
                GetVendor: Some(get_vendor),
                GetSupportedDevices: Some(get_supported_devices),
                CreateEp: Some(create_ep),
                ReleaseEp: Some(release_ep),
                GetVendorId: Some(get_vendor_id),
                GetVersion: Some(get_version),
                ValidateCompiledModelCompatibilityInfo: Some(validate_compatibility),
                CreateAllocator: Some(create_allocator),
                ReleaseAllocator: Some(release_allocator),
                CreateDataTransfer: Some(create_data_transfer),
                IsStreamAware: Some(is_stream_aware),
                CreateSyncStreamForDevice: Some(create_sync_stream),
                GetHardwareDeviceIncompatibilityDetails: None,
                CreateExternalResourceImporterForDevice: None,
                GetNumCustomOpDomains: Some(get_num_custom_op_domains),
                GetCustomOpDomains: Some(get_custom_op_domains),
            },
            ort,
            created: Mutex::new(Vec::new()),
        })
    }

    /// The pointer handed to ORT; [`Factory::from_raw`] takes it back.
    pub fn into_raw(self: Box<Self>) -> *mut OrtEpFactory {
        Box::into_raw(self).cast()
    }

    /// Takes back ownership of a factory made by [`Factory::into_raw`].
    ///
    /// # Safety
    /// `p` came from `into_raw` and is not used afterwards.
    pub unsafe fn from_raw(p: *mut OrtEpFactory) -> Box<Factory> {
        // SAFETY: per the contract, p is a Box<Factory> whose first field is the OrtEpFactory.
        unsafe { Box::from_raw(p.cast::<Factory>()) }
    }

    /// The factory behind a pointer ORT passes back.
    ///
    /// # Safety
    /// `p` is a pointer made by `into_raw`, not yet released.
    unsafe fn get<'a>(p: *const OrtEpFactory) -> &'a Factory {
        // SAFETY: per the contract; `base` is the first field of the repr(C) Factory.
        unsafe { &*p.cast::<Factory>() }
    }

    /// Offers one `OrtEpDevice` per device of the backend npurt's discovery selects
    /// ([`devices::discover`]): the CPU backend pairs with ORT's CPU hardware device, an Ascend
    /// device with an NPU hardware device created here (ORT enumerates none), a CUDA device
    /// with the NVIDIA GPU ORT found at the same index (none offered when ORT found none).
    fn supported_devices(
        &self,
        this: *mut OrtEpFactory,
        devices: &[*const OrtHardwareDevice],
        out: &mut [*mut OrtEpDevice],
    ) -> Result<usize, EpError> {
        let offers = devices::discover()?;
        let mut cpu = None;
        let mut gpus: Vec<*const OrtHardwareDevice> = Vec::new();
        for &d in devices {
            // SAFETY: ORT passes valid hardware devices for this call.
            let (kind, vendor) =
                unsafe { ((self.ort.api.HardwareDevice_Type)(d), (self.ort.api.HardwareDevice_VendorId)(d)) };
            match kind {
                OrtHardwareDeviceType::OrtHardwareDeviceType_CPU if cpu.is_none() => cpu = Some(d),
                OrtHardwareDeviceType::OrtHardwareDeviceType_GPU if vendor == devices::NVIDIA_VENDOR_ID => gpus.push(d),
                _ => {}
            }
        }
        let mut n = 0;
        for offer in &offers {
            if n == out.len() {
                break;
            }
            let hardware = match offer {
                Offer::Cpu => match cpu {
                    Some(d) => d,
                    None => continue,
                },
                Offer::Gpu { ordinal, name } => match gpus.get(*ordinal as usize) {
                    Some(&d) => d,
                    None => {
                        log::warn!("NpurtExecutionProvider: CUDA device {ordinal} ({name}) has no GPU in ORT's list");
                        continue;
                    }
                },
                Offer::Npu { ordinal, soc, .. } => self.npu_device(*ordinal, soc)?,
            };
            let meta = offer.ep_metadata();
            let pairs: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let metadata = self.ort.key_value_pairs(&pairs);
            let mut ep_device: *mut OrtEpDevice = ptr::null_mut();
            // SAFETY: this is our factory; the hardware device is ORT's or one this factory
            // holds until it drops; metadata is copied by ORT.
            let st = unsafe { (self.ort.ep.CreateEpDevice)(this, hardware, metadata, ptr::null(), &mut ep_device) };
            // SAFETY: we created metadata and release it once (CreateEpDevice copied it).
            unsafe { (self.ort.api.ReleaseKeyValuePairs)(metadata) };
            self.ort.check("CreateEpDevice", ort_sys::OrtStatusPtr(st))?;
            out[n] = ep_device;
            n += 1;
        }
        Ok(n)
    }

    /// An NPU hardware device for Ascend device `ordinal` (vendor Huawei, 0x19e5; metadata
    /// `Description` and `npurt.soc` naming the SoC), held by the factory until it drops: the
    /// `OrtEpDevice` made from it refers to it.
    fn npu_device(&self, ordinal: u32, soc: &str) -> Result<*const OrtHardwareDevice, EpError> {
        let description = format!("Huawei {soc} NPU (npurt acl:{ordinal})");
        let metadata = self.ort.key_value_pairs(&[("Description", &description), ("npurt.soc", soc)]);
        let mut device: *mut OrtHardwareDevice = ptr::null_mut();
        // SAFETY: the vendor name is NUL-terminated; ORT copies it and the metadata.
        let st = unsafe {
            (self.ort.ep.CreateHardwareDevice)(
                OrtHardwareDeviceType::OrtHardwareDeviceType_NPU,
                devices::HUAWEI_VENDOR_ID,
                ordinal,
                c"Huawei".as_ptr(),
                metadata,
                &mut device,
            )
        };
        // SAFETY: created above, released once.
        unsafe { (self.ort.api.ReleaseKeyValuePairs)(metadata) };
        self.ort.check("CreateHardwareDevice", ort_sys::OrtStatusPtr(st))?;
        self.created.lock().unwrap_or_else(|p| p.into_inner()).push(HardwareDevice(device));
        Ok(device)
    }
}

/// A hardware device this factory created; released when the factory drops.
struct HardwareDevice(*mut OrtHardwareDevice);

// SAFETY: an ORT-owned object this factory only hands to ORT and releases; ORT's API may be
// called from any thread.
unsafe impl Send for HardwareDevice {}

impl Drop for Factory {
    fn drop(&mut self) {
        for d in self.created.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            // SAFETY: made by CreateHardwareDevice, released once; ORT has released the
            // OrtEpDevices made from it before it releases the factory.
            unsafe { (self.ort.ep.ReleaseHardwareDevice)(d.0) };
        }
    }
}

impl Factory {
    /// npurt's device index of the first `OrtEpDevice` the application selected, read from
    /// its EP metadata (`npurt.device`), when its backend (`npurt.backend`) is the one the
    /// options ask for (any, for `auto`).
    ///
    /// # Safety
    /// `pairs` is null or an array of `n` valid `OrtKeyValuePairs`.
    unsafe fn selected_device(
        &self,
        options: &EpOptions,
        pairs: *const *const OrtKeyValuePairs,
        n: usize,
    ) -> Option<u32> {
        if pairs.is_null() || n == 0 {
            return None;
        }
        // SAFETY: per the contract, n >= 1 valid entries.
        let first = unsafe { *pairs };
        if first.is_null() {
            return None;
        }
        // SAFETY: a valid OrtKeyValuePairs.
        let meta = unsafe { self.ort.read_pairs(first) };
        let get = |k: &str| meta.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let backend = get("npurt.backend")?;
        if options.backend != crate::options::BackendChoice::Auto && options.backend.name() != backend {
            return None;
        }
        get("npurt.device")?.parse().ok()
    }
}

unsafe extern "system" fn get_name(_this: *const OrtEpFactory) -> *const c_char {
    EP_NAME.as_ptr()
}

unsafe extern "system" fn get_vendor(_this: *const OrtEpFactory) -> *const c_char {
    EP_VENDOR.as_ptr()
}

unsafe extern "system" fn get_vendor_id(_this: *const OrtEpFactory) -> u32 {
    // npurt is not a hardware vendor: no PCI vendor id (the NPU devices it creates carry
    // Huawei's).
    0
}

unsafe extern "system" fn get_version(_this: *const OrtEpFactory) -> *const c_char {
    EP_VERSION.as_ptr()
}

unsafe extern "system" fn get_supported_devices(
    this: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> StatusPtr {
    // SAFETY: ORT passes back the factory it got from CreateEpFactories.
    let factory = unsafe { Factory::get(this) };
    factory.ort.guard("GetSupportedDevices", || {
        if num_ep_devices.is_null() || ep_devices.is_null() {
            return Err(EpError::Null("ep_devices"));
        }
        // SAFETY: checked non-null; ORT's out-parameter.
        unsafe { *num_ep_devices = 0 };
        let devices: &[*const OrtHardwareDevice] = if devices.is_null() || num_devices == 0 {
            &[]
        } else {
            // SAFETY: ORT passes num_devices valid pointers.
            unsafe { std::slice::from_raw_parts(devices, num_devices) }
        };
        // SAFETY: ORT pre-allocated max_ep_devices slots.
        let out = unsafe { std::slice::from_raw_parts_mut(ep_devices, max_ep_devices) };
        let n = factory.supported_devices(this, devices, out)?;
        // SAFETY: checked non-null above.
        unsafe { *num_ep_devices = n };
        Ok(())
    })
}

unsafe extern "system" fn create_ep(
    this: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    ep_metadata_pairs: *const *const OrtKeyValuePairs,
    num_devices: usize,
    session_options: *const OrtSessionOptions,
    logger: *const OrtLogger,
    ep: *mut *mut OrtEp,
) -> StatusPtr {
    // SAFETY: ORT passes back the factory it got from CreateEpFactories.
    let factory = unsafe { Factory::get(this) };
    factory.ort.guard("CreateEp", || {
        if ep.is_null() {
            return Err(EpError::Null("ep"));
        }
        // SAFETY: ORT's session options, valid during this call.
        let config = unsafe { factory.ort.session_config(session_options) }?;
        let options = EpOptions::from_session_config(config.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        // SAFETY: ORT passes num_devices metadata sets of the OrtEpDevices selected.
        let selected = unsafe { factory.selected_device(&options, ep_metadata_pairs, num_devices) };
        let new = Ep::new(factory.ort, options, selected, logger)?;
        // SAFETY: checked non-null; ORT takes the EP and returns it through ReleaseEp.
        unsafe { *ep = new.into_raw() };
        Ok(())
    })
}

unsafe extern "system" fn release_ep(_this: *mut OrtEpFactory, ep: *mut OrtEp) {
    if !ep.is_null() {
        // SAFETY: every OrtEp ORT holds from us was made by Ep::into_raw and is released once.
        drop(unsafe { Ep::from_raw(ep) });
    }
}

unsafe extern "system" fn validate_compatibility(
    _this: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    _num_devices: usize,
    _compatibility_info: *const c_char,
    model_compatibility: *mut OrtCompiledModelCompatibility,
) -> StatusPtr {
    // npurt writes no pre-compiled (EPContext) models.
    if !model_compatibility.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *model_compatibility = ORT_COMPILED_MODEL_COMPATIBILITY_EP_NOT_APPLICABLE };
    }
    ptr::null_mut()
}

unsafe extern "system" fn create_allocator(
    _this: *mut OrtEpFactory,
    _memory_info: *const OrtMemoryInfo,
    _allocator_options: *const OrtKeyValuePairs,
    allocator: *mut *mut OrtAllocator,
) -> StatusPtr {
    // No device memory registered: ORT's default CPU allocator serves the EP.
    if !allocator.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *allocator = ptr::null_mut() };
    }
    ptr::null_mut()
}

unsafe extern "system" fn release_allocator(_this: *mut OrtEpFactory, _allocator: *mut OrtAllocator) {
    // create_allocator never returns one.
}

unsafe extern "system" fn create_data_transfer(
    _this: *mut OrtEpFactory,
    data_transfer: *mut *mut OrtDataTransferImpl,
) -> StatusPtr {
    // Host memory only for now: nothing to copy.
    if !data_transfer.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *data_transfer = ptr::null_mut() };
    }
    ptr::null_mut()
}

unsafe extern "system" fn is_stream_aware(_this: *const OrtEpFactory) -> bool {
    false
}

unsafe extern "system" fn create_sync_stream(
    _this: *mut OrtEpFactory,
    _memory_device: *const OrtMemoryDevice,
    _stream_options: *const OrtKeyValuePairs,
    stream: *mut *mut OrtSyncStreamImpl,
) -> StatusPtr {
    if !stream.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *stream = ptr::null_mut() };
    }
    ptr::null_mut()
}

unsafe extern "system" fn get_num_custom_op_domains(_this: *mut OrtEpFactory, num_domains: *mut usize) -> StatusPtr {
    // npurt registers no custom ops with ORT.
    if !num_domains.is_null() {
        // SAFETY: ORT's out-parameter, checked non-null.
        unsafe { *num_domains = 0 };
    }
    ptr::null_mut()
}

unsafe extern "system" fn get_custom_op_domains(
    _this: *mut OrtEpFactory,
    _domains: *mut *mut OrtCustomOpDomain,
    _num_domains: usize,
) -> StatusPtr {
    // Zero domains to fill (get_num_custom_op_domains says 0).
    ptr::null_mut()
}
