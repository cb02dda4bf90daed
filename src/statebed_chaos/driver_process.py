"""The job's driver as a subprocess of an experiment: start it, watch it, and leave nothing behind.

Faults kill drivers, executors and workers, so the runner cannot rely on the driver to stop
what it started. While the driver lives, every process below it (its JVM, local Python
workers, the standalone master and workers it started, their executors) is recorded with its
identity (start time and command line; `procs.track` re-pins one that exec'd while in the
tree); `stop` signals exactly those that are still the recorded process (TERM, a grace period,
then KILL), and brings the run's cluster down by its `cluster.json`. Nothing is found by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from statebed_base.processes import ProcessIdentity, spawn, stop_all, track
from statebed_job.cluster import StandaloneCluster

from .targets.local import LocalTargets

__all__ = ["DriverExit", "DriverProcess", "python_env"]

POLL_S = 0.5
GRACE_S = 15.0


@dataclass
class DriverExit:
    pid: int
    code: int | None  # None: still running when the deadline passed (then stopped by us)
    start: float
    end: float
    timed_out: bool
    stdout: str
    stderr: str


class DriverProcess:
    """One `statebed run` subprocess, registered as target "driver" of its run directory."""

    def __init__(self, cmd: list[str], env: dict[str, str], run_root: Path, log_prefix: Path) -> None:
        self.run_root = run_root
        self.stdout, self.stderr = log_prefix.with_suffix(".out"), log_prefix.with_suffix(".err")
        self.child = spawn(cmd, stdout=self.stdout, stderr=self.stderr, env=env)
        self.proc, self.start = self.child.proc, self.child.start
        self.seen: dict[int, ProcessIdentity] = {}
        if self.child.ident is not None:
            self.seen[self.child.ident.pid] = self.child.ident
        LocalTargets(run_root).register("driver", self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _snapshot(self) -> None:
        track([self.proc.pid], self.seen)

    def wait(self, deadline: float) -> DriverExit:
        """Until the driver exits or `deadline` (monotonic): then everything is stopped (timed out)."""
        timed_out = False
        while True:
            self._snapshot()
            try:
                self.proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    timed_out = True
                    self.stop()
                    break
        return DriverExit(
            self.pid, None if timed_out else self.proc.returncode, self.start, time.time(), timed_out, str(self.stdout), str(self.stderr)
        )

    def stop(self) -> None:
        """Stop the driver and everything recorded below it (TERM, grace, KILL), then the cluster."""
        if self.proc.poll() is None:
            self._snapshot()
            self.child.ident = self.seen.get(self.pid)  # as `track` last pinned it
            self.child.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=GRACE_S)  # the driver stops its own cluster and session on SIGTERM
        stop_all(list(self.seen.values()), grace_s=0)  # the driver had its grace period; the rest goes now
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GRACE_S)
        StandaloneCluster(self.run_root / "cluster").down()

    def processes(self) -> list[dict[str, object]]:
        """Every process recorded below the driver (with the driver), for the leak check."""
        return [i.to_json() for i in self.seen.values()]


def python_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment plus `extra` (the failpoint control file, S3 settings)."""
    return {**os.environ, **extra}
