"""Every op of the table against NumPy, op names, attributes and validation errors."""

from __future__ import annotations

import numpy as np
import pytest

import npurt
from op_cases import cases, tolerance


@pytest.mark.parametrize("case", cases(), ids=lambda c: f"{c[0]}-{'-'.join(map(str, c[2]))}")
def test_op_matches_numpy(rt: npurt.Runtime, case) -> None:
    op, arrays, attrs, ref = case
    r = rt.execute(op, [rt.asarray(a) for a in arrays], **attrs)
    out = r.outputs[0].to_numpy()
    want = np.asarray(ref(*arrays))
    assert out.shape == want.shape
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tolerance(op, out.dtype),
                               atol=tolerance(op, out.dtype))


def test_attention_tokens_first_layout_equals_heads_first(rt: npurt.Runtime) -> None:
    r = np.random.default_rng(7)
    q, k, v = (r.standard_normal(s).astype(np.float32) for s in ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)))
    mask = r.standard_normal((2, 1, 1, 7)).astype(np.float32)
    want = rt.execute("Attention", [rt.asarray(a) for a in (q, k, v, mask)]).outputs[0].to_numpy()
    tokens_first = [np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v)]
    got = rt.execute("Attention", [rt.asarray(a) for a in (*tokens_first, mask)], layout="bsnd").outputs[0].to_numpy()
    assert got.shape == (2, 5, 3, 8)
    np.testing.assert_allclose(got.transpose(0, 2, 1, 3), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(npurt.ValidationError, match="layout"):
        rt.execute("Attention", [rt.asarray(a) for a in (q, k, v)], layout="bhsd")


def test_every_op_of_the_table_is_covered() -> None:
    canonical = {n.lower(): n for n in npurt.op_names()}
    canonical["transpose"] = "Permute"
    canonical["rmsnormalization"] = "RmsNorm"
    assert {canonical[c[0].lower()] for c in cases()} == set(npurt.op_names())


@pytest.mark.parametrize("name", ["ReLU", "Relu", "relu", "RELU"])
def test_op_names_are_case_insensitive_with_onnx_spellings(rt: npurt.Runtime, name: str) -> None:
    x = rt.asarray(np.array([-1.0, 2.0], np.float32))
    assert rt.execute(name, [x]).op == "ReLU"


def test_result_fields(rt: npurt.Runtime) -> None:
    a = rt.asarray(np.ones((32, 32), np.float32))
    r = rt.execute("MatMul", [a, a])
    assert r.op == "MatMul"
    assert r.selected_implementation and r.tier in ("fast", "generic", "reference")
    assert r.device == "cpu:0"
    assert r.execution_time_ms is not None and r.execution_time_ms >= 0
    assert r.hardware_unit == "Cube" and r.unit
    assert r.flops == 2 * 32 ** 3 and r.bytes > 0
    assert len(r.outputs) == 1 and r.outputs[0].shape == (32, 32)
    text = repr(r)
    assert "MatMul" in text and r.selected_implementation in text
    assert rt.execute("Add", [a, a]).hardware_unit == "Vector"


def test_issue_example_validation_message(rt: npurt.Runtime) -> None:
    a = rt.Tensor((1024, 1024))
    b = rt.Tensor((512, 512))
    with pytest.raises(npurt.ValidationError) as e:
        rt.execute(op_type="MatMul", inputs=[a, b])
    assert str(e.value) == "MatMul: inner dimensions differ: a is [1024, 1024], b is [512, 512]"
    assert isinstance(e.value, ValueError) and isinstance(e.value, npurt.Error)
    assert e.value.op == "MatMul"


def test_unknown_op_and_attribute(rt: npurt.Runtime) -> None:
    x = rt.asarray(np.ones(3, np.float32))
    with pytest.raises(npurt.ValidationError, match="unknown op"):
        rt.execute("Frobnicate", [x])
    with pytest.raises(npurt.ValidationError, match="unknown attribute"):
        rt.execute("Relu", [x], axis=1)
    with pytest.raises(npurt.ValidationError):
        rt.execute("Relu", [])


def test_outputs_in_place_and_checked(rt: npurt.Runtime) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    x = rt.asarray(a)
    out = rt.Tensor((2, 3))
    ptr = out.data_ptr()
    r = rt.execute("Relu", [x], outputs=[out])
    assert r.outputs[0] is out and out.data_ptr() == ptr
    np.testing.assert_array_equal(out.to_numpy(), np.maximum(a, 0))
    with pytest.raises(npurt.ValidationError):
        rt.execute("Relu", [x], outputs=[rt.Tensor((3, 2))])
    with pytest.raises(npurt.ValidationError):
        rt.execute("Relu", [x], outputs=[rt.Tensor((2, 3), dtype=np.float16)])
    with pytest.raises(npurt.ValidationError, match="in place"):
        rt.execute("Relu", [x], outputs=[np.zeros((2, 3), np.float32)])
    # None entries are allocated.
    r = rt.execute("Relu", [x], outputs=[None])
    assert r.outputs[0] is not out


def test_numpy_inputs_are_copied_in(rt: npurt.Runtime) -> None:
    a = np.array([[1.0, -1.0]], np.float32)
    np.testing.assert_array_equal(rt.execute("Relu", [a]).output.to_numpy(), [[1.0, 0.0]])


def test_issue_example_runs_as_written() -> None:
    import npurt as runtime

    A = runtime.Tensor((1024, 1024), dtype=np.float32); A.from_numpy(np.random.randn(1024, 1024).astype(np.float32))  # noqa: E702
    B = runtime.Tensor((1024, 1024), dtype=np.float32); B.from_numpy(np.random.randn(1024, 1024).astype(np.float32))  # noqa: E702
    C = runtime.Tensor((1024, 1024), dtype=np.float32)
    result = runtime.execute(op_type="MatMul", inputs=[A, B], outputs=[C])
    print(result.selected_implementation, result.device, result.execution_time_ms, result.hardware_unit)
    np.testing.assert_allclose(C.to_numpy(), A.to_numpy() @ B.to_numpy(), rtol=1e-3, atol=1e-2)


def test_done_when_one_liner() -> None:
    r = npurt.execute("Relu", [npurt.Tensor((2, 2))])
    assert "ReLU" in repr(r)


def test_help_shows_docstrings() -> None:
    for f in (npurt.execute, npurt.Tensor, npurt.stream_scope, npurt.set_memory_reuse, npurt.bert, npurt.Embedder):
        assert f.__doc__ and len(f.__doc__) > 40, f
    import inspect

    assert list(inspect.signature(npurt.execute).parameters)[:3] == ["op_type", "inputs", "outputs"]
