"""The executor side: one task per state partition and batch.

`run_task` is what `mapInArrow` runs in a Python worker: it gathers the partition's
records, loads `(batch, base id)` from this worker's cached provider (the open RocksDB
instance is reused only if it is at exactly that version and id), applies the workload,
commits `batch + 1` and returns one row: partition, version, new id, base id, the attempt,
and the batch's output rows as Arrow IPC bytes. The driver keeps one row per partition.
Each attempt also leaves its own record under the run's `attempts/` (`statebed_model.attempts`):
written before it loads, rewritten when it ends, ok or fail.

Providers live as long as the Python worker (`spark.python.worker.reuse`), one per
(checkpoint, partition), with their local RocksDB under a per-host directory, so a task
that lands where the partition ran last batch finds its state open, and one that lands in a
worker that ran it some batches ago replays only the changelogs committed since (the provider's
catch-up), and one that lands in a worker with no instance of it borrows a copy of the instance
another worker of the host holds (`statebed_store.lending`); past `MAX_PROVIDERS` the least
recently used one is closed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from statebed_base.log import get_logger, kv
from statebed_model import attempts
from statebed_model.rundir import INPUT_SCHEMA
from statebed_model.workloads import TaskContext, get_workload
from statebed_store import S3Settings, StateStoreProvider, StoreId, StoreOptions, failpoints, open_storage
from statebed_store.location import parse_location
from statebed_store.storage.hedge import take_uploads

__all__ = [
    "RESULT_DDL",
    "RESULT_SCHEMA",
    "TaskResult",
    "TaskSpec",
    "cached_providers",
    "close_providers",
    "ipc_to_table",
    "run_partition",
    "run_task",
    "table_to_ipc",
    "task_rng",
]

log = get_logger("task")
OPERATOR = 0

failpoints.register("task.load.after", "job task: state loaded, before the workload applies the batch (drop: no effect)")
failpoints.register("task.commit.after", "job task: the store commit returned, before the result goes back to Spark (drop: no effect)")

RESULT_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("version", pa.int64()),
        ("checkpoint_id", pa.string()),
        ("base_id", pa.string()),
        ("attempt", pa.string()),
        ("seconds", pa.float64()),
        ("phases", pa.string()),  # JSON: load/apply/commit seconds, cache hit, records
        ("outputs", pa.binary()),
    ]
)


# The same schema in Spark's DDL, for `mapInArrow`.
RESULT_DDL = ", ".join(
    f"{f.name} {t}" for f, t in zip(RESULT_SCHEMA, ("int", "bigint", "string", "string", "string", "double", "string", "binary"))
)


DRAIN_TIMEOUT_S = 60.0  # the last batch's wait for its worker's snapshot uploads


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task needs, shipped to executors with the function."""

    checkpoint: str
    s3: S3Settings | None
    workload: str
    partitions: int
    batch_id: int
    base_ids: tuple[str | None, ...]
    options: StoreOptions
    local_root: str
    slow: tuple[int, int, int] | None = None  # (batch, partition, ms): make attempt 0 slow after commit
    seed: int = 0  # the run's seed: a task's random choices derive from (seed, batch, partition, attempt)
    attempts_dir: str | None = None  # where each attempt writes its record (None: no records)
    # the run's last batch: the task waits for its worker's snapshot uploads, so a clean stop leaves
    # them durable for the run's final maintenance pass (a wait that times out only keeps more files)
    drain_uploads: bool = False


@dataclass(frozen=True)
class TaskResult:
    partition: int
    version: int
    checkpoint_id: str | None
    base_id: str | None
    attempt: str
    seconds: float
    outputs: pa.Table
    phases: dict[str, Any] = field(default_factory=dict)  # seconds and counts; "uploads": upload_stats samples


def table_to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def ipc_to_table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# Open providers of this worker, least recently used first. Each holds an open RocksDB
# instance; past MAX_PROVIDERS the least recently used one is closed (its partition, if it
# comes back, is loaded from storage again: slower, never wrong).
MAX_PROVIDERS = 64
_PROVIDERS: OrderedDict[tuple[str, int, StoreOptions], StateStoreProvider] = OrderedDict()
_LOCK = threading.Lock()


def _provider(spec: TaskSpec, partition: int) -> StateStoreProvider:
    """This worker's provider for the partition (created once; reused across batches)."""
    host = os.environ.get("SPARK_LOCAL_IP", "local")
    opts = spec.options.with_(local_dir=Path(spec.local_root) / f"host-{host}")
    key = (spec.checkpoint, partition, opts)
    evicted: list[StateStoreProvider] = []
    with _LOCK:
        p = _PROVIDERS.get(key)
        if p is None:
            storage = open_storage(parse_location(spec.checkpoint, spec.s3))
            p = StateStoreProvider(storage, StoreId(OPERATOR, partition), opts, executor_id=f"{host}/{os.getpid()}", share=True)
            _PROVIDERS[key] = p
            while len(_PROVIDERS) > MAX_PROVIDERS:
                evicted.append(_PROVIDERS.popitem(last=False)[1])
        else:
            _PROVIDERS.move_to_end(key)
    for old in evicted:
        log.info("provider cache full; closed the least recently used", extra=kv(store=str(old.store), max=MAX_PROVIDERS))
        old.close()
    return p


def cached_providers() -> int:
    """How many providers this worker keeps open."""
    with _LOCK:
        return len(_PROVIDERS)


def close_providers() -> None:
    """Close every cached provider of this process (end of a run, tests)."""
    with _LOCK:
        providers = list(_PROVIDERS.values())
        _PROVIDERS.clear()
    for p in providers:
        p.close()


def task_rng(seed: int, batch_id: int, partition: int, attempt: int) -> np.random.Generator:
    """A task's randomness: replayable from the run's seed, and distinct per attempt (Spark's
    attemptNumber: a retry or a speculative copy draws differently, as with `rand()`)."""
    return np.random.default_rng([seed, batch_id, partition, attempt])


@dataclass
class _Attempt:
    """This attempt's record, if the run keeps them; `new_id` is the checkpoint id it writes, once loaded."""

    directory: Path | None
    record: attempts.AttemptRecord | None = None
    new_id: str | None = None

    def loaded(self, new_id: str | None) -> None:
        self.new_id = new_id
        if self.directory is not None and self.record is not None and new_id is not None:
            self.record = attempts.write_loaded(self.directory, self.record, new_id)

    def end(self, outcome: str, checkpoint_id: str | None, error: BaseException | None = None) -> None:
        if self.directory is not None and self.record is not None:
            attempts.write_end(self.directory, self.record, outcome, checkpoint_id=checkpoint_id, error=error)


def run_partition(
    spec: TaskSpec,
    partition: int,
    records: pa.Table,
    attempt: int = 0,
    task_info: str = "",
    *,
    stage: int | None = None,
    task_attempt_id: int | None = None,
) -> TaskResult:
    """Load, apply, commit one partition of one batch, recording the attempt. Spark-free: tests call it directly."""
    with failpoints.task_context(batch=spec.batch_id, partition=partition, attempt=attempt):
        att = _Attempt(None if spec.attempts_dir is None else Path(spec.attempts_dir))
        if att.directory is not None:
            att.record = attempts.write_start(
                att.directory,
                batch=spec.batch_id,
                partition=partition,
                attempt=attempt,
                stage=stage,
                task_attempt_id=task_attempt_id,
                version=spec.batch_id + 1,
                base_id=spec.base_ids[partition],
            )
        try:
            result = _load_apply_commit(spec, partition, records, attempt, task_info, att)
            failpoints.hit("task.commit.after")
        except BaseException as e:
            att.end("fail", att.new_id, e)  # its files, if it wrote any, are orphans it owns
            raise
        att.end("ok", result.checkpoint_id)
        return result


def _load_apply_commit(spec: TaskSpec, partition: int, records: pa.Table, attempt: int, task_info: str, att: _Attempt) -> TaskResult:
    t0 = time.perf_counter()
    workload = get_workload(spec.workload)
    provider = _provider(spec, partition)
    ctx = TaskContext(partition, spec.partitions, spec.batch_id, task_rng(spec.seed, spec.batch_id, partition, attempt))
    before = replace(provider.metrics)
    with provider.load(spec.batch_id, spec.base_ids[partition], task_info=task_info) as txn:
        att.loaded(txn.new_id)
        failpoints.hit("task.load.after")
        t_load = time.perf_counter()
        outputs = workload.apply(txn, records, ctx)
        t_apply = time.perf_counter()
        result = txn.commit()
    t_commit = time.perf_counter()
    if spec.drain_uploads and not provider.uploader.drain(DRAIN_TIMEOUT_S):  # after the commit's timing: not part of it
        log.warning("snapshot uploads still pending at the run's last batch", extra=kv(store=str(provider.store)))
    phases: dict[str, Any] = {
        "load_s": round(t_load - t0, 4),
        "apply_s": round(t_apply - t_load, 4),
        "commit_s": round(t_commit - t_apply, 4),
        "cache_hit": float(provider.metrics.cache_hits > before.cache_hits),  # the open instance was at the base
        "caught_up": float(provider.metrics.catch_ups > before.catch_ups),  # it replayed only the changelogs it had missed
        "borrowed": float(provider.metrics.borrows > before.borrows),  # it started from another worker's instance (`lending`)
        "resumed": float(provider.metrics.resumes > before.resumes),  # from the instance a dead worker left (`store`)
        "records": float(records.num_rows),
        "uploads": take_uploads(provider.storage),  # this process's uploads since the last task: the changelog, snapshots
    }
    if spec.slow is not None and spec.slow[:2] == (spec.batch_id, partition) and attempt == 0:
        log.warning("slow task (--slow-task): sleeping after commit", extra=kv(batch=spec.batch_id, partition=partition, ms=spec.slow[2]))
        time.sleep(spec.slow[2] / 1000)
    return TaskResult(partition, result.version, result.checkpoint_id, result.base_id, task_info, time.perf_counter() - t0, outputs, phases)


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: a whole partition in, one result row out."""
    from pyspark import TaskContext as SparkTaskContext

    tc = SparkTaskContext.get()
    if tc is None:
        raise RuntimeError("run_task runs inside a Spark task (mapInArrow)")
    partition, attempt = tc.partitionId(), tc.attemptNumber()
    info = f"batch {spec.batch_id} partition {partition} attempt {attempt} (stage {tc.stageId()}, task {tc.taskAttemptId()})"
    chunks = list(batches)
    records = pa.Table.from_batches(chunks).select(INPUT_SCHEMA.names).cast(INPUT_SCHEMA) if chunks else INPUT_SCHEMA.empty_table()
    r = run_partition(spec, partition, records, attempt, info, stage=tc.stageId(), task_attempt_id=tc.taskAttemptId())
    yield pa.RecordBatch.from_pydict(
        {
            "partition": [r.partition],
            "version": [r.version],
            "checkpoint_id": [r.checkpoint_id],
            "base_id": [r.base_id],
            "attempt": [r.attempt],
            "seconds": [r.seconds],
            "phases": [json.dumps(r.phases)],
            "outputs": [table_to_ipc(r.outputs)],
        },
        schema=RESULT_SCHEMA,
    )
