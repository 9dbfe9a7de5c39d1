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

from typing import Any, ContextManager, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native, ort  # ort: the ONNX Runtime EP (imports onnxruntime only in ort.session)
from ._errors import BackendUnavailableError, DeviceError, Error, OutOfMemoryError, ValidationError
from ._graph import CompiledGraph, Embedder, Graph, MemoryPlan, Profile, Value, bert
from ._llm import LLM, GenerationResult, StreamedToken
from ._results import ExecutionResult, HardwareUtilization, MemoryInfo
from ._runtime import Event, MemoryPool, Runtime, Stream, default_runtime
from ._tensor import ShapeLike, Tensor

try:
    from importlib.metadata import version as _version

    __version__: str = _version("npurt")
except Exception:  # noqa: BLE001 - not installed as a distribution (e.g. a source tree)
    __version__ = "0.1.0"

__all__ = [
    "__version__", "ort",
    # objects
    "Runtime", "Tensor", "Stream", "Event", "MemoryPool", "Graph", "Value", "CompiledGraph", "MemoryPlan",
    "Profile", "Embedder", "LLM", "GenerationResult", "StreamedToken", "ExecutionResult", "MemoryInfo",
    "HardwareUtilization",
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


# The module API: each function calls the same-named method of the default runtime
# (``default_runtime()``), with the same signature (tests/test_api.py checks both).


def execute(op_type: str, inputs: Union[Tensor, Sequence[Any]], outputs: Optional[Sequence[Optional[Tensor]]] = None,
            **attrs: Any) -> ExecutionResult:
    """Runs one op of the op table on the default runtime.

    Args:
        op_type: the op's name, case-insensitive; ONNX spellings are accepted
            (``"MatMul"``, ``"Relu"``/``"ReLU"``, ``"Add"``, ``"Mul"``, ``"Gelu"``,
            ``"Softmax"``, ``"LayerNorm"``, ``"Transpose"``, ``"Gather"``, ...;
            :func:`op_names` lists the table).
        inputs: tensors (NumPy arrays are copied to the current device first).
        outputs: tensors to write in place (shape and dtype are checked); omitted ones
            (or ``None`` entries) are allocated and returned.
        **attrs: the op's attributes, e.g. ``trans_b=True``, ``axis=-1``, ``eps=1e-5``,
            ``perm=(1, 0)``, ``to=np.float16``.

    Returns an :class:`ExecutionResult` (``.selected_implementation``, ``.tier``,
    ``.device``, ``.execution_time_ms``, ``.hardware_unit``, ``.unit``, ``.flops``,
    ``.bytes``, ``.outputs``). Synchronous on the default stream (the GIL is released
    meanwhile; a Ctrl-C raises ``KeyboardInterrupt`` when the op returns); inside a
    :func:`stream_scope` it is queued and returns at once.

    Raises :class:`ValidationError` (a ``ValueError``) for operands or attributes the op
    rejects, with the runtime's message.
    """
    return default_runtime().execute(op_type, inputs, outputs, **attrs)


def execute_batch(tasks: Sequence[Tuple[Any, ...]]) -> List[ExecutionResult]:
    """Validates every task, then submits them together (one submission) on the current
    stream. A task is ``(op_type, inputs)``, ``(op_type, inputs, outputs)`` or
    ``(op_type, inputs, outputs, attrs_dict)``; ``outputs`` may be ``None``. Nothing runs
    if any task is invalid. Returns one :class:`ExecutionResult` per task."""
    return default_runtime().execute_batch(tasks)


def stream_scope(stream: Stream) -> ContextManager[Stream]:
    """``with stream_scope(s):`` makes ``s`` this thread's current stream (and its device
    the current device) inside the block: ops are queued on it and return at once. Scopes
    nest; the previous stream and device come back on exit, also on exceptions.
    ``with s:`` does the same."""
    return default_runtime().stream_scope(stream)


def default_stream(device: Optional[int] = None) -> Stream:
    """The synchronous default stream of ``device`` (default: the current device)."""
    return default_runtime().default_stream(device)


def current_stream(device: Optional[int] = None) -> Stream:
    """This thread's current stream on ``device``: the innermost scoped one, else the
    device's default stream."""
    return default_runtime().current_stream(device)


def synchronize(device: Optional[int] = None) -> None:
    """Waits for all work on every stream of the current device (or ``device``) and
    raises the first failure of queued work (:class:`DeviceError`). The GIL is released
    meanwhile; a Ctrl-C raises ``KeyboardInterrupt`` when the wait ends."""
    default_runtime().synchronize(device)


def get_device_count() -> int:
    """Visible devices of the default runtime."""
    return default_runtime().get_device_count()


def set_device(device: int) -> None:
    """Makes ``device`` this thread's current device (tensors, streams and events default
    to it)."""
    default_runtime().set_device(device)


def get_device() -> int:
    """This thread's current device."""
    return default_runtime().get_device()


def supports_zero_copy(device: Optional[int] = None) -> bool:
    """True when the device shares host memory, so ``Tensor.as_numpy()`` and DLPack share
    the tensor's memory (the CPU backend)."""
    return default_runtime().supports_zero_copy(device)


def asarray(ndarray: Any, device: Optional[int] = None) -> Tensor:
    """A tensor holding a copy of ``ndarray`` (float64 becomes float32, bool uint8) on
    ``device`` (default: the current device), in one call."""
    return default_runtime().asarray(ndarray, device)


def from_dlpack(obj: Any) -> Tensor:
    """A tensor from a DLPack producer: an ``npurt.Tensor`` comes back as itself; anything
    else (a NumPy array, a CPU torch tensor) is copied into a new tensor."""
    return default_runtime().from_dlpack(obj)


def empty(shape: ShapeLike, dtype: Any = np.float32, device: Optional[int] = None) -> Tensor:
    """An uninitialised tensor from the pool (as ``Tensor(shape, dtype, device)``)."""
    return default_runtime().empty(shape, dtype, device)


def zeros(shape: ShapeLike, dtype: Any = np.float32, device: Optional[int] = None) -> Tensor:
    """A zero-filled tensor."""
    return default_runtime().zeros(shape, dtype, device)


def get_memory_info(device: Optional[int] = None) -> MemoryInfo:
    """Memory figures of the current device (MB = MiB): ``total_mb`` (device memory),
    ``used_mb`` (held by live tensors), ``pool_mb`` (held by the pool), ``system_mb``
    (obtained from the system, large allocations included), and every pool statistic."""
    return default_runtime().get_memory_info(device)


def get_hardware_utilization() -> HardwareUtilization:
    """Cube, Vector and memory-bandwidth utilisation (``.cube_percent``,
    ``.vector_percent``, ``.memory_bandwidth_percent``) over the timed work since the
    runtime was made or since :func:`reset_hardware_utilization`, with per-unit detail
    (``.units``) and how the figures were obtained (``.method``)."""
    return default_runtime().get_hardware_utilization()


def reset_hardware_utilization() -> None:
    """Clears the utilisation counters."""
    default_runtime().reset_hardware_utilization()


def release_cached(device: Optional[int] = None) -> float:
    """Returns cached pool memory to the system; the MiB released."""
    return default_runtime().release_cached(device)


def set_optimization_config(config: Dict[str, Any]) -> None:
    """Sets the optimisation switches: ``memory_pool``, ``memory_reuse``,
    ``parallel_scheduling`` (bools) and ``hardware_mapping`` (``"default"``: generic
    kernels, no fusion; ``"optimized"``: the best implementation and unit per op, fusion
    on). Unknown keys raise ``ValueError``. Needs a new runtime: applies to tensors
    created afterwards."""
    default_runtime().set_optimization_config(config)


def set_memory_pool_size(mb: float) -> None:
    """Caps the memory pool at ``mb`` MiB per device. Needs a new runtime: applies to
    tensors created afterwards."""
    default_runtime().set_memory_pool_size(mb)


def set_memory_reuse(enabled: bool = True, strategy: Optional[str] = None) -> None:
    """Turns memory reuse (pool cache, graph arenas) on or off; ``strategy`` is
    ``"aggressive"`` (best fit), ``"conservative"`` (first fit), the pool's own
    ``"best_fit"``/``"first_fit"``, or a planner ordering (``"greedy-by-size"``,
    ``"by-first-use"``, ``"by-lifetime"``, ``"alternate-ends"``: the planner tries all and
    keeps the smallest arena). Needs a new runtime: applies to tensors created
    afterwards."""
    default_runtime().set_memory_reuse(enabled, strategy)


def set_memory_alignment(bytes: int) -> None:  # noqa: A002 - the issue's keyword
    """Aligns every block to ``bytes`` (a power of two in 16..65536). Needs a new runtime:
    applies to tensors created afterwards."""
    default_runtime().set_memory_alignment(bytes)


def set_max_streams(count: int) -> None:
    """At most ``count`` user streams per device (also the graph scheduler's bound). Needs
    a new runtime: applies to streams and tensors created afterwards."""
    default_runtime().set_max_streams(count)


def set_scheduling_strategy(strategy: str) -> None:
    """Graph scheduling: ``"latency"``, ``"throughput"`` or ``"balanced"``. Applies to
    graphs compiled afterwards (the runtime is kept)."""
    default_runtime().set_scheduling_strategy(strategy)


def set_batch_size(size: int) -> None:
    """The default batch of models made afterwards (``size`` in 1..65536): the texts per
    forward pass of an :class:`Embedder` made without ``batch_size``, and the ``batch`` of
    a :func:`bert` graph made without ``batch``. Models made before keep their batch; the
    runtime is kept (tensors and streams are unaffected)."""
    default_runtime().set_batch_size(size)


def set_hardware_mapping_strategy(strategy: str) -> None:
    """Kernel preference: ``"auto"``, ``"cube_prefer"`` or ``"vector_prefer"``. Needs a
    new runtime: applies to tensors created afterwards."""
    default_runtime().set_hardware_mapping_strategy(strategy)


def set_compute_unit_utilization(cube: float = 1.0, vector: float = 1.0) -> None:
    """Caps the compute the runtime uses, as fractions in (0, 1].

    * CPU backend: the cores have no separate Cube and Vector units, so the two fractions
      are not applied separately: ``max(cube, vector)`` × the cores this process may run
      on (rounded, at least 1) becomes each device's worker-thread count; 1.0 for both
      means all cores.
    * Ascend and CUDA backends: no effect on the device (the runtime cannot reserve a
      share of the AI Cores or SMs); a fraction below 1 there warns
      (``RuntimeWarning``) and is only recorded.

    Needs a new runtime: applies to tensors created afterwards.
    """
    default_runtime().set_compute_unit_utilization(cube, vector)


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
