"""The cluster's processes: started inside its namespace, recorded by identity, stopped by it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from statebed_base.errors import StatebedError
from statebed_base.processes import Child, ProcessIdentity, identify, spawn, stop_all

from . import netns
from .layout import NETNS, ClusterDir

__all__ = ["KubeStartError", "run_tool", "start", "stop_recorded", "tail", "until"]

EXEC_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 180.0


class KubeStartError(StatebedError):
    """A cluster process exited or never showed its own command line."""


def start(cd: ClusterDir, name: str, argv: list[str], env: dict[str, str] | None = None) -> Child:
    """`argv` in the cluster's namespace, its output in logs/<name>.log, its identity recorded once
    `nsenter --net` has exec'd into it (the command line a later `down` checks is the program's)."""
    child = spawn(netns.exec_argv(NETNS, argv), stdout=cd.log(name), env=env, pin=False)
    deadline = time.monotonic() + EXEC_TIMEOUT_S
    while True:
        ident = identify(child.pid)
        if ident is not None and ident.cmdline == tuple(argv):
            break
        if ident is None or child.proc.poll() is not None or time.monotonic() > deadline:
            raise KubeStartError(f"{name} did not start (exit {child.proc.poll()}): see {cd.log(name)}")
        time.sleep(0.01)  # the exec into the program is finishing: polled, not a fixed sleep
    child.ident = ident
    cd.record(name, ident)
    return child


def stop_recorded(cd: ClusterDir, grace_s: float = 20.0) -> list[int]:
    """Stop every recorded process still alive and still the one recorded (TERM, then KILL)."""
    idents: list[ProcessIdentity] = list(cd.processes().values())
    return stop_all(idents, grace_s=grace_s)


def until(
    cd: ClusterDir, ready: Callable[[], bool], name: str, error: type[StatebedError], alive: Callable[[], bool] | None = None
) -> None:
    """Poll `ready` every 0.5 s, bounded by READY_TIMEOUT_S (a daemon coming up: there is no event
    to wait on); `alive` turning false ends it early. The error names `name` and its log's tail."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise error(f"{name} exited:\n{tail(cd.log(name))}")
        if ready():
            return
        time.sleep(0.5)
    raise error(f"{name} not ready after {READY_TIMEOUT_S:.0f} s:\n{tail(cd.log(name))}")


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log, for an error that says why."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_tool(argv: list[str], error: type[StatebedError], what: str, timeout: float) -> str:
    """A setup tool (kubeadm, podman, ctr) run to its end; its stdout, or `error` naming `what`
    and the tail of its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise error(f"{what}: {done.stderr.strip()[-1500:] or f'exit {done.returncode}'}")
    return done.stdout
