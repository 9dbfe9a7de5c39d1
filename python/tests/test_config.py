"""Every configuration setter accepts good values and rejects bad ones with a ValueError."""

from __future__ import annotations

import numpy as np
import pytest

import npurt


@pytest.fixture()
def cfg() -> npurt.Runtime:
    return npurt.Runtime(backend="cpu", env=False)


GOOD = [
    ("set_optimization_config", {"config": {"memory_pool": False, "memory_reuse": True, "parallel_scheduling": False,
                                            "hardware_mapping": "default"}}),
    ("set_optimization_config", {"config": {"hardware_mapping": "optimized"}}),
    ("set_memory_pool_size", {"mb": 64}),
    ("set_memory_pool_size", {"mb": 0.5}),
    ("set_memory_reuse", {"enabled": True, "strategy": "aggressive"}),
    ("set_memory_reuse", {"enabled": True, "strategy": "conservative"}),
    ("set_memory_reuse", {"enabled": False}),
    ("set_memory_reuse", {"enabled": True, "strategy": "greedy-by-size"}),
    ("set_memory_reuse", {"enabled": True, "strategy": "first_fit"}),
    ("set_memory_alignment", {"bytes": 128}),
    ("set_max_streams", {"count": 4}),
    ("set_scheduling_strategy", {"strategy": "latency"}),
    ("set_scheduling_strategy", {"strategy": "throughput"}),
    ("set_scheduling_strategy", {"strategy": "balanced"}),
    ("set_batch_size", {"size": 8}),
    ("set_hardware_mapping_strategy", {"strategy": "auto"}),
    ("set_hardware_mapping_strategy", {"strategy": "cube_prefer"}),
    ("set_hardware_mapping_strategy", {"strategy": "vector_prefer"}),
    ("set_compute_unit_utilization", {"cube": 0.5, "vector": 1.0}),
    ("set_compute_unit_utilization", {"cube": 1.0, "vector": 1.0}),
]

BAD = [
    ("set_optimization_config", {"config": {"memory_pool": 1}}),
    ("set_optimization_config", {"config": {"fusion": True}}),
    ("set_optimization_config", {"config": {"hardware_mapping": "fast"}}),
    ("set_optimization_config", {"config": "memory_pool"}),
    ("set_memory_pool_size", {"mb": 0}),
    ("set_memory_pool_size", {"mb": -5}),
    ("set_memory_pool_size", {"mb": "64"}),
    ("set_memory_pool_size", {"mb": float("nan")}),
    ("set_memory_reuse", {"enabled": "yes"}),
    ("set_memory_reuse", {"enabled": True, "strategy": "reckless"}),
    ("set_memory_alignment", {"bytes": 100}),
    ("set_memory_alignment", {"bytes": 8}),
    ("set_memory_alignment", {"bytes": 1 << 20}),
    ("set_max_streams", {"count": 0}),
    ("set_max_streams", {"count": 10 ** 6}),
    ("set_max_streams", {"count": 2.5}),
    ("set_scheduling_strategy", {"strategy": "fastest"}),
    ("set_batch_size", {"size": 0}),
    ("set_batch_size", {"size": True}),
    ("set_hardware_mapping_strategy", {"strategy": "cube"}),
    ("set_compute_unit_utilization", {"cube": 0, "vector": 1}),
    ("set_compute_unit_utilization", {"cube": 1.5, "vector": 1}),
    ("set_compute_unit_utilization", {"cube": 0.5, "vector": -0.1}),
]


@pytest.mark.parametrize("setter,kwargs", GOOD, ids=lambda v: str(v))
def test_setter_accepts(cfg: npurt.Runtime, setter: str, kwargs: dict) -> None:
    getattr(cfg, setter)(**kwargs)
    # The runtime still works afterwards.
    x = cfg.asarray(np.array([-1.0, 1.0], np.float32))
    np.testing.assert_array_equal(cfg.execute("Relu", [x]).output.to_numpy(), [0.0, 1.0])


@pytest.mark.parametrize("setter,kwargs", BAD, ids=lambda v: str(v))
def test_setter_rejects(cfg: npurt.Runtime, setter: str, kwargs: dict) -> None:
    with pytest.raises(ValueError) as e:
        getattr(cfg, setter)(**kwargs)
    assert str(e.value)


def test_module_setters_exist_and_validate() -> None:
    for name in ("set_optimization_config", "set_memory_pool_size", "set_memory_reuse", "set_memory_alignment",
                 "set_max_streams", "set_scheduling_strategy", "set_batch_size", "set_hardware_mapping_strategy",
                 "set_compute_unit_utilization"):
        f = getattr(npurt, name)
        doc = " ".join((f.__doc__ or "").split())
        assert "new runtime" in doc or "runtime is kept" in doc, name
    with pytest.raises(ValueError):
        npurt.set_scheduling_strategy(strategy="nope")


def test_settings_take_effect_for_new_tensors(cfg: npurt.Runtime) -> None:
    old = cfg.Tensor((4,))
    cfg.set_memory_alignment(bytes=8192)
    new = cfg.Tensor((4,))
    assert new.data_ptr() % 8192 == 0
    assert cfg.config()["alignment"] == 8192
    # Tensors made before keep working.
    old.from_numpy(np.ones(4, np.float32))
    assert cfg.execute("Add", [old, old]).output.to_numpy().tolist() == [2.0] * 4
    cfg.set_memory_pool_size(mb=8)
    assert cfg.get_memory_info().limit_bytes == 8 << 20
    cfg.set_max_streams(count=2)
    s1, s2 = cfg.Stream(), cfg.Stream()
    with pytest.raises(npurt.DeviceError, match="max_streams"):
        cfg.Stream()
    del s1, s2
    cfg.set_optimization_config({"hardware_mapping": "default"})
    a = cfg.asarray(np.ones((8, 8), np.float32))
    assert cfg.execute("MatMul", [a, a]).tier == "generic"
    cfg.set_optimization_config({"hardware_mapping": "optimized"})
    assert cfg.execute("MatMul", [cfg.asarray(np.ones((8, 8), np.float32))] * 2).tier == "fast"
    cfg.set_compute_unit_utilization(cube=0.5, vector=0.25)
    assert cfg.get_compute_unit_utilization() == (0.5, 0.25)


def test_runtime_kwargs() -> None:
    r = npurt.Runtime(backend="cpu", devices=[0], env=False, memory_pool=True, pool_size_mb=32, alignment=256,
                      max_streams=4, scheduling="latency", batch_size=2, hardware_mapping_strategy="cube_prefer",
                      precision="f32")
    c = r.config()
    assert c["alignment"] == 256 and c["max_streams"] == 4 and c["scheduling"] == "latency"
    assert c["pool_limit_bytes"] == 32 << 20 and c["hw_mapping"] == "cube_prefer"
    with pytest.raises(ValueError, match="unknown setting"):
        npurt.Runtime(backend="cpu", turbo=True)
    with pytest.raises(ValueError):
        npurt.Runtime(backend="tpu")


def test_set_batch_size_is_the_default_batch_of_models_made_afterwards(tmp_path) -> None:
    import tiny_model

    r = npurt.Runtime(backend="cpu", env=False)
    model = tiny_model.write(tmp_path / "tiny")
    assert r.get_batch_size() is None
    assert r.bert("tiny", seq=8).input_shapes[0] == (1, 8)
    assert r.Embedder(model).batch_size == 32
    before = r.Embedder(model)
    r.set_batch_size(size=3)
    assert r.get_batch_size() == 3 and r.config()["batch_size"] == 3
    assert r.bert("tiny", seq=8).input_shapes == [(3, 8)] * 3
    assert r.Embedder(model).batch_size == 3
    # Given values win; models made before keep theirs.
    assert r.bert("tiny", batch=2, seq=8).input_shapes[0] == (2, 8)
    assert r.Embedder(model, batch_size=5).batch_size == 5
    assert before.batch_size == 32
    # As a Runtime keyword too.
    r2 = npurt.Runtime(backend="cpu", env=False, batch_size=4)
    assert r2.bert("tiny", seq=8).input_shapes[0] == (4, 8)
    doc = " ".join((npurt.set_batch_size.__doc__ or "").split())
    assert "Embedder" in doc and "bert" in doc and "batch_size" in doc


PRECISIONS = ["f32", "fp32", "bf16", "f16", "fp16", "half", "int8", "i8", "auto", "F16", "Half"]


@pytest.mark.parametrize("p", PRECISIONS)
def test_every_runtime_precision_is_accepted(p: str) -> None:
    r = npurt.Runtime(backend="cpu", env=False, precision=p)
    canonical = {"fp32": "f32", "fp16": "f16", "half": "f16", "i8": "int8"}.get(p.lower(), p.lower())
    assert r.config()["precision"] == canonical
    assert r._rt().config()["precision"] == canonical


@pytest.mark.parametrize("p", ["fp8", "int4", "f64", "", "bfloat16", 16])
def test_unknown_precisions_are_rejected(p) -> None:
    with pytest.raises(ValueError, match="precision"):
        npurt.Runtime(backend="cpu", env=False, precision=p)
    r = npurt.Runtime(backend="cpu", env=False)
    g = r.Graph()
    g.output(g.node("Relu", [g.input("x", (2,))]))
    with pytest.raises(ValueError, match="precision"):
        g.compile(precision=p)
    with pytest.raises(ValueError, match="precision"):
        r.bert("tiny", seq=8, precision=p)


def test_compute_unit_utilization_caps_cpu_threads_and_says_so() -> None:
    import os

    r = npurt.Runtime(backend="cpu", env=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    r.set_compute_unit_utilization(cube=0.5, vector=0.25)
    assert r.config()["threads"] == max(1, round(0.5 * cores))
    assert r.get_compute_unit_utilization() == (0.5, 0.25)
    r.set_compute_unit_utilization(cube=1.0, vector=1.0)
    assert r.config()["threads"] is None
    for f in (npurt.set_compute_unit_utilization, npurt.Runtime.set_compute_unit_utilization):
        doc = " ".join((f.__doc__ or "").split())
        for words in ("CPU backend", "max(cube, vector)", "worker-thread count", "Ascend and CUDA", "no effect"):
            assert words in doc, (f, words)
