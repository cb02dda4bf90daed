"""What the failpoint faults share: a term armed on the run's failpoint control (composing
with other faults' terms on the same point), disarmed on heal, and proven only by a firing
record of that point whose action and task context (batch, partition, attempt) match the
fault's target. In native-v1 / native-v2 runs a fault whose write has a twin in Spark's own
checkpoint I/O (`native_points`) aims at the JVM plug-in's point instead (statebed_job.jvm_plugin);
the others do not apply to native runs.

The snapshot-upload faults differ only in their action, so they live here as two small classes
(`FAULTS`): both aim at `snapshot.upload.before` from the trigger until heal (`for_s`, else the
end of the run), for every partition or params.partition, and are proven by a firing of that
point carrying the context of the task that queued the snapshot (the uploader runs in it).
- delay-snapshot-upload: every upload waits `ms` (default 3000) before it starts; commits go
  on, loads meanwhile replay changelogs from an older snapshot.
- drop-snapshot-upload: every upload is silently skipped; the lineage presumes a snapshot
  that never lands, so loads fall back to an older snapshot plus changelogs."""

from __future__ import annotations

from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_job import jvm_plugin  # noqa: F401  (registers the plug-in's native.* points, so the control file accepts them)
from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS, Format

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable
from .process_faults import add_term, remove_term, task_is

__all__ = [
    "FAULTS",
    "DelaySnapshotUpload",
    "DropSnapshotUpload",
    "FailpointFault",
    "attempt0_filter",
    "filter_text",
    "matching",
    "positive",
    "term_target",
]


def positive(spec: FaultSpec, name: str, default: int | None, *, zero_ok: bool = False) -> int | None:
    """An integer param (None when absent and no default); a bad value is a usage error naming the fault."""
    value = spec.params.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero_ok else 1):
        floor = ">= 0" if zero_ok else "> 0"
        raise UsageError(f"fault {spec.id} ({spec.kind}): {name} must be an integer {floor}, got {value!r}")
    return int(value)


def filter_text(target: dict[str, int]) -> str:
    """`{batch: 3, partition: 1}` as the term prefix `[batch=3,partition=1]` ('' for no filter)."""
    return "" if not target else "[" + ",".join(f"{k}={v}" for k, v in target.items()) + "]"


def attempt0_filter(where: dict[str, int], format: Format) -> dict[str, int]:
    """`where` plus attempt 0, except in native V2 runs: Spark closes V2's state files on its
    checksum pool threads, which carry no task context, so no attempt can be named there."""
    return where if format.native and format.version == 2 else {**where, "attempt": 0}


def term_target(spec: FaultSpec, *, batch: bool, attempt: int | None) -> dict[str, int]:
    """The task filter of a fault: the trigger batch (when `batch`), params.partition, the attempt."""
    out: dict[str, int] = {}
    if batch:
        out["batch"] = spec.at.batch
    partition = positive(spec, "partition", 0 if batch else None, zero_ok=True)
    if partition is not None:
        out["partition"] = partition
    if attempt is not None:
        out["attempt"] = attempt
    return out


def matching(ctx: FaultContext, point: str, action: str, target: dict[str, int]) -> list[dict[str, Any]]:
    """Firings of `point` whose action starts with `action` and whose task context has `target`'s keys (any, for no target)."""

    def mine(f: dict[str, Any]) -> bool:
        return str(f.get("action", "")).startswith(action) and (not target or task_is(f.get("task"), target))

    return [f for f in ctx.firings(point) if mine(f)]


class FailpointFault(Fault):
    """One failpoint term, armed in `prepare` (or at `inject` when `arm_at_inject`), disarmed on heal.

    Subclasses set `point`, `action` (the firing action that proves it, e.g. "drop") and build
    `self.target` (the task filter) and `self.term` (the whole term, filter included)."""

    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS  # statebed's failpoints; native Spark has none
    point: str  # a class default; a fault may choose it per instance (e.g. `when: after`)
    action: str
    arm_at_inject: ClassVar[bool] = False  # armed for a window (trigger .. heal) instead of the whole run
    native_points: ClassVar[dict[str, str]] = {}  # statebed point -> the JVM plug-in's point for the same write

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.target: dict[str, int] = {}
        self.term = ""
        self._armed: str | None = None

    def check(self, format: Format, cluster: str, storage: str) -> None:
        super().check(format, cluster, storage)
        if format.native and self.point not in self.native_points:
            raise NotApplicable(f"{self.kind} at {self.point} has no point in Spark's checkpoint I/O")

    def _bind(self, ctx: FaultContext) -> None:
        """A native run: the plug-in's point for the same write (idempotent)."""
        if ctx.format.plugin:
            self.point = self.native_points.get(self.point, self.point)

    def prepare(self, ctx: FaultContext) -> None:
        self._bind(ctx)
        if not self.arm_at_inject:
            self._armed = add_term(ctx.control, self.point, self.term)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        self._bind(ctx)
        if self.arm_at_inject:
            self._armed = add_term(ctx.control, self.point, self.term)
        return {"failpoint": self.point, "armed": self._armed or self.term}

    def heal(self, ctx: FaultContext) -> None:
        if self._armed is not None:
            remove_term(ctx.control, self.point, self._armed)
            self._armed = None

    def what(self) -> str:
        """The target in words, for details."""
        return ", ".join(f"{k} {v}" for k, v in self.target.items()) or "any task"

    def evidence(self, ctx: FaultContext) -> Evidence:
        self._bind(ctx)
        if not ctx.control.path.exists():
            return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
        fired = matching(ctx, self.point, self.action, self.target)
        if not fired:
            return Evidence(False, f"{self.point} never fired {self.action} for {self.what()}")
        first = fired[0]
        return Evidence(
            True,
            f"{self.point} fired {first.get('action')} {len(fired)} time(s) for {self.what()} "
            f"(first: pid {first.get('pid')} on {first.get('host')}, task {first.get('task')})",
            [{"firing": f} for f in fired[:5]],
        )


class _SnapshotUploadFault(FailpointFault):
    """A term on every snapshot upload (of params.partition) for the fault's window."""

    point = "snapshot.upload.before"
    arm_at_inject: ClassVar[bool] = True
    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: through the JVM plug-in
    native_points: ClassVar[dict[str, str]] = {"snapshot.upload.before": "native.snapshot.upload"}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.target = term_target(spec, batch=False, attempt=None)


class DelaySnapshotUpload(_SnapshotUploadFault):
    kind: ClassVar[str] = "delay-snapshot-upload"
    description: ClassVar[str] = "snapshot uploads wait before they start (snapshot.upload.before=delay(ms))"
    action = "delay"

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.ms = positive(spec, "ms", 3000)
        self.term = f"{filter_text(self.target)}delay({self.ms})"


class DropSnapshotUpload(_SnapshotUploadFault):
    kind: ClassVar[str] = "drop-snapshot-upload"
    description: ClassVar[str] = "snapshot uploads are silently skipped (snapshot.upload.before=drop)"
    action = "drop"

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.term = f"{filter_text(self.target)}drop"


FAULTS: dict[str, type[FailpointFault]] = {c.kind: c for c in (DelaySnapshotUpload, DropSnapshotUpload)}
