"""The V1 positive controls must be caught every time (issue 24 #18), without Spark.

A zombie attempt's changelog overwrites the accepted attempt's `<v>.changelog`. Whether the
final state shows it depends on which executor runs the next batch: one that goes on from
the zombie's state (reloaded from the file, or its own memory) leaves a self-consistent final
state. The batch's committed output still contradicts the overwritten file, so the state
verifier judges every committed version from its files. And each Spark control pins a seed
for which the two attempts' random draws really differ: checked here for each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from job_helpers import InProcessJob

from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_store import default_uploader
from statebed_verify.state import verify_state

# (seed, partitions, rows per batch, keyspace, zombie batch, zombie partition) of every Spark
# positive control: tests/chaos/test_failpoint_faults.py, the quick matrix's V1 cell (seed 1),
# examples/experiments/zombie-upload-sample3-v1.yaml and its twin in a bucket (-s3)
CONTROLS = {
    "test_zombie_upload_v1_is_caught": (7, 2, 2000, 200, 2, 0),
    "quick-matrix-v1-control": (1, 2, 2000, 200, 2, 0),
    "zombie-upload-sample3-v1.yaml": (7, 2, 2000, 200, 2, 0),
    "zombie-upload-sample3-v1-s3.yaml": (7, 2, 2000, 200, 2, 0),
}


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


Schedule = Callable[[TaskSpec, list[pa.Table]], list[TaskResult]]


def zombie(job: InProcessJob, partition: int, seen: dict[int, TaskResult] | None = None) -> Schedule:
    """Every partition on executor W; `partition` runs again as attempt 1 on executor Z after
    W's attempt 0 committed (the zombie writes last). The driver keeps attempt 0."""

    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        results = [run_partition(job.executor("W", spec), p, parts[p]) for p in range(spec.partitions)]
        late = run_partition(job.executor("Z", spec), partition, parts[partition], attempt=1)
        if seen is not None:
            seen.update({0: results[partition], 1: late})
        return results

    return schedule


def on(job: InProcessJob, executor: str) -> Schedule:
    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        return [run_partition(job.executor(executor, spec), p, parts[p]) for p in range(spec.partitions)]

    return schedule


@pytest.mark.parametrize("format", ["v1", "v2"])
def test_a_zombie_overwrite_the_final_state_hides_is_caught_at_its_version(tmp_path: Path, format: str) -> None:
    """Batch 1's zombie (attempt 1, executor Z) overwrites V1's `2.changelog`; batches 2-3 run on
    Z, which goes on from the zombie's state, so the final state agrees with the last outputs.
    Batch 1's output is attempt 0's: the state loaded from `2.changelog` contradicts it. V2
    names the zombie's file apart: the committed lineage is attempt 0's, valid."""
    opts = JobOptions(
        workload="sample3", format=format, batches=4, partitions=1, rows_per_batch=400, keyspace=20, snapshot_interval=100, seed=7
    )
    job = InProcessJob(tmp_path / "run", opts)
    job.batch(0, schedule=on(job, "W"))
    job.batch(1, schedule=zombie(job, 0))
    for b in (2, 3):
        job.batch(b, schedule=on(job, "Z"))
    report = verify_state(job.run.root)
    if format == "v2":
        assert report.valid is True, report.anomalies
        return
    assert report.valid is False, report.anomalies
    assert all(a.detail.startswith("state after batch 1, loaded from its files") for a in report.anomalies), report.anomalies
    assert "output-mismatch" in {a.kind for a in report.anomalies}


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_each_spark_controls_pinned_seed_makes_the_two_attempts_diverge(tmp_path: Path, control: str) -> None:
    """The zombie's state differs from the winner's output for that seed: the overwrite is observable."""
    seed, partitions, rows, keyspace, batch, partition = CONTROLS[control]
    opts = JobOptions(
        workload="sample3", format="v1", batches=batch + 1, partitions=partitions, rows_per_batch=rows, keyspace=keyspace, seed=seed
    )
    job = InProcessJob(tmp_path / "run", opts)
    for b in range(batch):
        job.batch(b, schedule=on(job, "W"))
    seen: dict[int, TaskResult] = {}
    job.batch(batch, schedule=zombie(job, partition, seen))
    winner, late = (sorted(zip(*(seen[a].outputs[c].to_pylist() for c in ("key", "sample")))) for a in (0, 1))
    differ = [k for (k, s0), (_, s1) in zip(winner, late) if s0 != s1]
    assert len(winner) == len(late) > 0 and len(differ) >= len(winner) // 4, (len(differ), len(winner))


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_an_earlier_version_whose_file_does_not_decode_is_an_anomaly_one_that_is_gone_a_note(tmp_path: Path, damage: str) -> None:
    """A committed version whose changelog is there but cut short (a close that never finished)
    cannot be restored: the state verifier says so. One whose files are gone (retention) is
    not judged, and says that instead."""
    opts = JobOptions(
        workload="sample3", format="v1", batches=4, partitions=1, rows_per_batch=400, keyspace=20, snapshot_interval=2, seed=7
    )
    job = InProcessJob(tmp_path / "run", opts)
    for b in range(4):
        job.batch(b, schedule=on(job, "W"))
    default_uploader().drain(60)  # 2.zip and 4.zip: later versions load without version 1's changelog
    changelog = job.run.root / "checkpoint" / "state" / "0" / "0" / "1.changelog"
    if damage == "truncated":
        changelog.write_bytes(changelog.read_bytes()[: changelog.stat().st_size // 2])
    else:
        changelog.unlink()
    report = verify_state(job.run.root)
    if damage == "deleted":
        assert report.valid is True and any("the state committed by batch 0 does not load" in n for n in report.notes), report
        return
    assert report.valid is False
    assert [(a.kind, a.batches) for a in report.anomalies] == [("unloadable-state", [0])], report.anomalies
