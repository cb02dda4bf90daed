"""zombie-upload with `replan: true` (native-v1 / native-v2): the zombie outlives its driver, and
the batch it wrote is planned again.

The plain native zombie (`zombie_native`) lands in the app that wrote it: Spark's retry of the
same task reads the same shuffle blocks, so for a query whose state depends on a random draw
made in the map stage (bucket-collect: `rand()` without a seed, drawn when the query is planned)
the overwritten file holds the same records. The seed appendix's bucket anomaly needs batch B to
be planned again, by a restarted driver with a new `rand()` seed, while a file written under the
old plan lands late: an executor of the dead app, cut off from it, finishing its rename after the
new app committed the same version.

    native.changelog.zombie = [batch=B,partition=P(,attempt=0)]1*hold(hold_ms)   app 1's close parked
    driver.tasks.after      = [batch=B]1*hold(hold_ms)       app 1's driver stops after B's job: no
                                                             sink output of B, no commit of B
    native.commitlog.write  = [batch=B+1]1*delay(1)          marker: the new app committed B + 1

(The driver stops before its sink: the sink's output of a batch is written once, by its first
run, so an output of the old plan would contradict the new plan's state without any zombie.)
`inject` waits for the parked close and for app 1's driver to be held, disarms both holds
(the restarted driver counts afresh) and SIGKILLs the driver. The app's executors die with it,
and the parked stream with them: its temp file (`.<name>.<uuid>.tmp`, what Spark's rename-based
stream writes before it renames) stays. The runner restarts the driver with `--resume`; the new
app plans batch B again and commits it and B + 1. Then the lander (started in `before_resume`)
does what the zombie's close would have done: renames the temp file to its name (V1: over the
new app's `<B+1>.changelog`; V2: `<B+1>_<uuid>.changelog`, an orphan beside the new app's). The
temp file holds only what the dead JVM had flushed, so the plug-in keeps the stream's whole
content when it parks it (`parked/<pid>-<hit>-<name>` beside the control file, a "zombie-parked"
record): the lander writes that in place and removes the temp file and the stale checksums.

`what: snapshot`: the zombie is the zip of version B + 1, which Spark's maintenance thread
uploads after the task committed the version (no task context: the filter is `[batch=B,
partition=P]` in V1 too): B + 1 must be a snapshot version (`snapshot_interval` divides it, or
1 for a store with column families). The new app uploads its own zip of B + 1; a marker on
`native.snapshot.upload` (`[batch=B,partition=P]1*delay(1)`) shows it landed, and the lander
waits for that too, so the parked zip lands over the new one and not under it.

Proven by the firing records (the parked close, app 1's driver held after B's job, the new app's commit
marker of B + 1, and for a zip the new app's upload marker), the history (the driver killed and
restarted; the landing op, phase `land`, after those markers). A landing that found no parked
file, or landed before a marker, has not fired.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError
from statebed_base.localfs import atomic_write, read_regular
from statebed_store.formats import Format
from statebed_store.naming import hadoop_crc_name, is_temp_of
from statebed_verify.history import Outcome

from .base import Evidence, FaultContext, FaultSpec
from .failpoint_fault import filter_text, matching
from .process_faults import injection, task_is
from .restart_driver import kill_driver, restarted
from .zombie_native import COMMIT_MARK, NativeZombie

__all__ = ["LAND", "SNAPSHOT_UPLOAD", "STOP", "ReplanZombie", "parked_file"]

LAND = "land"  # the history phase of the lander's op
SNAPSHOT_UPLOAD = "native.snapshot.upload"
STOP = "driver.tasks.after"  # statebed's driver point; in native runs after the query's job, before its sink
RESTART_WAIT_S = 600.0  # the new app's start and its batches B and B + 1


def parked_file(final: Path) -> Path | None:
    """The temp file a parked rename-based stream left beside `final` (exactly one, else None)."""
    found: list[Path] = []
    try:
        with os.scandir(final.parent) as it:
            found = [Path(e.path) for e in it if is_temp_of(final.name, e.name) and e.is_file(follow_symlinks=False)]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


class ReplanZombie(NativeZombie):
    """The choreography above; `spec` names the fault in the history ops of its landing."""

    def __init__(self, spec: FaultSpec, batch: int, partition: int, hold_ms: int, what: str = "changelog") -> None:
        super().__init__(batch, partition, hold_ms, what)
        self.spec, self.what = spec, what
        self.stopped = {"batch": batch}  # app 1's driver after B's job, held until the kill
        self.zip = {"batch": batch, "partition": partition}  # the new app's zip of B + 1 (maintenance thread)
        self._lander: threading.Thread | None = None
        self._killed_at = 0.0

    def check(self) -> None:
        """Any version: the zip of B + 1 comes from the maintenance thread of the app that committed it."""

    def target(self, format: Format) -> dict[str, int]:
        return dict(self.zip) if self.what == "snapshot" else super().target(format)

    def terms(self, format: Format) -> list[tuple[str, str]]:
        out = [
            (self.point, f"{filter_text(self.target(format))}1*hold({self.hold_ms})"),
            (STOP, f"{filter_text(self.stopped)}1*hold({self.hold_ms})"),
            (COMMIT_MARK, f"{filter_text(self.newer)}1*delay(1)"),
        ]
        return [*out, (SNAPSHOT_UPLOAD, f"{filter_text(self.zip)}1*delay(1)")] if self.what == "snapshot" else out

    def _new_zip(self, ctx: FaultContext, after: float) -> list[dict[str, Any]]:
        """The new app's upload of the zip of B + 1 (a marker firing later than `after`, the kill)."""
        return [f for f in matching(ctx, SNAPSHOT_UPLOAD, "delay", self.zip) if float(f.get("time", 0)) > after]

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        bound = self.hold_ms / 1000.0
        held = ctx.wait(lambda: matching(ctx, self.point, "hold", self.target(ctx.format)), bound)
        stopped = ctx.wait(lambda: self._driver_held(ctx), bound) if held else None
        for point in (self.point, STOP):  # both holds fired in app 1: the restarted app counts afresh and must pass
            self._disarm(ctx, point)
        if not held or not stopped:
            ctx.control.release(self.point)
            ctx.control.release(STOP)
            what = "parked close" if not held else f"held driver after batch {self.batch}'s job"
            return {"killed": None, "released": f"no {what} (hold bound or run end): the driver was left alone"}
        facts = {"hold": held[0], "driver_held": stopped[0], **kill_driver(ctx, self.spec)}
        self._killed_at = time.time()
        return {**facts, "killed_at": self._killed_at}

    def _driver_held(self, ctx: FaultContext) -> list[dict[str, Any]]:
        return [f for f in matching(ctx, STOP, "hold", self.stopped) if task_is(f.get("task"), self.stopped)]

    def before_resume(self, ctx: FaultContext) -> dict[str, Any] | None:
        """The old app is gone: start the lander, which waits for the new app's commit of B + 1."""
        held = matching(ctx, self.point, "hold", self.target(ctx.format))
        if not held or self._lander is not None:
            return None
        final = Path(str(held[0].get("file", "")).removeprefix("file:"))
        self._lander = threading.Thread(target=self._land, args=(ctx, held[0], final), name="zombie-lander", daemon=True)
        self._lander.start()
        return {"lander": f"waiting for batch {self.batch + 1}'s commit to land {final.name}"}

    def _land(self, ctx: FaultContext, hold: dict[str, Any], final: Path) -> None:
        start = time.time()
        committed = ctx.wait(
            lambda: ctx.batch_committed(self.batch + 1) and (self.what != "snapshot" or self._new_zip(ctx, self._killed_at)), RESTART_WAIT_S
        )
        tmp, copy = parked_file(final), self._copy(ctx, hold)
        facts: dict[str, Any] = {
            "file": str(final),
            "parked": None if tmp is None else tmp.name,
            "copy": None if copy is None else str(copy),
        }
        outcome: Outcome = "fail"
        if not committed:
            what = "" if self.what != "snapshot" else f", or its zip of version {self.batch + 1} not uploaded,"
            facts["reason"] = f"batch {self.batch + 1} was not committed by the new app{what} (bound or run end)"
        elif not final.resolve().is_relative_to(ctx.spark_checkpoint.resolve()):  # never write outside the run
            facts["reason"] = f"{final} is not inside the run's Spark checkpoint {ctx.spark_checkpoint}"
        elif tmp is None or copy is None:
            facts["reason"] = f"no parked stream of {final.name}: both Spark's temp file beside it and the plug-in's whole copy are needed"
        else:
            try:
                facts["bytes"] = self._close(read_regular(copy), tmp, final)
                outcome, facts["landed_at"] = "ok", time.time()
            except (OSError, StatebedError) as e:
                facts["reason"] = f"{type(e).__name__}: {e}"
        ctx.history.record("fault", outcome, start, id=self.spec.id, kind=self.spec.kind, phase=LAND, facts=facts)

    def _copy(self, ctx: FaultContext, hold: dict[str, Any]) -> Path | None:
        """The whole content the parked stream was closing (the plug-in's "zombie-parked" record)."""
        parked = self._same(ctx.firings(self.point), hold, ("zombie-parked",))
        path = parked[0].get("copy") if parked else None
        return Path(path) if isinstance(path, str) and Path(path).is_file() else None

    @staticmethod
    def _close(content: bytes, tmp: Path, final: Path) -> int:
        """What the stream's close would have done, with the whole content (the temp file holds only
        what was flushed before the JVM died): the file in place, atomically; Spark's temp file and
        every checksum of the old content gone (none is valid for this one, and a reader must not
        trust a stale one)."""
        atomic_write(final, content)  # a regular file or nothing is replaced, never a directory or device
        for stale in (tmp, tmp.with_name(hadoop_crc_name(tmp.name)), final.with_name(hadoop_crc_name(final.name))):
            stale.unlink(missing_ok=True)
        return len(content)

    def heal(self, ctx: FaultContext) -> None:
        if self._lander is not None:
            self._lander.join(timeout=5.0)  # the run is over: its wait returns at once
        super().heal(ctx)
        ctx.control.release(STOP)

    def evidence(self, ctx: FaultContext) -> Evidence:
        where = f"batch {self.batch} partition {self.partition}"
        held = matching(ctx, self.point, "hold", self.target(ctx.format))
        if not held:
            return Evidence(False, f"no close of {where}'s {self.what} was parked ({self.point} never held)")
        proof: list[dict[str, Any]] = [{"hold": held[0]}]
        done = injection(ctx, self.spec)
        if done is None or done[0] != "ok" or not done[1].get("signalled"):
            return Evidence(False, f"the driver was not killed while {where}'s {self.close} was parked", proof)
        proof.append({"driver_held": done[1].get("driver_held")})
        gone = restarted(ctx.history.ops("driver"), float(held[0]["time"]), proof)
        if gone.fired is not True:
            return gone
        landed = [op for op in ctx.history.ops("fault") if op.fields.get("id") == self.spec.id and op.fields.get("phase") == LAND]
        if not landed or landed[0].outcome != "ok":
            why = (landed[0].fields.get("facts") or {}).get("reason") if landed else "the lander never ran"
            return Evidence(False, f"the parked {self.what} of {where} never landed: {why}", proof)
        facts = landed[0].fields.get("facts") or {}
        proof.append({"landing": facts})
        later = self._markers(ctx, float(done[1].get("killed_at") or held[0]["time"]), proof)
        if isinstance(later, Evidence):
            return later
        gap = float(facts.get("landed_at", 0)) - later
        if gap <= 0:
            return Evidence(False, f"the parked {self.what} of {where} landed before the new app's: no zombie", proof)
        return Evidence(
            True,
            f"{where}'s {self.close} (pid {held[0].get('pid')}) was parked, the driver killed before batch {self.batch} "
            f"committed and restarted; batch {self.batch} was planned again, and the parked {Path(str(facts.get('file'))).name} "
            f"landed {gap:.3f} s after the new app's",
            proof,
        )

    def _markers(self, ctx: FaultContext, killed: float, proof: list[dict[str, Any]]) -> float | Evidence:
        """When the new app was done with version B + 1 (its commit of B + 1; a zip: also its upload), else not fired."""
        newer = [f for f in matching(ctx, COMMIT_MARK, "delay", self.newer) if task_is(f.get("task"), self.newer)]
        if not newer:
            return Evidence(False, f"batch {self.batch + 1}'s commit never passed the plug-in ({COMMIT_MARK} never fired)", proof)
        proof.append({"newer_commit": newer[-1]})
        if self.what != "snapshot":
            return float(newer[-1]["time"])
        zips = self._new_zip(ctx, killed)
        if not zips:
            return Evidence(False, f"the new app never uploaded its zip of version {self.batch + 1} ({SNAPSHOT_UPLOAD} never fired)", proof)
        proof.append({"new_zip": zips[-1]})
        return max(float(newer[-1]["time"]), float(zips[-1]["time"]))
