"""Verdicts, Jepsen-style: valid true / false / "unknown", with the anomalies that decide them.

Verdicts merge false > unknown > true: one invalid check makes the whole invalid, and a
check that could not decide (or crashed) can never let the whole be valid. Checkers are
plain callables returning a `Report`; `check_safe` turns a checker that raises into an
"unknown" report carrying the error, and `compose` runs several and merges their verdicts.
Lineage and state anomalies share one schema: data fields, and `detail` as rendered text.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from statebed_base.errors import StorageError, UsageError

__all__ = [
    "EXIT_CODES",
    "HARNESS_KINDS",
    "STORE_CHECKS",
    "Anomaly",
    "CheckCrashed",
    "Composite",
    "Report",
    "Verdict",
    "check_safe",
    "compose",
    "is_store_anomaly",
    "merge_verdicts",
]

Verdict = bool | Literal["unknown"]

# CLI exit code per verdict: 0 valid, 1 anomalies found, 3 could not decide (2 = unusable input).
EXIT_CODES: dict[object, int] = {True: 0, False: 1, "unknown": 3}

# Errors that mean "this input cannot be checked at all" (not a checkpoint, no run directory,
# storage unreachable): they reach the caller, which reports them as unusable input (exit 2).
INPUT_ERRORS: tuple[type[BaseException], ...] = (UsageError, StorageError)

# The checks that judge the store itself: their anomalies are the seed appendix's kinds (a
# lost element, a sample of 4, a lineage that is not linear). A positive control counts only
# when caught by one of them; the kinds below are about the harness or the run around the
# store (a crashed cell, input the source could not replay, the sink's files), and an
# anomaly of another check (attempts records, the baseline comparison) is no such proof.
STORE_CHECKS = frozenset({"lineage", "state"})
HARNESS_KINDS = frozenset({"harness-error", "missing-input", "input-log-mismatch", "missing-output", "uncommitted-output"})


@dataclass(frozen=True)
class Anomaly:
    """One thing wrong, named by a stable `kind`, located as precisely as the check allows.

    Lineage anomalies fill operator/partition/version/ids/files; state anomalies fill
    keys/batches/records (and partition where one is concerned). `detail` is for people.
    """

    kind: str
    operator: int | None = None
    partition: int | None = None
    version: int | None = None
    ids: list[str | None] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    keys: list[Any] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    records: list[int] = field(default_factory=list)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Report(Protocol):
    """What every checker returns."""

    valid: Verdict
    anomalies: list[Anomaly]
    notes: list[str]

    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Report)


@dataclass
class CheckCrashed:
    """The report of a checker that raised: unknown, never valid, with the error kept."""

    check: str
    error: str
    trace: str = ""
    valid: Verdict = "unknown"
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "error": self.error, "trace": self.trace, "anomalies": [], "notes": self.notes}


def is_store_anomaly(anomaly: Mapping[str, Any]) -> bool:
    """An anomaly as a run's result carries it (its JSON with the `check` that found it) of the
    store's state or lineage, not of the harness."""
    return anomaly.get("check") in STORE_CHECKS and anomaly.get("kind") not in HARNESS_KINDS


def merge_verdicts(verdicts: Iterable[Verdict]) -> Verdict:
    out: Verdict = True
    for v in verdicts:
        if v is False:
            return False
        if v == "unknown":
            out = "unknown"
    return out


def check_safe(name: str, check: Callable[[], R], *, passthrough: tuple[type[BaseException], ...] = INPUT_ERRORS) -> R | CheckCrashed:
    """Run one checker; any error but unusable input becomes an "unknown" report naming it."""
    try:
        return check()
    except passthrough:
        raise
    except Exception as e:  # a crash in a checker (or what it reads) must never pass for a verdict
        error = f"{name} could not decide: {type(e).__name__}: {e}"
        return CheckCrashed(check=name, error=error, trace=traceback.format_exc(limit=5), notes=[error])


@dataclass
class Composite:
    """Several checks' reports under their names; valid is their merged verdict."""

    reports: dict[str, Report]

    @property
    def valid(self) -> Verdict:
        return merge_verdicts(r.valid for r in self.reports.values())

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "checks": {name: r.to_json() for name, r in self.reports.items()}}


def compose(checks: Mapping[str, Callable[[], Report]], *, passthrough: tuple[type[BaseException], ...] = ()) -> Composite:
    """Run every check (each through `check_safe`) and keep all reports, in order.

    By default nothing passes through: when a run is judged as a whole, one check that cannot
    read its input makes that check unknown, and the other checks still report.
    """
    return Composite({name: check_safe(name, check, passthrough=passthrough) for name, check in checks.items()})
