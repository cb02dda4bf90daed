"""Real Spark standalone runs (a master and one worker per loopback address): speculation and
executor loss, each proven from Spark's own event log, not inferred from the run's success."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from spark_runs import (
    changelogs_of,
    executor_pid,
    finish,
    slow_attempt_host,
    start_statebed,
    statebed,
    stop,
    summary_of,
    timings,
    wait_until,
)

from statebed_job.cluster import StandaloneCluster
from statebed_model.eventlog import EventLog, Stage, TaskAttempt, read_event_log
from statebed_model.rundir import RunDir
from statebed_store import CommitLog, open_storage
from statebed_verify import verify_lineage
from statebed_verify.state import verify_state

pytestmark = pytest.mark.slow

PARTITIONS = 3
ARGS = ["--cluster", "standalone", "--workers", "2", "--partitions", str(PARTITIONS), "--rows-per-batch", "4000", "--keyspace", "500"]
ARGS += ["--json"]
# A paused executor is declared lost after the network timeout (Spark's default: 120 s).
QUICK_TIMEOUTS = ["--conf", "spark.network.timeout=15s", "--conf", "spark.network.timeoutInterval=5s"]
QUICK_TIMEOUTS += ["--conf", "spark.executor.heartbeatInterval=2s"]


def state_stage(log: EventLog, batch: int) -> Stage:
    """The stage of a batch's state tasks (one task per partition; the batch's other stages have one)."""
    stages = [s for s in log.stages if s.batch == batch and s.tasks == PARTITIONS]
    assert stages, f"no state stage of batch {batch} in the event log"
    return stages[0]


def first_attempt(log: EventLog, batch: int, partition: int) -> TaskAttempt:
    stage = state_stage(log, batch)
    found = [t for t in log.tasks if (t.stage, t.stage_attempt, t.index, t.attempt) == (stage.stage, 0, partition, 0)]
    assert len(found) == 1, f"attempt 0 of batch {batch} partition {partition}: {found}"
    return found[0]


def test_a_slow_task_gets_a_speculative_copy_and_only_one_id_is_committed(tmp_path: Path) -> None:
    """Attempt 0 of batch 2 / partition 1 commits, then stalls (alive): Spark launches a copy on the
    other executor, which also commits. Both attempts wrote files; the driver commits one id; the
    other is an orphan the loads never read; state and lineage verify."""
    run_dir = tmp_path / "run"
    proc = statebed("run", "--run-dir", str(run_dir), "--batches", "4", "--slow-task", "2:1:8000", *ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = read_event_log(run_dir / "events")
    slow = first_attempt(log, 2, 1)
    copies = [c for o, c in log.speculative_successes(slow.executor, slow.app) if o == slow]
    assert copies and copies[0].host != slow.host, "no speculative copy of the slow task succeeded elsewhere"
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
    kept = timings(run_dir)[2]["attempts"][1]
    assert f"task {copies[0].task_id})" in kept  # the copy's result is the one the driver kept
    assert verify_state(run_dir).valid is True


@pytest.mark.e2e
def test_executors_killed_mid_batch_are_replaced_and_the_run_completes(tmp_path: Path) -> None:
    """SIGKILL every executor JVM while batch 3 is held by a stalled task (speculation off, so
    nothing else can finish it): Spark loses the task with its executor, the workers start new
    executors, the task runs again there and the results verify."""
    run_dir = tmp_path / "run"
    no_copies = ["--conf", "spark.speculation=false"]
    proc = start_statebed("run", "--run-dir", str(run_dir), "--batches", "6", "--slow-task", "3:0:60000", *no_copies, *ARGS)
    cluster = StandaloneCluster(run_dir / "cluster")
    try:
        wait_until(proc, "batch 3's slow attempt to start its sleep", lambda: slow_attempt_host(run_dir))
        victims = [e["pid"] for e in cluster.executors()]
        assert len(victims) == 2, victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        out, err = finish(proc)
    finally:
        stop(proc)
    assert proc.returncode == 0, err[-3000:]
    s = summary_of(out)
    assert s["batches"] == 6 and s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    log = read_event_log(run_dir / "events")
    held = first_attempt(log, 3, 0)
    assert held.outcome == "ExecutorLostFailure", held
    assert log.executor(held.executor, held.app).removed_ms is not None  # Spark saw the executor go
    # run again (a later attempt, or a resubmitted stage once the lost map output was recomputed) on a new executor
    again = [t for t in log.tasks if (t.app, t.stage, t.index) == (held.app, held.stage, held.index) and t.succeeded]
    gone = {e.executor for e in log.executors if e.removed_ms is not None}
    assert again and again[0].launch_ms > held.launch_ms and again[0].executor not in gone, again
    assert RunDir(run_dir).batches("output") == list(range(6))
    assert cluster.read_state() is None  # the run stopped its cluster


@pytest.mark.e2e
def test_a_paused_executor_gets_speculative_copies(tmp_path: Path) -> None:
    """SIGSTOP the executor that runs attempt 0 of batch 3 / partition 0 (held after its commit
    by --slow-task; found by its marker in that executor's stderr) once the speculative copy
    has committed too (its changelog is in the checkpoint: it no longer needs the shuffle
    blocks the paused executor serves). The copy's result is the one the driver keeps; the
    paused attempt never reports anything but its executor's loss (unpaused, it would report
    its kill within seconds); the later batches run without it; the run verifies. The paused
    JVM is resumed and stopped by the run's cluster teardown (by PID)."""
    run_dir = tmp_path / "run"
    proc = start_statebed("run", "--run-dir", str(run_dir), "--batches", "6", "--slow-task", "3:0:60000", *QUICK_TIMEOUTS, *ARGS)
    paused: list[int] = []
    try:
        host = wait_until(proc, "batch 3's slow attempt to start its sleep", lambda: slow_attempt_host(run_dir))
        wait_until(proc, "a second attempt of batch 3 / partition 0 to commit", lambda: len(changelogs_of(run_dir, 0, 4)) >= 2 or None)
        paused.append(executor_pid(run_dir, host))
        os.kill(paused[0], signal.SIGSTOP)
        paused_ms = time.time() * 1000
        out, err = finish(proc)
    finally:
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop(proc)
    assert proc.returncode == 0, err[-3000:]
    s = summary_of(out)
    assert s["batches"] == 6 and s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    log = read_event_log(run_dir / "events")
    original = first_attempt(log, 3, 0)
    assert original.host == host and not original.speculative  # the paused executor ran it
    assert original.outcome in (None, "ExecutorLostFailure"), original  # frozen: no result, no kill acknowledged
    assert original.finish_ms is None or original.finish_ms > paused_ms
    copies = [c for o, c in log.speculative_successes(original.executor, original.app) if o == original]
    assert copies and copies[0].host != host, f"no speculative copy of {original} succeeded on the other executor"
    assert f"task {copies[0].task_id})" in timings(run_dir)[3]["attempts"][0]  # the driver kept the copy
    later = [t for t in log.tasks if t.batch is not None and t.batch > 3 and t.succeeded]
    assert later and all(t.executor != original.executor for t in later)  # the run went on without it
