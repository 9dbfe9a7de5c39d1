//! aclnn objects as the emulator stores them: tensor descriptors (with the byte span and
//! element offsets of their view), executor operands and executors.

use crate::error::{Fail, R};
use acl_sys::codes::*;
use acl_sys::{ACL_BF16, ACL_BOOL, ACL_FLOAT, ACL_FLOAT16, ACL_INT32, ACL_INT64, ACL_UINT8, aclDataType};
use runtime::{DType, TensorMeta};

/// A tensor descriptor (aclCreateTensor): view dims, strides and offset in elements.
#[derive(Clone, Debug)]
pub struct TensorDesc {
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: i64,
    pub dtype: aclDataType,
    pub addr: u64,
}

pub fn dtype_of(d: aclDataType) -> Option<DType> {
    Some(match d {
        ACL_FLOAT => DType::F32,
        ACL_FLOAT16 => DType::F16,
        ACL_BF16 => DType::BF16,
        ACL_INT32 => DType::I32,
        ACL_INT64 => DType::I64,
        ACL_UINT8 | ACL_BOOL => DType::U8,
        _ => return None,
    })
}

impl TensorDesc {
    pub fn udims(&self) -> Vec<usize> {
        self.dims.iter().map(|&d| d.max(0) as usize).collect()
    }
    pub fn numel(&self) -> usize {
        self.udims().iter().product()
    }
    pub fn es(&self) -> usize {
        dtype_of(self.dtype).map_or(1, |d| d.size())
    }
    pub fn meta(&self) -> R<TensorMeta> {
        let dt = dtype_of(self.dtype)
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("data type {} is not emulated", self.dtype.0)))?;
        Ok(TensorMeta::new(dt, self.udims()))
    }
    /// Byte range `[start, end)` the view touches (empty for zero elements).
    pub fn span(&self) -> (u64, u64) {
        if self.numel() == 0 {
            return (self.addr, self.addr);
        }
        let es = self.es() as u64;
        let max: i64 = self.offset + self.dims.iter().zip(&self.strides).map(|(d, s)| (d - 1) * s).sum::<i64>();
        (self.addr + self.offset as u64 * es, self.addr + (max as u64 + 1) * es)
    }
    pub(crate) fn is_contiguous(&self) -> bool {
        let mut expect = 1i64;
        for (d, s) in self.dims.iter().zip(&self.strides).rev() {
            if *d != 1 && *s != expect {
                return false;
            }
            expect *= d;
        }
        true
    }
    /// Element offsets (from `addr`) of every element in row-major order.
    pub(crate) fn offsets(&self) -> Vec<u64> {
        let dims = self.udims();
        let n: usize = dims.iter().product();
        let mut v = Vec::with_capacity(n);
        if n == 0 {
            return v;
        }
        let mut idx = vec![0usize; dims.len()];
        for _ in 0..n {
            let o: i64 = self.offset + idx.iter().zip(&self.strides).map(|(&i, &s)| i as i64 * s).sum::<i64>();
            v.push(o as u64);
            for a in (0..dims.len()).rev() {
                idx[a] += 1;
                if idx[a] < dims[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
        v
    }
}

/// An operand of an executor: a descriptor or a constant (absent optional inputs).
#[derive(Clone, Debug)]
pub enum Src {
    Tensor(u64, TensorDesc),
    Fill(DType, Vec<usize>, f64),
}

pub use crate::kernel::Kernel;

#[derive(Clone, Debug)]
pub struct Executor {
    pub phase2: &'static str,
    pub kernel: Kernel,
    pub inputs: Vec<Src>,
    pub outputs: Vec<(u64, TensorDesc)>,
    pub workspace: u64,
    pub repeatable: bool,
    pub device: i32,
    /// Cube with cubeMathType 1 on the 910: FP32 inputs are computed as FP16.
    pub fp16_compute: bool,
    /// Gather/IndexSelect: (index operand, axis length) — indices must be in [0, n).
    pub index_check: Option<(usize, usize)>,
}
