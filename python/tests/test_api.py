"""The public API as help() and type checkers see it: docstrings, signatures with the
issue's parameter names, module functions mirroring npurt.Runtime, documented stubs."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

import npurt

# The issue's signatures (item 2 and 3): the leading parameters by name, in order
# ("**x": a **kwargs parameter; None: a parameter whose name the issue does not give).
ISSUE = {
    "Tensor": ["shape", "dtype", "device"],
    "execute": ["op_type", "inputs", "outputs", "**attrs"],
    "execute_batch": ["tasks"],
    "stream_scope": ["stream"],
    "default_stream": [],
    "synchronize": [],
    "get_device_count": [],
    "set_device": [None],
    "get_device": [],
    "supports_zero_copy": [],
    "asarray": ["ndarray", "device"],
    "from_dlpack": ["obj"],
    "MemoryPool": ["pool_size_mb"],
    "get_memory_info": [],
    "get_hardware_utilization": [],
    "reset_hardware_utilization": [],
    "set_optimization_config": [None],
    "set_memory_pool_size": ["mb"],
    "set_memory_reuse": ["enabled", "strategy"],
    "set_memory_alignment": ["bytes"],
    "set_max_streams": ["count"],
    "set_scheduling_strategy": ["strategy"],
    "set_batch_size": ["size"],
    "set_hardware_mapping_strategy": ["strategy"],
    "set_compute_unit_utilization": ["cube", "vector"],
    "Runtime": ["backend", "devices", "**config"],
    "bert": ["preset_or_model_dir", "batch", "seq", "precision", "device"],
    "Embedder": ["model_dir", "batch_size"],
}
METHODS = {
    (npurt.Tensor, "from_numpy"): [None],
    (npurt.Tensor, "to_numpy"): [],
    (npurt.Tensor, "as_numpy"): [],
    (npurt.Tensor, "data_ptr"): [],
    (npurt.Tensor, "to"): ["device"],
    (npurt.Stream, "synchronize"): [],
    (npurt.MemoryPool, "allocate"): ["shape", "dtype"],
    (npurt.Graph, "compile"): ["device", "precision", "streams"],
    (npurt.CompiledGraph, "run"): ["inputs"],
    (npurt.CompiledGraph, "profile"): [],
    (npurt.Embedder, "embed"): [None],
    (npurt.Event, "record"): [],
    (npurt.Event, "wait"): [],
    (npurt.Event, "query"): [],
    (npurt.Event, "synchronize"): [],
    (npurt.Event, "elapsed_ms"): [None],
}


def params(f) -> list:
    ps = list(inspect.signature(f).parameters.values())
    if ps and ps[0].name == "self":
        ps = ps[1:]
    return ps


def check_leading(f, expected: list, what: str) -> None:
    ps = params(f)
    required = [p for p in ps if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL, p.KEYWORD_ONLY)]
    if not expected:
        assert not required, f"{what}: the issue calls it without arguments, but {required} are required"
        return
    named = [p for p in ps if p.kind != p.KEYWORD_ONLY]
    assert len(named) >= len(expected), f"{what}: {ps} lacks {expected}"
    for want, p in zip(expected, named):
        if want is None:
            assert p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD), f"{what}: {p} is not positional"
        elif want.startswith("**"):
            var = [q for q in ps if q.kind == q.VAR_KEYWORD]
            assert var and var[0].name == want[2:], f"{what}: no **{want[2:]} in {ps}"
        else:
            assert p.name == want and p.kind == p.POSITIONAL_OR_KEYWORD, f"{what}: {p} where the issue has {want}"
    # Nothing beyond the issue's parameters is required.
    extra = [p for p in required if p.name not in expected and p not in named[:len(expected)]]
    assert not extra, f"{what}: {extra} are required too"


def test_every_public_name_has_a_docstring() -> None:
    assert npurt.__doc__
    missing = []
    for name in npurt.__all__:
        if name == "__version__":
            assert isinstance(npurt.__version__, str) and npurt.__version__
            continue
        obj = getattr(npurt, name)
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for m, f in vars(obj).items():
                if m.startswith("_") or not callable(f) and not isinstance(f, property):
                    continue
                if not (inspect.getdoc(f) or "").strip():
                    missing.append(f"{name}.{m}")
    assert not missing, f"no docstring: {missing}"


@pytest.mark.parametrize("name", sorted(ISSUE))
def test_issue_signatures(name: str) -> None:
    obj = getattr(npurt, name)
    assert name in npurt.__all__
    check_leading(obj.__init__ if inspect.isclass(obj) else obj, ISSUE[name], name)


@pytest.mark.parametrize("cls,method", sorted(METHODS, key=lambda k: (k[0].__name__, k[1])),
                         ids=lambda v: getattr(v, "__name__", v))
def test_issue_method_signatures(cls, method: str) -> None:
    f = getattr(cls, method)
    assert (inspect.getdoc(f) or "").strip(), f"{cls.__name__}.{method} has no docstring"
    check_leading(f, METHODS[(cls, method)], f"{cls.__name__}.{method}")


def test_module_functions_are_real_functions_mirroring_runtime() -> None:
    mirrored = [n for n in npurt.__all__
                if inspect.isfunction(getattr(npurt, n)) and inspect.isfunction(getattr(npurt.Runtime, n, None))
                and n != "bert"]
    assert len(mirrored) >= 27, mirrored
    # bert is npurt._graph's (with runtime= and seed= besides); Runtime.bert takes the rest.
    theirs = [(p.name, p.default) for p in params(npurt.Runtime.bert)]
    mine = {p.name: p.default for p in params(npurt.bert)}
    assert all(mine.get(n, "absent") == d for n, d in theirs), (mine, theirs)
    for name in mirrored:
        f = getattr(npurt, name)
        # Defined in npurt's own source (so type checkers read the signature and docstring).
        assert f.__module__ == "npurt" and f.__code__.co_filename.endswith("__init__.py"), name
        mine = [(p.name, p.kind, p.default) for p in params(f)]
        theirs = [(p.name, p.kind, p.default) for p in params(getattr(npurt.Runtime, name))]
        assert mine == theirs, f"npurt.{name}{mine} differs from Runtime.{name}{theirs}"
        assert "return" in f.__annotations__, f"npurt.{name} has no return annotation"


def test_help_is_useful() -> None:
    doc = inspect.getdoc(npurt.execute)
    for word in ("op_type", "inputs", "outputs", "ValidationError", "ExecutionResult", "stream_scope"):
        assert word in doc, word


def test_native_stubs_document_every_class() -> None:
    stub = pathlib.Path(npurt.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    names = {c.name for c in classes}
    from npurt import _native

    native_classes = {n for n, v in vars(_native).items() if inspect.isclass(v) and not n.startswith("_")}
    assert native_classes <= names, f"classes without stubs: {native_classes - names}"
    for c in classes:
        assert ast.get_docstring(c), f"_native.pyi: class {c.name} has no docstring"
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    native_functions = {n for n, v in vars(_native).items()
                        if callable(v) and not inspect.isclass(v) and not n.startswith("__")}
    assert native_functions <= functions, f"functions without stubs: {native_functions - functions}"
