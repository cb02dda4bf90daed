"""The state verifier on in-process runs, with the seed appendix's V1 anomalies as positive controls."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from checkpoint_helpers import run_cli
from job_helpers import InProcessJob, records

from statebed_chaos.verify.state import verify_state
from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, close_providers, run_partition
from statebed_store import default_uploader, failpoints


@pytest.fixture(autouse=True)
def _close_providers() -> Iterator[None]:
    yield
    default_uploader().drain(60)
    close_providers()


def kinds(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.kind for a in report.anomalies}


@pytest.mark.parametrize("workload", ["count", "bucket-collect", "sample3"])
@pytest.mark.parametrize("mode", ["v2", "v1"])
def test_clean_runs_are_valid(tmp_path: Path, workload: str, mode: str) -> None:
    job = InProcessJob(
        tmp_path / "run",
        JobOptions(workload=workload, mode=mode, batches=4, partitions=3, rows_per_batch=400, keyspace=50, snapshot_interval=2),
    )
    for b in range(4):
        assert job.batch(b).status == "committed"
    report = verify_state(job.run.root)
    assert report.valid is True, report.anomalies
    assert report.checked["batches"] == 4 and report.checked["records"] == 1600 and report.checked["state_entries"] > 0


def test_oracle_mismatch_names_keys_and_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, rows_per_batch=100, keyspace=20))
    for b in range(3):
        job.batch(b)
    # The input log claims batch 1 had one more record (key 7) than the state saw.
    extra = records([10_000], [7], [5])
    job.run.write_input(1, pa.concat_tables([job.run.read_input(1), extra]))
    report = verify_state(job.run.root)
    assert report.valid is False
    mismatch = next(a for a in report.anomalies if a.kind == "state-mismatch")
    assert mismatch.keys == [7] and 1 in mismatch.batches and "key 7" in mismatch.detail
    assert any(a.kind == "output-mismatch" and a.batches == [1] for a in report.anomalies)
    code, out, _ = run_cli(capsys, "verify", "state", str(job.run.root), "--json")
    assert code == 1 and json.loads(out)["valid"] is False


def test_missing_and_uncommitted_outputs(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, rows_per_batch=100, keyspace=20))
    for b in range(3):
        job.batch(b)
    job.run.output_path(2).unlink()
    job.run.write_output(7, job.run.read_output(1))
    report = verify_state(job.run.root)
    assert {(a.kind, tuple(a.batches)) for a in report.anomalies} >= {("missing-output", (2,)), ("uncommitted-output", (7,))}


def test_missing_input_makes_the_verdict_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=2, rows_per_batch=50, keyspace=10))
    for b in range(2):
        job.batch(b)
    job.run.input_path(0).unlink()
    report = verify_state(job.run.root)
    assert report.valid == "unknown" and kinds(report) == {"missing-input"}
    code, _, _ = run_cli(capsys, "verify", "state", str(job.run.root))
    assert code == 3


def test_rerun_of_a_committed_batch_is_not_recomputed(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="bucket-collect", batches=3, rows_per_batch=200, keyspace=30))
    job.batch(0)
    job.batch(1)
    job.run.output_path(1).unlink()  # the driver died between the commit log and the sink
    calls = []

    def never(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        calls.append(spec)
        return []

    assert job.batch(1, schedule=never).status == "re-emitted"
    assert calls == [] and job.run.output_path(1).exists()
    job.batch(2)
    assert verify_state(job.run.root).valid is True


def test_not_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "verify", "state", str(tmp_path))
    assert code == 2 and "not a run directory" in err
    (tmp_path / "run.json").write_text("{broken")
    code, _, err = run_cli(capsys, "verify", "state", str(tmp_path))
    assert code == 2 and "run.json" in err and "not valid JSON" in err


# -- the seed appendix, as positive controls: V1 corrupts, V2 does not ---------------------------


def two_attempts_first_snapshot_wins(job: InProcessJob, first: str, second: str) -> Callable:  # type: ignore[type-arg]
    """Batch schedule: attempt on `first` (snapshot uploaded), then on `second` (snapshot lost); the driver takes the second."""

    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        run_partition(job.executor(first, spec), 0, parts[0], attempt=0, task_info="attempt 0")
        assert default_uploader().drain(60)
        with failpoints.armed("snapshot.upload.before", "drop"):
            winner = run_partition(job.executor(second, spec), 0, parts[0], attempt=1, task_info="attempt 1")
            assert default_uploader().drain(60)
        return [winner]

    return schedule


def on(job: InProcessJob, executor: str) -> Callable:  # type: ignore[type-arg]
    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        with failpoints.armed("snapshot.upload.before", "drop"):  # the appendix: batch 2 is a changelog only
            r = run_partition(job.executor(executor, spec), 0, parts[0])
            assert default_uploader().drain(60)
        return [r]

    return schedule


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_appendix_lost_foo(tmp_path: Path, mode: str) -> None:
    """Batch 1's attempts bucket the records differently; attempt A's snapshot wins the file name
    in V1 while the committed attempt B's local state carries on; the restart replays A's
    snapshot with B's changelog. Records are lost and doubled in V1; V2 loads B's lineage."""
    opts = JobOptions(workload="bucket-collect", mode=mode, batches=2, partitions=1, rows_per_batch=64, keyspace=8, snapshot_interval=1)
    job = InProcessJob(tmp_path / "run", opts)
    job.batch(0, schedule=two_attempts_first_snapshot_wins(job, "A", "B"))
    job.batch(1, schedule=on(job, "B"))
    report = verify_state(job.run.root)
    if mode == "v1":
        assert report.valid is False
        found = kinds(report)
        assert {"lost-record", "duplicated-record"} & found, report.anomalies
        lost = next((a for a in report.anomalies if a.kind == "lost-record"), None)
        if lost is not None:
            assert lost.records and set(lost.batches) <= {0}
    else:
        assert report.valid is True, report.anomalies


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_appendix_four_of_three(tmp_path: Path, mode: str) -> None:
    """Two attempts of batch 1 drop different elements of each key's sample (X's snapshot is
    the one written, Y is committed); batch 2 continues on Y's local state and writes a
    changelog of deletes and adds against it. V1's restart replays it on X's snapshot: a
    sample of 4, or elements missing, as in the appendix. V2 follows Y's lineage."""
    keys = 200
    opts = JobOptions(workload="sample3", mode=mode, batches=3, partitions=1, keyspace=keys, snapshot_interval=1)
    job = InProcessJob(tmp_path / "run", opts)
    k = list(range(keys))
    job.batch(0, inputs=records([1_000_000 + i for i in range(3 * keys)], k * 3))  # (A, B, C) per key
    job.batch(1, inputs=records([2_000_000 + i for i in k], k), schedule=two_attempts_first_snapshot_wins(job, "X", "Y"))
    job.batch(2, inputs=records([3_000_000 + i for i in k], k), schedule=on(job, "Y"))
    report = verify_state(job.run.root)
    if mode == "v1":
        assert report.valid is False
        assert {"sample-oversize", "sample-foreign-element", "sample-undersize", "output-mismatch"} & kinds(report), report.anomalies
    else:
        assert report.valid is True, report.anomalies
