"""A Spark standalone cluster on loopback addresses: a master and one worker per address.

Spark only speculates across hosts, and `local-cluster[...]` puts every executor on one
host; a standalone worker per loopback address (127.0.0.2, 127.0.0.3, ...) gives each
executor a host of its own, so speculation works and executors are real JVM processes a
chaos controller can SIGKILL or SIGSTOP. State lives in `<dir>/cluster.json`: the master
URL and every PID. Processes are stopped by those PIDs only, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statebed_store.errors import StatebedError, UsageError
from statebed_store.log import get_logger, kv

__all__ = ["ClusterState", "StandaloneCluster", "process_children", "spark_home"]

log = get_logger("cluster")
READY_TIMEOUT_S = 90.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def process_children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc), e.g. a worker's executor JVMs."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(d.name))
    return sorted(out)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class ClusterState:
    master_url: str
    master_pid: int
    master_web: str
    workers: list[dict[str, Any]] = field(default_factory=list)  # host, pid, work_dir, log
    started: float = field(default_factory=time.time)


class StandaloneCluster:
    def __init__(self, directory: str | os.PathLike[str], workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        if not 1 <= workers <= 20:
            raise UsageError(f"--workers must be 1..20, got {workers}")
        self.dir = Path(directory).absolute()
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.state_path = self.dir / "cluster.json"

    # -- state ------------------------------------------------------------------------------
    def read_state(self) -> ClusterState | None:
        if not self.state_path.is_file():
            return None
        return ClusterState(**json.loads(self.state_path.read_text()))

    def _write_state(self, st: ClusterState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(st), indent=2))
        os.replace(tmp, self.state_path)

    def running(self) -> ClusterState | None:
        st = self.read_state()
        return st if st is not None and _alive(st.master_pid) else None

    # -- lifecycle ----------------------------------------------------------------------------
    def _spawn(self, args: list[str], host: str, log_path: Path) -> subprocess.Popen[bytes]:
        env = dict(os.environ, SPARK_LOCAL_IP=host, SPARK_HOME=str(spark_home()), SPARK_LOG_DIR=str(self.dir / "logs"))
        env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def up(self) -> ClusterState:
        """Start master and workers, wait until every worker registered; refuses a second start."""
        if self.running() is not None:
            raise UsageError(f"a cluster is already running from {self.state_path} (statebed cluster down --dir {self.dir})")
        self.dir.mkdir(parents=True, exist_ok=True)
        port, web = _free_port(), _free_port()
        master = self._spawn(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web)],
            "127.0.0.1",
            self.dir / "master.log",
        )
        st = ClusterState(master_url=f"spark://127.0.0.1:{port}", master_pid=master.pid, master_web=f"http://127.0.0.1:{web}")
        self._write_state(st)
        try:
            self._wait(lambda: self._master_json(st) is not None, "the master to start", master)
            for i in range(self.n_workers):
                host = f"127.0.0.{i + 2}"
                work = self.dir / f"worker-{i + 1}"
                proc = self._spawn(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        st.master_url,
                        "--host",
                        host,
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--work-dir",
                        str(work),
                        "--webui-port",
                        str(_free_port(host)),
                    ],
                    host,
                    self.dir / f"worker-{i + 1}.log",
                )
                st.workers.append({"host": host, "pid": proc.pid, "work_dir": str(work), "log": str(self.dir / f"worker-{i + 1}.log")})
                self._write_state(st)
            self._wait(lambda: self._alive_workers(st) >= self.n_workers, f"{self.n_workers} workers to register", master)
        except BaseException:
            self.down()
            raise
        log.info("cluster up", extra=kv(master=st.master_url, workers=len(st.workers)))
        return st

    def _master_json(self, st: ClusterState) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{st.master_web}/json/", timeout=2) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return None

    def _alive_workers(self, st: ClusterState) -> int:
        doc = self._master_json(st) or {}
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, ready: Any, what: str, master: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            if master.poll() is not None:
                raise StatebedError(f"Spark master exited ({master.returncode}) while waiting for {what}; see {self.dir / 'master.log'}")
            time.sleep(0.3)
        raise StatebedError(f"timed out after {READY_TIMEOUT_S:.0f}s waiting for {what}; see the logs in {self.dir}")

    def executors(self) -> list[dict[str, Any]]:
        """Executor JVMs (children of the workers): what chaos controllers kill or pause."""
        st = self.read_state()
        if st is None:
            return []
        out = []
        for w in st.workers:
            for pid in process_children(int(w["pid"])):
                if "CoarseGrainedExecutorBackend" in _cmdline(pid):
                    out.append({"host": w["host"], "pid": pid, "worker_pid": w["pid"]})
        return out

    def status(self) -> dict[str, Any]:
        st = self.read_state()
        if st is None:
            return {"running": False, "dir": str(self.dir)}
        return {
            "running": _alive(st.master_pid),
            "dir": str(self.dir),
            "master": {"url": st.master_url, "pid": st.master_pid, "alive": _alive(st.master_pid), "web": st.master_web},
            "workers": [{**w, "alive": _alive(int(w["pid"]))} for w in st.workers],
            "executors": self.executors(),
        }

    def down(self, timeout_s: float = 15.0) -> list[int]:
        """Stop executors, workers and master by PID (TERM, then KILL); returns the PIDs signalled."""
        st = self.read_state()
        if st is None:
            return []
        pids = [e["pid"] for e in self.executors()] + [int(w["pid"]) for w in st.workers] + [st.master_pid]
        for pid in pids:
            _signal(pid, signal.SIGCONT)  # a paused process cannot exit
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            if _alive(pid):
                _signal(pid, signal.SIGKILL)
        for pid in pids:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap our own children
            except ChildProcessError:
                pass
        self.state_path.unlink(missing_ok=True)
        log.info("cluster down", extra=kv(pids=pids))
        return pids


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
