"""Judge a finished run as a whole: its checkpoint's lineage and its final state.

This is where "run, then verify" is composed (the job only runs); `statebed run` and the
chaos experiments call it. Each check goes through `check_safe`, so a crash or an unreadable
input makes that check unknown and the other still reports.
"""

from __future__ import annotations

import os
from typing import Any

from statebed_model.rundir import RunDir
from statebed_store import S3Settings, open_storage
from statebed_store.location import parse_location

from .lineage import verify_lineage
from .result import CheckCrashed, Composite, Report, compose
from .state import verify_state

__all__ = ["summarise", "verify_run"]


def verify_run(run_dir: str | os.PathLike[str], s3: S3Settings | None = None) -> Composite:
    """Both verifiers on a run directory (its checkpoint may be local or on S3)."""
    run = RunDir(run_dir, s3)

    def lineage() -> Report:
        return verify_lineage(open_storage(parse_location(run.checkpoint_location(run.read_info()), s3)))

    return compose({"lineage": lineage, "state": lambda: verify_state(run, s3)})


def summarise(result: Composite) -> dict[str, Any]:
    """Per check: its verdict, its anomaly count and kinds (and the error of a crashed check)."""
    out: dict[str, Any] = {}
    for name, report in result.reports.items():
        doc: dict[str, Any] = {
            "valid": report.valid,
            "anomalies": len(report.anomalies),
            "kinds": sorted({a.kind for a in report.anomalies}),
        }
        if isinstance(report, CheckCrashed):
            doc["error"] = report.error
        for extra in ("format", "orphans"):
            value = getattr(report, extra, None)
            if value is not None:
                doc[extra] = len(value) if isinstance(value, list) else value
        out[name] = doc
    return out
