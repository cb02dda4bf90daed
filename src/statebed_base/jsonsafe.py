"""JSON from checkpoint files, parsed so hostile bytes become a CorruptFileError naming the file.

`json.loads` accepts `NaN`/`Infinity` and turns `1e400` into `inf` (which later breaks `int()`),
and raises RecursionError on deeply nested arrays: neither is a message a user can act on.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import CorruptFileError

__all__ = ["loads_strict"]


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not JSON")


def loads_strict(data: bytes | str, *, file: str, what: str = "JSON") -> Any:
    """Parse `data`; finite numbers only. Any failure is CorruptFileError(file, "<what> is not valid JSON (...)")."""
    try:
        return json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise CorruptFileError(file, f"{what} is nested too deeply to be valid") from None
    except ValueError as e:  # JSONDecodeError, our range checks, over-long integers, bad UTF-8
        raise CorruptFileError(file, f"{what} is not valid JSON ({e})") from None
