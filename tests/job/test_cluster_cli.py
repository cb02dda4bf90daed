"""`statebed cluster`: real master and worker JVMs on loopback addresses, stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spark_runs import STATEBED, statebed

from statebed_job.cluster import StandaloneCluster

pytestmark = pytest.mark.slow


def pids_of(doc: dict) -> list[int]:  # type: ignore[type-arg]
    return [doc["master"]["pid"], *(w["pid"] for w in doc["workers"])]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


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
