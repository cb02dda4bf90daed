"""The driver's input log runs beside the state tasks (issue 41: the driver's per-batch work off
the critical path), and is still written before the batch commits; its failure fails the batch,
a task's failure wins over it."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from job_helpers import InProcessJob, partition_of

from statebed_base.errors import ProtocolViolationError
from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_model.rundir import read_parquet

WAIT_S = 30.0


def job(tmp_path: Path) -> tuple[InProcessJob, pa.Table]:
    j = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=2, partitions=2, rows_per_batch=40, keyspace=8))
    names = j.read_files(0, None)
    return j, j.source.records(names)


def test_the_input_is_read_and_logged_while_the_tasks_run_and_before_the_commit(tmp_path: Path) -> None:
    j, table = job(tmp_path)
    tasks_running, input_read = threading.Event(), threading.Event()

    def inputs() -> pa.Table:
        assert tasks_running.wait(WAIT_S)  # read only once the tasks run: the two overlap
        input_read.set()
        return table

    def execute(spec: TaskSpec) -> list[TaskResult]:
        tasks_running.set()
        assert input_read.wait(WAIT_S)  # had the input come first, this batch would never get here
        parts = partition_of(table, spec.partitions)
        return [run_partition(j.executor("e0", spec), p, parts[p]) for p in range(spec.partitions)]

    out = j.driver.process(0, inputs, execute)
    assert out.status == "committed" and out.records == table.num_rows
    assert read_parquet(j.run.storage, j.run.input_name(0)).equals(table)
    assert j.driver.log.read(0) is not None
    (timing,) = j.run.timings()
    assert timing["input_wait_s"] >= 0 and timing["input_s"] > 0 and timing["tasks_s"] > 0


def test_an_input_that_fails_fails_the_batch_before_any_commit(tmp_path: Path) -> None:
    j, table = job(tmp_path)

    def inputs() -> pa.Table:
        raise RuntimeError("the batch's file cannot be read")

    def execute(spec: TaskSpec) -> list[TaskResult]:
        parts = partition_of(table, spec.partitions)
        return [run_partition(j.executor("e0", spec), p, parts[p]) for p in range(spec.partitions)]

    with pytest.raises(RuntimeError, match="cannot be read"):
        j.driver.process(0, inputs, execute)
    assert j.driver.log.read(0) is None and not j.run.storage.exists(j.run.input_name(0))


def test_a_task_failure_wins_and_the_input_log_is_done_before_the_batch_fails(tmp_path: Path) -> None:
    j, table = job(tmp_path)
    failed = threading.Event()

    def inputs() -> pa.Table:
        assert failed.wait(WAIT_S)
        raise RuntimeError("the input's own failure")

    def execute(spec: TaskSpec) -> list[TaskResult]:
        failed.set()
        raise ProtocolViolationError("a task reported another version")

    with pytest.raises(ProtocolViolationError, match="another version"):
        j.driver.process(0, inputs, execute)
    assert not any(t.name == "input-log-0" for t in threading.enumerate())  # joined: nothing outlives the failed batch
    assert j.driver.log.read(0) is None
