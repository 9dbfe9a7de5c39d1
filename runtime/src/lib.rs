//! Backend-neutral core of npurt.
//!
//! Dtypes and shapes, the operator table with its validation, the [`Backend`] contract,
//! kernel selection, the caching memory pool, streams and events, tensors and eager
//! execution. This crate names no backend and contains no `unsafe` blocks: the one `unsafe` item is the
//! declaration of the [`Backend`] trait, whose implementers carry the proof obligations.

#![deny(unsafe_code)]

pub mod backend;
pub mod config;
mod context;
pub mod dtype;
pub mod env;
pub mod error;
mod execute;
pub mod graph;
pub mod kernel;
mod lent;
pub mod op;
pub mod pool;
pub mod reference;
pub mod report;
pub mod runtime;
pub mod shape;
pub mod size;
pub mod stream;
pub mod tensor;
mod utilisation;

pub use backend::{
    Backend, DeviceInfo, DevicePtr, EventId, Frozen, FrozenLaunch, FrozenRun, FrozenStep, HostRange, LaunchArgs,
    Prepack, Prepacked, StreamId, TensorArg, UnitInfo,
};
pub use config::{GraphCapture, Optimizations, PoolConfig, Precision, ReuseStrategy, RuntimeConfig, Scheduling};
pub use dtype::{DType, Element};
pub use error::{Error, Message, Operand, Result, Source};
pub use graph::{CompileOptions, CompiledGraph, Graph, HostBytes, HostTensor};
pub use kernel::{HwMapping, KernelError, KernelInfo, KernelQuery, KernelResult, KernelTable, Tier, Unit, UnitClass};
pub use op::{AttentionLayout, GeluApprox, Op, OpKind, TensorMeta};
pub use pool::{Block, BlockKind, Pool, PoolStats};
pub use report::{ExecReport, Utilisation};
pub use runtime::{MemoryInfo, Runtime, Task};
pub use shape::{Layout, Shape};
pub use stream::{Event, Stream, StreamScope};
pub use tensor::Tensor;

pub use half::{bf16, f16};
pub use ndarray;
