"""CRC32C sidecars, `X.crc` next to each state file, in the JSON Spark (4.1+) writes.

`{"algorithm":"CRC32C","value":<signed int32>,"mainFileSize":..,"timestampMs":..,
"creator":{"executorId":..,"taskInfo":..}}`. With them a flipped byte anywhere in a
snapshot or changelog is a clear error naming the file instead of silently wrong state,
and Spark's files and statebed's are checked the same way. `creator` attributes a file to
the task attempt that wrote it, which is how orphans are traced to attempts; statebed adds
the file's own store and `(version, id)` there, so a file copied in from another store or
attempt (with its sidecar) is told apart. Spark's `taskInfo` (`"Task= 2.0, Stage= 67.0"`)
names the task's partition, which in a stateful stage is the state partition: checked when
present (Spark leaves it empty for snapshots its maintenance thread writes).
"""

from __future__ import annotations

import json
import re
import time
import zlib
from typing import Any

import google_crc32c

from statebed_base.errors import CorruptFileError, ForeignFileError
from statebed_base.jsonsafe import loads_strict

from .naming import sidecar_name

__all__ = ["check_owner", "check_sidecar", "crc32c", "hadoop_crc", "make_sidecar", "resealed_sidecar"]

_SPARK_TASK = re.compile(r"Task= (\d+)\.\d+, Stage= \d+\.\d+")


def crc32c(data: bytes | memoryview) -> int:
    return int(google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data))


def _signed_crc(data: bytes) -> int:
    """CRC32C as Spark's sidecar records it: a Java int."""
    value = crc32c(data)
    return value - (1 << 32) if value >= 1 << 31 else value


def make_sidecar(data: bytes, creator: dict[str, Any] | None = None) -> bytes:
    doc = {
        "algorithm": "CRC32C",
        "value": _signed_crc(data),
        "mainFileSize": len(data),
        "timestampMs": int(time.time() * 1000),
        "creator": creator or {},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def resealed_sidecar(sidecar: bytes, data: bytes, *, file: str) -> bytes:
    """`sidecar` recording `data` instead (CRC32C and size; its creator and time kept): what a
    rewrite of a file in place leaves, so that file-level checks still pass (chaos faults only)."""
    doc = loads_strict(sidecar, file=sidecar_name(file), what="checksum sidecar")
    if not isinstance(doc, dict):
        raise CorruptFileError(sidecar_name(file), "checksum sidecar is not a JSON object")
    doc.update(value=_signed_crc(data), mainFileSize=len(data))
    return json.dumps(doc, separators=(",", ":")).encode()


def check_sidecar(data: bytes, sidecar: bytes, *, file: str) -> dict[str, Any]:
    """Raise CorruptFileError if `data` does not match its sidecar (or the sidecar is unreadable); returns its `creator`."""
    side = sidecar_name(file)
    try:
        doc = loads_strict(sidecar, file=side, what="checksum sidecar")
        algorithm, value, size = doc["algorithm"], int(doc["value"]), int(doc["mainFileSize"])
        creator = doc.get("creator") or {}
        if not isinstance(creator, dict):
            raise TypeError("creator is not an object")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CorruptFileError(side, "checksum sidecar is not valid JSON with algorithm/value/mainFileSize") from None
    if algorithm != "CRC32C":
        raise CorruptFileError(side, f"unsupported checksum algorithm {algorithm!r}")
    if size != len(data):
        raise CorruptFileError(file, f"size is {len(data)} bytes but its checksum sidecar records {size} (truncated or replaced?)")
    if crc32c(data) != value & 0xFFFFFFFF:
        raise CorruptFileError(file, "CRC32C does not match its checksum sidecar: the file is corrupt")
    return creator


def check_owner(
    creator: dict[str, Any], *, operator: int, partition: int, store_name: str, version: int, checkpoint_id: str | None, file: str
) -> None:
    """ForeignFileError if a sidecar's `creator` says its file belongs to another store or checkpoint."""
    own = creator.get("store")
    if isinstance(own, dict):
        said = (own.get("operator"), own.get("partition"), own.get("storeName"))
        if said != (operator, partition, store_name):
            raise ForeignFileError(
                file, f"its checksum sidecar says it was written for operator {said[0]} partition {said[1]} store {said[2]!r}: copied in?"
            )
    if "version" in creator and (creator.get("version"), creator.get("checkpointUniqueId")) != (version, checkpoint_id):
        raise ForeignFileError(
            file,
            f"its checksum sidecar says it is ({creator.get('version')}, {creator.get('checkpointUniqueId')}), "
            f"not ({version}, {checkpoint_id}) as named: copied in?",
        )
    task = _SPARK_TASK.fullmatch(str(creator.get("taskInfo") or ""))
    if own is None and task is not None and int(task.group(1)) != partition:
        raise ForeignFileError(
            file, f"its checksum sidecar says Spark task {task.group(1)} wrote it, not a task of partition {partition}: copied in?"
        )


_HADOOP_MAGIC = b"crc\x00"
_HADOOP_BYTES_PER_CHECKSUM = 512


def hadoop_crc(data: bytes) -> bytes:
    """The hidden `.X.crc` Hadoop's checksummed local file system keeps beside `X`: its magic, the
    bytes per checksum (512) and a CRC-32 of each 512-byte chunk (big-endian). A tool that rewrites
    a Spark file in place rewrites this too, or Hadoop's next read fails on the stale one."""
    n = _HADOOP_BYTES_PER_CHECKSUM
    crcs = b"".join(zlib.crc32(data[i : i + n]).to_bytes(4, "big") for i in range(0, len(data), n))
    return _HADOOP_MAGIC + n.to_bytes(4, "big") + crcs
