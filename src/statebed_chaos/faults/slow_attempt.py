"""slow-attempt: attempt 0 of one state task of the trigger batch stays alive but slow, after
its store commit (`when: after`, point `task.commit.after`) or after loading its state,
before applying the batch (`when: before`, point `task.load.after`). The `--slow-task`
test hook as a fault: with speculation on (standalone), Spark launches a copy that commits
the same version too.

Armed in `prepare` on the run's failpoint control as `[batch=B,partition=P,attempt=0]1*delay(ms)`.
Proven by that failpoint's firing record carrying the task context; a speculative attempt
of that partition in the event log is reported (information, not required).

native-v1 / native-v2 (through the JVM plug-in): Spark's store has no task points, so the
attempt is held where its commit closes its changelog (`native.changelog.upload`, `when:
after` only; the task waits for that close). V1 closes it on the task thread (attempt 0
named); V2 on Spark's checksum pool threads, with no task context: the filter is
`[batch=B,partition=P]1*`, the first close of (B, P) in each executor JVM.

params: partition (default 0), ms (default 8000), when: after | before (default after).
"""

from __future__ import annotations

from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_job import jvm_plugin  # noqa: F401  (registers the plug-in's native.* points, so the control file accepts them)
from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS, V2, Format

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable
from .failpoint_fault import attempt0_filter, filter_text
from .process_faults import add_term, event_log_or_none, remove_term, task_is

__all__ = ["FAULT", "SlowAttempt"]

POINTS = {"after": "task.commit.after", "before": "task.load.after"}
NATIVE_POINT = "native.changelog.upload"  # Spark's store: the changelog close inside the task's commit


class SlowAttempt(Fault):
    kind: ClassVar[str] = "slow-attempt"
    description: ClassVar[str] = "attempt 0 of one state task stays alive but slow, after (or before) its commit"
    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: through the JVM plug-in

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        p = spec.params
        when = str(p.get("when", "after"))
        if when not in POINTS:
            raise UsageError(f"fault {spec.id} ({spec.kind}): when must be after or before, got {when!r}")
        self.when, self.point = when, POINTS[when]
        self.partition, self.ms = int(p.get("partition", 0)), int(p.get("ms", 8000))
        if self.partition < 0 or self.ms <= 0:
            raise UsageError(f"fault {spec.id} ({spec.kind}): partition must be >= 0 and ms > 0")
        self.term = self._term(V2)  # statebed's formats; a native run rebinds it (`_bind`)
        self._armed: str | None = None

    def check(self, format: Format, cluster: str, storage: str) -> None:
        super().check(format, cluster, storage)
        if format.native and self.when != "after":
            raise NotApplicable(
                f"{self.kind} when: {self.when} has no point in Spark's checkpoint I/O (native: when: after, the changelog close)"
            )

    def target(self, format: Format) -> dict[str, int]:
        """The held attempt's filter: attempt 0, except where Spark writes off the task thread (native V2)."""
        return attempt0_filter({"batch": self.spec.at.batch, "partition": self.partition}, format)

    def _bind(self, ctx: FaultContext) -> None:
        """A native run: the plug-in's point, and the filter its context can match (idempotent)."""
        if ctx.format.plugin:
            self.point, self.term = NATIVE_POINT, self._term(ctx.format)

    def _term(self, format: Format) -> str:
        return f"{filter_text(self.target(format))}1*delay({self.ms})"

    def prepare(self, ctx: FaultContext) -> None:
        self._bind(ctx)
        self._armed = add_term(ctx.control, self.point, self.term)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        return {"failpoint": self.point, "armed": self._armed or self.term}  # armed from the start; nothing to do now

    def heal(self, ctx: FaultContext) -> None:
        if self._armed is not None:
            remove_term(ctx.control, self.point, self._armed)
            self._armed = None

    def evidence(self, ctx: FaultContext) -> Evidence:
        self._bind(ctx)
        if not ctx.control.path.exists():
            return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
        want = self.target(ctx.format)
        who = f"{'attempt 0' if 'attempt' in want else 'the first close'} of batch {want['batch']} partition {self.partition}"
        fired = [f for f in ctx.firings(self.point) if str(f.get("action", "")).startswith("delay") and task_is(f.get("task"), want)]
        if not fired:
            return Evidence(False, f"{self.point} never delayed {who}")
        proof: list[dict[str, Any]] = [{"firing": fired[0]}]
        log = event_log_or_none(ctx)
        copies = (
            []
            if log is None
            else [
                {"task_id": t.task_id, "attempt": t.attempt, "executor": t.executor, "outcome": t.outcome}
                for t in log.tasks
                if t.speculative and t.batch == want["batch"] and t.index == self.partition
            ]
        )
        if copies:
            proof.append({"speculative_copies": copies})
        return Evidence(
            True,
            f"{self.point} delayed {who} by {self.ms} ms "
            f"(pid {fired[0].get('pid')} on {fired[0].get('host')}); {len(copies)} speculative cop(ies)",
            proof,
        )


FAULT = SlowAttempt
