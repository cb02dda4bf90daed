"""All configuration in one place: the store's options and every environment variable.

Defaults work on a laptop: a local checkpoint directory, local RocksDB under the system
temp dir, failpoints off. Environment variables (read only here):

=============================  ====================================================
STATEBED_LOG_LEVEL             WARNING (default), INFO, DEBUG
STATEBED_LOG_FORMAT            text (default) or json
STATEBED_LOCAL_DIR             where executors keep RocksDB instances (default: temp)
STATEBED_FAILPOINTS            e.g. `snapshot.upload=30%delay(2000);changelog.upload.after=error`
STATEBED_FAILPOINTS_SEED       seed for failpoint probabilities (default 0)
STATEBED_S3_ENDPOINT           http(s)://host:port of the S3 server (or AWS_ENDPOINT_URL)
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION   S3 credentials and region
STATEBED_S3_CONDITIONAL_PUT    auto (default: probe the server), on, off
=============================  ====================================================
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from .errors import UsageError

__all__ = ["S3Settings", "StoreOptions", "default_local_dir", "env"]

Format = Literal["v1", "v2"]


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def default_local_dir() -> Path:
    return Path(env("STATEBED_LOCAL_DIR") or Path(tempfile.gettempdir()) / f"statebed-{os.getuid()}")


@dataclass(frozen=True)
class StoreOptions:
    """How a store checkpoints. Frozen: one value per provider, passed to executors as is."""

    format: Format = "v2"
    # Queue a snapshot once this many changelogs follow the last (presumed) one; Spark's
    # minDeltasForSnapshot. The lineage in each changelog is at most this long.
    snapshot_interval: int = 10
    # Versions cleanup keeps loadable (Spark's minBatchesToRetain).
    retain_versions: int = 100
    # Write and verify `X.crc` CRC32C sidecars (Spark's fileChecksum.enabled).
    checksums: bool = True
    # Snapshot uploads are retried this many times, then skipped (never fatal).
    snapshot_upload_attempts: int = 3
    snapshot_upload_backoff_s: float = 0.5
    # Unreferenced SSTs younger than this may belong to an upload in flight: kept.
    sst_orphan_grace_s: float = 600.0
    # How long a load waits for another task holding the same local instance.
    lock_timeout_s: float = 120.0
    lz4_block_size: int = 32 * 1024
    local_dir: Path = field(default_factory=default_local_dir)

    def __post_init__(self) -> None:
        if self.format not in ("v1", "v2"):
            raise UsageError(f"format must be 'v1' or 'v2', got {self.format!r}")
        if self.snapshot_interval < 1:
            raise UsageError(f"snapshot_interval must be >= 1, got {self.snapshot_interval}")
        if self.retain_versions < 1:
            raise UsageError(f"retain_versions must be >= 1, got {self.retain_versions}")
        if self.snapshot_upload_attempts < 1:
            raise UsageError("snapshot_upload_attempts must be >= 1")

    def with_(self, **changes: object) -> StoreOptions:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class S3Settings:
    """Where an `s3://` checkpoint lives; from arguments, else the environment."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str | None = None
    conditional_put: Literal["auto", "on", "off"] = "auto"

    @classmethod
    def from_env(
        cls,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> S3Settings:
        ep = endpoint or env("STATEBED_S3_ENDPOINT") or env("AWS_ENDPOINT_URL")
        if not ep:
            raise UsageError(
                "an s3:// checkpoint needs an endpoint: pass --s3-endpoint or set STATEBED_S3_ENDPOINT (e.g. http://127.0.0.1:9000)"
            )
        mode = env("STATEBED_S3_CONDITIONAL_PUT", "auto")
        if mode not in ("auto", "on", "off"):
            raise UsageError(f"STATEBED_S3_CONDITIONAL_PUT must be auto, on or off, got {mode!r}")
        return cls(
            endpoint=ep,
            access_key=access_key or env("AWS_ACCESS_KEY_ID"),
            secret_key=secret_key or env("AWS_SECRET_ACCESS_KEY"),
            region=env("AWS_REGION") or None,
            conditional_put=mode,  # type: ignore[arg-type]
        )

    @property
    def host_port(self) -> str:
        u = urlparse(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}")
        if not u.hostname:
            raise UsageError(f"S3 endpoint {self.endpoint!r} has no host")
        return f"{u.hostname}:{u.port}" if u.port else u.hostname

    @property
    def secure(self) -> bool:
        return self.endpoint.startswith("https://")
