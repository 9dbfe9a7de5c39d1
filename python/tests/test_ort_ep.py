"""libnpurt_ort_ep.so as an ONNX Runtime plugin execution provider, through the stock
`onnxruntime` wheel: registration, the offered device, options, the nodes it claims (checked
through `get_provider_graph_assignment_info()`) and their results against ORT's CPU EP.

Skips (with the reason) when `onnxruntime` is not importable, is older than 1.24, or the library
is not built (`cargo build -p npurt-ort-ep --release`; $NPURT_ORT_EP_LIB names another build).
The registration and option tests write their model as ONNX protobuf bytes; the op tests build
theirs with `onnx.helper` and skip, saying so, when the `onnx` package is not importable.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import ep_lib

EP_NAME = "NpurtExecutionProvider"

try:
    import onnxruntime as ort
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"onnxruntime is not importable ({e}); pip install onnxruntime", allow_module_level=True)

_version = tuple(int(p) for p in ort.__version__.split(".")[:2] if p.isdigit())
if _version < (1, 24):
    pytest.skip(f"onnxruntime {ort.__version__} is older than 1.24, the EP ABI the library needs",
                allow_module_level=True)


try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover - depends on the environment
    onnx = None
    _ONNX_MISSING = f"the onnx package is not importable ({e}); pip install onnx"
else:
    _ONNX_MISSING = ""

needs_onnx = pytest.mark.skipif(onnx is None, reason=_ONNX_MISSING or "onnx present")

LIB = ep_lib()
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


def test_registering_under_a_second_name_offers_a_second_device(registered):
    # Defined behaviour: ORT loads the library once more and asks its new factory for devices;
    # each registration offers its own device, and unregistering one removes only its own.
    ort.register_execution_provider_library("npurt_second", str(LIB))
    try:
        assert len(_npurt_devices()) == 2
        _session(_npurt_devices()[1:], {})
    finally:
        ort.unregister_execution_provider_library("npurt_second")
    assert len(_npurt_devices()) == 1


def test_a_bad_npurt_backend_fails_the_registration_naming_it(monkeypatch):
    # The devices come from npurt's discovery when the library is registered: a bad NPURT_*
    # value is npurt's error, through ORT, and nothing stays registered.
    before = len(_npurt_devices())
    monkeypatch.setenv("NPURT_BACKEND", "tpu")
    with pytest.raises(Exception) as info:
        ort.register_execution_provider_library("npurt_bad_env", str(LIB))
    text = str(info.value)
    assert "GetSupportedDevices" in text and "NPURT_BACKEND" in text and '"tpu"' in text, text
    assert len(_npurt_devices()) == before, "a device of the failed registration is left"
    with pytest.raises(Exception):  # nothing is registered under the name
        ort.unregister_execution_provider_library("npurt_bad_env")


def _refused_or_skip(options: dict, what: str) -> str:
    """The error of a session with `options`; skips, saying so, where the backend opened."""
    try:
        _session(_npurt_devices(), options)
    except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
        return str(e)
    pytest.skip(f"{what} is present on this machine: {options} opened")


def test_backend_cuda_without_a_gpu_is_refused_naming_the_option(registered):
    text = _refused_or_skip({"backend": "cuda"}, "a CUDA GPU")
    assert EP_NAME in text and "`backend` = `cuda`" in text and "CUDA backend did not open" in text, text


def test_backend_acl_without_cann_is_refused_naming_the_option(registered):
    text = _refused_or_skip({"backend": "acl"}, "CANN (or acl-emu through ASCEND_TOOLKIT_HOME)")
    assert EP_NAME in text and "`backend` = `acl`" in text and "Ascend backend (CANN or acl-emu) did not open" in text, \
        text


def test_a_device_id_past_the_backends_devices_is_refused_naming_it(registered):
    with pytest.raises(Exception) as info:
        _session(_npurt_devices(), {"backend": "cpu", "device_id": "1"})
    text = str(info.value)
    assert EP_NAME in text and "`device_id` = `1`" in text and "device 1 requested but cpu has 1 devices" in text, text


def test_log_level_filters_what_reaches_orts_log(registered, capfd):
    # npurt's `log` records go to ORT's default logger; `log_level` sets the `log` filter
    # (process-wide), ORT's default logger severity filters after it.
    ort.set_default_logger_severity(1)
    try:
        capfd.readouterr()
        _session(_npurt_devices(), {"log_level": "info"})
        err = capfd.readouterr().err
        assert "NpurtExecutionProvider on npurt's cpu backend" in err, err[-2000:]
        _session(_npurt_devices(), {"log_level": "warn"})
        err = capfd.readouterr().err
        assert "NpurtExecutionProvider on npurt's cpu backend" not in err, err[-2000:]
    finally:
        ort.set_default_logger_severity(2)


def test_get_capability_logs_what_it_claims(registered, capfd):
    # The EP reads each node through ORT's graph API and says in the session's log (verbose)
    # what it claims and what it declines, with why.
    so = ort.SessionOptions()
    so.log_severity_level = 0
    so.add_provider_for_devices(_npurt_devices(), {})
    ort.InferenceSession(RELU_ADD, sess_options=so)
    err = capfd.readouterr().err
    line = next((ln for ln in err.splitlines() if "NpurtExecutionProvider claims" in ln), None)
    assert line is not None, err[-2000:]
    assert "claims 2 of 2 node(s) in 1 fused group(s)" in line, line
    assert "(Relu)" in line and "(Add)" in line and "declines 0" in line, line


# --- claimed nodes, built with onnx.helper -----------------------------------------------------

RNG = np.random.default_rng(20261206)


def _rand(*shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def _build(nodes, inputs, outputs, initializers=(), opset=20):
    """A model: `inputs`/`outputs` are (name, shape[, elem type]) and `initializers` arrays by name."""

    def vi(spec):
        name, shape, *elem = spec
        return helper.make_tensor_value_info(name, elem[0] if elem else TensorProto.FLOAT, list(shape))

    graph = helper.make_graph(
        nodes, "g", [vi(i) for i in inputs], [vi(o) for o in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def _run_both(model, feeds):
    """Runs `model` with the EP selected and on the CPU EP alone; returns both outputs and the
    op types assigned to each EP ({ep: [op types]}, over all its subgraphs)."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    assigned: "dict[str, list[str]]" = {}
    for sub in sess.get_provider_graph_assignment_info():
        assigned.setdefault(sub.ep_name, []).extend(n.op_type for n in sub.get_nodes())
    got = sess.run(None, feeds)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want, assigned


def _assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5)


def _one(op, shapes, out, attrs=None, opset=20, positive=False, out_type=TensorProto.FLOAT if onnx else 1,
         consts=()):
    names = [f"i{k}" for k in range(len(shapes))]
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    feeds = {n: _rand(*s, positive=positive) for n, s in zip(names, shapes) if n not in dict(consts)}
    inits = [(n, _rand(*shapes[int(n[1:])])) for n, _ in consts]
    inputs = [(n, s) for n, s in zip(names, shapes) if n in feeds]
    return _build([node], inputs, [("y", out, out_type)], initializers=inits, opset=opset), feeds


ONE_NODE = {
    "Relu": lambda: _one("Relu", [(2, 3)], (2, 3)),
    "Add": lambda: _one("Add", [(2, 3, 4), (4,)], (2, 3, 4)),
    "Sub": lambda: _one("Sub", [(2, 3), (2, 1)], (2, 3)),
    "Mul": lambda: _one("Mul", [(3, 4), (3, 4)], (3, 4)),
    "Div": lambda: _one("Div", [(3, 4), (3, 4)], (3, 4), positive=True),
    "MatMul": lambda: _one("MatMul", [(2, 5, 3), (3, 4)], (2, 5, 4)),
    "MatMul weight": lambda: _one("MatMul", [(5, 3), (3, 4)], (5, 4), consts=[("i1", None)]),
    "Tanh": lambda: _one("Tanh", [(4, 5)], (4, 5)),
    "Exp": lambda: _one("Exp", [(4, 5)], (4, 5)),
    "Sqrt": lambda: _one("Sqrt", [(4, 5)], (4, 5), positive=True),
    "Erf": lambda: _one("Erf", [(4, 5)], (4, 5)),
    "Softmax": lambda: _one("Softmax", [(2, 3, 5)], (2, 3, 5)),
    "Softmax axis 1": lambda: _one("Softmax", [(2, 3, 5)], (2, 3, 5), attrs={"axis": 1}),
    "Transpose": lambda: _one("Transpose", [(2, 3, 4)], (4, 2, 3), attrs={"perm": [2, 0, 1]}),
    "Transpose default": lambda: _one("Transpose", [(2, 3, 4)], (4, 3, 2)),
    "Gemm": lambda: _one("Gemm", [(3, 4), (5, 4), (5,)], (3, 5),
                         attrs={"transB": 1, "alpha": 0.5, "beta": 2.0}),
    "LayerNormalization": lambda: _one("LayerNormalization", [(2, 3, 8), (8,), (8,)], (2, 3, 8),
                                       attrs={"epsilon": 1e-5}, consts=[("i1", None), ("i2", None)]),
    "Gelu": lambda: _one("Gelu", [(4, 6)], (4, 6)),
    "Gelu tanh": lambda: _one("Gelu", [(4, 6)], (4, 6), attrs={"approximate": "tanh"}),
    "Cast": lambda: _one("Cast", [(3, 4)], (3, 4), attrs={"to": TensorProto.FLOAT16},
                         out_type=TensorProto.FLOAT16 if onnx else 10),
    "Concat": lambda: _one("Concat", [(2, 3), (2, 5)], (2, 8), attrs={"axis": -1}),
    "LayerNormalization stash_type 0": lambda: _one("LayerNormalization", [(2, 3, 8), (8,), (8,)], (2, 3, 8),
                                                    attrs={"stash_type": 0}, consts=[("i1", None), ("i2", None)]),
    "Where": lambda: _moved("Where", [("c", (2, 1), np.array([[True], [False]])), ("x", (3,), _rand(3)),
                                      ("y", (2, 3), _rand(2, 3))], [("z", (2, 3))]),
    "Slice": lambda: _moved("Slice", [("x", (4, 6), _rand(4, 6))], [("z", (2, 3))],
                            consts=[("s", [1, -1]), ("e", [2 ** 62, -7]), ("a", [0, 1]), ("p", [2, -2])]),
    "Expand": lambda: _moved("Expand", [("x", (3, 1), _rand(3, 1))], [("z", (2, 3, 4))], consts=[("s", [2, 1, 4])]),
    "Split": lambda: _moved("Split", [("x", (2, 7), _rand(2, 7))], [("a", (2, 3)), ("b", (2, 3)), ("c", (2, 1))],
                            attrs={"axis": 1, "num_outputs": 3}, opset=18),
    "Split sizes": lambda: _moved("Split", [("x", (5, 2), _rand(5, 2))], [("a", (1, 2)), ("b", (4, 2))],
                                  consts=[("sp", [1, 4])]),
    # Axes a constant input (ReduceSum-13, ReduceMean-18) or an attribute (ReduceMean-17).
    "ReduceSum": lambda: _moved("ReduceSum", [("x", (2, 3, 4), _rand(2, 3, 4))], [("z", (2, 1, 4))],
                                consts=[("a", [1])], opset=13),
    "ReduceSum all keepdims 0": lambda: _moved("ReduceSum", [("x", (3, 5), _rand(3, 5))], [("z", ())],
                                               attrs={"keepdims": 0}, opset=13),
    "ReduceMean": lambda: _moved("ReduceMean", [("x", (2, 3, 4), _rand(2, 3, 4))], [("z", (3,))],
                                 consts=[("a", [0, -1])], attrs={"keepdims": 0}, opset=18),
    "ReduceMean axes attribute": lambda: _one("ReduceMean", [(2, 3, 4)], (2, 3, 1), attrs={"axes": [-1]},
                                              opset=17),
    "Gather int64": lambda: _moved("Gather", [("d", (2, 5), np.arange(10).reshape(2, 5)),
                                              ("i", (3,), np.array([4, -1, 0]))], [("z", (2, 3))], attrs={"axis": 1}),
    # Integers wrap in their width as ONNX's (NumPy's) do; Div truncates.
    "Add int64": lambda: _moved("Add", [("a", (4,), np.array([2 ** 63 - 1, -5, 7, 0])),
                                        ("b", (4,), np.array([1, 2, -9, 0]))], [("z", (4,))]),
    "Mul uint8": lambda: _moved("Mul", [("a", (3,), np.array([200, 3, 255], dtype=np.uint8)),
                                        ("b", (3,), np.array([2, 5, 255], dtype=np.uint8))], [("z", (3,))]),
    "Div int32": lambda: _moved("Div", [("a", (4,), np.array([7, -7, 9, -2 ** 31], dtype=np.int32)),
                                        ("b", (4,), np.array([2, 2, -4, 3], dtype=np.int32))], [("z", (4,))]),
}


def _elem(a) -> int:
    return helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype)


def _moved(op, inputs, outputs, consts=(), attrs=None, opset=20):
    """One `op` node on the given (name, shape, value) inputs, with int64 constant initializers
    `consts` (name, values) as its further inputs; the outputs have the first input's dtype."""
    names = [n for n, _, _ in inputs] + [n for n, _ in consts]
    node = helper.make_node(op, names, [n for n, _ in outputs], **(attrs or {}))
    elem = _elem(inputs[-1][2])
    inits = [(n, np.array(v, dtype=np.int64)) for n, v in consts]
    model = _build([node], [(n, s, _elem(v)) for n, s, v in inputs], [(n, s, elem) for n, s in outputs],
                   initializers=inits, opset=opset)
    return model, {n: v for n, _, v in inputs}


@needs_onnx
@pytest.mark.parametrize("case", sorted(ONE_NODE))
def test_one_claimed_node_runs_on_npurt_and_matches_the_cpu_ep(registered, case):
    model, feeds = ONE_NODE[case]()
    got, want, assigned = _run_both(model, feeds)
    op = case.split()[0]
    assert assigned == {EP_NAME: [op]}, assigned
    _assert_close(got, want)


@needs_onnx
def test_an_encoder_block_is_one_fused_node_on_npurt(registered):
    d, f = 8, 16
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Gelu", ["hb"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("Transpose", ["ln"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Softmax", ["t"], ["y"], axis=-1),
    ]
    inits = [("w1", _rand(d, f)), ("b1", _rand(f)), ("w2", _rand(f, d)), ("gamma", _rand(d)), ("beta", _rand(d))]
    model = _build(nodes, [("x", (2, 5, d))], [("y", (2, d, 5))], initializers=inits)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    subgraphs = [(s.ep_name, [n.op_type for n in s.get_nodes()]) for s in sess.get_provider_graph_assignment_info()]
    # ORT rewrites each 3-D MatMul + Add into Reshape, Gemm, Reshape before partitioning; all of
    # it is npurt's, in one fused node.
    assert len(subgraphs) == 1 and subgraphs[0][0] == EP_NAME, subgraphs
    assert {"Gemm", "Reshape", "Gelu", "LayerNormalization", "Transpose", "Softmax"} <= set(subgraphs[0][1]), subgraphs
    feeds = {"x": _rand(2, 5, d)}
    _assert_close(sess.run(None, feeds), ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds))


def _ep_log_line(capfd, options: dict, model=RELU_ADD) -> "tuple[str, str]":
    """Makes a session with `options` (and `log_level` info) while ORT's default logger shows
    info records; returns the EP's line naming its backend and settings, and the whole log."""
    ort.set_default_logger_severity(1)
    try:
        capfd.readouterr()
        so = ort.SessionOptions()
        so.add_provider_for_devices(_npurt_devices(), {"log_level": "info", **options})
        ort.InferenceSession(model, sess_options=so)
        err = capfd.readouterr().err
    finally:
        ort.set_default_logger_severity(2)
        _session(_npurt_devices(), {"log_level": "warn"})
    line = next((ln for ln in err.splitlines() if "NpurtExecutionProvider on npurt's" in ln), "")
    return line, err


@needs_onnx
@pytest.mark.parametrize("precision, env, want", [
    ("auto", None, "f32"), ("f32", "bf16", "f32"), ("f16", None, "f16"), ("bf16", None, "bf16"), ("auto", "bf16", "bf16"),
])
def test_precision_reaches_npurts_compile(registered, capfd, monkeypatch, precision, env, want):
    # `auto` computes in the model's dtypes (f32) unless NPURT_PRECISION says otherwise; the
    # compile applies the precision to npurt's Linear weights (the log says how many).
    if env is None:
        monkeypatch.delenv("NPURT_PRECISION", raising=False)
    else:
        monkeypatch.setenv("NPURT_PRECISION", env)
    model = _build([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                   [("x", (2, 4, 8))], [("y", (2, 4, 6))], initializers=[("w", _rand(8, 6)), ("b", _rand(6))])
    line, err = _ep_log_line(capfd, {"precision": precision}, model)
    assert f"precision {want}," in line, err[-3000:]
    if want != "f32":
        assert f"precision {want}: " in err and "weights stored in" in err, err[-3000:]


def test_graph_capture_and_device_id_reach_the_runtime(registered, capfd):
    line, err = _ep_log_line(capfd, {"backend": "cpu", "device_id": "0", "graph_capture": "off"})
    assert "npurt's cpu backend, device cpu:0" in line and "graph capture off" in line, err[-3000:]


@needs_onnx
def test_a_conv_in_the_middle_splits_the_groups_and_results_match(registered):
    # a = Relu(x); c = Conv(a); y = Tanh(Add(c, a)): Add may not join Relu's group, since it
    # reads Relu's output through the Conv ORT runs (the fused node would depend on itself).
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Conv", ["a", "k"], ["c"]),
        helper.make_node("Add", ["c", "a"], ["s"]),
        helper.make_node("Tanh", ["s"], ["y"]),
    ]
    model = _build(nodes, [("x", (1, 2, 4, 4))], [("y", (1, 2, 4, 4))],
                   initializers=[("k", _rand(2, 2, 1, 1))], opset=17)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    subgraphs = [(s.ep_name, sorted(n.op_type for n in s.get_nodes())) for s in sess.get_provider_graph_assignment_info()]
    assert (EP_NAME, ["Relu"]) in subgraphs and (EP_NAME, ["Add", "Tanh"]) in subgraphs, subgraphs
    assert ("CPUExecutionProvider", ["Conv"]) in subgraphs, subgraphs
    feeds = {"x": _rand(1, 2, 4, 4)}
    _assert_close(sess.run(None, feeds), ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds))


@needs_onnx
def test_branches_from_two_inputs_meet_in_one_fused_node(registered):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Tanh", ["y"], ["b"]),
        helper.make_node("Mul", ["a", "b"], ["z"]),
    ]
    model = _build(nodes, [("x", (3, 4)), ("y", (3, 4))], [("z", (3, 4))])
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    subgraphs = [(s.ep_name, sorted(n.op_type for n in s.get_nodes())) for s in sess.get_provider_graph_assignment_info()]
    assert subgraphs == [(EP_NAME, ["Mul", "Relu", "Tanh"])], subgraphs
    feeds = {"x": _rand(3, 4), "y": _rand(3, 4)}
    _assert_close(sess.run(None, feeds), ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds))


@needs_onnx
def test_attention_heads_split_by_reshape_run_on_npurt_at_any_batch(registered):
    # The head split of a transformer export: MatMul, Reshape to [0, 0, heads, dim] (ONNX's 0
    # copies the input dim), Transpose to [b, h, s, d], Softmax; named batch and seq.
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["q"]),
        helper.make_node("Reshape", ["q", "heads"], ["qh"]),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["qt"], ["p"]),
        helper.make_node("Identity", ["p"], ["y"]),
    ]
    inits = [("w", _rand(8, 8)), ("heads", np.array([0, 0, 2, 4], dtype=np.int64))]
    model = _build(nodes, [("x", ("batch", "seq", 8))], [("y", ("batch", 2, "seq", 4))], initializers=inits)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    subgraphs = [(s.ep_name, sorted(n.op_type for n in s.get_nodes())) for s in sess.get_provider_graph_assignment_info()]
    # ORT may remove the Identity before partitioning; every node left is npurt's.
    assert len(subgraphs) == 1 and subgraphs[0][0] == EP_NAME, subgraphs
    assert {"MatMul", "Reshape", "Transpose", "Softmax"} <= set(subgraphs[0][1]), subgraphs
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for shape in [(2, 3, 8), (1, 5, 8)]:
        feeds = {"x": _rand(*shape)}
        _assert_close(sess.run(None, feeds), ref.run(None, feeds))


DECLINED = {
    # Softmax before opset 13 flattens around the axis.
    "Softmax opset 11": lambda: _one("Softmax", [(2, 3, 4)], (2, 3, 4), opset=11),
    # npurt's LayerNorm needs a bias and normalises the last axis only.
    "LayerNormalization no bias": lambda: _one("LayerNormalization", [(2, 4), (4,)], (2, 4)),
    "LayerNormalization axis 0": lambda: _one("LayerNormalization", [(2, 4), (2, 4), (2, 4)], (2, 4),
                                              attrs={"axis": 0}),
    # An unknown dim with no name: npurt cannot relate it to the other operands' dims.
    "Relu unnamed dim": lambda: (_build([helper.make_node("Relu", ["x"], ["y"])], [("x", (None, 3))],
                                        [("y", (None, 3))]), {"x": _rand(2, 3)}),
    # A Reshape whose shape is computed (a graph input), not a constant.
    "Reshape computed shape": lambda: (_build([helper.make_node("Reshape", ["x", "s"], ["y"])],
                                              [("x", (2, 6)), ("s", (2,), TensorProto.INT64)], [("y", (3, 4))]),
                                       {"x": _rand(2, 6), "s": np.array([3, 4], dtype=np.int64)}),
    # Slice bounds computed at run time (a graph input), not a constant nor folded.
    "Slice computed starts": lambda: (_build([helper.make_node("Slice", ["x", "s", "e"], ["y"])],
                                             [("x", (4,)), ("s", (1,), TensorProto.INT64),
                                              ("e", (1,), TensorProto.INT64)], [("y", (None,))]),
                                      {"x": _rand(4), "s": np.array([1]), "e": np.array([3])}),
    # No axes with noop_with_empty_axes: the input unchanged, not a reduction.
    "ReduceSum noop": lambda: _moved("ReduceSum", [("x", (2, 3), _rand(2, 3))], [("z", (2, 3))],
                                     attrs={"noop_with_empty_axes": 1}, opset=13),
    # Not f32.
    "Relu f64": lambda: (_build([helper.make_node("Relu", ["x"], ["y"])], [("x", (3,), TensorProto.DOUBLE)],
                                [("y", (3,), TensorProto.DOUBLE)]), {"x": np.array([-1.0, 0.0, 2.0])}),
}


@needs_onnx
@pytest.mark.parametrize("case", sorted(DECLINED))
def test_a_node_npurt_computes_differently_stays_on_ort(registered, case):
    model, feeds = DECLINED[case]()
    got, want, assigned = _run_both(model, feeds)
    assert EP_NAME not in assigned, assigned
    _assert_close(got, want)


@needs_onnx
def test_f16_layer_norm_with_stash_type_0_matches_the_cpu_eps_own_f16_result(registered):
    # ONNX's stash_type 0 on f16 asks for f16 statistics; ORT's CPU EP computes them in f32
    # whatever stash_type says, npurt in f64: within one f16 rounding of each other on rows whose
    # mean is large against their spread (where f16 statistics would be far off).
    x = (RNG.standard_normal((16, 256)) * 4 + 100).astype(np.float16)
    s, b = RNG.standard_normal(256).astype(np.float16), RNG.standard_normal(256).astype(np.float16)
    model, feeds = _moved("LayerNormalization", [("x", x.shape, x), ("s", s.shape, s), ("b", b.shape, b)],
                          [("y", x.shape)], attrs={"stash_type": 0})
    got, want, assigned = _run_both(model, feeds)
    assert assigned == {EP_NAME: ["LayerNormalization"]}, assigned
    assert got[0].dtype == np.float16
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32), rtol=0,
                               atol=2 ** -10 * float(np.abs(want[0]).max()))


@needs_onnx
def test_constant_of_shape_folds_and_integer_arithmetic_runs_on_npurt(registered):
    # m = ConstantOfShape(Shape(x), int64 1) * k: the value read from the tensor attribute and
    # folded per input shape, the product npurt's i64 Mul; `batch` keeps ORT from folding it.
    value = helper.make_tensor("v", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"], value=value),
             helper.make_node("Mul", ["c", "k"], ["m"])]
    model = _build(nodes, [("x", ("batch", 3)), ("k", (3,), TensorProto.INT64)], [("m", ("batch", 3), TensorProto.INT64)])
    for batch in (2, 5):
        got, want, assigned = _run_both(model, {"x": _rand(batch, 3), "k": np.array([4, -1, 2 ** 62])})
        assert sorted(assigned.get(EP_NAME, [])) == ["ConstantOfShape", "Mul", "Shape"], assigned
        _assert_close(got, want)
        assert got[0].shape == (batch, 3)
    # A float value does not fold: npurt's Expand of the value to the folded shape.
    nodes[1] = helper.make_node("ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5]))
    nodes[2] = helper.make_node("Add", ["c", "x"], ["m"])
    model = _build(nodes, [("x", ("batch", 3))], [("m", ("batch", 3))])
    got, want, assigned = _run_both(model, {"x": _rand(4, 3)})
    assert sorted(assigned.get(EP_NAME, [])) == ["Add", "ConstantOfShape", "Shape"], assigned
    _assert_close(got, want)


@needs_onnx
def test_symbolic_dims_compile_per_input_shape_and_match(registered):
    # Batch and sequence are named dims (as exporters write them): the group is compiled at the
    # first run with each shape, and a shape seen before reuses its graph.
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Gelu", ["hb"], ["g"]),
        helper.make_node("LayerNormalization", ["g", "gamma", "beta"], ["ln"]),
        helper.make_node("Softmax", ["ln"], ["y"]),
    ]
    inits = [("w", _rand(8, 6)), ("b", _rand(6)), ("gamma", _rand(6)), ("beta", _rand(6))]
    model = _build(nodes, [("x", ("batch", "seq", 8))], [("y", ("batch", "seq", 6))], initializers=inits)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    subgraphs = [(s.ep_name, len(s.get_nodes())) for s in sess.get_provider_graph_assignment_info()]
    assert subgraphs == [(EP_NAME, len(nodes))], subgraphs
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for shape in [(2, 3, 8), (1, 7, 8), (2, 3, 8), (4, 1, 8)]:
        feeds = {"x": _rand(*shape)}
        _assert_close(sess.run(None, feeds), ref.run(None, feeds))


@needs_onnx
def test_four_threads_on_one_session_equal_a_serial_run(registered):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Gelu", ["h"], ["y"])]
    # A symbolic batch, each thread its own: the first runs compile concurrently.
    model = _build(nodes, [("x", ("n", 32))], [("y", ("n", 24))], initializers=[("w", _rand(32, 24))])
    so = ort.SessionOptions()
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    feeds = [{"x": _rand(8 + i, 32)} for i in range(4)]
    serial = [ort.InferenceSession(model, sess_options=so).run(None, f)[0] for f in feeds]
    results: "list[object]" = [None] * 4

    def work(i):
        for _ in range(10):
            results[i] = sess.run(None, feeds[i])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, s in zip(results, serial):
        np.testing.assert_array_equal(r, s)



@needs_onnx
def test_four_threads_feeding_one_array_to_one_session_equal_a_serial_run(registered):
    # On the CPU backend a run reads ORT's input buffers in place; four runs given the same
    # array at once find it lent to another run and stage it instead: the same results.
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = _build(nodes, [("x", (64, 32))], [("y", (64, 24))], initializers=[("w", _rand(32, 24))])
    so = ort.SessionOptions()
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model, sess_options=so)
    feeds = {"x": _rand(64, 32)}
    serial = sess.run(None, feeds)[0]
    results: "list[list[object]]" = [[] for _ in range(4)]

    def work(i):
        for _ in range(20):
            results[i].append(sess.run(None, feeds)[0])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rs in results:
        assert len(rs) == 20
        for r in rs:
            np.testing.assert_array_equal(r, serial)

F16_CASES = {
    # op, input shapes, output shape, attributes, positive inputs
    "Relu": ("Relu", [(4, 6)], (4, 6), {}, False),
    "Add": ("Add", [(2, 4, 6), (6,)], (2, 4, 6), {}, False),
    "Div": ("Div", [(4, 6), (4, 6)], (4, 6), {}, True),
    "MatMul": ("MatMul", [(2, 5, 8), (8, 3)], (2, 5, 3), {}, False),
    "Softmax": ("Softmax", [(3, 7)], (3, 7), {}, False),
    "Gelu": ("Gelu", [(4, 6)], (4, 6), {}, False),
    "LayerNormalization": ("LayerNormalization", [(3, 8), (8,), (8,)], (3, 8), {}, False),
    "Transpose": ("Transpose", [(2, 3, 4)], (4, 3, 2), {}, False),
}


@needs_onnx
@pytest.mark.parametrize("case", sorted(F16_CASES))
def test_an_f16_node_runs_on_npurt_and_matches_the_f32_model_within_f16_rounding(registered, case):
    # ORT's CPU EP lacks f16 kernels for several of these ops, so the reference is the same
    # model in f32 on the CPU EP, fed the same (f16-representable) values.
    op, shapes, out, attrs, positive = F16_CASES[case]
    names = [f"i{k}" for k in range(len(shapes))]
    node = helper.make_node(op, names, ["y"], **attrs)
    f16 = {n: _rand(*s, positive=positive).astype(np.float16) for n, s in zip(names, shapes)}

    def model(elem):
        return _build([node], [(n, s, elem) for n, s in zip(names, shapes)], [("y", out, elem)])

    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(_npurt_devices(), {})
    sess = ort.InferenceSession(model(TensorProto.FLOAT16), sess_options=so)
    assigned = [(s.ep_name, [n.op_type for n in s.get_nodes()]) for s in sess.get_provider_graph_assignment_info()]
    assert assigned == [(EP_NAME, [op])], assigned
    (got,) = sess.run(None, f16)
    ref = ort.InferenceSession(model(TensorProto.FLOAT), providers=["CPUExecutionProvider"])
    (want,) = ref.run(None, {n: a.astype(np.float32) for n, a in f16.items()})
    assert got.dtype == np.float16 and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    # f16 keeps 11 significant bits: half an ulp of the largest output is 2^-11 of it.
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=4e-3 * scale)


def test_npurt_ort_session_selects_the_device_numbered_device_id():
    # npurt.ort.session hands ORT only the OrtEpDevice numbered `device_id` when one is offered
    # (so ORT's view of the session's device is npurt's), else every device of the EP.
    from types import SimpleNamespace

    import npurt.ort

    devs = [SimpleNamespace(ep_metadata={"npurt.backend": "acl", "npurt.device": str(i)}) for i in range(3)]
    assert npurt.ort._for_device(devs, "2") == [devs[2]]
    assert npurt.ort._for_device(devs, None) == devs
    assert npurt.ort._for_device(devs, "7") == devs, "the EP itself refuses a device past the backend's"


@needs_onnx
@pytest.mark.parametrize("spelling", ["int8", "i8"])
def test_precision_int8_reaches_npurts_compile(registered, capfd, monkeypatch, spelling):
    # int8 runs npurt's Linear layers as dynamic int8 products where the CPU has AMX-INT8 or
    # AVX-512-VNNI, else in f32 with one warning saying why: the compile log says which, and
    # the results stay within the quantisation error of ORT's CPU EP.
    monkeypatch.delenv("NPURT_PRECISION", raising=False)
    model = _build([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                   [("x", (2, 4, 64))], [("y", (2, 4, 48))], initializers=[("w", _rand(64, 48)), ("b", _rand(48))])
    line, err = _ep_log_line(capfd, {"backend": "cpu", "precision": spelling}, model)
    assert "precision int8," in line, err[-3000:]
    ran = "precision int8: 1 of 1 Linear layers run as dynamic int8 products" in err
    assert ran or "precision int8 is not available" in err, err[-3000:]
    so = ort.SessionOptions()
    so.add_provider_for_devices(_npurt_devices(), {"backend": "cpu", "precision": spelling})
    sess = ort.InferenceSession(model, sess_options=so)
    feeds = {"x": _rand(2, 4, 64)}
    got = sess.run(None, feeds)[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(got - want).max() <= 0.03 * np.abs(want).max(), (ran, np.abs(got - want).max())
