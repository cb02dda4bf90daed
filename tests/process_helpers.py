"""Leak checks and interrupts for commands that start processes (chaos runs, matrices, load runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from statebed_base.processes import ProcessIdentity


def assert_no_process_left(out: Path, at_least: int = 1) -> None:
    """Every process the command recorded in `out/processes.json` (at least `at_least` of them)
    has exited, and so has every target a run under `out` registered."""
    recorded = [ProcessIdentity.from_json(p) for p in json.loads((out / "processes.json").read_text())]
    assert len(recorded) >= at_least, f"the command recorded {len(recorded)} processes, expected >= {at_least}"
    assert [p.describe() for p in recorded if p.alive()] == []
    for run in ("faulted", "baseline"):
        reg = out / run / "targets.json"
        if reg.exists():
            for p in json.loads(reg.read_text())["processes"]:
                assert not ProcessIdentity.from_json(p).alive(), p


def processes_naming(path: Path) -> list[str]:
    """The command lines of live processes that name `path` (e.g. a cluster's work directories):
    read from /proc to assert that none is left, never to signal one."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if str(path) in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def interrupt_when(proc: subprocess.Popen[str], ready: Callable[[], bool], sig: signal.Signals) -> str:
    """Send `sig` once `ready()` (an event of the run, e.g. batch 1 started: JVMs and workers run),
    then wait for the exit; its stderr. SIGKILL only if it never exits."""
    try:
        deadline = time.monotonic() + 600
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=180)
        return err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on: its socket inodes matched in /proc/<pid>/net/tcp and tcp6."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports
