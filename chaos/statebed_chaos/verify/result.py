"""Verdicts, Jepsen-style: valid true / false / "unknown", with the anomalies that decide them.

Verdicts merge false > unknown > true: one invalid check makes the whole invalid, and a
check that could not decide (or crashed) can never let the whole be valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["EXIT_CODES", "Anomaly", "Verdict", "merge_verdicts"]

Verdict = bool | Literal["unknown"]

# CLI exit code per verdict: 0 valid, 1 anomalies found, 3 could not decide (2 = unusable input).
EXIT_CODES: dict[object, int] = {True: 0, False: 1, "unknown": 3}


@dataclass(frozen=True)
class Anomaly:
    """One thing wrong, named by a stable `kind`, located as precisely as the check allows."""

    kind: str
    operator: int | None = None
    partition: int | None = None
    version: int | None = None
    ids: list[str | None] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def merge_verdicts(verdicts: Iterable[Verdict]) -> Verdict:
    out: Verdict = True
    for v in verdicts:
        if v is False:
            return False
        if v == "unknown":
            out = "unknown"
    return out
