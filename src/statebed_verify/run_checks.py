"""Judge a finished run as a whole: its checkpoint's lineage and its final state.

This is where "run, then verify" is composed (the job only runs); `statebed run` and the
chaos experiments call it. Each check goes through `check_safe`, so a crash or an unreadable
input makes that check unknown and the other still reports.
"""

from __future__ import annotations

import os
from typing import Any

from statebed_base.errors import StatebedError
from statebed_model.eventlog import read_event_log
from statebed_model.rundir import RunDir
from statebed_model.spark_features import SnapshotRepair
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
        info = run.read_info()
        query = None if info.format.native else run.query_storage(info)  # statebed's store: Spark's query files apart
        return verify_lineage(open_storage(parse_location(run.checkpoint_location(info), s3)), repair=recorded_repair(run), query=query)

    return compose({"lineage": lineage, "state": lambda: verify_state(run, s3)})


def recorded_repair(run: RunDir) -> SnapshotRepair:
    """Spark's auto snapshot repair as every driver of the run ran with it (the Spark properties in
    its event log): on only when each one recorded it on; off when there is no log to say."""
    try:
        props = list(read_event_log(run.events).properties.values()) if run.events.is_dir() else []
    except StatebedError:
        props = []
    repairs = [SnapshotRepair.from_properties(p, f"recorded on in the run's event log, {len(props)} driver(s)") for p in props]
    if not repairs or not all(r.enabled for r in repairs):
        return SnapshotRepair()
    return min(repairs, key=lambda r: r.max_replay)


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
        for extra in ("format", "orphans", "resumable"):
            value = getattr(report, extra, None)
            if value is not None:
                doc[extra] = len(value) if isinstance(value, list) else value
        out[name] = doc
    return out
