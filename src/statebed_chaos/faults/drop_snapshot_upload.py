"""drop-snapshot-upload: from the trigger until heal (`for_s`, else the end of the run) every
snapshot upload (of params.partition, when given) is silently skipped
(`snapshot.upload.before=drop`): the lineage presumes a snapshot that never lands, so loads
must fall back to an older snapshot plus changelogs. Proven by a `drop` firing of that point
carrying the queuing task's context.

params: partition (default: every partition).
"""

from __future__ import annotations

from typing import ClassVar

from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS

from .base import FaultSpec
from .failpoint_fault import FailpointFault, filter_text, term_target

__all__ = ["FAULT", "DropSnapshotUpload"]


class DropSnapshotUpload(FailpointFault):
    kind: ClassVar[str] = "drop-snapshot-upload"
    description: ClassVar[str] = "snapshot uploads are silently skipped (snapshot.upload.before=drop)"
    point = "snapshot.upload.before"
    action = "drop"
    arm_at_inject: ClassVar[bool] = True
    formats: ClassVar[frozenset[str]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: through the JVM plug-in
    native_points: ClassVar[dict[str, str]] = {"snapshot.upload.before": "native.snapshot.upload"}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.target = term_target(spec, batch=False, attempt=None)
        self.term = f"{filter_text(self.target)}drop"


FAULT = DropSnapshotUpload
