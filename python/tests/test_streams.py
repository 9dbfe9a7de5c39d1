"""Streams, scopes, events, batched submission and Python threads on streams."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import npurt


def test_scope_nests_and_restores(rt: npurt.Runtime) -> None:
    s1, s2 = rt.Stream(), rt.Stream()
    assert not rt.current_stream().is_async
    with rt.stream_scope(s1):
        assert rt.current_stream() is s1
        with rt.stream_scope(s2):
            assert rt.current_stream() is s2
        assert rt.current_stream() is s1
        with pytest.raises(RuntimeError):
            with rt.stream_scope(s2):
                raise RuntimeError("inside")
        assert rt.current_stream() is s1
    assert not rt.current_stream().is_async
    with s1:
        assert rt.current_stream() is s1


def test_scope_is_per_thread(rt: npurt.Runtime) -> None:
    s = rt.Stream()
    seen = []
    with rt.stream_scope(s):
        th = threading.Thread(target=lambda: seen.append(rt.current_stream().is_async))
        th.start()
        th.join()
    assert seen == [False]


def test_async_inside_scope_and_events(rt: npurt.Runtime) -> None:
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    x = rt.asarray(a)
    s = rt.Stream()
    start, end = rt.Event(), rt.Event()
    with rt.stream_scope(s):
        start.record()
        r = rt.execute("MatMul", [x, x])
        end.record()
    assert r.execution_time_ms is None and r.stream == s.label
    end.synchronize()
    assert end.query() and start.elapsed_ms(end) >= 0
    s.synchronize()
    np.testing.assert_allclose(r.output.to_numpy(), a @ a, rtol=1e-4, atol=1e-3)
    # Cross-stream order through an event.
    s2 = rt.Stream()
    with rt.stream_scope(s):
        y = rt.execute("Scale", [x], factor=2.0).output
        ev = s.record_event()
    s2.wait_event(ev)
    with rt.stream_scope(s2):
        z = rt.execute("Add", [y, y]).output
    rt.synchronize()
    np.testing.assert_allclose(z.to_numpy(), 4 * a, rtol=1e-6)
    assert rt.default_stream().is_async is False


def test_execute_batch(rt: npurt.Runtime) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    x = rt.asarray(a)
    out = rt.Tensor((2, 4))
    res = rt.execute_batch([("Add", [x, x], [out]), ("Relu", [x], None), ("Scale", [x], None, {"factor": 0.5})])
    assert len(res) == 3 and res[0].outputs[0] is out
    np.testing.assert_array_equal(out.to_numpy(), 2 * a)
    np.testing.assert_array_equal(res[2].output.to_numpy(), 0.5 * a)
    seqs = [r.submission for r in res]
    assert seqs == sorted(seqs)
    # Nothing runs if a task is invalid.
    with pytest.raises(npurt.ValidationError):
        rt.execute_batch([("Relu", [x], [out]), ("MatMul", [x, x], None)])
    assert rt.execute_batch([]) == []


def test_four_threads_on_four_streams_give_serial_results(rt: npurt.Runtime) -> None:
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((96, 96)).astype(np.float32) for _ in range(4)]

    def work(a: np.ndarray) -> np.ndarray:
        x = rt.asarray(a)
        for _ in range(5):
            x = rt.execute("Softmax", [rt.execute("MatMul", [x, x]).output], axis=-1).output
        return x.to_numpy()

    serial = [work(a) for a in inputs]
    results: list = [None] * 4
    errors: list = []

    def thread(i: int) -> None:
        try:
            s = rt.Stream()
            with rt.stream_scope(s):
                x = rt.asarray(inputs[i])
                for _ in range(5):
                    x = rt.execute("Softmax", [rt.execute("MatMul", [x, x]).output], axis=-1).output
            s.synchronize()
            results[i] = x.to_numpy()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=thread, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)


def test_with_stream_sets_the_current_device_like_stream_scope(rt: npurt.Runtime) -> None:
    assert rt.get_device_count() >= 2
    s1 = rt.Stream(device=1)
    assert rt.get_device() == 0
    with s1:
        assert rt.get_device() == 1 and rt.current_stream() is s1
        t = rt.Tensor((4,))
        assert t.device == 1
        with rt.stream_scope(rt.Stream(device=0)):
            assert rt.get_device() == 0
        assert rt.get_device() == 1
    assert rt.get_device() == 0 and not rt.current_stream().is_async
    # Restored on exceptions, and an explicit set_device comes back.
    rt.set_device(1)
    s0 = rt.Stream(device=0)
    with pytest.raises(KeyError):
        with s0:
            assert rt.get_device() == 0
            raise KeyError("inside")
    assert rt.get_device() == 1
    rt.set_device(0)
