"""zombie-upload in native-v1 / native-v2 runs: Spark's own delayed close, through the JVM plug-in.

Spark's store has no task points to stage a speculative race on; the plug-in's `.zombie` points
do what Spark's `RocksDBCheckpointFailureInjectionSuite` does: attempt 0's close of a file of the
trigger batch B (version B + 1) throws to the task, so the attempt fails and Spark retries it;
the retry writes B + 1 again and the query goes on, while attempt 0's stream stays parked. Once
batch B + 1 is committed too (`commits/<B+1>` exists) `inject` releases it and it lands: in V1
over the name the retry wrote; in V2 as `<B+1>_<uuid>.<ext>`, beside the committed one, named by
no commit. The verifier loads each committed version from its files.

`what: changelog`: the zombie is `<B+1>.changelog`, the file every later load of that version
replays.

`what: snapshot` (B = 0 only): the zombie is `1.zip`. In Spark 4.3 a task uploads a zip itself
only when the version created a column family (`RocksDB.commit`: `shouldForceSnapshot`, set by
`createColFamilyIfAbsent`, makes `commit` call `uploadSnapshot` on the task thread, before the
changelog commit): the first commit of a store with column families (transformWithState:
sample3). Every other zip is queued only after the changelog commit succeeded and uploaded
once, by the committed store's maintenance thread (`doSnapshotMaintenance`): a failed attempt
queues none, so it has no losing twin. The retry reloads version 0, creates the column
families again and uploads its own `1.zip`; attempt 0's lands over it (V1), and every load
of versions 1 .. snapshot_interval starts from it.

    native.<what>.zombie   = [batch=B,partition=P,attempt=0]1*hold(hold_ms)   the zombie
    native.commitlog.write = [batch=B+1]1*delay(1)                            marker: the newer commit

In V2 state files are closed on Spark's checksum pool threads, with no task context: the
filter is `[batch=B,partition=P]`, and the term is disarmed as soon as it held, so the retry
passes.

Proven by the plug-in's records (`fired-<host>-<pid>-<started>.jsonl`): the hold, its release, and
`zombie-landed` later than the newer commit's marker; and by Spark's event log: attempt 0 of
(B, P) failed and a later attempt of that task succeeded."""

from __future__ import annotations

from typing import Any

from statebed_model.eventlog import EventLog
from statebed_store.failpoint_control import firing_process
from statebed_store.formats import Format

from .base import Evidence, FaultContext, NotApplicable
from .failpoint_fault import attempt0_filter, filter_text, matching
from .process_faults import add_term, event_log_or_none, remove_term, task_is

__all__ = ["COMMIT_MARK", "SNAPSHOT_ZOMBIE", "ZOMBIE", "NativeZombie"]

ZOMBIE, SNAPSHOT_ZOMBIE, COMMIT_MARK = "native.changelog.zombie", "native.snapshot.zombie", "native.commitlog.write"
POINTS = {"changelog": ZOMBIE, "snapshot": SNAPSHOT_ZOMBIE}
CLOSE = {"changelog": "changelog close", "snapshot": "zip close"}
LAND_WAIT_S = 60.0


class NativeZombie:
    """The native choreography of one zombie-upload fault (see the module docstring)."""

    def __init__(self, batch: int, partition: int, hold_ms: int, what: str = "changelog") -> None:
        self.batch, self.partition, self.hold_ms = batch, partition, hold_ms
        self.point, self.close = POINTS[what], CLOSE[what]
        self.newer = {"batch": batch + 1}
        self._armed: list[tuple[str, str]] = []

    def check(self) -> None:
        """A task uploads a zip only at the first commit of a store with column families (module docstring)."""
        if self.point == SNAPSHOT_ZOMBIE and self.batch != 0:
            raise NotApplicable(
                f"a snapshot zombie on Spark's store needs at.batch 0 (got {self.batch}): only version 1's zip is uploaded by "
                "the task (its column families are new); later zips are uploaded once, by the committed store's maintenance thread"
            )

    def target(self, format: Format) -> dict[str, int]:
        """The zombie's filter: V1's changelogs and forced zips are closed on the task thread (attempt
        0 named); V2's on Spark's checksum pool threads, with no task context: the first close of
        (B, P), the term disarmed once it held (`inject`), so the retry passes on any executor."""
        return attempt0_filter({"batch": self.batch, "partition": self.partition}, format)

    def terms(self, format: Format) -> list[tuple[str, str]]:
        return [
            (self.point, f"{filter_text(self.target(format))}1*hold({self.hold_ms})"),
            (COMMIT_MARK, f"{filter_text(self.newer)}1*delay(1)"),
        ]

    def prepare(self, ctx: FaultContext) -> None:
        self._armed = [(point, add_term(ctx.control, point, term)) for point, term in self.terms(ctx.format)]

    def _disarm(self, ctx: FaultContext, point: str) -> None:
        """Remove this fault's term of `point` (a hold already fired keeps waiting for its release)."""
        for p, term in [a for a in self._armed if a[0] == point]:
            remove_term(ctx.control, p, term)
            self._armed.remove((p, term))

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """Wait (bounded by the hold) for the zombie's hold and batch B + 1's commit, release it,
        and wait for its landing: the facts."""
        bound = self.hold_ms / 1000.0
        held = ctx.wait(lambda: matching(ctx, self.point, "hold", self.target(ctx.format)), bound)
        if held:
            self._disarm(ctx, self.point)  # one zombie: the retry's close passes
        committed = ctx.wait(lambda: ctx.batch_committed(self.batch + 1), bound) if held else None
        version = ctx.control.release(self.point)
        facts: dict[str, Any] = {"control_version": version}
        if not held:
            return {**facts, "released": "without a held attempt (hold bound or run end)"}
        facts["hold"] = held[0]
        if not committed:
            return {**facts, "released": f"before batch {self.batch + 1} committed (hold bound or run end)"}
        landed = ctx.wait(lambda: self._landing(ctx, held[0]), LAND_WAIT_S)
        return {**facts, "released": f"after batch {self.batch + 1} committed", **({"landed": landed} if landed else {})}

    def heal(self, ctx: FaultContext) -> None:
        if self._armed:
            ctx.control.release(self.point)  # never leave the zombie parked
            for point, term in self._armed:
                remove_term(ctx.control, point, term)
            self._armed = []

    @staticmethod
    def _same(firings: list[dict[str, Any]], hold: dict[str, Any], actions: tuple[str, ...]) -> list[dict[str, Any]]:
        """`hold`'s later records (its end, its landing): the same JVM, file and task."""
        return [
            f
            for f in firings
            if f.get("action") in actions
            and firing_process(f) == firing_process(hold)
            and f.get("file") == hold.get("file")
            and f.get("task") == hold.get("task")
        ]

    def _landing(self, ctx: FaultContext, hold: dict[str, Any]) -> dict[str, Any] | None:
        found = self._same(ctx.firings(self.point), hold, ("zombie-landed", "zombie-failed"))
        return found[0] if found else None

    def evidence(self, ctx: FaultContext) -> Evidence:
        """The plug-in's records: held, released, landed after batch B + 1's commit; then Spark's event log."""
        where = f"batch {self.batch} partition {self.partition}"
        held = matching(ctx, self.point, "hold", self.target(ctx.format))
        if not held:
            return Evidence(False, f"no attempt of {where} reached a held {self.close} ({self.point} never held)")
        firings = ctx.firings(self.point)
        ended = self._same(firings, held[0], ("released", "hold-timeout"))
        landed = self._same(firings, held[0], ("zombie-landed", "zombie-failed"))
        proof: list[dict[str, Any]] = [{"hold": held[0]}, *({"hold_end": e} for e in ended[:1]), *({"landing": x} for x in landed[:1])]
        if not landed or landed[0].get("action") != "zombie-landed":
            return Evidence(False, f"the parked {self.close} of {where} never landed", proof)
        newer = [f for f in matching(ctx, COMMIT_MARK, "delay", self.newer) if task_is(f.get("task"), self.newer)]
        if not newer:
            return Evidence(False, f"batch {self.batch + 1}'s commit never passed the plug-in ({COMMIT_MARK} never fired)", proof)
        proof.append({"newer_commit": newer[0]})
        gap = float(landed[0]["time"]) - float(newer[0]["time"])
        if gap <= 0:
            return Evidence(False, f"the held {self.close} of {where} landed before batch {self.batch + 1}'s commit: no zombie", proof)
        how = ended[0].get("action") if ended else "unknown"
        detail = (
            f"{where} task {held[0].get('task')} (pid {held[0].get('pid')}) was held at its {self.close}, {how}, and its "
            f"{held[0].get('file')} landed {gap:.3f} s after batch {self.batch + 1}'s commit"
        )
        return self._accepted(event_log_or_none(ctx), where, proof) or Evidence(True, f"{detail}; Spark accepted a retry", proof)

    def _accepted(self, log: EventLog | None, where: str, proof: list[dict[str, Any]]) -> Evidence | None:
        """Spark's event log: attempt 0 of the zombie's task failed and a later one succeeded (None), else unknown / not fired."""
        if log is None:
            return Evidence(
                None, f"the zombie landed, but there is no event log: cannot tell which attempt of {where} Spark accepted", proof
            )
        done = [
            t for t in log.tasks if t.batch == self.batch and t.index == self.partition and t.succeeded and len(log.attempts_of(t.task)) > 1
        ]
        if len(done) != 1:
            return Evidence(None, f"the event log has {len(done)} accepted multi-attempt task(s) of {where}: cannot tell", proof)
        t = done[0]
        proof.append({"accepted": {"attempt": t.attempt, "task_id": t.task_id, "executor": t.executor, "host": t.host}})
        failed = [a for a in log.attempts_of(t.task) if a.attempt == 0 and not a.succeeded]
        if t.attempt == 0 or not failed:
            return Evidence(False, f"Spark accepted attempt {t.attempt} of {where}; attempt 0 did not fail: no zombie", proof)
        proof.append({"failed": {"attempt": 0, "task_id": failed[0].task_id, "outcome": failed[0].outcome}})
        return None
