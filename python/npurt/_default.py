"""The package's default runtime, made on first use.

The module-level functions, and ``npurt.Tensor``, ``npurt.Graph`` and the other
constructors called without ``runtime=``, use it. ``npurt._runtime`` registers its
``Runtime`` class here as the factory when it is imported (``npurt/__init__.py`` imports
it), so that the modules it builds on (``npurt._tensor``, ``npurt._graph``) reach the
default runtime without importing ``npurt._runtime`` back.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from ._runtime import Runtime

_factory: Optional[Callable[[], "Runtime"]] = None
_default: Optional["Runtime"] = None
_default_lock = threading.Lock()


def register_factory(factory: Callable[[], "Runtime"]) -> None:
    """Makes ``factory()`` (``npurt.Runtime()``) what :func:`default_runtime` calls on first use."""
    global _factory
    _factory = factory


def default_runtime() -> Runtime:
    """The module's runtime, made on first use (best backend, ``NPURT_*`` honoured)."""
    global _default
    rt = _default
    if rt is None:
        with _default_lock:
            if _default is None:
                if _factory is None:
                    raise RuntimeError("npurt._runtime has not registered the Runtime class (import npurt)")
                _default = _factory()
            rt = _default
    return rt
