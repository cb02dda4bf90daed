"""Task attempts leave records, and the job's failpoints aim at one attempt or one batch.

The fast tests run the job's own driver and `run_partition` in-process (tests/job_helpers.py);
the slow ones run `statebed run` on real Spark: a retried attempt, and a driver killed
between its tasks' commits and the commit log, then resumed.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from job_helpers import InProcessJob
from spark_runs import statebed, summary

from statebed_base.errors import InjectedFault
from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_model.attempts import AttemptRecord, read_attempts
from statebed_model.rundir import RunDir
from statebed_store import CommitLog, failpoints, open_storage
from statebed_store.failpoints import Control


def retry_once(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
    """Spark's retry: a failed attempt runs again as the next attempt number."""
    out = []
    for p in range(spec.partitions):
        try:
            out.append(run_partition(spec, p, parts[p], attempt=0))
        except InjectedFault:
            out.append(run_partition(spec, p, parts[p], attempt=1))
    return out


def committed(checkpoint: Path) -> dict[tuple[int, int], str | None]:
    log = CommitLog(open_storage(checkpoint))
    return {(b, p): rec.id_for(0, p) for b in log.batch_ids() if (rec := log.read(b)) is not None for p in range(2)}


def matching(records: list[AttemptRecord], ids: dict[tuple[int, int], str | None]) -> dict[tuple[int, int], list[AttemptRecord]]:
    """The attempts whose checkpoint id is the one the commit log names, per (batch, partition)."""
    out: dict[tuple[int, int], list[AttemptRecord]] = {}
    for r in records:
        if r.outcome == "ok" and ids.get((r.batch, r.partition)) == r.checkpoint_id:
            out.setdefault((r.batch, r.partition), []).append(r)
    return out


def test_each_attempt_records_its_outcome_and_the_id_it_wrote(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, partitions=2, rows_per_batch=100, keyspace=20))
    job.batch(0)
    with failpoints.armed("task.commit.after", "[batch=1,partition=1,attempt=0]1*error(after commit)"):
        job.batch(1, schedule=retry_once)
    with failpoints.armed("task.load.after", "[batch=2,partition=0]1*error(after load)"):
        job.batch(2, schedule=retry_once)
    records = read_attempts(job.run.root)
    assert [(r.batch, r.partition, r.attempt, r.outcome) for r in records] == [
        (0, 0, 0, "ok"),
        (0, 1, 0, "ok"),
        (1, 0, 0, "ok"),
        (1, 1, 0, "fail"),
        (1, 1, 1, "ok"),
        (2, 0, 0, "fail"),
        (2, 0, 1, "ok"),
        (2, 1, 0, "ok"),
    ]
    ids = committed(tmp_path / "run" / "checkpoint")
    assert {k: len(v) for k, v in matching(records, ids).items()} == {k: 1 for k in ids} and len(ids) == 6
    after_commit, after_load = records[3], records[5]
    assert after_commit.error == "InjectedFault: failpoint task.commit.after fired: after commit"
    assert after_load.error == "InjectedFault: failpoint task.load.after fired: after load"
    files = {f.name for f in open_storage(tmp_path / "run" / "checkpoint").list("state/0/1")}
    assert f"2_{after_commit.checkpoint_id}.changelog" in files  # the failed attempt's orphan, attributed to it
    assert after_load.checkpoint_id and not any(
        after_load.checkpoint_id in f.name for f in open_storage(tmp_path / "run" / "checkpoint").list("state/0/0")
    )
    assert all(r.version == r.batch + 1 and r.end is not None and r.base_id == ids.get((r.batch - 1, r.partition)) for r in records)


def test_an_attempt_held_after_its_commit_already_owns_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hold (`task.commit.after`) stands for an attempt stuck or killed after its upload:
    its record, still "info", names the id of the changelog it wrote; released, it ends ok."""
    monkeypatch.setattr(failpoints, "CONTROL_POLL_S", 0.0)
    control = Control(tmp_path / "fp" / "control.json")
    previous = failpoints.use_control(control.path)
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=1, partitions=2, rows_per_batch=100, keyspace=20))
    control.arm("task.commit.after=[partition=1]hold(600000)")
    batch = threading.Thread(target=job.batch, args=(0,), daemon=True)
    batch.start()
    try:
        deadline = time.monotonic() + 60
        while not control.firings():  # wait for the hold's start record
            assert batch.is_alive() and time.monotonic() < deadline, "the batch ended or stalled before its hold"
            time.sleep(0.02)
        [held] = [r for r in read_attempts(job.run.root) if r.partition == 1]
        assert held.outcome == "info" and held.checkpoint_id is not None
        files = {f.name for f in open_storage(tmp_path / "run" / "checkpoint").list("state/0/1")}
        assert f"1_{held.checkpoint_id}.changelog" in files
    finally:
        control.release("task.commit.after")
        batch.join(60)
        failpoints.use_control(previous)
    assert not batch.is_alive() and [r.outcome for r in read_attempts(job.run.root)] == ["ok", "ok"]
    assert [f["action"] for f in control.firings()] == ["hold(600000)", "released"]
    assert committed(tmp_path / "run" / "checkpoint")[(0, 1)] == held.checkpoint_id


def test_a_batch_filter_aims_at_the_driver_point_of_one_batch(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, partitions=2, rows_per_batch=100, keyspace=20))
    failpoints.arm("driver.tasks.after", "[batch=1]1*error(driver)")
    job.batch(0)
    with pytest.raises(InjectedFault, match="driver.tasks.after fired: driver"):
        job.batch(1)
    assert CommitLog(open_storage(tmp_path / "run" / "checkpoint")).batch_ids() == [0]
    assert not job.run.storage.exists(job.run.staged_name(1))  # the point is before staging
    job.batch(1)  # the rerun: the count was used up in batch 1
    ids = committed(tmp_path / "run" / "checkpoint")
    records = read_attempts(job.run.root)
    assert sorted(ids) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(r.batch, r.outcome) for r in records].count((1, "ok")) == 4  # both runs of batch 1 committed
    assert {k: len(v) for k, v in matching(records, ids).items()} == {k: 1 for k in ids}


SMALL = ["--partitions", "2", "--rows-per-batch", "400", "--keyspace", "40", "--workload", "count", "--json"]


@pytest.mark.slow
def test_an_attempt_failed_after_its_commit_is_retried_by_spark_and_recorded(tmp_path: Path) -> None:
    """Armed through the control file before the run: attempt 0 of batch 1 partition 0 commits,
    then fails; Spark (local[2,4]: up to 4 attempts) retries it as attempt 1; the run is valid."""
    run_dir, control = tmp_path / "run", Control(tmp_path / "fp" / "control.json")
    control.arm("task.commit.after=[batch=1,partition=0,attempt=0]1*error(after commit)")
    env = {failpoints.CONTROL_ENV: str(control.path)}
    proc = statebed("run", "--run-dir", str(run_dir), "--batches", "3", "--master", "local[2,4]", *SMALL, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    records = read_attempts(run_dir)
    ids = committed(run_dir / "checkpoint")
    assert len(ids) == 6 and {k: len(v) for k, v in matching(records, ids).items()} == {k: 1 for k in ids}
    assert len({(r.batch, r.partition, r.attempt) for r in records}) == len(records) == 7
    [failed] = [r for r in records if r.outcome != "ok"]
    assert (failed.batch, failed.partition, failed.attempt, failed.outcome) == (1, 0, 0, "fail")
    assert failed.error == "InjectedFault: failpoint task.commit.after fired: after commit"
    [retry] = [r for r in records if (r.batch, r.partition, r.attempt) == (1, 0, 1)]
    assert retry.checkpoint_id == ids[(1, 0)] != failed.checkpoint_id and retry.task_attempt_id != failed.task_attempt_id
    orphans = {f.name for f in open_storage(run_dir / "checkpoint").list("state/0/0")}
    assert f"2_{failed.checkpoint_id}.changelog" in orphans  # the failed attempt's committed file, attributed to it
    [fired] = control.firings()
    assert fired["failpoint"] == "task.commit.after" and fired["task"] == {"batch": 1, "partition": 0, "attempt": 0}


@pytest.mark.e2e
@pytest.mark.slow
def test_driver_killed_after_the_task_commits_then_resumed(tmp_path: Path) -> None:
    """`driver.tasks.after=[batch=2]1*exit(137)`: the driver dies with batch 2's tasks committed
    and no commit log; `--resume` recomputes batch 2 (new attempts, new ids) and ends valid."""
    run_dir, control = tmp_path / "run", Control(tmp_path / "fp" / "control.json")
    control.arm("driver.tasks.after=[batch=2]1*exit(137)")
    env = {failpoints.CONTROL_ENV: str(control.path)}
    proc = statebed("run", "--run-dir", str(run_dir), "--batches", "4", *SMALL, env=env)
    assert proc.returncode == 137, proc.stderr[-3000:]
    [fired] = control.firings()
    assert fired["failpoint"] == "driver.tasks.after" and fired["task"] == {"batch": 2} and fired["action"] == "exit(137)"
    assert CommitLog(open_storage(run_dir / "checkpoint")).batch_ids() == [0, 1]
    before = read_attempts(run_dir)
    assert [(r.batch, r.outcome) for r in before if r.batch == 2] == [(2, "ok"), (2, "ok")]
    control.disarm()
    proc = statebed("run", "--run-dir", str(run_dir), "--resume", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    assert RunDir(run_dir).batches("output") == [0, 1, 2, 3]
    records = read_attempts(run_dir)
    ids = committed(run_dir / "checkpoint")
    assert len(ids) == 8 and {k: len(v) for k, v in matching(records, ids).items()} == {k: 1 for k in ids}
    batch2 = [r for r in records if r.batch == 2]
    assert len(batch2) == 4 and all(r.outcome == "ok" for r in batch2)  # the dead driver's two are orphans now
    assert not any(ids[(2, r.partition)] == r.checkpoint_id for r in batch2 if r in before)
    assert json.loads((run_dir / "run.json").read_text())["workload"] == "count"
