"""Experiment infrastructure: the S3 server and the Toxiproxy-API proxy as managed subprocesses."""

from __future__ import annotations

from .minio_server import ACCESS_KEY, SECRET_KEY, S3Server, start_s3_server
from .proxy import ProxyProcess, start_proxy
from .services import PROXY_NAME, Services, storage_services

__all__ = [
    "ACCESS_KEY", "PROXY_NAME", "SECRET_KEY", "ProxyProcess", "S3Server", "Services", "start_proxy",
    "start_s3_server", "storage_services",
]  # fmt: skip
