"""fail-changelog-upload: the first attempt of one state task of the trigger batch that reaches
its changelog upload fails it, before the write (`when: before`, point
`changelog.upload.before`) or after the changelog is durable (`when: after`,
`changelog.upload.after`: a file no commit names). Spark retries the task; a later attempt
commits. Armed in `prepare` as `[batch=B,partition=P]1*error` and disarmed as soon as it
fired, so a retry in another Python worker commits.

Not aimed at attempt 0: with speculation on, a copy may finish before attempt 0 (slow to
start on a cold executor) ever reaches the upload, and the fault would not fire. Counts are
per process, so two workers may each fail once before the disarm lands: within Spark's
`spark.task.maxFailures` (4). Proven by the firing; later attempts' records are listed.

params: partition (default 0), when: before | after (default before).
"""

from __future__ import annotations

from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_model.attempts import read_attempts
from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS, Format

from .base import Evidence, FaultContext, FaultSpec, NotApplicable
from .failpoint_fault import FailpointFault, filter_text, matching, term_target

__all__ = ["FAULT", "FailChangelogUpload"]

WAIT_S = 300.0  # how long inject waits for the firing before disarming anyway (bounded)
POINTS = {"before": "changelog.upload.before", "after": "changelog.upload.after"}


class FailChangelogUpload(FailpointFault):
    kind: ClassVar[str] = "fail-changelog-upload"
    description: ClassVar[str] = "one attempt's changelog upload fails once (error before or after the write); Spark retries"
    point = "changelog.upload.before"
    action = "error"
    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: through the JVM plug-in
    native_points: ClassVar[dict[str, str]] = {"changelog.upload.before": "native.changelog.upload"}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        when = str(spec.params.get("when", "before"))
        if when not in POINTS:
            raise UsageError(f"fault {spec.id} ({spec.kind}): when must be before or after, got {when!r}")
        self.point = POINTS[when]
        self.target = term_target(spec, batch=True, attempt=None)
        self.term = f"{filter_text(self.target)}1*error"

    def check(self, format: Format, cluster: str, storage: str) -> None:
        super().check(format, cluster, storage)
        if format.native and cluster == "local":
            raise NotApplicable(f"{self.kind}: local[N] gives Spark's task one try, so the failed upload would fail the query")

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """At the trigger batch: wait (bounded) for the failure to fire, then disarm it."""
        facts = super().inject(ctx)
        fired = ctx.wait(lambda: matching(ctx, self.point, self.action, self.target), WAIT_S)
        self.heal(ctx)
        facts["fired_before_disarm"] = len(fired or [])
        return facts

    def evidence(self, ctx: FaultContext) -> Evidence:
        ev = super().evidence(ctx)
        if ev.fired and not ctx.format.native:  # native runs record no attempts: Spark's event log has the retry
            retries = [
                {"attempt": a.attempt, "outcome": a.outcome, "host": a.host, "checkpoint_id": a.checkpoint_id}
                for a in read_attempts(ctx.run.root)
                if (a.batch, a.partition) == (self.target["batch"], self.target["partition"]) and a.attempt > 0
            ]
            ev.proof.append({"retries": retries})
            ev.detail += f"; {sum(r['outcome'] == 'ok' for r in retries)} later attempt(s) ended ok"
        return ev


FAULT = FailChangelogUpload
