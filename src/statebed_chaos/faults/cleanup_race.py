"""cleanup-race: maintenance after every committed batch, with a small retention, while attempts
race (a held attempt, speculative copies, zombie uploads, a driver restart in the same run).

From the trigger on, the controller runs the job's own maintenance (`statebed_job.maintenance`,
the code a `statebed run` runs in its driver) against the run's checkpoint after each batch the
commit log records: cleanup sees versions whose winner is not committed yet and attempts still
writing. V2 must stay valid with the retained range rebuildable; V1 cleans by version number.

Proven only by a pass that deleted files while a task attempt Spark's event log shows alive was
pending (its batch not yet committed when the pass began) or lost (speculative, killed, failed).
Each pass is recorded in `<run>/faults/<id>-maintenance.jsonl`.

Each pass waits until an attempt of the next batch has started and not ended (its record in
`<run>/attempts/`), so it races that attempt; the matrix pairs it with slow-attempts that hold
one attempt of batches 4 and 5 for seconds. params: retain (default 2), sst_grace_s (default 600: the store's own).

native-v1 / native-v2: Spark's own maintenance races instead, with `retain` as its
`minBatchesToRetain` and each delete recorded by the JVM plug-in (`cleanup_native`), while the
task of partition `hold_partition` of batch `hold_batch` is held at its changelog close until a
delete took effect (at most `hold_ms`; then unknown); params: retain, delete_delay_ms (default
200), hold_batch (default: the trigger batch + 2), hold_partition (default 0), hold_ms (default 60000).
"""

from __future__ import annotations

import functools
import json
import threading
from typing import Any, ClassVar

from statebed_base.errors import StatebedError, UsageError
from statebed_job.maintenance import Maintenance, PassRecord
from statebed_model.attempts import read_attempts
from statebed_model.eventlog import TaskAttempt
from statebed_store import CommitLog, open_storage
from statebed_store.failpoint_spec import MAX_HOLD_MS
from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS, Format

from .base import Evidence, Fault, FaultContext, FaultSpec
from .cleanup_native import NativeCleanupRace, alive, attempt_json
from .failpoint_fault import positive
from .process_faults import event_log_or_none

__all__ = ["FAULT", "CleanupRace"]


class CleanupRace(Fault):
    kind: ClassVar[str] = "cleanup-race"
    description: ClassVar[str] = "maintenance after every committed batch, small retention, while attempts race"
    formats: ClassVar[frozenset[Format]] = STATEBED_FORMATS | PLUGIN_FORMATS  # native: Spark's own maintenance races

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        p = spec.params
        try:
            self.retain, self.grace = int(p.get("retain", 2)), float(p.get("sst_grace_s", 600.0))
        except (TypeError, ValueError):
            raise UsageError(f"fault {spec.id} ({spec.kind}): retain must be an integer, sst_grace_s a number") from None
        if self.retain < 1 or not 0 <= self.grace <= 7 * 24 * 3600:
            raise UsageError(f"fault {spec.id} ({spec.kind}): retain must be >= 1 and sst_grace_s 0..604800")
        hold = {
            "batch": positive(spec, "hold_batch", spec.at.batch + 2, zero_ok=True) or 0,
            "partition": positive(spec, "hold_partition", 0, zero_ok=True) or 0,
        }
        hold_ms = positive(spec, "hold_ms", 60000) or 60000
        if hold_ms > MAX_HOLD_MS:
            raise UsageError(f"fault {spec.id} ({spec.kind}): hold_ms must be at most {MAX_HOLD_MS}")
        self.native = NativeCleanupRace(self.retain, positive(spec, "delete_delay_ms", 200, zero_ok=True) or 0, hold, hold_ms)
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    def run_conf(self, format: Format) -> dict[str, str]:
        return self.native.spark_conf() if format.plugin else {}

    @property
    def record(self) -> str:
        return f"faults/{self.spec.id}-maintenance.jsonl"

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        if ctx.format.plugin:
            return self.native.inject(ctx)
        info = ctx.run.read_info()
        storage = open_storage(ctx.run.checkpoint(info))
        rows: list[dict[str, Any]] = []

        def on_pass(records: list[PassRecord]) -> None:
            rows.extend(r.to_json() for r in records)
            ctx.run.storage.write(self.record, b"".join(json.dumps(r).encode() + b"\n" for r in rows))

        m = Maintenance(storage, retain=self.retain, interval_s=0, sst_grace_s=self.grace, on_pass=on_pass)
        self._thread = threading.Thread(target=self._loop, args=(ctx, m, CommitLog(storage)), name="cleanup-race", daemon=True)
        self._thread.start()
        return {"retain": self.retain, "sst_grace_s": self.grace, "record": ctx.run.display(self.record)}

    def _loop(self, ctx: FaultContext, m: Maintenance, log_: CommitLog) -> None:
        """A pass as soon as the commit log has a new batch, until healed or the run is over."""
        seen = -1
        while not (self._done.is_set() or ctx.stop.is_set()):
            try:
                batches = log_.batch_ids()
            except StatebedError:
                batches = []
            if batches and batches[-1] > seen:
                seen = batches[-1]
                ctx.wait(functools.partial(self._racing_attempt, ctx, seen + 1, log_), timeout_s=30.0)
                if self._latest(log_) > seen:  # the batch it waited for ended before the wait saw it: catch up first
                    continue
                m.committed(seen)
                m.run_pass()
            else:
                ctx.stop.wait(ctx.poll_s)

    def _racing_attempt(self, ctx: FaultContext, batch: int, log_: CommitLog) -> bool:
        """Stop waiting once an attempt of `batch` runs, or once `batch` committed (its attempts are over:
        waiting on would let the run's held attempts go by unraced)."""
        return self._done.is_set() or self._next_attempt_running(ctx, batch) or self._latest(log_) >= batch

    @staticmethod
    def _latest(log_: CommitLog) -> int:
        try:
            batches = log_.batch_ids()
        except StatebedError:
            return -1
        return batches[-1] if batches else -1

    @staticmethod
    def _next_attempt_running(ctx: FaultContext, batch: int) -> bool:
        """An attempt of `batch` has written its start record and no end (`statebed_model.attempts`):
        the pass then races it (at the run's last batch there is none: the wait times out)."""
        try:
            return any(r.batch == batch and r.outcome == "info" for r in read_attempts(ctx.run.root))
        except (StatebedError, OSError):
            return False

    def heal(self, ctx: FaultContext) -> None:
        self.native.heal(ctx)
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def evidence(self, ctx: FaultContext) -> Evidence:
        if ctx.format.plugin:
            return self.native.evidence(ctx)
        try:
            rows = [json.loads(line) for line in ctx.run.storage.read(self.record).splitlines() if line.strip()]
        except StatebedError:
            return Evidence(None, f"no maintenance record {ctx.run.display(self.record)}: cannot tell")
        deleting = [r for r in rows if r.get("files_deleted", 0) > 0 and r.get("error") is None]
        if not deleting:
            return Evidence(False, f"{len(rows)} maintenance record(s), none deleted a file")
        log = event_log_or_none(ctx)
        if log is None:
            return Evidence(None, "Spark's event log is missing or unreadable: cannot tell which attempts were alive")
        for r in deleting:
            start_ms, end_ms = (r["at"] - r["seconds"]) * 1000, r["at"] * 1000
            racing = [t for t in log.tasks if t.batch is not None and alive(t, start_ms, end_ms) and _racing(t, r["latest_batch"])]
            if racing:
                t = racing[0]
                return Evidence(
                    True,
                    f"pass {r['pass_no']} deleted {r['files_deleted']} file(s) of {r['store']} at latest batch {r['latest_batch']} "
                    f"while attempt {t.attempt} of batch {t.batch} partition {t.index} ({t.outcome or 'running'}) was alive",
                    [{"pass": r}, {"attempt": attempt_json(t)}],
                )
        return Evidence(False, f"{len(deleting)} pass(es) deleted files, none while a pending or losing attempt was alive")


def _racing(t: TaskAttempt, latest_batch: int) -> bool:
    """Pending (its batch not committed when the pass looked) or losing (a copy, or an attempt that did not succeed)."""
    return (t.batch or 0) > latest_batch or t.speculative or (t.outcome is not None and t.outcome != "Success")


FAULT = CleanupRace
