"""What the ONNX Runtime tests of the Python package share: `onnxruntime` and `onnx` imported
where present, the reason to skip when either is missing or ORT is older than the plugin EP
ABI (1.24), unregistering the library `npurt.ort.session` registered, and the BERT builder of
bench/peers/ort_bert.py with the small configuration the tests export."""

from __future__ import annotations

import gc
import importlib.util
import pathlib

import npurt.ort

try:
    import onnxruntime as rt
except ImportError as e:  # pragma: no cover - depends on the environment
    rt = None
    SKIP = f"onnxruntime is not importable ({e}); pip install onnxruntime"
else:
    _v = tuple(int(p) for p in rt.__version__.split(".")[:2] if p.isdigit())
    SKIP = f"onnxruntime {rt.__version__} is older than 1.24, the EP ABI" if _v < (1, 24) else ""

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover - depends on the environment
    onnx = TensorProto = helper = None
    SKIP = SKIP or f"the onnx package is not importable ({e}); pip install onnx"

__all__ = ["SKIP", "TINY_BERT", "TensorProto", "helper", "onnx", "ort_bert", "rt", "unregister_package_ep"]

#: A 2-layer BERT small enough for every test: hidden 64, 4 heads, 100 tokens.
TINY_BERT = dict(vocab=100, hidden=64, layers=2, heads=4, ffn=128, max_pos=64, type_vocab=2, eps=1e-12)


def unregister_package_ep() -> None:
    """Unregisters what `npurt.ort.session` registered (the sessions first: ORT refuses to
    unregister a library still in use); nothing when this process did not register it."""
    gc.collect()
    try:
        rt.unregister_execution_provider_library(npurt.ort.REGISTRATION_NAME)
    except Exception:  # noqa: BLE001 - not registered by this process (or already offered)
        pass


def ort_bert():
    """bench/peers/ort_bert.py as a module (its builder, not a copy of it)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "ort_bert.py"
    spec = importlib.util.spec_from_file_location("ort_bert", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
