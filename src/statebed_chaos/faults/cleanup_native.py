"""cleanup-race on Spark's own store (native-v1 / native-v2, through the JVM plug-in).

Spark runs its own maintenance: every `spark.sql.streaming.stateStore.maintenanceInterval`
(500 ms in these runs, 2 s in other native runs) each executor's maintenance thread uploads a
snapshot and deletes the versions below the `minBatchesToRetain` window, orphans included,
while the next batch's tasks run. The fault sets that window to `retain` (the run and its
baseline alike) and arms

    native.cleanup.delete   = delay(delete_delay_ms)
    native.changelog.upload = [batch=H,partition=P]1*hold(hold_ms)

from its trigger: every state file Spark's maintenance deletes leaves a firing record (time,
file, JVM) and waits a little first; and the task writing partition P of batch H is held at its
changelog close (inside its commit) until a delete has taken effect while it was held: the
controller then releases it. So the race does not depend on when maintenance happens to run
(a run whose deletes all came between the tasks did not fire: issue 36); if no delete comes
within `hold_ms` the hold ends by itself and the fault is `unknown`, never proven.

Proven only by a delete whose file is gone and whose firing falls while an attempt Spark's
event log shows alive belongs to a streaming batch: Spark commits a batch only after its job
ended, so an attempt alive then is either pending (its batch not yet committed) or losing (a
copy or a failed attempt that outlived its job).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from statebed_job.session import RETAIN_CONF
from statebed_model.eventlog import TaskAttempt
from statebed_store.failpoint_control import firing_process

from .base import Evidence, FaultContext
from .failpoint_fault import filter_text
from .process_faults import add_term, event_log_or_none, remove_term, task_is

__all__ = ["HOLD_POINT", "POINT", "NativeCleanupRace", "alive", "attempt_json"]

POINT = "native.cleanup.delete"
HOLD_POINT = "native.changelog.upload"  # the plug-in's task point: a state changelog's close, inside the task's commit
MAINTENANCE_THREADS_CONF = "spark.sql.streaming.stateStore.numStateStoreMaintenanceThreads"
MAINTENANCE_INTERVAL_CONF = "spark.sql.streaming.stateStore.maintenanceInterval"


class NativeCleanupRace:
    """The native half of `cleanup-race`: Spark's maintenance, a small window, recorded deletes,
    and one task held at its changelog close until a delete took effect."""

    def __init__(self, retain: int, delete_delay_ms: int, hold: dict[str, int], hold_ms: int) -> None:
        self.retain, self.delay_ms = retain, delete_delay_ms
        self.term = f"delay({delete_delay_ms})"
        self.hold, self.hold_ms = hold, hold_ms
        self.hold_term = f"{filter_text(hold)}1*hold({hold_ms})"
        self._armed: str | None = None
        self._held: str | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._released = threading.Event()

    def spark_conf(self) -> dict[str, str]:
        """Spark's maintenance keeps `retain` versions (its commit and offset logs too), with more
        than the 2 threads Spark gives a 2-core executor: one store's maintenance waits while its
        task is held in its commit, and with one cleanup thread every other store's cleanup waited
        behind it (a run whose first delete came 0.3 s after the held task ended did not fire).
        Every 500 ms: Spark uploads only the newest queued snapshot and deletes a version only
        once two newer snapshots exist, so at 2 s a store's versions outran its snapshots and the
        held batch could come with nothing to delete."""
        return {RETAIN_CONF: str(self.retain), MAINTENANCE_THREADS_CONF: "4", MAINTENANCE_INTERVAL_CONF: "500ms"}

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        self._armed = add_term(ctx.control, POINT, self.term)
        self._held = add_term(ctx.control, HOLD_POINT, self.hold_term)
        self._thread = threading.Thread(target=self._release_after_a_delete, args=(ctx,), name="cleanup-race-hold", daemon=True)
        self._thread.start()
        return {"retain": self.retain, "failpoint": POINT, "armed": self._armed, "hold": {"failpoint": HOLD_POINT, "armed": self._held}}

    def _hold_firing(self, ctx: FaultContext) -> dict[str, Any] | None:
        """The held close's firing record (the plug-in's, with the task context of the filter)."""
        for f in ctx.firings(HOLD_POINT):
            if str(f.get("action", "")).startswith("hold(") and task_is(f.get("task"), self.hold):
                return f
        return None

    @staticmethod
    def _delete_since(ctx: FaultContext, since: float) -> dict[str, Any] | None:
        """A delete of Spark's maintenance fired at `since` or later whose file is gone."""
        for f in ctx.firings(POINT):
            if str(f.get("action", "")).startswith("delay") and float(f.get("time", 0)) >= since and _gone(f.get("file")):
                return f
        return None

    def _release_after_a_delete(self, ctx: FaultContext) -> None:
        """Once the task is held, wait (up to the hold's bound) for a delete that took effect after
        the hold began; then release it. Ends with the run or at heal."""
        held = ctx.wait(lambda: self._done.is_set() or self._hold_firing(ctx), timeout_s=float("inf"))
        if not isinstance(held, dict):
            return
        since = float(held.get("time", 0))
        deleted = ctx.wait(lambda: self._done.is_set() or self._delete_since(ctx, since), timeout_s=self.hold_ms / 1000)
        if isinstance(deleted, dict):
            ctx.control.release(HOLD_POINT)
            self._released.set()

    def heal(self, ctx: FaultContext) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._held is not None:
            remove_term(ctx.control, HOLD_POINT, self._held)
            self._held = None
            if not self._released.is_set() and self._hold_firing(ctx) is not None:
                ctx.control.release(HOLD_POINT)  # a hold still in progress ends with the fault
        if self._armed is not None:
            remove_term(ctx.control, POINT, self._armed)
            self._armed = None

    def evidence(self, ctx: FaultContext) -> Evidence:
        if not ctx.control.path.exists():
            return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
        deletes = [f for f in ctx.firings(POINT) if str(f.get("action", "")).startswith("delay")]
        done = [f for f in deletes if _gone(f.get("file"))]
        timed_out = self._hold_timed_out(ctx)
        if not done:
            if timed_out:
                return Evidence(None, f"the held task waited {self.hold_ms} ms and Spark's maintenance deleted no state file: cannot tell")
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
        if timed_out:
            return Evidence(None, f"the held task waited {self.hold_ms} ms and no delete took effect meanwhile: cannot tell")
        return Evidence(False, f"Spark's maintenance deleted {len(done)} state file(s), none while an attempt of a batch was alive")

    def _hold_timed_out(self, ctx: FaultContext) -> bool:
        """The held close ended by its bound, not by a release (the plug-in records how a hold ended)."""
        held = self._hold_firing(ctx)
        if held is None:
            return False
        key = (firing_process(held), held.get("hit"))
        return any(f.get("action") == "hold-timeout" and (firing_process(f), f.get("hit")) == key for f in ctx.firings(HOLD_POINT))


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
