"""Fault targets: real processes found from what was recorded, signalled only after an identity check."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statebed_base.errors import UsageError
from statebed_base.processes import identify
from statebed_chaos.faults import FaultContext, FaultSpec, Trigger, fault_class
from statebed_chaos.targets import IdentityMismatch, LocalTargets
from statebed_model.attempts import write_end, write_start
from statebed_model.rundir import RunDir
from statebed_store.failpoint_control import Control
from statebed_store.formats import get_format
from statebed_verify.history import History


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_registered_server_is_found_paused_resumed_and_killed(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    targets = LocalTargets(tmp_path / "run")
    targets.register("s3", sleeper.pid, name="minio")
    assert targets.find("proxy") == [] and targets.find("s3", name="other") == []
    [s3] = targets.find("s3", name="minio", host="127.0.0.1")
    assert s3.pid == sleeper.pid and targets.alive(s3)
    targets.pause(s3)
    wait_for("SIGSTOP", lambda: state(sleeper.pid) == "T")
    targets.resume(s3)
    wait_for("SIGCONT", lambda: state(sleeper.pid) != "T")
    targets.kill(s3)
    assert sleeper.wait(10) == -signal.SIGKILL
    assert not targets.alive(s3) and targets.find("s3") == []
    with pytest.raises(IdentityMismatch, match="exited"):
        targets.kill(s3)


def test_a_target_whose_identity_changed_is_refused_not_signalled(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    targets = LocalTargets(tmp_path / "run")
    real = targets.register("proxy", sleeper.pid)
    reused = dataclasses.replace(real, identity=dataclasses.replace(real.identity, start_time=real.identity.start_time - 1))
    other_cmd = dataclasses.replace(real, identity=dataclasses.replace(real.identity, cmdline=("toxiproxy",)))
    for stale in (reused, other_cmd):
        assert not targets.alive(stale)
        with pytest.raises(IdentityMismatch, match="another"):
            targets.kill(stale, signal.SIGKILL)
    assert sleeper.poll() is None and state(sleeper.pid) != "Z"
    doc = json.loads((tmp_path / "run" / "targets.json").read_text())
    doc["processes"][0]["start_time"] -= 1  # a stale registry: its PID now names another process
    (tmp_path / "run" / "targets.json").write_text(json.dumps(doc))
    assert targets.find("proxy") == []
    (tmp_path / "run" / "targets.json").write_text("{garbage")
    with pytest.raises(UsageError, match="targets.json: not a usable targets file"):
        targets.find("proxy")
    with pytest.raises(UsageError, match="unknown target kind"):
        targets.find("database")


def test_driver_is_this_process_unless_one_was_registered(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    targets = LocalTargets(tmp_path / "run")
    assert [t.pid for t in targets.find("driver")] == [os.getpid()]
    targets.register("driver", sleeper.pid)
    assert [t.pid for t in targets.find("driver")] == [sleeper.pid]


# A worker -> executor -> pyspark.daemon -> forked worker tree of real processes, named as Spark names them.
TREE = """
import os, subprocess, sys, time
level, ready = sys.argv[1], sys.argv[2]
if level == "worker":
    subprocess.Popen([sys.executable, "-c", sys.argv[3], "executor", ready, sys.argv[3],
        "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--executor-id", "3", "--hostname", "127.0.0.2", "--app-id", "app-7"])
elif level == "executor":
    subprocess.Popen([sys.executable, "-c", sys.argv[3], "daemon", ready, sys.argv[3], "-m", "pyspark.daemon"])
elif os.fork() == 0:
    open(ready, "w").close()
time.sleep(120)
"""


@pytest.fixture
def spark_like_tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    ready = tmp_path / "ready"
    top = subprocess.Popen([sys.executable, "-c", TREE, "worker", str(ready), TREE], start_new_session=True)
    try:
        wait_for("the forked python worker", ready.exists)
        yield ready, top.pid
    finally:
        os.killpg(top.pid, signal.SIGKILL)  # the group we started
        top.wait(10)


def _cluster_of(directory: Path, worker_pid: int) -> None:
    """A cluster.json in `directory` whose one worker is `worker_pid` (pinned by its identity)."""
    me = identify(worker_pid)
    assert me is not None
    directory.mkdir(parents=True)
    worker = {"host": "127.0.0.2", "pid": worker_pid, "start_time": me.start_time, "cmdline": list(me.cmdline or ())}
    doc = {"master_url": "spark://127.0.0.1:1", "master_pid": os.getpid(), "master_web": "http://127.0.0.1:1", "workers": [worker]}
    (directory / "cluster.json").write_text(json.dumps(doc))


def test_executors_and_python_workers_come_from_the_cluster_state_and_the_process_tree(
    tmp_path: Path, spark_like_tree: tuple[Path, int]
) -> None:
    _, worker_pid = spark_like_tree
    _cluster_of(tmp_path / "run" / "cluster", worker_pid)
    targets = LocalTargets(tmp_path / "run")
    [w] = targets.find("worker")
    assert w.pid == worker_pid and w.host == "127.0.0.2"
    [executor] = targets.find("executor", host="127.0.0.2")
    assert executor.attrs["executor_id"] == "3" and executor.attrs["app_id"] == "app-7" and executor.name == "executor-3@127.0.0.2"
    pythons = targets.find("python-worker", executor_id="3")
    assert sorted(t.attrs["role"] for t in pythons) == ["daemon", "worker"]
    [forked] = targets.find("python-worker", role="worker")
    [daemon] = targets.find("python-worker", role="daemon")
    assert identify(forked.pid) is not None and daemon.attrs["jvm_pid"] == str(executor.pid)
    targets.kill(forked)
    wait_for("the forked worker to die", lambda: not targets.alive(forked))
    assert targets.find("python-worker", role="worker") == [] and targets.alive(executor)


def test_on_a_shared_cluster_only_the_runs_own_applications_executors_are_targets(
    tmp_path: Path, spark_like_tree: tuple[Path, int]
) -> None:
    """The matrix's long-lived cluster serves one run after another: an executor of another
    application (the previous cell's, still exiting) is never this run's target."""
    _, worker_pid = spark_like_tree
    shared = tmp_path / "matrix" / "cluster"
    _cluster_of(shared, worker_pid)
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    (run / "events" / "app-6").write_text("")  # this run's application: not the executor's (app-7)
    targets = LocalTargets(run, cluster_dir=shared, shared_cluster=True)
    assert [w.pid for w in targets.find("worker")] == [worker_pid]
    assert targets.find("executor") == [] and targets.find("python-worker", executor_id="3") == []
    (run / "events" / "app-7.inprogress").write_text("")  # now it is this run's too (its driver is still running)
    [executor] = targets.find("executor")
    assert executor.attrs["app_id"] == "app-7"
    assert [e.attrs["app_id"] for e in LocalTargets(tmp_path / "other", cluster_dir=shared).find("executor")] == [
        "app-7"
    ]  # not shared: all


@pytest.mark.parametrize("format", ["v2", "native"])
def test_kill_executor_aims_at_a_live_executor_once_the_trigger_batch_is_over(
    tmp_path: Path, spark_like_tree: tuple[Path, int], format: str
) -> None:
    """Tiny batches: the trigger batch's state tasks ran for 5 ms and ended before the inject
    began, so no running attempt will ever show. The fault must not wait for one until the run
    ends and its cluster is gone (issue 24 #19: "no executor is running" while Spark's event
    log showed both alive): once Spark committed the batch it aims at a live executor. A native
    run records no attempts at all: nothing to wait for, even before the commit."""
    _, worker_pid = spark_like_tree
    run = tmp_path / "run"
    me = identify(worker_pid)
    assert me is not None
    (run / "cluster").mkdir(parents=True)
    worker = {"host": "127.0.0.2", "pid": worker_pid, "start_time": me.start_time, "cmdline": list(me.cmdline or ())}
    doc = {"master_url": "spark://127.0.0.1:1", "master_pid": os.getpid(), "master_web": "http://127.0.0.1:1", "workers": [worker]}
    (run / "cluster" / "cluster.json").write_text(json.dumps(doc))
    ctx = FaultContext(
        RunDir(run),
        get_format(format),
        "standalone",
        LocalTargets(run),
        Control(run / "failpoints" / "control.json"),
        History(tmp_path / "h.jsonl"),
    )
    for p in (0, 1) if format == "v2" else ():
        write_end(run / "attempts", write_start(run / "attempts", batch=2, partition=p, attempt=0), "ok")
    for d in ("offsets", "commits") if format == "v2" else ("offsets",):
        (ctx.spark_checkpoint / d).mkdir(parents=True, exist_ok=True)
        (ctx.spark_checkpoint / d / "2").write_text("v1\n{}\n")
    [executor] = ctx.targets.find("executor")

    def run_ends() -> None:  # what the end of a run does: the driver stops its cluster, the nemesis stops waiting
        os.kill(executor.pid, signal.SIGKILL)
        ctx.stop.set()

    end = threading.Timer(20.0, run_ends)
    end.start()
    try:
        kill = fault_class("kill-executor")(FaultSpec("f1", "kill-executor", Trigger(2), params={"wait_s": 600}))
        facts = kill.inject(ctx)
    finally:
        end.cancel()
    assert not ctx.stop.is_set(), "the fault waited for the run to end instead of aiming at the live executor"
    assert facts["chosen_by"] == "seed" and facts["executor_id"] == "3" and facts["signalled"][0]["pid"] == executor.pid, facts
    wait_for("the executor to die", lambda: not ctx.targets.alive(executor))
