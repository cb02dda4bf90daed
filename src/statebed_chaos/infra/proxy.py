"""Toxiproxy (the real server, as install/install.sh built it) as a managed subprocess on a free
loopback port: the storage faults' proxy in front of MinIO."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from statebed_base.installed import installed
from statebed_base.netaddr import LOOPBACK, answers, free_port
from statebed_base.processes import Child, spawn

STOP_S = 10.0

__all__ = ["ProxyProcess", "start_proxy", "toxiproxy_args"]


@dataclass
class ProxyProcess:
    child: Child
    api: str  # http://127.0.0.1:PORT
    log_path: Path

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self) -> None:
        """SIGTERM, up to 10 s, then SIGKILL (by its pinned identity)."""
        self.child.stop(STOP_S, STOP_S)


def toxiproxy_args(binary: str, port: int, seed: int) -> list[str]:
    """`toxiproxy-server` on loopback only; `-seed` makes its toxicity draws repeatable,
    `-proxy-metrics` serves its byte counters per proxy and direction on /metrics (a dashboard's)."""
    return [binary, "-host", LOOPBACK, "-port", str(port), "-seed", str(seed), "-proxy-metrics"]


def start_proxy(workdir: Path, *, seed: int = 0, timeout_s: float = 30.0) -> ProxyProcess:
    """Start Toxiproxy with no proxy yet; return once its API (/version) answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, log_path = free_port(), workdir / "toxiproxy.log"
    api = f"http://{LOOPBACK}:{port}"
    proc = ProxyProcess(spawn(toxiproxy_args(str(installed("toxiproxy")), port, seed), stdout=log_path, append=True), api, log_path)
    deadline = time.monotonic() + timeout_s
    try:
        while not answers(f"{api}/version"):
            if not proc.child.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"toxiproxy did not start (exit {proc.child.returncode}); log: {log_path}")
            time.sleep(0.1)  # polling readiness, bounded by the deadline
    except BaseException:  # not ready, or Ctrl-C / SIGTERM while it starts: nobody else holds it to stop
        proc.stop()
        raise
    return proc
