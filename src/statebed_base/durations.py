"""The one parser of durations given by a user: CLI flags (`--duration`) and experiment fields
(`timeout_s`, `for_s`, `after_s`, a fault's `wait_s`).

Locust's grammar (`locust -t`, its `parse_timespan`): a bare number is seconds (`30`, `2.5`),
else hours, minutes and seconds in that order, each optional (`30s`, `2m`, `1h30m`,
`1h2m3s`). YAML numbers are seconds too. A bad value is a UsageError naming the field.
"""

from __future__ import annotations

import math
import re
from typing import NoReturn

from .errors import UsageError

__all__ = ["parse_duration"]

_NUMBER = r"\d+(?:\.\d+)?"
_SPAN_RE = re.compile(rf"^(?:({_NUMBER})h)?(?:({_NUMBER})m)?(?:({_NUMBER})s)?\Z")
_FORMS = "a duration like 30, 30s, 2m or 1h30m"


def parse_duration(value: object, field: str, *, maximum: float, zero_ok: bool = False) -> float:
    """Seconds of `value` (an int, float or Locust timespan), in (0, maximum] (or [0, maximum] when `zero_ok`).

    `field` names the flag or field in the error ('' when the caller adds it, as argparse does)."""
    seconds = _seconds(value)
    if seconds is None:
        _fail(field, f"expected {_FORMS}, got {value!r}")
    if seconds > maximum:
        _fail(field, f"must be at most {_span(maximum)} ({maximum:g} s), got {value!r}")
    if seconds < 0 or (seconds == 0 and not zero_ok):
        _fail(field, f"expected a number {'>= 0' if zero_ok else '> 0'} (or a duration like 30s, 2m, 1h30m), got {value!r}")
    return seconds


def _fail(field: str, why: str) -> NoReturn:
    raise UsageError(f"{field}: {why}" if field else why)


def _seconds(value: object) -> float | None:
    """The value in seconds, or None when it is no duration at all (wrong type, syntax, NaN, inf)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if re.fullmatch(rf"-?{_NUMBER}", text):
            seconds = float(text)
        else:
            m = _SPAN_RE.match(text)
            if not text or m is None:
                return None
            h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            seconds = h * 3600 + mi * 60 + s
    else:
        return None
    return seconds if math.isfinite(seconds) else None


def _span(seconds: float) -> str:
    """1h30m style, for limits in messages."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (s, "s")) if n) or "0s"
