"""The modules of the ``npurt`` package do not import each other in a loop.

Each module's imports are read from its source with ``ast``: those at the top, and those
inside functions and classes (a lazy import still makes the two modules depend on each
other; it only defers the loop to the first call). Imports under ``if TYPE_CHECKING:`` are
left out: they never run (``typing.TYPE_CHECKING`` is false at run time) and exist only so
that annotations can name a class, which is what PEP 484 provides them for.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "npurt"


def is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` test is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(name: str, source: str, modules: Set[str]) -> Set[str]:
    """The package's modules (names in ``modules``; ``__init__`` for the package) that the
    module ``name`` with text ``source`` imports, outside ``if TYPE_CHECKING:`` blocks."""
    out: Set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import a, b
                out.update(a.name if a.name in modules else "__init__" for a in node.names)
            elif node.level == 1 and node.module is not None:  # from .a.b import c
                out.add(node.module.split(".")[0] if node.module.split(".")[0] in modules else "__init__")
            elif node.level == 0 and node.module is not None and node.module.split(".")[0] == "npurt":
                parts = node.module.split(".")
                if len(parts) > 1:
                    out.add(parts[1] if parts[1] in modules else "__init__")
                else:
                    out.update(a.name if a.name in modules else "__init__" for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "npurt":
                    out.add(parts[1] if len(parts) > 1 and parts[1] in modules else "__init__")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source, filename=name))
    out.discard(name)
    return out


def import_graph(files: Dict[str, str], extensions: Set[str] = frozenset()) -> Dict[str, Set[str]]:
    """Module name -> the package modules it imports, for ``files`` (name -> source);
    ``extensions`` are modules without Python source (``_native``), which import nothing."""
    modules = set(files) | set(extensions)
    return {name: imported_modules(name, text, modules) for name, text in files.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Every elementary cycle, each starting at its smallest module, sorted."""
    found: List[List[str]] = []

    def extend(start: str, path: List[str]) -> None:
        for to in sorted(graph.get(path[-1], ())):
            if to == start:
                found.append(list(path))
            elif to > start and to not in path:
                extend(start, path + [to])

    for start in sorted(graph):
        extend(start, [start])
    return sorted(found)


def package_files() -> Dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(PACKAGE.glob("*.py"))}


def test_the_package_modules_import_each_other_in_no_loop() -> None:
    files = package_files()
    assert {"__init__", "_runtime", "_tensor", "_graph"} <= set(files), sorted(files)
    extensions = {p.stem for p in PACKAGE.glob("*.pyi")} - set(files)
    assert extensions == {"_native"}, extensions
    graph = import_graph(files, extensions)
    assert "_tensor" in graph["_runtime"] and "_tensor" in graph["_graph"], graph
    loops = [" -> ".join(c + [c[0]]) for c in cycles(graph)]
    assert not loops, f"npurt modules importing each other in a loop: {loops}"


def test_the_check_sees_lazy_imports_and_skips_type_checking_ones() -> None:
    graph = import_graph({
        "__init__": "from ._a import A\n",
        "_a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._b import B\nclass A: ...\n",
        "_b": "def f():\n    from ._c import C\n    return C\n",
        "_c": "from . import _b\nimport npurt\n",
    })
    assert graph == {"__init__": {"_a"}, "_a": set(), "_b": {"_c"}, "_c": {"_b", "__init__"}}
    assert cycles(graph) == [["_b", "_c"]]


def top_level_imports(source: str) -> Set[str]:
    """The top-level names of the absolute imports a module runs on import: those of the
    module body and its classes, not those inside functions or under ``if TYPE_CHECKING:``."""
    out: Set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


def test_importing_npurt_needs_numpy_only() -> None:
    # npurt.ort imports onnxruntime inside session() only: `import npurt` must not need it.
    import sys

    stdlib = set(getattr(sys, "stdlib_module_names", ())) or {"__future__", "os", "sys", "typing", "threading"}
    allowed = stdlib | {"numpy", "npurt", "__future__"}
    third_party = {name: sorted(top_level_imports(text) - allowed) for name, text in package_files().items()}
    assert "ort" in third_party, sorted(third_party)
    assert not any(third_party.values()), {k: v for k, v in third_party.items() if v}
    assert top_level_imports("import onnxruntime\ndef f():\n    import onnx\n") == {"onnxruntime"}


def test_import_npurt_loads_no_onnxruntime() -> None:
    import subprocess
    import sys

    code = ("import sys, npurt, npurt.ort; assert callable(npurt.ort.session); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnxruntime', 'onnx')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=pathlib.Path(__file__).parent).stdout
    assert out.strip() == "[]", out
