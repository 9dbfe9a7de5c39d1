//! Why loading or a call failed: [`LoadError`] (a library or symbol), [`AclError`] (a
//! call's failure status, a NULL result, or a missing symbol).

use crate::codes;

/// Why a library or symbol could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// No directory in the search order holds the library.
    #[error("{library} not found (searched: {})", searched.join(", "))]
    LibraryNotFound { library: String, searched: Vec<String> },
    /// The file exists but the dynamic loader refused it.
    #[error("cannot load {path}: {reason}")]
    LibraryOpen { path: String, reason: String },
    /// The library is loaded but does not export the symbol.
    #[error("symbol {symbol} not found in {}", libraries.join(", "))]
    SymbolMissing { symbol: String, libraries: Vec<String> },
}

/// A failed ACL or aclnn call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// The call returned a failure status (a descriptor creator that returned NULL is
    /// reported with `ACLNN_ERR_INNER_NULLPTR`, see `result::aclnn`).
    #[error("{call} returned {code} ({name}){}", detail(.message))]
    Status {
        code: i32,
        /// Name of the code (see [`codes`](crate::codes)), e.g. `ACL_ERROR_RT_MEMORY_ALLOCATION`.
        name: &'static str,
        /// The C function that returned it.
        call: &'static str,
        /// `aclGetRecentErrMsg()`, copied right after the failure (may be absent).
        message: Option<String>,
    },
    /// A call that returns a pointer and no status returned NULL (`aclrtGetSocName`).
    #[error("{call} returned NULL: {}", .message.as_deref().unwrap_or_default())]
    Null {
        call: &'static str,
        /// `aclGetRecentErrMsg()`, copied right after the failure (may be absent).
        message: Option<String>,
    },
    /// The loaded libraries do not export the function.
    #[error(transparent)]
    Missing(#[from] LoadError),
}

/// `": message"` (trimmed) when there is a non-blank message.
fn detail(message: &Option<String>) -> String {
    match message.as_deref().map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => format!(": {m}"),
        None => String::new(),
    }
}

impl AclError {
    /// A failure status of `call`, with the code's name.
    pub fn status(code: i32, call: &'static str, message: Option<String>) -> AclError {
        AclError::Status { code, name: codes::name(code), call, message }
    }

    /// The status code, for [`AclError::Status`].
    pub fn code(&self) -> Option<i32> {
        match self {
            AclError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The C function that failed (`None` for a missing symbol).
    pub fn call(&self) -> Option<&'static str> {
        match self {
            AclError::Status { call, .. } | AclError::Null { call, .. } => Some(call),
            AclError::Missing(_) => None,
        }
    }

    /// `aclGetRecentErrMsg()` as copied after the failure.
    pub fn message(&self) -> Option<&str> {
        match self {
            AclError::Status { message, .. } | AclError::Null { message, .. } => message.as_deref(),
            AclError::Missing(_) => None,
        }
    }

    /// True when the function is not exported (an optional symbol's absence).
    pub fn is_missing(&self) -> bool {
        matches!(self, AclError::Missing(_))
    }
}
