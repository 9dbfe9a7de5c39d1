"""Compiled graphs against eager results, and BERT run from several threads at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import npurt


def build_mlp(rt: npurt.Runtime, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, g: np.ndarray, beta: np.ndarray):
    gr = rt.Graph()
    x = gr.input("x", (4, 16))
    h = gr.node("Linear", [x, gr.constant("w1", w1), gr.constant("b1", b1)])
    h = gr.node("Gelu", [h])
    h = gr.node("MatMul", [h, gr.constant("w2", w2)])
    y = gr.node("LayerNorm", [h, gr.constant("g", g), gr.constant("beta", beta)], eps=1e-5)
    gr.output(y, gr.node("ReduceMean", [y], axes=(1,), keepdims=False))
    return gr


def test_graph_against_eager(rt: npurt.Runtime) -> None:
    r = np.random.default_rng(0)
    w1, b1 = r.standard_normal((32, 16)).astype(np.float32), r.standard_normal(32).astype(np.float32)
    w2 = r.standard_normal((32, 8)).astype(np.float32)
    g, beta = r.standard_normal(8).astype(np.float32), r.standard_normal(8).astype(np.float32)
    xs = r.standard_normal((4, 16)).astype(np.float32)
    gr = build_mlp(rt, w1, b1, w2, g, beta)
    assert "nodes" in repr(gr)
    cg = gr.compile()
    assert cg.input_names == ["x"] and len(cg.output_names) == 2
    out, mean = cg.run([xs])
    h = rt.execute("Linear", [xs, w1, b1]).output
    h = rt.execute("Gelu", [h]).output
    h = rt.execute("MatMul", [h, w2]).output
    y = rt.execute("LayerNorm", [h, g, beta], eps=1e-5).output
    np.testing.assert_allclose(out.to_numpy(), y.to_numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean.to_numpy(), y.to_numpy().mean(1), rtol=1e-4, atol=1e-4)
    # Dict inputs and Tensor inputs give the same.
    np.testing.assert_array_equal(cg.run({"x": xs})[0].to_numpy(), out.to_numpy())
    np.testing.assert_array_equal(cg.run([rt.asarray(xs)])[0].to_numpy(), out.to_numpy())
    with pytest.raises(npurt.ValidationError):
        cg.run([np.zeros((3, 16), np.float32)])
    with pytest.raises(npurt.ValidationError):
        cg.run({"y": xs})
    plan = cg.memory_plan
    assert plan is not None and plan.arena_bytes >= plan.load_bytes > 0 and plan.ratio >= 1.0
    prof = cg.profile([xs])
    assert prof.total_ms > 0 and prof.nodes and "traceEvents" in prof.chrome_trace()
    fused = cg.fusion()
    assert set(fused) == {"attention", "bias_gelu", "linear_gelu", "add_layer_norm", "merged_linears"}, fused
    assert fused["linear_gelu"] <= fused["bias_gelu"], fused


def test_linears_reading_one_input_run_as_one_product(rt: npurt.Runtime) -> None:
    r = np.random.default_rng(3)
    gr = rt.Graph()
    x = gr.input("x", (2, 5, 16))
    ws = [r.standard_normal((n, 16)).astype(np.float32) for n in (16, 8, 16)]
    bs = [r.standard_normal(w.shape[0]).astype(np.float32) for w in ws]
    outs = [
        gr.node("Linear", [x, gr.constant(f"w{i}", w), gr.constant(f"b{i}", b)]) for i, (w, b) in enumerate(zip(ws, bs))
    ]
    gr.output(*[gr.node("Relu", [o]) for o in outs])
    cg = gr.compile()
    assert cg.fusion()["merged_linears"] == 1, cg.fusion()
    xs = r.standard_normal((2, 5, 16)).astype(np.float32)
    for got, w, b in zip(cg.run([xs]), ws, bs):
        np.testing.assert_allclose(got.to_numpy(), np.maximum(xs @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_graph_errors_name_the_node(rt: npurt.Runtime) -> None:
    gr = rt.Graph()
    a = gr.input("a", (2, 3))
    with pytest.raises(npurt.ValidationError, match="bad"):
        gr.node("MatMul", [a, a], name="bad")


def test_compile_options(rt: npurt.Runtime) -> None:
    gr = rt.Graph()
    a = gr.input("a", (8, 8))
    gr.output(gr.node("Relu", [gr.node("MatMul", [a, a])]))
    for kw in ({"streams": 1}, {"streams": 2}, {"precision": "bf16"}, {"device": 1}):
        cg = gr.compile(**kw)
        x = np.eye(8, dtype=np.float32)
        np.testing.assert_allclose(cg.run([x])[0].to_numpy(), x, atol=1e-2)
    with pytest.raises(ValueError):
        gr.compile(precision="fp8")


@pytest.fixture(scope="module")
def minilm(rt: npurt.Runtime) -> npurt.CompiledGraph:
    return rt.bert("minilm-l6", batch=2, seq=16)


def bert_inputs(seed: int, batch: int = 2, seq: int = 16):
    r = np.random.default_rng(seed)
    ids = r.integers(101, 30000, (batch, seq)).astype(np.int64)
    tt = np.zeros((batch, seq), np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 3:] = 0
    return [ids, tt, mask]


def test_bert_inputs_and_outputs(minilm: npurt.CompiledGraph) -> None:
    assert minilm.input_names == ["input_ids", "token_type_ids", "attention_mask"]
    assert minilm.input_dtypes == [np.int64, np.int64, np.float32]
    assert minilm.input_shapes == [(2, 16)] * 3
    out = minilm.run(bert_inputs(0))[0]
    assert out.shape == (2, 16, 384)
    a = out.to_numpy()
    assert np.isfinite(a).all()
    # A float mask gives what the int64 one does.
    ids, tt, mask = bert_inputs(0)
    np.testing.assert_array_equal(minilm.run([ids, tt, mask.astype(np.float32)])[0].to_numpy(), a)
    with pytest.raises(ValueError):
        npurt.bert("no-such-model")


def test_four_threads_run_one_compiled_bert(minilm: npurt.CompiledGraph) -> None:
    feeds = [bert_inputs(i) for i in range(4)]
    serial = [minilm.run(f)[0].to_numpy() for f in feeds]
    results: list = [None] * 4
    errors: list = []

    def work(i: int) -> None:
        try:
            for _ in range(2):
                results[i] = minilm.run(feeds[i])[0].to_numpy()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)


@pytest.fixture()
def own() -> npurt.Runtime:
    """A runtime of the test's own: the module's runtime has its user streams taken by the
    compiled BERT that four threads ran at once (each concurrent run keeps its streams)."""
    return npurt.Runtime(backend="cpu", env=False)


def test_bert_model_dir_without_weights_is_an_error(own: npurt.Runtime, tmp_path) -> None:
    import tiny_model

    rt = own
    d = tiny_model.write(tmp_path / "no-weights", with_weights=False)
    with pytest.raises(npurt.Error, match="model.safetensors") as e:
        rt.bert(d, batch=1, seq=8)
    assert str(d) in str(e.value)
    # With its weights the directory compiles, and its weights are used (not random ones).
    d2 = tiny_model.write(tmp_path / "with-weights")
    ids = (np.arange(8, dtype=np.int64) % 12).reshape(1, 8)
    feed = [ids, np.zeros_like(ids), np.ones((1, 8), np.float32)]
    a = rt.bert(d2, batch=1, seq=8).run(feed)[0].to_numpy()
    b = npurt.bert(d2, batch=1, seq=8, runtime=rt, seed=1).run(feed)[0].to_numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, rt.bert("tiny", batch=1, seq=8).run(feed)[0].to_numpy())


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("p", ["f16", "fp16", "half"])
def test_f16_precision_stays_close_to_f32(own: npurt.Runtime, p: str) -> None:
    rt = own
    r = np.random.default_rng(5)
    gr = rt.Graph()
    x = gr.input("x", (16, 64))
    w1, b1 = r.standard_normal((128, 64)).astype(np.float32) / 8, r.standard_normal(128).astype(np.float32)
    w2, b2 = r.standard_normal((64, 128)).astype(np.float32) / 11, r.standard_normal(64).astype(np.float32)
    h = gr.node("Gelu", [gr.node("Linear", [x, gr.constant("w1", w1), gr.constant("b1", b1)])])
    gr.output(gr.node("Linear", [h, gr.constant("w2", w2), gr.constant("b2", b2)]))
    xs = r.standard_normal((16, 64)).astype(np.float32)
    f32 = gr.compile(precision="f32").run([xs])[0].to_numpy()
    half = gr.compile(precision=p).run([xs])[0].to_numpy()
    assert cosine(half, f32) >= 0.999
    assert not np.array_equal(half, f32), "f16 weights should round the products"

    ids = (np.arange(32, dtype=np.int64) * 7 % 50).reshape(2, 16)
    feed = [ids, np.zeros_like(ids), np.ones((2, 16), np.float32)]
    ref = rt.bert("tiny", batch=2, seq=16, precision="f32").run(feed)[0].to_numpy()
    got = rt.bert("tiny", batch=2, seq=16, precision=p).run(feed)[0].to_numpy()
    assert cosine(got, ref) >= 0.999
    # The runtime's setting is the default of compiled graphs.
    r16 = npurt.Runtime(backend="cpu", env=False, precision=p)
    got2 = r16.bert("tiny", batch=2, seq=16).run(feed)[0].to_numpy()
    np.testing.assert_array_equal(got2, got)


def test_store_slow_precision_keeps_bf16_weights_on_any_device(rt: npurt.Runtime) -> None:
    # Two Linears over distinct inputs (not merged), 64x64 weights with f32 biases.
    r = np.random.default_rng(3)
    gr = rt.Graph()
    xs = [gr.input(f"x{i}", (1, 4, 64)) for i in range(2)]
    ws = [r.standard_normal((64, 64)).astype(np.float32) / 8 for _ in range(2)]
    bs = [r.standard_normal(64).astype(np.float32) for _ in range(2)]
    gr.output(*[gr.node("Linear", [x, gr.constant(f"w{i}", w), gr.constant(f"b{i}", b)])
                for i, (x, w, b) in enumerate(zip(xs, ws, bs))])
    f32 = gr.compile(precision="f32")
    asked = gr.compile(precision="bf16", store_slow_precision=True)
    plain = gr.compile(precision="bf16")
    weight_bytes = sum(w.nbytes for w in ws)
    assert f32.constant_bytes == weight_bytes + sum(b.nbytes for b in bs)
    # Asked for, the weights are bf16 whether or not the device has a bf16 unit.
    assert asked.constant_bytes == f32.constant_bytes - weight_bytes // 2
    # Not asked for, a device that computes bf16 slowly keeps f32 weights.
    assert plain.constant_bytes in (f32.constant_bytes, asked.constant_bytes)
    ins = [r.standard_normal((1, 4, 64)).astype(np.float32) for _ in range(2)]
    for got, x, w, b in zip(asked.run(ins), ins, ws, bs):
        np.testing.assert_allclose(got.to_numpy(), x @ w.T + b, rtol=2e-2, atol=2e-2)
