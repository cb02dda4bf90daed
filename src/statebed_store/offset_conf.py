"""The SQL confs Spark records in a query checkpoint's offset log, as a reader needs them.

Spark writes the confs that change what its state files mean (`OffsetSeqMetadata.relevantSQLConfs`:
the merge operator version, row checksums, ...) into each offset log entry's second line, and on
restart the checkpoint's values win over the session's. A reader of the state files takes them
from the newest entry, as Spark does. One reader of that line, for every conf.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from statebed_base.errors import CorruptFileError

from .naming import OFFSETS_DIR, parse_index
from .storage.base import Storage

__all__ = ["ROW_CHECKSUM_CONF", "SHUFFLE_PARTITIONS_CONF", "OffsetConf", "offset_conf", "shuffle_partitions"]

ROW_CHECKSUM_CONF = "spark.sql.streaming.stateStore.rowChecksum.enabled"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"  # every stateful operator's partition count, per batch


@dataclass(frozen=True)
class OffsetConf:
    """The newest offset log entry's conf map (empty when the checkpoint has no offset log), and its file."""

    conf: dict[str, str]
    source: str


def offset_conf(storage: Storage) -> OffsetConf:
    """The conf the newest offset log entry records; a second line that is no JSON metadata is named."""
    batches = sorted(b for b in (parse_index(f.name) for f in storage.list(OFFSETS_DIR)) if b is not None)
    if not batches:
        return OffsetConf({}, storage.display(OFFSETS_DIR))
    return _entry_conf(storage, batches[-1])


def _entry_conf(storage: Storage, batch: int) -> OffsetConf:
    path = f"{OFFSETS_DIR}/{batch}"
    shown = storage.display(path)
    for line in storage.read(path).decode("utf-8", "replace").splitlines()[1:2]:
        try:
            conf = json.loads(line).get("conf", {})
        except (json.JSONDecodeError, AttributeError):
            raise CorruptFileError(shown, "second line is not the offset log's JSON metadata") from None
        if isinstance(conf, dict):
            return OffsetConf({str(k): str(v) for k, v in conf.items()}, shown)
    return OffsetConf({}, shown)


def shuffle_partitions(storage: Storage, batch: int) -> int | None:
    """The partition count batch `batch` ran its stateful operators with, as its offset log entry
    records it; None where the entry is gone, unreadable or names none (a V1 commit says nothing)."""
    if not storage.exists(f"{OFFSETS_DIR}/{batch}"):
        return None
    try:
        value = _entry_conf(storage, batch).conf.get(SHUFFLE_PARTITIONS_CONF, "")
    except CorruptFileError:
        return None
    return int(value) if value.isascii() and value.isdigit() and 0 < int(value) <= 1_000_000 else None
