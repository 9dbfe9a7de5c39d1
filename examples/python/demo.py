"""The `npurt demo` walkthrough from Python, on the module API.

    pip install ./python
    python examples/python/demo.py            # best backend present
    NPURT_BACKEND=cpu python examples/python/demo.py
"""

from __future__ import annotations

import time

import numpy as np

import npurt as runtime

MIB = float(1 << 20)


def section(title: str) -> None:
    print(f"\n== {title}")


def random(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def main() -> None:
    print(f"npurt {runtime.__version__} demo on backend {runtime.backend()} ({runtime.get_device_count()} device(s))")

    section("1. MatMul 1024 x 1024 x 1024")
    a = runtime.Tensor((1024, 1024), dtype=np.float32); a.from_numpy(random((1024, 1024), 1))  # noqa: E702
    b = runtime.Tensor((1024, 1024), dtype=np.float32); b.from_numpy(random((1024, 1024), 2))  # noqa: E702
    c = runtime.Tensor((1024, 1024), dtype=np.float32)
    runtime.execute(op_type="MatMul", inputs=[a, b], outputs=[c])  # warm-up
    r = runtime.execute(op_type="MatMul", inputs=[a, b], outputs=[c])
    print(f"implementation: {r.selected_implementation} (tier {r.tier})")
    print(f"device: {r.device}, unit: {r.unit} ({r.hardware_unit})")
    print(f"time: {r.execution_time_ms:.3f} ms, {r.gflops or 0:.1f} GFLOP/s")

    section("2. Memory pool: free space before and after dropping a tensor")
    pool = runtime.MemoryPool(pool_size_mb=64)
    print(f"pool of {pool.total_mb:.0f} MiB: free {pool.free_mb:.2f} MiB")
    big = pool.allocate((1024, 1024))
    print(f"with a 4 MiB tensor: free {pool.free_mb:.2f} MiB, used {pool.used_mb:.2f} MiB")
    before = pool.stats()["system_allocations"]
    del big
    print(f"after dropping it: free {pool.free_mb:.2f} MiB")
    again = pool.allocate((1024, 1024))
    print(f"allocating the same size again: served from the cache = {pool.stats()['system_allocations'] == before}")
    del again

    section("3. Alignment of data_ptr")
    align = runtime.default_runtime().config()["alignment"]
    for name, t in (("a", a), ("b", b), ("c", c)):
        print(f"{name}: {t.data_ptr():#x}  aligned to {align} bytes: {t.data_ptr() % align == 0}")

    section("4. Two streams vs serial")
    xs = [runtime.asarray(random((384, 384), 10 + i)) for i in range(4)]
    outs = [runtime.Tensor((384, 384)) for _ in range(2)]
    reps = 8
    s = runtime.Stream()
    t0 = time.perf_counter()
    with runtime.stream_scope(s):
        for _ in range(reps):
            for i in range(2):
                runtime.execute("MatMul", [xs[2 * i], xs[2 * i + 1]], outputs=[outs[i]])
    s.synchronize()
    serial = time.perf_counter() - t0
    s1, s2 = runtime.Stream(), runtime.Stream()
    t0 = time.perf_counter()
    for _ in range(reps):
        with runtime.stream_scope(s1):
            runtime.execute("MatMul", [xs[0], xs[1]], outputs=[outs[0]])
        with runtime.stream_scope(s2):
            runtime.execute("MatMul", [xs[2], xs[3]], outputs=[outs[1]])
    runtime.synchronize()
    parallel = time.perf_counter() - t0
    print(f"{2 * reps} MatMuls [384, 384]: one stream {serial * 1e3:.2f} ms, two streams {parallel * 1e3:.2f} ms, "
          f"speed-up {serial / parallel:.2f}x")

    section("5. Hardware units")
    relu = runtime.execute("Relu", [runtime.asarray(random((256, 1024), 3))])
    print(f"MatMul -> {r.hardware_unit} ({r.unit}) via {r.selected_implementation}")
    print(f"ReLU   -> {relu.hardware_unit} ({relu.unit}) via {relu.selected_implementation}")

    section("6. Utilisation per unit")
    u = runtime.get_hardware_utilization()
    print(u)
    for d in u.units:
        print(f"  {d['device']} {d['unit']} ({d['unit_class']}): {d['launches']} launches, busy {d['busy_ms']:.3f} ms, "
              f"compute {100 * d['compute']:.1f}% of peak, bandwidth {100 * d['bandwidth']:.1f}% of peak")

    section("7. Validation")
    try:
        runtime.execute("MatMul", [a, runtime.Tensor((512, 512))])
        print("unexpected: the mismatched MatMul ran")
    except runtime.ValidationError as e:
        print(f"error (expected): {e}")

    section("8. Memory info")
    m = runtime.get_memory_info()
    print(f"device total {m.total_mb / 1024:.1f} GiB, used by tensors {m.used_mb:.2f} MiB, held by the pool "
          f"{m.pool_mb:.2f} MiB, obtained from the system {m.system_mb:.2f} MiB")
    print(m)

    section("9. Small vs large allocation path")
    st = runtime.get_memory_info()
    small = runtime.Tensor((1024,))
    mid = runtime.get_memory_info()
    large = runtime.Tensor((4096, 1024))
    after = runtime.get_memory_info()
    print(f"4 KiB tensor: system allocations +{mid.system_allocations - st.system_allocations}")
    print(f"16 MiB tensor: system allocations +{after.system_allocations - mid.system_allocations}, "
          f"direct-from-system bytes now {after.system_bytes / MIB:.1f} MiB")
    del small, large

    section("10. Submission: synchronous, asynchronous, batch")
    n = 200
    v = runtime.asarray(random((64, 64), 5))
    vo = [runtime.Tensor((64, 64)) for _ in range(n)]
    t0 = time.perf_counter()
    for o in vo:
        runtime.execute("Relu", [v], outputs=[o])
    sync_t = time.perf_counter() - t0
    s = runtime.Stream()
    t0 = time.perf_counter()
    with runtime.stream_scope(s):
        for o in vo:
            runtime.execute("Relu", [v], outputs=[o])
    submit_t = time.perf_counter() - t0
    s.synchronize()
    async_t = time.perf_counter() - t0
    t0 = time.perf_counter()
    with runtime.stream_scope(s):
        runtime.execute_batch([("Relu", [v], [o]) for o in vo])
    batch_submit = time.perf_counter() - t0
    s.synchronize()
    batch_t = time.perf_counter() - t0
    print(f"{n} ReLU [64, 64]:")
    print(f"  synchronous (default stream): {sync_t * 1e3:.3f} ms total, {sync_t * 1e6 / n:.2f} us/op")
    print(f"  asynchronous (user stream):   {submit_t * 1e3:.3f} ms to submit, {async_t * 1e3:.3f} ms to finish")
    print(f"  batch (one submission):       {batch_submit * 1e3:.3f} ms to submit, {batch_t * 1e3:.3f} ms to finish")

    section("11. Copy-back")
    host = c.to_numpy()
    expect = a.to_numpy() @ b.to_numpy()
    print(f"MatMul result copied back: allclose(rtol=1e-4, atol=1e-4) vs NumPy = "
          f"{np.allclose(host, expect, rtol=1e-4, atol=1e-4)} (max |diff| {np.abs(host - expect).max():.2e})")

    section("12. Zero-copy host access")
    print(f"supports_zero_copy: {runtime.supports_zero_copy()}")
    if c.supports_zero_copy():
        view = c.as_numpy()
        print(f"c[0, 0] read in place (no copy): {view[0, 0]:.6f} (copied: {host[0, 0]:.6f}); "
              f"same memory: {view.ctypes.data == c.data_ptr()}")
    print("\ndemo finished")


if __name__ == "__main__":
    main()
