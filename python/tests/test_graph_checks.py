"""Graph-building mistakes caught where they are made: a value of another graph, a name
given twice (inputs, constants, nodes, outputs), and tensors of another runtime."""

from __future__ import annotations

import numpy as np
import pytest

import npurt


def test_a_value_of_another_graph_is_refused_naming_both(rt: npurt.Runtime) -> None:
    g1 = npurt.Graph(runtime=rt, name="first")
    g2 = npurt.Graph(runtime=rt, name="second")
    x = g1.input("x", (2,))
    g2.input("y", (3, 3))
    with pytest.raises(npurt.ValidationError) as e:
        g2.node("Relu", [x])
    msg = str(e.value)
    assert "'first'" in msg and "'second'" in msg and "'x'" in msg, msg
    assert g2._g.num_nodes() == 0
    with pytest.raises(npurt.ValidationError, match="'first'.*'second'"):
        g2.output(x)


def test_graphs_get_distinct_default_names(rt: npurt.Runtime) -> None:
    g1, g2 = rt.Graph(), rt.Graph()
    assert g1.name != g2.name
    assert g1.name in repr(g1)
    x = g1.input("x", (2,))
    with pytest.raises(npurt.ValidationError) as e:
        g2.node("Relu", [x])
    assert repr(g1.name) in str(e.value) and repr(g2.name) in str(e.value)


def test_a_repeated_input_name_is_refused(rt: npurt.Runtime) -> None:
    g = rt.Graph()
    g.input("x", (2,))
    with pytest.raises(npurt.ValidationError, match='"x".*given twice'):
        g.input("x", (2,))
    with pytest.raises(npurt.ValidationError, match='"x".*given twice'):
        g.constant("x", np.ones(2, np.float32))


def test_the_issue_case_two_inputs_named_x_then_sub(rt: npurt.Runtime) -> None:
    # Before, this built a graph whose inputs were ['x', 'x'] and whose run by name gave zeros.
    g = rt.Graph()
    a = g.input("x", (2,))
    with pytest.raises(npurt.ValidationError, match='"x"'):
        b = g.input("x", (2,))
        g.output(g.node("Sub", [a, b]))


def test_a_repeated_node_name_is_refused(rt: npurt.Runtime) -> None:
    g = rt.Graph()
    x = g.input("x", (2,))
    g.node("Relu", [x], name="r")
    with pytest.raises(npurt.ValidationError, match='"r".*given twice'):
        g.node("Relu", [x], name="r")
    with pytest.raises(npurt.ValidationError, match='"x".*given twice'):
        g.node("Relu", [x], name="x")


def test_default_node_names_avoid_taken_ones(rt: npurt.Runtime) -> None:
    g = rt.Graph()
    x = g.input("relu_1", (2,))
    y = g.node("Relu", [x])
    assert y.name != "relu_1"
    g.output(y)
    out = g.compile().run([np.array([-1.0, 2.0], np.float32)])[0]
    np.testing.assert_array_equal(out.numpy(), [0.0, 2.0])


def test_a_value_output_twice_is_refused(rt: npurt.Runtime) -> None:
    g = rt.Graph()
    y = g.node("Relu", [g.input("x", (2,))])
    g.output(y)
    with pytest.raises(npurt.ValidationError, match='output "relu_1" is given twice'):
        g.output(y)


def test_a_repeated_attribute_is_given_twice(rt: npurt.Runtime) -> None:
    # Python keywords cannot repeat; the native layer (as the CLI and C API) says so.
    x = rt.asarray(np.ones((2, 2), np.float32))
    with pytest.raises(npurt.ValidationError, match='"axis" is given twice'):
        npurt._native.execute("Softmax", [x._t], None, [("axis", "0"), ("axis", "1")], None)


def test_a_tensor_of_another_runtime_is_named_as_such(rt: npurt.Runtime) -> None:
    other = npurt.Runtime(backend="cpu", env=False)
    a = rt.asarray(np.ones(2, np.float32))
    b = other.asarray(np.ones(2, np.float32))
    with pytest.raises(npurt.ValidationError) as e:
        rt.execute("Add", [a, b])
    msg = str(e.value)
    assert "input 1" in msg and "belongs to another runtime" in msg, msg
    assert "its cpu:0" in msg and "this runtime's cpu:0/default" in msg, msg
    with pytest.raises(npurt.ValidationError, match="output 0 .*belongs to another runtime"):
        rt.execute("Relu", [a], outputs=[other.empty((2,))])
    g = rt.Graph()
    g.output(g.node("Relu", [g.input("x", (2,))]))
    cg = g.compile()
    with pytest.raises(npurt.ValidationError, match="belongs to another runtime"):
        cg.run([b])
