"""Jepsen-style checkers as a library: read what happened, answer valid true / false / "unknown".

`verify_lineage` (a checkpoint), `verify_state` (a run's final state), `verify_run` (both);
`check_safe` and `compose` make any checker crash-safe and combinable.
"""

from __future__ import annotations

from .lineage import KINDS, LineageReport, verify_lineage
from .repartition_report import RepartitionReport, verify_repartition
from .result import EXIT_CODES, Anomaly, CheckCrashed, Composite, Report, Verdict, check_safe, compose, merge_verdicts
from .run_checks import summarise, verify_run
from .state import StateReport, verify_state

__all__ = [
    "EXIT_CODES",
    "KINDS",
    "Anomaly",
    "CheckCrashed",
    "Composite",
    "LineageReport",
    "RepartitionReport",
    "Report",
    "StateReport",
    "Verdict",
    "check_safe",
    "compose",
    "merge_verdicts",
    "summarise",
    "verify_lineage",
    "verify_repartition",
    "verify_run",
    "verify_state",
]
