"""Real Spark runs in local mode: the three stores, driver deaths, and bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from shared_runs import SharedRun
from spark_runs import statebed, summary

from statebed_model.native_state import read_reader_check, write_reader_check
from statebed_model.rundir import RunDir
from statebed_store import CommitLog, open_storage
from statebed_store.location import parse_location
from statebed_verify import verify_lineage
from statebed_verify.state import verify_state

pytestmark = pytest.mark.slow

SMALL = ["--batches", "4", "--rows-per-batch", "3000", "--keyspace", "300", "--json"]  # LOCAL_V2_ARGS' sizes


def test_a_local_v2_run_verifies(local_v2_run: SharedRun) -> None:
    """The session's shared run (`tests/shared_runs.py`): count on V2, the arguments below."""
    assert local_v2_run.returncode == 0, local_v2_run.stderr[-3000:]
    _a_run_verified(local_v2_run.out, local_v2_run.doc, v1=False)


def test_a_local_native_run_verifies(tmp_path: Path) -> None:
    run_dir = _a_local_run_verifies(tmp_path, ["--workload", "count", "--native"])
    _a_reader_disagreement_is_caught(RunDir(run_dir))


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args",
    [["--workload", "bucket-collect", "--format", "v1"], ["--workload", "sample3", "--snapshot-interval", "2"]],
    ids=["bucket-collect-v1", "sample3-v2"],
)
def test_a_local_run_of_the_other_workloads_verifies(tmp_path: Path, args: list[str]) -> None:
    _a_local_run_verifies(tmp_path, args)


def _a_local_run_verifies(tmp_path: Path, args: list[str]) -> Path:
    run_dir = tmp_path / "run"
    proc = statebed("run", "--run-dir", str(run_dir), *SMALL, *args)
    assert proc.returncode == (3 if "--format" in args else 0), proc.stderr[-3000:]
    _a_run_verified(run_dir, summary(proc), v1="--format" in args)
    return run_dir


def _a_run_verified(run_dir: Path, s: dict[str, Any], *, v1: bool) -> None:
    assert s["batches"] == 4 and s["records"] == 12_000
    assert s["verdicts"]["state"]["valid"] is True
    # V1 has no ids to check: "unknown"; a V2 run (statebed's or Spark's native) must be proven linear
    assert s["verdicts"]["lineage"]["valid"] == ("unknown" if v1 else True)
    run = RunDir(run_dir)
    assert run.batches("output") == run.batches("input") == [0, 1, 2, 3]
    assert s["records_per_s"] > 0 and s["batch_p50_s"] is not None


def _a_reader_disagreement_is_caught(run: RunDir) -> None:
    """Positive control of a native run's reader comparison: the same run, with the readers recorded apart."""
    check = read_reader_check(run)
    assert check is not None and check.error is None and check.agree is True and check.entries["spark"] > 0, check
    try:
        write_reader_check(run, replace(check, agree=False, only_spark=["00"]))
        report = verify_state(run.root)
        assert report.valid is False and [a.kind for a in report.anomalies] == ["reader-disagreement"]
    finally:
        write_reader_check(run, check)
    assert verify_state(run.root).valid is True


def test_driver_killed_mid_batch_then_resumed(tmp_path: Path) -> None:
    _driver_killed_mid_batch_then_resumed(tmp_path, "driver.sink.before")


@pytest.mark.e2e
def test_driver_killed_after_the_sink_then_resumed(tmp_path: Path) -> None:
    _driver_killed_mid_batch_then_resumed(tmp_path, "driver.batch.end")


def _driver_killed_mid_batch_then_resumed(tmp_path: Path, point: str) -> None:
    """The driver dies in batch 2 after the commit log (before / after the sink). The resumed
    run finds batch 2 committed, re-emits its output instead of recomputing, and goes on."""
    run_dir = tmp_path / "run"
    args = ["run", "--run-dir", str(run_dir), "--workload", "bucket-collect", *SMALL]
    proc = statebed(*args, env={"STATEBED_FAILPOINTS": f"{point}=2*off->exit(17)"})
    assert proc.returncode == 17, proc.stderr[-3000:]
    storage = open_storage(run_dir / "checkpoint")
    assert CommitLog(storage).batch_ids() == [0, 1, 2]
    run = RunDir(run_dir)
    assert run.has_output(2) == (point == "driver.batch.end")
    staged = run.read_staged(2)
    proc = statebed("run", "--run-dir", str(run_dir), "--resume", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["statuses"].get("re-emitted") == 1 and s["statuses"].get("committed") == 1
    assert run.batches("output") == [0, 1, 2, 3]
    assert run.read_output(2).equals(staged)  # the committed output, not a recomputation
    assert [t["status"] for t in run.timings() if t["batch"] == 2] == ["re-emitted"]  # the first run died before its timing
    files = {f.name for p in range(3) for f in storage.list(f"state/0/{p}") if f.name.startswith("3_") and f.name.endswith(".changelog")}
    assert len(files) == 3  # one attempt per partition: the resumed run did not recompute batch 2
    assert verify_state(run_dir).valid is True and verify_lineage(storage).valid is True


def test_bad_input_is_refused_before_any_state_is_written(tmp_path: Path, local_v2_run: SharedRun) -> None:
    proc = statebed("run", "--run-dir", str(tmp_path / "a"), "--workload", "nope")
    assert proc.returncode == 2 and "invalid choice: 'nope'" in proc.stderr
    proc = statebed("run", "--run-dir", str(tmp_path / "b"), "--checkpoint", "s3://bucket/x", "--s3-endpoint", "http://127.0.0.1:9", *SMALL)
    assert proc.returncode == 2 and "cannot reach S3 endpoint" in proc.stderr
    assert not (tmp_path / "b").exists()
    proc = statebed("run", "--run-dir", str(tmp_path / "d"), "--conf", "no-equals-sign", *SMALL)
    assert proc.returncode == 2 and "--conf wants KEY=VALUE" in proc.stderr
    proc = statebed("run", "--run-dir", str(tmp_path / "e"), "--conf", "spark.network.timeout=1s", *SMALL)
    assert proc.returncode == 4 and "run failed: Spark did not start" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "e" / "checkpoint").exists()
    # a checkpoint that already holds another run's history: the session's shared run, which the
    # refused commands below must leave as it was (its digest is checked again at session end)
    first = local_v2_run.out
    assert local_v2_run.returncode == 0 and local_v2_run.doc["batches"] == 4
    proc = statebed("run", "--run-dir", str(tmp_path / "c"), "--checkpoint", str(first / "checkpoint"), *SMALL)
    assert proc.returncode == 2 and "already holds 4 committed batch(es)" in proc.stderr
    assert not (tmp_path / "c" / "run.json").exists()
    before = sorted(p.name for p in (first / "checkpoint" / "state" / "0" / "0").iterdir())
    for bad in (["--workload", "sample3"], ["--format", "v1"], ["--partitions", "5"]):
        proc = statebed("run", "--run-dir", str(first), "--resume", *bad, "--batches", "6")
        assert proc.returncode == 2, (bad, proc.stderr[-2000:])
        assert "resume it with the same" in proc.stderr
    assert sorted(p.name for p in (first / "checkpoint" / "state" / "0" / "0").iterdir()) == before


@pytest.mark.e2e
@pytest.mark.s3
def test_a_run_with_its_checkpoint_on_s3(tmp_path: Path, s3_server) -> None:  # type: ignore[no-untyped-def]
    from conftest import s3_settings

    cfg = s3_settings(s3_server)
    env = {"STATEBED_S3_ENDPOINT": cfg.endpoint, "AWS_ACCESS_KEY_ID": cfg.access_key, "AWS_SECRET_ACCESS_KEY": cfg.secret_key}
    url = f"s3://statebed-test/job-{tmp_path.name}"
    proc = statebed("run", "--run-dir", str(tmp_path / "run"), "--checkpoint", url, "--workload", "sample3", *SMALL, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(proc)["checkpoint"] == url
    storage = open_storage(parse_location(url, cfg))
    assert CommitLog(storage).batch_ids() == [0, 1, 2, 3]
    assert verify_lineage(storage).valid is True and verify_state(tmp_path / "run", cfg).valid is True


def test_a_task_fault_fails_the_run_with_one_line(tmp_path: Path) -> None:
    """Spark wraps our errors in its own; the run still exits 4 (run failed) with one line, no trace."""
    line = "statebed run: run failed: the streaming query failed: a task failed: InjectedFault: failpoint changelog.upload.before fired: disk\n"
    _a_fault_fails_the_run_with_one_line(tmp_path, "changelog.upload.before=2*off->error(disk)", line)


@pytest.mark.e2e
def test_a_driver_fault_fails_the_run_with_one_line(tmp_path: Path) -> None:
    line = "statebed run: run failed: failpoint driver.batch.end fired: boom\n"
    _a_fault_fails_the_run_with_one_line(tmp_path, "driver.batch.end=1*off->error(boom)", line)


def _a_fault_fails_the_run_with_one_line(tmp_path: Path, faults: str, line: str) -> None:
    args = ["--batches", "3", "--rows-per-batch", "500", "--keyspace", "50", "--partitions", "1"]
    proc = statebed("run", "--run-dir", str(tmp_path / "run"), *args, env={"STATEBED_FAILPOINTS": faults})
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert proc.stderr.endswith(line) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
