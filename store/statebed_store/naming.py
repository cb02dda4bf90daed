"""The only code that formats or parses checkpoint file and directory names.

Layout under a checkpoint root (Spark's, so one reader serves both)::

    <root>/
      commits/<batchId>                       commit log (v1 / v2 lines + JSON)
      state/<operator>/<partition>/           store "default" (no directory level of its own)
        <version>_<id>.changelog              V2 changelog (never overwritten)
        <version>_<id>.changelog.crc          CRC32C sidecar (JSON)
        <version>_<id>.zip                    V2 snapshot: RocksDB metadata files + `metadata`
        <version>.changelog / <version>.zip   V1 names (overwritten by every attempt)
        SSTs/<fileNo>-<uuid>.sst              immutable SST files shared by snapshots
        <storeName>/...                       any other store of that partition, same layout
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

from .errors import UsageError

__all__ = [
    "CHANGELOG",
    "COMMITS_DIR",
    "CRC_SUFFIX",
    "DEFAULT_STORE",
    "SNAPSHOT",
    "SST_DIR",
    "STATE_DIR",
    "StateFileName",
    "StoreId",
    "check_id",
    "is_valid_id",
    "new_checkpoint_id",
    "parse_state_file",
    "sidecar_main",
    "sidecar_name",
]

CHANGELOG: Literal["changelog"] = "changelog"
SNAPSHOT: Literal["zip"] = "zip"
SST_DIR = "SSTs"
COMMITS_DIR = "commits"
STATE_DIR = "state"
DEFAULT_STORE = "default"
CRC_SUFFIX = ".crc"

Kind = Literal["changelog", "zip"]

# Ids end up in file names: letters, digits and dashes only (UUIDs, the seed's 8-hex ids).
_ID = r"[0-9A-Za-z][0-9A-Za-z-]{0,63}"
_ID_RE = re.compile(rf"^{_ID}\Z")
_STATE_FILE_RE = re.compile(rf"^(0|[1-9][0-9]{{0,18}})(?:_({_ID}))?\.(changelog|zip)\Z")


def is_valid_id(checkpoint_id: str) -> bool:
    return bool(_ID_RE.match(checkpoint_id))


def check_id(checkpoint_id: str, what: str = "checkpoint id") -> str:
    """Reject ids that could not be a file-name component (path tricks, separators)."""
    if not isinstance(checkpoint_id, str) or not _ID_RE.match(checkpoint_id):
        raise UsageError(f"{what} {checkpoint_id!r} is malformed: expected 1-64 letters, digits or dashes")
    return checkpoint_id


def new_checkpoint_id() -> str:
    """A globally unique id, drawn once per load (i.e. per task attempt)."""
    return str(uuid.uuid4())


@dataclass(frozen=True, order=True)
class StateFileName:
    """A parsed `<version>[_<id>].<kind>` name; `id` is None for V1 names."""

    version: int
    id: str | None
    kind: Kind

    @property
    def name(self) -> str:
        stem = str(self.version) if self.id is None else f"{self.version}_{self.id}"
        return f"{stem}.{self.kind}"


def parse_state_file(name: str) -> StateFileName | None:
    """Exact match only: `5_<id>.changelog.crc` or `.5.zip.crc` are not state files."""
    m = _STATE_FILE_RE.match(name)
    if not m:
        return None
    kind: Kind = CHANGELOG if m.group(3) == CHANGELOG else SNAPSHOT
    return StateFileName(int(m.group(1)), m.group(2), kind)


def sidecar_name(name: str) -> str:
    return name + CRC_SUFFIX


def sidecar_main(name: str) -> str | None:
    """The state file a visible `X.crc` sidecar belongs to, or None."""
    if not name.endswith(CRC_SUFFIX) or name.startswith("."):
        return None
    main = name[: -len(CRC_SUFFIX)]
    return main if parse_state_file(main) else None


@dataclass(frozen=True, order=True)
class StoreId:
    """Which store: operator, partition and store name, as in Spark's StateStoreId."""

    operator: int
    partition: int
    store_name: str = DEFAULT_STORE

    def __post_init__(self) -> None:
        if self.operator < 0 or self.partition < 0:
            raise UsageError(f"operator and partition must be >= 0, got {self.operator}/{self.partition}")
        if self.store_name != DEFAULT_STORE and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z", self.store_name):
            raise UsageError(f"store name {self.store_name!r} is malformed")

    @property
    def dir(self) -> str:
        """Directory relative to the checkpoint root; the default store has no level of its own."""
        base = f"{STATE_DIR}/{self.operator}/{self.partition}"
        return base if self.store_name == DEFAULT_STORE else f"{base}/{self.store_name}"

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    def __str__(self) -> str:
        return f"operator {self.operator} partition {self.partition} store {self.store_name}"
