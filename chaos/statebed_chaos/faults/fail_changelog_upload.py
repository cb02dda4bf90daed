"""fail-changelog-upload: attempt 0 of one state task of the trigger batch fails its changelog
upload once, before the write (`when: before`, point `changelog.upload.before`) or after the
changelog is durable (`when: after`, `changelog.upload.after`: a file no commit names). Spark
retries the task; the retry (attempt 1) commits. Armed in `prepare` as
`[batch=B,partition=P,attempt=0]1*error`. Proven by that firing; the retry's attempt record
(outcome ok) is reported beside it.

params: partition (default 0), when: before | after (default before).
"""

from __future__ import annotations

from typing import ClassVar

from statebed_model.attempts import read_attempts
from statebed_store.errors import UsageError

from .base import Evidence, FaultContext, FaultSpec
from .failpoint_fault import FailpointFault, filter_text, term_target

__all__ = ["FAULT", "FailChangelogUpload"]

POINTS = {"before": "changelog.upload.before", "after": "changelog.upload.after"}


class FailChangelogUpload(FailpointFault):
    kind: ClassVar[str] = "fail-changelog-upload"
    description: ClassVar[str] = "one attempt's changelog upload fails once (error before or after the write); Spark retries"
    point = "changelog.upload.before"
    action = "error"

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        when = str(spec.params.get("when", "before"))
        if when not in POINTS:
            raise UsageError(f"fault {spec.id} ({spec.kind}): when must be before or after, got {when!r}")
        self.point = POINTS[when]
        self.target = term_target(spec, batch=True, attempt=0)
        self.term = f"{filter_text(self.target)}1*error"

    def evidence(self, ctx: FaultContext) -> Evidence:
        ev = super().evidence(ctx)
        if ev.fired:
            retries = [
                {"attempt": a.attempt, "outcome": a.outcome, "host": a.host, "checkpoint_id": a.checkpoint_id}
                for a in read_attempts(ctx.run.root)
                if (a.batch, a.partition) == (self.target["batch"], self.target["partition"]) and a.attempt > 0
            ]
            ev.proof.append({"retries": retries})
            ev.detail += f"; {sum(r['outcome'] == 'ok' for r in retries)} later attempt(s) ended ok"
        return ev


FAULT = FailChangelogUpload
