"""Reading the keys and values Spark's RocksDB state store keeps: `<version byte><UnsafeRow>`.

UnsafeRow: a null bitset (8 bytes per 64 fields), then one 8-byte word per field —
fixed-width values little-endian in place, variable-width ones as `(offset << 32) | size`
pointing into the row — then the variable-width data. Arrays (UnsafeArrayData): element
count (8 bytes), a null bitset, then the elements. Enough to decode the aggregation and
collect_list states statebed's native mode produces; anything else is a clear error.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Literal

from statebed_base.errors import CorruptFileError

__all__ = ["FieldType", "decode_row"]

FieldType = Literal["long", "int", "double", "boolean", "string", "binary", "array<long>"]
_ENCODING_VERSION = 0


def _word(row: bytes, pos: int) -> int:
    return int.from_bytes(row[pos : pos + 8], "little")


def _var(row: bytes, word: int, what: str) -> bytes:
    offset, size = word >> 32, word & 0xFFFFFFFF
    if offset + size > len(row):
        raise CorruptFileError(what, f"field points past the end of the row ({offset}+{size} > {len(row)})")
    return row[offset : offset + size]


def _long_array(data: bytes, what: str) -> list[int | None]:
    n = int.from_bytes(data[:8], "little")
    bits = ((n + 63) // 64) * 8
    if 8 + bits + 8 * n > len(data):
        raise CorruptFileError(what, f"array of {n} longs does not fit in {len(data)} bytes")
    nulls = int.from_bytes(data[8 : 8 + bits], "little")
    values = struct.unpack_from(f"<{n}q", data, 8 + bits)
    return [None if nulls >> i & 1 else v for i, v in enumerate(values)]


def decode_row(stored: bytes, types: Sequence[FieldType], *, what: str = "state row") -> list[Any]:
    """Decode one stored key or value (version byte + UnsafeRow) with the given field types."""
    if not stored or stored[0] != _ENCODING_VERSION:
        raise CorruptFileError(what, f"not a version-{_ENCODING_VERSION} encoded UnsafeRow (starts {stored[:1].hex() or 'empty'})")
    row = stored[1:]
    bits = ((len(types) + 63) // 64) * 8
    if len(row) < bits + 8 * len(types):
        raise CorruptFileError(what, f"{len(row)} bytes is too short for {len(types)} fields")
    nulls = int.from_bytes(row[:bits], "little")
    out: list[Any] = []
    for i, t in enumerate(types):
        pos = bits + 8 * i
        if nulls >> i & 1:
            out.append(None)
        elif t == "long":
            out.append(struct.unpack_from("<q", row, pos)[0])
        elif t == "int":
            out.append(struct.unpack_from("<i", row, pos)[0])
        elif t == "double":
            out.append(struct.unpack_from("<d", row, pos)[0])
        elif t == "boolean":
            out.append(bool(row[pos]))
        elif t in ("string", "binary"):
            data = _var(row, _word(row, pos), what)
            out.append(data.decode("utf-8") if t == "string" else data)
        elif t == "array<long>":
            out.append(_long_array(_var(row, _word(row, pos), what), what))
        else:
            raise ValueError(f"unsupported UnsafeRow field type {t!r}")
    return out
