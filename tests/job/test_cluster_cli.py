"""`statebed cluster`: real master and worker JVMs on loopback addresses, stopped by PID after an identity check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from process_helpers import listening_ports
from spark_runs import STATEBED, statebed

from statebed_base.processes import identify_started
from statebed_cli.main import main
from statebed_job.cluster import MASTER_CLASS, WORKER_CLASS, StandaloneCluster


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
        given = {int(doc["master"][k].rsplit(":", 1)[1]) for k in ("url", "web")}
        assert listening_ports(doc["master"]["pid"]) == given  # the ports it was given: no REST server on 6066
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
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once `up` returned, inside the loop's try: the event to wait on
    assert line.startswith("cluster up: "), (line, proc.communicate()[1][-2000:])
    cluster = StandaloneCluster(d)
    st = cluster.read_state()
    assert st is not None and len(st.workers) == 1
    assert MASTER_CLASS in (st.master_cmdline or []) and all(WORKER_CLASS in (w["cmdline"] or []) for w in st.workers)  # pinned
    pids = [st.master_pid, *(w["pid"] for w in st.workers)]
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert not any(alive(p) for p in pids) and cluster.read_state() is None


def forge(d: Path, master: dict, workers: list[dict]) -> None:  # type: ignore[type-arg]
    d.mkdir(parents=True, exist_ok=True)
    doc = {"master_url": "spark://127.0.0.1:1", "master_web": "http://127.0.0.1:1", "workers": workers, **master}
    (d / "cluster.json").write_text(json.dumps(doc))


def test_down_refuses_a_reused_pid_from_a_stale_state_file(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    me = identify_started(sleeper.pid)
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
    kept = (d / "cluster.json").read_text()
    down = statebed("cluster", "down", "--dir", str(d), "--json")
    assert down.returncode == 2, down.stderr
    doc = json.loads(down.stdout)
    assert doc["stopped"] == [] and len(doc["refused"]) == 3
    assert "workers[0].start_time is not recorded" in doc["refused"][0]
    assert "workers[1].cmdline is not what" in doc["refused"][1] and "another command line" in doc["refused"][1]
    assert "master_start_time" in doc["refused"][2] and "another process" in doc["refused"][2]
    assert down.stderr.count("\n") == 1 and "3 recorded processes not signalled" in down.stderr and f"pid {sleeper.pid}" in down.stderr
    assert sleeper.poll() is None and alive(sleeper.pid)  # still running: we kill it ourselves
    assert (d / "cluster.json").read_text() == kept  # nothing lost


UNPINNED = {
    "null": {"master_cmdline": None},
    "missing": {},
    "empty": {"master_cmdline": []},
    "another": {"master_cmdline": ["java", "org.apache.spark.deploy.master.Master"]},
}


@pytest.mark.parametrize("case", sorted(UNPINNED))
def test_down_never_signals_a_live_process_the_file_does_not_pin(tmp_path: Path, sleeper: subprocess.Popen[bytes], case: str) -> None:
    """The hostile file: any PID, its real start time, and no (or another) command line -> refused, exit 2, one line."""
    me = identify_started(sleeper.pid)
    assert me is not None
    d = tmp_path / "cluster"
    forge(d, {"master_pid": sleeper.pid, "master_start_time": me.start_time, **UNPINNED[case]}, [])
    kept = (d / "cluster.json").read_text()
    down = statebed("cluster", "down", "--dir", str(d))
    assert down.returncode == 2 and down.stdout == "", down
    assert down.stderr.count("\n") == 1 and "master_cmdline" in down.stderr and str(d / "cluster.json") in down.stderr
    assert f"pid {sleeper.pid}" in down.stderr and "not signalled" in down.stderr
    assert sleeper.poll() is None and alive(sleeper.pid)
    assert (d / "cluster.json").read_text() == kept
    assert json.loads(statebed("cluster", "status", "--dir", str(d), "--json").stdout)["running"] is False  # not ours


def test_down_refuses_an_unpinned_worker_and_stops_the_pinned_master(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """What `up` leaves when it is killed before it pinned a worker's JVM: the master goes, the worker is named."""
    master = subprocess.Popen(["sleep", "62"])
    try:
        m, w = identify_started(master.pid), identify_started(sleeper.pid)
        assert m is not None and w is not None
        d = tmp_path / "cluster"
        forge(
            d,
            {"master_pid": m.pid, "master_start_time": m.start_time, "master_cmdline": list(m.cmdline or ())},
            [{"host": "127.0.0.2", "pid": w.pid, "start_time": w.start_time, "cmdline": None}],
        )
        down = statebed("cluster", "down", "--dir", str(d), "--json")
        assert down.returncode == 2 and json.loads(down.stdout)["stopped"] == [m.pid]
        assert down.stderr.count("\n") == 1 and "workers[0].cmdline is not recorded" in down.stderr
        assert master.wait(10) == -signal.SIGTERM and sleeper.poll() is None and (d / "cluster.json").exists()
    finally:
        master.kill()
        master.wait()


def test_down_stops_a_process_whose_identity_matches(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    me = identify_started(sleeper.pid)
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
