"""`statebed cluster`: real master and worker JVMs on loopback addresses, stopped by PID after an identity check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spark_runs import STATEBED, statebed

from statebed_cli.main import main
from statebed_job.cluster import StandaloneCluster
from statebed_job.procs import identify


def pids_of(doc: dict) -> list[int]:  # type: ignore[type-arg]
    return [doc["master"]["pid"], *(w["pid"] for w in doc["workers"])]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_up_status_down(tmp_path: Path) -> None:
    d = str(tmp_path / "cluster")
    up = statebed("cluster", "up", "--dir", d, "--workers", "2", "--json")
    assert up.returncode == 0, up.stderr[-2000:]
    doc = json.loads(up.stdout)
    assert doc["running"] and [w["host"] for w in doc["workers"]] == ["127.0.0.2", "127.0.0.3"]
    pids = pids_of(doc)
    try:
        assert all(alive(p) for p in pids)
        again = statebed("cluster", "up", "--dir", d)
        assert again.returncode == 2 and "already running" in again.stderr
        status = json.loads(statebed("cluster", "status", "--dir", d, "--json").stdout)
        assert status["running"] and pids_of(status) == pids and status["executors"] == []
    finally:
        down = statebed("cluster", "down", "--dir", d, "--json")
    assert down.returncode == 0 and sorted(json.loads(down.stdout)["stopped"]) == sorted(pids)
    assert not any(alive(p) for p in pids)
    assert json.loads(statebed("cluster", "status", "--dir", d, "--json").stdout)["running"] is False


@pytest.mark.slow
def test_foreground_cluster_stops_on_sigterm(tmp_path: Path) -> None:
    d = tmp_path / "cluster"
    proc = subprocess.Popen(
        [*STATEBED, "cluster", "up", "--dir", str(d), "--workers", "1", "--foreground"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    cluster = StandaloneCluster(d)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (cluster.running() and len(cluster.read_state().workers) == 1 and proc.stdout):  # type: ignore[union-attr]
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.3)
    time.sleep(3)  # let `up` return and enter its wait loop
    st = cluster.read_state()
    assert st is not None
    pids = [st.master_pid, *(w["pid"] for w in st.workers)]
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert not any(alive(p) for p in pids) and cluster.read_state() is None


def forge(d: Path, master: dict, workers: list[dict]) -> None:  # type: ignore[type-arg]
    d.mkdir(parents=True, exist_ok=True)
    doc = {"master_url": "spark://127.0.0.1:1", "master_web": "http://127.0.0.1:1", "workers": workers, **master}
    (d / "cluster.json").write_text(json.dumps(doc))


def test_down_refuses_a_reused_pid_from_a_stale_state_file(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    me = identify(sleeper.pid)
    assert me is not None
    d = tmp_path / "cluster"
    forge(
        d,
        {"master_pid": sleeper.pid, "master_start_time": me.start_time - 1, "master_cmdline": ["java", "Master"]},
        [
            {"host": "127.0.0.2", "pid": sleeper.pid},  # no start time recorded: cannot be verified
            {"host": "127.0.0.3", "pid": sleeper.pid, "start_time": me.start_time, "cmdline": ["java", "Worker"]},
        ],
    )
    down = statebed("cluster", "down", "--dir", str(d), "--json")
    assert down.returncode == 0, down.stderr
    doc = json.loads(down.stdout)
    assert doc["stopped"] == [] and len(doc["refused"]) == 3
    assert "another process" in doc["refused"][2] and "cannot be verified" in doc["refused"][0]
    assert "another command line" in doc["refused"][1] and f"pid {sleeper.pid}" in down.stderr
    assert sleeper.poll() is None and alive(sleeper.pid)  # still running: we kill it ourselves


def test_down_stops_a_process_whose_identity_matches(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    me = identify(sleeper.pid)
    assert me is not None
    d = tmp_path / "cluster"
    forge(d, {"master_pid": sleeper.pid, "master_start_time": me.start_time, "master_cmdline": list(me.cmdline or ())}, [])
    assert json.loads(statebed("cluster", "status", "--dir", str(d), "--json").stdout)["running"] is True
    down = statebed("cluster", "down", "--dir", str(d), "--json")
    assert json.loads(down.stdout) == {"stopped": [sleeper.pid], "refused": []}
    assert sleeper.wait(10) == -signal.SIGTERM and not (d / "cluster.json").exists()


@pytest.mark.parametrize("text", ["{not json", "[]", '{"master_url": "x"}', '{"master_url": "x", "master_pid": "12", "master_web": "y"}'])
def test_garbage_state_file_is_one_line_exit_2(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "cluster"
    d.mkdir()
    (d / "cluster.json").write_text(text)
    for action in ("down", "status", "up"):
        assert main(["cluster", action, "--dir", str(d)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(d / "cluster.json") in err and "not a usable cluster state file" in err
    assert (d / "cluster.json").read_text() == text  # nothing lost
