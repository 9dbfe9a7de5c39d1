"""The exceptions npurt raises.

Every runtime failure is an :class:`Error`; the subclasses say what kind. Each carries
the runtime's message and, where known, the ``op``, the ``stream`` and the stream's
``submission`` number of the failed work (``None`` otherwise).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["Error", "ValidationError", "OutOfMemoryError", "DeviceError", "BackendUnavailableError"]


class Error(Exception):
    """Base class of every npurt error (a panic inside the runtime is raised as this too)."""

    op: Optional[str] = None
    stream: Optional[str] = None
    submission: Optional[int] = None

    def __init__(self, message: str = "", *, op: Optional[str] = None, stream: Optional[str] = None,
                 submission: Optional[int] = None) -> None:
        super().__init__(message)
        self.op = op
        self.stream = stream
        self.submission = submission

    @property
    def message(self) -> str:
        """The runtime's message."""
        return str(self.args[0]) if self.args else ""


class ValidationError(Error, ValueError):
    """Operands, attributes or a setting the runtime rejects (shapes, dtypes, ranges)."""


class OutOfMemoryError(Error, MemoryError):
    """The device memory, or the pool's limit, could not satisfy a request."""


class DeviceError(Error):
    """A device, a stream or an event failed, or does not exist; asynchronous failures of
    queued work arrive as this at the next synchronisation (``stream`` and ``submission``
    name the failed work)."""


class BackendUnavailableError(Error):
    """The requested backend is not compiled in, or its libraries or devices are absent."""
