//! The operator table: every op's attributes, validation, shape inference and cost.
//!
//! Validation is pure: it looks at dtypes and shapes only, so it runs before anything is
//! enqueued and every backend sees the same rules.
//!
//! `table` holds the [`Op`] enum, its kinds and names, and [`TensorMeta`]; validation and
//! shape inference are in `infer` (Rope's, with its tables, in `rope`), FLOP and byte costs in `cost`, and building an op from
//! `key=value` attributes in `attrs`; `names` is the op-name table (the spellings and
//! aliases the CLI, the C API and Python accept).

mod attrs;
mod cost;
mod infer;
pub mod names;
mod rope;
mod table;

pub use attrs::op_from_attrs;
pub use infer::{SliceAxis, normalise_axes, resolve_reshape, resolve_slice};
pub use rope::{RopeScaling, rope_inv_freq, rope_tables, try_rope_tables};
pub use table::{AttentionLayout, CONCAT_MAX_INPUTS, GeluApprox, Op, OpKind, TensorMeta};
