"""pause-executor: SIGSTOP an executor JVM and its Python workers for `for_s` seconds, then
SIGCONT, so Spark launches speculative copies of the tasks frozen on it.

Aimed at the executor of a straggler: a state task of the trigger batch still running while
another partition's task has finished (only then can Spark speculate; if the frozen executor
also serves the shuffle output the other tasks need, none of them finishes during the pause
and Spark copies nothing), waiting up to `wait_s`; else a seeded choice. Native runs write
no attempt records: there the target is the executor JVM a JVM plug-in delay or hold of the
trigger batch holds now (its firing record's pid; the matrix pairs the pause with
slow-attempt's native delay at a changelog close). Proven from
Spark's event log: a speculative attempt, launched during the pause, of a task whose
original attempt was running on the paused executor when the pause began (a copy launched
after the resume, of a task that ran elsewhere, or whose original started later, is not
the pause's doing). The copy's launch is the proof, not its success: a copy started while
the executor is frozen may fail fetching the shuffle blocks that executor serves, and is
then retried like any failed task.

params: wait_s (default 5): how long to wait for a running state task to aim at.
for_s: the pause (default 8 s; resumed by a timer even when the schedule gives none).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, ClassVar

from ..targets import Target
from .base import Evidence, Fault, FaultContext, FaultSpec
from .process_faults import choose_executor, resume_all, signal_tree, signalled_and_logged, tree_of

__all__ = ["FAULT", "PauseExecutor"]

DEFAULT_PAUSE_S = 8.0


class PauseExecutor(Fault):
    kind: ClassVar[str] = "pause-executor"
    description: ClassVar[str] = "SIGSTOP an executor (and its Python workers) for a while, then SIGCONT: Spark speculates"
    needs: ClassVar[frozenset[str]] = frozenset({"standalone"})
    # Spark copies a task once it runs 1.5x its finished siblings' median: a task slow for other
    # reasons (a slow state load) was copied 14 ms before the pause began, and nothing proved the
    # pause. No copy before a task has run 6 s: longer than the held straggler runs before the
    # pause, shorter than the pause, so the copy Spark launches is the pause's doing.
    spark_conf: ClassVar[dict[str, str]] = {"spark.speculation.minTaskRuntime": "6s"}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._paused: list[Target] = []
        self._lock = threading.Lock()

    @property
    def pause_s(self) -> float:
        return DEFAULT_PAUSE_S if self.spec.for_s is None else float(self.spec.for_s)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        executor, chosen = choose_executor(ctx, self.spec, float(self.spec.params.get("wait_s", 5)), straggler=True)
        tree = tree_of(ctx, executor)
        with self._lock:
            self._paused = tree
            paused_at = time.time()
            signalled = signal_tree(ctx, tree, signal.SIGSTOP)
        timer = threading.Timer(self.pause_s, self.heal, (ctx,))  # bounded even if the nemesis heals only at the end
        timer.daemon = True
        timer.start()
        return {
            "signal": "SIGSTOP",
            "executor_id": executor.attrs.get("executor_id"),
            "app_id": executor.attrs.get("app_id"),
            "host": executor.host,
            "paused_at": round(paused_at, 6),
            "for_s": self.pause_s,
            **chosen,
            "signalled": signalled,
        }

    def heal(self, ctx: FaultContext) -> None:
        with self._lock:
            tree, self._paused = self._paused, []
            resume_all(ctx, tree)

    def evidence(self, ctx: FaultContext) -> Evidence:
        got = signalled_and_logged(ctx, self.spec, "SIGSTOP", "speculative copies")
        if isinstance(got, Evidence):
            return got
        facts, log = got
        eid, app = str(facts.get("executor_id")), str(facts.get("app_id"))
        if not isinstance(facts.get("paused_at"), (int, float)):
            return Evidence(None, "SIGSTOP delivered, but the inject recorded no pause time to place Spark's copies against", [facts])
        paused_ms = float(facts["paused_at"]) * 1000
        end_ms = paused_ms + float(facts.get("for_s", self.pause_s)) * 1000  # the timer resumes it then at the latest
        copies: list[dict[str, Any]] = [
            {
                "batch": copy.batch,
                "stage": copy.stage,
                "partition": copy.index,
                "original": {"task_id": orig.task_id, "attempt": orig.attempt, "executor": eid, "outcome": orig.outcome},
                "copy": {
                    "task_id": copy.task_id,
                    "attempt": copy.attempt,
                    "executor": copy.executor,
                    "outcome": copy.outcome,
                    "launched_into_pause_ms": round(copy.launch_ms - paused_ms),
                },
            }
            for orig, copy in log.copies_during(eid, app, paused_ms, end_ms)
        ]
        if not copies:
            return Evidence(
                False,
                f"executor {eid} was paused, but Spark launched no speculative copy, during the pause, of a task running on it when it began",
                [facts],
            )
        ok = sum(1 for c in copies if c["copy"]["outcome"] == "Success")
        return Evidence(
            True,
            f"executor {eid} paused; {len(copies)} speculative cop(ies) of its frozen tasks launched during the pause, {ok} succeeded",
            [{"signal": facts}, {"speculative_copies": copies}],
        )


FAULT = PauseExecutor
