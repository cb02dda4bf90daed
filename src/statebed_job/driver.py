"""The driver side of one batch: the protocol of the seed, plus the check Spark 4.0/4.1 lacks.

For batch `b` (Spark may call it more than once: a rerun after a driver restart):

1. If `commits/<b>` exists the batch is decided: publish its staged output to the sink if
   the sink lacks it, and stop. Nothing is recomputed, so nothing is emitted twice.
2. Record the input (beside the tasks, on a thread of its own: the input log is a
   diagnostic the commit waits for, not a step the tasks need), and run the tasks: each loads
   `(b, id committed by b-1)`, commits `b+1` and reports `(partition, version, new id, base
   id)` and its output rows.
3. Keep one result per partition (Spark already keeps one per task; speculative losers'
   files stay in storage as orphans), and check every one: version `b+1`, base id equal
   to the commit log's (`BaseIdMismatchError` otherwise: the batch fails, nothing commits).
4. Stage the output (overwritable: only a committed batch's staging counts), write the
   commit log create-only (the point of no return), then publish the output to the sink
   create-only, keyed by batch id.

Spark-free: the Spark job passes an `execute` that runs `mapInArrow`; tests pass a loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from statebed_base.errors import BaseIdMismatchError, ProtocolViolationError, StatebedError
from statebed_base.log import get_logger, kv
from statebed_model.rundir import RunDir
from statebed_model.workloads import get_workload
from statebed_store import CommitLog, S3Settings, StoreOptions, failpoints
from statebed_store.commitlog import base_commit
from statebed_store.storage.base import Storage
from statebed_store.storage.hedge import hedged, take_uploads
from statebed_store.storage.upload_stats import merge_uploads, summarize_uploads

from .config import JobOptions
from .task import TaskResult, TaskSpec

__all__ = ["BatchDriver", "BatchOutcome"]

log = get_logger("driver")
OPERATOR = 0

# The job's own failpoints: the store knows nothing of the job, so they are registered here.
failpoints.register(
    "driver.tasks.after",
    "job driver: every task result in and checked, before staging and the commit log; native: the query's job done, "
    "before its sink output and Spark's commit (drop: no effect)",
)
failpoints.register("driver.sink.before", "job driver: after the commit log, before the sink output (drop: skip the sink write)")
failpoints.register("driver.batch.end", "job driver: after the sink output, before Spark records the batch (drop: no effect)")

Execute = Callable[[TaskSpec], list[TaskResult]]


@dataclass
class BatchOutcome:
    batch_id: int
    status: str  # "committed", "re-emitted", "skipped"
    records: int = 0
    seconds: float = 0.0
    results: list[TaskResult] = field(default_factory=list)
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)  # per kind: summarize_uploads of this batch


class BatchDriver:
    def __init__(self, run: RunDir, opts: JobOptions, storage: Storage, s3: S3Settings | None = None) -> None:
        self.run = run
        self.opts = opts
        self.storage = storage
        self.s3 = s3
        self.workload = get_workload(opts.workload)
        self.store_options = StoreOptions(
            format=opts.format.store_format,
            snapshot_interval=opts.snapshot_interval,
            retain_versions=opts.retain,  # read by the run's maintenance
            sst_orphan_grace_s=float(opts.sst_grace_s),
            hedge=opts.hedge,  # type: ignore[arg-type]  # checked by JobOptions
        )
        self.log = CommitLog(hedged(storage, self.store_options))  # commit-log writes timed (and hedged if asked)
        # The first error of ours a batch raised: Spark wraps it in its own, the runner reports this one.
        self.failure: StatebedError | None = None

    def spec(self, batch_id: int) -> TaskSpec:
        prev = base_commit(self.log, batch_id)
        base_ids = tuple(prev.id_for(OPERATOR, p) if prev else None for p in range(self.opts.partitions))
        return TaskSpec(
            checkpoint=self.storage.url,
            s3=self.s3,
            workload=self.opts.workload,
            partitions=self.opts.partitions,
            batch_id=batch_id,
            base_ids=base_ids,
            options=self.store_options,
            local_root=str(self.run.local_state),
            slow=self.opts.slow_task_spec(),
            seed=self.opts.seed or 0,
            attempts_dir=str(self.run.attempts),
            drain_uploads=not self.opts.continuous and batch_id == self.opts.batches - 1,
        )

    def process(self, batch_id: int, inputs: pa.Table | Callable[[], pa.Table], execute: Execute) -> BatchOutcome:
        try:
            with failpoints.task_context(batch=batch_id):  # `[batch=B]` filters aim at this batch's driver points
                return self._process(batch_id, inputs, execute)
        except StatebedError as e:
            self.failure = self.failure or e
            raise

    def _process(self, batch_id: int, inputs: pa.Table | Callable[[], pa.Table], execute: Execute) -> BatchOutcome:
        t0 = time.perf_counter()
        if self.opts.source == "generated" and batch_id >= self.opts.batches:  # ingest: every landed file counts
            return BatchOutcome(batch_id, "skipped")
        if self.log.read(batch_id) is not None:
            return self._reemit(batch_id, t0)
        input_log = _InputLog(self.run, batch_id, inputs)
        try:
            spec = self.spec(batch_id)
            chosen = self._one_per_partition(execute(spec), spec)
        except BaseException:
            input_log.join()  # no log write outlives the batch's failure (a replan writes its own)
            raise
        t_tasks = time.perf_counter()
        table = input_log.wait()  # logged before any commit, as when it ran first
        t_input = time.perf_counter()
        failpoints.hit("driver.tasks.after")
        outputs = pa.concat_tables([r.outputs for r in chosen]) if chosen else self.workload.empty_output()
        self.run.stage_output(batch_id, outputs)
        ids = {OPERATOR: [[r.checkpoint_id] for r in chosen]} if self.opts.format.ids else None
        self.log.write(batch_id, ids)
        committed_at = time.time()  # the point of no return: ingest->commit latency ends here
        self._publish(batch_id, outputs)
        t_end = time.perf_counter()
        seconds = t_end - t0
        uploads = summarize_uploads(merge_uploads([*(r.phases.get("uploads", {}) for r in chosen), take_uploads(self.log.storage)]))
        self.run.append_timing(
            {
                "batch": batch_id,
                "status": "committed",
                "seconds": round(seconds, 4),
                "records": table.num_rows,
                "input_s": round(input_log.seconds, 4),  # reading the batch on the driver + the input log, beside the tasks
                "input_wait_s": round(t_input - t_tasks, 4),  # of which the batch waited for after its tasks
                "tasks_s": round(t_tasks - t0, 4),  # the Spark job of the state tasks, wall
                "commit_s": round(t_end - t_input, 4),  # staging, commit log, sink
                "attempts": [r.attempt for r in chosen],
                "task_seconds": [round(r.seconds, 4) for r in chosen],  # inside each task: load, apply, commit
                "task_phases": [{k: v for k, v in r.phases.items() if k != "uploads"} for r in chosen],
                # per kind: n, p50/p90/p99/p999/max ms, hedges sent and won, raw samples (`ms`)
                "uploads": uploads,
                "committed_at": committed_at,  # epoch seconds
            }
        )
        log.info("batch committed", extra=kv(batch=batch_id, records=table.num_rows, seconds=round(seconds, 3)))
        return BatchOutcome(batch_id, "committed", table.num_rows, seconds, chosen, uploads)

    def _one_per_partition(self, results: list[TaskResult], spec: TaskSpec) -> list[TaskResult]:
        by_part: dict[int, TaskResult] = {}
        for r in results:
            by_part.setdefault(r.partition, r)
        missing = sorted(set(range(self.opts.partitions)) - by_part.keys())
        if missing:
            raise ProtocolViolationError(f"batch {spec.batch_id}: no task result for partition(s) {missing}")
        chosen = [by_part[p] for p in range(self.opts.partitions)]
        for r in chosen:
            if r.version != spec.batch_id + 1:
                raise ProtocolViolationError(
                    f"batch {spec.batch_id} partition {r.partition}: task committed version {r.version}, expected {spec.batch_id + 1}"
                )
            expected = spec.base_ids[r.partition]
            if self.opts.format.ids and r.base_id != expected:
                raise BaseIdMismatchError(
                    f"batch {spec.batch_id} partition {r.partition}: the task built on checkpoint id {r.base_id}, "
                    f"but the commit log committed {expected} for batch {spec.batch_id - 1} ({r.attempt})"
                )
        return chosen

    def _publish(self, batch_id: int, outputs: pa.Table) -> None:
        if failpoints.hit("driver.sink.before"):
            return
        self.run.write_output(batch_id, outputs)
        failpoints.hit("driver.batch.end")

    def _reemit(self, batch_id: int, t0: float) -> BatchOutcome:
        """A decided batch run again (driver restart): re-publish its staged output, recompute nothing."""
        if not self.run.has_output(batch_id):
            self._publish(batch_id, self.run.read_staged(batch_id))
            log.warning("re-emitted the output of an already committed batch", extra=kv(batch=batch_id))
        self.run.append_timing({"batch": batch_id, "status": "re-emitted", "seconds": round(time.perf_counter() - t0, 4)})
        return BatchOutcome(batch_id, "re-emitted", seconds=time.perf_counter() - t0)


class _InputLog:
    """A batch's input read and logged on a thread of its own while the state tasks run (a Spark
    job of its own when `inputs` is the batch's DataFrame read); `wait` joins it and returns the
    table, re-raising what the thread raised."""

    def __init__(self, run: RunDir, batch_id: int, inputs: pa.Table | Callable[[], pa.Table]) -> None:
        self.seconds = 0.0
        self._table: pa.Table | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._log, args=(run, batch_id, inputs), name=f"input-log-{batch_id}", daemon=True)
        self._thread.start()

    def _log(self, run: RunDir, batch_id: int, inputs: pa.Table | Callable[[], pa.Table]) -> None:
        t0 = time.perf_counter()
        try:
            with failpoints.task_context(batch=batch_id):
                table = inputs() if callable(inputs) else inputs
                run.write_input(batch_id, table)
            self._table = table
        except BaseException as e:  # re-raised on the batch's thread by `wait`
            self._error = e
        finally:
            self.seconds = time.perf_counter() - t0

    def join(self) -> None:
        self._thread.join()

    def wait(self) -> pa.Table:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._table is not None
        return self._table
