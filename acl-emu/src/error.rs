//! The emulator's failure value: an ACL/aclnn status code with its message (the message
//! is what `aclGetRecentErrMsg` hands out).

/// A failure: status code and message (kept for `aclGetRecentErrMsg`).
#[derive(Clone, Debug)]
pub struct Fail(pub i32, pub String);

/// A result failing with [`Fail`].
pub type R<T> = Result<T, Fail>;

/// `Err(Fail(code, msg))`.
pub fn fail<T>(code: i32, msg: impl Into<String>) -> R<T> {
    Err(Fail(code, msg.into()))
}
