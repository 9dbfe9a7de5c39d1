"""Whole models through `npurt.ort.session` against ORT's CPU EP.

- the BERT encoder that bench/peers/ort_bert.py builds as Hugging Face's exporter writes it
  (Shape -> Gather -> Unsqueeze -> Slice for the position ids, symbolic batch and sequence
  dims), small (2 layers, hidden 64): every node on `NpurtExecutionProvider`, in one fused
  node, outputs within 1e-4 x max |reference| of the CPU EP at two input shapes;
- the same builder with the real all-MiniLM-L6-v2 weights (scripts/fetch-test-assets.sh),
  against the CPU EP and the repository's MiniLM reference;
- a Conv in front of a MatMul block: ORT keeps the Conv, npurt the rest, results match;
- four threads on one session: each result equals the serial run's;
- an f64 MatMul and an int8 MatMul: left to ORT, results correct.

Each skips, saying why, without onnxruntime >= 1.24 or the onnx package.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
import threading

import numpy as np
import pytest

import npurt
import npurt.ort
from ort_support import SKIP, TINY_BERT, TensorProto, helper, onnx, ort_bert, rt, unregister_package_ep
from conftest import REPO

EP_NAME = "NpurtExecutionProvider"

pytestmark = pytest.mark.skipif(bool(SKIP), reason=SKIP or "onnxruntime and onnx present")


@pytest.fixture(scope="module")
def registered():
    yield
    unregister_package_ep()


def _session(path, optimize=True):
    so = rt.SessionOptions()
    if not optimize:  # the nodes reach the EP as exported (ORT's ReshapeFusion folds shape chains)
        so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = npurt.ort.session(path if isinstance(path, bytes) else str(path), backend="cpu", sess_options=so)
    sess.disable_fallback()  # a failing run is the EP's error, not a silent CPU retry
    return sess


def _subgraphs(sess):
    return [(s.ep_name, [n.name for n in s.get_nodes()]) for s in sess.get_provider_graph_assignment_info()]


def _bert_feeds(batch, seq, vocab, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, size=(batch, seq), dtype=np.int64)
    tt = np.zeros((batch, seq), np.int64)
    tt[:, seq // 2:] = 1
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - 2:] = 0  # a padded row
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": mask}


def _assert_within(got, want, rel=1e-4):
    scale = float(np.abs(want).max())
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= rel * scale, f"max abs diff {err} > {rel} x max |reference| {scale}"


def _build_bert(tmp_path, c, weights=None, shape_chains=False):
    ob = ort_bert()
    model = ob.build_unfused(onnx, np, c, str(tmp_path), seed=33, weights=weights, shape_chains=shape_chains)
    path = tmp_path / "unfused.onnx"
    onnx.save(model, str(path))
    return path, [n.name for n in model.graph.node]


@pytest.mark.parametrize("optimize", [True, False], ids=["ort-optimized", "as-exported"])
@pytest.mark.parametrize("shape_chains", [False, True], ids=["constant-reshapes", "shape-chain-reshapes"])
def test_the_bert_export_runs_entirely_on_npurt_in_one_fused_node(registered, tmp_path, shape_chains, optimize):
    # With shape_chains, each attention Reshape's target comes from Shape -> Gather ->
    # Unsqueeze -> Concat of the activation (as torch.onnx exports x.size()[:-1] + (nh, dh)).
    path, names = _build_bert(tmp_path, TINY_BERT, shape_chains=shape_chains)
    sess = _session(path, optimize)
    cpu = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sub = _subgraphs(sess)
    on_ep = [s for s in sub if s[0] == EP_NAME]
    assert len(on_ep) == 1 and len(sub) == 1, [(ep, len(n)) for ep, n in sub]
    if not optimize:
        assert sorted(on_ep[0][1]) == sorted(names)
    print(f"\nBERT tiny ({'shape chains' if shape_chains else 'constant shapes'}, "
          f"{'ORT-optimized' if optimize else 'as exported'}): {len(names)} exported nodes, "
          f"{len(on_ep[0][1])} on {EP_NAME} in 1 fused node")
    for batch, seq in ((2, 7), (1, 12), (2, 7)):
        feeds = _bert_feeds(batch, seq, TINY_BERT["vocab"], seed=batch * 100 + seq)
        (got,) = sess.run(None, feeds)
        (want,) = cpu.run(None, feeds)
        assert got.shape == (batch, seq, TINY_BERT["hidden"])
        _assert_within(got, want)


def _safetensors(path):
    """The tensors of a .safetensors file, read with numpy (no other dependency)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    kinds = {"F32": np.float32, "I64": np.int64, "F16": np.float16}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], kinds[meta["dtype"]]).reshape(meta["shape"])
    return out


def _minilm_dir():
    d = pathlib.Path(os.environ.get("NPURT_TEST_MODEL_DIR", REPO / "target/test-assets/all-MiniLM-L6-v2"))
    if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
        pytest.skip(f"no model at {d} (run scripts/fetch-test-assets.sh)")
    return d


def test_minilm_exported_with_the_builder_matches_the_cpu_ep_and_the_reference(registered, tmp_path):
    d = _minilm_dir()
    cfg = json.loads((d / "config.json").read_text())
    c = dict(vocab=cfg["vocab_size"], hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
             heads=cfg["num_attention_heads"], ffn=cfg["intermediate_size"],
             max_pos=cfg["max_position_embeddings"], type_vocab=cfg["type_vocab_size"], eps=cfg["layer_norm_eps"])
    tensors = _safetensors(d / "model.safetensors")

    def weights(name, shape, kind):
        w = tensors[name]
        # PyTorch's Linear keeps [out, in]; the export's MatMul reads [in, out].
        return w.T if w.ndim == 2 and name.startswith("encoder.") else w

    path, names = _build_bert(tmp_path, c, weights)
    sess = _session(path)
    sub = _subgraphs(sess)
    assert len(sub) == 1 and sub[0][0] == EP_NAME, [(ep, len(n)) for ep, n in sub]
    cpu = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = json.loads((REPO / "tests/fixtures/minilm_reference.json").read_text())
    case = ref["cases"][0]
    ids = np.asarray([case["input_ids"]], np.int64)
    feeds = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids)}
    (got,) = sess.run(None, feeds)
    (want,) = cpu.run(None, feeds)
    _assert_within(got, want)
    hidden = ref["first_case_last_hidden_state"]
    expect = np.asarray(hidden["values"], np.float64).reshape(hidden["shape"])
    # The reference is PyTorch's, printed to 6 decimals.
    np.testing.assert_allclose(got[0], expect, atol=2e-4, rtol=0)
    feeds = _bert_feeds(2, 9, c["vocab"], seed=7)
    _assert_within(sess.run(None, feeds)[0], cpu.run(None, feeds)[0])


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
        [helper.make_tensor_value_info(n, e, s) for n, e, s in outputs],
        initializer=[onnx.numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_a_conv_in_front_of_a_matmul_block_stays_on_ort_and_results_match(registered):
    rng = np.random.default_rng(5)
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c", "flat"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Softmax", ["t"], ["y"], axis=-1),
    ]
    inits = [("k", rng.standard_normal((2, 1, 3, 3)).astype(np.float32)),
             ("flat", np.array([0, 2, 16], np.int64)),
             ("w", rng.standard_normal((16, 8)).astype(np.float32)),
             ("b", rng.standard_normal(8).astype(np.float32))]
    model = _model(nodes, [("x", f, ["batch", 1, 4, 4])], [("y", f, ["batch", 2, 8])], inits)
    sess = _session(model)
    sub = _subgraphs(sess)
    placed = [(s.ep_name, n.op_type) for s in sess.get_provider_graph_assignment_info() for n in s.get_nodes()]
    conv_on = [ep for ep, op in placed if op == "Conv"]
    rest_on = {ep for ep, op in placed if op in ("Tanh", "Softmax")}
    assert conv_on == ["CPUExecutionProvider"] and rest_on == {EP_NAME}, sub
    cpu = rt.InferenceSession(model, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        feeds = {"x": rng.standard_normal((batch, 1, 4, 4)).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], cpu.run(None, feeds)[0], rtol=1e-5, atol=1e-6)


def test_four_threads_on_one_bert_session_equal_the_serial_run(registered, tmp_path):
    path, _ = _build_bert(tmp_path, TINY_BERT)
    sess = _session(path)
    feeds = [_bert_feeds(1 + k % 2, 5 + k, TINY_BERT["vocab"], seed=k) for k in range(4)]
    serial = [sess.run(None, f)[0] for f in feeds]
    results: "list[list]" = [[] for _ in feeds]
    errors = []

    def work(k):
        try:
            for _ in range(5):
                results[k].append(sess.run(None, feeds[k])[0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(4):
        assert len(results[k]) == 5
        for r in results[k]:
            np.testing.assert_array_equal(r, serial[k])


@pytest.mark.parametrize(
    "elem, dtype", [(TensorProto.DOUBLE, np.float64), (TensorProto.INT8, np.int8)] if onnx is not None else [])
def test_an_unsupported_dtype_stays_on_ort_with_correct_results(registered, elem, dtype):
    rng = np.random.default_rng(9)
    if dtype == np.int8:
        # ORT's CPU EP has no int8 MatMul; MatMulInteger is the int8 product (i32 out).
        nodes = [helper.make_node("MatMulInteger", ["a", "b"], ["y"])]
        out = TensorProto.INT32
        a = rng.integers(-5, 5, (3, 4), dtype=np.int8)
        b = rng.integers(-5, 5, (4, 2), dtype=np.int8)
        want = a.astype(np.int32) @ b.astype(np.int32)
    else:
        nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
        out = elem
        a = rng.standard_normal((3, 4))
        b = rng.standard_normal((4, 2))
        want = a @ b
    model = _model(nodes, [("a", elem, [3, 4]), ("b", elem, [4, 2])], [("y", out, [3, 2])])
    sess = _session(model)
    assert {ep for ep, _ in _subgraphs(sess)} == {"CPUExecutionProvider"}, _subgraphs(sess)
    (got,) = sess.run(None, {"a": a, "b": b})
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("a, b", [((3,), (3, 4)), ((2, 5, 3), (3,)), ((3,), (2, 3, 4)), ((3,), (3,))])
def test_matmul_with_a_1d_operand_runs_on_npurt_as_onnx_promotes_it(registered, a, b):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
    out = np.matmul(x, y)
    f = TensorProto.FLOAT
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", f, list(a)), ("b", f, list(b))],
                   [("y", f, list(out.shape))])
    sess = _session(model)
    assert [ep for ep, _ in _subgraphs(sess)] == [EP_NAME], _subgraphs(sess)
    (got,) = sess.run(None, {"a": x, "b": y})
    assert got.shape == out.shape
    np.testing.assert_allclose(got, out, rtol=1e-5, atol=1e-6)
