"""Tensors: NumPy copies, zero-copy views, alignment, DLPack, devices."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import npurt


def test_from_numpy_checks_shape_and_dtype(rt: npurt.Runtime) -> None:
    t = rt.Tensor((2, 3))
    t.from_numpy(np.ones((2, 3), np.float32))
    with pytest.raises(npurt.ValidationError, match="shape"):
        t.from_numpy(np.ones((3, 2), np.float32))
    with pytest.raises(npurt.ValidationError, match="dtype"):
        t.from_numpy(np.ones((2, 3), np.float64))
    # Non-contiguous arrays are fine.
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2].T
    t = rt.Tensor(a.shape).from_numpy(a)
    np.testing.assert_array_equal(t.to_numpy(), a)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint8])
def test_round_trip(rt: npurt.Runtime, dtype) -> None:
    a = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    t = rt.asarray(a)
    assert t.dtype == np.dtype(dtype) and t.shape == (2, 3, 4) and t.nbytes == a.nbytes
    np.testing.assert_array_equal(t.to_numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_bf16_reads_and_writes_float32(rt: npurt.Runtime) -> None:
    t = rt.Tensor((3,), dtype="bfloat16")
    t.from_numpy(np.array([1.0, 2.5, -3.0], np.float32))
    assert t.dtype_name == "bf16"
    np.testing.assert_array_equal(t.to_numpy(), [1.0, 2.5, -3.0])


def test_zero_copy_view_aliases(rt: npurt.Runtime) -> None:
    assert rt.supports_zero_copy()
    t = rt.asarray(np.zeros((4, 4), np.float32))
    v = t.as_numpy()
    assert v.ctypes.data == t.data_ptr()
    v[1, 2] = 7
    assert t.to_numpy()[1, 2] == 7
    u = rt.asarray(np.full((4, 4), 3, np.float32))
    rt.execute("Scale", [u], outputs=[t], factor=2.0)
    assert v[1, 2] == 6
    assert np.asarray(t, copy=False).ctypes.data == t.data_ptr() if np.__version__ >= "2" else True


def test_view_keeps_memory_alive(rt: npurt.Runtime) -> None:
    t = rt.asarray(np.arange(1000, dtype=np.float32))
    v = t.as_numpy()
    del t
    gc.collect()
    # Allocations after the tensor's last reference went must not reuse its memory.
    others = [rt.asarray(np.full(1000, -1, np.float32)) for _ in range(8)]
    np.testing.assert_array_equal(v, np.arange(1000, dtype=np.float32))
    assert all(o.data_ptr() != v.ctypes.data for o in others)


def test_data_ptr_alignment(rt: npurt.Runtime) -> None:
    ptrs = [rt.Tensor((n,), dtype=np.uint8).data_ptr() for n in (1, 3, 17, 1000, 5000)]
    assert all(p % 64 == 0 for p in ptrs)
    r = npurt.Runtime(backend="cpu", alignment=4096, env=False)
    assert all(r.Tensor((n,)).data_ptr() % 4096 == 0 for n in (1, 100, 3000))


def test_dlpack_with_numpy(rt: npurt.Runtime) -> None:
    t = rt.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr()
    a[0, 0] = 42
    assert t.to_numpy()[0, 0] == 42
    # The other way: from_dlpack of a NumPy array copies into a new tensor.
    src = np.arange(4, dtype=np.int64)
    u = rt.from_dlpack(src)
    np.testing.assert_array_equal(u.to_numpy(), src)
    assert rt.from_dlpack(t) is t
    # An unconsumed capsule frees itself.
    cap = t.__dlpack__()
    del cap
    gc.collect()


def test_dlpack_with_torch(rt: npurt.Runtime) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the DLPack round trip with torch is skipped")
    t = rt.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    x = torch.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr()
    x[1, 1] = -5
    assert t.to_numpy()[1, 1] == -5
    back = rt.from_dlpack(torch.ones(3))
    np.testing.assert_array_equal(back.to_numpy(), [1, 1, 1])


def test_to_device_and_asarray_device(rt: npurt.Runtime) -> None:
    assert rt.get_device_count() == 2
    a = np.arange(5, dtype=np.float32)
    t = rt.asarray(a, device=1)
    assert t.device == 1 and t.device_label == "cpu:1"
    u = t.to(0)
    assert u.device == 0 and t.to(1) is t
    np.testing.assert_array_equal(u.to_numpy(), a)
    with pytest.raises(npurt.ValidationError):
        rt.asarray(a, device=5)


def test_set_device_is_per_thread(rt: npurt.Runtime) -> None:
    import threading

    rt.set_device(1)
    try:
        seen = []
        th = threading.Thread(target=lambda: seen.append(rt.get_device()))
        th.start()
        th.join()
        assert seen == [0] and rt.get_device() == 1
        assert rt.Tensor((2,)).device == 1
    finally:
        rt.set_device(0)


def test_repr_and_reshape(rt: npurt.Runtime) -> None:
    t = rt.asarray(np.arange(6, dtype=np.float32))
    assert "shape=(6,)" in repr(t) and "cpu:0" in repr(t)
    r = t.reshape(2, -1)
    assert r.shape == (2, 3)
    np.testing.assert_array_equal(r.to_numpy(), np.arange(6).reshape(2, 3))


def test_array_copy_false_without_a_view_is_a_value_error(rt: npurt.Runtime) -> None:
    t = rt.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    v = np.asarray(t, copy=False) if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else t.__array__(copy=False)
    v[0, 0] = 42
    assert t.to_numpy()[0, 0] == 42
    b = rt.Tensor((2, 3), dtype="bfloat16")
    b.from_numpy(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="copy") as e:
        b.__array__(copy=False)
    assert isinstance(e.value, npurt.Error)
    with pytest.raises(ValueError):
        t.__array__(dtype=np.float16, copy=False)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        with pytest.raises(ValueError):
            np.asarray(b, copy=False)
        with pytest.raises(ValueError):
            np.asarray(t, dtype=np.float64, copy=False)
    # Copies still work.
    np.testing.assert_array_equal(np.asarray(b), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(t.__array__(dtype=np.float64), t.to_numpy().astype(np.float64))
