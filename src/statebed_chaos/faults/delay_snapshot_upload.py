"""delay-snapshot-upload: from the trigger until heal (`for_s`, else the end of the run) every
snapshot upload (of params.partition, when given) waits `ms` before it starts
(`snapshot.upload.before=delay(ms)`): commits go on, loads meanwhile replay changelogs from
an older snapshot. Proven by a `delay` firing of that point (the uploader runs in the context
of the task that queued the snapshot: the record names its batch, partition and attempt).

params: ms (default 3000), partition (default: every partition).
"""

from __future__ import annotations

from typing import ClassVar

from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS

from .base import FaultSpec
from .failpoint_fault import FailpointFault, filter_text, positive, term_target

__all__ = ["FAULT", "DelaySnapshotUpload"]


class DelaySnapshotUpload(FailpointFault):
    kind: ClassVar[str] = "delay-snapshot-upload"
    description: ClassVar[str] = "snapshot uploads wait before they start (snapshot.upload.before=delay(ms))"
    point = "snapshot.upload.before"
    action = "delay"
    arm_at_inject: ClassVar[bool] = True
    formats: ClassVar[frozenset[str]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: through the JVM plug-in
    native_points: ClassVar[dict[str, str]] = {"snapshot.upload.before": "native.snapshot.upload"}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.ms = positive(spec, "ms", 3000)
        self.target = term_target(spec, batch=False, attempt=None)
        self.term = f"{filter_text(self.target)}delay({self.ms})"


FAULT = DelaySnapshotUpload
