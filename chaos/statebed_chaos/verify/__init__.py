"""Jepsen-style checkers: read what happened, answer valid true / false / "unknown"."""

from __future__ import annotations

from .lineage import KINDS, LineageReport, verify_lineage
from .result import EXIT_CODES, Anomaly, Verdict, merge_verdicts

__all__ = ["EXIT_CODES", "KINDS", "Anomaly", "LineageReport", "Verdict", "merge_verdicts", "verify_lineage"]
