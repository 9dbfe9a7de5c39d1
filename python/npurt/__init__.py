"""npurt: one operator table for Ascend NPUs, NVIDIA GPUs and the CPU, from Python.

>>> import npurt as runtime
>>> import numpy as np
>>> A = runtime.Tensor((64, 64), dtype=np.float32); A.from_numpy(np.ones((64, 64), np.float32))
>>> C = runtime.Tensor((64, 64), dtype=np.float32)
>>> result = runtime.execute(op_type="MatMul", inputs=[A, A], outputs=[C])
>>> result.selected_implementation, result.device, result.hardware_unit

The module functions run on a default runtime made on first use (the best backend
present: Ascend, then CUDA, then the CPU; ``NPURT_*`` environment variables honoured).
:class:`Runtime` gives an engine a runtime of its own with the same methods.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, List

from . import _native
from ._errors import BackendUnavailableError, DeviceError, Error, OutOfMemoryError, ValidationError
from ._graph import CompiledGraph, Embedder, Graph, MemoryPlan, Profile, Value, bert
from ._results import ExecutionResult, HardwareUtilization, MemoryInfo
from ._runtime import Event, MemoryPool, Runtime, Stream, default_runtime
from ._tensor import Tensor

try:
    from importlib.metadata import version as _version

    __version__: str = _version("npurt")
except Exception:  # noqa: BLE001 - not installed as a distribution (e.g. a source tree)
    __version__ = "0.1.0"

__all__ = [
    "__version__",
    # objects
    "Runtime", "Tensor", "Stream", "Event", "MemoryPool", "Graph", "Value", "CompiledGraph", "MemoryPlan",
    "Profile", "Embedder", "ExecutionResult", "MemoryInfo", "HardwareUtilization",
    # errors
    "Error", "ValidationError", "OutOfMemoryError", "DeviceError", "BackendUnavailableError",
    # module API
    "execute", "execute_batch", "stream_scope", "default_stream", "current_stream", "synchronize",
    "get_device_count", "set_device", "get_device", "supports_zero_copy", "asarray", "from_dlpack", "empty",
    "zeros", "get_memory_info", "get_hardware_utilization", "reset_hardware_utilization", "release_cached",
    "set_optimization_config", "set_memory_pool_size", "set_memory_reuse", "set_memory_alignment",
    "set_max_streams", "set_scheduling_strategy", "set_batch_size", "set_hardware_mapping_strategy",
    "set_compute_unit_utilization", "bert", "default_runtime", "op_names", "compiled_backends", "backend",
    "enable_logging",
]


def _module_function(name: str) -> Callable[..., Any]:
    method = getattr(Runtime, name)

    @functools.wraps(method)
    def f(*args: Any, **kwargs: Any) -> Any:
        return getattr(default_runtime(), name)(*args, **kwargs)

    sig = inspect.signature(method)
    f.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])  # type: ignore[attr-defined]
    del f.__wrapped__  # type: ignore[attr-defined]
    f.__qualname__ = name
    f.__module__ = __name__
    return f


execute = _module_function("execute")
execute_batch = _module_function("execute_batch")
stream_scope = _module_function("stream_scope")
default_stream = _module_function("default_stream")
current_stream = _module_function("current_stream")
synchronize = _module_function("synchronize")
get_device_count = _module_function("get_device_count")
set_device = _module_function("set_device")
get_device = _module_function("get_device")
supports_zero_copy = _module_function("supports_zero_copy")
asarray = _module_function("asarray")
from_dlpack = _module_function("from_dlpack")
empty = _module_function("empty")
zeros = _module_function("zeros")
get_memory_info = _module_function("get_memory_info")
get_hardware_utilization = _module_function("get_hardware_utilization")
reset_hardware_utilization = _module_function("reset_hardware_utilization")
release_cached = _module_function("release_cached")
set_optimization_config = _module_function("set_optimization_config")
set_memory_pool_size = _module_function("set_memory_pool_size")
set_memory_reuse = _module_function("set_memory_reuse")
set_memory_alignment = _module_function("set_memory_alignment")
set_max_streams = _module_function("set_max_streams")
set_scheduling_strategy = _module_function("set_scheduling_strategy")
set_batch_size = _module_function("set_batch_size")
set_hardware_mapping_strategy = _module_function("set_hardware_mapping_strategy")
set_compute_unit_utilization = _module_function("set_compute_unit_utilization")


def backend() -> str:
    """The default runtime's backend: ``cpu``, ``cuda`` or ``acl``."""
    return default_runtime().backend


def op_names() -> List[str]:
    """The op table's canonical names (``execute`` also takes ONNX spellings)."""
    return list(_native.op_names())


def compiled_backends() -> List[str]:
    """Backends compiled into this build, in fallback order."""
    return list(_native.compiled_backends())


def enable_logging() -> None:
    """Sends the runtime's log to standard error (filter: ``RUST_LOG`` or ``NPURT_LOG``,
    default ``warn``; ``info`` announces the backend chosen)."""
    _native.init_logging()
