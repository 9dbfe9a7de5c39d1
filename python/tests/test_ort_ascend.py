"""NpurtExecutionProvider on Ascend, over acl-emu (a host library exporting CANN's symbols), through
the stock `onnxruntime` wheel: the NPU device the EP offers, and a transformer-like model run on
it as one fused node, against ORT's CPU EP, with the emulator's counters of a warm run.

As test_ascend_emu.py arranges it: a fake toolkit whose lib64/ links libascendcl.so,
libnnopbase.so and libopapi.so to libacl_emu.so, named by ASCEND_TOOLKIT_HOME, the SoC chosen
with ACL_EMU_SOC. Each case runs Python in a subprocess (the emulator reads its variables when
it loads, once per process); the child is this file run as a script (`child` below), which
prints one JSON line. Skips, with the reason, without onnxruntime (>= 1.24), onnx,
libacl_emu.so (`cargo build -p acl-emu`, or ACL_EMU_LIB) or libnpurt_ort_ep.so
(`cargo build -p npurt-ort-ep --release`, or NPURT_ORT_EP_LIB).

`check_model_on_npu(model_path, soc, ...)` takes any ONNX file: a BERT export drops in as it is.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
EP_NAME = "NpurtExecutionProvider"
#: Outputs within this × max |reference| of ORT's CPU EP at precision f32: the 910B2 computes
#: f32 products in f32; the 910A's Cube computes them in fp16.
TOLERANCE = {"Ascend910B2": 1e-4, "Ascend910A": 2e-2}


# --- the child: runs in a process whose environment points npurt at the emulator ---------------

class RunCounters(ctypes.Structure):
    """acl-emu's `aclEmuRunCounters` (acl-sys/src/fns.rs): seventeen uint64_t, in this order."""

    _fields_ = [(n, ctypes.c_uint64) for n in (
        "phase1_calls", "phase2_calls", "h2d_copies", "d2h_copies", "d2d_copies", "h2d_bytes", "d2h_bytes",
        "d2d_bytes", "allocations", "allocated_bytes", "synchronizations", "replays", "modelled_ns",
        "modelled_cube_ns", "modelled_vector_ns", "modelled_copy_ns", "modelled_roofline_ns")]


def _feeds(sess, seed: int = 5) -> dict:
    """Random inputs for every input of `sess` (symbolic dims as 1 for batch-like, else 8;
    integer inputs such as token ids in 0..=99, masks as ones)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else (1 if "batch" in str(d) else 8) for d in i.shape]
        if i.type == "tensor(float)":
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in i.name:
            feeds[i.name] = np.ones(shape, dtype=np.int64)
        elif "type" in i.name:  # BERT's token_type_ids: segment 0
            feeds[i.name] = np.zeros(shape, dtype=np.int64)
        else:
            feeds[i.name] = rng.integers(0, 100, size=shape).astype(np.int64)
    return feeds


def child(model_path: str, lib: str, emu: str, options: dict) -> dict:
    """Registers the library, runs the model on the NPU device (a first run, then a warm run
    whose emulator counters are read) and on the CPU EP; returns what the parent checks."""
    import onnxruntime as ort

    ort.set_default_logger_severity(1)  # info: the EP's and npurt's log records show on stderr
    if lib == "package":  # the Python package's own library, as npurt.ort.session registers it
        import npurt.ort

        lib = npurt.ort.get_library_path()
    ort.register_execution_provider_library("npurt", lib)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    out = {"devices": [{"type": str(d.device.type).rsplit(".", 1)[-1], "vendor_id": d.device.vendor_id,
                        "vendor": d.device.vendor, "ep_vendor": d.ep_vendor, "hw_metadata": dict(d.device.metadata),
                        "ep_metadata": dict(d.ep_metadata)} for d in devices]}
    if model_path == "-":
        return out
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(devices, options)
    sess = ort.InferenceSession(model_path, sess_options=so)
    sess.disable_fallback()
    out["providers"] = sess.get_providers()
    out["subgraphs"] = [[s.ep_name, [n.op_type for n in s.get_nodes()]] for s in sess.get_provider_graph_assignment_info()]
    feeds = _feeds(sess)
    sess.run(None, feeds)  # the first run: node by node (executors recorded, operands pinned)
    lib_emu = ctypes.CDLL(emu)  # the same library the backend loaded (one instance per process)

    def counted() -> "tuple[list, dict]":
        assert lib_emu.aclEmuResetRunCounters() == 0
        res = sess.run(None, feeds)
        c = RunCounters()
        assert lib_emu.aclEmuGetRunCounters(ctypes.byref(c), ctypes.sizeof(c)) == 0
        return res, {n: getattr(c, n) for n, _ in RunCounters._fields_}

    _, out["capture_counters"] = counted()  # the second run captures (where capture is on) and replays
    got, out["counters"] = counted()  # a warm run
    want = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, feeds)
    out["inputs"] = len(feeds)
    out["outputs"] = len(got)
    out["rel_err"] = [float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-30)) for g, w in zip(got, want)]
    return out


def session_child(model_path: str, options: dict) -> dict:
    """Runs the model through `npurt.ort.session` (the package's library, its device choice)."""
    import onnxruntime as ort

    import npurt.ort

    ort.set_default_logger_severity(1)
    sess = npurt.ort.session(model_path, **options)
    sess.disable_fallback()
    feeds = _feeds(sess)
    got = sess.run(None, feeds)
    want = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, feeds)
    return {"providers": sess.get_providers(),
            "rel_err": [float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-30)) for g, w in zip(got, want)]}


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "session":
    print("RESULT " + json.dumps(session_child(sys.argv[2], json.loads(sys.argv[5]))))
    sys.exit(0)
if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    result = child(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
    print("RESULT " + json.dumps(result))
    sys.exit(0)


# --- the tests (parent process) ----------------------------------------------------------------

import pytest  # noqa: E402 - the child above needs no pytest

from conftest import emu_lib, ep_lib  # noqa: E402
from ort_support import TINY_BERT, ort_bert  # noqa: E402

try:
    import onnxruntime as ort
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"onnxruntime is not importable ({e}); pip install onnxruntime", allow_module_level=True)
if tuple(int(p) for p in ort.__version__.split(".")[:2] if p.isdigit()) < (1, 24):
    pytest.skip(f"onnxruntime {ort.__version__} is older than 1.24, the EP ABI the library needs",
                allow_module_level=True)
try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"the onnx package is not importable ({e}); pip install onnx", allow_module_level=True)

LIB = ep_lib()
if LIB is None:
    pytest.skip("libnpurt_ort_ep.so is not built (cargo build -p npurt-ort-ep --release, or set NPURT_ORT_EP_LIB)",
                allow_module_level=True)
EMU = emu_lib()
if EMU is None:
    pytest.skip("libacl_emu.so not found under target/debug or target/release "
                "(run `cargo build -p acl-emu` or set ACL_EMU_LIB)", allow_module_level=True)


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("acl-toolkit")
    (root / "lib64").mkdir()
    for name in ("libascendcl.so", "libnnopbase.so", "libopapi.so"):
        (root / "lib64" / name).symlink_to(EMU)
    return root


def run_child(toolkit: pathlib.Path, soc: str, model: str, options: dict, lib: str = str(LIB), mode: str = "child",
              **env: str) -> "tuple[dict, str]":
    """Runs `child` in a fresh Python with npurt pointed at the emulator as `soc`; returns its
    result and its stderr (ORT's log, with the EP's and npurt's records)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("NPURT_") and k not in ("ASCEND_HOME_PATH", "ACL_EMU_DEVICES", "ACL_EMU_FAIL",
                                                      "ACL_EMU_SOC")}
    e.update({"ASCEND_TOOLKIT_HOME": str(toolkit), "ACL_EMU_SOC": soc})
    e.update(env)
    p = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), mode, model, lib, str(EMU),
                        json.dumps(options)], env=e, capture_output=True, text=True, timeout=600, cwd=HERE)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert p.returncode == 0 and line is not None, f"child failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads(line[len("RESULT "):]), p.stderr


def check_model_on_npu(toolkit: pathlib.Path, model_path: "str | os.PathLike[str]", soc: str,
                       precision: str = "f32", lib: str = str(LIB)) -> dict:
    """Runs `model_path` on the NPU device over acl-emu as `soc` (through the library `lib`, a
    path or "package" for the Python package's) and checks: every node on the
    EP in one fused node, outputs within TOLERANCE[soc] × max |reference| of the CPU EP, aclnn
    launches in the warm run, copies only for the inputs and outputs, and no node on the host
    tier. Returns the child's result (counters included) for further checks."""
    r, err = run_child(toolkit, soc, str(model_path), {"backend": "acl", "precision": precision, "log_level": "info"},
                       lib=lib)
    print(json.dumps({k: r[k] for k in ("subgraphs", "capture_counters", "counters", "rel_err")}))
    assert r["providers"][0] == EP_NAME, r["providers"]
    assert len(r["subgraphs"]) == 1 and r["subgraphs"][0][0] == EP_NAME, r["subgraphs"]
    assert "npurt's acl backend" in err, err[-3000:]
    assert "host tier" not in err, "\n".join(ln for ln in err.splitlines() if "host tier" in ln)
    tol = TOLERANCE[soc]
    assert all(e <= tol for e in r["rel_err"]), (r["rel_err"], tol)
    # The second run launches every node's aclnn operator once, captured, and replays them;
    # a warm run replays the capture with no aclnn call of its own (graph_capture auto).
    cap, c = r["capture_counters"], r["counters"]
    assert cap["phase2_calls"] > 0 and cap["replays"] == 1, cap
    assert c["phase2_calls"] == 0 and c["phase1_calls"] == 0 and c["replays"] == 1, c
    # The warm run copies the inputs in and the outputs out, and nothing else crosses: a node
    # on the host tier would copy its operands too.
    assert c["h2d_copies"] <= r["inputs"] and c["d2h_copies"] <= r["outputs"], c
    return r


def transformer_block(path: pathlib.Path, d: int = 32, f: int = 64, seq: int = 8, batch: int = 2) -> pathlib.Path:
    """A one-head encoder block on [batch, seq, d] tokens: attention (MatMul + Add projections,
    Transpose, MatMul, Mul by 1/sqrt(d), Softmax), residual, LayerNormalization, a Tanh-gated
    feed-forward (MatMul + Add), residual, LayerNormalization. Written to `path`."""
    rng = np.random.default_rng(33)

    def w(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    nodes = []
    inits = {}

    def linear(x, name, din, dout):
        inits[f"{name}_w"], inits[f"{name}_b"] = w(din, dout), w(dout)
        nodes.append(helper.make_node("MatMul", [x, f"{name}_w"], [f"{name}_m"]))
        nodes.append(helper.make_node("Add", [f"{name}_m", f"{name}_b"], [f"{name}_y"]))
        return f"{name}_y"

    def layer_norm(x, name):
        inits[f"{name}_g"], inits[f"{name}_b"] = 1 + w(d), w(d)
        nodes.append(helper.make_node("LayerNormalization", [x, f"{name}_g", f"{name}_b"], [f"{name}_y"], axis=-1,
                                      epsilon=1e-5))
        return f"{name}_y"

    q, k, v = (linear("x", n, d, d) for n in ("q", "k", "v"))
    nodes.append(helper.make_node("Transpose", [k], ["kt"], perm=[0, 2, 1]))
    nodes.append(helper.make_node("MatMul", [q, "kt"], ["s"]))
    inits["scale"] = np.array(1 / np.sqrt(d), dtype=np.float32)
    nodes.append(helper.make_node("Mul", ["s", "scale"], ["ss"]))
    nodes.append(helper.make_node("Softmax", ["ss"], ["p"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["p", v], ["a"]))
    nodes.append(helper.make_node("Add", ["x", "a"], ["r1"]))
    h = layer_norm("r1", "ln1")
    g = linear(h, "ff1", d, f)
    nodes.append(helper.make_node("Tanh", [g], ["gt"]))
    o = linear("gt", "ff2", f, d)
    nodes.append(helper.make_node("Add", [h, o], ["r2"]))
    y = layer_norm("r2", "ln2")
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d])],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return transformer_block(tmp_path_factory.mktemp("models") / "block.onnx")


@pytest.mark.parametrize("lib", ["built", "package"])
@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend910A"])
def test_an_application_sees_an_npu_device(toolkit, soc, lib):
    # The built libnpurt_ort_ep.so, and the Python package's native module (npurt.ort).
    r, _ = run_child(toolkit, soc, "-", {}, lib=str(LIB) if lib == "built" else "package")
    assert len(r["devices"]) == 1, r["devices"]
    d = r["devices"][0]
    assert d["type"] == "NPU" and d["vendor_id"] == 0x19E5 and d["vendor"] == "Huawei", d
    assert d["ep_vendor"] == "npurt", d
    assert d["hw_metadata"].get("npurt.soc") == soc and soc in d["hw_metadata"].get("Description", ""), d
    m = d["ep_metadata"]
    assert (m.get("npurt.backend"), m.get("npurt.device"), m.get("npurt.soc"), m.get("npurt.emulated")) == \
        ("acl", "0", soc, "1"), m


def test_each_emulated_device_is_offered(toolkit):
    r, _ = run_child(toolkit, "Ascend910B2", "-", {}, ACL_EMU_DEVICES="2")
    assert [d["ep_metadata"]["npurt.device"] for d in r["devices"]] == ["0", "1"], r["devices"]
    assert all(d["type"] == "NPU" for d in r["devices"]), r["devices"]


def test_npurt_backend_cpu_offers_the_cpu_device_even_with_an_npu(toolkit):
    r, _ = run_child(toolkit, "Ascend910B2", "-", {}, NPURT_BACKEND="cpu")
    assert [(d["type"], d["ep_metadata"]["npurt.backend"]) for d in r["devices"]] == [("CPU", "cpu")], r["devices"]


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend910A"])
def test_a_transformer_block_runs_on_the_npu_as_one_fused_node(toolkit, block, soc):
    r = check_model_on_npu(toolkit, block, soc)
    ops = set(r["subgraphs"][0][1])
    assert {"LayerNormalization", "Softmax", "Transpose"} <= ops, ops


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The BERT encoder of bench/peers/ort_bert.py as HF's exporter writes it (embeddings with
    the position-id shape chain, the additive mask, 2 layers of attention, erf GELU and
    LayerNormalization; symbolic batch and sequence dims), small: hidden 64, 4 heads."""
    d = tmp_path_factory.mktemp("bert")
    model = ort_bert().build_unfused(onnx, np, TINY_BERT, str(d), seed=33)
    onnx.save(model, str(d / "unfused.onnx"))
    return d / "unfused.onnx"


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend910A"])
def test_a_bert_export_runs_on_the_npu_as_one_fused_node(toolkit, bert, soc):
    r = check_model_on_npu(toolkit, bert, soc)
    ops = set(r["subgraphs"][0][1])
    assert {"Gather", "LayerNormalization", "Softmax", "Erf", "Shape", "Slice"} <= ops, ops


@pytest.mark.parametrize("capture, replays", [("on", 1), ("off", 0)])
def test_graph_capture_decides_whether_the_warm_run_replays(toolkit, block, capture, replays):
    r, err = run_child(toolkit, "Ascend910B2", str(block), {"backend": "acl", "graph_capture": capture,
                                                           "log_level": "info"})
    c = r["counters"]
    print(capture, c)
    assert f"graph capture {capture}" in err, err[-3000:]
    assert c["replays"] == replays, c
    # Node by node, each aclnn operator is launched in the warm run; replayed, none is.
    assert (c["phase2_calls"] > 0) == (capture == "off"), c
    assert all(e <= TOLERANCE["Ascend910B2"] for e in r["rel_err"]), r["rel_err"]


def test_precision_f16_on_the_npu_stays_within_fp16_rounding(toolkit, block):
    r, err = run_child(toolkit, "Ascend910B2", str(block), {"backend": "acl", "precision": "f16", "log_level": "info"})
    assert "precision f16," in err, err[-3000:]
    assert all(e <= 2e-2 for e in r["rel_err"]), r["rel_err"]


def test_the_python_packages_library_runs_the_block_on_the_npu(toolkit, block):
    check_model_on_npu(toolkit, block, "Ascend910B2", lib="package")


def test_npurt_ort_session_runs_on_the_npu_named_by_device_id(toolkit, block):
    # Two emulated devices: npurt.ort.session selects the OrtEpDevice numbered device_id and
    # the EP runs on that device.
    for device in (0, 1):
        r, err = run_child(toolkit, "Ascend910B2", str(block), {"backend": "acl", "device_id": device,
                                                               "log_level": "info"},
                           mode="session", ACL_EMU_DEVICES="2")
        assert r["providers"][0] == EP_NAME, r
        assert f"device Ascend910B2 (acl:{device})" in err, err[-3000:]
        assert all(e <= TOLERANCE["Ascend910B2"] for e in r["rel_err"]), r["rel_err"]
