"""Real Spark standalone runs (a master and one worker per loopback address): speculation and executor loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spark_runs import STATEBED, statebed, task_events

from statebed_chaos.verify import verify_lineage
from statebed_chaos.verify.state import verify_state
from statebed_job.cluster import StandaloneCluster
from statebed_model.rundir import RunDir
from statebed_store import CommitLog, open_storage

pytestmark = pytest.mark.slow


def start_and_wait(run_dir: Path, extra: list[str], batches_done: int) -> subprocess.Popen[str]:
    """Start `statebed run` in the background and return once `batches_done` batches committed."""
    cmd = [*STATEBED, "run", "--run-dir", str(run_dir), *extra, *ARGS]
    env = {k: v for k, v in os.environ.items() if k != "STATEBED_FAILPOINTS"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    timings = run_dir / "timings.jsonl"
    deadline = time.monotonic() + 240
    while not (timings.exists() and len(timings.read_text().splitlines()) >= batches_done):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"run ended or stalled before batch {batches_done}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.2)
    return proc


ARGS = ["--cluster", "standalone", "--workers", "2", "--rows-per-batch", "4000", "--keyspace", "500", "--json"]


def test_a_slow_task_gets_a_speculative_copy_and_only_one_id_is_committed(tmp_path: Path) -> None:
    """Attempt 0 of batch 2 / partition 1 commits, then stalls (alive): Spark launches a copy on the
    other executor, which also commits. Both attempts wrote files; the driver commits one id; the
    other is an orphan the loads never read; state and lineage verify."""
    run_dir = tmp_path / "run"
    proc = statebed("run", "--run-dir", str(run_dir), "--batches", "4", "--slow-task", "2:1:8000", *ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = task_events(run_dir)
    copies = [e for e in events if e["speculative"] and e["reason"] == "Success"]
    assert copies, "Spark launched no speculative copy"
    storage = open_storage(run_dir / "checkpoint")
    rec = CommitLog(storage).read(2)
    assert rec is not None
    committed = rec.id_for(0, 1)
    attempts = sorted(f.name for f in storage.list("state/0/1") if f.name.startswith("3_") and f.name.endswith(".changelog"))
    assert len(attempts) >= 2 and f"3_{committed}.changelog" in attempts  # both attempts wrote a changelog
    report = verify_lineage(storage)
    assert report.valid is True
    orphans = {(o["partition"], o["version"], o["id"]) for o in report.orphans}
    assert any(p == 1 and v == 3 and i != committed for p, v, i in orphans)
    timings = [json.loads(x) for x in (run_dir / "timings.jsonl").read_text().splitlines()]
    batch2 = next(t for t in timings if t["batch"] == 2)
    assert "attempt 1" in batch2["attempts"][1]  # the copy's result is the one the driver kept
    assert verify_state(run_dir).valid is True


def test_executors_killed_mid_batch_are_replaced_and_the_run_completes(tmp_path: Path) -> None:
    """SIGKILL every executor JVM while batch 3 runs (held by a stalled task): Spark loses the
    tasks, the workers start new executors, the batch is retried and the results verify."""
    run_dir = tmp_path / "run"
    proc = start_and_wait(run_dir, ["--batches", "6", "--slow-task", "3:0:20000"], batches_done=3)  # batch 3 is running
    cluster = StandaloneCluster(run_dir / "cluster")
    try:
        time.sleep(2.0)
        victims = [e["pid"] for e in cluster.executors()]
        assert victims, "no executor process found"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    s = json.loads(out[out.rfind("\n{") + 1 :])
    assert s["batches"] == 6 and s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    lost = [e for e in task_events(run_dir) if e["reason"] == "ExecutorLostFailure"]
    assert lost, "no task was lost with the executors"
    assert RunDir(run_dir).batches("output") == list(range(6))
    assert cluster.read_state() is None  # the run stopped its cluster


def test_a_paused_executor_gets_speculative_copies(tmp_path: Path) -> None:
    """SIGSTOP one executor while batch 3 runs: its tasks stall, Spark speculates them on the
    other executor, the run completes and verifies; the paused JVM is resumed and stopped at
    the end by the run's cluster teardown (by PID)."""
    run_dir = tmp_path / "run"
    # A paused executor still holds shuffle blocks: fetching them fails after the network timeout.
    quick_timeouts = [
        "--conf",
        "spark.network.timeout=15s",
        "--conf",
        "spark.network.timeoutInterval=5s",
        "--conf",
        "spark.executor.heartbeatInterval=2s",
    ]
    proc = start_and_wait(run_dir, ["--batches", "6", "--slow-task", "3:0:6000", *quick_timeouts], batches_done=3)
    cluster = StandaloneCluster(run_dir / "cluster")
    paused: list[int] = []
    try:
        time.sleep(1.0)
        paused = [cluster.executors()[0]["pid"]]
        os.kill(paused[0], signal.SIGSTOP)
        out, err = proc.communicate(timeout=420)
    finally:
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    s = json.loads(out[out.rfind("\n{") + 1 :])
    assert s["batches"] == 6 and s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    assert any(e["speculative"] and e["reason"] == "Success" for e in task_events(run_dir)), "no speculative copy succeeded"
