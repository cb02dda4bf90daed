"""CRC32C sidecars, `X.crc` next to each state file, in the JSON Spark (4.1+) writes.

`{"algorithm":"CRC32C","value":<signed int32>,"mainFileSize":..,"timestampMs":..,
"creator":{"executorId":..,"taskInfo":..}}`. With them a flipped byte anywhere in a
snapshot or changelog is a clear error naming the file instead of silently wrong state,
and Spark's files and statebed's are checked the same way. `creator` attributes a file to
the task attempt that wrote it, which is how orphans are traced to attempts.
"""

from __future__ import annotations

import json
import time
from typing import Any

import google_crc32c

from .errors import CorruptFileError

__all__ = ["check_sidecar", "crc32c", "make_sidecar"]


def crc32c(data: bytes | memoryview) -> int:
    return int(google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data))


def make_sidecar(data: bytes, creator: dict[str, Any] | None = None) -> bytes:
    value = crc32c(data)
    signed = value - (1 << 32) if value >= 1 << 31 else value
    doc = {
        "algorithm": "CRC32C",
        "value": signed,
        "mainFileSize": len(data),
        "timestampMs": int(time.time() * 1000),
        "creator": creator or {},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def check_sidecar(data: bytes, sidecar: bytes, *, file: str) -> None:
    """Raise CorruptFileError if `data` does not match its sidecar (or the sidecar is unreadable)."""
    side = file + ".crc"
    try:
        doc = json.loads(sidecar)
        algorithm, value, size = doc["algorithm"], int(doc["value"]), int(doc["mainFileSize"])
    except (ValueError, KeyError, TypeError):
        raise CorruptFileError(side, "checksum sidecar is not valid JSON with algorithm/value/mainFileSize") from None
    if algorithm != "CRC32C":
        raise CorruptFileError(side, f"unsupported checksum algorithm {algorithm!r}")
    if size != len(data):
        raise CorruptFileError(file, f"size is {len(data)} bytes but its checksum sidecar records {size} (truncated or replaced?)")
    if crc32c(data) != value & 0xFFFFFFFF:
        raise CorruptFileError(file, "CRC32C does not match its checksum sidecar: the file is corrupt")
