"""`npurt.ort`: the plugin library the Python package ships (its own native module) and
`npurt.ort.session(...)`, through the stock `onnxruntime` wheel.

The library tests need no onnxruntime; the session tests skip, saying why, without
onnxruntime ≥ 1.24 or the `onnx` package (which builds their models).
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

import npurt
import npurt.ort
from ort_support import SKIP, TensorProto, helper, onnx, rt, unregister_package_ep

EP_NAME = "NpurtExecutionProvider"

needs_ort = pytest.mark.skipif(bool(SKIP), reason=SKIP or "onnxruntime and onnx present")


def test_the_ep_name_is_the_issues():
    assert npurt.ort.get_ep_name() == EP_NAME
    assert npurt.ort.EP_NAME == EP_NAME


def test_the_library_is_the_native_module_and_exports_both_entry_points():
    path = npurt.ort.get_library_path()
    assert os.path.isabs(path) and os.path.isfile(path), path
    assert os.path.samefile(path, npurt._native.__file__)
    lib = ctypes.CDLL(path)
    for symbol in ("CreateEpFactories", "ReleaseEpFactory"):
        assert getattr(lib, symbol, None) is not None, symbol


@pytest.fixture(scope="module")
def ep():
    """Unregisters what npurt.ort.session registered, after the module (other test modules
    register their own build of the library)."""
    yield npurt.ort
    unregister_package_ep()


def _model() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "y"], ["s"]),
             helper.make_node("Tanh", ["s"], ["z"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _assignment(sess) -> "dict[str, list[str]]":
    out: "dict[str, list[str]]" = {}
    for sub in sess.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).extend(n.op_type for n in sub.get_nodes())
    return out


@needs_ort
def test_session_runs_on_the_ep_and_matches_the_cpu_ep(ep, tmp_path):
    path = tmp_path / "relu_add_tanh.onnx"
    path.write_bytes(_model())
    so = rt.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = ep.session(path, backend="cpu", sess_options=so, device_id=0)
    assert isinstance(sess, rt.InferenceSession)
    assert sess.get_providers()[0] == EP_NAME
    assert _assignment(sess) == {EP_NAME: ["Relu", "Add", "Tanh"]}
    rng = np.random.default_rng(33)
    feeds = {n: rng.standard_normal((2, 3)).astype(np.float32) for n in ("x", "y")}
    (got,) = sess.run(None, feeds)
    (want,) = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@needs_ort
def test_session_registers_once_and_tolerates_an_earlier_registration(ep):
    first = ep.session(_model())
    second = ep.session(_model())  # no second registration, no error
    devices = [d for d in rt.get_ep_devices() if d.ep_name == EP_NAME]
    assert len(devices) == 1, [(d.ep_name, d.ep_metadata.get("library_path")) for d in devices]
    # Registering the same name again by hand is ORT's error; session() goes on working.
    with pytest.raises(Exception, match="already registered"):
        rt.register_execution_provider_library(ep.REGISTRATION_NAME, ep.get_library_path())
    third = ep.session(_model())
    feeds = {n: np.ones((2, 3), np.float32) for n in ("x", "y")}
    for s in (first, second, third):
        np.testing.assert_allclose(s.run(None, feeds)[0], np.tanh(np.full((2, 3), 2.0, np.float32)), rtol=1e-6)


@needs_ort
@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"backend": "tpu"}, ["`backend`", "`tpu`"]),
        ({"precision": "fp8"}, ["`precision`", "`fp8`"]),
        ({"colour": "red"}, ["unknown", "`colour`"]),
    ],
)
def test_a_bad_option_through_session_is_an_error_naming_it(ep, kwargs, words):
    with pytest.raises(Exception) as info:
        ep.session(_model(), **kwargs)
    text = str(info.value)
    assert EP_NAME in text, text
    for w in words:
        assert w in text, text


@needs_ort
@pytest.mark.parametrize("value", [True, 1.5, None])
def test_an_option_neither_string_nor_integer_is_a_type_error(ep, value):
    with pytest.raises(TypeError, match="`graph_capture`"):
        ep.session(_model(), graph_capture=value)
