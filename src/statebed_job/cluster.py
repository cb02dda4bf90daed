"""A Spark standalone cluster on loopback addresses: a master and one worker per address.

Spark only speculates across hosts, and `local-cluster[...]` puts every executor on one
host; a standalone worker per loopback address (127.0.0.2, 127.0.0.3, ...) gives each
executor a host of its own, so speculation works and executors are real JVM processes a
chaos controller can SIGKILL or SIGSTOP. State lives in `<dir>/cluster.json`: the master
URL and every PID with its start time and command line. Processes are stopped by those
PIDs only, never by name, and only while their identity still matches (`statebed_base.processes`). A daemon
whose start time or command line the file does not record (`null`, missing: `up` was
killed before it could pin the JVM) is not provably ours: `down` refuses it, naming the field.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, RunFailedError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import atomic_write
from statebed_base.log import get_logger, kv
from statebed_base.processes import Child, ProcessIdentity, children, identify, spawn, stop_all, stop_children

from .jvm_startup import java_options

__all__ = ["ClusterState", "StandaloneCluster", "Stopped", "spark_home"]

log = get_logger("cluster")
READY_TIMEOUT_S = 90.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
NO_REST = "-Dspark.master.rest.enabled=false"  # the master listens on its --port and --webui-port only


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class ClusterState:
    """`cluster.json`: the master URL and every daemon's PID with its identity (start time and
    command line), so a stale file whose PIDs were reused can never get an innocent process killed."""

    master_url: str
    master_pid: int
    master_web: str
    workers: list[dict[str, Any]] = field(default_factory=list)  # host, pid, start_time, cmdline, work_dir, log
    started: float = field(default_factory=time.time)
    master_start_time: int | None = None
    master_cmdline: list[str] | None = None

    def master(self) -> ProcessIdentity | None:
        return _identity(self.master_pid, self.master_start_time, self.master_cmdline)

    def worker(self, w: dict[str, Any]) -> ProcessIdentity | None:
        return _identity(int(w["pid"]), w.get("start_time"), w.get("cmdline"))

    def recorded(self) -> list[tuple[str, int, Any, Any]]:
        """(field prefix, pid, recorded start time, recorded command line) of every daemon, master last."""
        out: list[tuple[str, int, Any, Any]] = [
            (f"workers[{i}].", int(w["pid"]), w.get("start_time"), w.get("cmdline")) for i, w in enumerate(self.workers)
        ]
        return [*out, ("master_", self.master_pid, self.master_start_time, self.master_cmdline)]


def _identity(pid: int, start_time: int | None, cmdline: list[str] | None) -> ProcessIdentity | None:
    """None unless the state file recorded both a start time and a command line: anything less is not ours."""
    return None if start_time is None or not cmdline else ProcessIdentity(pid, start_time, tuple(cmdline))


def _refusal(prefix: str, pid: int, start_time: Any, cmdline: Any) -> str | None:
    """Why a recorded daemon whose PID some live process holds is not signalled, naming the field (None: nobody holds it)."""
    now = identify(pid)
    if now is None:
        return None  # exited: nothing to signal, nothing to refuse
    if start_time is None:
        return f"{prefix}start_time is not recorded (null or missing): pid {pid} cannot be shown to be the process `up` started"
    if not cmdline:
        return f"{prefix}cmdline is not recorded (null, missing or empty): pid {pid} cannot be shown to be the process `up` started"
    if now.start_time != start_time:
        return f"{prefix}start_time {start_time} is not pid {pid}'s ({now.start_time}): the PID now belongs to another process"
    if now.cmdline == tuple(cmdline):
        return None  # it was ours and was exiting a moment ago
    return f"{prefix}cmdline is not what pid {pid} runs ({' '.join(now.cmdline or ())[:120]!r}): it runs another command line"


def _pinned(proc: Child, start_time: int, main_class: str) -> list[str]:
    """The command line of a daemon once it runs its JVM (spark-class execs java; the start time stays)."""
    now = identify(proc.pid)
    if now is None or now.start_time != start_time or main_class not in (now.cmdline or ()):
        raise RunFailedError(f"cannot pin Spark's {main_class} (pid {proc.pid}) by its command line; it is stopped")
    return list(now.cmdline or ())


def _parse_state(path: Path) -> ClusterState:
    try:
        doc = loads_strict(path.read_bytes(), file=str(path), what="cluster state")
        st = ClusterState(**doc)
        if not isinstance(st.master_pid, int) or not isinstance(st.master_url, str) or not isinstance(st.workers, list):
            raise TypeError("master_url, master_pid and workers have the wrong types")
        for w in st.workers:
            if not isinstance(w, dict) or not isinstance(w.get("pid"), int) or not isinstance(w.get("host"), str):
                raise TypeError(f"a worker entry is not {{host, pid, ...}}: {w!r}")
        for prefix, _, start_time, cmdline in st.recorded():
            if start_time is not None and (not isinstance(start_time, int) or isinstance(start_time, bool)):
                raise TypeError(f"{prefix}start_time is not an integer: {start_time!r}")
            if cmdline is not None and not (isinstance(cmdline, list) and all(isinstance(a, str) for a in cmdline)):
                raise TypeError(f"{prefix}cmdline is not a list of strings: {cmdline!r}")
    except (OSError, CorruptFileError, ValueError, TypeError) as e:
        why = e.detail if isinstance(e, CorruptFileError) else e
        raise UsageError(f"{path}: not a usable cluster state file ({why}); remove it if no cluster runs from {path.parent}") from None
    return st


@dataclass
class Stopped:
    """What `down` did: the PIDs it signalled, and the recorded processes it refused to signal (and why)."""

    pids: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


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
        """The state file, or None; garbage is a UsageError naming the file (exit 2), never a traceback."""
        if not self.state_path.is_file():
            return None
        return _parse_state(self.state_path)

    def _write_state(self, st: ClusterState) -> None:
        atomic_write(self.state_path, json.dumps(asdict(st), indent=2).encode())

    def running(self) -> ClusterState | None:
        st = self.read_state()
        master = None if st is None else st.master()
        return st if master is not None and master.alive() else None

    # -- lifecycle ----------------------------------------------------------------------------
    def _spawn(self, args: list[str], host: str, log_path: Path) -> Child:
        """A daemon, unpinned: spark-class execs its JVM, whose command line `_pinned` records."""
        env = dict(os.environ, SPARK_LOCAL_IP=host, SPARK_HOME=str(spark_home()), SPARK_LOG_DIR=str(self.dir / "logs"))
        if args[0] == MASTER_CLASS:  # Spark >= 4.1 also opens its REST submission server, on 6066 (a port nobody chose): unused here
            env["SPARK_MASTER_OPTS"] = f"{env.get('SPARK_MASTER_OPTS', '')} {NO_REST}".strip()
        env["SPARK_DAEMON_JAVA_OPTS"] = f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} {java_options()}".strip()
        env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
        return spawn([str(spark_home() / "bin" / "spark-class"), *args], stdout=log_path, env=env, append=True, pin=False)

    def up(self) -> ClusterState:
        """Start master and workers, wait until every worker registered; refuses a second start."""
        if self.running() is not None:
            raise UsageError(f"a cluster is already running from {self.state_path} (statebed cluster down --dir {self.dir})")
        self.dir.mkdir(parents=True, exist_ok=True)
        port, web = _free_port(), _free_port()
        master = self._spawn(
            [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web)],
            "127.0.0.1",
            self.dir / "master.log",
        )
        started, master_start = [master], _start_time(master)
        st = ClusterState(
            master_url=f"spark://127.0.0.1:{port}",
            master_pid=master.pid,
            master_web=f"http://127.0.0.1:{web}",
            master_start_time=master_start,
        )
        self._write_state(st)  # before the JVM runs: its command line is not known yet (null, refused by `down`)
        try:
            self._wait(lambda: self._master_json(st) is not None, "the master to start", master)
            st.master_cmdline = _pinned(master, master_start, MASTER_CLASS)
            self._write_state(st)
            for i in range(self.n_workers):
                host = f"127.0.0.{i + 2}"
                work = self.dir / f"worker-{i + 1}"
                proc = self._spawn(
                    [
                        WORKER_CLASS,
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
                started.append(proc)
                st.workers.append(
                    {
                        "host": host,
                        "pid": proc.pid,
                        "start_time": _start_time(proc),
                        "cmdline": None,
                        "work_dir": str(work),
                        "log": str(self.dir / f"worker-{i + 1}.log"),
                    }
                )
                self._write_state(st)
            self._wait(lambda: self._alive_workers(st) >= self.n_workers, f"{self.n_workers} workers to register", master)
            for w, proc in zip(st.workers, started[1:], strict=True):
                w["cmdline"] = _pinned(proc, w["start_time"], WORKER_CLASS)
            self._write_state(st)
        except BaseException:
            _stop_started(started)
            self.state_path.unlink(missing_ok=True)
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

    def _wait(self, ready: Any, what: str, master: Child) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            if not master.alive():
                raise RunFailedError(f"Spark master exited ({master.returncode}) while waiting for {what}; see {self.dir / 'master.log'}")
            time.sleep(0.3)
        raise RunFailedError(f"timed out after {READY_TIMEOUT_S:.0f}s waiting for {what}; see the logs in {self.dir}")

    def executors(self) -> list[dict[str, Any]]:
        """Executor JVMs (children of verified workers): what chaos targets kill or pause."""
        st = self.read_state()
        if st is None:
            return []
        out = []
        for w in st.workers:
            worker = st.worker(w)
            if worker is None or not worker.alive():
                continue
            for pid in children(worker.pid):
                ident = identify(pid)
                if ident is not None and "org.apache.spark.executor.CoarseGrainedExecutorBackend" in (ident.cmdline or ()):
                    out.append({"host": w["host"], "pid": pid, "worker_pid": worker.pid, **ident.to_json()})
        return out

    def status(self) -> dict[str, Any]:
        st = self.read_state()
        if st is None:
            return {"running": False, "dir": str(self.dir)}
        master = st.master()
        alive = master is not None and master.alive()
        return {
            "running": alive,
            "dir": str(self.dir),
            "master": {"url": st.master_url, "pid": st.master_pid, "alive": alive, "web": st.master_web},
            "workers": [{**w, "alive": (ident := st.worker(w)) is not None and ident.alive()} for w in st.workers],
            "executors": self.executors(),
        }

    def down(self, timeout_s: float = 15.0) -> Stopped:
        """Stop executors, workers and master (TERM, then KILL), each only after its identity checks out.

        A recorded PID held by a process the file does not pin (start time or command line not
        recorded, or not matching: a stale or forged state file) is refused, naming the field, and
        not signalled; the state file is then kept."""
        st = self.read_state()
        if st is None:
            return Stopped()
        done = Stopped()
        targets = [ProcessIdentity.from_json(e) for e in self.executors()]  # found below verified workers
        for prefix, pid, start_time, cmdline in st.recorded():
            ident = _identity(pid, start_time, cmdline)
            if ident is not None and ident.alive():
                targets.append(ident)
            elif (why := _refusal(prefix, pid, start_time, cmdline)) is not None:
                done.refused.append(f"{self.state_path}: {why}; not signalled")
        stop_all(targets, grace_s=timeout_s)
        for ident in targets:
            try:
                os.waitpid(ident.pid, os.WNOHANG)  # reap our own children
            except ChildProcessError:
                pass
        if not done.refused:
            self.state_path.unlink(missing_ok=True)
        done.pids = [t.pid for t in targets]
        log.info("cluster down", extra=kv(pids=done.pids, refused=len(done.refused)))
        return done


def _stop_started(procs: list[Child], timeout_s: float = 15.0) -> None:
    """Stop daemons this `up` started and has not reaped: their PIDs cannot be reused until the
    wait, so the Popen handle names them even before their command line is pinned."""
    stop_children(procs, timeout_s, timeout_s)


def _start_time(proc: Child) -> int:
    ident = identify(proc.pid)
    if ident is None:
        raise RunFailedError(f"a Spark daemon exited at once ({proc.proc.args!r}); see the logs in its directory")
    return ident.start_time
