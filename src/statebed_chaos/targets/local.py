"""Targets on this machine, found from what the run recorded and the process tree below it,
never by scanning /proc for a name:

- driver: a process registered as "driver" in `<run>/targets.json`, else this process;
- driver-jvm: the driver's child running SparkSubmit (in local mode the tasks run there);
- master, worker: `cluster.json` of the standalone cluster (default `<run>/cluster`), identity-checked;
- executor: CoarseGrainedExecutorBackend children of those workers;
- python-worker: the `pyspark.daemon` child of an executor or driver JVM, and the workers it forks;
- s3, proxy (any kind): registered by whoever started them with `register(kind, pid)`.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import atomic_write
from statebed_base.processes import ProcessIdentity, children, identify, identify_started, send_signal
from statebed_job.cluster import StandaloneCluster
from statebed_model.eventlog import apps_of
from statebed_model.rundir import RunDir

from .base import KINDS, Target, Targets

__all__ = ["REGISTRY", "LocalTargets"]

REGISTRY = "targets.json"
_EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
_SUBMIT = "org.apache.spark.deploy.SparkSubmit"
_PYSPARK = ("pyspark.daemon", "pyspark.worker")


def _flag(cmdline: tuple[str, ...] | None, flag: str) -> str:
    args = list(cmdline or ())
    return args[args.index(flag) + 1] if flag in args[:-1] else ""


class LocalTargets(Targets):
    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        cluster_dir: str | os.PathLike[str] | None = None,
        registry: str | os.PathLike[str] | None = None,
        shared_cluster: bool = False,
    ) -> None:
        """`shared_cluster`: `cluster_dir` serves other runs too (one after another), so only the
        executors of this run's applications (its event log's) are targets."""
        root = None if run_dir is None else Path(run_dir).absolute()
        self.events = None if root is None or not shared_cluster else RunDir(root).events
        self.cluster_dir = Path(cluster_dir) if cluster_dir is not None else (None if root is None else root / "cluster")
        self.registry = Path(registry) if registry is not None else (None if root is None else root / REGISTRY)

    # -- registration -------------------------------------------------------------------------
    def register(self, kind: str, pid: int, *, name: str | None = None, host: str = "127.0.0.1") -> Target:
        """Record a process someone started (S3 server, proxy, a driver subprocess) with its identity."""
        if kind not in KINDS:
            raise UsageError(f"unknown target kind {kind!r}; known: {', '.join(KINDS)}")
        if self.registry is None:
            raise UsageError("registering a target needs a run directory or a registry file")
        ident = identify_started(pid)  # just started: waits until the exec has set its arguments up
        if ident is None:
            raise UsageError(f"cannot register {kind} pid {pid}: no such process, or its command line cannot be read")
        target = Target(kind, name or f"{kind}-{pid}", host, ident)
        self.registry.parent.mkdir(parents=True, exist_ok=True)
        with open(self.registry.with_name(self.registry.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            kept = [t.to_json() for t in self._registered() if (t.kind, t.pid) != (kind, pid)]
            atomic_write(self.registry, json.dumps({"processes": [*kept, target.to_json()]}, indent=2).encode())
        return target

    def _registered(self, kind: str | None = None) -> list[Target]:
        if self.registry is None or not self.registry.is_file():
            return []
        try:
            doc = loads_strict(self.registry.read_bytes(), file=str(self.registry), what="targets file")
            out = [
                Target(e["kind"], e["name"], e["host"], ProcessIdentity.from_json(e), {k: str(v) for k, v in e.get("attrs", {}).items()})
                for e in doc["processes"]
            ]
        except (OSError, CorruptFileError, ValueError, KeyError, TypeError, AttributeError) as e:
            why = e.detail if isinstance(e, CorruptFileError) else e
            raise UsageError(f"{self.registry}: not a usable targets file ({why})") from None
        return [t for t in out if kind is None or t.kind == kind]

    # -- finding ------------------------------------------------------------------------------
    def find(self, kind: str, **filters: Any) -> list[Target]:
        finders: dict[str, Callable[[], list[Target]]] = {
            "driver": self._drivers,
            "driver-jvm": self._driver_jvms,
            "master": self._masters,
            "worker": self._workers,
            "executor": self._executors,
            "python-worker": self._python_workers,
        }
        if kind not in KINDS:
            raise UsageError(f"unknown target kind {kind!r}; known: {', '.join(KINDS)}")
        found = finders[kind]() if kind in finders else self._registered(kind)
        return [t for t in found if t.identity.pinned and t.identity.alive() and t.matches(filters)]  # unpinned: not ours

    def _drivers(self) -> list[Target]:
        registered = self._registered("driver")
        me = identify(os.getpid())
        assert me is not None
        return registered or [Target("driver", "driver", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), me)]

    def _driver_jvms(self) -> list[Target]:
        return [
            Target("driver-jvm", f"driver-jvm-{c.pid}", d.host, c, {"driver_pid": str(d.pid)})
            for d in self._drivers()
            for c in self._children(d.pid)
            if _SUBMIT in (c.cmdline or ())
        ]

    def _cluster(self) -> StandaloneCluster | None:
        if self.cluster_dir is None or not (self.cluster_dir / "cluster.json").is_file():
            return None
        return StandaloneCluster(self.cluster_dir)

    def _masters(self) -> list[Target]:
        cluster = self._cluster()
        st = None if cluster is None else cluster.read_state()
        master = None if st is None else st.master()
        return [] if master is None else [Target("master", "master", "127.0.0.1", master)]

    def _workers(self) -> list[Target]:
        cluster = self._cluster()
        st = None if cluster is None else cluster.read_state()
        if st is None:
            return []
        return [Target("worker", f"worker@{w['host']}", w["host"], ident) for w in st.workers if (ident := st.worker(w)) is not None]

    def _executors(self) -> list[Target]:
        cluster = self._cluster()
        apps = None if self.events is None else apps_of(self.events)
        out = []
        for e in [] if cluster is None else cluster.executors():
            ident = ProcessIdentity.from_json(e)
            eid, app = _flag(ident.cmdline, "--executor-id"), _flag(ident.cmdline, "--app-id")
            if apps is not None and app not in apps:
                continue  # another run's application on the shared cluster
            attrs = {"executor_id": eid, "app_id": app, "worker_pid": str(e["worker_pid"])}
            out.append(Target("executor", f"executor-{eid}@{e['host']}", e["host"], ident, attrs))
        return out

    def _python_workers(self) -> list[Target]:
        out = []
        for jvm in self._executors() + self._driver_jvms():
            for daemon in self._children(jvm.pid):
                if not any(m in (daemon.cmdline or ()) for m in _PYSPARK):
                    continue
                base = {"jvm_pid": str(jvm.pid), "executor_id": jvm.attrs.get("executor_id", "driver")}
                out.append(Target("python-worker", f"python-daemon-{daemon.pid}@{jvm.host}", jvm.host, daemon, {**base, "role": "daemon"}))
                out += [
                    Target("python-worker", f"python-worker-{w.pid}@{jvm.host}", jvm.host, w, {**base, "role": "worker"})
                    for w in self._children(daemon.pid)
                ]
        return out

    @staticmethod
    def _children(pid: int) -> list[ProcessIdentity]:
        return [ident for c in children(pid) if (ident := identify(c)) is not None]

    # -- acting -------------------------------------------------------------------------------
    def kill(self, target: Target, sig: int = signal.SIGKILL) -> None:
        send_signal(target.identity, sig)

    def alive(self, target: Target) -> bool:
        return target.identity.alive()
