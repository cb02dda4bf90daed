"""Hostile registries and state files for the chaos targets and the driver process: a PID with its real
start time but no (or another) command line is not a target; nothing is ever signalled by start time alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statebed_base.processes import ProcessIdentity, identify_started
from statebed_chaos.driver_process import DriverProcess
from statebed_chaos.targets import IdentityMismatch, LocalTargets, Target


def forged_registry(run: Path, entry: dict[str, object]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "targets.json").write_text(json.dumps({"processes": [{"kind": "s3", "name": "s3", "host": "127.0.0.1", **entry}]}))


@pytest.mark.parametrize("cmdline", [None, [], ["weed", "server"], "missing"])
def test_a_registered_pid_without_its_command_line_is_no_target(tmp_path: Path, sleeper: subprocess.Popen[bytes], cmdline: object) -> None:
    me = identify_started(sleeper.pid)
    assert me is not None
    entry: dict[str, object] = {"pid": me.pid, "start_time": me.start_time}
    if cmdline != "missing":
        entry["cmdline"] = cmdline
    forged_registry(tmp_path / "run", entry)
    targets = LocalTargets(tmp_path / "run")
    assert targets.find("s3") == []
    forged = Target("s3", "s3", "127.0.0.1", ProcessIdentity.from_json(entry))
    with pytest.raises(IdentityMismatch):
        targets.kill(forged)
    assert sleeper.poll() is None
    forged_registry(tmp_path / "run", {**entry, "cmdline": list(me.cmdline or ())})  # the positive control
    [s3] = targets.find("s3")
    targets.kill(s3, signal.SIGTERM)
    assert sleeper.wait(10) == -signal.SIGTERM


def test_an_unpinned_cluster_daemon_is_no_target(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    me = identify_started(sleeper.pid)
    assert me is not None
    cluster = tmp_path / "run" / "cluster"
    cluster.mkdir(parents=True)
    (cluster / "cluster.json").write_text(
        json.dumps(
            {
                "master_url": "spark://127.0.0.1:1",
                "master_web": "http://127.0.0.1:1",
                "master_pid": me.pid,
                "master_start_time": me.start_time,
                "master_cmdline": None,
                "workers": [{"host": "127.0.0.2", "pid": me.pid, "start_time": me.start_time}],
            }
        )
    )
    targets = LocalTargets(tmp_path / "run")
    assert targets.find("master") == [] and targets.find("worker") == [] and targets.find("executor") == []
    assert sleeper.poll() is None


def test_register_pins_the_command_line_of_a_process_just_started(tmp_path: Path) -> None:
    """Right after Popen the exec may not have set the arguments up yet: register waits for them."""
    for _ in range(20):
        proc = subprocess.Popen(["sleep", "63"])
        try:
            target = LocalTargets(tmp_path / "run").register("proxy", proc.pid)
            assert target.identity.cmdline == ("sleep", "63")
        finally:
            proc.kill()
            proc.wait()
    recorded = json.loads((tmp_path / "run" / "targets.json").read_text())["processes"]
    assert len(recorded) == 20 and all(p["cmdline"] == ["sleep", "63"] for p in recorded)


def test_the_driver_process_records_itself_and_its_children_pinned(tmp_path: Path) -> None:
    code = "import subprocess, sys; subprocess.Popen(['sleep', '64']).wait()"
    driver = DriverProcess([sys.executable, "-c", code], dict(os.environ), tmp_path / "run", tmp_path / "logs" / "driver")
    try:
        assert driver.seen[driver.pid].cmdline == (sys.executable, "-c", code)
        registered = json.loads((tmp_path / "run" / "targets.json").read_text())["processes"]
        assert [(p["kind"], p["pid"], p["cmdline"]) for p in registered] == [("driver", driver.pid, [sys.executable, "-c", code])]
        deadline = time.monotonic() + 30
        while len(driver.seen) < 2 or ("sleep", "64") not in [i.cmdline for i in driver.seen.values()]:
            assert time.monotonic() < deadline, driver.seen
            driver._snapshot()  # the child forks, then execs `sleep`: re-pinned once it did
        child = next(i for i in driver.seen.values() if i.cmdline == ("sleep", "64"))
    finally:
        driver.stop()
    assert not child.alive() and driver.proc.returncode is not None
    assert all(p["cmdline"] for p in driver.processes())
