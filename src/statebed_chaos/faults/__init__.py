"""The fault catalogue: one module per fault kind, each exporting `FAULT` (a `Fault` subclass)."""

from __future__ import annotations

import importlib

from statebed_base.errors import UsageError

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable, Trigger

__all__ = ["KINDS", "Evidence", "Fault", "FaultContext", "FaultSpec", "NotApplicable", "Trigger", "fault_class"]

# kind -> module in this package
KINDS: dict[str, str] = {
    "kill-executor": "kill_executor",
    "pause-executor": "pause_executor",
    "slow-attempt": "slow_attempt",
    "kill-python-worker": "kill_python_worker",
    "restart-driver": "restart_driver",
    "delay-snapshot-upload": "delay_snapshot_upload",
    "drop-snapshot-upload": "drop_snapshot_upload",
    "fail-changelog-upload": "fail_changelog_upload",
    "zombie-upload": "zombie_upload",
    "rewind-reprocess": "rewind_reprocess",
    "storage-latency": "storage_latency",
    "storage-jitter": "storage_jitter",
    "storage-bandwidth": "storage_bandwidth",
    "storage-outage": "storage_outage",
    "storage-reset": "storage_reset",
    "cleanup-race": "cleanup_race",
}


def fault_class(kind: str) -> type[Fault]:
    """The class of a fault kind; an unknown kind is a usage error naming the known ones."""
    module = KINDS.get(kind)
    if module is None:
        raise UsageError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    cls: type[Fault] = importlib.import_module(f"{__name__}.{module}").FAULT
    return cls
