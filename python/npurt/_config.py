"""Validation of the configuration setters' values (each error is a ``ValueError``)."""

from __future__ import annotations

import math
import os
from typing import Any, Dict, Optional

from ._errors import ValidationError

MIB = 1 << 20

#: set_memory_reuse strategies -> the pool's reuse strategy.
REUSE_STRATEGIES = {
    "aggressive": "best_fit",        # smallest cached block that fits: the most reuse
    "conservative": "first_fit",     # lowest-addressed block that fits: fast, splits more
    "best_fit": "best_fit",
    "first_fit": "first_fit",
    # The static planner's orderings. The planner of compiled graphs tries every one and
    # keeps the smallest arena (CompiledGraph.memory_plan names the winner); naming one
    # turns reuse on with the pool's best-fit strategy.
    "greedy-by-size": "best_fit",
    "by-first-use": "best_fit",
    "by-lifetime": "best_fit",
    "alternate-ends": "best_fit",
}
SCHEDULING = ("latency", "throughput", "balanced")
HW_MAPPING = ("auto", "cube_prefer", "vector_prefer")
OPTIMIZATION_KEYS = ("memory_pool", "memory_reuse", "parallel_scheduling", "hardware_mapping")
#: What the runtime's ``Precision::parse`` accepts (case-insensitive): ``f32``/``fp32``
#: (everything in the graph's dtypes), ``bf16`` (Linear weights in bf16), ``f16``/``fp16``/
#: ``half`` (Linear weights in fp16, f32 accumulation), ``int8``/``i8`` (dynamic int8
#: Linear products where the backend has an int8 unit) and ``auto`` (what the device
#: computes well: f32 on the CPU and CUDA).
PRECISIONS = ("f32", "fp32", "bf16", "f16", "fp16", "half", "int8", "i8", "auto")


def _bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValidationError(f"{name} must be True or False, got {v!r}")
    return v


def _int(name: str, v: Any, lo: int, hi: Optional[int] = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import numpy as np

            if isinstance(v, np.integer):
                v = int(v)
            else:
                raise TypeError
        except TypeError:
            raise ValidationError(f"{name} must be an integer, got {v!r}") from None
    if v < lo or (hi is not None and v > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValidationError(f"{name} must be in {rng}, got {v}")
    return int(v)


def _choice(name: str, v: Any, choices: Any) -> str:
    if not isinstance(v, str) or v.lower() not in choices:
        raise ValidationError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {v!r}")
    return v.lower()


def optimization(config: Any) -> Dict[str, Any]:
    """Settings from ``set_optimization_config``'s dictionary."""
    if not isinstance(config, dict):
        raise ValidationError(f"set_optimization_config takes a dict, got {type(config).__name__}")
    unknown = [k for k in config if k not in OPTIMIZATION_KEYS]
    if unknown:
        raise ValidationError(f"set_optimization_config: unknown key(s) {', '.join(map(repr, unknown))}; "
                              f"known: {', '.join(OPTIMIZATION_KEYS)}")
    out: Dict[str, Any] = {}
    for k in ("memory_pool", "memory_reuse", "parallel_scheduling"):
        if k in config:
            out[k] = _bool(k, config[k])
    if "hardware_mapping" in config:
        v = config["hardware_mapping"]
        if isinstance(v, bool):
            out["hardware_mapping"] = v
        else:
            out["hardware_mapping"] = _choice("hardware_mapping", v, ("default", "optimized")) == "optimized"
    return out


def pool_size(mb: Any) -> Dict[str, Any]:
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not math.isfinite(mb) or mb <= 0:
        raise ValidationError(f"memory pool size must be a positive number of MiB, got {mb!r}")
    b = int(mb * MIB)
    if b < 1 << 10:
        raise ValidationError(f"memory pool size must be at least 1 KiB, got {mb!r} MiB")
    return {"pool_limit_bytes": b}


def reuse(enabled: Any, strategy: Any) -> Dict[str, Any]:
    out = {"memory_reuse": _bool("enabled", enabled)}
    if strategy is not None:
        out["reuse_strategy"] = REUSE_STRATEGIES[_choice("strategy", strategy, tuple(REUSE_STRATEGIES))]
    return out


def alignment(b: Any) -> Dict[str, Any]:
    v = _int("alignment bytes", b, 16, 64 << 10)
    if v & (v - 1):
        raise ValidationError(f"alignment bytes must be a power of two in 16..65536, got {v}")
    return {"alignment": v}


def max_streams(count: Any, bound: int) -> Dict[str, Any]:
    return {"max_streams": _int("max_streams count", count, 1, bound)}


def scheduling(strategy: Any) -> Dict[str, Any]:
    return {"scheduling": _choice("scheduling strategy", strategy, SCHEDULING)}


def batch_size(size: Any) -> Dict[str, Any]:
    return {"batch_size": _int("batch size", size, 1, 1 << 16)}


def precision(v: Any) -> str:
    """The runtime's name (``f32``, ``bf16``, ``f16``, ``int8`` or ``auto``) of a precision
    among :data:`PRECISIONS`; anything else raises ``ValueError``."""
    p = _choice("precision", v, PRECISIONS)
    return {"fp32": "f32", "fp16": "f16", "half": "f16", "i8": "int8"}.get(p, p)


def hw_mapping(strategy: Any) -> Dict[str, Any]:
    return {"hw_mapping": _choice("hardware mapping strategy", strategy, HW_MAPPING)}


def utilization(cube: Any, vector: Any) -> Dict[str, Any]:
    for name, v in (("cube", cube), ("vector", vector)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1:
            raise ValidationError(f"{name} utilisation must be a fraction in (0, 1], got {v!r}")
    frac = max(float(cube), float(vector))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = None if frac >= 1.0 else max(1, round(frac * cores))
    return {"threads": threads, "_cube": float(cube), "_vector": float(vector)}
