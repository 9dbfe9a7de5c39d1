"""A script written against npurt's module API only; it runs unchanged on every backend.

``python portable_api.py`` checks every op against NumPy, in-place outputs, streams and
events, batched submission, memory figures, configuration setters and a compiled graph
against eager results, on whatever backend the default runtime picks (``NPURT_BACKEND``).
It prints one line per check and exits non-zero on the first failure. On an Ascend 910A
(f32 products computed in fp16) the matrix products compare at fp16 accuracy.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import npurt  # noqa: E402
from op_cases import cases, tolerance  # noqa: E402


def close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    err = np.max(np.abs(got - want) / (1.0 + np.abs(want))) if want.size else 0.0
    assert err <= tol, f"{what}: max relative error {err:.2e} > {tol:.0e}"


def main() -> int:
    name = npurt.default_runtime().device_name()
    fp16_products = "910A" in name
    print(f"backend {npurt.backend()} device {name} ({npurt.get_device_count()} device(s)); "
          f"f32 products in fp16: {fp16_products}")

    # Every op of the table against NumPy.
    for op, arrays, attrs, ref in cases():
        ins = [npurt.asarray(a) for a in arrays]
        r = npurt.execute(op, ins, **attrs)
        want = ref(*arrays)
        out = r.outputs[0].to_numpy()
        close(out, want, tolerance(op, out.dtype, fp16_products), op)
        assert r.hardware_unit in ("Cube", "Vector", "Scalar"), r.hardware_unit
        print(f"ok {op:12s} {r.selected_implementation} [{r.tier}] {r.hardware_unit}/{r.unit}")

    # In-place outputs.
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    x = npurt.asarray(a)
    out = npurt.Tensor((3, 4), dtype=np.float32)
    r = npurt.execute("ReLU", [x], outputs=[out])
    assert r.outputs[0] is out
    close(out.to_numpy(), np.maximum(a, 0), 0, "in-place ReLU")
    try:
        npurt.execute("Relu", [x], outputs=[npurt.Tensor((4, 3))])
        raise AssertionError("a wrong output shape was accepted")
    except npurt.ValidationError:
        pass
    print("ok in-place outputs")

    # Streams, scopes and events.
    s = npurt.Stream()
    start, end = npurt.Event(), npurt.Event()
    with npurt.stream_scope(s):
        start.record()
        r = npurt.execute("Mul", [x, x])
        end.record()
        assert r.execution_time_ms is None, "queued on a user stream"
    s.synchronize()
    assert end.query()
    assert start.elapsed_ms(end) >= 0
    close(r.outputs[0].to_numpy(), a * a, 0, "Mul on a stream")
    print("ok streams and events")

    # One batched submission.
    res = npurt.execute_batch([("Add", [x, x], None), ("Scale", [x], None, {"factor": 3.0})])
    close(res[0].outputs[0].to_numpy(), a + a, 0, "batch Add")
    close(res[1].outputs[0].to_numpy(), 3 * a, 1e-6, "batch Scale")
    print("ok execute_batch")

    # Memory figures and utilisation.
    m = npurt.get_memory_info()
    assert m.total_mb > 0 and m.used_mb > 0 and m.system_mb >= m.pool_mb >= 0, m
    u = npurt.get_hardware_utilization()
    assert u.units and 0 <= u.cube_percent <= 100, u
    print(f"ok {m}\nok {u}")

    # Zero copy where the device shares host memory; an error otherwise.
    if npurt.supports_zero_copy():
        v = x.as_numpy()
        v[0, 0] = 100
        assert x.to_numpy()[0, 0] == 100
        assert np.shares_memory(np.from_dlpack(x), v)
    else:
        try:
            x.as_numpy()
            raise AssertionError("as_numpy on a device without shared memory")
        except npurt.Error:
            pass
    print(f"ok zero copy: {npurt.supports_zero_copy()}")

    # A compiled graph against eager execution.
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    xs = rng.standard_normal((2, 8)).astype(np.float32)
    g = npurt.Graph()
    gi = g.input("x", (2, 8))
    gw = g.constant("w", w)
    g.output(g.node("Softmax", [g.node("Relu", [g.node("MatMul", [gi, gw])])], axis=-1))
    cg = g.compile()
    got = cg.run([xs])[0].to_numpy()
    eager = npurt.execute("Softmax", [npurt.execute("Relu", [npurt.execute("MatMul", [npurt.asarray(xs), npurt.asarray(w)]).output]).output], axis=-1).output
    close(got, eager.to_numpy(), tolerance("MatMul", np.dtype(np.float32), fp16_products), "graph vs eager")
    print(f"ok compiled graph, {cg.memory_plan}")

    # Configuration setters (then back to the defaults).
    npurt.set_memory_alignment(bytes=256)
    t = npurt.Tensor((5,))
    assert t.data_ptr() % 256 == 0
    npurt.set_memory_alignment(bytes=64)
    try:
        npurt.set_memory_alignment(bytes=100)
        raise AssertionError("alignment 100 accepted")
    except ValueError:
        pass
    print("ok setters")
    print("PORTABLE API OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
