"""cleanup-race on Spark's own store (native-v1 / native-v2, through the JVM plug-in).

Spark runs its own maintenance: every `spark.sql.streaming.stateStore.maintenanceInterval`
(2 s in native runs) each executor's maintenance thread uploads a snapshot and deletes the
versions below the `minBatchesToRetain` window, orphans included, while the next batch's tasks
run. The fault sets that window to `retain` (the run and its baseline alike) and arms

    native.cleanup.delete = delay(delete_delay_ms)

from its trigger: every state file Spark's maintenance deletes leaves a firing record (time,
file, JVM) and waits a little first, widening the window in which the delete races the attempts
still writing. Proven only by a delete whose file is gone and whose firing falls while an
attempt Spark's event log shows alive belongs to a streaming batch: Spark commits a batch only
after its job ended, so an attempt alive then is either pending (its batch not yet committed) or
losing (a copy or a failed attempt that outlived its job).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from statebed_job.session import RETAIN_CONF
from statebed_model.eventlog import TaskAttempt

from .base import Evidence, FaultContext
from .processes import add_term, event_log_or_none, remove_term

__all__ = ["POINT", "NativeCleanupRace", "alive", "attempt_json"]

POINT = "native.cleanup.delete"
MAINTENANCE_THREADS_CONF = "spark.sql.streaming.stateStore.numStateStoreMaintenanceThreads"


class NativeCleanupRace:
    """The native half of `cleanup-race`: Spark's maintenance, a small window, recorded deletes."""

    def __init__(self, retain: int, delete_delay_ms: int) -> None:
        self.retain, self.delay_ms = retain, delete_delay_ms
        self.term = f"delay({delete_delay_ms})"
        self._armed: str | None = None

    def spark_conf(self) -> dict[str, str]:
        """Spark's maintenance keeps `retain` versions (its commit and offset logs too), with more
        than the 2 threads Spark gives a 2-core executor: one store's maintenance waits while its
        task is held in its commit, and with one cleanup thread every other store's cleanup waited
        behind it (a run whose first delete came 0.3 s after the held task ended did not fire)."""
        return {RETAIN_CONF: str(self.retain), MAINTENANCE_THREADS_CONF: "4"}

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        self._armed = add_term(ctx.control, POINT, self.term)
        return {"retain": self.retain, "failpoint": POINT, "armed": self._armed}

    def heal(self, ctx: FaultContext) -> None:
        if self._armed is not None:
            remove_term(ctx.control, POINT, self._armed)
            self._armed = None

    def evidence(self, ctx: FaultContext) -> Evidence:
        if not ctx.control.path.exists():
            return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
        deletes = [f for f in ctx.firings(POINT) if str(f.get("action", "")).startswith("delay")]
        done = [f for f in deletes if _gone(f.get("file"))]
        if not done:
            return Evidence(False, f"Spark's maintenance deleted no state file ({len(deletes)} delete(s) recorded, none took effect)")
        log = event_log_or_none(ctx)
        if log is None:
            return Evidence(None, "Spark's event log is missing or unreadable: cannot tell which attempts were alive")
        for f in done:
            at_ms = float(f["time"]) * 1000
            racing = [t for t in log.tasks if t.batch is not None and alive(t, at_ms, at_ms)]
            if racing:
                t = racing[0]
                return Evidence(
                    True,
                    f"Spark's maintenance (pid {f.get('pid')} on {f.get('host')}) deleted {Path(str(f['file'])).name} "
                    f"while attempt {t.attempt} of batch {t.batch} partition {t.index} ({t.outcome or 'running'}) was alive; "
                    f"{len(done)} state file(s) deleted from the trigger on",
                    [{"delete": f}, {"attempt": attempt_json(t)}],
                )
        return Evidence(False, f"Spark's maintenance deleted {len(done)} state file(s), none while an attempt of a batch was alive")


def alive(t: TaskAttempt, start_ms: float, end_ms: float) -> bool:
    """The attempt ran at some time in [start_ms, end_ms] (one with no end logged runs on)."""
    return t.launch_ms <= end_ms and (t.finish_ms is None or t.finish_ms >= start_ms)


def attempt_json(t: TaskAttempt) -> dict[str, Any]:
    keys = ("task_id", "batch", "index", "attempt", "speculative", "outcome", "launch_ms", "finish_ms")
    return {k: getattr(t, k) for k in keys}


def _gone(file: Any) -> bool:
    """The deleted file is not there now (a `file:` URI or a path; anything else cannot be checked: not counted)."""
    if not isinstance(file, str) or not file:
        return False
    u = urlparse(file)
    if u.scheme not in ("", "file"):
        return False
    p = Path(u.path)
    return p.is_absolute() and not p.exists() and not p.is_symlink()
