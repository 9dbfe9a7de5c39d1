//! The ACL runtime symbols (`acl*`, `aclrt*`): initialization and error text, devices,
//! contexts, streams, events and memory.

pub mod context;
pub mod device;
pub mod event;
pub mod init;
pub mod memory;
pub mod stream;
