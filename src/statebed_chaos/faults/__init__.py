"""The fault catalogue: kind -> the module that defines it. A module of one kind exports `FAULT`
(a `Fault` subclass); one of several kinds that differ only in a table exports `FAULTS` (kind ->
class): the storage toxics (`toxic_fault`) and the snapshot-upload failpoints (`failpoint_fault`)."""

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
    "delay-snapshot-upload": "failpoint_fault",
    "drop-snapshot-upload": "failpoint_fault",
    "fail-changelog-upload": "fail_changelog_upload",
    "zombie-upload": "zombie_upload",
    "rewind-reprocess": "rewind_reprocess",
    "storage-latency": "toxic_fault",
    "storage-jitter": "toxic_fault",
    "storage-bandwidth": "toxic_fault",
    "storage-outage": "toxic_fault",
    "storage-reset": "toxic_fault",
    "cleanup-race": "cleanup_race",
    "corrupt-snapshot": "corrupt_snapshot",
    "corrupt-row": "corrupt_row",
}


def fault_class(kind: str) -> type[Fault]:
    """The class of a fault kind; an unknown kind is a usage error naming the known ones."""
    module = KINDS.get(kind)
    if module is None:
        raise UsageError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    mod = importlib.import_module(f"{__name__}.{module}")
    several: dict[str, type[Fault]] | None = getattr(mod, "FAULTS", None)
    cls: type[Fault] = several[kind] if several is not None else mod.FAULT
    return cls
