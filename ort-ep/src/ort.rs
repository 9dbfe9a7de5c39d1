//! The ORT function tables this library calls through, the error type of the EP, and the guard
//! that turns every failure (and any panic) into an `OrtStatus` before it reaches ORT.

use core::ffi::{CStr, c_char};
use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use thiserror::Error;

use crate::abi::{
    EP_API_VERSION, OrtApi, OrtApiBase, OrtEpApi, OrtErrorCode, OrtKeyValuePairs, OrtLogger, OrtSessionOptions,
    StatusPtr,
};
use crate::options::OptionError;
use ort_sys::OrtLoggingLevel;

/// Everything that can fail inside the EP; each becomes one `OrtStatus` whose message says what
/// was being done.
#[derive(Debug, Error)]
pub enum EpError {
    #[error(transparent)]
    Options(#[from] OptionError),
    /// An ORT function returned a status.
    #[error("{call} failed: {message}")]
    Ort { call: &'static str, message: String },
    /// ORT passed a null pointer where the header promises one.
    #[error("ONNX Runtime passed a null `{0}`")]
    Null(&'static str),
    /// A request this version of the EP does not serve yet.
    #[error("{0}")]
    NotImplemented(String),
    /// A fused group or its operands are not what the EP claimed (names the node, op and
    /// operands).
    #[error("{0}")]
    Graph(String),
    /// npurt refused or failed (building, compiling or running a graph); `context` names the
    /// fused node, the ONNX node, op and operands.
    #[error("{context}: {source}")]
    Npurt {
        context: String,
        #[source]
        source: runtime::Error,
    },
}

impl EpError {
    fn code(&self) -> OrtErrorCode {
        match self {
            EpError::Options(_) | EpError::Null(_) => OrtErrorCode::ORT_INVALID_ARGUMENT,
            EpError::Ort { .. } => OrtErrorCode::ORT_EP_FAIL,
            EpError::NotImplemented(_) => OrtErrorCode::ORT_NOT_IMPLEMENTED,
            EpError::Graph(_) | EpError::Npurt { .. } => OrtErrorCode::ORT_EP_FAIL,
        }
    }
}

/// The `OrtApi` and `OrtEpApi` tables of the ORT that loaded this library. They are static
/// tables inside libonnxruntime, valid while the library is loaded (ORT unloads it only after
/// releasing every factory). `Send + Sync`: the tables are immutable.
#[derive(Clone, Copy)]
pub struct Ort {
    pub api: &'static OrtApi,
    pub ep: &'static OrtEpApi,
}

// SAFETY: the tables are immutable function-pointer tables owned by ORT for the library's life.
unsafe impl Send for Ort {}
// SAFETY: as above; ORT's functions are callable from any thread.
unsafe impl Sync for Ort {}

impl Ort {
    /// Reads the tables from the `OrtApiBase` given to `CreateEpFactories`. On an ORT older than
    /// [`EP_API_VERSION`] the error is a status made through the version-1 table (whose first
    /// entry, `CreateStatus`, every version shares).
    ///
    /// # Safety
    /// `base` is the `OrtApiBase` pointer ORT passed, or null.
    pub unsafe fn from_base(base: *const OrtApiBase) -> Result<Ort, StatusPtr> {
        if base.is_null() {
            return Err(ptr::null_mut());
        }
        // SAFETY: ORT passes a valid OrtApiBase for the duration of the library's use.
        let base = unsafe { &*base };
        // SAFETY: GetApi takes any version and returns null for one it does not have.
        let api = unsafe { (base.GetApi)(EP_API_VERSION) };
        if api.is_null() {
            // SAFETY: every ORT serves version 1; its table is static.
            let v1 = unsafe { (base.GetApi)(1) };
            if v1.is_null() {
                return Err(ptr::null_mut());
            }
            // SAFETY: GetVersionString returns a static NUL-terminated string.
            let have = unsafe { CStr::from_ptr((base.GetVersionString)()) }.to_string_lossy().into_owned();
            let msg = cstring(&format!(
                "NpurtExecutionProvider needs ONNX Runtime 1.{EP_API_VERSION} or newer; this is {have}"
            ));
            // SAFETY: v1 is a valid table; CreateStatus is its first entry in every version and copies msg.
            return Err(unsafe { ((*v1).CreateStatus)(OrtErrorCode::ORT_NOT_IMPLEMENTED, msg.as_ptr()) }.0);
        }
        // SAFETY: a non-null table of version EP_API_VERSION, static in libonnxruntime.
        let api: &'static OrtApi = unsafe { &*api };
        // SAFETY: GetEpApi exists from version 22 on and returns a static table.
        let ep = unsafe { (api.GetEpApi)() } as *const OrtEpApi;
        if ep.is_null() {
            return Err(Ort::status_with(api, OrtErrorCode::ORT_FAIL, "ONNX Runtime returned no OrtEpApi"));
        }
        // SAFETY: non-null static table, laid out as abi::OrtEpApi up to the entries declared.
        Ok(Ort { api, ep: unsafe { &*ep } })
    }

    fn status_with(api: &OrtApi, code: OrtErrorCode, msg: &str) -> StatusPtr {
        let msg = cstring(msg);
        // SAFETY: CreateStatus copies the NUL-terminated message.
        unsafe { (api.CreateStatus)(code, msg.as_ptr()) }.0
    }

    /// A new `OrtStatus` for ORT to own.
    pub fn status(&self, code: OrtErrorCode, msg: &str) -> StatusPtr {
        Ort::status_with(self.api, code, msg)
    }

    /// Turns a status returned by an ORT call into a `Result`, releasing it.
    pub fn check(&self, call: &'static str, status: ort_sys::OrtStatusPtr) -> Result<(), EpError> {
        let status = status.0;
        if status.is_null() {
            return Ok(());
        }
        // SAFETY: a non-null status from ORT; the message is copied before the status is released.
        let message = unsafe { CStr::from_ptr((self.api.GetErrorMessage)(status)) }.to_string_lossy().into_owned();
        // SAFETY: we own the returned status and release it once.
        unsafe { (self.api.ReleaseStatus)(status) };
        Err(EpError::Ort { call, message })
    }

    /// Runs `f`; an error or a panic becomes an `OrtStatus` whose message starts with the EP's
    /// name and `what`. Nothing unwinds into ORT.
    pub fn guard(&self, what: &str, f: impl FnOnce() -> Result<(), EpError>) -> StatusPtr {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(())) => ptr::null_mut(),
            Ok(Err(e)) => self.status(e.code(), &format!("NpurtExecutionProvider: {what}: {e}")),
            Err(panic) => {
                let text = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                self.status(
                    OrtErrorCode::ORT_EP_FAIL,
                    &format!("NpurtExecutionProvider: {what}: internal error: {text}"),
                )
            }
        }
    }

    /// Writes `msg` to an ORT logger (the session's, given to `CreateEp`) at `level`; ORT
    /// drops it below the session's `log_severity_level`. A failure to log is ignored.
    ///
    /// # Safety
    /// `logger` is null or a logger ORT passed and still owns.
    pub unsafe fn log(&self, logger: *const OrtLogger, level: OrtLoggingLevel, msg: &str) {
        if logger.is_null() {
            return;
        }
        let msg = cstring(msg);
        // SAFETY: logger is ORT's; every string is NUL-terminated and copied by ORT.
        let st = unsafe {
            (self.api.Logger_LogMessage)(
                logger,
                level,
                msg.as_ptr(),
                c"ort-ep".as_ptr(),
                0,
                c"NpurtExecutionProvider".as_ptr(),
            )
        };
        let _ = self.check("Logger_LogMessage", st);
    }

    /// All session config entries (`key`, `value`), copied out of ORT's storage.
    ///
    /// # Safety
    /// `options` is the session options pointer ORT passed to `CreateEp`, valid during the call.
    pub unsafe fn session_config(&self, options: *const OrtSessionOptions) -> Result<Vec<(String, String)>, EpError> {
        if options.is_null() {
            return Err(EpError::Null("session_options"));
        }
        let mut kvps: *mut OrtKeyValuePairs = ptr::null_mut();
        // SAFETY: options is valid for this call; ORT allocates kvps, released below.
        let st = unsafe { (self.api.GetSessionOptionsConfigEntries)(options, &mut kvps) };
        self.check("GetSessionOptionsConfigEntries", st)?;
        if kvps.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: kvps is a valid OrtKeyValuePairs we own.
        let pairs = unsafe { self.read_pairs(kvps) };
        // SAFETY: released once; the strings were copied.
        unsafe { (self.api.ReleaseKeyValuePairs)(kvps) };
        Ok(pairs)
    }

    /// Copies the entries of an `OrtKeyValuePairs`.
    ///
    /// # Safety
    /// `kvps` is a valid `OrtKeyValuePairs`.
    pub unsafe fn read_pairs(&self, kvps: *const OrtKeyValuePairs) -> Vec<(String, String)> {
        let mut keys: *const *const c_char = ptr::null();
        let mut values: *const *const c_char = ptr::null();
        let mut n = 0usize;
        // SAFETY: kvps is valid; ORT returns arrays of n NUL-terminated strings owned by kvps.
        unsafe { (self.api.GetKeyValuePairs)(kvps, &mut keys, &mut values, &mut n) };
        if keys.is_null() || values.is_null() {
            return Vec::new();
        }
        (0..n)
            .map(|i| {
                // SAFETY: i < n; both arrays hold n valid strings while kvps lives.
                let (k, v) = unsafe { (CStr::from_ptr(*keys.add(i)), CStr::from_ptr(*values.add(i))) };
                (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())
            })
            .collect()
    }

    /// A new `OrtKeyValuePairs` holding `pairs`; the caller releases it with
    /// `ReleaseKeyValuePairs`.
    pub fn key_value_pairs(&self, pairs: &[(&str, &str)]) -> *mut OrtKeyValuePairs {
        let mut kvps: *mut OrtKeyValuePairs = ptr::null_mut();
        // SAFETY: ORT allocates an empty set.
        unsafe { (self.api.CreateKeyValuePairs)(&mut kvps) };
        for (k, v) in pairs {
            let (k, v) = (cstring(k), cstring(v));
            // SAFETY: kvps is valid (AddKeyValuePair ignores a null one); ORT copies both strings.
            unsafe { (self.api.AddKeyValuePair)(kvps, k.as_ptr(), v.as_ptr()) };
        }
        kvps
    }
}

/// A C string of `s`, with any interior NUL replaced (messages must never be lost to one).
pub fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}
