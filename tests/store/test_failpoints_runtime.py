"""Runtime failpoints: armed, changed and disarmed in running processes through a control file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statebed_base.errors import InjectedFault, UsageError
from statebed_store import failpoints
from statebed_store.failpoints import Control

# A separate process that hits a failpoint in a loop and reports what it saw in a status file.
LOOP = """
import json, os, sys
from statebed_base.errors import InjectedFault
from statebed_store import failpoints
status, hits, errors = sys.argv[1], 0, 0
print("ready", flush=True)
while True:
    with failpoints.task_context(batch=4, partition=1, attempt=2):
        try:
            failpoints.hit("changelog.upload.after")
        except InjectedFault:
            errors += 1
    hits += 1
    tmp = status + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"hits": hits, "errors": errors, "version": failpoints.control_version()}, f)
    os.replace(tmp, status)
"""


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def looper(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Control, Path]]:
    control = Control(tmp_path / "failpoints" / "control.json")
    status = tmp_path / "status.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEBED_FAILPOINTS")}
    env[failpoints.CONTROL_ENV] = str(control.path)
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(status)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc, control, status
    finally:
        proc.kill()
        proc.wait(10)


def read_status(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return {}


def test_arm_mid_run_records_firings_then_disarm_stops_them(looper: tuple[subprocess.Popen[str], Control, Path]) -> None:
    proc, control, status = looper
    wait_for("the loop to run unarmed", lambda: read_status(status).get("hits", 0) > 50)
    assert read_status(status)["errors"] == 0 and control.firings() == []

    version = control.arm("changelog.upload.after=error(from control)", seed=5)
    first = wait_for("a recorded firing", control.firings)[0]
    assert first["pid"] == proc.pid and first["failpoint"] == "changelog.upload.after"
    assert first["action"] == "error(from control)" and first["control_version"] == version
    assert first["task"] == {"batch": 4, "partition": 1, "attempt": 2} and first["host"]
    assert len(list(control.directory.glob(f"fired-*-{proc.pid}-*.jsonl"))) == 1  # one file per process: host, pid, start time

    off = control.disarm()
    seen = wait_for("the loop to apply the disarm", lambda: (s := read_status(status)).get("version") == off and s)
    fired = len(control.firings())
    wait_for("more hits after the disarm", lambda: read_status(status).get("hits", 0) > seen["hits"] + 200)
    after = read_status(status)
    assert after["errors"] == seen["errors"] and len(control.firings()) == fired
    assert fired >= after["errors"] > 0  # every error was recorded (a firing is logged before it acts)


def test_change_while_running_and_counts_survive_unrelated_updates(looper: tuple[subprocess.Popen[str], Control, Path]) -> None:
    proc, control, status = looper
    control.arm("changelog.upload.after=2*error(twice)->off")
    wait_for("two firings", lambda: len(control.firings()) >= 2)
    v = control.arm("snapshot.upload.before=drop")  # another point: the first keeps its used-up count
    wait_for("the loop to apply it", lambda: read_status(status).get("version") == v)
    hits = read_status(status)["hits"]
    wait_for("more hits", lambda: read_status(status).get("hits", 0) > hits + 200)
    assert [f["action"] for f in control.firings()] == ["error(twice)", "error(twice)"]
    control.arm("changelog.upload.after=1*delay(1)")  # changed: re-armed with a fresh count
    wait_for("the delay firing", lambda: any(f["action"] == "delay(1)" for f in control.firings()))
    assert {f["pid"] for f in control.firings()} == {proc.pid}


@pytest.fixture
def fast_poll(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Control]:
    monkeypatch.setattr(failpoints, "CONTROL_POLL_S", 0.0)
    control = Control(tmp_path / "control.json")
    previous = failpoints.use_control(control.path)
    try:
        yield control
    finally:
        failpoints.use_control(previous)


def test_in_process_control_is_seeded_and_ignores_points_not_registered_here(fast_poll: Control) -> None:
    control = fast_poll
    control.path.write_text(json.dumps({"version": 1, "seed": 3, "points": {"not.here": "drop", "commitlog.write.before": "50%drop"}}))
    pattern = [failpoints.hit("commitlog.write.before") for _ in range(100)]
    assert set(failpoints.stats()) == {"commitlog.write.before"} and 20 < sum(pattern) < 80
    control.disarm()
    assert failpoints.hit("commitlog.write.before") is False and failpoints.stats() == {}
    control.arm("commitlog.write.before=50%drop", seed=3)  # re-armed: the same seed rolls the same
    assert [failpoints.hit("commitlog.write.before") for _ in range(100)] == pattern
    assert sum(1 for f in control.firings() if f["action"] == "drop") == 2 * sum(pattern)


def test_control_rejects_bad_specs_and_a_garbage_file_keeps_the_arming(fast_poll: Control) -> None:
    control = fast_poll
    with pytest.raises(UsageError, match="unknown failpoint 'nope'"):
        control.arm("nope=drop")
    with pytest.raises(UsageError, match="cannot parse term"):
        control.arm("commitlog.write.before=explode")
    control.arm("commitlog.write.before=error(armed)")
    with pytest.raises(InjectedFault, match="armed"):
        failpoints.hit("commitlog.write.before")
    control.path.write_text("{not json")
    with pytest.raises(InjectedFault, match="armed"):
        failpoints.hit("commitlog.write.before")
    with pytest.raises(UsageError, match="not a failpoint control file"):
        control.read()


def test_off_costs_nothing_without_control() -> None:
    assert failpoints.control_version() is None and not failpoints.stats()
    assert failpoints.hit("commitlog.write.before") is False


@pytest.mark.e2e
@pytest.mark.slow
def test_armed_mid_run_fires_in_a_python_worker_of_a_real_run(tmp_path: Path) -> None:
    """`statebed run` on local[2]: armed after batch 0 through the run's control file, an
    executor-side point fires inside a Python worker and its firing names the task attempt."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEBED_FAILPOINTS")}
    env["STATEBED_FAILPOINTS"] = "driver.batch.end=1*delay(2000)"  # holds the driver after batch 0: room to arm
    args = ["run", "--run-dir", str(run), "--batches", "4", "--partitions", "2", "--rows-per-batch", "200", "--keyspace", "20"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "statebed_cli.main", *args, "--seed", "11", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        control = Control(run / "failpoints" / "control.json")
        wait_for("the driver's firing after batch 0", control.firings, timeout=300)
        control.arm("changelog.upload.after=1*delay(1)")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out[out.index("{") :])["seed"] == 11
    fired = control.firings()
    [driver] = [f for f in fired if f["failpoint"] == "driver.batch.end"]
    assert driver["pid"] == proc.pid and driver["task"] == {"batch": 0} and driver["action"] == "delay(2000)"
    executor_side = [f for f in fired if f["failpoint"] == "changelog.upload.after"]
    assert executor_side and all(f["pid"] != proc.pid and f["action"] == "delay(1)" for f in executor_side)
    assert all(f["task"]["batch"] >= 1 and f["task"]["partition"] in (0, 1) and f["task"]["attempt"] == 0 for f in executor_side)
