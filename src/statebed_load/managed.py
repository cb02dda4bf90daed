"""The load run's own processes (ingest service, Locust): started in their own session, pinned
by identity (`statebed_base.processes`: start time and the command line once the exec set it up),
stopped by PID (TERM, grace, KILL) after the identity check, never by name.

The job's driver is a `statebed_chaos.driver_process.DriverProcess`: it also stops what the
driver started (Spark's JVM, Python workers, a standalone cluster).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from statebed_base.errors import RunFailedError
from statebed_base.processes import spawn

__all__ = ["Managed", "start_ingest"]

GRACE_S = 15.0
KILL_WAIT_S = 120.0  # a KILLed process stuck in an fsync on a busy disk dies when the I/O returns
READY_TIMEOUT_S = 60.0


class Managed:
    """One subprocess with its stdout/stderr in `log_prefix`.out/.err."""

    def __init__(self, name: str, cmd: list[str], log_prefix: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.stderr = log_prefix.with_suffix(".err")
        self.child = spawn(cmd, stdout=log_prefix.with_suffix(".out"), stderr=self.stderr, env={**os.environ, **(env or {})})
        self.proc = self.child.proc
        self.ident = self.child.ident  # None: it exited at once, or never showed a command line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.child.signal(sig)

    def stop(self) -> int | None:
        """TERM, up to GRACE_S for a clean exit (in-flight requests finish), then KILL; the exit code."""
        return self.child.stop(GRACE_S, KILL_WAIT_S)

    def tail(self) -> str:
        """The last line of its stderr (for an error message)."""
        lines = [ln for ln in self.stderr.read_text(errors="replace").splitlines() if ln.strip()] if self.stderr.exists() else []
        return lines[-1] if lines else f"no output (see {self.stderr})"


def start_ingest(landing: str, workdir: Path, *, port: int = 0, name: str = "ingest", extra: list[str] = []) -> tuple[Managed, str]:  # noqa: B006
    """Start the ingest service on loopback; (process, base URL) once it listens. `extra`: more service flags."""
    ready = workdir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "statebed_load.service", "--landing", landing, "--port", str(port), "--ready-file", str(ready), *extra]
    proc = Managed(name, cmd, workdir / name)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise RunFailedError(f"the ingest service did not start: {proc.tail()}")
        time.sleep(0.05)  # waiting for the ready file the service writes once it listens
    return proc, str(json.loads(ready.read_text())["url"])
