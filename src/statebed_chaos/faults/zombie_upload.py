"""zombie-upload: the sharpest V1 positive control. Two attempts of one state task of the
trigger batch write the same version; the one Spark accepts (the winner) writes first, the
other (the zombie) after it. V1 names the file `<v>.changelog` / `<v>.zip`: the zombie
overwrites the committed content while the winner's executor goes on from the winner's
state in memory. V2 names it `<v>_<uuid>.changelog|.zip`: an orphan no commit names.

`what: changelog` (default; verified on a standalone cluster): attempt 0 is the winner,
slowed after loading its state so Spark launches a speculative copy, attempt 1 (on the
other executor), which is held just before its changelog upload. Attempt 0 commits; once
its store commit returned (`task.commit.after`) `inject` releases the hold, and attempt 1,
already doomed, writes its changelog after the winner's, before Spark's kill reaches its
Python worker (spark.python.task.killTimeout). (Holding attempt 0 and releasing it at
attempt 1's `changelog.upload.after` instead, as first designed, let attempt 0 finish
first: Spark accepted the "zombie", whose content was then the file's too; nothing to catch.)

    task.load.after         = A0 1*delay(slow_ms)     the winner is a straggler: Spark speculates
    changelog.upload.before = A1 1*hold(hold_ms)      the copy waits before its write
    changelog.upload.after  = A0 1*delay(1) -> A1 1*delay(slow_ms)   markers: each changelog durable;
                                                      the zombie then straggles (below)
    task.commit.after       = A0 1*delay(1)           marker: the winner's commit returned

Released, the copy writes at once and then straggles for slow_ms: on a loaded machine the
winner, between its commit and its result reaching the driver, could otherwise be overtaken
and Spark would accept the copy (1 of 4 control runs with two other Spark jobs running).

`what: snapshot`: roles inverted, so both changelogs are harmless and only the snapshot
differs. Attempt 0 is the zombie: it commits `<v>`, then stalls (`task.commit.after`), so
Spark speculates. The copy, attempt 1, is held after its load until attempt 0's commit
returned (on a busy machine Spark may launch it before a cold attempt 0 even loaded, and it
would commit first), then commits `<v>` and wins (V1: its changelog overwrites attempt 0's:
the accepted content). Both queue a snapshot of `<v>`: the experiment must make v = batch + 1
a snapshot version for both (no snapshot before it, `snapshot_interval` <= v; with interval
v and batches < 2v no later snapshot hides it). Attempt 0's upload, in its worker's
background uploader thread, is held; once attempt 1's snapshot is durable `inject` releases
it, and it lands while Spark kills attempt 0 (the worker dies only after killTimeout).

V1 is caught whoever runs the next batch: the state verifier loads every committed version
of these random workloads from its files, and `<v>` (the zombie's `<v>.changelog`, or its
`<v>.zip`) contradicts the output Spark committed for batch v-1, the winner's. The final
state alone shows it only when the winner's executor carried on from memory (a job that
reloads the zombie's file goes on from another valid random sample). Each control pins a
seed whose two attempts draw differently (tests/chaos/test_positive_controls.py).

    task.commit.after       = A0 1*delay(slow_ms)     the zombie straggles after its commit
    task.load.after         = A1 1*hold(hold_ms)      the copy waits for the zombie's commit
    snapshot.upload.before  = A0 1*hold(hold_ms)      the zombie's snapshot waits before its write
    snapshot.upload.after   = A1 1*delay(1) -> A0 1*delay(1)   markers: each snapshot durable

(A0/A1 = [batch=B,partition=P,attempt=0|1], armed in `prepare` on the run's failpoint control.)

Proven by the firing records: the zombie's hold and its end, the winner's file durable and
the zombie's durable later; and by Spark's event log: the winner's attempt succeeded. A
zombie killed before it wrote is `fired: false`; no event log, `fired: null` (unknown).

params: what (changelog | snapshot), partition (default 0), hold_ms (default 60000),
replan (default false; native: the zombie outlives its driver and the batch is planned again
by the restarted one, `zombie_replan`),
slow_ms (default 5000 for changelog; 30000 for snapshot: attempt 1 must finish first, and on a
machine loaded with other Spark jobs 10 s was once not enough; the stall costs nothing once it has).

native-v1 / native-v2: Spark's own delayed close through the JVM plug-in, attempt 0's
changelog (or, `what: snapshot` at batch 0, its forced `1.zip`) landing after the next batch's
commit (`zombie_native`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_model.eventlog import EventLog, TaskAttempt
from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS, Format

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable
from .failpoint_fault import filter_text, matching, positive, term_target
from .process_faults import add_term, event_log_or_none, remove_term
from .zombie_native import NativeZombie
from .zombie_replan import ReplanZombie

__all__ = ["FAULT", "ZombieUpload", "accepted_attempts"]

BEFORE, AFTER = "changelog.upload.before", "changelog.upload.after"
SNAP_BEFORE, SNAP_AFTER = "snapshot.upload.before", "snapshot.upload.after"
LOADED, COMMITTED = "task.load.after", "task.commit.after"


@dataclass(frozen=True)
class _Variant:
    """What the two attempts race to write, where the zombie waits, and what releases it."""

    file: str  # "changelog" | "snapshot"
    hold: str  # the zombie's held point
    durable: str  # marker point: the file is written
    release: str  # the winner's firing that releases the zombie
    released: str  # that firing in words
    fact: str  # its name in inject's facts
    zombie: int  # the zombie's attempt number (the winner is the other one)
    slow_ms: int  # default straggler delay
    gate: bool = False  # hold the winner after its load until the zombie's commit returned


VARIANTS = {
    "changelog": _Variant("changelog", BEFORE, AFTER, COMMITTED, "the winner's commit", "winner_committed", zombie=1, slow_ms=5000),
    "snapshot": _Variant(
        "snapshot", SNAP_BEFORE, SNAP_AFTER, SNAP_AFTER, "the winner's snapshot", "winner_durable", zombie=0, slow_ms=30000, gate=True
    ),
}


def accepted_attempts(log: EventLog, batch: int, partition: int) -> list[TaskAttempt]:
    """Spark's successful attempts of the (batch, partition) tasks that ran more than once
    (the state task the fault doubled): exactly one when Spark's choice is known."""
    return [t for t in log.tasks if t.batch == batch and t.index == partition and t.succeeded and len(log.attempts_of(t.task)) > 1]


class ZombieUpload(Fault):
    kind: ClassVar[str] = "zombie-upload"
    description: ClassVar[str] = (
        "a losing attempt's changelog or snapshot upload is held until the accepted attempt wrote the same version, then released"
    )
    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: the JVM plug-in's delayed close
    needs: ClassVar[frozenset[str]] = frozenset({"standalone"})  # speculation launches the copy (native: task retries)

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        what = spec.params.get("what", "changelog")
        if not isinstance(what, str) or what not in VARIANTS:
            raise UsageError(f"fault {spec.id} ({spec.kind}): what must be changelog or snapshot, got {what!r}")
        self.variant = VARIANTS[what]
        self.hold_ms = positive(spec, "hold_ms", 60000) or 60000
        self.slow_ms = positive(spec, "slow_ms", self.variant.slow_ms)
        self.zombie = term_target(spec, batch=True, attempt=self.variant.zombie)
        self.winner = {**self.zombie, "attempt": 1 - self.variant.zombie}
        self.terms = self._terms(filter_text(self.winner), filter_text(self.zombie))
        self._armed: list[tuple[str, str]] = []
        replan = spec.params.get("replan", False)
        if not isinstance(replan, bool):
            raise UsageError(f"fault {spec.id} ({spec.kind}): replan must be true or false, got {replan!r}")
        self.restarts_driver = replan  # the zombie outlives its driver; the runner restarts it
        self.native = (
            ReplanZombie(spec, spec.at.batch, self.zombie["partition"], self.hold_ms, what)
            if replan
            else NativeZombie(spec.at.batch, self.zombie["partition"], self.hold_ms, what)
        )

    def check(self, format: Format, cluster: str, storage: str) -> None:
        super().check(format, cluster, storage)
        if format.native:
            self.native.check()
        elif self.restarts_driver:
            raise NotApplicable(f"{self.kind} with replan: true is Spark's own delayed close: native-v1 / native-v2 runs only")

    def before_resume(self, ctx: FaultContext) -> dict[str, Any] | None:
        return self.native.before_resume(ctx) if isinstance(self.native, ReplanZombie) and ctx.format.plugin else None

    def _terms(self, w: str, z: str) -> list[tuple[str, str]]:
        """The armed terms (see the module docstring); markers are 1 ms delays that leave a firing record."""
        hold, marks = f"{z}1*hold({self.hold_ms})", [f"{w}1*delay(1)", f"{z}1*delay(1)"]
        if self.variant.file == "changelog":
            marks[1] = f"{z}1*delay({self.slow_ms})"  # the zombie wrote; it straggles, so Spark accepts the winner
            return [(LOADED, f"{w}1*delay({self.slow_ms})"), (BEFORE, hold), *((AFTER, m) for m in marks), (COMMITTED, f"{w}1*delay(1)")]
        gate = f"{w}1*hold({self.hold_ms})"
        return [(COMMITTED, f"{z}1*delay({self.slow_ms})"), (LOADED, gate), (SNAP_BEFORE, hold), *((SNAP_AFTER, m) for m in marks)]

    def prepare(self, ctx: FaultContext) -> None:
        if ctx.format.plugin:
            self.native.prepare(ctx)
            return
        self._armed = [(point, add_term(ctx.control, point, term)) for point, term in self.terms]

    def _ready(self, ctx: FaultContext, hold: str, held: dict[str, int], on: str, by: dict[str, int]) -> tuple[dict[str, Any], ...] | None:
        """`held` is on hold at point `hold` and `by` fired at point `on`: (hold firing, that firing), else None."""
        waiting, done = matching(ctx, hold, "hold", held), matching(ctx, on, "delay", by)
        return (waiting[0], done[0]) if waiting and done else None

    def _release(self, ctx: FaultContext, hold: str, held: dict[str, int], on: str, by: dict[str, int]) -> dict[str, Any]:
        """Wait (bounded by the hold) for `_ready`, then release point `hold`: the facts."""
        found = ctx.wait(lambda: self._ready(ctx, hold, held, on, by), self.hold_ms / 1000.0)
        version = ctx.control.release(hold)
        return {"control_version": version} if found is None else {"control_version": version, "hold": found[0], "on": found[1]}

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """(snapshot: let the gated winner go on once the zombie committed;) release the zombie once the winner wrote."""
        if ctx.format.plugin:
            return self.native.inject(ctx)
        v = self.variant
        gate = {"winner_gate": self._release(ctx, LOADED, self.winner, COMMITTED, self.zombie)} if v.gate else {}
        got = self._release(ctx, v.hold, self.zombie, v.release, self.winner)
        if "on" not in got:
            return {"released": "without a winner (hold bound or run end)", "control_version": got["control_version"], **gate}
        return {
            "released": f"after {v.released}",
            "control_version": got["control_version"],
            "hold": got["hold"],
            v.fact: got["on"],
            **gate,
        }

    def heal(self, ctx: FaultContext) -> None:
        if ctx.format.plugin:
            self.native.heal(ctx)
            return
        if self._armed:
            ctx.control.release(self.variant.hold)  # never leave the zombie (or the gated winner) blocked
            if self.variant.gate:
                ctx.control.release(LOADED)
            for point, term in self._armed:
                remove_term(ctx.control, point, term)
            self._armed = []

    def evidence(self, ctx: FaultContext) -> Evidence:
        if not ctx.control.path.exists():
            return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
        if ctx.format.plugin:
            return self.native.evidence(ctx)
        found = self._writes(ctx)
        if isinstance(found, Evidence):
            return found
        detail, proof = found
        return self._accepted(ctx, proof) or Evidence(True, f"{detail}; Spark accepted the winner", proof)

    def _where(self) -> str:
        return f"batch {self.zombie['batch']} partition {self.zombie['partition']}"

    def _writes(self, ctx: FaultContext) -> Evidence | tuple[str, list[dict[str, Any]]]:
        """From the firing records: the zombie's hold, how it ended, and both files durable, the zombie's
        later: (detail, proof); an Evidence (not fired) when a step is missing."""
        v, where, z, w = self.variant, self._where(), self.zombie["attempt"], self.winner["attempt"]
        held = matching(ctx, v.hold, "hold", self.zombie)
        if not held:
            return Evidence(False, f"no attempt {z} of {where} reached its held {v.file} upload")
        ended = [f for f in ctx.firings(v.hold) if f.get("action") in ("released", "hold-timeout") and f.get("task") == held[0].get("task")]
        won = matching(ctx, v.durable, "delay", self.winner)
        proof: list[dict[str, Any]] = [{"hold": held[0]}, *({"hold_end": e} for e in ended[:1]), *({"winner_durable": x} for x in won[:1])]
        if not won:
            return Evidence(False, f"attempt {w} of {where} never wrote its {v.file} while attempt {z} was held", proof)
        late = [f for f in matching(ctx, v.durable, "delay", self.zombie) if float(f["time"]) > float(won[0]["time"])]
        if not late:
            return Evidence(False, f"attempt {z} of {where} never wrote its {v.file} after attempt {w}'s (killed first?)", proof)
        proof.append({"zombie_durable": late[0]})
        how = ended[0].get("action") if ended else "unknown"
        gap = float(late[0]["time"]) - float(won[0]["time"])
        return (
            f"attempt {z} of {where} (pid {held[0].get('pid')}) was held, {how}, and wrote its {v.file} {gap:.3f} s "
            f"after the winner attempt {w}'s (pid {won[0].get('pid')})",
            proof,
        )

    def _accepted(self, ctx: FaultContext, proof: list[dict[str, Any]]) -> Evidence | None:
        """Spark's event log: the winner's attempt succeeded (None), else why this is no zombie (or unknown)."""
        where, w = self._where(), self.winner["attempt"]
        log = event_log_or_none(ctx)
        found = [] if log is None else accepted_attempts(log, self.zombie["batch"], self.zombie["partition"])
        if len(found) != 1:
            why = "there is no event log" if log is None else f"the event log has {len(found)} accepted multi-attempt task(s) of {where}"
            return Evidence(None, f"both attempts wrote, but {why}: cannot tell which one Spark accepted", proof)
        t = found[0]
        proof.append({"accepted": {"attempt": t.attempt, "task_id": t.task_id, "executor": t.executor, "host": t.host}})
        if t.attempt != w:
            return Evidence(False, f"Spark accepted attempt {t.attempt} of {where}, the held one: its file is no zombie's", proof)
        return None


FAULT = ZombieUpload
