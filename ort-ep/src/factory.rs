//! The `OrtEpFactory` of `NpurtExecutionProvider`: names, the devices offered, and the creation
//! of one `OrtEp` per session.

use core::ffi::c_char;
use std::ptr;

use crate::abi::{
    EP_API_VERSION, ORT_COMPILED_MODEL_COMPATIBILITY_EP_NOT_APPLICABLE, OrtAllocator, OrtCompiledModelCompatibility,
    OrtCustomOpDomain, OrtDataTransferImpl, OrtEp, OrtEpDevice, OrtEpFactory, OrtHardwareDevice, OrtHardwareDeviceType,
    OrtKeyValuePairs, OrtLogger, OrtMemoryDevice, OrtMemoryInfo, OrtSessionOptions, OrtSyncStreamImpl, StatusPtr,
};
use crate::ep::Ep;
use crate::names::{EP_NAME, EP_VENDOR, EP_VERSION};
use crate::options::EpOptions;
use crate::ort::{EpError, Ort};

/// The factory ORT holds. `base` comes first so that the `OrtEpFactory*` ORT passes back is a
/// pointer to the whole struct. Immutable after creation, so `Send + Sync` as its fields are.
#[repr(C)]
pub struct Factory {
    base: OrtEpFactory,
    pub(crate) ort: Ort,
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

    /// Offers the CPU hardware device among `devices` (npurt's CPU backend). Ascend (a device
    /// created with `CreateHardwareDevice`) and CUDA (the GPU ORT found) are not offered yet.
    fn supported_devices(
        &self,
        this: *mut OrtEpFactory,
        devices: &[*const OrtHardwareDevice],
        out: &mut [*mut OrtEpDevice],
    ) -> Result<usize, EpError> {
        let mut n = 0;
        for &device in devices {
            if n == out.len() {
                break;
            }
            // SAFETY: ORT passes valid hardware devices for this call.
            let kind = unsafe { (self.ort.api.HardwareDevice_Type)(device) };
            if kind != OrtHardwareDeviceType::OrtHardwareDeviceType_CPU || n > 0 {
                continue;
            }
            let metadata = self.ort.key_value_pairs(&[("npurt.backend", "cpu")]);
            let mut ep_device: *mut OrtEpDevice = ptr::null_mut();
            // SAFETY: this is our factory, device is ORT's; metadata is copied by ORT.
            let st = unsafe { (self.ort.ep.CreateEpDevice)(this, device, metadata, ptr::null(), &mut ep_device) };
            // SAFETY: we created metadata and release it once (CreateEpDevice copied it).
            unsafe { (self.ort.api.ReleaseKeyValuePairs)(metadata) };
            self.ort.check("CreateEpDevice", ort_sys::OrtStatusPtr(st))?;
            out[n] = ep_device;
            n += 1;
        }
        Ok(n)
    }
}

unsafe extern "system" fn get_name(_this: *const OrtEpFactory) -> *const c_char {
    EP_NAME.as_ptr()
}

unsafe extern "system" fn get_vendor(_this: *const OrtEpFactory) -> *const c_char {
    EP_VENDOR.as_ptr()
}

unsafe extern "system" fn get_vendor_id(_this: *const OrtEpFactory) -> u32 {
    // npurt is not a hardware vendor: no PCI vendor id.
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
    _ep_metadata_pairs: *const *const OrtKeyValuePairs,
    _num_devices: usize,
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
        let new = Ep::new(factory.ort, options, logger)?;
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
