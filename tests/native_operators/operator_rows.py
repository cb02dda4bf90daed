"""Decode statebed's dumped bytes with the schema Spark's state data source reports, so the two can be compared.

Layouts in Spark's RocksDB store (each row is `<version byte 0><UnsafeRow>`):
* plain key or value: one row;
* prefix-scan key (session windows, MapState): `<int32 LE length><prefix row><rest row>`;
* ListState value (mergeOperatorVersion 2): `<int32 LE size><row>` per element, no delimiter;
* a value with a TTL: the row `(value struct, ttlExpirationMs long)` (Spark's reader shows it so);
* a TTL index key (`$ttl_<var>`, range scan on the expiration): `<int32 LE length><row (binary:
  0x01 then the expiration as a big-endian long)><row (element key struct)>`.
Test code only: statebed itself serves bytes, and these decoders check what they read.
"""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def _versioned(stored: bytes) -> bytes:
    assert stored[:1] == b"\x00", f"{stored.hex()} does not start with encoding version 0"
    return stored[1:]


def _field(row: bytes, base: int, t: DataType) -> Any:
    word = row[base : base + 8]
    if isinstance(t, (LongType, TimestampType)):
        return struct.unpack("<q", word)[0]
    if isinstance(t, IntegerType):
        return struct.unpack("<i", word[:4])[0]
    if isinstance(t, DoubleType):
        return struct.unpack("<d", word)[0]
    if isinstance(t, BooleanType):
        return bool(word[0])
    off_size = int.from_bytes(word, "little")
    offset, size = off_size >> 32, off_size & 0xFFFFFFFF
    assert offset + size <= len(row), f"field points past its row ({offset}+{size} > {len(row)})"
    data = row[offset : offset + size]
    if isinstance(t, StringType):
        return data.decode("utf-8")
    if isinstance(t, BinaryType):
        return data
    if isinstance(t, StructType):
        return decode_row(data, t)
    if isinstance(t, ArrayType):
        n = int.from_bytes(data[:8], "little")
        head = 8 + ((n + 63) // 64) * 8
        assert isinstance(t.elementType, (LongType, IntegerType)), t
        width = 8 if isinstance(t.elementType, LongType) else 4
        return tuple(int.from_bytes(data[head + width * i : head + width * (i + 1)], "little", signed=True) for i in range(n))
    raise AssertionError(f"no decoder for {t}")


def decode_row(row: bytes, schema: StructType) -> tuple[Any, ...]:
    """An UnsafeRow (no version byte) as a tuple, field by field as `schema` says."""
    bits = ((len(schema.fields) + 63) // 64) * 8
    nulls = int.from_bytes(row[:bits], "little")
    return tuple(None if nulls >> i & 1 else _field(row, bits + 8 * i, f.dataType) for i, f in enumerate(schema.fields))


def plain(stored: bytes, schema: StructType) -> tuple[Any, ...]:
    return decode_row(_versioned(stored), schema)


def prefixed(stored: bytes) -> tuple[bytes, bytes]:
    """A prefix-scan key's two versioned rows."""
    n = int.from_bytes(stored[:4], "little")
    assert 0 < n < len(stored), f"prefix length {n} does not fit the {len(stored)}-byte key"
    return stored[4 : 4 + n], stored[4 + n :]


def ttl_index_key(stored: bytes, element_t: StructType) -> tuple[int, Any]:
    """A `$ttl_<var>` key: (expiration ms, element key); the value is an empty row."""
    head, rest = prefixed(stored)
    (encoded,) = plain(head, StructType([StructField("expirationMs", BinaryType())]))
    assert len(encoded) == 9 and encoded[0] == 1, f"not a range-scan encoded positive long: {encoded.hex()}"
    (element,) = plain(rest, StructType([StructField("elementKey", element_t)]))
    return int.from_bytes(encoded[1:], "big"), element


def elements(value: bytes) -> list[bytes]:
    """A ListState value's versioned element rows; the framing must use every byte."""
    out, pos = [], 0
    while pos < len(value):
        size = int.from_bytes(value[pos : pos + 4], "little", signed=True)
        assert size > 0 and pos + 4 + size <= len(value), f"element size {size} at byte {pos} of {len(value)}"
        out.append(value[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return out


def norm(value: Any) -> Any:
    """A value Spark's reader returned, in the form the decoders produce (rows as tuples, times in µs)."""
    if isinstance(value, dt.datetime):
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        aware = value if value.tzinfo else value.astimezone()
        return (aware - epoch) // dt.timedelta(microseconds=1)
    if isinstance(value, (list, tuple)):
        return tuple(norm(v) for v in value)
    return value
