"""Ctrl-C: a SIGINT that arrives while a loop of long calls runs raises KeyboardInterrupt
at the next check (as a native call returns, or between an embedding's batches), and the
runtime is usable afterwards (no scope left behind, results unchanged)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Iterator

import numpy as np
import pytest

import npurt
import tiny_model

LIMIT_S = 60.0  # the loops stop here at the latest (the test then fails)


@pytest.fixture()
def sigint() -> Iterator[Callable[[float], threading.Timer]]:
    """``sigint(delay)`` sends SIGINT to this process after ``delay`` seconds, from
    another thread; Python's default handler (raise KeyboardInterrupt) is installed."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach Python's handlers only in the main thread")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timers = []

    def arm(delay: float) -> threading.Timer:
        t = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        t.daemon = True
        timers.append(t)
        t.start()
        return t

    try:
        yield arm
    finally:
        for t in timers:
            t.cancel()
            t.join()
        signal.signal(signal.SIGINT, previous)


def loop_until_interrupted(call: Callable[[], object]) -> int:
    """Calls ``call`` until KeyboardInterrupt; the number of calls that completed."""
    done = 0
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        while time.monotonic() - start < LIMIT_S:
            call()
            done += 1
    return done


@pytest.fixture(scope="module")
def rt() -> npurt.Runtime:
    return npurt.Runtime(backend="cpu", env=False)


def test_interrupt_execute_on_the_default_stream(rt: npurt.Runtime, sigint) -> None:
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    x = rt.asarray(a)
    want = rt.execute("MatMul", [x, x]).output.to_numpy()
    sigint(0.3)
    loop_until_interrupted(lambda: rt.execute("MatMul", [x, x]))
    assert not rt.current_stream().is_async
    np.testing.assert_array_equal(rt.execute("MatMul", [x, x]).output.to_numpy(), want)


def test_interrupt_execute_batch(rt: npurt.Runtime, sigint) -> None:
    x = rt.asarray(np.ones((128, 128), np.float32))
    sigint(0.3)
    loop_until_interrupted(lambda: rt.execute_batch([("MatMul", [x, x]), ("Relu", [x])]))
    assert rt.execute_batch([("Add", [x, x])])[0].output.to_numpy()[0, 0] == 2.0


def test_interrupt_compiled_graph_runs(rt: npurt.Runtime, sigint) -> None:
    cg = rt.bert("tiny", batch=2, seq=16)
    ids = np.arange(32, dtype=np.int64).reshape(2, 16) % 50
    feed = [ids, np.zeros_like(ids), np.ones((2, 16), np.float32)]
    want = cg.run(feed)[0].to_numpy()
    sigint(0.3)
    loop_until_interrupted(lambda: cg.run(feed))
    np.testing.assert_array_equal(cg.run(feed)[0].to_numpy(), want)


def test_interrupt_synchronize_in_a_stream_scope(rt: npurt.Runtime, sigint) -> None:
    a = np.random.default_rng(1).standard_normal((192, 192)).astype(np.float32)
    x = rt.asarray(a)
    want = rt.execute("MatMul", [x, x]).output.to_numpy()
    s = rt.Stream()

    def queue_and_wait() -> None:
        with rt.stream_scope(s):
            for _ in range(4):
                rt.execute("MatMul", [x, x])
        s.synchronize()

    sigint(0.3)
    loop_until_interrupted(queue_and_wait)
    rt.synchronize()  # the queued work finishes; nothing failed
    assert rt.current_stream() is not s and not rt.current_stream().is_async
    with rt.stream_scope(s):
        out = rt.execute("MatMul", [x, x]).output
    s.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), want)


def test_interrupt_compile(rt: npurt.Runtime, sigint) -> None:
    g = rt.Graph()
    v = g.input("x", (64, 64))
    w = g.constant("w", np.eye(64, dtype=np.float32))
    for _ in range(8):
        v = g.node("Relu", [g.node("MatMul", [v, w])])
    g.output(v)
    sigint(0.3)
    loop_until_interrupted(g.compile)
    x = np.abs(np.random.default_rng(2).standard_normal((64, 64))).astype(np.float32)
    np.testing.assert_allclose(g.compile().run([x])[0].to_numpy(), x, rtol=1e-6)


def test_interrupt_between_embedding_batches(rt: npurt.Runtime, sigint, tmp_path) -> None:
    """One embed() call of many one-text batches stops at the first batch boundary after
    the signal, well before its end."""
    e = rt.Embedder(tiny_model.write(tmp_path / "tiny"), batch_size=1)
    texts = ["the quick brown fox jumps over the lazy dog"] * 8
    e.embed(texts)  # compiles the one shape
    t0 = time.monotonic()
    n = 8
    while time.monotonic() - t0 < 1.0:  # enough texts for at least a second of batches
        n *= 2
        t0 = time.monotonic()
        full = e.embed(texts[:1] * n)
    full_s = time.monotonic() - t0
    assert full.shape == (n, tiny_model.CONFIG["hidden_size"])
    sigint(full_s / 10)
    t1 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        e.embed(texts[:1] * n)
        time.sleep(LIMIT_S)  # reached only if embed() ignored the signal
    took = time.monotonic() - t1
    assert took < full_s * 0.6, f"interrupted after {took:.2f} s of a {full_s:.2f} s call"
    np.testing.assert_array_equal(e.embed(texts[:1] * 4), full[:4])
