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
      state/<operator>/_metadata/             Spark's operator metadata (not a partition)

Local names (under `StoreOptions.local_dir`, see `localfs`): `<checkpoint hash>/<op>/<part>/<store>/`
with a `LOCK` file, `db/` and `pending/<pid>_<version>_<id>_<nonce>/`; a provider that finds
the lock taken uses `<store>.<pid>.<nonce>/`; downloaded SSTs live in
`<checkpoint hash>/sst-cache/<op>/<part>/<store>/`. Temp files are hidden: `.<name>.<nonce>.tmp`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

from statebed_base.errors import UsageError
from statebed_base.localfs import TMP_SUFFIX

__all__ = [
    "CHANGELOG",
    "COMMITS_DIR",
    "CRC_SUFFIX",
    "DB_DIR",
    "DEFAULT_STORE",
    "HELD_FILE",
    "LOAN_PREFIX",
    "LOCK_FILE",
    "LOGS_DIR",
    "METADATA_DIR",
    "OFFSETS_DIR",
    "PENDING_DIR",
    "SNAPSHOT",
    "SOURCES_DIR",
    "SST_CACHE_DIR",
    "SST_DIR",
    "STATE_DIR",
    "ZIP_METADATA",
    "StateFileName",
    "StoreId",
    "check_id",
    "commit_path",
    "hadoop_crc_name",
    "is_private_dir_of",
    "is_sst",
    "is_temp_of",
    "is_valid_id",
    "new_checkpoint_id",
    "new_sst_name",
    "parse_batch_id",
    "parse_index",
    "parse_state_file",
    "pending_name",
    "pending_pid",
    "private_dir_name",
    "sidecar_main",
    "sidecar_name",
    "spark_batch_id",
]

CHANGELOG: Literal["changelog"] = "changelog"
SNAPSHOT: Literal["zip"] = "zip"
SST_DIR = "SSTs"
COMMITS_DIR = "commits"
OFFSETS_DIR = "offsets"  # Spark's offset log of a query checkpoint (beside its commits/)
SOURCES_DIR = "sources"  # Spark's per-source metadata logs of a query checkpoint
STATE_DIR = "state"
DEFAULT_STORE = "default"
CRC_SUFFIX = ".crc"
METADATA_DIR = "_metadata"  # Spark's operator metadata directory under state/<op>/
LOGS_DIR = "logs"  # RocksDB log files named by snapshot metadata
ZIP_METADATA = "metadata"  # the member of a snapshot zip that lists its SSTs
SST_SUFFIX = ".sst"
# Local (executor-side) names.
LOCK_FILE = "LOCK"
DB_DIR = "db"
PENDING_DIR = "pending"
HELD_FILE = "held.json"  # what a shared instance directory's RocksDB holds, written after each commit
LOAN_PREFIX = "loan-"  # a copy of another process's instance being made (`lending`)
SST_CACHE_DIR = "sst-cache"

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


def commit_path(batch_id: int) -> str:
    """`commits/<batchId>`: Spark's commit log entry of a batch."""
    return f"{COMMITS_DIR}/{batch_id}"


LONG_MAX = 2**63 - 1  # Spark's batch ids are Java longs


def parse_batch_id(name: str) -> int | None:
    """The batch id of a commit log file name as Spark writes it (a Java long >= 0, no leading zero);
    None for anything else (`.1.crc`, `1.tmp`, `05`: see `spark_batch_id`)."""
    if not (name.isascii() and name.isdigit() and len(name) <= 19) or (name[0] == "0" and name != "0"):
        return None
    return int(name) if int(name) <= LONG_MAX else None


def spark_batch_id(name: str) -> int | None:
    """The batch id Spark's log reads from a file name (`Long.parseLong`: a sign is allowed), or None."""
    digits = name[1:] if name[:1] in ("+", "-") else name
    if not (digits.isascii() and digits.isdigit()):
        return None
    value = int(name)
    return value if -LONG_MAX - 1 <= value <= LONG_MAX else None


def parse_index(name: str) -> int | None:
    """An operator or partition directory name (`state/<op>/<part>`), or None."""
    return int(name) if name.isascii() and name.isdigit() and len(name) <= 9 else None


def is_sst(name: str) -> bool:
    return name.endswith(SST_SUFFIX)


def new_sst_name(local: str) -> str:
    """The DFS name of a local SST `000017.sst`: `000017-<uuid>.sst`, unique per upload."""
    return f"{local.removesuffix(SST_SUFFIX)}-{uuid.uuid4()}{SST_SUFFIX}"


def is_temp_of(name: str, candidate: str) -> bool:
    """`candidate` is a hidden temp of `name` (`.<name>.<nonce>.tmp`): statebed's, or what Spark's
    rename-based checkpoint stream writes before its rename (`.<name>.<uuid>[.TID<n>].tmp`)."""
    return candidate.startswith(f".{name}.") and candidate.endswith(TMP_SUFFIX) and len(candidate) > len(name) + 2 + len(TMP_SUFFIX)


def pending_name(pid: int, version: int, checkpoint_id: str | None) -> str:
    """A local checkpoint queued for upload, named after the process that owns it."""
    return f"{pid}_{version}_{checkpoint_id or 'v1'}_{uuid.uuid4().hex[:8]}"


def pending_pid(name: str) -> int | None:
    """The owning process of a pending checkpoint directory, or None if the name is not one."""
    pid = name.split("_", 1)[0]
    return int(pid) if pid.isascii() and pid.isdigit() else None


def private_dir_name(store_name: str, pid: int) -> str:
    """The instance directory of a provider that found the shared one locked."""
    return f"{store_name}.{pid}.{uuid.uuid4().hex[:8]}"


def is_private_dir_of(name: str, store_name: str) -> bool:
    """`name` is one of `private_dir_name(store_name, …)`."""
    return re.fullmatch(re.escape(store_name) + r"\.[0-9]+\.[0-9a-f]{8}", name) is not None


def sidecar_name(name: str) -> str:
    return name + CRC_SUFFIX


def hadoop_crc_name(name: str) -> str:
    """The hidden checksum file Hadoop's checksummed file system writes beside `name` (`.<name>.crc`)."""
    return f".{name}{CRC_SUFFIX}"


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

    @property
    def local_parts(self) -> tuple[str, str, str]:
        """Its directory levels on a local disk (every store has its own level there)."""
        return str(self.operator), str(self.partition), self.store_name

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    def __str__(self) -> str:
        return f"operator {self.operator} partition {self.partition} store {self.store_name}"
