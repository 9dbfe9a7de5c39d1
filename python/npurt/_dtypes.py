"""NumPy dtypes and the runtime's dtype names."""

from __future__ import annotations

from typing import Any

import numpy as np

# runtime name -> NumPy dtype (bf16 has no NumPy dtype: it reads and writes as float32)
_TO_NUMPY = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
}
_FROM_NUMPY = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "u8",
}
_ALIASES = {
    "f32": "f32", "float32": "f32", "float": "f32", "fp32": "f32",
    "f16": "f16", "float16": "f16", "half": "f16", "fp16": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32",
    "i64": "i64", "int64": "i64", "long": "i64",
    "u8": "u8", "uint8": "u8", "bool": "u8",
}


def runtime_name(dtype: Any) -> str:
    """The runtime's name of ``dtype`` (a NumPy dtype, a type such as ``np.float32`` or a
    name such as ``"float32"``, ``"f16"``, ``"bfloat16"``)."""
    from ._errors import ValidationError

    if isinstance(dtype, str):
        name = _ALIASES.get(dtype.lower())
        if name is None:
            raise ValidationError(f"unsupported dtype {dtype!r}; supported: float32, float16, bfloat16, int32, int64, uint8")
        return name
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise ValidationError(f"unsupported dtype {dtype!r}") from None
    name = _FROM_NUMPY.get(d)
    if name is None:
        if d.name == "bfloat16":
            return "bf16"
        raise ValidationError(f"unsupported dtype {d}; supported: float32, float16, bfloat16, int32, int64, uint8")
    return name


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype a tensor of runtime dtype ``name`` reads and writes as."""
    return _TO_NUMPY[name]


def typestr(name: str) -> str:
    """The ``__array_interface__`` type string of a runtime dtype."""
    return {"f32": "<f4", "f16": "<f2", "i32": "<i4", "i64": "<i8", "u8": "|u1", "bf16": "<u2"}[name]
