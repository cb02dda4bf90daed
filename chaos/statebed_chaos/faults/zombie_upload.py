"""zombie-upload: the sharpest V1 positive control. Two attempts of one state task of the
trigger batch write the same version; the one Spark accepts (the winner) writes first, the
other (the zombie) after it. V1 names the file `<v>.changelog`: the zombie overwrites the
committed content while the winner's executor goes on from the winner's state in memory.
V2 names it `<v>_<uuid>.changelog`: an orphan no commit names.

Roles (verified on a standalone cluster): attempt 0 is the winner, slowed after loading its
state so Spark launches a speculative copy, attempt 1 (on the other executor), which is held
just before its changelog upload. Attempt 0 commits; once its store commit returned
(`task.commit.after`) `inject` releases the hold, and attempt 1, already doomed, writes its
changelog after the winner's, before Spark's kill reaches its Python worker
(spark.python.task.killTimeout). (Holding attempt 0 and releasing it at attempt 1's
`changelog.upload.after` instead, as first designed, let attempt 0 finish first: Spark
accepted the "zombie", whose content was then the file's too; nothing to catch.)

Armed in `prepare` on the run's failpoint control (A0/A1 = [batch=B,partition=P,attempt=0|1]):

    task.load.after         = A0 1*delay(slow_ms)     the winner is a straggler: Spark speculates
    changelog.upload.before = A1 1*hold(hold_ms)      the copy waits before its write
    changelog.upload.after  = A0 1*delay(1) -> A1 1*delay(1)   markers: each changelog durable
    task.commit.after       = A0 1*delay(1)           marker: the winner's commit returned

Proven by the firing records: attempt 1's hold and its end, attempt 0's changelog durable and
commit returned, and attempt 1's changelog durable later than attempt 0's (the zombie wrote
after the winner). A zombie killed before it wrote is `fired: false` (the run is unknown).

params: partition (default 0), hold_ms (default 60000), slow_ms (default 5000).
"""

from __future__ import annotations

from typing import Any, ClassVar

from statebed_store.errors import UsageError

from .base import Evidence, Fault, FaultContext, FaultSpec
from .failpoint_fault import filter_text, matching, positive, term_target
from .processes import add_term, remove_term

__all__ = ["FAULT", "ZombieUpload"]

BEFORE, AFTER = "changelog.upload.before", "changelog.upload.after"
LOADED, COMMITTED = "task.load.after", "task.commit.after"


class ZombieUpload(Fault):
    kind: ClassVar[str] = "zombie-upload"
    description: ClassVar[str] = "a speculative copy's changelog upload is held until the accepted attempt committed, then released"
    modes: ClassVar[frozenset[str]] = frozenset({"v1", "v2"})  # statebed's failpoints; native Spark has none
    needs: ClassVar[frozenset[str]] = frozenset({"standalone"})  # speculation launches the copy

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        what = str(spec.params.get("what", "changelog"))
        if what != "changelog":
            raise UsageError(
                f"fault {spec.id} ({spec.kind}): what must be changelog (the snapshot variant is not implemented), got {what!r}"
            )
        self.hold_ms = positive(spec, "hold_ms", 60000) or 60000
        self.slow_ms = positive(spec, "slow_ms", 5000)
        self.winner = term_target(spec, batch=True, attempt=0)
        self.zombie = {**self.winner, "attempt": 1}
        a0, a1 = filter_text(self.winner), filter_text(self.zombie)
        self.terms = [
            (LOADED, f"{a0}1*delay({self.slow_ms})"),
            (BEFORE, f"{a1}1*hold({self.hold_ms})"),
            (AFTER, f"{a0}1*delay(1)"),
            (AFTER, f"{a1}1*delay(1)"),
            (COMMITTED, f"{a0}1*delay(1)"),
        ]
        self._armed: list[tuple[str, str]] = []

    def prepare(self, ctx: FaultContext) -> None:
        self._armed = [(point, add_term(ctx.control, point, term)) for point, term in self.terms]

    def _ready(self, ctx: FaultContext) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The copy is on hold and the winner's commit returned: the moment to release the copy."""
        held = matching(ctx, BEFORE, "hold", self.zombie)
        done = matching(ctx, COMMITTED, "delay", self.winner)
        return (held[0], done[0]) if held and done else None

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """Wait (bounded by the hold) for the winner's commit, then release the held copy."""
        found = ctx.wait(lambda: self._ready(ctx), self.hold_ms / 1000.0)
        version = ctx.control.release(BEFORE)
        if found is None:
            return {"released": "without a winner (hold bound or run end)", "control_version": version}
        held, done = found
        return {"released": "after the winner's commit", "control_version": version, "hold": held, "winner_committed": done}

    def heal(self, ctx: FaultContext) -> None:
        if self._armed:
            ctx.control.release(BEFORE)  # never leave the copy blocked
            for point, term in self._armed:
                remove_term(ctx.control, point, term)
            self._armed = []

    def evidence(self, ctx: FaultContext) -> Evidence:
        if not ctx.control.path.exists():
            return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
        where = f"batch {self.winner['batch']} partition {self.winner['partition']}"
        held = matching(ctx, BEFORE, "hold", self.zombie)
        if not held:
            return Evidence(False, f"no speculative attempt 1 of {where} reached its held changelog upload")
        ended = [f for f in ctx.firings(BEFORE) if f.get("action") in ("released", "hold-timeout") and f.get("task") == held[0].get("task")]
        won = matching(ctx, AFTER, "delay", self.winner)
        proof: list[dict[str, Any]] = [{"hold": held[0]}, *({"hold_end": e} for e in ended[:1]), *({"winner_durable": w} for w in won[:1])]
        if not won:
            return Evidence(False, f"attempt 0 of {where} never wrote its changelog while attempt 1 was held", proof)
        zombie = [f for f in matching(ctx, AFTER, "delay", self.zombie) if float(f["time"]) > float(won[0]["time"])]
        if not zombie:
            return Evidence(False, f"attempt 1 of {where} never wrote its changelog after attempt 0's (killed first?)", proof)
        proof.append({"zombie_durable": zombie[0]})
        how = ended[0].get("action") if ended else "unknown"
        gap = float(zombie[0]["time"]) - float(won[0]["time"])
        return Evidence(
            True,
            f"attempt 1 of {where} (pid {held[0].get('pid')}) was held, {how}, and wrote its changelog {gap:.3f} s after "
            f"the winner attempt 0's (pid {won[0].get('pid')})",
            proof,
        )


FAULT = ZombieUpload
