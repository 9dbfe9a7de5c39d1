//! The integer "enums" of the C API (dtypes, unit classes, tiers) and their conversions.
//! They cross as `int32_t` with `#define`d values, so an out-of-range value from C is an
//! error, never undefined behaviour.

use crate::error::{CResult, Fail};
use npurt::{DType, Tier, UnitClass};

/// An element type: one of the `NPURT_F32` ... `NPURT_U8` values.
pub type npurt_dtype = i32;
/// 32-bit float.
pub const NPURT_F32: npurt_dtype = 0;
/// IEEE 754 half precision.
pub const NPURT_F16: npurt_dtype = 1;
/// bfloat16.
pub const NPURT_BF16: npurt_dtype = 2;
/// 32-bit signed integer.
pub const NPURT_I32: npurt_dtype = 3;
/// 64-bit signed integer.
pub const NPURT_I64: npurt_dtype = 4;
/// 8-bit unsigned integer.
pub const NPURT_U8: npurt_dtype = 5;

/// The kind of compute unit a kernel ran on.
pub type npurt_unit_class = i32;
/// Matrix unit (Ascend Cube, tensor cores, the CPU's GEMM path).
pub const NPURT_UNIT_CUBE: npurt_unit_class = 0;
/// Vector unit (SIMD lanes, CUDA cores, Ascend Vector).
pub const NPURT_UNIT_VECTOR: npurt_unit_class = 1;
/// Scalar code.
pub const NPURT_UNIT_SCALAR: npurt_unit_class = 2;

/// An implementation tier: one of the `NPURT_TIER_*` values.
pub type npurt_tier = i32;
/// Plain loops with wide accumulation: the ground truth.
pub const NPURT_TIER_REFERENCE: npurt_tier = 0;
/// Portable and reasonably fast.
pub const NPURT_TIER_GENERIC: npurt_tier = 1;
/// Tuned for the hardware (SIMD, blocking, vendor libraries).
pub const NPURT_TIER_FAST: npurt_tier = 2;

pub(crate) fn dtype_from_c(d: npurt_dtype) -> CResult<DType> {
    Ok(match d {
        NPURT_F32 => DType::F32,
        NPURT_F16 => DType::F16,
        NPURT_BF16 => DType::BF16,
        NPURT_I32 => DType::I32,
        NPURT_I64 => DType::I64,
        NPURT_U8 => DType::U8,
        _ => return Err(Fail::arg(format!("dtype {d} is not an npurt_dtype (NPURT_F32..NPURT_U8 = 0..5)"))),
    })
}

pub(crate) fn dtype_to_c(d: DType) -> npurt_dtype {
    match d {
        DType::F32 => NPURT_F32,
        DType::F16 => NPURT_F16,
        DType::BF16 => NPURT_BF16,
        DType::I32 => NPURT_I32,
        DType::I64 => NPURT_I64,
        DType::U8 => NPURT_U8,
    }
}

pub(crate) fn unit_class_to_c(c: UnitClass) -> npurt_unit_class {
    match c {
        UnitClass::Cube => NPURT_UNIT_CUBE,
        UnitClass::Vector => NPURT_UNIT_VECTOR,
        UnitClass::Scalar => NPURT_UNIT_SCALAR,
    }
}

pub(crate) fn tier_to_c(t: Tier) -> npurt_tier {
    match t {
        Tier::Reference => NPURT_TIER_REFERENCE,
        Tier::Generic => NPURT_TIER_GENERIC,
        Tier::HighPerformance => NPURT_TIER_FAST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_round_trip_and_out_of_range_values_are_errors() {
        for d in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8] {
            assert_eq!(dtype_from_c(dtype_to_c(d)).unwrap(), d);
        }
        for bad in [-1, 6, i32::MAX] {
            assert!(dtype_from_c(bad).unwrap_err().msg.contains("not an npurt_dtype"));
        }
    }
}
