//! The kernel table of the Ascend backend and its launches.
//!
//! * tier `fast`: aclnn two-phase calls (phase 1 `aclnnXxxGetWorkspaceSize`, the
//!   workspace from the stream's buffer, phase 2 `aclnnXxx` on the stream), on the Cube
//!   (matrix products), Vector (element-wise, norms, softmax, reductions, casts,
//!   gathers) or Scalar (shape-only moves) unit;
//! * tier `reference`: backend-cpu's reference kernels on host copies of the operands
//!   (synchronous), the ground truth, and what runs whatever the SoC cannot.

use crate::{AclBackend, AclBackendError, BResult, Fp32Matmul, StreamRec, is_910_family, lock};
use acl_sys::{aclDataType, aclIntArray, aclOpExecutor, aclScalar, aclTensor, pfn};
use runtime::{
    DType, GeluApprox, KernelInfo, KernelQuery, LaunchArgs, Op, OpKind, StreamId, TensorArg, Tier, Unit, UnitClass,
};
use std::ffi::c_void;
use std::sync::atomic::Ordering;

pub const CUBE: Unit = Unit { class: UnitClass::Cube, label: "Cube" };
pub const VECTOR: Unit = Unit { class: UnitClass::Vector, label: "Vector" };
pub const SCALAR: Unit = Unit { class: UnitClass::Scalar, label: "Scalar" };
pub const HOST: Unit = Unit { class: UnitClass::Scalar, label: "host" };

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Impl {
    Aclnn,
    Host,
}

#[derive(Default)]
pub struct Table {
    pub infos: Vec<KernelInfo>,
    pub impls: Vec<Impl>,
}

fn unit_of(k: OpKind) -> Unit {
    match k {
        OpKind::MatMul | OpKind::Gemm | OpKind::Linear | OpKind::Attention => CUBE,
        OpKind::Permute | OpKind::Reshape | OpKind::Copy => SCALAR,
        _ => VECTOR,
    }
}

macro_rules! names {
    ($($k:ident => $f:literal, $h:literal;)*) => {
        fn names(k: OpKind) -> (&'static str, &'static str) {
            match k { $(OpKind::$k => ($f, $h),)* }
        }
    };
}

names! {
    MatMul => "matmul.aclnn.cube", "matmul.host.reference";
    Gemm => "gemm.aclnn-addmm.cube", "gemm.host.reference";
    Linear => "linear.aclnn-addmm.cube", "linear.host.reference";
    Add => "add.aclnn.vector", "add.host.reference";
    Sub => "sub.aclnn.vector", "sub.host.reference";
    Mul => "mul.aclnn.vector", "mul.host.reference";
    Div => "div.aclnn.vector", "div.host.reference";
    Relu => "relu.aclnn.vector", "relu.host.reference";
    Gelu => "gelu.aclnn.vector", "gelu.host.reference";
    Tanh => "tanh.aclnn.vector", "tanh.host.reference";
    Erf => "erf.aclnn.vector", "erf.host.reference";
    Exp => "exp.aclnn.vector", "exp.host.reference";
    Sqrt => "sqrt.aclnn.vector", "sqrt.host.reference";
    Softmax => "softmax.aclnn.vector", "softmax.host.reference";
    LayerNorm => "layernorm.aclnn.vector", "layernorm.host.reference";
    Permute => "permute.aclnn.scalar", "permute.host.reference";
    Reshape => "reshape.aclnn-copy.scalar", "reshape.host.reference";
    Gather => "gather.aclnn-indexselect.vector", "gather.host.reference";
    Cast => "cast.aclnn.vector", "cast.host.reference";
    ReduceSum => "reducesum.aclnn.vector", "reducesum.host.reference";
    ReduceMean => "reducemean.aclnn.vector", "reducemean.host.reference";
    Scale => "scale.aclnn-muls.vector", "scale.host.reference";
    Copy => "copy.aclnn-inplacecopy.scalar", "copy.host.reference";
    Attention => "attention.aclnn.cube", "attention.host.reference";
    BiasGelu => "biasgelu.aclnn-add-gelu.vector", "biasgelu.host.reference";
    AddLayerNorm => "addlayernorm.aclnn-add-layernorm.vector", "addlayernorm.host.reference";
}

struct Policy {
    bf16: bool,
    is_910: bool,
    f32_cube: bool,
}

fn check(q: &KernelQuery<'_>, p: Policy) -> Result<(), String> {
    let all = q.inputs.iter().chain(q.outputs);
    if !p.bf16 && all.clone().any(|m| m.dtype == DType::BF16) {
        return Err("BF16 is not supported on Atlas training (910) SoCs".into());
    }
    if all.clone().any(|m| m.shape.rank() > 8) {
        return Err("aclnn takes at most 8 dimensions".into());
    }
    let out_empty = q.outputs.iter().all(|o| o.shape.numel() == 0);
    if !out_empty && q.inputs.iter().any(|i| i.shape.numel() == 0) {
        return Err("empty operands with a non-empty result are left to the host tier".into());
    }
    let x = &q.inputs[0];
    match q.op {
        Op::MatMul { .. } | Op::Gemm { .. } | Op::Linear if x.dtype == DType::F32 && p.is_910 && !p.f32_cube => {
            Err("FP32 on the 910's Cube computes in FP16 (cubeMathType 1); set fp32_matmul = Fp16 to allow it".into())
        }
        Op::Attention { .. } => Err("no aclnn composition for Attention yet".into()),
        Op::Div if x.dtype.is_int() => Err("aclnnDiv is true division; integer division is not mapped".into()),
        Op::Exp if p.is_910 => Err("aclnnExp is not supported on Atlas training (910) per the CANN docs".into()),
        Op::Cast { to: DType::U8 } if x.dtype != DType::U8 => {
            Err("saturating casts to u8 are not documented for aclnnCast".into())
        }
        Op::ReduceSum { .. } | Op::ReduceMean { .. } if x.shape.rank() == 0 => Err("0-D reductions".into()),
        _ => Ok(()),
    }
}

fn sup_910_exact(q: &KernelQuery<'_>) -> Result<(), String> {
    check(q, Policy { bf16: false, is_910: true, f32_cube: false })
}
fn sup_910_fp16(q: &KernelQuery<'_>) -> Result<(), String> {
    check(q, Policy { bf16: false, is_910: true, f32_cube: true })
}
fn sup_a2(q: &KernelQuery<'_>) -> Result<(), String> {
    check(q, Policy { bf16: true, is_910: false, f32_cube: true })
}
fn sup_host(_: &KernelQuery<'_>) -> Result<(), String> {
    Ok(())
}

impl Table {
    pub fn build(soc: &str, cfg: &crate::AclConfig) -> Table {
        let fast: runtime::kernel::SupportFn = match (is_910_family(soc), cfg.fp32_matmul) {
            (true, Fp32Matmul::Exact) => sup_910_exact,
            (true, Fp32Matmul::Fp16) => sup_910_fp16,
            (false, _) => sup_a2,
        };
        let mut t = Table::default();
        for k in OpKind::ALL {
            let (fname, hname) = names(k);
            let id = t.infos.len();
            t.infos.push(KernelInfo {
                name: fname,
                op: k,
                tier: Tier::HighPerformance,
                unit: unit_of(k),
                supports: fast,
                id,
            });
            t.impls.push(Impl::Aclnn);
            let id = t.infos.len();
            t.infos.push(KernelInfo { name: hname, op: k, tier: Tier::Reference, unit: HOST, supports: sup_host, id });
            t.impls.push(Impl::Host);
        }
        t
    }
}

/// Byte range of an operand: (first byte, length).
fn range(a: &TensorArg) -> (u64, usize) {
    let es = a.dtype.size();
    let start = a.ptr.0 + (a.layout.offset * es) as u64;
    let len = if a.layout.numel() == 0 { 0 } else { (a.layout.span() - a.layout.offset) * es };
    (start, len)
}

pub fn launch(
    b: &AclBackend,
    device: usize,
    kernel: &KernelInfo,
    args: &LaunchArgs,
    stream: StreamId,
) -> runtime::Result<()> {
    let t = b.kernels_table();
    let imp = *t
        .impls
        .get(kernel.id)
        .filter(|_| t.infos.get(kernel.id).is_some_and(|k| k.name == kernel.name))
        .ok_or_else(|| AclBackendError::BadRequest(format!("kernel {} is not an Ascend kernel", kernel.name)))?;
    let op = args.op.name();
    // (M1) every operand inside a live allocation; aclnn bases 32-byte aligned.
    let ranges = args.validate(&t.infos[kernel.id])?;
    for (a, r) in args.inputs.iter().chain(&args.outputs).zip(&ranges) {
        if r.1 > 0 {
            b.check_range(device, r.0, r.1)?;
            if imp == Impl::Aclnn && a.ptr.0 % 32 != 0 {
                return Err(AclBackendError::Unaligned { what: "operand base", addr: a.ptr.0, align: 32 }.into());
            }
        }
    }
    // (M3) outputs overlap nothing.
    let n_in = args.inputs.len();
    for (i, o) in ranges[n_in..].iter().enumerate() {
        if ranges[..n_in + i].iter().any(|r| o.1 > 0 && r.1 > 0 && o.0 < r.0 + r.1 as u64 && r.0 < o.0 + o.1 as u64) {
            return Err(AclBackendError::BadRequest(format!("{op}: output {i} overlaps another operand")).into());
        }
    }
    b.bind(device)?;
    let rec = b.stream(device, stream)?;
    if args.outputs.iter().all(|o| o.layout.numel() == 0) {
        return Ok(());
    }
    let r = match imp {
        Impl::Host => host(b, device, &rec, args),
        Impl::Aclnn => {
            let r = aclnn(b, &rec, args);
            if r.is_ok() {
                rec.dirty.store(true, Ordering::Release);
                lock(&rec.inflight).push((op, args.seq));
            }
            r
        }
    };
    r.map_err(|e| match e {
        AclBackendError::Call { op: None, err } => AclBackendError::Call { op: Some(op), err },
        AclBackendError::Symbol { op: None, err } => AclBackendError::Symbol { op: Some(op), err },
        e => e,
    })
    .map_err(Into::into)
}

// ------------------------------------------------------------------ host tier ----

fn host(b: &AclBackend, device: usize, rec: &StreamRec, args: &LaunchArgs) -> BResult<()> {
    use backend_cpu::kernels::common::{Ctx, In, Out};
    // Queued device work first: the operands must be final.
    b.sync_rec_backend(rec)?;
    let words = |n: usize| vec![0u64; n.div_ceil(8)];
    let mut in_bufs = Vec::new();
    for a in &args.inputs {
        let (start, len) = range(a);
        let mut w = words(len);
        if len > 0 {
            d2h(b, start, bytes_mut(&mut w, len))?;
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
    let mut out_bufs: Vec<(Vec<u64>, usize)> = args
        .outputs
        .iter()
        .map(|o| {
            let n = o.layout.numel() * o.dtype.size();
            (words(n), n)
        })
        .collect();
    {
        let mut outs: Vec<Out> = args
            .outputs
            .iter()
            .zip(out_bufs.iter_mut())
            .map(|(o, (w, n))| Out { dtype: o.dtype, dims: o.layout.dims(), bytes: bytes_mut(w, *n) })
            .collect();
        let ctx = Ctx { threads: 1, features: backend_cpu::features::get(), prepacked: None };
        backend_cpu::kernels::reference::run(&args.op, &ins, &mut outs, &ctx)
            .map_err(|m| AclBackendError::BadRequest(format!("{}: host reference: {m}", args.op.name())))?;
    }
    let _ = device;
    for (o, (w, n)) in args.outputs.iter().zip(&out_bufs) {
        let (start, _) = range(o);
        if *n > 0 {
            h2d(b, bytes(w, *n), start)?;
        }
    }
    Ok(())
}

fn bytes(w: &[u64], n: usize) -> &[u8] {
    // SAFETY: u64 has no padding and every byte is a valid u8; n <= w.len() * 8.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), n.min(w.len() * 8)) }
}
fn bytes_mut(w: &mut [u64], n: usize) -> &mut [u8] {
    // SAFETY: as above, with exclusive access.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), n.min(w.len() * 8)) }
}

fn d2h(b: &AclBackend, src: u64, dst: &mut [u8]) -> BResult<()> {
    let f = b.sym(b.api.aclrtMemcpy(), None)?;
    // SAFETY: src range validated by `launch`; dst is an exclusively borrowed host slice.
    let code = unsafe {
        f(dst.as_mut_ptr().cast(), dst.len(), src as *const c_void, dst.len(), acl_sys::ACL_MEMCPY_DEVICE_TO_HOST)
    };
    b.check(None, "aclrtMemcpy", code)
}
fn h2d(b: &AclBackend, src: &[u8], dst: u64) -> BResult<()> {
    let f = b.sym(b.api.aclrtMemcpy(), None)?;
    // SAFETY: dst range validated by `launch`; src is a live host slice.
    let code =
        unsafe { f(dst as *mut c_void, src.len(), src.as_ptr().cast(), src.len(), acl_sys::ACL_MEMCPY_HOST_TO_DEVICE) };
    b.check(None, "aclrtMemcpy", code)
}

// ------------------------------------------------------------------ aclnn ----

fn acl_dtype(d: DType) -> aclDataType {
    match d {
        DType::F32 => acl_sys::ACL_FLOAT,
        DType::F16 => acl_sys::ACL_FLOAT16,
        DType::BF16 => acl_sys::ACL_BF16,
        DType::I32 => acl_sys::ACL_INT32,
        DType::I64 => acl_sys::ACL_INT64,
        DType::U8 => acl_sys::ACL_UINT8,
    }
}

type Phase2 = pfn::aclnnAdd;

/// One op's aclnn objects; destroyed (after phase 2 returned) when dropped.
struct Call<'a> {
    b: &'a AclBackend,
    rec: &'a StreamRec,
    op: &'static str,
    tensors: Vec<*mut aclTensor>,
    scalars: Vec<*mut aclScalar>,
    arrays: Vec<*mut aclIntArray>,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let api = &self.b.api;
        if let Ok(f) = api.aclDestroyTensor() {
            for t in self.tensors.drain(..) {
                // SAFETY: created by aclCreateTensor in this call and destroyed once; the
                // launch that used it has returned (descriptors may go before the sync).
                if unsafe { f(t) } != 0 {
                    // SAFETY: the failed call released nothing; retried once.
                    unsafe { f(t) };
                }
            }
        }
        if let Ok(f) = api.aclDestroyScalar() {
            for s in self.scalars.drain(..) {
                // SAFETY: as above, for scalars.
                if unsafe { f(s) } != 0 {
                    // SAFETY: the failed call released nothing; retried once.
                    unsafe { f(s) };
                }
            }
        }
        if let Ok(f) = api.aclDestroyIntArray() {
            for a in self.arrays.drain(..) {
                // SAFETY: as above, for int arrays.
                if unsafe { f(a) } != 0 {
                    // SAFETY: the failed call released nothing; retried once.
                    unsafe { f(a) };
                }
            }
        }
    }
}

/// A view: base address, dims, strides and offset in elements.
#[derive(Clone)]
struct View {
    base: u64,
    dtype: DType,
    dims: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

impl View {
    fn of(a: &TensorArg) -> View {
        View {
            base: a.ptr.0,
            dtype: a.dtype,
            dims: a.layout.dims().to_vec(),
            strides: a.layout.strides.clone(),
            offset: a.layout.offset,
        }
    }
    fn contiguous(base: u64, dtype: DType, dims: &[usize]) -> View {
        View {
            base,
            dtype,
            dims: dims.to_vec(),
            strides: runtime::Shape::new(dims.to_vec()).contiguous_strides(),
            offset: 0,
        }
    }
    /// Same memory, new dims (the operand is contiguous).
    fn reshaped(&self, dims: &[usize]) -> View {
        View { dims: dims.to_vec(), strides: runtime::Shape::new(dims.to_vec()).contiguous_strides(), ..self.clone() }
    }
    /// Swaps the last two dims (a transposed view, no copy).
    fn t(&self, yes: bool) -> View {
        let mut v = self.clone();
        let r = v.dims.len();
        if yes && r >= 2 {
            v.dims.swap(r - 2, r - 1);
            v.strides.swap(r - 2, r - 1);
        }
        v
    }
}

impl<'a> Call<'a> {
    fn new(b: &'a AclBackend, rec: &'a StreamRec, op: &'static str) -> Call<'a> {
        Call { b, rec, op, tensors: Vec::new(), scalars: Vec::new(), arrays: Vec::new() }
    }

    fn tensor(&mut self, v: &View) -> BResult<*mut aclTensor> {
        let f = self.b.sym(self.b.api.aclCreateTensor(), Some(self.op))?;
        let dims: Vec<i64> = v.dims.iter().map(|&d| d as i64).collect();
        let strides: Vec<i64> = v.strides.iter().map(|&s| s as i64).collect();
        let n: usize = v.dims.iter().product();
        let span = if n == 0 {
            0
        } else {
            v.offset + v.dims.iter().zip(&v.strides).map(|(d, s)| (d - 1) * s).sum::<usize>() + 1
        };
        let storage = [span as i64];
        // SAFETY: the arrays live across the call and are copied by it; `base` is a
        // validated, 32-byte aligned device address (never dereferenced on the host).
        let t = unsafe {
            f(
                dims.as_ptr(),
                dims.len() as u64,
                acl_dtype(v.dtype),
                strides.as_ptr(),
                v.offset as i64,
                acl_sys::ACL_FORMAT_ND,
                storage.as_ptr(),
                1,
                v.base as *mut c_void,
            )
        };
        if t.is_null() {
            return Err(AclBackendError::call(
                Some(self.op),
                acl_sys::AclError {
                    code: acl_sys::codes::ACLNN_ERR_INNER_NULLPTR,
                    name: acl_sys::codes::name(561103),
                    call: "aclCreateTensor",
                    message: self.b.api.recent_error_message(),
                },
            ));
        }
        self.tensors.push(t);
        Ok(t)
    }

    fn scalar_f32(&mut self, v: f32) -> BResult<*mut aclScalar> {
        self.scalar_raw((&v as *const f32).cast_mut().cast(), acl_sys::ACL_FLOAT)
    }
    fn scalar_i64(&mut self, v: i64) -> BResult<*mut aclScalar> {
        self.scalar_raw((&v as *const i64).cast_mut().cast(), acl_sys::ACL_INT64)
    }
    fn scalar_for(&mut self, d: DType, v: f64) -> BResult<*mut aclScalar> {
        if d.is_int() { self.scalar_i64(v as i64) } else { self.scalar_f32(v as f32) }
    }
    fn scalar_raw(&mut self, p: *mut c_void, dt: aclDataType) -> BResult<*mut aclScalar> {
        let f = self.b.sym(self.b.api.aclCreateScalar(), Some(self.op))?;
        // SAFETY: `p` points to a live host value of type `dt`, copied by the call.
        let s = unsafe { f(p, dt) };
        if s.is_null() {
            return Err(null_err(self.b, self.op, "aclCreateScalar"));
        }
        self.scalars.push(s);
        Ok(s)
    }
    fn ints(&mut self, v: &[i64]) -> BResult<*mut aclIntArray> {
        let f = self.b.sym(self.b.api.aclCreateIntArray(), Some(self.op))?;
        // SAFETY: `v` is live across the call, which copies it.
        let a = unsafe { f(v.as_ptr(), v.len() as u64) };
        if a.is_null() {
            return Err(null_err(self.b, self.op, "aclCreateIntArray"));
        }
        self.arrays.push(a);
        Ok(a)
    }

    /// Phase 1 (`p1` gets the out-pointers), workspace, phase 2 on the stream.
    fn run(
        &mut self,
        p1_name: &'static str,
        p1: impl FnOnce(&mut u64, &mut *mut aclOpExecutor) -> i32,
        p2_name: &'static str,
        p2: std::result::Result<Phase2, acl_sys::LoadError>,
    ) -> BResult<()> {
        let p2 = self.b.sym(p2, Some(self.op))?;
        let mut ws = 0u64;
        let mut ex: *mut aclOpExecutor = std::ptr::null_mut();
        let code = p1(&mut ws, &mut ex);
        self.b.check(Some(self.op), p1_name, code)?;
        let wptr = match self.b.stream_buf(self.op, self.rec, &self.rec.workspace, ws as usize) {
            Ok(p) => p,
            Err(e) => {
                discard(self.b, ex);
                return Err(e);
            }
        };
        // SAFETY: `ex` came from phase 1 just above and is used once; the workspace holds
        // at least `ws` bytes and stays allocated until the stream has run (it is only
        // replaced after synchronising the stream).
        let code = unsafe { p2(wptr as *mut c_void, ws, ex, self.rec.raw()) };
        if code != 0 {
            // A failed launch may leave the executor alive; releasing it is harmless
            // when it was consumed (the repeatable call then fails and nothing is destroyed).
            let err = self.b.check(Some(self.op), p2_name, code);
            discard(self.b, ex);
            return err;
        }
        Ok(())
    }
}

fn null_err(b: &AclBackend, op: &'static str, call: &'static str) -> AclBackendError {
    AclBackendError::call(
        Some(op),
        acl_sys::AclError {
            code: acl_sys::codes::ACLNN_ERR_INNER_NULLPTR,
            name: acl_sys::codes::name(561103),
            call,
            message: b.api.recent_error_message(),
        },
    )
}

/// An executor whose phase 2 will not run: made repeatable and destroyed, the one
/// documented way to release it (facts §C.4).
fn discard(b: &AclBackend, ex: *mut aclOpExecutor) {
    if ex.is_null() {
        return;
    }
    if let (Ok(rep), Ok(des)) = (b.api.aclSetAclOpExecutorRepeatable(), b.api.aclDestroyAclOpExecutor()) {
        // SAFETY: `ex` is a live executor from phase 1 that was never launched.
        unsafe {
            if rep(ex) == 0 {
                des(ex);
            }
        }
    }
}

macro_rules! p1 {
    ($c:expr, $name:ident, |$ws:ident, $ex:ident| $call:expr) => {{
        let f = $c.b.sym($c.b.api.$name(), Some($c.op))?;
        let p1 = move |$ws: &mut u64, $ex: &mut *mut aclOpExecutor| {
            // SAFETY: the descriptors are live (owned by the Call) and the out-pointers valid.
            unsafe { $call(f) }
        };
        p1
    }};
}

fn cube_math(b: &AclBackend, d: DType) -> i8 {
    if d == DType::F32 && is_910_family(b.soc()) {
        acl_sys::cube_math::ALLOW_FP32_DOWN_PRECISION
    } else {
        acl_sys::cube_math::KEEP_DTYPE
    }
}

fn matmul(c: &mut Call, a: &View, bm: &View, out: &View, cube: i8) -> BResult<()> {
    let (ta, tb, to) = (c.tensor(a)?, c.tensor(bm)?, c.tensor(out)?);
    let p =
        p1!(c, aclnnMatmulGetWorkspaceSize, |ws, ex| |f: pfn::aclnnMatmulGetWorkspaceSize| f(ta, tb, to, cube, ws, ex));
    c.run("aclnnMatmulGetWorkspaceSize", p, "aclnnMatmul", c.b.api.aclnnMatmul())
}

fn addmm(c: &mut Call, bias: &View, a: &View, bm: &View, beta: f32, alpha: f32, out: &View, cube: i8) -> BResult<()> {
    let (tc, ta, tb, to) = (c.tensor(bias)?, c.tensor(a)?, c.tensor(bm)?, c.tensor(out)?);
    let (sb, sa) = (c.scalar_f32(beta)?, c.scalar_f32(alpha)?);
    let p = p1!(c, aclnnAddmmGetWorkspaceSize, |ws, ex| |f: pfn::aclnnAddmmGetWorkspaceSize| f(
        tc, ta, tb, sb, sa, to, cube, ws, ex
    ));
    c.run("aclnnAddmmGetWorkspaceSize", p, "aclnnAddmm", c.b.api.aclnnAddmm())
}

fn add(c: &mut Call, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.tensor(out)?);
    let al = c.scalar_for(x.dtype, 1.0)?;
    let p = p1!(c, aclnnAddGetWorkspaceSize, |ws, ex| |f: pfn::aclnnAddGetWorkspaceSize| f(tx, ty, al, to, ws, ex));
    c.run("aclnnAddGetWorkspaceSize", p, "aclnnAdd", c.b.api.aclnnAdd())
}

fn muls(c: &mut Call, x: &View, factor: f32, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.tensor(out)?);
    let s = c.scalar_f32(factor)?;
    let p = p1!(c, aclnnMulsGetWorkspaceSize, |ws, ex| |f: pfn::aclnnMulsGetWorkspaceSize| f(tx, s, to, ws, ex));
    c.run("aclnnMulsGetWorkspaceSize", p, "aclnnMuls", c.b.api.aclnnMuls())
}

fn gelu(c: &mut Call, x: &View, approx: GeluApprox, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.tensor(out)?);
    match approx {
        GeluApprox::Tanh => {
            let p = p1!(c, aclnnGeluGetWorkspaceSize, |ws, ex| |f: pfn::aclnnGeluGetWorkspaceSize| f(tx, to, ws, ex));
            c.run("aclnnGeluGetWorkspaceSize", p, "aclnnGelu", c.b.api.aclnnGelu())
        }
        GeluApprox::Erf => {
            let p = p1!(c, aclnnGeluV2GetWorkspaceSize, |ws, ex| |f: pfn::aclnnGeluV2GetWorkspaceSize| f(
                tx, 0, to, ws, ex
            ));
            c.run("aclnnGeluV2GetWorkspaceSize", p, "aclnnGeluV2", c.b.api.aclnnGeluV2())
        }
    }
}

fn layer_norm(c: &mut Call, x: &View, g: &View, be: &View, eps: f32, out: &View) -> BResult<()> {
    let d = *x.dims.last().unwrap_or(&0) as i64;
    let (tx, tg, tb, to) = (c.tensor(x)?, c.tensor(g)?, c.tensor(be)?, c.tensor(out)?);
    let ns = c.ints(&[d])?;
    let null = std::ptr::null_mut();
    let p = p1!(c, aclnnLayerNormGetWorkspaceSize, |ws, ex| |f: pfn::aclnnLayerNormGetWorkspaceSize| f(
        tx, ns, tg, tb, eps as f64, to, null, null, ws, ex
    ));
    c.run("aclnnLayerNormGetWorkspaceSize", p, "aclnnLayerNorm", c.b.api.aclnnLayerNorm())
}

fn inplace_copy(c: &mut Call, dst: &View, src: &View) -> BResult<()> {
    let (td, ts) = (c.tensor(dst)?, c.tensor(src)?);
    let p =
        p1!(c, aclnnInplaceCopyGetWorkspaceSize, |ws, ex| |f: pfn::aclnnInplaceCopyGetWorkspaceSize| f(td, ts, ws, ex));
    c.run("aclnnInplaceCopyGetWorkspaceSize", p, "aclnnInplaceCopy", c.b.api.aclnnInplaceCopy())
}

fn align512(n: usize) -> usize {
    n.div_ceil(512) * 512
}

/// Device-to-device bytes through aclnnInplaceCopy on u8 views (for unaligned copies).
pub fn byte_copy(
    b: &AclBackend,
    _device: usize,
    rec: &StreamRec,
    src: (u64, u64),
    dst: (u64, u64),
    bytes: usize,
) -> BResult<()> {
    let mut c = Call::new(b, rec, "Copy");
    let s = View { base: src.0, dtype: DType::U8, dims: vec![bytes], strides: vec![1], offset: src.1 as usize };
    let d = View { base: dst.0, dtype: DType::U8, dims: vec![bytes], strides: vec![1], offset: dst.1 as usize };
    inplace_copy(&mut c, &d, &s)?;
    rec.dirty.store(true, Ordering::Release);
    lock(&rec.inflight).push(("Copy", 0));
    Ok(())
}

fn aclnn(b: &AclBackend, rec: &StreamRec, args: &LaunchArgs) -> BResult<()> {
    let op = args.op.name();
    let mut c = Call::new(b, rec, op);
    let ins: Vec<View> = args.inputs.iter().map(View::of).collect();
    let out = View::of(&args.outputs[0]);
    let x = &ins[0];
    match &args.op {
        Op::MatMul { trans_a, trans_b } => {
            matmul(&mut c, &x.t(*trans_a), &ins[1].t(*trans_b), &out, cube_math(b, x.dtype))
        }
        Op::Gemm { trans_a, trans_b, alpha, beta } => {
            let (a, bm) = (x.t(*trans_a), ins[1].t(*trans_b));
            let cube = cube_math(b, x.dtype);
            match ins.get(2) {
                Some(bias) => addmm(&mut c, bias, &a, &bm, *beta, *alpha, &out, cube),
                None if *alpha == 1.0 => matmul(&mut c, &a, &bm, &out, cube),
                None => {
                    let n = out.dims.iter().product::<usize>() * out.dtype.size();
                    let s = b.stream_buf(op, rec, &rec.scratch, n)?;
                    let tmp = View::contiguous(s, out.dtype, &out.dims);
                    matmul(&mut c, &a, &bm, &tmp, cube)?;
                    muls(&mut c, &tmp, *alpha, &out)
                }
            }
        }
        Op::Linear => {
            let k = *x.dims.last().unwrap_or(&0);
            let m = x.dims.iter().product::<usize>() / k.max(1);
            let n = ins[1].dims[0];
            let a = x.reshaped(&[m, k]);
            let w = ins[1].t(true);
            let o = out.reshaped(&[m, n]);
            let cube = cube_math(b, x.dtype);
            match ins.get(2) {
                Some(bias) => addmm(&mut c, bias, &a, &w, 1.0, 1.0, &o, cube),
                None => matmul(&mut c, &a, &w, &o, cube),
            }
        }
        Op::Add | Op::Sub => {
            let (tx, ty, to) = (c.tensor(x)?, c.tensor(&ins[1])?, c.tensor(&out)?);
            let al = c.scalar_for(x.dtype, 1.0)?;
            if matches!(args.op, Op::Add) {
                let p = p1!(c, aclnnAddGetWorkspaceSize, |ws, ex| |f: pfn::aclnnAddGetWorkspaceSize| f(
                    tx, ty, al, to, ws, ex
                ));
                c.run("aclnnAddGetWorkspaceSize", p, "aclnnAdd", b.api.aclnnAdd())
            } else {
                let p = p1!(c, aclnnSubGetWorkspaceSize, |ws, ex| |f: pfn::aclnnSubGetWorkspaceSize| f(
                    tx, ty, al, to, ws, ex
                ));
                c.run("aclnnSubGetWorkspaceSize", p, "aclnnSub", b.api.aclnnSub())
            }
        }
        Op::Mul | Op::Div => {
            let (tx, ty, to) = (c.tensor(x)?, c.tensor(&ins[1])?, c.tensor(&out)?);
            if matches!(args.op, Op::Mul) {
                let p =
                    p1!(c, aclnnMulGetWorkspaceSize, |ws, ex| |f: pfn::aclnnMulGetWorkspaceSize| f(tx, ty, to, ws, ex));
                c.run("aclnnMulGetWorkspaceSize", p, "aclnnMul", b.api.aclnnMul())
            } else {
                let p =
                    p1!(c, aclnnDivGetWorkspaceSize, |ws, ex| |f: pfn::aclnnDivGetWorkspaceSize| f(tx, ty, to, ws, ex));
                c.run("aclnnDivGetWorkspaceSize", p, "aclnnDiv", b.api.aclnnDiv())
            }
        }
        Op::Relu => {
            let (tx, to) = (c.tensor(x)?, c.tensor(&out)?);
            let p = p1!(c, aclnnReluGetWorkspaceSize, |ws, ex| |f: pfn::aclnnReluGetWorkspaceSize| f(tx, to, ws, ex));
            c.run("aclnnReluGetWorkspaceSize", p, "aclnnRelu", b.api.aclnnRelu())
        }
        Op::Gelu(a) => gelu(&mut c, x, *a, &out),
        Op::Tanh | Op::Erf | Op::Exp | Op::Sqrt => {
            let (tx, to) = (c.tensor(x)?, c.tensor(&out)?);
            match args.op {
                Op::Tanh => {
                    let p = p1!(c, aclnnTanhGetWorkspaceSize, |ws, ex| |f: pfn::aclnnTanhGetWorkspaceSize| f(
                        tx, to, ws, ex
                    ));
                    c.run("aclnnTanhGetWorkspaceSize", p, "aclnnTanh", b.api.aclnnTanh())
                }
                Op::Erf => {
                    let p =
                        p1!(c, aclnnErfGetWorkspaceSize, |ws, ex| |f: pfn::aclnnErfGetWorkspaceSize| f(tx, to, ws, ex));
                    c.run("aclnnErfGetWorkspaceSize", p, "aclnnErf", b.api.aclnnErf())
                }
                Op::Exp => {
                    let p =
                        p1!(c, aclnnExpGetWorkspaceSize, |ws, ex| |f: pfn::aclnnExpGetWorkspaceSize| f(tx, to, ws, ex));
                    c.run("aclnnExpGetWorkspaceSize", p, "aclnnExp", b.api.aclnnExp())
                }
                _ => {
                    let p = p1!(c, aclnnSqrtGetWorkspaceSize, |ws, ex| |f: pfn::aclnnSqrtGetWorkspaceSize| f(
                        tx, to, ws, ex
                    ));
                    c.run("aclnnSqrtGetWorkspaceSize", p, "aclnnSqrt", b.api.aclnnSqrt())
                }
            }
        }
        Op::Scale { factor } => muls(&mut c, x, *factor, &out),
        Op::Softmax { axis } => {
            let (tx, to) = (c.tensor(x)?, c.tensor(&out)?);
            let dim = *axis as i64;
            let p = p1!(c, aclnnSoftmaxGetWorkspaceSize, |ws, ex| |f: pfn::aclnnSoftmaxGetWorkspaceSize| f(
                tx, dim, to, ws, ex
            ));
            c.run("aclnnSoftmaxGetWorkspaceSize", p, "aclnnSoftmax", b.api.aclnnSoftmax())
        }
        Op::LayerNorm { eps } => layer_norm(&mut c, x, &ins[1], &ins[2], *eps, &out),
        Op::Permute { perm } => {
            let (tx, to) = (c.tensor(x)?, c.tensor(&out)?);
            let p: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
            let dims = c.ints(&p)?;
            let p = p1!(c, aclnnPermuteGetWorkspaceSize, |ws, ex| |f: pfn::aclnnPermuteGetWorkspaceSize| f(
                tx, dims, to, ws, ex
            ));
            c.run("aclnnPermuteGetWorkspaceSize", p, "aclnnPermute", b.api.aclnnPermute())
        }
        Op::Reshape { .. } => inplace_copy(&mut c, &out, &x.reshaped(&out.dims)),
        Op::Copy => inplace_copy(&mut c, &out, x),
        Op::Cast { to } => {
            let (tx, tout) = (c.tensor(x)?, c.tensor(&out)?);
            let dt = acl_dtype(*to);
            let p =
                p1!(c, aclnnCastGetWorkspaceSize, |ws, ex| |f: pfn::aclnnCastGetWorkspaceSize| f(tx, dt, tout, ws, ex));
            c.run("aclnnCastGetWorkspaceSize", p, "aclnnCast", b.api.aclnnCast())
        }
        Op::ReduceSum { axes, keepdims } | Op::ReduceMean { axes, keepdims } => {
            let shape = runtime::Shape::new(x.dims.clone());
            let ax = runtime::op::normalise_axes(&shape, axes)
                .ok_or_else(|| AclBackendError::BadRequest(format!("{op}: bad axes {axes:?}")))?;
            let axv: Vec<i64> = ax.iter().map(|&a| a as i64).collect();
            let (tx, to) = (c.tensor(x)?, c.tensor(&out)?);
            let dims = c.ints(&axv)?;
            let (keep, dt) = (*keepdims, acl_dtype(out.dtype));
            if matches!(args.op, Op::ReduceSum { .. }) {
                let p = p1!(c, aclnnReduceSumGetWorkspaceSize, |ws, ex| |f: pfn::aclnnReduceSumGetWorkspaceSize| f(
                    tx, dims, keep, dt, to, ws, ex
                ));
                c.run("aclnnReduceSumGetWorkspaceSize", p, "aclnnReduceSum", b.api.aclnnReduceSum())
            } else {
                let p = p1!(c, aclnnMeanGetWorkspaceSize, |ws, ex| |f: pfn::aclnnMeanGetWorkspaceSize| f(
                    tx, dims, keep, dt, to, ws, ex
                ));
                c.run("aclnnMeanGetWorkspaceSize", p, "aclnnMean", b.api.aclnnMean())
            }
        }
        Op::Gather { axis } => {
            // IndexSelect needs indices in [0, n); the op table allows [-n, n). Select
            // from the data laid twice along the axis with indices shifted by n.
            let axis = *axis;
            let n = x.dims[axis];
            let idx = &ins[1];
            let ni: usize = idx.dims.iter().product();
            let mut d2 = x.dims.clone();
            d2[axis] = 2 * n;
            let data_bytes = align512(d2.iter().product::<usize>() * x.dtype.size());
            let s = b.stream_buf(op, rec, &rec.scratch, data_bytes + align512(ni * idx.dtype.size()))?;
            let doubled = View::contiguous(s, x.dtype, &d2);
            let mut half = doubled.clone();
            half.dims[axis] = n;
            inplace_copy(&mut c, &half, x)?;
            half.offset = n * doubled.strides[axis];
            inplace_copy(&mut c, &half, x)?;
            let shifted = View::contiguous(s + data_bytes as u64, idx.dtype, &[ni]);
            {
                let (ti, ts) = (c.tensor(&idx.reshaped(&[ni]))?, c.tensor(&shifted)?);
                let (sn, one) = (c.scalar_i64(n as i64)?, c.scalar_i64(1)?);
                let p = p1!(c, aclnnAddsGetWorkspaceSize, |ws, ex| |f: pfn::aclnnAddsGetWorkspaceSize| f(
                    ti, sn, one, ts, ws, ex
                ));
                c.run("aclnnAddsGetWorkspaceSize", p, "aclnnAdds", b.api.aclnnAdds())?;
            }
            let mut od = x.dims[..axis].to_vec();
            od.push(ni);
            od.extend_from_slice(&x.dims[axis + 1..]);
            let (td, ti, to) = (c.tensor(&doubled)?, c.tensor(&shifted)?, c.tensor(&out.reshaped(&od))?);
            let dim = axis as i64;
            let p = p1!(c, aclnnIndexSelectGetWorkspaceSize, |ws, ex| |f: pfn::aclnnIndexSelectGetWorkspaceSize| f(
                td, dim, ti, to, ws, ex
            ));
            c.run("aclnnIndexSelectGetWorkspaceSize", p, "aclnnIndexSelect", b.api.aclnnIndexSelect())
        }
        Op::BiasGelu(a) => {
            let s = b.stream_buf(op, rec, &rec.scratch, out.dims.iter().product::<usize>() * out.dtype.size())?;
            let tmp = View::contiguous(s, out.dtype, &out.dims);
            add(&mut c, x, &ins[1], &tmp)?;
            gelu(&mut c, &tmp, *a, &out)
        }
        Op::AddLayerNorm { eps } => {
            // aclnnAddLayerNorm is not available on the 910: Add then LayerNorm.
            let s = b.stream_buf(op, rec, &rec.scratch, out.dims.iter().product::<usize>() * out.dtype.size())?;
            let tmp = View::contiguous(s, out.dtype, &out.dims);
            add(&mut c, x, &ins[1], &tmp)?;
            layer_norm(&mut c, &tmp, &ins[2], &ins[3], *eps, &out)
        }
        Op::Attention { .. } => Err(AclBackendError::BadRequest("Attention has no aclnn mapping yet".into())),
    }
}
