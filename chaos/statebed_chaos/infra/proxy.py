"""Our Toxiproxy-API proxy (`statebed proxy`) as a managed subprocess on a free loopback port."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from statebed_base.errors import UsageError
from statebed_base.netaddr import answers, free_port
from statebed_base.processes import Child, spawn

STOP_S = 10.0

__all__ = ["ProxyProcess", "start_proxy"]


@dataclass
class ProxyProcess:
    child: Child
    api: str  # http://127.0.0.1:PORT
    record: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self) -> None:
        """SIGTERM, up to 10 s, then SIGKILL (by its pinned identity)."""
        self.child.stop(STOP_S, STOP_S)


def _statebed() -> str:
    here = Path(sys.executable).parent / "statebed"
    found = str(here) if here.exists() else shutil.which("statebed")
    if found is None:
        raise UsageError("cannot start the proxy: no `statebed` command next to this Python or on PATH")
    return found


def _answers(api: str) -> bool:
    return answers(f"{api}/version")


def start_proxy(workdir: Path, *, seed: int = 0, timeout_s: float = 30.0) -> ProxyProcess:
    """Start `statebed proxy --record <workdir>/proxy-record.jsonl`; return once /version answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    record, log_path = workdir / "proxy-record.jsonl", workdir / "proxy.log"
    args = [_statebed(), "proxy", "--host", "127.0.0.1", "--port", str(port), "--record", str(record), "--seed", str(seed)]
    api = f"http://127.0.0.1:{port}"
    proc = ProxyProcess(spawn(args, stdout=log_path, append=True), api, record, log_path)
    deadline = time.monotonic() + timeout_s
    while not _answers(api):
        if not proc.child.alive() or time.monotonic() > deadline:
            proc.stop()
            raise RuntimeError(f"statebed proxy did not start (exit {proc.child.returncode}); log: {log_path}")
        time.sleep(0.1)  # polling readiness, bounded by the deadline
    return proc
