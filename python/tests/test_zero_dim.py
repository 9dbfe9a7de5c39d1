"""0-d arrays go through every path as any other rank: asarray, Tensor(()), from_numpy and
to_numpy, execute, graphs (inputs, constants, outputs)."""

from __future__ import annotations

import numpy as np
import pytest

import npurt


def test_asarray_of_a_0d_array_round_trips(rt: npurt.Runtime) -> None:
    t = rt.asarray(np.array(2.5, np.float32))
    assert t.shape == () and t.ndim == 0 and t.size == 1 and t.nbytes == 4
    a = t.numpy()
    assert a.shape == () and a.dtype == np.float32 and a == 2.5
    assert np.asarray(t).shape == ()
    for dt in (np.float16, np.int32, np.int64, np.uint8):
        b = rt.asarray(np.array(7, dt)).numpy()
        assert b.shape == () and b.dtype == dt and b == 7


def test_the_module_level_asarray_takes_0d() -> None:
    t = npurt.asarray(np.array(2.5, np.float32))
    assert t.shape == () and t.numpy().shape == () and float(t.numpy()) == 2.5


def test_tensor_of_empty_shape(rt: npurt.Runtime) -> None:
    t = npurt.Tensor((), runtime=rt)
    assert t.shape == () and t.size == 1
    t.from_numpy(np.array(-3.0, np.float32))
    assert t.numpy().shape == () and t.numpy() == -3.0
    with pytest.raises(TypeError, match="0-d"):
        len(t)
    z = rt.zeros([], np.int64)
    assert z.shape == () and z.numpy() == 0


def test_from_numpy_refuses_a_1_element_array_for_a_0d_tensor(rt: npurt.Runtime) -> None:
    t = rt.empty(())
    with pytest.raises(npurt.ValidationError, match="shape"):
        t.from_numpy(np.array([1.0], np.float32))


def test_execute_on_0d_inputs(rt: npurt.Runtime) -> None:
    a = rt.asarray(np.array(2.5, np.float32))
    b = rt.asarray(np.array(-4.0, np.float32))
    s = rt.execute("Add", [a, b]).output.numpy()
    assert s.shape == () and s == -1.5
    r = rt.execute("Relu", [b]).output.numpy()
    assert r.shape == () and r == 0.0
    m = rt.execute("Mul", [np.array(3.0, np.float32), a]).output.numpy()
    assert m.shape == () and m == 7.5
    # Broadcast of a 0-d operand against a vector.
    v = rt.execute("Add", [np.array([1.0, 2.0], np.float32), a]).output.numpy()
    np.testing.assert_array_equal(v, [3.5, 4.5])
    c = rt.execute("Cast", [a], to=np.int64).output.numpy()
    assert c.shape == () and c == 2


def test_graph_with_0d_input_constant_and_output(rt: npurt.Runtime) -> None:
    g = rt.Graph()
    x = g.input("x", ())
    assert x.shape == ()
    k = g.constant("k", np.array(2.0, np.float32))
    assert k.shape == ()
    y = g.node("Mul", [g.node("Relu", [x]), k])
    g.output(y)
    cg = g.compile()
    assert cg.input_shapes == [()] and cg.output_shapes == [()]
    out = cg.run([np.array(3.0, np.float32)])[0].numpy()
    assert out.shape == () and out == 6.0
    out = cg.run({"x": np.array(-1.0, np.float32)})[0].numpy()
    assert out.shape == () and out == 0.0
