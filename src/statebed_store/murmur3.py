"""Spark's `Murmur3Hash` (seed 42), bit for bit, so a state key's partition can be recomputed.

A shuffle partition is `pmod(Murmur3Hash(key columns, 42), numPartitions)` for
`repartition(P, col)` and for a stateful operator's required distribution alike (DESIGN
§6). Spark's `Murmur3_x86_32` is Guava's Murmur3 except for byte strings: its
`hashUnsafeBytes` (what strings and binaries use) mixes each of the 1-3 tail bytes as a
whole sign-extended int block, where standard Murmur3 packs them into one block. Columns
chain: each column is hashed with the previous column's hash as its seed, a null column
leaves it unchanged, a struct chains over its fields. Pure Python (numpy for many longs);
checked against real Spark in tests/store/test_partitioner_spark.py.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SEED", "SparkType", "hash_bytes", "hash_int", "hash_long", "hash_longs", "hash_value", "hash_values", "parse_type"]

SEED = 42
_M = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593

# A Spark SQL type as far as hashing needs it: an atomic type name ("long", "string",
# "decimal(20,2)", ...) or a struct as a tuple of its field types.
SparkType = str | tuple["SparkType", ...]
_INTS = {"boolean", "byte", "short", "integer", "date"}
_LONGS = {"long", "timestamp", "timestamp_ntz"}


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _mix_k1(k: int) -> int:
    return (_rotl((k * _C1) & _M, 15) * _C2) & _M


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M


def _fmix(h: int, length: int) -> int:
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def hash_int(value: int, seed: int = SEED) -> int:
    """`Murmur3_x86_32.hashInt`: a signed 32-bit result."""
    return _fmix(_mix_h1(seed & _M, _mix_k1(value & _M)), 4)


def hash_long(value: int, seed: int = SEED) -> int:
    """`Murmur3_x86_32.hashLong`: low word, then high word."""
    h = _mix_h1(seed & _M, _mix_k1(value & _M))
    return _fmix(_mix_h1(h, _mix_k1((value >> 32) & _M)), 8)


def hash_bytes(data: bytes, seed: int = SEED) -> int:
    """`Murmur3_x86_32.hashUnsafeBytes` (Spark's legacy variant): little-endian 4-byte blocks,
    then every tail byte mixed on its own as a sign-extended int."""
    h = seed & _M
    aligned = len(data) - len(data) % 4
    for (block,) in struct.iter_unpack("<I", data[:aligned]):
        h = _mix_h1(h, _mix_k1(block))
    for b in data[aligned:]:
        h = _mix_h1(h, _mix_k1((b - 256 if b > 127 else b) & _M))
    return _fmix(h, len(data))


def hash_longs(values: np.ndarray, seed: int = SEED) -> np.ndarray:
    """`hash_long` of every int64 in `values` at once (int32 results): the hot path of big states."""
    v = np.asarray(values, dtype=np.int64).view(np.uint64)
    h = np.full(v.shape, seed & _M, dtype=np.uint32)
    for word in ((v & np.uint64(_M)).astype(np.uint32), (v >> np.uint64(32)).astype(np.uint32)):
        k = _np_rotl(word * np.uint32(_C1), 15) * np.uint32(_C2)
        h = _np_rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    h ^= np.uint32(8)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h.view(np.int32)


def _np_rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _decimal(name: str) -> tuple[int, int] | None:
    if not (name.startswith("decimal(") and name.endswith(")")):
        return None
    p, _, s = name[8:-1].partition(",")
    return int(p), int(s)


def parse_type(doc: Any) -> SparkType:
    """A type from Spark's schema JSON (`"long"`, `{"type": "struct", "fields": [...]}`); ValueError
    for a type whose hash this module does not reproduce (arrays, maps, collated strings, ...)."""
    if isinstance(doc, dict) and doc.get("type") == "struct" and isinstance(doc.get("fields"), list):
        return tuple(parse_type(f.get("type") if isinstance(f, dict) else None) for f in doc["fields"])
    if isinstance(doc, str) and (doc in _INTS | _LONGS | {"float", "double", "string", "binary"} or _decimal(doc)):
        return doc
    raise ValueError(f"type {doc!r} is not supported by the partition check")


def hash_value(value: Any, typ: SparkType, seed: int) -> int:
    """One column's hash with `seed` (Spark's `InterpretedHashFunction.hash`); None leaves `seed`."""
    if value is None:
        return seed
    if isinstance(typ, tuple):
        return hash_values(value, typ, seed)
    if typ in _INTS:
        return hash_int(int(value), seed)
    if typ in _LONGS:
        return hash_long(int(value), seed)
    if typ == "float":
        bits = 0x7FC00000 if math.isnan(value) else struct.unpack("<I", struct.pack("<f", value))[0]
        return hash_int(0 if value == 0 else bits, seed)  # -0.0 hashes as 0.0
    if typ == "double":
        bits = 0x7FF8000000000000 if math.isnan(value) else struct.unpack("<Q", struct.pack("<d", value))[0]
        return hash_long(0 if value == 0 else bits, seed)
    if typ == "string":
        return hash_bytes(value.encode("utf-8") if isinstance(value, str) else bytes(value), seed)
    if typ == "binary":
        return hash_bytes(bytes(value), seed)
    dec = _decimal(typ)
    if dec is not None:  # `value` is the unscaled integer
        if dec[0] <= 18:
            return hash_long(int(value), seed)
        n = int(value)  # BigInteger.toByteArray: minimal two's complement, bitLength() // 8 + 1 bytes
        return hash_bytes(n.to_bytes((n if n >= 0 else ~n).bit_length() // 8 + 1, "big", signed=True), seed)
    raise ValueError(f"type {typ!r} is not supported by the partition check")


def hash_values(values: Sequence[Any], types: Sequence[SparkType], seed: int = SEED) -> int:
    """`Murmur3Hash(columns, seed)`: each column hashed with the previous result as its seed."""
    h = seed
    for value, typ in zip(values, types, strict=True):
        h = hash_value(value, typ, h)
    return h
