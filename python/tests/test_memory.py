"""Memory pools, memory figures and utilisation."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import npurt


def test_memory_pool_budget(rt: npurt.Runtime) -> None:
    pool = rt.MemoryPool(pool_size_mb=4)
    assert pool.total_mb == 4 and pool.used_mb == 0 and pool.free_mb == 4
    t = pool.allocate((256, 256))
    assert isinstance(t, npurt.Tensor) and t.shape == (256, 256)
    assert pool.used_mb == pytest.approx(0.25) and pool.free_mb == pytest.approx(3.75)
    u = pool.allocate((1024,), dtype=np.int64)
    used = pool.used_mb
    del t
    gc.collect()
    assert pool.free_mb > 4 - used
    assert pool.used_mb == pytest.approx(8192 / (1 << 20))
    with pytest.raises(npurt.OutOfMemoryError) as e:
        pool.allocate((2048, 1024))
    assert isinstance(e.value, MemoryError)
    # Pool tensors work with every op.
    u.from_numpy(np.arange(1024, dtype=np.int64))
    assert rt.execute("Cast", [u], to="float32").output.to_numpy()[5] == 5.0
    s = pool.stats()
    for k in ("total_bytes", "in_use_bytes", "cached_bytes", "cache_hits", "allocations", "fragmentation",
              "total_mb", "used_mb", "free_mb"):
        assert k in s
    assert pool.release_cached() >= 0
    with pytest.raises(ValueError):
        rt.MemoryPool(pool_size_mb=-1)
    assert "free_mb" in repr(pool)


def test_module_memory_pool() -> None:
    p = npurt.MemoryPool(pool_size_mb=1)
    t = p.allocate((16,))
    assert p.used_mb > 0
    del t
    gc.collect()
    assert p.used_mb == 0


def test_memory_info(rt: npurt.Runtime) -> None:
    before = rt.get_memory_info()
    big = rt.Tensor((1 << 20,))  # 4 MiB: a large allocation from the system
    m = rt.get_memory_info()
    assert m.total_mb > 0
    assert m.used_mb >= before.used_mb + 4
    assert m.system_mb >= m.pool_mb and m.system_mb >= 4
    for k in ("in_use_bytes", "cached_bytes", "peak_in_use_bytes", "segments", "allocations", "limit_bytes"):
        assert hasattr(m, k)
    del big
    gc.collect()
    assert rt.get_memory_info().used_mb < m.used_mb
    assert rt.release_cached() >= 0


def test_hardware_utilization(rt: npurt.Runtime) -> None:
    rt.reset_hardware_utilization()
    assert rt.get_hardware_utilization().launches == 0
    a = rt.asarray(np.ones((128, 128), np.float32))
    for _ in range(3):
        rt.execute("MatMul", [a, a])
    rt.execute("Add", [a, a])
    u = rt.get_hardware_utilization()
    assert u.launches == 4
    assert 0 < u.cube_percent <= 100 and 0 <= u.vector_percent <= 100
    assert 0 <= u.memory_bandwidth_percent <= 100
    assert {d["unit_class"] for d in u.units} == {"cube", "vector"}
    assert u.method and all(d["method"] for d in u.units)
    rt.reset_hardware_utilization()
    assert rt.get_hardware_utilization().launches == 0
