"""rewind-reprocess: at the trigger the driver is killed (SIGKILL, driver and its JVM); before
the runner restarts it with `--resume`, the run directory is rewound to committed batch K
(`statebed_model.rewind`: later log and run entries moved aside, never deleted), so the
restarted query reprocesses K+1.. on K's state with the same input.

To make the reprocess draw differently, as Spark's `rand()` does after a restart (a task's
choices here derive from (seed, batch, partition, attempt), so a plain rerun replays them),
`diverge` arms `task.load.after=[batch=K+1,partition=0,attempt=0]1*error` before the first
driver: the abandoned timeline commits batch K+1 partition 0 from attempt 1 (a retry), the
rerun from attempt 0. With `drop_snapshots` every snapshot upload of the rerun is skipped
(`snapshot.upload.before=drop`), so the abandoned timeline's snapshots stay the newest
files of their versions: V1 loads them by name (the stale-timeline anomaly); V2 loads by id.

Proven by the delivered kill, the rewind journal (status done, to K, its moves), the
restarted driver, batch K+1 committed again after the rewind, and the firings of `diverge`
and `drop_snapshots` when armed.

params: to_batch (default: trigger batch - 2, at least 0); drop_snapshots, diverge (default:
true in v1/v2, both need statebed's failpoints: not native; diverge needs cluster:
standalone, where a failed attempt is retried).
"""

from __future__ import annotations

from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_model.rewind import plan_rewind
from statebed_model.rewind_journal import Journal, last_journal
from statebed_store.formats import Format
from statebed_store.naming import COMMITS_DIR

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable
from .failpoint_fault import matching, positive
from .process_faults import add_term, injection, remove_term
from .restart_driver import kill_driver, restarted

__all__ = ["FAULT", "RewindReprocess"]

DROP_POINT, DIVERGE_POINT = "snapshot.upload.before", "task.load.after"


class RewindReprocess(Fault):
    kind: ClassVar[str] = "rewind-reprocess"
    description: ClassVar[str] = "kill the driver, rewind the run to batch K, resume: batches after K are reprocessed"
    restarts_driver = True

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.to_batch = positive(spec, "to_batch", max(spec.at.batch - 2, 0), zero_ok=True) or 0
        if self.to_batch >= spec.at.batch:
            raise UsageError(
                f"fault {spec.id} ({spec.kind}): to_batch must be below the trigger batch {spec.at.batch}, got {self.to_batch}"
            )
        self.drop_snapshots = _flag(spec, "drop_snapshots")
        self.diverge = _flag(spec, "diverge")
        self.diverge_target = {"batch": self.to_batch + 1, "partition": 0, "attempt": 0}
        self.diverge_term = f"[batch={self.to_batch + 1},partition=0,attempt=0]1*error"
        self._armed: dict[str, str] = {}  # point -> term
        self._rewound = False

    def _uses(self, format: Format) -> tuple[bool, bool]:
        """(drop_snapshots, diverge) in `mode`: unset means on in statebed modes, off in native."""
        native = format.native
        return (not native if self.drop_snapshots is None else self.drop_snapshots), (not native if self.diverge is None else self.diverge)

    def check(self, format: Format, cluster: str, storage: str) -> None:
        super().check(format, cluster, storage)
        drop, diverge = self._uses(format)
        if format.native and (drop or diverge):
            raise NotApplicable(f"{self.kind} drop_snapshots / diverge need statebed's failpoints; native runs set both false")
        if storage != "local":
            raise NotApplicable(f"{self.kind} needs storage: local (a rewind moves checkpoint files by rename)")
        if diverge and cluster != "standalone":
            raise NotApplicable(f"{self.kind} diverge needs cluster: standalone (the failed attempt must be retried)")

    def prepare(self, ctx: FaultContext) -> None:
        if self._uses(ctx.format)[1]:
            self._arm(ctx, DIVERGE_POINT, self.diverge_term)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        self._disarm(ctx, DIVERGE_POINT)  # the rerun's attempt 0 must commit
        return {**kill_driver(ctx, self.spec), "to_batch": self.to_batch}

    def before_resume(self, ctx: FaultContext) -> dict[str, Any] | None:
        """Rewind once (the first restart after the kill), then arm the snapshot drop for the rerun."""
        if self._rewound:
            return None
        self._rewound = True
        plan = plan_rewind(str(ctx.run.root), self.to_batch)
        journal = plan.journal()
        journal.run_forward()
        if self._uses(ctx.format)[0]:
            self._arm(ctx, DROP_POINT, "drop")
        return {"rewound": journal.dir, "to_batch": self.to_batch, "latest_batch": plan.latest_batch, "moves": len(journal.moves)}

    def heal(self, ctx: FaultContext) -> None:
        for point in list(self._armed):
            self._disarm(ctx, point)

    def _arm(self, ctx: FaultContext, point: str, term: str) -> None:
        self._armed[point] = add_term(ctx.control, point, term)

    def _disarm(self, ctx: FaultContext, point: str) -> None:
        term = self._armed.pop(point, None)
        if term is not None:
            remove_term(ctx.control, point, term)

    def evidence(self, ctx: FaultContext) -> Evidence:
        done = injection(ctx, self.spec)
        if done is None or done[0] != "ok":
            return Evidence(False, "no SIGKILL was delivered to the driver (the history has no successful inject)")
        proof: list[dict[str, Any]] = [{"signal": done[1]}]
        journal = last_journal(ctx.run.root)
        if journal is None or journal.to_batch != self.to_batch:
            return Evidence(False, f"the run has no finished rewind to batch {self.to_batch} under {ctx.run.root / '_rewind'}", proof)
        proof.append({"rewind": {"journal": str(journal.path), "status": journal.status, "moves": [m.to_json() for m in journal.moves]}})
        again = self._recommitted(ctx, journal)
        if again is not None:
            return Evidence(again.fired, again.detail, proof + again.proof)
        missing = self._firings_missing(ctx, proof)
        if missing is not None:
            return Evidence(False, missing, proof)
        ev = restarted(ctx.history.ops("driver"), 0.0, proof)
        if ev.fired is not True:
            return ev
        return Evidence(
            True, f"rewound to batch {self.to_batch} ({len(journal.moves)} file(s) moved to {journal.dir}); {ev.detail}", ev.proof
        )

    def _recommitted(self, ctx: FaultContext, journal: Journal) -> Evidence | None:
        """None when batch K+1 was committed again after the rewind (its earlier commit in the backup)."""
        commit = f"{COMMITS_DIR}/{self.to_batch + 1}"
        moved = [m for m in journal.moves if m.src.endswith(f"spark-checkpoint/{commit}")]
        if not moved:
            return Evidence(False, f"the rewind moved no {commit} of the Spark checkpoint: batch {self.to_batch + 1} had not committed")
        if not (ctx.run.root / moved[0].src).exists():
            return Evidence(False, f"batch {self.to_batch + 1} was not committed again after the rewind ({moved[0].src} is missing)")
        return None if ctx.run.root.joinpath(moved[0].dst).exists() else Evidence(None, f"the rewind backup lost {moved[0].dst}")

    def _firings_missing(self, ctx: FaultContext, proof: list[dict[str, Any]]) -> str | None:
        """Why an armed failpoint of this fault did not provably fire (None: all did, proof extended)."""
        drop, diverge = self._uses(ctx.format)
        wanted = [(DIVERGE_POINT, "error", self.diverge_target)] if diverge else []
        wanted += [(DROP_POINT, "drop", {})] if drop else []
        for point, action, target in wanted:
            fired = matching(ctx, point, action, target)
            if not fired:
                return f"{point} never fired {action} for {target or 'a snapshot of the rerun'}"
            proof.append({"firing": fired[0]})
        return None


def _flag(spec: FaultSpec, name: str) -> bool | None:
    value = spec.params.get(name)
    if value is not None and not isinstance(value, bool):
        raise UsageError(f"fault {spec.id} ({spec.kind}): {name} must be true or false, got {value!r}")
    return value


FAULT = RewindReprocess
