"""Seeded task randomness: (run seed, batch, partition, attempt) decides every random choice."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from job_helpers import InProcessJob

from statebed_base.errors import UsageError
from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, run_partition


def bucket_collect(root: Path, seed: int, attempt: int, batches: int = 2) -> tuple[list[pa.Table], list[str | None]]:
    """Run `batches` bucket-collect batches, every task as the given attempt; outputs and new checkpoint ids."""
    opts = JobOptions(workload="bucket-collect", batches=batches, partitions=2, rows_per_batch=300, keyspace=40, seed=seed)
    job = InProcessJob(root, opts)

    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        return [run_partition(job.executor("e0", spec), p, parts[p], attempt=attempt) for p in range(spec.partitions)]

    outputs, ids = [], []
    for b in range(batches):
        outcome = job.batch(b, schedule=schedule)
        outputs += [r.outputs for r in outcome.results]
        ids += [r.checkpoint_id for r in outcome.results]
    return outputs, ids


def test_same_seed_batch_partition_attempt_replays_and_another_attempt_differs(tmp_path: Path) -> None:
    first, first_ids = bucket_collect(tmp_path / "a", seed=42, attempt=0)
    again, again_ids = bucket_collect(tmp_path / "b", seed=42, attempt=0)
    assert all(t.num_rows > 0 for t in first)
    assert [t.to_pylist() for t in first] == [t.to_pylist() for t in again]
    assert set(first_ids).isdisjoint(again_ids)  # checkpoint ids stay random: they must be unique
    other_attempt, _ = bucket_collect(tmp_path / "c", seed=42, attempt=1)
    other_seed, _ = bucket_collect(tmp_path / "d", seed=43, attempt=0)
    for other in (other_attempt, other_seed):
        assert all(a.to_pylist() != o.to_pylist() for a, o in zip(first, other))


def test_default_seed_is_drawn_saved_and_validated() -> None:
    drawn = [JobOptions().seed for _ in range(3)]
    assert all(isinstance(s, int) for s in drawn) and len(set(drawn)) > 1
    opts = JobOptions(seed=7)
    assert opts.to_json()["seed"] == 7 and JobOptions.from_json(opts.to_json()).seed == 7  # run.json round trip (resume)
    with pytest.raises(UsageError, match="^seed must be"):
        JobOptions(seed=-1)
