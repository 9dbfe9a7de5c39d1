"""``npurt.Runtime``: one runtime over one backend, with the whole module API as methods.

The module-level functions (``npurt.execute``, ``npurt.Tensor``, ...) use a default
runtime made on first use (best backend present, ``NPURT_*`` environment honoured); an
engine that wants its own state makes a :class:`Runtime` and calls the same methods on it.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _config, _native
from ._attrs import _attr
from ._default import default_runtime, register_factory
from ._dtypes import runtime_name
from ._errors import OutOfMemoryError, ValidationError
from ._results import MIB, ExecutionResult, HardwareUtilization, MemoryInfo
from ._tensor import ShapeLike, Tensor, _shape

#: Settings read only when a graph is compiled: changing them keeps the runtime.
_COMPILE_ONLY = ("scheduling", "precision", "batch_size")

_CONFIG_KWARGS = {
    "memory_pool": lambda v: {"memory_pool": _config._bool("memory_pool", v)},
    "memory_reuse": lambda v: {"memory_reuse": _config._bool("memory_reuse", v)},
    "parallel_scheduling": lambda v: {"parallel_scheduling": _config._bool("parallel_scheduling", v)},
    "hardware_mapping": lambda v: _config.optimization({"hardware_mapping": v}),
    "pool_size_mb": _config.pool_size,
    "memory_reuse_strategy": lambda v: _config.reuse(True, v),
    "alignment": _config.alignment,
    "scheduling": _config.scheduling,
    "batch_size": _config.batch_size,
    "hardware_mapping_strategy": _config.hw_mapping,
    "threads": lambda v: {"threads": _config._int("threads", v, 1)},
    "cpu_devices": lambda v: {"cpu_devices": _config._int("cpu_devices", v, 1, 64)},
    "precision": lambda v: {"precision": _config.precision(v)},
    "impl": lambda v: {"impl": _config._choice("impl", v, ("auto", "fast", "generic", "reference"))},
}


class Stream:
    """A stream of the current device: asynchronous work in order.

    Ops executed inside ``with npurt.stream_scope(s):`` (or ``with s:``) are queued on
    ``s`` and return at once; :meth:`synchronize` waits for them and raises the first
    failure among them (:class:`npurt.DeviceError` naming the op and submission).
    """

    __slots__ = ("_s", "_owner")

    def __init__(self, device: Optional[int] = None, *, runtime: Optional["Runtime"] = None) -> None:
        rt = runtime if runtime is not None else default_runtime()
        self._owner = rt
        self._s = rt._rt().new_stream(rt._device(device))

    @classmethod
    def _wrap(cls, native: Any, owner: "Runtime") -> "Stream":
        s = cls.__new__(cls)
        s._s = native
        s._owner = owner
        return s

    @property
    def device(self) -> int:
        """The stream's device."""
        return int(self._s.device)

    @property
    def is_async(self) -> bool:
        """False for a device's default stream (synchronous)."""
        return bool(self._s.is_async)

    @property
    def label(self) -> str:
        """The stream's name, e.g. ``cpu:0/stream1`` (as ``ExecutionResult.stream``)."""
        return str(self._s.label)

    def synchronize(self) -> None:
        """Waits for the work queued on this stream (the GIL is released meanwhile)."""
        self._s.synchronize()

    def record_event(self) -> "Event":
        """A new event recorded at the current end of this stream."""
        return Event._wrap(self._s.record(), self._owner)

    def wait_event(self, event: "Event") -> None:
        """Makes later work on this stream wait for ``event``."""
        self._s.wait(event._e)

    def __enter__(self) -> "Stream":
        """As ``stream_scope(self)``: this thread's current stream, and its device the
        current device, until the block ends."""
        self._owner._enter(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._owner._exit(self)

    def __repr__(self) -> str:
        return f"npurt.Stream({self.label}, async={self.is_async})"


class Event:
    """A marker in a stream, for cross-stream waits and timing.

    ``start.record(); ...; end.record(); end.synchronize(); start.elapsed_ms(end)``.
    """

    __slots__ = ("_e", "_owner")

    def __init__(self, device: Optional[int] = None, *, runtime: Optional["Runtime"] = None) -> None:
        rt = runtime if runtime is not None else default_runtime()
        self._owner = rt
        self._e = rt._rt().event(rt._device(device))

    @classmethod
    def _wrap(cls, native: Any, owner: "Runtime") -> "Event":
        e = cls.__new__(cls)
        e._e = native
        e._owner = owner
        return e

    @property
    def device(self) -> int:
        """The event's device."""
        return int(self._e.device)

    def record(self, stream: Optional[Stream] = None) -> "Event":
        """Records the event at the end of ``stream`` (default: the current stream)."""
        s = stream if stream is not None else self._owner.current_stream(self.device)
        self._e.record(s._s)
        return self

    def wait(self, stream: Optional[Stream] = None) -> None:
        """Makes later work on ``stream`` (default: the current stream) wait for this event."""
        s = stream if stream is not None else self._owner.current_stream(self.device)
        s._s.wait(self._e)

    def query(self) -> bool:
        """True when the work before the record point has finished."""
        return bool(self._e.query())

    def synchronize(self) -> None:
        """Waits until the work before the record point has finished."""
        self._e.synchronize()

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        return float(self._e.elapsed_ms(end._e))

    def __repr__(self) -> str:
        return f"npurt.Event(device={self.device}, done={self.query()})"


class MemoryPool:
    """A budget of ``pool_size_mb`` MiB over the runtime's memory pool of one device.

    :meth:`allocate` hands out tensors from the device's caching pool (so they work with
    every op of the runtime) as long as the budget allows, else raises
    :class:`npurt.OutOfMemoryError`. ``used_mb`` counts the tensors handed out and still
    alive (rounded up to the pool's alignment); deleting a tensor gives its bytes back.
    Without ``pool_size_mb`` the budget is the pool's limit (the device's memory unless
    :func:`npurt.set_memory_pool_size` set one).
    """

    def __init__(self, pool_size_mb: Optional[float] = None, device: Optional[int] = None, *,
                 runtime: Optional["Runtime"] = None) -> None:
        self._owner = runtime if runtime is not None else default_runtime()
        self._device = self._owner._device(device)
        self._native = self._owner._rt()
        if pool_size_mb is None:
            limit = self._native.pool_stats(self._device)["limit_bytes"]
            self._total = int(limit) if limit else int(self._native.memory_info(self._device)["device_total_bytes"])
        else:
            self._total = _config.pool_size(pool_size_mb)["pool_limit_bytes"]
        self._align = int(self._native.memory_info(self._device)["alignment"])
        self._used = 0
        self._lock = threading.Lock()

    def _give_back(self, n: int) -> None:
        with self._lock:
            self._used -= n

    def allocate(self, shape: ShapeLike, dtype: Any = np.float32) -> Tensor:
        """A new uninitialised tensor from the pool."""
        dims = _shape(shape)
        name = runtime_name(dtype)
        n = int(np.prod(dims, dtype=np.int64)) * {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "u8": 1}[name]
        n = -(-n // self._align) * self._align
        with self._lock:
            if self._used + n > self._total:
                raise OutOfMemoryError(
                    f"MemoryPool: {n} bytes requested, {self._total - self._used} of {self._total} free")
            self._used += n
        try:
            t = Tensor._wrap(self._native.empty(name, list(dims), self._device, False,
                                                self._owner._stream_for(self._native.id, self._device)), self._owner)
        except BaseException:
            self._give_back(n)
            raise
        weakref.finalize(t, self._give_back, n)
        return t

    @property
    def total_mb(self) -> float:
        """The pool's size."""
        return self._total / MIB

    @property
    def used_mb(self) -> float:
        """Bytes handed out and not yet released."""
        with self._lock:
            return self._used / MIB

    @property
    def free_mb(self) -> float:
        """``total_mb - used_mb``."""
        return self.total_mb - self.used_mb

    def stats(self) -> Dict[str, Any]:
        """Every statistic of the device's pool, with this budget's ``total_mb``,
        ``used_mb`` and ``free_mb``."""
        s = dict(self._native.pool_stats(self._device))
        s.update(total_mb=self.total_mb, used_mb=self.used_mb, free_mb=self.free_mb)
        return s

    def release_cached(self) -> float:
        """Returns the pool's cached, unused memory to the system; the MiB released."""
        return self._native.release_cached(self._device) / MIB

    def __repr__(self) -> str:
        return f"npurt.MemoryPool(total_mb={self.total_mb:.3f}, used_mb={self.used_mb:.3f}, free_mb={self.free_mb:.3f})"


class Runtime:
    """A runtime over one backend, holding its own devices, pool, streams and settings.

    ``Runtime(backend=None, devices=None, **config)``: ``backend`` is ``"cpu"``,
    ``"cuda"``, ``"acl"`` (Ascend) or ``None`` (the best one present); ``devices`` the
    visible device indices. ``config`` keys: ``memory_pool``, ``memory_reuse``,
    ``parallel_scheduling`` (bools), ``hardware_mapping`` (``"default"`` or
    ``"optimized"``), ``pool_size_mb``, ``memory_reuse_strategy``, ``alignment``,
    ``max_streams``, ``scheduling``, ``batch_size``, ``hardware_mapping_strategy``,
    ``threads``, ``cpu_devices``, ``precision`` (the default of compiled graphs:
    ``"f32"``/``"fp32"``, ``"bf16"``, ``"f16"``/``"fp16"``/``"half"`` or ``"auto"``),
    ``impl`` (force a tier), ``cube_utilization`` and ``vector_utilization`` (as
    :meth:`set_compute_unit_utilization`) and ``env`` (default True: ``NPURT_*``
    variables first, then these).

    Every method of the module API exists here with the same name and arguments. Raises
    :class:`npurt.BackendUnavailableError` when the backend cannot be opened.
    """

    def __init__(self, backend: Optional[str] = None, devices: Optional[Sequence[int]] = None, **config: Any) -> None:
        self._env = bool(config.pop("env", True))
        self._settings: Dict[str, Any] = {}
        if backend is not None:
            self._settings["backend"] = _config._choice("backend", backend, ("auto", "cpu", "cuda", "acl", "ascend"))
        if devices is not None:
            self._settings["devices"] = [_config._int("device", d, 0) for d in devices]
        max_streams = config.pop("max_streams", None)
        cube = config.pop("cube_utilization", None)
        vector = config.pop("vector_utilization", None)
        for k, v in config.items():
            if k not in _CONFIG_KWARGS:
                raise ValidationError(f"Runtime: unknown setting {k!r}; known: backend, devices, env, max_streams, "
                                      f"cube_utilization, vector_utilization, {', '.join(_CONFIG_KWARGS)}")
            self._settings.update(_CONFIG_KWARGS[k](v))
        if max_streams is not None:
            self._settings.update(_config.max_streams(max_streams, _native.max_streams_bound()))
        if cube is not None or vector is not None:
            self._settings.update(_config.utilization(1.0 if cube is None else cube, 1.0 if vector is None else vector))
        self._lock = threading.RLock()
        self._local = threading.local()
        self._native: Any = _native.Runtime(self._native_settings(), self._env)

    # ---- internals ----

    def _native_settings(self, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        s = dict(self._settings)
        if extra:
            s.update(extra)
        return {k: v for k, v in s.items() if not k.startswith("_")}

    def _rt(self) -> Any:
        """The native runtime new tensors go to (made anew after a setting changed)."""
        n = self._native
        if n is None:
            with self._lock:
                if self._native is None:
                    self._native = _native.Runtime(self._native_settings(), self._env)
                n = self._native
        return n

    def _apply(self, change: Dict[str, Any]) -> None:
        """Validates ``change`` as the runtime would, then keeps it; settings other than the
        compile-only ones make a new runtime for what is created afterwards."""
        _native.validate_config(self._native_settings(change), self._env)
        with self._lock:
            self._settings.update(change)
            if any(k not in _COMPILE_ONLY for k in change):
                self._native = None

    def _device(self, device: Optional[int]) -> int:
        if device is None:
            return int(getattr(self._local, "device", 0))
        d = _config._int("device", device, 0)
        n = self.get_device_count()
        if d >= n:
            raise ValidationError(f"device {d} does not exist ({n} device(s))")
        return d

    def _stack(self) -> List[Stream]:
        st = getattr(self._local, "streams", None)
        if st is None:
            st = self._local.streams = []
        return st

    def _enter(self, s: Stream) -> None:
        """Makes ``s`` this thread's current stream and its device the current device,
        remembering the device to restore."""
        self._stack().append(s)
        self._prev_devices().append(getattr(self._local, "device", None))
        self._local.device = s.device

    def _exit(self, s: Stream) -> None:
        """Leaves the innermost scope of ``s``: the stream and the device current before it
        come back."""
        st = self._stack()
        prev = self._prev_devices()
        for i in range(len(st) - 1, -1, -1):
            if st[i] is s:
                del st[i]
                device = prev.pop(i)
                if device is None:
                    try:
                        del self._local.device
                    except AttributeError:
                        pass
                else:
                    self._local.device = device
                return

    def _prev_devices(self) -> List[Optional[int]]:
        pd = getattr(self._local, "prev_devices", None)
        if pd is None:
            pd = self._local.prev_devices = []
        return pd

    def _stream_for(self, runtime_id: int, device: int) -> Any:
        """The innermost scoped stream of this thread for that runtime and device."""
        for s in reversed(self._stack()):
            if s._s.runtime_id == runtime_id and s.device == device:
                return s._s
        return None

    @staticmethod
    def _output(o: Any) -> Any:
        if o is None:
            return None
        if not isinstance(o, Tensor):
            raise ValidationError(f"outputs must be npurt.Tensor objects (written in place), got {type(o).__name__}")
        return o._t

    def _tensor(self, x: Any, device: Optional[int] = None) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if isinstance(x, np.ndarray) or np.isscalar(x):
            return self.asarray(np.asarray(x), device)
        raise ValidationError(f"expected an npurt.Tensor or a NumPy array, got {type(x).__name__}")

    # ---- devices ----

    @property
    def backend(self) -> str:
        """The backend's name: ``cpu``, ``cuda`` or ``acl``."""
        return str(self._rt().backend)

    def get_device_count(self) -> int:
        """Visible devices of the runtime."""
        return int(self._rt().device_count())

    def set_device(self, device: int) -> None:
        """Makes ``device`` this thread's current device (tensors, streams and events
        default to it)."""
        self._local.device = self._device(device)

    def get_device(self) -> int:
        """This thread's current device."""
        return self._device(None)

    def device_name(self, device: Optional[int] = None) -> str:
        """The device's name, e.g. the CPU model or ``Ascend910B2``."""
        return str(self._rt().device_name(self._device(device)))

    def supports_zero_copy(self, device: Optional[int] = None) -> bool:
        """True when the device shares host memory (NumPy views and DLPack work)."""
        return bool(self._rt().supports_zero_copy(self._device(device)))

    def config(self) -> Dict[str, Any]:
        """The effective configuration of the runtime new tensors go to."""
        c = dict(self._rt().config())
        c.update({k: v for k, v in self._settings.items() if k in _COMPILE_ONLY})
        return c

    # ---- tensors ----

    def empty(self, shape: ShapeLike, dtype: Any = np.float32, device: Optional[int] = None) -> Tensor:
        """An uninitialised tensor from the pool (as ``Tensor(shape, dtype, device)``)."""
        n = self._rt()
        d = self._device(device)
        return Tensor._wrap(n.empty(runtime_name(dtype), list(_shape(shape)), d, False, self._stream_for(n.id, d)), self)

    def zeros(self, shape: ShapeLike, dtype: Any = np.float32, device: Optional[int] = None) -> Tensor:
        """A zero-filled tensor."""
        n = self._rt()
        d = self._device(device)
        return Tensor._wrap(n.empty(runtime_name(dtype), list(_shape(shape)), d, True, None), self)

    def Tensor(self, shape: ShapeLike, dtype: Any = np.float32, device: Optional[int] = None) -> Tensor:
        """``npurt.Tensor(shape, dtype, device)`` on this runtime."""
        return self.empty(shape, dtype, device)

    def asarray(self, ndarray: Any, device: Optional[int] = None) -> Tensor:
        """A tensor holding a copy of ``ndarray`` (a NumPy array or anything
        ``np.asarray`` takes; float64 becomes float32, bool uint8) on ``device`` (default:
        the current device). An ``npurt.Tensor`` comes back as itself, or copied to
        ``device``."""
        if isinstance(ndarray, Tensor):
            return ndarray if device is None or ndarray.device == device else ndarray.to(device)
        a = np.asarray(ndarray)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        elif a.dtype == np.bool_:
            a = a.astype(np.uint8)
        t = self.empty(a.shape, a.dtype, device)
        t.from_numpy(a)
        return t

    def from_dlpack(self, obj: Any) -> Tensor:
        """A tensor from a DLPack producer: an ``npurt.Tensor`` comes back as itself;
        anything else (a NumPy array, a CPU torch tensor) is copied into a new tensor."""
        if isinstance(obj, Tensor):
            return obj
        return self.asarray(np.from_dlpack(obj))

    def to_device(self, tensor: Tensor, device: int) -> Tensor:
        """A copy of ``tensor`` on ``device``."""
        n = tensor._t.runtime()
        return Tensor._wrap(n.to_device(tensor._t, self._device(device)), self)

    # ---- execution ----

    def execute(self, op_type: str, inputs: Union[Tensor, Sequence[Any]], outputs: Optional[Sequence[Optional[Tensor]]] = None,
                **attrs: Any) -> ExecutionResult:
        """Runs one op of the op table.

        Args:
            op_type: the op's name, case-insensitive; ONNX spellings are accepted
                (``"MatMul"``, ``"Relu"``/``"ReLU"``, ``"Add"``, ``"Mul"``, ``"Gelu"``,
                ``"Softmax"``, ``"LayerNorm"``, ``"Transpose"``, ``"Gather"``, ...).
            inputs: tensors (NumPy arrays are copied to the current device first).
            outputs: tensors to write in place (shape and dtype are checked); omitted
                ones (or ``None`` entries) are allocated and returned.
            **attrs: the op's attributes, e.g. ``trans_b=True``, ``axis=-1``,
                ``eps=1e-5``, ``perm=(1, 0)``, ``to=np.float16``.

        Returns an :class:`ExecutionResult` (``.selected_implementation``, ``.tier``,
        ``.device``, ``.execution_time_ms``, ``.hardware_unit``, ``.unit``, ``.flops``,
        ``.bytes``, ``.outputs``). Synchronous on the default stream; inside a
        :func:`stream_scope` it is queued and returns at once.

        Raises :class:`npurt.ValidationError` (a ``ValueError``) for operands or
        attributes the op rejects, with the runtime's message.
        """
        if isinstance(inputs, (Tensor, np.ndarray)):
            inputs = [inputs]
        ins = [self._tensor(x) for x in inputs]
        if not ins:
            raise ValidationError(f"{op_type}: at least one input is needed", op=str(op_type))
        given = None if outputs is None else [self._output(o) for o in outputs]
        first = ins[0]._t
        stream = self._stream_for(first.runtime_id, first.device)
        report, outs = _native.execute(str(op_type), [t._t for t in ins], given, [(k, _attr(v)) for k, v in attrs.items()],
                                       stream)
        return ExecutionResult(report, self._outputs(outs, outputs))

    def _outputs(self, natives: List[Any], given: Optional[Sequence[Optional[Tensor]]]) -> List[Tensor]:
        res = []
        for i, n in enumerate(natives):
            g = given[i] if given is not None and i < len(given) else None
            res.append(g if isinstance(g, Tensor) else Tensor._wrap(n, self))
        return res

    def execute_batch(self, tasks: Sequence[Tuple[Any, ...]]) -> List[ExecutionResult]:
        """Validates every task, then submits them together (one submission) on the
        current stream. A task is ``(op_type, inputs)``, ``(op_type, inputs, outputs)`` or
        ``(op_type, inputs, outputs, attrs_dict)``; ``outputs`` may be ``None``. Nothing
        runs if any task is invalid."""
        specs = []
        givens = []
        for task in tasks:
            if not isinstance(task, (tuple, list)) or not 2 <= len(task) <= 4:
                raise ValidationError(f"execute_batch: a task is (op_type, inputs[, outputs[, attrs]]), got {task!r}")
            op_type, inputs = task[0], task[1]
            outputs = task[2] if len(task) > 2 else None
            attrs = task[3] if len(task) > 3 else {}
            if isinstance(inputs, (Tensor, np.ndarray)):
                inputs = [inputs]
            ins = [self._tensor(x)._t for x in inputs]
            given = None if outputs is None else [self._output(o) for o in outputs]
            specs.append((str(op_type), ins, given, [(k, _attr(v)) for k, v in dict(attrs).items()]))
            givens.append(outputs)
        if not specs:
            return []
        first = specs[0][1][0] if specs[0][1] else None
        stream = self._stream_for(first.runtime_id, first.device) if first is not None else None
        done = _native.execute_batch(specs, stream)
        return [ExecutionResult(rep, self._outputs(outs, g)) for (rep, outs), g in zip(done, givens)]

    # ---- streams and events ----

    def Stream(self, device: Optional[int] = None) -> Stream:
        """A new asynchronous stream on ``device`` (default: the current device)."""
        return Stream(device, runtime=self)

    def Event(self, device: Optional[int] = None) -> Event:
        """A new event on ``device`` (default: the current device)."""
        return Event(device, runtime=self)

    @contextlib.contextmanager
    def stream_scope(self, stream: Stream) -> Iterator[Stream]:
        """Makes ``stream`` this thread's current stream (and its device the current
        device) inside the ``with`` block. Scopes nest; the previous stream and device come
        back on exit, also on exceptions."""
        if not isinstance(stream, Stream):
            raise ValidationError(f"stream_scope takes an npurt.Stream, got {type(stream).__name__}")
        self._enter(stream)
        try:
            yield stream
        finally:
            self._exit(stream)

    def current_stream(self, device: Optional[int] = None) -> Stream:
        """This thread's current stream on ``device``: the innermost scoped one, else the
        device's default stream."""
        d = self._device(device)
        n = self._rt()
        for s in reversed(self._stack()):
            if s.device == d and s._s.runtime_id == n.id:
                return s
        return Stream._wrap(n.default_stream(d), self)

    def default_stream(self, device: Optional[int] = None) -> Stream:
        """The synchronous default stream of ``device``."""
        return Stream._wrap(self._rt().default_stream(self._device(device)), self)

    def synchronize(self, device: Optional[int] = None) -> None:
        """Waits for all work on every stream of the current device (or ``device``)."""
        self._rt().synchronize(self._device(device))

    # ---- memory ----

    def MemoryPool(self, pool_size_mb: Optional[float] = None, device: Optional[int] = None) -> MemoryPool:
        """A :class:`MemoryPool` of this runtime."""
        return MemoryPool(pool_size_mb, device, runtime=self)

    def get_memory_info(self, device: Optional[int] = None) -> MemoryInfo:
        """Memory figures of the current device (MiB): ``total_mb``, ``used_mb``,
        ``pool_mb``, ``system_mb``, and every pool statistic."""
        return MemoryInfo(dict(self._rt().memory_info(self._device(device))))

    def release_cached(self, device: Optional[int] = None) -> float:
        """Returns cached pool memory to the system; the MiB released."""
        return self._rt().release_cached(self._device(device)) / MIB

    def get_hardware_utilization(self) -> HardwareUtilization:
        """Cube, Vector and memory-bandwidth utilisation over the timed work since the
        runtime was made (or since :meth:`reset_hardware_utilization`), with per-unit
        detail. A new runtime (after a setting that needs one) starts from zero."""
        return HardwareUtilization([dict(u) for u in self._rt().utilisation()])

    def reset_hardware_utilization(self) -> None:
        """Clears the utilisation counters."""
        self._rt().reset_utilisation()

    # ---- configuration ----

    def set_optimization_config(self, config: Dict[str, Any]) -> None:
        """Sets the optimisation switches: ``memory_pool``, ``memory_reuse``,
        ``parallel_scheduling`` (bools) and ``hardware_mapping`` (``"default"``: generic
        kernels, no fusion; ``"optimized"``: the best implementation and unit per op,
        fusion on). Unknown keys raise ``ValueError``. Needs a new runtime: applies to
        tensors created afterwards."""
        self._apply(_config.optimization(config))

    def set_memory_pool_size(self, mb: float) -> None:
        """Caps the memory pool at ``mb`` MiB per device. Needs a new runtime: applies to
        tensors created afterwards."""
        self._apply(_config.pool_size(mb))

    def set_memory_reuse(self, enabled: bool = True, strategy: Optional[str] = None) -> None:
        """Turns memory reuse (pool cache, graph arenas) on or off; ``strategy`` is
        ``"aggressive"`` (best fit), ``"conservative"`` (first fit), the pool's own
        ``"best_fit"``/``"first_fit"``, or a planner ordering (``"greedy-by-size"``,
        ``"by-first-use"``, ``"by-lifetime"``, ``"alternate-ends"``: the planner tries all
        and keeps the smallest arena). Needs a new runtime: applies to tensors created
        afterwards."""
        self._apply(_config.reuse(enabled, strategy))

    def set_memory_alignment(self, bytes: int) -> None:  # noqa: A002 - the issue's keyword
        """Aligns every block to ``bytes`` (a power of two in 16..65536). Needs a new
        runtime: applies to tensors created afterwards."""
        self._apply(_config.alignment(bytes))

    def set_max_streams(self, count: int) -> None:
        """At most ``count`` user streams per device (also the graph scheduler's bound).
        Needs a new runtime: applies to streams and tensors created afterwards."""
        self._apply(_config.max_streams(count, _native.max_streams_bound()))

    def set_scheduling_strategy(self, strategy: str) -> None:
        """Graph scheduling: ``"latency"``, ``"throughput"`` or ``"balanced"``. Applies to
        graphs compiled afterwards (the runtime is kept)."""
        self._apply(_config.scheduling(strategy))

    def set_batch_size(self, size: int) -> None:
        """The default batch of models made afterwards (``size`` in 1..65536): the texts
        per forward pass of an :class:`npurt.Embedder` made without ``batch_size``, and the
        ``batch`` of a :func:`npurt.bert` graph made without ``batch``. Models made before
        keep their batch; the runtime is kept (tensors and streams are unaffected)."""
        self._apply(_config.batch_size(size))

    def get_batch_size(self) -> Optional[int]:
        """The batch size last set (by :meth:`set_batch_size` or ``Runtime(batch_size=)``),
        or ``None`` when none was: then ``bert`` uses 1 and ``Embedder`` 32."""
        v = self._settings.get("batch_size")
        return None if v is None else int(v)

    def set_hardware_mapping_strategy(self, strategy: str) -> None:
        """Kernel preference: ``"auto"``, ``"cube_prefer"`` or ``"vector_prefer"``. Needs a
        new runtime: applies to tensors created afterwards."""
        self._apply(_config.hw_mapping(strategy))

    def set_compute_unit_utilization(self, cube: float = 1.0, vector: float = 1.0) -> None:
        """Caps the compute the runtime uses, as fractions in (0, 1].

        * CPU backend: the cores have no separate Cube and Vector units, so the two
          fractions are not applied separately: ``max(cube, vector)`` × the cores this
          process may run on (rounded, at least 1) becomes each device's worker-thread
          count (the ``threads`` setting); 1.0 for both means all cores.
        * Ascend and CUDA backends: no effect on the device. Neither CANN's nor the CUDA
          driver's API, as the runtime uses them, can reserve a share of the AI Cores or
          SMs, so kernels still use the whole device; a fraction below 1 there warns
          (``RuntimeWarning``) and is only recorded.

        Both fractions are kept and returned by :meth:`get_compute_unit_utilization`.
        Needs a new runtime: applies to tensors created afterwards.
        """
        change = _config.utilization(cube, vector)
        if min(float(cube), float(vector)) < 1.0 and self.backend != "cpu":
            warnings.warn(f"set_compute_unit_utilization: the {self.backend} backend cannot cap its device's compute "
                          f"units; cube={cube}, vector={vector} are recorded only", RuntimeWarning, stacklevel=2)
        self._apply(change)

    def get_compute_unit_utilization(self) -> Tuple[float, float]:
        """The ``(cube, vector)`` fractions last set."""
        return (float(self._settings.get("_cube", 1.0)), float(self._settings.get("_vector", 1.0)))

    # ---- graphs and models ----

    def Graph(self) -> Any:
        """A new :class:`npurt.Graph` on this runtime."""
        from ._graph import Graph

        return Graph(runtime=self)

    def bert(self, preset_or_model_dir: str, batch: Optional[int] = None, seq: int = 128,
             precision: Optional[str] = None, device: Optional[int] = None, streams: Optional[int] = None) -> Any:
        """:func:`npurt.bert` on this runtime (``batch`` defaults to :meth:`set_batch_size`'s
        value, else 1)."""
        from ._graph import bert

        return bert(preset_or_model_dir, batch, seq, precision, device, streams=streams, runtime=self)

    def Embedder(self, model_dir: str, batch_size: Optional[int] = None, device: Optional[int] = None) -> Any:
        """:class:`npurt.Embedder` on this runtime (``batch_size`` defaults to
        :meth:`set_batch_size`'s value, else 32)."""
        from ._graph import Embedder

        return Embedder(model_dir, batch_size, device=device, runtime=self)

    def _compile_opts(self, precision: Optional[str], streams: Optional[int]) -> Dict[str, Any]:
        o: Dict[str, Any] = {}
        if "scheduling" in self._settings:
            o["scheduling"] = self._settings["scheduling"]
        p = precision if precision is not None else self._settings.get("precision")
        if p is not None:
            o["precision"] = _config.precision(p)
        if streams is not None:
            o["streams"] = _config._int("streams", streams, 1, _native.max_streams_bound())
        return o

    def __repr__(self) -> str:
        n = self._rt()
        return f"npurt.Runtime(backend={n.backend!r}, devices={n.device_count()})"


register_factory(Runtime)
