"""npurt as an ONNX Runtime execution provider, for the stock ``onnxruntime`` wheel.

>>> import npurt.ort
>>> sess = npurt.ort.session("model.onnx")          # an onnxruntime.InferenceSession
>>> sess.get_providers()[0]
'NpurtExecutionProvider'

The plugin library ONNX Runtime loads is this package's own native module: ``npurt._native``
also exports the EP's entry points ``CreateEpFactories`` and ``ReleaseEpFactory``, so
:func:`get_library_path` is that module's file. By hand, as the ``onnxruntime-ep-*`` packages
are used::

    onnxruntime.register_execution_provider_library(npurt.ort.get_ep_name(), npurt.ort.get_library_path())

This module imports ``onnxruntime`` only inside :func:`session`: ``import npurt`` does not need
it. docs/ONNXRUNTIME.md lists the EP options and what the EP claims.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, List, Optional, Union

from . import _native

if TYPE_CHECKING:  # pragma: no cover - annotations only
    import onnxruntime

__all__ = ["get_library_path", "get_ep_name", "session", "EP_NAME", "REGISTRATION_NAME"]

#: The execution provider's name (ONNX Runtime's ``OrtEpDevice.ep_name``).
EP_NAME = "NpurtExecutionProvider"
#: The name :func:`session` registers the library under (once per process).
REGISTRATION_NAME = EP_NAME

_LOCK = threading.Lock()


def get_library_path() -> str:
    """The absolute path of the plugin library to give
    ``onnxruntime.register_execution_provider_library``: the native module of this package,
    which exports the EP's ``CreateEpFactories`` and ``ReleaseEpFactory``."""
    return os.path.abspath(_native.__file__)


def get_ep_name() -> str:
    """The execution provider's name, ``"NpurtExecutionProvider"``."""
    return EP_NAME


def _devices(rt: Any) -> List[Any]:
    """The ``OrtEpDevice`` objects of this EP; when several libraries offer the EP (the
    package's and a separately built ``libnpurt_ort_ep.so``), those of one library only: this
    package's when it is registered, else the first listed."""
    found = [d for d in rt.get_ep_devices() if d.ep_name == EP_NAME]
    paths = [d.ep_metadata.get("library_path", "") for d in found]
    if len(set(paths)) <= 1:
        return found
    ours = get_library_path()
    pick = ours if ours in paths else paths[0]
    return [d for d, p in zip(found, paths) if p == pick]


def _for_device(devices: List[Any], device_id: Optional[str]) -> List[Any]:
    """The device whose npurt index (``ep_metadata["npurt.device"]``) is ``device_id``, when
    one is offered, so that ONNX Runtime's view of the session's device is the one npurt runs
    on; else all of them (the EP option ``device_id`` decides either way)."""
    if device_id is None:
        return devices
    match = [d for d in devices if d.ep_metadata.get("npurt.device") == device_id]
    return match[:1] or devices


def _ensure_registered(rt: Any) -> None:
    """Registers the library with ONNX Runtime unless the EP is already offered (registered by
    this module before, or by the application under any name). A registration racing another
    one under the same name is not an error."""
    with _LOCK:
        if any(d.ep_name == EP_NAME for d in rt.get_ep_devices()):
            return
        try:
            rt.register_execution_provider_library(REGISTRATION_NAME, get_library_path())
        except Exception as e:  # noqa: BLE001 - ORT raises a plain exception type
            if "already registered" not in str(e):
                raise


def _option_value(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"{EP_NAME} option `{key}`: expected a string or an integer, got {value!r}")
    return str(value)


def session(model_path: Union[str, bytes, "os.PathLike[str]"], backend: str = "auto", *,
            sess_options: Optional["onnxruntime.SessionOptions"] = None,
            **options: Any) -> "onnxruntime.InferenceSession":
    """An ``onnxruntime.InferenceSession`` of ``model_path`` (a file path or the model's bytes)
    with ``NpurtExecutionProvider`` selected: the nodes npurt supports run on npurt, the rest
    on ORT's CPU EP.

    Registers the plugin library with ONNX Runtime on first use (once per process; an EP
    already registered, under any name, is used as it is) and selects the EP's devices with
    ``SessionOptions.add_provider_for_devices``: those of the backend npurt's discovery chose
    (ORT's CPU device on the CPU backend, one NPU device per Ascend device, ...), only the one
    numbered ``device_id`` when that option is given and such a device is offered.

    Args:
        model_path: the ONNX model, as ``onnxruntime.InferenceSession`` takes it.
        backend: the EP option ``backend`` (``auto``, ``cpu``, ``acl``, ``cuda``).
        sess_options: ``onnxruntime.SessionOptions`` to start from (a new one by default); the
            EP is added to it.
        **options: further EP options (``device_id``, ``precision``, ``graph_capture``,
            ``log_level``), strings or integers.

    Raises ``ImportError`` when ``onnxruntime`` is not installed, ``TypeError`` for an option
    value that is neither a string nor an integer, and ONNX Runtime's own exception for an
    option the EP refuses (its message names the option and the value).
    """
    try:
        import onnxruntime as rt
    except ImportError as e:
        raise ImportError(f"npurt.ort.session needs onnxruntime (pip install onnxruntime): {e}") from e
    ep_options = {"backend": _option_value("backend", backend)}
    ep_options.update({k: _option_value(k, v) for k, v in options.items()})
    _ensure_registered(rt)
    devices = _devices(rt)
    if not devices:
        raise RuntimeError(f"ONNX Runtime lists no device of {EP_NAME} after registering {get_library_path()}")
    devices = _for_device(devices, ep_options.get("device_id"))
    so = sess_options if sess_options is not None else rt.SessionOptions()
    so.add_provider_for_devices(devices, ep_options)
    model = model_path if isinstance(model_path, (bytes, str)) else os.fspath(model_path)
    return rt.InferenceSession(model, sess_options=so)
