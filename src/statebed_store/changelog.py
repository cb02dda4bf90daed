"""Changelog files in Spark's byte layout (StateStoreChangelog, format versions 1-4).

Inside the LZ4Block container (see `lz4block`):

* v1: records only. put = `klen:i32 key vlen:i32 value`, delete = `klen:i32 key -1:i32`,
  end = `-1:i32`. No header, so a reader tells v1 by the absence of a `v<n>` first string.
* v2: `writeUTF("v2")`, then typed records: `type:u8` (0x01 put, 0x10 delete, 0x11 merge)
  followed by the v1 record body; end = type 0x00.
* v3: `writeUTF("v3")`, `writeUTF(lineage JSON)`, then v1 records (V2 checkpoints, one
  column family; what statebed writes in V2 mode).
* v4: `writeUTF("v4")`, `writeUTF(lineage JSON)`, then v2 records (column families).

`writeUTF` = 2-byte big-endian length + (modified) UTF-8; lineage JSON is ASCII here.
Encoding is one Arrow element-wise concatenation per batch: no Python call per record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statebed_base.errors import CorruptFileError, LineageError, UnknownFormatError

from . import lz4block
from .lineage import Lineage, lineage_from_json, lineage_to_json, validate_lineage

if TYPE_CHECKING:
    from .storage.base import Storage

__all__ = [
    "DELETE",
    "MERGE",
    "PUT",
    "Changelog",
    "ChangelogHeader",
    "Chunk",
    "as_binary_array",
    "encode_changelog",
    "parse_changelog",
    "parse_changelog_header",
    "read_changelog_header",
]

PUT = 0x01
DELETE = 0x10
MERGE = 0x11
_EOF_TYPED = 0x00
KNOWN_FORMATS = (1, 2, 3, 4)
_LINEAGE_FORMATS = (3, 4)
_TYPED_FORMATS = (2, 4)
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")


def as_binary_array(values: Sequence[bytes] | pa.Array | pa.ChunkedArray) -> pa.Array:
    """Normalise keys/values to one contiguous Arrow binary array (no copy when already one)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if isinstance(values, pa.Array):
        if pa.types.is_binary(values.type):
            return values
        if pa.types.is_large_binary(values.type) or pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            return values.cast(pa.binary())
        raise TypeError(f"keys/values must be binary, got Arrow type {values.type}")
    return pa.array(values, type=pa.binary())


@dataclass(frozen=True)
class Chunk:
    """A run of same-kind operations from one batched call, kept in call order."""

    op: int
    keys: pa.Array
    values: pa.Array | None = None


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of every element of a binary array, from its offsets (no copy of the data)."""
    if arr.null_count:
        raise ValueError("keys and values must not be null")
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    return np.diff(offs).astype(np.int64)


def _column(rows: np.ndarray, width: int) -> pa.Array:
    """A binary column whose i-th element is the `width` bytes of `rows[i]`."""
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(rows), [None, pa.py_buffer(rows.tobytes())])
    return fixed.cast(pa.binary())


_LARGE = 2**31 - 1  # bytes beyond which 32-bit Arrow offsets overflow
_EMPTY = pa.scalar(b"", pa.binary())
_MINUS_ONE = pa.scalar(_I32.pack(-1), pa.binary())


def _encode_chunk(chunk: Chunk, typed: bool) -> bytes:
    """Lay out `[type] klen key vlen value` (`vlen = -1`, no value, for deletes) for all records.

    One element-wise concatenation in Arrow's C++ kernels: no Python per record.
    """
    n = len(chunk.keys)
    if n == 0:
        return b""
    head = np.empty(n, dtype=[("t", "u1"), ("l", ">i4")] if typed else [("l", ">i4")])
    if typed:
        head["t"] = chunk.op
    klen = _lengths(chunk.keys)
    head["l"] = klen
    parts: list[pa.Array | pa.Scalar] = [_column(head, 5 if typed else 4), chunk.keys]
    total = int(klen.sum()) + n * (9 if typed else 8)
    if chunk.op == DELETE:
        parts.append(_MINUS_ONE)
    else:
        assert chunk.values is not None and len(chunk.values) == n
        vlen = _lengths(chunk.values)
        parts += [_column(vlen.astype(">i4"), 4), chunk.values]
        total += int(vlen.sum())
    large = total >= _LARGE
    if large:  # concatenate with 64-bit offsets
        parts = [p.cast(pa.large_binary()) for p in parts]
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()) if large else _EMPTY)
    offs = np.frombuffer(joined.buffers()[1], dtype=np.int64 if large else np.int32)
    return memoryview(joined.buffers()[2])[int(offs[0]) : int(offs[len(joined)])].tobytes()


def _utf(s: str, what: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"{what} is {len(raw)} bytes; writeUTF allows 65535")
    return _U16.pack(len(raw)) + raw


def encode_changelog(
    format_version: int,
    lineage: Lineage | None,
    chunks: Sequence[Chunk],
    block_size: int = lz4block.DEFAULT_BLOCK_SIZE,
) -> bytes:
    """The complete file bytes (LZ4Block-compressed) of one changelog."""
    if format_version not in KNOWN_FORMATS:
        raise ValueError(f"cannot write changelog format v{format_version}")
    typed = format_version in _TYPED_FORMATS
    parts: list[bytes] = []
    if format_version >= 2:
        parts.append(_utf(f"v{format_version}", "version"))
    if format_version in _LINEAGE_FORMATS:
        parts.append(_utf(lineage_to_json(lineage or ()), "lineage"))
    elif lineage:
        raise ValueError(f"changelog format v{format_version} cannot carry a lineage")
    for chunk in chunks:
        if chunk.op == MERGE and not typed:
            raise ValueError(f"changelog format v{format_version} has no merge records")
        parts.append(_encode_chunk(chunk, typed))
    parts.append(bytes([_EOF_TYPED]) if typed else _I32.pack(-1))
    return lz4block.compress(b"".join(parts), block_size)


@dataclass(frozen=True)
class ChangelogHeader:
    format_version: int
    lineage: Lineage | None  # None for formats without lineage (v1, v2)
    records_offset: int

    @property
    def typed(self) -> bool:
        """Each record starts with its type byte (formats 2 and 4); else a delete has value size -1."""
        return self.format_version in _TYPED_FORMATS


class _NeedMore(Exception):
    """The decompressed prefix ended inside the header."""


def _read_utf(p: bytes, pos: int) -> tuple[str, int]:
    if len(p) < pos + 2:
        raise _NeedMore
    (n,) = _U16.unpack_from(p, pos)
    if len(p) < pos + 2 + n:
        raise _NeedMore
    return p[pos + 2 : pos + 2 + n].decode("utf-8"), pos + 2 + n


def parse_changelog_header(payload: bytes, *, file: str, version: int | None = None, complete: bool = True) -> ChangelogHeader:
    """Format version and lineage from the decompressed start of a changelog.

    Format detection follows Spark: no readable `v<n>` first string means v1.
    With `version` given, the lineage is validated against it.
    """
    try:
        first, pos = _read_utf(payload, 0)
    except _NeedMore:
        if not complete:
            raise
        return ChangelogHeader(1, None, 0)
    except UnicodeDecodeError:
        return ChangelogHeader(1, None, 0)
    if not first.startswith("v") or not (first[1:].isascii() and first[1:].isdigit()):
        return ChangelogHeader(1, None, 0)
    fmt = int(first[1:])
    if fmt == 1:
        return ChangelogHeader(1, None, 0)
    if fmt not in KNOWN_FORMATS:
        raise UnknownFormatError(file, f"unknown changelog format version v{fmt} (this reader knows v1-v4)")
    if fmt not in _LINEAGE_FORMATS:
        return ChangelogHeader(fmt, None, pos)
    try:
        text, pos = _read_utf(payload, pos)
    except _NeedMore:
        if not complete:
            raise
        raise CorruptFileError(file, f"truncated: changelog v{fmt} header has no complete lineage") from None
    except UnicodeDecodeError:
        raise LineageError(file, "lineage is not valid UTF-8") from None
    lineage = lineage_from_json(text, file=file)
    validate_lineage(lineage, version=version, file=file)
    return ChangelogHeader(fmt, lineage, pos)


def read_changelog_header(storage: Storage, path: str, *, version: int | None = None) -> ChangelogHeader:
    """Fetch only as much of the file as the header needs (one ranged read usually)."""
    fetch = 64 * 1024
    while True:
        data = storage.read(path, 0, fetch)
        whole = len(data) < fetch
        payload, complete = lz4block.decompress(data, file=storage.display(path), partial=not whole)
        try:
            return parse_changelog_header(payload, file=storage.display(path), version=version, complete=complete or whole)
        except _NeedMore:
            if whole:
                raise CorruptFileError(storage.display(path), "truncated inside the changelog header") from None
            fetch *= 4


@dataclass(frozen=True)
class Changelog:
    """A fully read changelog; `records()` walks its operations in write order."""

    file: str
    header: ChangelogHeader
    payload: bytes

    @property
    def format_version(self) -> int:
        return self.header.format_version

    @property
    def lineage(self) -> Lineage | None:
        return self.header.lineage

    def records(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        """`(op, key, value)` in write order; value is None for deletes."""
        return zip(*self.columns())

    def columns(self) -> tuple[list[int], list[bytes], list[bytes | None]]:
        """All records as parallel lists (ops, keys, values). Truncation is an error."""
        ops: list[int] = []
        keys: list[bytes] = []
        values: list[bytes | None] = []
        self._walk(ops, keys, values)
        return ops, keys, values

    def check_records(self) -> int:
        """Decode every record's framing without keeping it (verifiers); the number of records."""
        return self._walk(None, None, None)

    def _walk(self, ops: list[int] | None, keys: list[bytes] | None, values: list[bytes | None] | None) -> int:
        """Walk the records, appending them to the lists when given; CorruptFileError at the first bad one."""
        p, pos, n, file = self.payload, self.header.records_offset, len(self.payload), self.file
        unpack = _I32.unpack_from
        typed = self.header.typed
        keep = ops is not None and keys is not None and values is not None
        count = 0
        op = PUT
        try:
            while True:
                if typed:
                    if pos >= n:
                        raise CorruptFileError(file, "truncated: changelog ends without its end-of-file record")
                    op = p[pos]
                    pos += 1
                    if op == _EOF_TYPED:
                        return self._end(pos, count)
                    if op not in (PUT, DELETE, MERGE):
                        raise CorruptFileError(file, f"unknown record type 0x{op:02x} at payload byte {pos - 1}")
                (klen,) = unpack(p, pos)
                pos += 4
                if klen < 0:
                    if klen == -1 and not typed:
                        return self._end(pos, count)
                    raise CorruptFileError(file, f"bad key size {klen} at payload byte {pos - 4}")
                kpos = pos
                pos += klen
                (vlen,) = unpack(p, pos)
                pos += 4
                if vlen < 0:
                    if typed and op != DELETE:
                        raise CorruptFileError(file, f"record type 0x{op:02x} with value size {vlen}")
                    if vlen != -1:
                        raise CorruptFileError(file, f"bad value size {vlen} at payload byte {pos - 4}")
                    if pos > n:
                        raise struct.error
                    if keep:
                        ops.append(DELETE)  # type: ignore[union-attr]
                        keys.append(p[kpos : kpos + klen])  # type: ignore[union-attr]
                        values.append(None)  # type: ignore[union-attr]
                    count += 1
                    continue
                if typed and op == DELETE:
                    raise CorruptFileError(file, f"delete record with value size {vlen}")
                vpos = pos
                pos += vlen
                if pos > n:
                    raise struct.error
                if keep:
                    ops.append(op)  # type: ignore[union-attr]
                    keys.append(p[kpos : kpos + klen])  # type: ignore[union-attr]
                    values.append(p[vpos:pos])  # type: ignore[union-attr]
                count += 1
        except struct.error:
            raise CorruptFileError(file, "truncated: a record runs past the end of the changelog") from None

    def _end(self, pos: int, count: int) -> int:
        """After the end-of-file record nothing may follow: trailing bytes mean a damaged or spliced file."""
        if pos != len(self.payload):
            raise CorruptFileError(self.file, f"{len(self.payload) - pos} bytes follow the end-of-file record")
        return count


def parse_changelog(data: bytes, *, file: str, version: int | None = None) -> Changelog:
    payload, _ = lz4block.decompress(data, file=file)
    return Changelog(file, parse_changelog_header(payload, file=file, version=version), payload)
