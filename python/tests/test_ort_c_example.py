"""ort-ep/examples/c/run_model.c, the C example of docs/ONNXRUNTIME.md: built against ONNX
Runtime's C API and run on a small model, its printed output is checked against NumPy and an
unknown EP option must fail naming the key.

It needs ORT's C header, which the `onnxruntime` wheel does not ship: set $ORT_HOME to an
unpacked ONNX Runtime release (include/onnxruntime_c_api.h, lib/libonnxruntime.so) or
$ORT_INCLUDE_DIR to a directory holding the header (the library then comes from $ORT_HOME/lib
or the wheel). Without a header, a C compiler, the wheel's library, the onnx package or
libnpurt_ort_ep.so, the test skips and says which is missing.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ep_lib

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCE = REPO / "ort-ep" / "examples" / "c" / "run_model.c"


def _include_dir() -> "pathlib.Path | None":
    for d in (os.environ.get("ORT_INCLUDE_DIR"), os.environ.get("ORT_HOME") and os.environ["ORT_HOME"] + "/include"):
        if d and (pathlib.Path(d) / "onnxruntime_c_api.h").is_file():
            return pathlib.Path(d)
    return None


def _ort_library(tmp: pathlib.Path) -> "pathlib.Path | None":
    """A directory holding libonnxruntime.so (and its soname link) to link against."""
    home = os.environ.get("ORT_HOME")
    if home and (pathlib.Path(home) / "lib" / "libonnxruntime.so").exists():
        return pathlib.Path(home) / "lib"
    try:
        import onnxruntime
    except ImportError:
        return None
    capi = pathlib.Path(onnxruntime.__file__).parent / "capi"
    found = sorted(capi.glob("libonnxruntime.so.*"))
    if not found:
        return None
    d = tmp / "ortlib"
    d.mkdir()
    for name in ("libonnxruntime.so", "libonnxruntime.so.1"):
        (d / name).symlink_to(found[0])
    return d


W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
B = np.array([0.5, -1.0, 0.25], dtype=np.float32)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    include = _include_dir()
    if include is None:
        pytest.skip("ONNX Runtime's C header is not present: set ORT_HOME (an ORT release) or ORT_INCLUDE_DIR")
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    ep = ep_lib()
    if ep is None:
        pytest.skip("libnpurt_ort_ep.so is not built (cargo build -p npurt-ort-ep --release)")
    onnx = pytest.importorskip("onnx", reason="the onnx package writes the example's model")
    from onnx import TensorProto, helper, numpy_helper

    tmp = tmp_path_factory.mktemp("c_example")
    libdir = _ort_library(tmp)
    if libdir is None:
        pytest.skip("no libonnxruntime: neither $ORT_HOME/lib nor the onnxruntime wheel has one")
    exe = tmp / "run_model"
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{include}", str(SOURCE), f"-L{libdir}",
                    "-lonnxruntime", f"-Wl,-rpath,{libdir}", "-o", str(exe)], check=True)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "c_example", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    model = tmp / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    return exe, ep, model


def _run(example, *options):
    exe, ep, model = example
    return subprocess.run([str(exe), str(ep), str(model), *options], capture_output=True, text=True, timeout=120)


def test_the_c_example_runs_the_model_on_npurt(example):
    r = _run(example, "backend=cpu", "precision=f32")
    assert r.returncode == 0, r.stderr
    assert "NpurtExecutionProvider (vendor npurt)" in r.stdout
    got = np.array([float(line.split("=")[1]) for line in r.stdout.splitlines() if line.startswith("y[")])
    x = (np.arange(8, dtype=np.float32) - 3.5) / 2
    want = np.maximum(x.reshape(2, 4) @ W + B, 0).ravel()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_c_example_reports_a_bad_option_by_name(example):
    r = _run(example, "bogus=1")
    assert r.returncode != 0
    assert "bogus" in r.stderr
