"""All configuration in one place: the store's options and every environment variable.

Defaults work on a laptop: a local checkpoint directory, local RocksDB under the system
temp dir, failpoints off. Environment variables (read only here):

=============================  ====================================================
STATEBED_LOG_LEVEL             WARNING (default), INFO, DEBUG
STATEBED_LOG_FORMAT            text (default) or json
STATEBED_LOCAL_DIR             where executors keep RocksDB instances (default: temp)
STATEBED_FAILPOINTS            e.g. `snapshot.upload=30%delay(2000);changelog.upload.after=error`
STATEBED_FAILPOINTS_SEED       seed for failpoint probabilities (default 0)
STATEBED_FAILPOINTS_CONTROL    a failpoint control file to follow at runtime (`statebed run`: <run>/failpoints/control.json)
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
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlparse

from statebed_base.errors import UsageError

from .formats import STORE_FORMATS, V2, StoreFormat
from .lineage import CheckpointRef, lineage_to_json

if TYPE_CHECKING:
    from .row_checksum import RowChecksums

__all__ = ["MAX_SNAPSHOT_INTERVAL", "S3Settings", "StoreOptions", "default_local_dir", "env"]

HedgeMode = Literal["off", "on", "adaptive"]


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def default_local_dir() -> Path:
    return Path(env("STATEBED_LOCAL_DIR") or Path(tempfile.gettempdir()) / f"statebed-{os.getuid()}")


def _max_snapshot_interval() -> int:
    """How many lineage entries always fit `writeUTF`'s 65535 bytes, at the longest names
    allowed (a 19-digit version, a 64-character id: 120 bytes an entry with its comma)."""
    longest = CheckpointRef(int("9" * 19), "f" * 64)
    entry = len(lineage_to_json([longest] * 2)) - len(lineage_to_json([longest]))  # an entry and its comma
    return (WRITE_UTF_MAX - len("[]") + len(",")) // entry


WRITE_UTF_MAX = 65535
# A changelog carries at most `snapshot_interval` lineage entries; 546 of the longest fit.
MAX_SNAPSHOT_INTERVAL = _max_snapshot_interval()
_INTERVAL_WHY = f" (a changelog's lineage holds up to that many entries and must fit writeUTF's {WRITE_UTF_MAX} bytes)"


def _int(name: str, value: object, low: int, high: int, why: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(f"StoreOptions.{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise UsageError(f"StoreOptions.{name} must be {low}..{high}, got {value}{why}")


def _seconds(name: str, value: object, high: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise UsageError(f"StoreOptions.{name} must be a number of seconds, got {value!r}")
    if not 0 <= value <= high:
        raise UsageError(f"StoreOptions.{name} must be 0..{high:g} seconds, got {value}")


@dataclass(frozen=True)
class StoreOptions:
    """How a store checkpoints. Frozen: one value per provider, passed to executors as is."""

    format: StoreFormat = V2.store_format
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
    # Hedged create-only uploads (`storage/hedge.py`): "off" (only measured), "on" (a second PUT
    # after `hedge_delay_s`), "adaptive" (after the running `hedge_quantile` of recent uploads of
    # that kind, within [hedge_min_delay_s, hedge_max_delay_s]; `hedge_delay_s` until it has data).
    hedge: HedgeMode = "off"
    hedge_delay_s: float = 0.2
    hedge_quantile: float = 0.97  # hedges ≈ 3 % of uploads: within the budget, so a stall finds a token
    hedge_min_delay_s: float = 0.02
    hedge_max_delay_s: float = 2.0
    # At most this fraction of uploads gets a hedge (a token bucket; "The Tail at Scale").
    hedge_budget: float = 0.05
    # Snapshot files are big: hedging them doubles their bytes on the wire. Off unless asked.
    hedge_snapshots: bool = False
    # Spark's row checksums, for a reader of a checkpoint that has them (`row_checksum`): every
    # loaded row verified. None (statebed's own store, Spark's without them): rows are plain.
    row_checksums: RowChecksums | None = None
    # V1 (`format="v1"`) neither lends its instance nor takes over a dead holder's, unless this
    # says so: Spark's V1 loses its instance with its JVM, and the V1 positive control must
    # behave as that store does (docs/store.md). V2 shares whenever the provider is asked to.
    share_v1: bool = False

    def __post_init__(self) -> None:
        if self.format not in STORE_FORMATS:
            raise UsageError(f"StoreOptions.format must be one of {', '.join(STORE_FORMATS)}, got {self.format!r}")
        _int("snapshot_interval", self.snapshot_interval, 1, MAX_SNAPSHOT_INTERVAL, why=_INTERVAL_WHY)
        _int("retain_versions", self.retain_versions, 1, 10**9)
        for flag in ("checksums", "share_v1"):
            if not isinstance(getattr(self, flag), bool):
                raise UsageError(f"StoreOptions.{flag} must be True or False, got {getattr(self, flag)!r}")
        _int("snapshot_upload_attempts", self.snapshot_upload_attempts, 1, 100)
        _seconds("snapshot_upload_backoff_s", self.snapshot_upload_backoff_s, 60.0)
        _seconds("sst_orphan_grace_s", self.sst_orphan_grace_s, 7 * 24 * 3600.0)
        _seconds("lock_timeout_s", self.lock_timeout_s, 24 * 3600.0)
        _int("lz4_block_size", self.lz4_block_size, 1024, 32 * 1024 * 1024)
        if not isinstance(self.local_dir, (str, os.PathLike)) or not str(self.local_dir):
            raise UsageError(f"StoreOptions.local_dir must be a directory path, got {self.local_dir!r}")
        self._check_hedge()

    def _check_hedge(self) -> None:
        if self.hedge not in ("off", "on", "adaptive"):
            raise UsageError(f"StoreOptions.hedge must be 'off', 'on' or 'adaptive', got {self.hedge!r}")
        for name in ("hedge_delay_s", "hedge_min_delay_s", "hedge_max_delay_s"):
            _seconds(name, getattr(self, name), 600.0)
        if self.hedge_min_delay_s > self.hedge_max_delay_s:
            raise UsageError(
                f"StoreOptions.hedge_min_delay_s ({self.hedge_min_delay_s}) must not exceed hedge_max_delay_s ({self.hedge_max_delay_s})"
            )
        for name in ("hedge_quantile", "hedge_budget"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1:
                raise UsageError(f"StoreOptions.{name} must be a fraction in (0, 1), got {value!r}")
        if not isinstance(self.hedge_snapshots, bool):
            raise UsageError(f"StoreOptions.hedge_snapshots must be True or False, got {self.hedge_snapshots!r}")

    def with_(self, **changes: object) -> StoreOptions:
        return replace(self, **changes)  # type: ignore[arg-type]


def _env_number(name: str, default: float, *, integer: bool = False) -> float:
    text = env(name)
    if not text:
        return default
    try:
        return int(text) if integer else float(text)
    except ValueError:
        raise UsageError(f"{name} must be {'an integer' if integer else 'a number of seconds'}, got {text!r}") from None


@dataclass(frozen=True)
class S3Settings:
    """Where an `s3://` checkpoint lives; from arguments, else the environment."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str | None = None
    conditional_put: Literal["auto", "on", "off"] = "auto"
    # An unresponsive endpoint must fail fast: every attempt is bounded by the timeouts, at most
    # `retries` more attempts follow, and none starts once `deadline_s` has passed since the first.
    # Six retries back off 0, 0.4, 0.8, 1.6, 2, 2 s: a few seconds of resets or refused
    # connections (a proxy or S3 node restarting) are ridden out instead of failing the query.
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 15.0
    retries: int = 6
    deadline_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "read_timeout_s", "deadline_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 3600:
                raise UsageError(f"S3Settings.{name} must be 0..3600 seconds (exclusive of 0), got {value!r}")
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or not 0 <= self.retries <= 20:
            raise UsageError(f"S3Settings.retries must be 0..20, got {self.retries!r}")

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
            connect_timeout_s=_env_number("STATEBED_S3_CONNECT_TIMEOUT", cls.connect_timeout_s),
            read_timeout_s=_env_number("STATEBED_S3_READ_TIMEOUT", cls.read_timeout_s),
            retries=int(_env_number("STATEBED_S3_RETRIES", cls.retries, integer=True)),
            deadline_s=_env_number("STATEBED_S3_DEADLINE", cls.deadline_s),
        )

    @property
    def host_port(self) -> str:
        u = urlparse(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}")
        try:
            port = u.port
        except ValueError as e:  # "Port out of range 0-65535", a non-numeric port
            raise UsageError(f"S3 endpoint {self.endpoint!r}: {e}") from None
        if not u.hostname:
            raise UsageError(f"S3 endpoint {self.endpoint!r} has no host")
        return f"{u.hostname}:{port}" if port else u.hostname

    @property
    def secure(self) -> bool:
        return self.endpoint.startswith("https://")
