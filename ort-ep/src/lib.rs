//! `libnpurt_ort_ep.so`: npurt as an ONNX Runtime plugin execution provider.
//!
//! A stock ONNX Runtime (1.24 or newer; the Python wheel's
//! `onnxruntime.register_execution_provider_library(name, path)`, or the C API's
//! `RegisterExecutionProviderLibrary`) loads the library and calls [`CreateEpFactories`]; the
//! factory is named `NpurtExecutionProvider`, vendor `npurt`. The library does not link
//! libonnxruntime: every ORT function comes through the `OrtApiBase` ORT hands over. No panic
//! crosses the boundary: every entry point runs under [`ort::Ort::guard`], which turns an error
//! or a panic into an `OrtStatus`.
//!
//! What works today, and what does not yet, is in docs/ONNXRUNTIME.md.

pub mod abi;
pub mod devices;
pub mod ep;
pub mod factory;
pub mod graph;
pub mod kernel;
pub mod logging;
pub mod names;
pub mod ops;
pub mod options;
pub mod ort;
pub mod partition;
pub mod stash;

use core::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use abi::{OrtApiBase, OrtEpFactory, OrtErrorCode, OrtLogger, StatusPtr};
use factory::Factory;
use ort::Ort;

/// Creates the library's one factory (`CreateEpApiFactoriesFn`).
///
/// # Safety
/// Called by ONNX Runtime with the arguments its header describes: `ort_api_base` valid,
/// `factories` an array of `max_factories` slots, `num_factories` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn CreateEpFactories(
    _registered_name: *const c_char,
    ort_api_base: *const OrtApiBase,
    default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> StatusPtr {
    // SAFETY: ORT's OrtApiBase (or null, which from_base refuses).
    let ort = match unsafe { Ort::from_base(ort_api_base) } {
        Ok(ort) => ort,
        Err(status) => return status,
    };
    ort.guard("CreateEpFactories", || {
        if factories.is_null() || num_factories.is_null() {
            return Err(ort::EpError::Null("factories"));
        }
        if max_factories < 1 {
            return Err(ort::EpError::NotImplemented("ONNX Runtime offered no factory slot".into()));
        }
        // SAFETY: checked non-null; ORT pre-allocated max_factories >= 1 slots.
        unsafe {
            *factories = Factory::new(ort).into_raw();
            *num_factories = 1;
        }
        // npurt's `log` records go to ORT's logger while the factory lives.
        logging::install(ort, default_logger);
        Ok(())
    })
}

/// Releases a factory made by [`CreateEpFactories`] (`ReleaseEpApiFactoryFn`).
///
/// # Safety
/// `factory` is one that [`CreateEpFactories`] returned, released once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut OrtEpFactory) -> StatusPtr {
    if factory.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: per the contract, made by Factory::into_raw and released once.
    let factory = unsafe { Factory::from_raw(factory) };
    let ort = factory.ort;
    match catch_unwind(AssertUnwindSafe(move || {
        drop(factory);
        logging::release();
    })) {
        Ok(()) => ptr::null_mut(),
        Err(_) => ort.status(OrtErrorCode::ORT_EP_FAIL, "NpurtExecutionProvider: ReleaseEpFactory: internal error"),
    }
}

// The exported functions have the header's signatures.
const _: abi::CreateEpApiFactoriesFn = CreateEpFactories;
const _: abi::ReleaseEpApiFactoryFn = ReleaseEpFactory;
