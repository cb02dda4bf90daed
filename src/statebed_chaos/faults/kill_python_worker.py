"""kill-python-worker: SIGKILL the Python worker (pyspark.daemon's forked worker, not the
daemon) that runs attempt 0 of one state task of the trigger batch, while it runs.

So that the task is surely running when the trigger comes, `prepare` arms
`[batch=B,partition=P,attempt=0]1*delay(hold_ms)` on `task.load.after` (state loaded,
batch not applied); the worker is found from the attempt's record (host, pid) among the
run's Python worker targets, identity-checked. Proven by the signal delivered and by the
attempt never ending well: its record still "info", or Spark's event log showing it failed.
Statebed modes only: native runs have no statebed task (and no attempt records) to aim at.

params: partition (default 0), hold_ms (default 10000; 0: no hold), wait_s (default 60):
how long to wait for the attempt to show up running.
"""

from __future__ import annotations

import signal
from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_model.attempts import read_attempts
from statebed_store.formats import STATEBED_FORMATS, Format

from .base import Evidence, Fault, FaultContext, FaultSpec
from .process_faults import NoTarget, add_term, brief, event_log_or_none, injection, remove_term, running_attempts

__all__ = ["FAULT", "KillPythonWorker"]

HOLD_POINT = "task.load.after"


class KillPythonWorker(Fault):
    kind: ClassVar[str] = "kill-python-worker"
    description: ClassVar[str] = "SIGKILL the Python worker running a state task"
    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        p = spec.params
        self.partition, self.hold_ms, self.wait_s = int(p.get("partition", 0)), int(p.get("hold_ms", 10000)), float(p.get("wait_s", 60))
        if self.partition < 0 or self.hold_ms < 0:
            raise UsageError(f"fault {spec.id} ({spec.kind}): partition and hold_ms must be >= 0")
        self._armed: str | None = None

    def prepare(self, ctx: FaultContext) -> None:
        if self.hold_ms:
            term = f"[batch={self.spec.at.batch},partition={self.partition},attempt=0]1*delay({self.hold_ms})"
            self._armed = add_term(ctx.control, HOLD_POINT, term)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        b, p = self.spec.at.batch, self.partition

        def running() -> tuple[Any, Any] | None:
            for a in running_attempts(ctx, b, p):
                found = ctx.targets.find("python-worker", role="worker", pid=a.pid)
                if a.attempt == 0 and found:
                    return a, found[0]
            return None

        hit = ctx.wait(running, self.wait_s)
        if hit is None:
            raise NoTarget(f"{self.spec.kind} {self.spec.id}: no running attempt 0 of batch {b} partition {p} within {self.wait_s:g} s")
        a, worker = hit
        ctx.targets.kill(worker, signal.SIGKILL)
        return {
            "signal": "SIGKILL",
            "batch": b,
            "partition": p,
            "attempt": a.attempt,
            "task_attempt_id": a.task_attempt_id,
            "signalled": [brief(worker)],
        }

    def heal(self, ctx: FaultContext) -> None:
        if self._armed is not None:
            remove_term(ctx.control, HOLD_POINT, self._armed)
            self._armed = None

    def evidence(self, ctx: FaultContext) -> Evidence:
        done = injection(ctx, self.spec)
        if done is None or done[0] != "ok":
            return Evidence(False, "no SIGKILL was delivered (the history has no successful inject)")
        facts = done[1]
        tid = facts.get("task_attempt_id")
        records = [a for a in read_attempts(ctx.run.root) if a.task_attempt_id == tid]
        log = event_log_or_none(ctx)
        spark = [] if log is None else [t for t in log.tasks if t.task_id == tid and t.batch == facts.get("batch")]
        proof: list[dict[str, Any]] = [{"signal": facts}]
        if records:
            proof.append({"attempt_record": {"task_attempt_id": tid, "outcome": records[0].outcome, "pid": records[0].pid}})
        if spark:
            proof.append({"event_log": {"task_id": tid, "outcome": spark[0].outcome, "executor": spark[0].executor}})
        if not records and not spark:
            return Evidence(None, f"SIGKILL delivered, but neither an attempt record nor the event log shows task {tid}", proof)
        cut = any(r.outcome == "info" for r in records) or any(t.outcome not in (None, "Success") for t in spark)
        if not cut:
            return Evidence(False, f"SIGKILL delivered, but task {tid} ended well: the kill came too late", proof)
        return Evidence(
            True,
            f"the Python worker of batch {facts.get('batch')} partition {facts.get('partition')} (task {tid}) was killed mid-task",
            proof,
        )


FAULT = KillPythonWorker
