"""A real S3 server as a managed subprocess: MinIO, as `install/install.sh minio` built it.

Used by the tests and by chaos experiments with `storage: s3`. Binds to 127.0.0.1 only, on
free ports; started and stopped by PID, never by name.

MinIO listens on exactly two TCP ports, both chosen here and named on its command line: the S3
API (`--address`) and the console (`--console-address`; nobody uses it, but left alone it would
pick its own). A port chosen free can still be taken before the server binds it: a start whose
log says so is made again on fresh ports.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import time
from dataclasses import astuple, dataclass
from pathlib import Path

import urllib3
from minio import Minio

from statebed_base.installed import installed
from statebed_base.netaddr import free_ports
from statebed_base.processes import Child, spawn

__all__ = [
    "ACCESS_KEY",
    "IN_USE",
    "READY_BUCKET",
    "SECRET_KEY",
    "START_ATTEMPTS",
    "MinioPorts",
    "S3Server",
    "minio_args",
    "start_s3_server",
]

ACCESS_KEY = "statebed"
SECRET_KEY = "statebed-secret"
READY_BUCKET = "statebed-test"  # created at start: the readiness probe writes into it
HOST = "127.0.0.1"
IN_USE = "already in use"  # in the server's log when a chosen port was taken before it bound it ("Specified port is already in use")
START_ATTEMPTS = 3


@dataclass(frozen=True)
class MinioPorts:
    """Every TCP port `minio server` listens on: the S3 API and the console."""

    s3: int
    console: int

    @classmethod
    def choose(cls) -> MinioPorts:
        return cls(*free_ports(2))

    def all(self) -> list[int]:
        return list(astuple(self))


def minio_args(minio: str, data: Path, ports: MinioPorts) -> list[str]:
    """The `minio server` command line: one local drive, both ports on loopback."""
    return [minio, "server", str(data), "--address", f"{HOST}:{ports.s3}", "--console-address", f"{HOST}:{ports.console}", "--quiet"]


MINIO_ENV = {
    "MINIO_ROOT_USER": ACCESS_KEY,
    "MINIO_ROOT_PASSWORD": SECRET_KEY,
    "MINIO_BROWSER": "off",  # the console's web UI: nobody browses a test server
    "MINIO_UPDATE": "off",  # never asks the network for a newer release
    "MINIO_CI_CD": "1",  # no drive checks that refuse a directory on the root disk
}


@dataclass
class S3Server:
    kind: str
    endpoint: str
    child: Child
    data_dir: Path
    log_path: Path
    args: list[str]
    env: dict[str, str]

    def client(self, *, timeout_s: float | None = None) -> Minio:
        """A client of this server; with `timeout_s`, one that never waits longer on a request nor retries it."""
        http = None
        if timeout_s is not None:
            http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s), retries=False)
        return Minio(self.endpoint.removeprefix("http://"), ACCESS_KEY, SECRET_KEY, secure=False, region="us-east-1", http_client=http)

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s (by its pinned identity); its data survives a kill (tested)."""
        self.child.stop(grace_s=10, kill_wait_s=10)

    def restart(self) -> None:
        self.stop()
        self.child = _spawn(self.args, self.env, self.log_path)
        _wait_ready(self)


def _spawn(args: list[str], env: dict[str, str], log_path: Path) -> Child:
    return spawn(args, stdout=log_path, env=env, append=True)


def _wait_ready(server: S3Server, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    client = server.client(timeout_s=5.0)  # whoever else holds a chosen port may accept and never answer
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not server.child.alive():
            raise RuntimeError(f"{server.kind} exited with {server.child.returncode}; log: {server.log_path}")
        if not _accepts(server.endpoint):  # the client retries a refused connection for seconds: ask it only once the port listens
            last = ConnectionRefusedError(f"nothing listens on {server.endpoint}")
            time.sleep(0.1)
            continue
        try:
            if not client.bucket_exists(READY_BUCKET):
                client.make_bucket(READY_BUCKET)
            client.put_object(READY_BUCKET, "ready", io.BytesIO(b"1"), 1)
            return
        except Exception as e:  # not up yet
            last = e
            time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"{server.kind} not ready after {timeout_s}s: {last}; log: {server.log_path}")


def _accepts(endpoint: str) -> bool:
    host, _, port = endpoint.removeprefix("http://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def _command(data: Path) -> tuple[list[str], int, dict[str, str]]:
    """(argv, S3 port, extra environment) on ports chosen now."""
    ports = MinioPorts.choose()
    return minio_args(str(installed("minio")), data, ports), ports.s3, MINIO_ENV


def _log_since(path: Path, offset: int) -> str:
    with contextlib.suppress(OSError), path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")
    return ""


def start_s3_server(workdir: Path, *, attempts: int = START_ATTEMPTS) -> S3Server:
    """Start MinIO; wait until a bucket can be written. A start that failed because a chosen port
    was taken meanwhile (its log says so) is made again on fresh ports, up to `attempts` starts in all."""
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    for attempt in range(1, attempts + 1):
        kind = "minio"
        args, port, extra = _command(data)
        env = dict(os.environ, **extra)
        log_path = workdir / f"{kind}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        server = S3Server(kind, f"http://{HOST}:{port}", _spawn(args, env, log_path), data, log_path, args, env)
        try:
            _wait_ready(server)
            return server
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C or SIGTERM while it starts: nobody else holds it to stop
            server.stop()
            raise
        except RuntimeError as e:
            server.stop()
            if IN_USE not in _log_since(log_path, offset).lower():
                raise
            if attempt == attempts:
                raise RuntimeError(
                    f"{kind}: a chosen port was taken before it bound it, {attempts} starts in a row; log: {log_path}"
                ) from e
    raise AssertionError("unreachable")  # the last attempt returned or raised
