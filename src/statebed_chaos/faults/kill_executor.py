"""kill-executor: SIGKILL an executor JVM and its Python workers mid-batch.

Aimed at an executor running a state task of the trigger batch when the attempt records
name one (waiting up to `wait_s`), else a seeded choice. Proven by the signal delivered to
that identity (the nemesis's history) and Spark's event log showing the executor removed.

params: wait_s (default 5): how long to wait for a running state task to aim at.
"""

from __future__ import annotations

import signal
from typing import Any, ClassVar

from .base import Evidence, Fault, FaultContext
from .process_faults import choose_executor, signal_tree, signalled_and_logged, tree_of

__all__ = ["FAULT", "KillExecutor"]


class KillExecutor(Fault):
    kind: ClassVar[str] = "kill-executor"
    description: ClassVar[str] = "SIGKILL an executor JVM and its Python workers mid-batch"
    needs: ClassVar[frozenset[str]] = frozenset({"standalone"})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        executor, chosen = choose_executor(ctx, self.spec, float(self.spec.params.get("wait_s", 5)))
        signalled = signal_tree(ctx, tree_of(ctx, executor), signal.SIGKILL)
        return {
            "signal": "SIGKILL",
            "executor_id": executor.attrs.get("executor_id"),
            "app_id": executor.attrs.get("app_id"),
            "host": executor.host,
            **chosen,
            "signalled": signalled,
        }

    def evidence(self, ctx: FaultContext) -> Evidence:
        got = signalled_and_logged(ctx, self.spec, "SIGKILL", "the executor's removal")
        if isinstance(got, Evidence):
            return got
        facts, log = got
        eid, app = str(facts.get("executor_id")), str(facts.get("app_id"))
        found = [e for e in log.executors if (e.executor, e.app) == (eid, app)]
        if not found or found[0].removed_ms is None:
            return Evidence(None, f"SIGKILL delivered, but the event log does not show executor {eid} of {app} removed", [facts])
        ex = found[0]
        lost = [
            {"task_id": t.task_id, "batch": t.batch, "stage": t.stage, "partition": t.index, "attempt": t.attempt, "outcome": t.outcome}
            for t in log.tasks
            if (t.executor, t.app) == (eid, app) and not t.succeeded
        ]
        proof: list[dict[str, Any]] = [
            {"signal": facts},
            {"executor_removed": {"executor": eid, "app": app, "host": ex.host, "removed_ms": ex.removed_ms, "reason": ex.removed_reason}},
        ]
        if lost:
            proof.append({"attempts_lost": lost})
        return Evidence(
            True, f"executor {eid} on {ex.host} killed; Spark removed it ({ex.removed_reason}); {len(lost)} attempt(s) lost", proof
        )


FAULT = KillExecutor
