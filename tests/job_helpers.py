"""Run the job's driver and tasks in-process, with explicit attempts on named "executors".

The same `BatchDriver` and `run_partition` the Spark job uses; only the scheduling is
spelled out, so tests can stage the exact races of the seed's appendix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from statebed_job.config import JobOptions
from statebed_job.driver import BatchDriver, BatchOutcome
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_model.records import records_for
from statebed_model.rundir import RunDir, RunInfo
from statebed_store import default_uploader, open_storage


def partition_of(records: pa.Table, partitions: int) -> list[pa.Table]:
    keys = records["key"].to_numpy()
    return [records.filter(pa.array(keys % partitions == p)) for p in range(partitions)]


class InProcessJob:
    """A run directory plus a driver whose tasks run here, one executor per local root."""

    def __init__(self, root: Path, opts: JobOptions) -> None:
        self.run = RunDir(root)
        self.opts = opts
        self.run.create(
            RunInfo(workload=opts.workload, mode=opts.mode, partitions=opts.partitions, checkpoint=opts.checkpoint, params=opts.to_json())
        )
        self.storage = open_storage(self.run.checkpoint_location(self.run.read_info()))
        self.driver = BatchDriver(self.run, opts, self.storage)

    def executor(self, name: str, spec: TaskSpec) -> TaskSpec:
        return dataclasses.replace(spec, local_root=str(self.run.root / "executors" / name))

    def records(self, batch_id: int) -> pa.Table:
        r = self.opts.rows_per_batch
        return records_for(batch_id * r, (batch_id + 1) * r, self.opts.keyspace)

    def batch(
        self,
        batch_id: int,
        inputs: pa.Table | None = None,
        schedule: Callable[[TaskSpec, list[pa.Table]], list[TaskResult]] | None = None,
    ) -> BatchOutcome:
        """Run a batch; by default every partition once on executor "e0"."""
        table = self.records(batch_id) if inputs is None else inputs

        def execute(spec: TaskSpec) -> list[TaskResult]:
            parts = partition_of(table, spec.partitions)
            if schedule is not None:
                return schedule(spec, parts)
            return [run_partition(self.executor("e0", spec), p, parts[p]) for p in range(spec.partitions)]

        out = self.driver.process(batch_id, table, execute)
        assert default_uploader().drain(60)
        return out


def records(ids: list[int], keys: list[int], values: list[int] | None = None) -> pa.Table:
    return pa.table(
        {"id": np.asarray(ids, np.int64), "key": np.asarray(keys, np.int64), "value": np.asarray(values or [1] * len(ids), np.int64)}
    )
