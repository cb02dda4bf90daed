"""Our Toxiproxy-API proxy (`statebed proxy`) as a managed subprocess on a free loopback port."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from statebed_store.errors import UsageError

from .seaweedfs import free_port

__all__ = ["ProxyProcess", "start_proxy", "stop_pid"]


@dataclass
class ProxyProcess:
    proc: subprocess.Popen[bytes]
    api: str  # http://127.0.0.1:PORT
    record: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_pid(self.proc)


def stop_pid(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL: our own child, through its Popen handle.

    No recorded identity is needed: until we reap it (the wait below), the kernel keeps its
    PID from being reused, so the handle names the process we started and no other."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


def _statebed() -> str:
    here = Path(sys.executable).parent / "statebed"
    found = str(here) if here.exists() else shutil.which("statebed")
    if found is None:
        raise UsageError("cannot start the proxy: no `statebed` command next to this Python or on PATH")
    return found


def _answers(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/version", timeout=1.0) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def start_proxy(workdir: Path, *, seed: int = 0, timeout_s: float = 30.0) -> ProxyProcess:
    """Start `statebed proxy --record <workdir>/proxy-record.jsonl`; return once /version answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port(avoid_plus=0)
    record, log_path = workdir / "proxy-record.jsonl", workdir / "proxy.log"
    args = [_statebed(), "proxy", "--host", "127.0.0.1", "--port", str(port), "--record", str(record), "--seed", str(seed)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while not _answers(api):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_pid(proc)
            raise RuntimeError(f"statebed proxy did not start (exit {proc.returncode}); log: {log_path}")
        time.sleep(0.1)  # polling readiness, bounded by the deadline
    return ProxyProcess(proc, api, record, log_path)
