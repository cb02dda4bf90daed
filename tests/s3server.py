"""A real S3 server for tests: the launcher lives in `statebed_chaos.infra.minio_server` (experiments use it too)."""

from __future__ import annotations

from statebed_base.netaddr import free_port
from statebed_chaos.infra.minio_server import ACCESS_KEY, READY_BUCKET, SECRET_KEY, S3Server, start_s3_server

__all__ = ["ACCESS_KEY", "READY_BUCKET", "SECRET_KEY", "S3Server", "free_port", "start_s3_server"]
