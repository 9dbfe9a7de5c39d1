"""The exception hierarchy and what the errors carry."""

from __future__ import annotations

import numpy as np
import pytest

import npurt


def test_hierarchy() -> None:
    assert issubclass(npurt.ValidationError, npurt.Error) and issubclass(npurt.ValidationError, ValueError)
    assert issubclass(npurt.OutOfMemoryError, npurt.Error) and issubclass(npurt.OutOfMemoryError, MemoryError)
    assert issubclass(npurt.DeviceError, npurt.Error)
    assert issubclass(npurt.BackendUnavailableError, npurt.Error)


def test_backend_unavailable() -> None:
    if "cuda" not in npurt.compiled_backends():
        pytest.skip("CUDA not compiled in")
    try:
        npurt.Runtime(backend="cuda", env=False)
    except npurt.BackendUnavailableError as e:
        assert str(e)
    else:
        pytest.skip("a CUDA device is present")


def test_out_of_memory() -> None:
    r = npurt.Runtime(backend="cpu", pool_size_mb=1, env=False)
    with pytest.raises(npurt.OutOfMemoryError) as e:
        r.Tensor((4 << 20,))
    assert "out of memory" in str(e.value)


def test_device_errors() -> None:
    r = npurt.Runtime(backend="cpu", env=False)
    with pytest.raises(npurt.ValidationError):
        r.set_device(3)
    with pytest.raises(npurt.ValidationError):
        r.Tensor((2, -1))
    with pytest.raises(npurt.ValidationError):
        r.Tensor((2,), dtype=np.complex64)


def test_events_of_other_runtimes() -> None:
    a = npurt.Runtime(backend="cpu", env=False)
    b = npurt.Runtime(backend="cpu", env=False)
    with pytest.raises(npurt.DeviceError):
        a.Event().record(b.Stream())
