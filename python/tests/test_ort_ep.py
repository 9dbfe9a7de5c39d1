"""libnpurt_ort_ep.so as an ONNX Runtime plugin execution provider, through the stock
`onnxruntime` wheel: registration, the offered device, options, and a session that runs.

Skips (with the reason) when `onnxruntime` is not importable, is older than 1.24, or the library
is not built (`cargo build -p npurt-ort-ep --release`; $NPURT_ORT_EP_LIB names another build).
The models are written here as ONNX protobuf bytes, so the `onnx` package is not needed.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EP_NAME = "NpurtExecutionProvider"

try:
    import onnxruntime as ort
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"onnxruntime is not importable ({e}); pip install onnxruntime", allow_module_level=True)

_version = tuple(int(p) for p in ort.__version__.split(".")[:2] if p.isdigit())
if _version < (1, 24):
    pytest.skip(f"onnxruntime {ort.__version__} is older than 1.24, the EP ABI the library needs",
                allow_module_level=True)


def _library() -> "pathlib.Path | None":
    env = os.environ.get("NPURT_ORT_EP_LIB")
    if env:
        return pathlib.Path(env) if pathlib.Path(env).is_file() else None
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "libnpurt_ort_ep.so"
        if p.is_file():
            return p
    return None


LIB = _library()
if LIB is None:
    pytest.skip("libnpurt_ort_ep.so is not built (cargo build -p npurt-ort-ep --release, or set NPURT_ORT_EP_LIB)",
                allow_module_level=True)


# --- a minimal ONNX protobuf writer (ModelProto with one graph of plain nodes) -----------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, payload: "bytes | str | int") -> bytes:
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint((num << 3) | 2) + _varint(len(data)) + data


FLOAT = 1


def _value_info(name: str, shape: "tuple[int, ...]", elem_type: int = FLOAT) -> bytes:
    dims = b"".join(_field(1, _field(1, d)) for d in shape)  # Dimension.dim_value
    tensor = _field(1, elem_type) + _field(2, dims)  # TypeProto.Tensor: elem_type, shape
    return _field(1, name) + _field(2, _field(1, tensor))  # ValueInfoProto: name, type.tensor_type


def _model(nodes: "list[tuple[str, list[str], list[str]]]", inputs, outputs, opset: int = 17) -> bytes:
    graph = b"".join(
        _field(1, b"".join(_field(1, i) for i in ins) + b"".join(_field(2, o) for o in outs) + _field(4, op))
        for op, ins, outs in nodes
    )
    graph += _field(2, "g")
    graph += b"".join(_field(11, _value_info(n, s)) for n, s in inputs)
    graph += b"".join(_field(12, _value_info(n, s)) for n, s in outputs)
    # ModelProto: ir_version 8, graph, opset_import (default domain).
    return _field(1, 8) + _field(7, graph) + _field(8, _field(2, opset))


RELU_ADD = _model(
    [("Relu", ["x"], ["r"]), ("Add", ["r", "y"], ["z"])],
    inputs=[("x", (2, 3)), ("y", (2, 3))],
    outputs=[("z", (2, 3))],
)


# --- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def registered():
    """The library registered under "npurt" for the module; unregistered after it."""
    ort.register_execution_provider_library("npurt", str(LIB))
    try:
        yield "npurt"
    finally:
        ort.unregister_execution_provider_library("npurt")


def _npurt_devices():
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]


def _session(devices, options: dict) -> "ort.InferenceSession":
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, options)
    return ort.InferenceSession(RELU_ADD, sess_options=so)


# --- tests -------------------------------------------------------------------------------------

def test_register_offers_the_cpu_device_and_unregister_removes_it():
    ort.register_execution_provider_library("npurt_once", str(LIB))
    try:
        devices = _npurt_devices()
        assert len(devices) == 1, [(d.ep_name, d.device.type) for d in ort.get_ep_devices()]
        d = devices[0]
        assert d.ep_vendor == "npurt"
        assert d.device.type == ort.OrtHardwareDeviceType.CPU
        assert d.ep_metadata.get("npurt.backend") == "cpu"
        assert d.ep_metadata.get("library_path") == str(LIB)
    finally:
        ort.unregister_execution_provider_library("npurt_once")
    assert _npurt_devices() == []


def test_registering_the_same_name_twice_is_an_error(registered):
    with pytest.raises(Exception, match="already registered"):
        ort.register_execution_provider_library(registered, str(LIB))
    assert len(_npurt_devices()) == 1


def test_session_with_the_ep_matches_the_cpu_ep(registered):
    devices = _npurt_devices()
    sess = _session(devices, {})
    assert sess.get_providers()[0] == EP_NAME
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y": rng.standard_normal((2, 3)).astype(np.float32)}
    (got,) = sess.run(None, feeds)
    (want,) = ort.InferenceSession(RELU_ADD, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.maximum(feeds["x"], 0) + feeds["y"])


def test_every_valid_option_is_accepted(registered):
    opts = {"backend": "cpu", "device_id": "0", "precision": "f32", "graph_capture": "off", "log_level": "warn"}
    _session(_npurt_devices(), opts)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"backend": "tpu"}, ["`backend`", "`tpu`", "auto, cpu, acl, cuda"]),
        ({"device_id": "-1"}, ["`device_id`", "`-1`"]),
        ({"precision": "fp8"}, ["`precision`", "`fp8`"]),
        ({"graph_capture": "yes"}, ["`graph_capture`", "`yes`"]),
        ({"log_level": "loud"}, ["`log_level`", "`loud`"]),
        ({"colour": "red"}, ["unknown", "`colour`"]),
    ],
)
def test_a_bad_option_is_an_error_naming_it(registered, options, words):
    with pytest.raises(Exception) as info:
        _session(_npurt_devices(), options)
    text = str(info.value)
    assert EP_NAME in text, text
    for w in words:
        assert w in text, text


def test_a_backend_not_served_yet_is_refused_by_name(registered):
    with pytest.raises(Exception, match="`backend` = `cuda`"):
        _session(_npurt_devices(), {"backend": "cuda"})


def test_get_capability_walks_the_graph_and_declines_every_node(registered, capfd):
    # The EP reads each node through ORT's graph API and, claiming none yet, says so in the
    # session's log (verbose): this checks the graph and logger entries of the OrtApi it uses.
    so = ort.SessionOptions()
    so.log_severity_level = 0
    so.add_provider_for_devices(_npurt_devices(), {})
    ort.InferenceSession(RELU_ADD, sess_options=so)
    err = capfd.readouterr().err
    assert "NpurtExecutionProvider declines all 2 node(s):" in err, err[-2000:]
    line = next(ln for ln in err.splitlines() if "declines all 2 node(s)" in ln)
    assert "(Relu)" in line and "(Add)" in line, line
