//! The ACL runtime symbols (`acl*`, `aclrt*`): initialization and error text, devices,
//! contexts, streams, events, memory and stream capture.

pub mod capture;
pub mod context;
pub mod device;
pub mod event;
pub mod init;
pub mod memory;
pub mod stream;
