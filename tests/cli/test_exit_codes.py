"""Every exit code of `statebed`, through the CLI entry (`statebed_cli.main.main`).

0 ok, 1 invalid, 2 unusable input, 3 unknown, 4 the run failed, 5 a protocol violation,
70 an internal error, 130 interrupted; never a Python traceback.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from checkpoint_helpers import run_cli, write_versions
from job_helpers import InProcessJob

from statebed_base.entry import exit_code
from statebed_base.errors import BaseIdMismatchError, InjectedFault, ProtocolViolationError, QueryFailedError
from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_store import SnapshotUploader, Storage, StoreOptions, failpoints

Capsys = pytest.CaptureFixture[str]


def test_zero_one_two_three(capsys: Capsys, local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    w = write_versions(local_storage, options, SnapshotUploader(), 3, commit_log=True)
    assert run_cli(capsys, "verify", "lineage", local_storage.url)[0] == 0
    local_storage.delete([w.path(2)])
    code, out, _ = run_cli(capsys, "verify", "lineage", local_storage.url)
    assert code == 1 and "missing-checkpoint" in out
    code, _, err = run_cli(capsys, "ls", str(tmp_path / "nope"))
    assert code == 2 and "no such directory" in err and "Traceback" not in err
    v1 = tmp_path / "v1"
    assert run_cli(capsys, "demo", "--checkpoint", str(v1), "--format", "v1")[0] == 0
    assert run_cli(capsys, "verify", "lineage", str(v1))[0] == 3


def test_an_injected_fault_is_a_failed_run(capsys: Capsys, tmp_path: Path) -> None:
    with failpoints.armed("changelog.upload.before", "error(boom)"):
        code, out, err = run_cli(capsys, "demo", "--checkpoint", str(tmp_path / "ckpt"))
    assert code == 4, err
    assert err.strip().splitlines() == ["statebed demo: run failed: failpoint changelog.upload.before fired: boom"]


def stale_base_violation(tmp_path: Path) -> BaseIdMismatchError:
    """The seed's race for real: batch 2's task loads a losing attempt of batch 1 (Spark 4.0 would commit it)."""
    job = InProcessJob(tmp_path / "run", JobOptions(partitions=1, rows_per_batch=50, keyspace=10))
    job.batch(0)
    loser: list[TaskResult] = []

    def twice(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        winner = run_partition(job.executor("e0", spec), 0, parts[0], attempt=0)
        loser.append(run_partition(job.executor("e1", spec), 0, parts[0], attempt=1))
        return [winner]

    job.batch(1, schedule=twice)

    def stale(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        return [run_partition(job.executor("e1", dataclasses.replace(spec, base_ids=(loser[0].checkpoint_id,))), 0, parts[0])]

    with pytest.raises(BaseIdMismatchError, match="batch 2 partition 0") as caught:
        job.batch(2, schedule=stale)
    assert job.driver.failure is caught.value  # what the runner reports when Spark wraps the error
    assert not job.driver.log.read(2)  # nothing committed
    return caught.value


def test_a_protocol_violation_exits_five(capsys: Capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    violation = stale_base_violation(tmp_path)
    assert isinstance(violation, ProtocolViolationError) and exit_code(violation) == 5

    def raises(args: object) -> int:  # the `run` command surfaces the driver's error as is
        raise violation

    monkeypatch.setattr("statebed_cli.commands.ls.run", raises)
    code, _, err = run_cli(capsys, "ls", str(tmp_path))
    assert code == 5 and err.startswith("statebed ls: protocol violation: batch 2 partition 0") and "Traceback" not in err


def test_a_failed_query_exits_four(capsys: Capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def raises(args: object) -> int:
        raise QueryFailedError("the streaming query failed: [STREAM_FAILED] boom")

    monkeypatch.setattr("statebed_cli.commands.ls.run", raises)
    code, _, err = run_cli(capsys, "ls", str(tmp_path))
    assert code == 4 and err == "statebed ls: run failed: the streaming query failed: [STREAM_FAILED] boom\n"
    assert exit_code(InjectedFault("x")) == 4


def test_a_bug_is_one_line_and_exit_seventy(capsys: Capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(args: object) -> int:
        return {}["missing"]  # type: ignore[no-any-return]

    monkeypatch.setattr("statebed_cli.commands.ls.run", bug)
    code, out, err = run_cli(capsys, "ls", str(tmp_path))
    assert code == 70 and out == ""
    assert err == "statebed ls: internal error: KeyError: 'missing' (run with STATEBED_LOG_LEVEL=DEBUG for the trace)\n"


def test_sigterm_exits_130(tmp_path: Path) -> None:
    """A real process stopped while it works: the second batch's changelog write stalls until the signal."""
    env = dict(os.environ, STATEBED_FAILPOINTS="changelog.upload.before=1*off->delay(120000)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "statebed_cli.main", "demo", "--checkpoint", str(tmp_path / "ckpt"), "--partitions", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # printed once batch 0 committed; batch 1 is then stalled
        assert first.startswith("batch 0: committed"), first
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 130
        assert rest == "statebed demo: interrupted\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_names_a_bad_option_by_its_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """JobOptions validates by field (`snapshot_interval`); `statebed run` names the flag the user typed."""
    code, _, err = run_cli(capsys, "run", "--run-dir", str(tmp_path / "r"), "--snapshot-interval", "5000")
    assert code == 2 and "--snapshot-interval must be <= 546" in err and "snapshot_interval" not in err
    assert not (tmp_path / "r").exists()  # refused before anything was written
