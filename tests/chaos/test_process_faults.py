"""The process faults (kill-executor, pause-executor, slow-attempt, kill-python-worker,
restart-driver): their evidence read from what a run recorded, and each injected into a real
`statebed run` subprocess (its own driver JVM, a standalone cluster) by a small nemesis here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statebed_base.errors import UsageError
from statebed_base.processes import ProcessIdentity
from statebed_chaos.faults import Fault, FaultContext, FaultSpec, NotApplicable, Trigger, fault_class
from statebed_chaos.faults.process_faults import add_term, choose_executor, fired_in, held_in_plugin, remove_term
from statebed_chaos.targets import KINDS, LocalTargets, Target, Targets
from statebed_model.eventlog import read_event_log
from statebed_model.rundir import RunDir
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_store.formats import get_format
from statebed_verify import verify_run
from statebed_verify.history import History

sys.path.insert(0, str(Path(__file__).parents[1] / "job"))
from spark_runs import STATEBED, finish, stop, wait_until  # tests/job: running `statebed` as a subprocess)

EVENTLOG = Path(__file__).parents[1] / "fixtures" / "eventlog"
PAUSED_AFTER_COPY = "app-20261123115904-0000"  # executor 0 paused; task 20 (executor 1) a speculative copy of task 17
LOST = "app-20261123115418-0000"  # executor 0 lost; task 0 attempt 0 ExecutorLostFailure


def context(tmp_path: Path, format: str = "v2", cluster: str = "standalone") -> FaultContext:
    run = tmp_path / "run"
    return FaultContext(
        run=RunDir(run),
        format=get_format(format),
        cluster=cluster,
        targets=LocalTargets(run),
        control=Control(run / "failpoints" / "control.json"),
        history=History(tmp_path / "history.jsonl"),
        seed=7,
    )


def fault(kind: str, batch: int = 1, for_s: float | None = None, **params: Any) -> Fault:
    return fault_class(kind)(FaultSpec("f1", kind, Trigger(batch), for_s, params))


def injected(ctx: FaultContext, f: Fault, facts: dict[str, Any], outcome: str = "ok") -> None:
    """What the nemesis records of an inject: a "fault" op with the fault's id and the facts inject returned."""
    now = time.time()
    ctx.history.record("fault", outcome, now, now, id=f.spec.id, kind=f.kind, phase="inject", facts=facts)


def events(ctx: FaultContext, *apps: str, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Copy the fixture logs of `apps` into the run; `edit` changes each event in place first."""
    ctx.run.events.mkdir(parents=True, exist_ok=True)
    for app in apps:
        name = next(p.name for p in EVENTLOG.iterdir() if p.name.startswith(app))
        if edit is None:
            shutil.copy(EVENTLOG / name, ctx.run.events / name)
            continue
        edited = []
        for line in (EVENTLOG / name).read_text().splitlines():
            event = json.loads(line)
            edit(event)
            edited.append(json.dumps(event))
        (ctx.run.events / name).write_text("\n".join(edited) + "\n")


def fire(
    ctx: FaultContext, point: str, action: str, task: dict[str, int] | None, pid: int = 4242, at: float | None = None, **extra: Any
) -> None:
    """A firing record as a process following the control file writes it (at `at`, default now; `extra` fields, e.g. the plug-in's `file`)."""
    ctx.control.directory.mkdir(parents=True, exist_ok=True)
    rec = {
        **extra,
        "time": time.time() if at is None else at,
        "failpoint": point,
        "action": action,
        "pid": pid,
        "host": "127.0.0.2",
        "task": task,
        "hit": 1,
    }
    with open(ctx.control.directory / f"fired-{pid}.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")


# -- evidence from records (no Spark) -------------------------------------------------------------


def test_kill_executor_is_proven_by_the_signal_and_spark_removing_the_executor(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("kill-executor")
    assert f.evidence(ctx).fired is False  # never injected
    ctx.history.record("fault", "ok", time.time(), id="f1", kind=f.kind, phase="heal")
    assert f.evidence(ctx).fired is False  # a heal is no inject
    injected(ctx, f, {}, outcome="fail")
    assert f.evidence(ctx).fired is False  # the inject failed (target gone)
    ctx = context(tmp_path / "b")
    injected(ctx, f, {"executor_id": "0", "app_id": LOST, "signal": "SIGKILL"})
    ev = f.evidence(ctx)
    assert ev.fired is None and "no event log" in ev.detail  # delivered, but Spark's view is missing
    events(ctx, PAUSED_AFTER_COPY)
    injected(ctx, f, {"executor_id": "0", "app_id": PAUSED_AFTER_COPY})
    assert f.evidence(ctx).fired is None  # that app never removed executor 0
    ctx = context(tmp_path / "c")
    events(ctx, LOST)
    injected(ctx, f, {"executor_id": "0", "app_id": LOST})
    ev = f.evidence(ctx)
    assert ev.fired is True, ev.detail
    removed = next(p["executor_removed"] for p in ev.proof if "executor_removed" in p)
    assert removed["host"] == "127.0.0.3" and removed["removed_ms"] is not None
    lost = next(p["attempts_lost"] for p in ev.proof if "attempts_lost" in p)
    assert any(a["outcome"] == "ExecutorLostFailure" and a["partition"] == 0 for a in lost)


def test_pause_executor_is_proven_by_a_speculative_copy_launched_during_the_pause(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    events(ctx, PAUSED_AFTER_COPY)
    log = read_event_log(ctx.run.events)
    original = log.attempts_of((PAUSED_AFTER_COPY, 11, 0, 0))[0]
    f = fault("pause-executor", for_s=8)
    injected(ctx, f, {"executor_id": "0", "app_id": PAUSED_AFTER_COPY, "paused_at": original.launch_ms / 1000, "for_s": 8})
    ev = f.evidence(ctx)
    assert ev.fired is True, ev.detail
    [copy] = next(p["speculative_copies"] for p in ev.proof if "speculative_copies" in p)
    assert (copy["original"]["task_id"], copy["copy"]["task_id"], copy["copy"]["executor"]) == (17, 20, "1")
    ctx = context(tmp_path / "later")  # paused only after every copy had launched: no proof
    events(ctx, PAUSED_AFTER_COPY)
    injected(ctx, f, {"executor_id": "0", "app_id": PAUSED_AFTER_COPY, "paused_at": time.time(), "for_s": 8})
    assert f.evidence(ctx).fired is False
    ctx = context(tmp_path / "other")  # executor 1 ran no original that was copied
    events(ctx, PAUSED_AFTER_COPY)
    injected(ctx, f, {"executor_id": "1", "app_id": PAUSED_AFTER_COPY, "paused_at": original.launch_ms / 1000, "for_s": 8})
    assert f.evidence(ctx).fired is False
    ctx = context(tmp_path / "nolog")
    injected(ctx, f, {"executor_id": "0", "app_id": PAUSED_AFTER_COPY, "paused_at": 0, "for_s": 8})
    assert f.evidence(ctx).fired is None
    ctx = context(tmp_path / "notime")  # no pause time recorded: the copies cannot be placed
    events(ctx, PAUSED_AFTER_COPY)
    injected(ctx, f, {"executor_id": "0", "app_id": PAUSED_AFTER_COPY})
    assert f.evidence(ctx).fired is None


def test_pause_executor_does_not_count_a_copy_the_pause_did_not_cause(tmp_path: Path) -> None:
    """The same real log, with the pause placed (or the original moved) so that Spark's copy
    (task 20, launched 967 ms after the original, task 17 on executor 0) is not the pause's doing."""
    log = read_event_log(EVENTLOG / PAUSED_AFTER_COPY)
    original, copy = (next(t for t in log.tasks if t.task_id == n) for n in (17, 20))
    paused_at = original.launch_ms / 1000
    f = fault("pause-executor", for_s=8)

    def verdict(name: str, facts: dict[str, Any], edit: Callable[[dict[str, Any]], None] | None = None) -> bool | None:
        ctx = context(tmp_path / name)
        events(ctx, PAUSED_AFTER_COPY, edit=edit)
        injected(ctx, f, {"executor_id": "0", "app_id": PAUSED_AFTER_COPY, **facts})
        return f.evidence(ctx).fired

    assert verdict("during", {"paused_at": paused_at, "for_s": 8}) is True  # the positive control
    # the copy launched after the pause had ended (a 0.5 s pause beginning with the original)
    assert copy.launch_ms - original.launch_ms > 500
    assert verdict("after-the-pause", {"paused_at": paused_at, "for_s": 0.5}) is False
    assert verdict("a-minute-after", {"paused_at": (copy.launch_ms - 60_000) / 1000, "for_s": 8}) is False

    def move_original(e: dict[str, Any]) -> None:  # task 17 ran on executor 1, not the paused 0
        if e.get("Task Info", {}).get("Task ID") == 17:
            e["Task Info"].update({"Executor ID": "1", "Host": "127.0.0.2"})

    assert verdict("original-elsewhere", {"paused_at": paused_at, "for_s": 8}, move_original) is False
    # the original started only after the pause began: it was not frozen by it
    assert verdict("original-later", {"paused_at": (original.launch_ms - 100) / 1000, "for_s": 8}) is False


def test_slow_attempt_arms_a_filtered_delay_and_is_proven_by_its_firing(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("slow-attempt", batch=2, partition=1, ms=5000, when="before")
    assert f.evidence(ctx).fired is None  # no control file: the run could not have fired it
    f.prepare(ctx)
    assert ctx.control.read()["points"] == {"task.load.after": "[batch=2,partition=1,attempt=0]1*delay(5000)"}
    assert f.evidence(ctx).fired is False
    fire(ctx, "task.load.after", "delay(5000)", {"batch": 2, "partition": 1, "attempt": 1})  # another attempt
    fire(ctx, "task.load.after", "delay(5000)", {"batch": 2, "partition": 0, "attempt": 0})  # another partition
    assert f.evidence(ctx).fired is False
    fire(ctx, "task.load.after", "delay(5000)", {"batch": 2, "partition": 1, "attempt": 0})
    ev = f.evidence(ctx)
    assert ev.fired is True and ev.proof[0]["firing"]["task"] == {"batch": 2, "partition": 1, "attempt": 0}
    f.heal(ctx)
    f.heal(ctx)  # idempotent
    assert ctx.control.read()["points"] == {}
    with pytest.raises(UsageError, match="when must be after or before"):
        fault("slow-attempt", when="during")
    with pytest.raises(NotApplicable, match="does not apply to native"):
        f.check(get_format("native"), "standalone", "local")


@pytest.mark.parametrize(("format", "target"), [("native-v1", {"attempt": 0}), ("native-v2", {})])
def test_slow_attempt_on_spark_s_store_delays_the_changelog_close(tmp_path: Path, format: str, target: dict[str, int]) -> None:
    """Spark's store has no task points: the attempt is held at its changelog's close in its
    commit. V2 closes it on a pool thread with no task context, so no attempt is named there."""
    ctx = context(tmp_path, format=format)
    f = fault("slow-attempt", batch=2, partition=1, ms=2000, when="after")
    f.check(get_format(format), "standalone", "local")
    f.prepare(ctx)
    want = {"batch": 2, "partition": 1, **target}
    term = "[" + ",".join(f"{k}={v}" for k, v in want.items()) + "]1*delay(2000)"
    assert ctx.control.read()["points"] == {"native.changelog.upload": term}
    assert f.evidence(ctx).fired is False
    fire(ctx, "task.commit.after", "delay(2000)", {"batch": 2, "partition": 1, "attempt": 0})  # statebed's point: not this run's
    fire(ctx, "native.changelog.upload", "delay(2000)", {"batch": 2, "partition": 0, **target})  # another partition
    assert f.evidence(ctx).fired is False
    fire(ctx, "native.changelog.upload", "delay(2000)", want)
    ev = f.evidence(ctx)
    assert ev.fired is True and ev.proof[0]["firing"]["task"] == want, ev.detail
    f.heal(ctx)
    assert ctx.control.read()["points"] == {}
    with pytest.raises(NotApplicable, match="native: when: after"):
        fault("slow-attempt", when="before").check(get_format(format), "standalone", "local")


class _Executors(Targets):
    """Executors as `find` reports them (never signalled here)."""

    def __init__(self, *pids: int) -> None:
        self.executors = [
            Target("executor", f"executor-{i}", f"127.0.0.{i + 2}", ProcessIdentity(pid, 1, ("java",)), {"executor_id": str(i)})
            for i, pid in enumerate(pids)
        ]

    def find(self, kind: str, **filters: Any) -> list[Target]:
        return [t for t in self.executors if kind == "executor" and t.matches(filters)]

    def kill(self, target: Target, sig: int = 9) -> None:
        raise AssertionError("no signal in this test")

    def alive(self, target: Target) -> bool:
        return True


def test_a_native_pause_aims_at_the_executor_a_plugin_delay_of_the_batch_holds(tmp_path: Path) -> None:
    """Native runs record no attempts: the executor is the JVM whose firing record shows it inside
    a delay (or an unreleased hold) of the trigger batch now; an ended one, another batch's, or a
    process that is no executor is not aimed at. As a straggler (pause-executor), only once
    another partition's state of the batch is in Spark's checkpoint: before, Spark can copy nothing."""
    ctx = replace(context(tmp_path, format="native-v2"), targets=_Executors(5001, 5002))
    pause = fault("pause-executor", batch=2, for_s=8)
    assert held_in_plugin(ctx, 2) is None
    fire(ctx, "native.changelog.upload", "delay(60000)", {"batch": 1, "partition": 0}, pid=5001)  # another batch
    fire(ctx, "native.changelog.upload", "delay(60000)", {"batch": 2, "partition": 0}, pid=4242)  # no executor
    fire(ctx, "native.changelog.upload", "delay(1000)", {"batch": 2, "partition": 0}, pid=5001, at=time.time() - 2)  # over
    assert held_in_plugin(ctx, 2) is None
    _, chosen = choose_executor(ctx, pause.spec, 0, straggler=True)
    assert chosen["chosen_by"] == "seed" and chosen["why"] == "no executor held in the plug-in at batch 2", chosen
    fire(ctx, "native.changelog.zombie", "hold(60000)", {"batch": 2, "partition": 1}, pid=5002)
    executor, chosen = choose_executor(ctx, pause.spec, 0)
    assert (executor.pid, chosen["chosen_by"], chosen["firing"]["action"]) == (5002, "plugin-hold", "hold(60000)")
    # a straggler only once another partition's state of batch 2 (version 3) is written
    sibling = ctx.spark_checkpoint / "state" / "0" / "0"
    sibling.mkdir(parents=True)
    (sibling / "2.changelog").write_bytes(b"")  # batch 1's: not this batch
    (ctx.spark_checkpoint / "state" / "0" / "1").mkdir()
    (ctx.spark_checkpoint / "state" / "0" / "1" / "3.changelog").write_bytes(b"")  # the held partition's own
    _, chosen = choose_executor(ctx, pause.spec, 0, straggler=True)
    assert chosen["chosen_by"] == "seed", chosen
    (sibling / f"3_{uuid.uuid4()}.changelog").write_bytes(b"")
    executor, chosen = choose_executor(ctx, pause.spec, 0, straggler=True)
    assert (executor.pid, chosen["chosen_by"]) == (5002, "plugin-hold"), chosen
    with open(ctx.control.directory / "fired-5002.jsonl", "a") as out:  # the hold ends
        out.write(json.dumps({**chosen["firing"], "action": "released", "time": time.time()}) + "\n")
    assert held_in_plugin(ctx, 2) is None
    fire(ctx, "native.changelog.upload", "delay(60000)", {"batch": 2, "partition": 0}, pid=5001)
    executor, chosen = choose_executor(ctx, pause.spec, 0)
    assert (executor.pid, chosen["chosen_by"]) == (5001, "plugin-hold")


def test_faults_on_one_point_compose_and_disarm_only_their_own_term(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    slow = fault("slow-attempt", batch=1, partition=0, when="before")
    kill = fault("kill-python-worker", batch=3, partition=1, hold_ms=4000)
    slow.prepare(ctx)
    kill.prepare(ctx)
    both = "[batch=1,partition=0,attempt=0]1*delay(8000)->[batch=3,partition=1,attempt=0]1*delay(4000)"
    assert ctx.control.read()["points"]["task.load.after"] == both
    slow.heal(ctx)
    assert ctx.control.read()["points"]["task.load.after"] == "[batch=3,partition=1,attempt=0]1*delay(4000)"
    remove_term(ctx.control, "task.load.after", "[batch=9]1*error")  # not armed: nothing changes
    kill.heal(ctx)
    assert "task.load.after" not in ctx.control.read()["points"]
    assert add_term(ctx.control, "driver.batch.end", "[batch=2]1*exit(137)") == "[batch=2]1*exit(137)"


def test_kill_python_worker_without_a_running_attempt_is_not_delivered(tmp_path: Path) -> None:
    ctx = context(tmp_path, cluster="local")
    f = fault("kill-python-worker", partition=0, wait_s=0)
    f.check(get_format("v1"), "local", "local")  # works in local mode too
    with pytest.raises(NotApplicable):
        f.check(get_format("native"), "local", "local")
    with pytest.raises(Exception, match="no running attempt 0 of batch 1 partition 0"):
        f.inject(ctx)
    assert f.evidence(ctx).fired is False  # the nemesis recorded nothing ok
    injected(ctx, f, {"batch": 1, "partition": 0, "task_attempt_id": 5})
    ev = f.evidence(ctx)
    assert ev.fired is None and "neither an attempt record nor the event log" in ev.detail


def test_restart_driver_needs_the_exit_firing_and_a_restarted_driver_in_the_history(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("restart-driver", batch=2, step="before-commit-log")
    assert f.evidence(ctx).fired is None  # no control file
    f.prepare(ctx)
    assert ctx.control.read()["points"] == {"commitlog.write.before": "[batch=2]1*exit(137)"}
    assert f.evidence(ctx).fired is False  # never fired
    fire(ctx, "commitlog.write.before", "exit(137)", {"batch": 2})
    ev = f.evidence(ctx)
    assert ev.fired is None and "no driver ops" in ev.detail
    t = time.time()
    ctx.history.record("driver", "info", t - 5, t + 1, pid=100, exit_code=137)
    assert f.evidence(ctx).fired is None  # died, never restarted
    ctx.history.record("driver", "ok", t + 2, t + 30, pid=101, exit_code=0)
    ev = f.evidence(ctx)
    assert ev.fired is True and "exited 137" in ev.detail and "pid 101" in ev.detail
    with pytest.raises(UsageError, match="unknown step"):
        fault("restart-driver", step="whenever")
    with pytest.raises(NotApplicable, match="at-trigger"):
        f.check(get_format("native"), "standalone", "local")
    native = fault("restart-driver")
    native.check(get_format("native"), "local", "local")  # native defaults to at-trigger
    assert native.evidence(context(tmp_path / "n", format="native")).fired is False


# -- injected into real runs (Spark) ----------------------------------------------------------------

STANDALONE = ["--cluster", "standalone", "--workers", "2", "--partitions", "2", "--rows-per-batch", "2000", "--keyspace", "200"]
LOCAL = ["--cluster", "local", "--partitions", "2", "--rows-per-batch", "2000", "--keyspace", "200"]


class Run:
    """`statebed run` as a subprocess following the run's failpoint control, and the nemesis
    steps of the experiment runner done by hand: prepare before the driver starts, inject at
    the trigger, a "fault" op per inject and a "driver" op per driver in the history."""

    def __init__(self, ctx: FaultContext, faults: list[Fault], *args: str) -> None:
        self.ctx, self.faults, self.args = ctx, faults, list(args)
        for f in faults:
            f.check(get_format(ctx.format), ctx.cluster, "local")
            f.prepare(ctx)
        self.proc = self.start()

    def start(self, *extra: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != "STATEBED_FAILPOINTS"}
        env.update({CONTROL_ENV: str(self.ctx.control.path), "STATEBED_LOG_LEVEL": "WARNING"})
        cmd = [*STATEBED, "run", "--run-dir", str(self.ctx.run.root), "--no-verify", "--json", *self.args, *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.started = time.time()
        self.ctx.targets.register("driver", proc.pid)
        return proc

    def inject(self, f: Fault) -> dict[str, Any]:
        b = f.spec.at.batch
        wait_until(self.proc, f"batch {b} to start", lambda: self.ctx.batch_started(b) or None)
        t0 = time.time()
        facts = f.inject(self.ctx)
        self.ctx.history.record("fault", "ok", t0, time.time(), id=f.spec.id, kind=f.kind, phase="inject", facts=facts)
        return facts

    def finish(self) -> tuple[int, str]:
        """Wait for the driver to end by itself; record it; returns (exit code, stderr)."""
        try:
            out, err = finish(self.proc)
        finally:
            stop(self.proc)
            for f in self.faults:
                f.heal(self.ctx)
        code = self.proc.returncode
        self.ctx.history.record("driver", "ok" if code == 0 else "info", self.started, time.time(), pid=self.proc.pid, exit_code=code)
        return code, err


def assert_nothing_left(ctx: FaultContext) -> None:
    """No process of the run is still there: cluster daemons, executors, Python workers, driver JVM."""
    left = {kind: ctx.targets.find(kind) for kind in KINDS if kind not in ("s3", "proxy")}
    assert not any(left.values()), left


@pytest.mark.e2e
@pytest.mark.slow
def test_kill_executor_of_a_slow_state_task_is_proven_and_the_run_stays_valid(tmp_path: Path) -> None:
    """Attempt 0 of batch 1 / partition 0 is held after its commit (slow-attempt); kill-executor
    finds it running from its attempt record and kills its executor (JVM and Python workers):
    Spark removes the executor, loses the attempt, runs it again; the run verifies."""
    ctx = context(tmp_path)
    slow = fault("slow-attempt", batch=1, partition=0, ms=60000)
    kill = fault("kill-executor", batch=1, wait_s=120)
    run = Run(ctx, [slow, kill], "--batches", "4", "--conf", "spark.speculation=false", *STANDALONE)
    facts = run.inject(kill)
    code, err = run.finish()
    assert code == 0, err[-3000:]
    assert facts["chosen_by"] == "running-attempt" and (facts["batch"], facts["partition"]) == (1, 0), facts
    assert any(s["kind"] == "python-worker" for s in facts["signalled"])  # its Python workers went with it
    ev = kill.evidence(ctx)
    assert ev.fired is True, ev.detail
    lost = next(p["attempts_lost"] for p in ev.proof if "attempts_lost" in p)
    assert any((a["batch"], a["partition"], a["outcome"]) == (1, 0, "ExecutorLostFailure") for a in lost), lost
    assert slow.evidence(ctx).fired is True
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


@pytest.mark.e2e
@pytest.mark.slow
def test_pause_executor_gets_a_speculative_copy_of_a_task_frozen_on_it(tmp_path: Path) -> None:
    """Attempt 0 of batch 2 / partition 0 is held 2 s after loading its state (its input is
    fetched), so the pause can aim at it once partition 1 has finished; speculation waits 4 s
    (minTaskRuntime), so the hold alone is no straggler. Its executor (JVM and Python workers)
    is SIGSTOPped for 8 s and Spark launches a speculative copy of the frozen task during the pause. The fault resumes the executor; the run completes and verifies.
    (Aimed blind, at a task whose sibling has not finished, the pause proved nothing in 2 of 4
    runs: when the frozen executor also serves the shuffle output the sibling needs, no task of
    the stage finishes during the pause and Spark launches no copy.)"""
    ctx = context(tmp_path)
    hold = fault("slow-attempt", batch=2, partition=0, ms=2000, when="before")
    pause = fault("pause-executor", batch=2, for_s=8, wait_s=120)
    run = Run(ctx, [hold, pause], "--batches", "4", "--conf", "spark.speculation.minTaskRuntime=4s", *STANDALONE)
    facts = run.inject(pause)
    code, err = run.finish()
    assert code == 0, err[-3000:]
    assert facts["chosen_by"] == "straggler" and facts["batch"] == 2, facts  # partition 0, or 1 when it was the slower
    assert facts["signal"] == "SIGSTOP" and facts["signalled"][0]["kind"] == "executor"
    ev = pause.evidence(ctx)
    assert ev.fired is True, f"{ev.detail} {facts}"
    copies = next(p["speculative_copies"] for p in ev.proof if "speculative_copies" in p)
    assert all(c["original"]["executor"] == facts["executor_id"] != c["copy"]["executor"] for c in copies), copies
    assert any(c["partition"] == facts["partition"] for c in copies), copies
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


@pytest.mark.e2e
@pytest.mark.slow
def test_kill_python_worker_mid_task_fails_that_attempt_and_the_retry_commits(tmp_path: Path) -> None:
    """Attempt 0 of batch 1 / partition 1 is held after loading its state; the fault finds its
    Python worker from the attempt record and SIGKILLs it: the attempt's record stays "info",
    Spark fails that task attempt, a retry commits, the run verifies. (Standalone: in local
    mode, `local[2]`, Spark retries no task, so the query fails.)"""
    ctx = context(tmp_path)
    kill = fault("kill-python-worker", batch=1, partition=1)
    run = Run(ctx, [kill], "--batches", "3", *STANDALONE)
    facts = run.inject(kill)
    code, err = run.finish()
    assert code == 0, err[-3000:]
    ev = kill.evidence(ctx)
    assert ev.fired is True, ev.detail
    record = next(p["attempt_record"] for p in ev.proof if "attempt_record" in p)
    assert record["outcome"] == "info" and record["pid"] == facts["signalled"][0]["pid"]
    spark = next(p["event_log"] for p in ev.proof if "event_log" in p)
    assert spark["outcome"] not in (None, "Success"), spark
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


@pytest.mark.e2e
@pytest.mark.slow
def test_restart_driver_before_the_commit_log_then_resume(tmp_path: Path) -> None:
    """The driver exits 137 at batch 1's commit log write; inject disarms the point once it
    fired; `statebed run --resume` continues from the checkpoint and the run verifies."""
    ctx = context(tmp_path, cluster="local")
    restart = fault("restart-driver", batch=1, step="before-commit-log", wait_s=300)
    run = Run(ctx, [restart], "--batches", "3", *LOCAL)
    facts = run.inject(restart)
    code, err = run.finish()
    assert code == 137, err[-3000:]
    assert facts["failpoint"] == "commitlog.write.before" and "commitlog.write.before" not in ctx.control.read()["points"]
    assert restart.evidence(ctx).fired is None  # died; no restart yet
    run.proc = run.start("--resume")
    code, err = run.finish()
    assert code == 0, err[-3000:]
    ev = restart.evidence(ctx)
    assert ev.fired is True, ev.detail
    assert [f["task"] for f in ctx.firings("commitlog.write.before")] == [{"batch": 1}]  # the restarted driver did not die again
    assert RunDir(ctx.run.root).batches("output") == [0, 1, 2]
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


@pytest.mark.e2e
@pytest.mark.slow
def test_restart_driver_at_the_trigger_kills_a_native_driver_then_resume(tmp_path: Path) -> None:
    """Native Spark: SIGKILL the driver and its JVM once batch 1 has started; `--resume`
    continues the query from Spark's own checkpoint and the run verifies."""
    ctx = context(tmp_path, format="native", cluster="local")
    restart = fault("restart-driver", batch=1)
    run = Run(ctx, [restart], "--native", "--batches", "3", *LOCAL)
    facts = run.inject(restart)
    code, err = run.finish()
    assert code == -9, err[-3000:]
    assert facts["step"] == "at-trigger" and [s["kind"] for s in facts["signalled"]] == ["driver", "driver-jvm"], facts
    run.proc = run.start("--resume")
    code, err = run.finish()
    assert code == 0, err[-3000:]
    ev = restart.evidence(ctx)
    assert ev.fired is True and "exited -9" in ev.detail, ev.detail
    assert RunDir(ctx.run.root).batches("output") == [0, 1, 2]
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


def test_a_firing_names_its_executor_by_pid_start_time_and_host_never_pid_alone() -> None:
    """Every executor JVM of a Kubernetes run is PID 7 in its own pod: the record's start time
    and host pick the one that fired; a record that fits none, or two, picks none."""

    def pod(ip: str, start: int) -> Target:
        return Target("executor", f"exec-{ip}", ip, ProcessIdentity(7, start, ("java",)))

    a, b, c = pod("10.0.0.5", 100), pod("10.0.0.6", 200), pod("10.0.0.7", 100)
    assert fired_in([a, b], {"host": "10.0.0.6", "pid": 7, "started": 200}) is b
    assert fired_in([a, b, c], {"host": "10.0.0.7", "pid": 7, "started": 100}) is c  # same pid and tick: the host decides
    assert fired_in([a, b], {"host": "10.0.0.5", "pid": 7, "started": 999}) is None  # a JVM that has since been replaced
    assert fired_in([a, c], {"pid": 7}) is None  # an old record names no host or start: two candidates, none chosen
    assert fired_in([a], {"pid": 7}) is a
