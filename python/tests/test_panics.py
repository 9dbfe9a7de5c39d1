"""No Rust panic reaches Python as anything but npurt.Error.

Every native call runs under one guard (`errors::guard` in python/src/errors.rs). The
test hook `_native._inject_panic(name)` makes the guarded call `name` panic inside its
guard; each case below arms one call, makes it, and expects `npurt.Error` ("internal
error"), not PyO3's PanicException (a BaseException), then checks that the call works
again once disarmed. A call that lost its guard does not panic, so its case fails. The
list of guarded names is read from the Rust source, so a new native call needs a case.
"""

from __future__ import annotations

import pathlib
import re
import types

import numpy as np
import pytest

import npurt
from npurt import _native
import tiny_model

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def o(tmp_path_factory: pytest.TempPathFactory) -> types.SimpleNamespace:
    rt = npurt.Runtime(backend="cpu", cpu_devices=2, env=False)
    t = rt.asarray(np.arange(4, dtype=np.float32))
    g = rt.Graph()
    x = g.input("x", (4,))
    g.output(g.node("Relu", [x]))
    cg = g.compile()
    s = rt.Stream()
    e = s.record_event()
    report = _native.execute("Relu", [t._t], None, [], None)[0]
    model = tiny_model.write(tmp_path_factory.mktemp("tiny") / "model")
    emb = rt.Embedder(model, batch_size=2)
    llm_dir = tiny_model.write_llm(tmp_path_factory.mktemp("tiny-llm") / "model")
    llm = npurt.LLM(llm_dir, runtime=rt, max_batch=2)
    return types.SimpleNamespace(rt=rt, n=rt._rt(), t=t, g=g, x=x, cg=cg, s=s, e=e, report=report, model=model,
                                 emb=emb, llm_dir=llm_dir, llm=llm)


CASES = {
    # the runtime
    "Runtime.__init__": lambda o: npurt.Runtime(backend="cpu", env=False),
    "Runtime.id": lambda o: o.n.id,
    "Runtime.backend": lambda o: o.rt.backend,
    "Runtime.device_count": lambda o: o.rt.get_device_count(),
    "Runtime.device_label": lambda o: o.n.device_label(0),
    "Runtime.device_name": lambda o: o.rt.device_name(),
    "Runtime.supports_zero_copy": lambda o: o.rt.supports_zero_copy(),
    "Runtime.config": lambda o: o.rt.config(),
    "Runtime.kernels": lambda o: o.n.kernels(),
    "Runtime.empty": lambda o: o.rt.Tensor((2,)),
    "Runtime.to_device": lambda o: o.t.to(1),
    "Runtime.default_stream": lambda o: o.rt.default_stream(),
    "Runtime.new_stream": lambda o: o.rt.Stream(),
    "Runtime.event": lambda o: o.rt.Event(),
    "Runtime.synchronize": lambda o: o.rt.synchronize(),
    "Runtime.synchronize_all": lambda o: o.n.synchronize_all(),
    "Runtime.memory_info": lambda o: o.rt.get_memory_info(),
    "Runtime.pool_stats": lambda o: o.rt.MemoryPool(1).stats(),
    "Runtime.release_cached": lambda o: o.rt.release_cached(),
    "Runtime.utilisation": lambda o: o.rt.get_hardware_utilization(),
    "Runtime.reset_utilisation": lambda o: o.rt.reset_hardware_utilization(),
    "Runtime.__repr__": lambda o: repr(o.n),
    # tensors
    "Tensor.shape": lambda o: o.t.shape,
    "Tensor.strides": lambda o: o.t._t.strides,
    "Tensor.dtype": lambda o: o.t.dtype,
    "Tensor.device": lambda o: o.t.device,
    "Tensor.device_label": lambda o: o.t.device_label,
    "Tensor.nbytes": lambda o: o.t.nbytes,
    "Tensor.numel": lambda o: o.t.size,
    "Tensor.data_ptr": lambda o: o.t.data_ptr(),
    "Tensor.is_contiguous": lambda o: o.t.is_contiguous(),
    "Tensor.supports_zero_copy": lambda o: o.t.supports_zero_copy(),
    "Tensor.shares_storage": lambda o: o.t._t.shares_storage(o.t._t),
    "Tensor.runtime_id": lambda o: o.t._t.runtime_id,
    "Tensor.runtime": lambda o: o.t._t.runtime(),
    "Tensor.copy_from": lambda o: o.t.from_numpy(np.arange(4, dtype=np.float32)),
    "Tensor.to_numpy": lambda o: o.t.to_numpy(),
    "Tensor.host_view": lambda o: o.t.as_numpy(),
    "Tensor.reshape": lambda o: o.t.reshape(2, 2),
    "Tensor.dlpack": lambda o: o.t.__dlpack__(),
    "Tensor.__repr__": lambda o: repr(o.t._t),
    # streams and events
    "Stream.device": lambda o: o.s.device,
    "Stream.is_async": lambda o: o.s.is_async,
    "Stream.runtime_id": lambda o: o.s._s.runtime_id,
    "Stream.label": lambda o: o.s.label,
    "Stream.synchronize": lambda o: o.s.synchronize(),
    "Stream.record": lambda o: o.s.record_event(),
    "Stream.wait": lambda o: o.s.wait_event(o.e),
    "Stream.__repr__": lambda o: repr(o.s._s),
    "Event.record": lambda o: o.e.record(o.s),
    "Event.query": lambda o: o.e.query(),
    "Event.synchronize": lambda o: o.e.synchronize(),
    "Event.elapsed_ms": lambda o: o.e.elapsed_ms(o.e),
    "Event.__repr__": lambda o: repr(o.e._e),
    # execution
    "execute": lambda o: o.rt.execute("Relu", [o.t]),
    "execute_batch": lambda o: o.rt.execute_batch([("Relu", [o.t])]),
    "op_names": lambda o: npurt.op_names(),
    "Report.__repr__": lambda o: repr(o.report),
    # graphs
    "Graph.__init__": lambda o: o.rt.Graph(),
    "Graph.input": lambda o: o.rt.Graph().input("y", (2,)),
    "Graph.constant": lambda o: o.rt.Graph().constant("c", np.ones(2, np.float32)),
    "Graph.node": lambda o: fresh(o).node("Relu", [fresh.x]),
    "Graph.output": lambda o: fresh(o).output(fresh.x),
    "Graph.has_name": lambda o: o.g.node("Relu", [o.x]),
    "Graph.value": lambda o: o.g._value(o.x.id),
    "Graph.num_nodes": lambda o: repr(o.g),
    "Graph.dump": lambda o: o.g._g.dump(),
    "Graph.compile": lambda o: o.g.compile(),
    "CompiledGraph.inputs": lambda o: o.cg._cg.inputs(),
    "CompiledGraph.outputs": lambda o: o.cg._cg.outputs(),
    "CompiledGraph.device": lambda o: o.cg.device,
    "CompiledGraph.runtime": lambda o: o.cg._cg.runtime(),
    "CompiledGraph.run": lambda o: o.cg.run([np.ones(4, np.float32)]),
    "CompiledGraph.memory_plan": lambda o: o.cg.memory_plan,
    "CompiledGraph.profile": lambda o: o.cg.profile(),
    "CompiledGraph.fusion": lambda o: o.cg.fusion(),
    "CompiledGraph.constant_bytes": lambda o: o.cg.constant_bytes,
    "CompiledGraph.__repr__": lambda o: repr(o.cg._cg),
    "bert": lambda o: o.rt.bert("tiny", batch=1, seq=8),
    "Embedder.__init__": lambda o: o.rt.Embedder(o.model),
    "Embedder.batch_size": lambda o: o.emb.batch_size,
    "Embedder.embed": lambda o: o.emb.embed(["hello world"]),
    "LLM.__init__": lambda o: npurt.LLM(o.llm_dir, runtime=o.rt, max_batch=1),
    "LLM.encode": lambda o: o.llm.encode("hello world"),
    "LLM.generate": lambda o: o.llm.generate(["hello", "quick brown fox"], max_new_tokens=3),
    "LLM.stream": lambda o: list(o.llm.stream("hello", max_new_tokens=3)),
    "LLMStream.__next__": lambda o: next(o.llm.stream("hello", max_new_tokens=3)),
    # module functions
    "compiled_backends": lambda o: npurt.compiled_backends(),
    "init_logging": lambda o: npurt.enable_logging(),
    "validate_config": lambda o: o.rt.set_scheduling_strategy(strategy="latency"),
    "max_streams_bound": lambda o: npurt.Runtime(backend="cpu", env=False, max_streams=2),
}


def fresh(o: types.SimpleNamespace) -> npurt.Graph:
    """A new graph with one input (left in ``fresh.x``), for the cases that change a graph."""
    g = o.rt.Graph()
    fresh.x = g.input("x", (4,))  # type: ignore[attr-defined]
    return g


def guarded_names() -> list:
    names = []
    for f in sorted(SRC.glob("*.rs")):
        names += re.findall(r'guard\(\s*py,\s*"([^"]+)"', f.read_text())
    return names


def test_every_guarded_call_has_a_case() -> None:
    if not SRC.is_dir():
        pytest.skip(f"no Rust source at {SRC}")
    names = guarded_names()
    assert len(names) == len(set(names)), "a guard name is used twice"
    assert set(names) == set(CASES), (f"guarded calls without a case: {sorted(set(names) - set(CASES))}; "
                                      f"cases without a guarded call: {sorted(set(CASES) - set(names))}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_panic_is_npurt_error(o: types.SimpleNamespace, name: str) -> None:
    call = CASES[name]
    _native._inject_panic(name)
    try:
        with pytest.raises(npurt.Error, match="internal error") as e:
            call(o)
    finally:
        _native._inject_panic(None)
    assert f"injected panic in {name}" in str(e.value)
    assert type(e.value) is npurt.Error
    call(o)  # works again


def test_panic_injection_is_off_by_default(o: types.SimpleNamespace) -> None:
    _native._inject_panic(None)
    assert o.rt.execute("Relu", [o.t]).output.to_numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
