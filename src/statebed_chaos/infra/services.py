"""S3 for an experiment: MinIO with Toxiproxy in front of it (both as install/install.sh built
them), started and stopped together (also on error and Ctrl-C), reached by the store through
the proxy "s3". With `api` (an existing Toxiproxy, e.g. the chart's in Kubernetes) none is
started; the proxy "s3" is created there. Either way the storage faults prove what they did
from the run's S3 request logs, not from the proxy.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toxiproxy import Toxiproxy

from statebed_base.errors import UsageError
from statebed_store import S3Settings

from ..targets.local import LocalTargets
from .minio_server import ACCESS_KEY, SECRET_KEY, start_s3_server
from .proxy import start_proxy

__all__ = ["PROXY_NAME", "Services", "storage_services", "toxiproxy_client"]

PROXY_NAME = "s3"


@dataclass
class Services:
    endpoint: str  # the S3 endpoint through the proxy (what the store uses)
    direct: str  # MinIO itself (what the verifiers may use)
    proxy: Any  # toxiproxy-python Proxy "s3"
    settings: S3Settings  # through the proxy
    api: str  # the Toxiproxy API URL


def toxiproxy_client(api: str) -> Toxiproxy:
    """The toxiproxy-python client of the Toxiproxy API at `api` (it keeps one address per process)."""
    url = urllib.parse.urlsplit(api)
    if url.scheme != "http" or not url.hostname or not url.port:
        raise UsageError(f"proxy api {api!r}: expected http://HOST:PORT")
    client = Toxiproxy()
    client.update_api_consumer(url.hostname, url.port)  # toxiproxy-python keeps one API address per process
    return client


@contextlib.contextmanager
def storage_services(
    workdir: Path, *, run_dir: Path | None = None, api: str | None = None, seed: int = 0, listen: str = "127.0.0.1:0"
) -> Iterator[Services]:
    """Start MinIO (and our proxy unless `api`), create proxy "s3" in front of S3; stop both on exit."""
    targets = LocalTargets(run_dir) if run_dir is not None else None
    with contextlib.ExitStack() as stack:
        s3 = start_s3_server(workdir / "s3")
        stack.callback(s3.stop)
        if targets is not None:
            targets.register("s3", s3.pid)
        if api is None:
            ours = start_proxy(workdir / "proxy", seed=seed)
            stack.callback(ours.stop)
            if targets is not None:
                targets.register("proxy", ours.pid)
            api = ours.api
        client = toxiproxy_client(api)
        existing = client.get_proxy(PROXY_NAME)
        if existing is not None:  # left over on a shared Toxiproxy: start from a clean proxy
            existing.destroy()
        proxy = client.create(upstream=s3.endpoint.removeprefix("http://"), name=PROXY_NAME, listen=listen)
        stack.callback(_destroy_quietly, proxy)
        endpoint = f"http://{proxy.listen}"
        settings = S3Settings(endpoint=endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        yield Services(endpoint, s3.endpoint, proxy, settings, api)


def _destroy_quietly(proxy: Any) -> None:
    """Remove the proxy from the API (matters on a shared Toxiproxy); ours may be gone already."""
    with contextlib.suppress(Exception):
        proxy.destroy()
