"""``npurt.Tensor``: device memory from the runtime's pool, with NumPy and DLPack."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._default import default_runtime
from ._dtypes import numpy_dtype, runtime_name, typestr
from ._errors import Error, ValidationError

if TYPE_CHECKING:
    from ._runtime import Runtime

ShapeLike = Union[int, Sequence[int]]


def _shape(shape: ShapeLike) -> Tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        dims = tuple(int(d) for d in shape)  # type: ignore[union-attr]
    except TypeError:
        raise ValidationError(f"Tensor: shape must be a sequence of integers, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValidationError(f"Tensor: shape {dims} has a negative dimension")
    return dims


class _HostView:
    """Holds a tensor while a NumPy view of its memory exists (the view's ``base``)."""

    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, tensor: "Tensor", interface: dict) -> None:
        self.tensor = tensor
        self.__array_interface__ = interface


class Tensor:
    """A tensor in device memory, allocated from the runtime's memory pool.

    ``Tensor(shape, dtype=np.float32, device=None)`` allocates an uninitialised tensor on
    ``device`` (default: the current device, :func:`npurt.set_device`) of the default
    runtime (``runtime=`` names another :class:`npurt.Runtime`). Inside a
    :func:`npurt.stream_scope` the memory is allocated for the scope's stream.

    Memory returns to the pool when the last reference (including NumPy views from
    :meth:`as_numpy` and DLPack consumers) goes away and the work queued on it is done.
    """

    __slots__ = ("_t", "_owner", "__weakref__")

    _t: Any
    _owner: "Runtime"

    def __init__(self, shape: ShapeLike, dtype: Any = np.float32, device: Optional[int] = None, *,
                 runtime: Optional["Runtime"] = None) -> None:
        rt = runtime if runtime is not None else default_runtime()
        made = rt.empty(shape, dtype, device)
        self._t = made._t
        self._owner = rt

    @classmethod
    def _wrap(cls, native: Any, owner: "Runtime") -> "Tensor":
        t = cls.__new__(cls)
        t._t = native
        t._owner = owner
        return t

    # ---- description ----

    @property
    def shape(self) -> Tuple[int, ...]:
        """The dimensions."""
        return tuple(self._t.shape)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._t.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(self._t.numel)

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype (a bf16 tensor reads and writes as float32; see :attr:`dtype_name`)."""
        return numpy_dtype(self._t.dtype)

    @property
    def dtype_name(self) -> str:
        """The runtime's dtype name: ``f32``, ``f16``, ``bf16``, ``i32``, ``i64`` or ``u8``."""
        return str(self._t.dtype)

    @property
    def device(self) -> int:
        """The device index within the tensor's runtime."""
        return int(self._t.device)

    @property
    def device_label(self) -> str:
        """``backend:index``, e.g. ``cpu:0``."""
        return str(self._t.device_label)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements."""
        return int(self._t.nbytes)

    def data_ptr(self) -> int:
        """Address of the first element in the device's address space (aligned to the
        pool's alignment, 64 bytes unless :func:`npurt.set_memory_alignment` says otherwise)."""
        return int(self._t.data_ptr())

    def supports_zero_copy(self) -> bool:
        """True when the device shares host memory, so :meth:`as_numpy` and DLPack work."""
        return bool(self._t.supports_zero_copy())

    def is_contiguous(self) -> bool:
        """True when the elements are dense in row-major order."""
        return bool(self._t.is_contiguous())

    # ---- host data ----

    def from_numpy(self, arr: Any) -> "Tensor":
        """Copies ``arr`` into the tensor; its shape and dtype must be the tensor's (a bf16
        tensor takes float32). Returns the tensor."""
        a = np.asarray(arr)
        want = self.dtype
        if tuple(a.shape) != self.shape:
            raise ValidationError(f"from_numpy: array shape {tuple(a.shape)} does not match the tensor's {self.shape}",
                                  op="from_numpy")
        if a.dtype != want and not (a.dtype == np.bool_ and want == np.uint8):
            raise ValidationError(f"from_numpy: array dtype {a.dtype} does not match the tensor's {want}"
                                  f" (convert with arr.astype(np.{want.name}))", op="from_numpy")
        if a.dtype == np.bool_:
            a = a.astype(np.uint8)
        # Not np.ascontiguousarray: it makes a 0-d array 1-d.
        self._t.copy_from(np.asarray(a, order="C"))
        return self

    def to_numpy(self) -> np.ndarray:
        """A NumPy copy of the tensor (waits for queued work on it first)."""
        return self._t.to_numpy()

    def numpy(self) -> np.ndarray:
        """Same as :meth:`to_numpy`."""
        return self.to_numpy()

    def as_numpy(self) -> np.ndarray:
        """A NumPy view of the tensor's own memory (no copy).

        Only where :meth:`supports_zero_copy` is true (the CPU backend); raises
        :class:`npurt.Error` otherwise. Waits for queued work on the tensor first. Writes
        through the view change the tensor; the tensor's memory stays allocated while the
        view (or any array derived from it) exists.
        """
        if not self.supports_zero_copy():
            raise Error(f"as_numpy: {self.device_label} does not share memory with the host; use to_numpy() (a copy)")
        if self.dtype_name == "bf16":
            raise Error("as_numpy: NumPy has no bfloat16 dtype; use to_numpy() (a float32 copy)")
        addr, strides = self._t.host_view()
        iface = {
            "version": 3,
            "shape": self.shape,
            "typestr": typestr(self.dtype_name),
            "data": (addr, False),
            "strides": tuple(strides),
        }
        return np.asarray(_HostView(self, iface))

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """NumPy conversion (``np.asarray(t)``, NumPy 2's ``copy=`` protocol).

        ``copy=None`` or ``True``: a copy (:meth:`to_numpy`). ``copy=False``: the zero-copy
        view of :meth:`as_numpy`; where no view is possible (a device without shared
        memory, a bf16 tensor, a ``dtype`` other than the tensor's) it raises
        :class:`npurt.ValidationError`, a ``ValueError`` as NumPy's protocol asks.
        """
        if copy is False:
            if not self.supports_zero_copy():
                raise ValidationError(f"__array__(copy=False): {self.device_label} does not share memory with the "
                                      "host, so no view without a copy exists; use to_numpy()", op="__array__")
            if self.dtype_name == "bf16":
                raise ValidationError("__array__(copy=False): NumPy has no bfloat16 dtype, so a bf16 tensor has no "
                                      "view; use to_numpy() (a float32 copy)", op="__array__")
            if dtype is not None and np.dtype(dtype) != self.dtype:
                raise ValidationError(f"__array__(copy=False): a {self.dtype} tensor viewed as {np.dtype(dtype)} "
                                      "needs a copy", op="__array__")
            return self.as_numpy()
        a = self.to_numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            a = a.astype(dtype)
        return a

    # ---- DLPack ----

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None) -> Any:
        """A DLPack capsule sharing the tensor's memory (CPU backend only), so
        ``np.from_dlpack(t)`` and ``torch.from_dlpack(t)`` alias it."""
        if not self.supports_zero_copy():
            raise BufferError(f"{self.device_label} memory cannot be shared through DLPack; use to_numpy()")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        src = self.copy() if copy else self
        return src._t.dlpack(versioned)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(kDLCPU, 0)`` for host-shared memory."""
        if not self.supports_zero_copy():
            raise BufferError(f"{self.device_label} memory cannot be shared through DLPack")
        return (int(_native.DLPACK_DEVICE_CPU), 0)

    # ---- derived tensors ----

    def to(self, device: int) -> "Tensor":
        """A copy on ``device`` (the tensor itself when it is already there)."""
        if int(device) == self.device:
            return self
        return self._owner.to_device(self, int(device))

    def copy(self) -> "Tensor":
        """A new tensor with the same values on the same device."""
        return self._owner.execute("Copy", [self]).outputs[0]

    def reshape(self, *shape: Any) -> "Tensor":
        """A view with a new shape (one entry may be -1); shares memory."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return Tensor._wrap(self._t.reshape([int(d) for d in shape]), self._owner)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        dt = "bfloat16" if self.dtype_name == "bf16" else self.dtype.name
        return (f"npurt.Tensor(shape={self.shape}, dtype={dt}, device={self.device_label}, "
                f"nbytes={self.nbytes}, data_ptr={self.data_ptr():#x})")
