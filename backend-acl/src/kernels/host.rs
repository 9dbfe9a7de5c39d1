//! The host reference tier: the runtime's reference kernels (`runtime::reference::run`)
//! on host copies of the operands, synchronously. It waits for the stream's queued work
//! first, so the operands are final.

use crate::error::AclBackendError;
use crate::memory;
use crate::stream::{self, StreamRec};
use acl_sys::Api;
use runtime::reference::{In, Out};
use runtime::{LaunchArgs, TensorArg};

type BResult<T> = std::result::Result<T, AclBackendError>;

/// Byte range of an operand: (first byte, length).
fn range(a: &TensorArg) -> (u64, usize) {
    let es = a.dtype.size();
    let start = a.ptr.0 + (a.layout.offset * es) as u64;
    let len = if a.layout.numel() == 0 { 0 } else { (a.layout.span() - a.layout.offset) * es };
    (start, len)
}

fn bytes(w: &[u64], n: usize) -> &[u8] {
    // SAFETY: u64 has no padding and every byte is a valid u8; n <= w.len() * 8.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), n.min(w.len() * 8)) }
}

fn bytes_mut(w: &mut [u64], n: usize) -> &mut [u8] {
    // SAFETY: as above, with exclusive access.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), n.min(w.len() * 8)) }
}

/// Copies the inputs to the host (8-byte aligned buffers), runs the reference kernel and
/// copies the outputs back (their ranges were validated by the launch).
pub(crate) fn run(api: &Api, rec: &StreamRec, args: &LaunchArgs) -> BResult<()> {
    stream::sync_backend(api, rec)?;
    let words = |n: usize| vec![0u64; n.div_ceil(8)];
    let mut in_bufs = Vec::new();
    for a in &args.inputs {
        let (start, len) = range(a);
        let mut w = words(len);
        if len > 0 {
            memory::d2h(api, start, bytes_mut(&mut w, len))?;
        }
        in_bufs.push((w, len));
    }
    let ins: Vec<In> = args
        .inputs
        .iter()
        .zip(&in_bufs)
        .map(|(a, (w, len))| In {
            dtype: a.dtype,
            dims: a.layout.dims(),
            strides: &a.layout.strides,
            bytes: bytes(w, *len),
        })
        .collect();
    // An in-place output (KvCacheWrite's caches) starts from the memory's elements.
    let mut out_bufs: Vec<(Vec<u64>, usize)> = Vec::with_capacity(args.outputs.len());
    for (k, o) in args.outputs.iter().enumerate() {
        let n = o.layout.numel() * o.dtype.size();
        let mut w = words(n);
        if n > 0 && args.op.in_place().iter().any(|p| p.1 == k) {
            memory::d2h(api, range(o).0, bytes_mut(&mut w, n))?;
        }
        out_bufs.push((w, n));
    }
    {
        let mut outs: Vec<Out> = args
            .outputs
            .iter()
            .zip(out_bufs.iter_mut())
            .map(|(o, (w, n))| Out { dtype: o.dtype, dims: o.layout.dims(), bytes: bytes_mut(w, *n) })
            .collect();
        runtime::reference::run(&args.op, &ins, &mut outs)
            .map_err(|source| AclBackendError::HostReference { op: args.op.name(), source })?;
    }
    for (o, (w, n)) in args.outputs.iter().zip(&out_bufs) {
        let (start, _) = range(o);
        if *n > 0 {
            memory::h2d(api, bytes(w, *n), start)?;
        }
    }
    Ok(())
}
