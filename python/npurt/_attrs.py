"""Op attributes (``execute``'s and ``Graph.node``'s keyword arguments) as the op table's text."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dtypes import runtime_name
from ._errors import ValidationError


def _attr(v: Any) -> str:
    """An op attribute as the op table's ``key=value`` text."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(_attr(x) for x in v)
    if isinstance(v, (np.dtype, type)):
        return runtime_name(v)
    if isinstance(v, str):
        try:
            return runtime_name(v)
        except ValidationError:
            return v
    return repr(v) if isinstance(v, float) else str(v)
