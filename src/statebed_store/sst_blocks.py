"""The checksums of the blocks of a RocksDB SST that a scan never reads.

Spark records no checksum of its SSTs, so a snapshot of Spark's is checked by reading every
entry (`engine.verify`): RocksDB then checks each data and index block it reads. The filter
block is not among them: only a point lookup reads it, and Spark's state store does point
lookups. A damaged bloom filter therefore passes a scan and fails Spark's first `get` on that
file (seen: a flipped byte in a Spark 4.3 SST, judged valid). This module checks every block the
metaindex names (filters, properties, compression dictionary, range deletions, ...) and the
metaindex itself, against the checksum in its trailer.

The block-based table format (RocksDB's wiki, "Rocksdb BlockBasedTable Format"): a file ends in
a footer (magic number last), which holds the checksum type, the format version and the handles
(varint64 offset and size) of the metaindex and index blocks; every block of `size` bytes at
`offset` is followed by a 5-byte trailer, its compression type and a little-endian 32-bit
checksum of the block plus that type byte. Format versions 0..5 are read here; a later one (6
adds a per-block context to the checksum), a partitioned filter or a compressed metaindex is an
`UnknownFormatError`: this reader cannot vouch for it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import xxhash

from statebed_base.errors import CorruptFileError, UnknownFormatError

__all__ = ["check_sst_blocks"]

_MAGIC = 0x88E241B785F4CFF7  # block-based table, footer with checksum type and format version
_LEGACY_MAGIC = 0xDB4775248B80FB57  # the LevelDB-era footer: no checksum type (CRC32C), no version
_FOOTER = 53  # checksum type (1) + two handles padded to 40 + format version (4) + magic (8)
_LEGACY_FOOTER = 48
_TRAILER = 5
_MAX_FORMAT = 5
_XXH3_LAST_BYTE = 0x6B9083D9  # how an XXH3 block checksum folds in the compression type byte


def check_sst_blocks(path: Path, shown: str) -> int:
    """Check the metaindex block and every block it names; the number of blocks checked. Reads
    the footer and those blocks only. `shown` names the file in errors (its checkpoint path)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size

        def read(off: int, n: int) -> bytes:
            f.seek(off)
            return f.read(n)

        checksum_type, metaindex = _footer(read(max(0, size - _FOOTER), _FOOTER), shown)
        names = _block_entries(_block(read, size, metaindex, checksum_type, shown, "metaindex"), shown)
        for name, handle in names:
            if name.startswith(b"partitionedfilter."):
                raise UnknownFormatError(shown, "a partitioned filter: its partitions are not checked by this reader")
            off, i = _varint(handle, 0, shown)
            length, _ = _varint(handle, i, shown)
            _block(read, size, (off, length), checksum_type, shown, name.decode("utf-8", "replace"))
    return 1 + len(names)


def _footer(tail: bytes, shown: str) -> tuple[int, tuple[int, int]]:
    """(checksum type, metaindex handle) from the file's last bytes (up to a footer's worth)."""
    if len(tail) < _LEGACY_FOOTER:
        raise CorruptFileError(shown, f"{len(tail)} bytes: shorter than an SST footer")
    (magic,) = struct.unpack_from("<Q", tail, len(tail) - 8)
    if magic == _LEGACY_MAGIC:
        handles, checksum_type = tail[-_LEGACY_FOOTER:-8], 1
    elif magic == _MAGIC and len(tail) >= _FOOTER:
        (version,) = struct.unpack_from("<I", tail, _FOOTER - 12)
        if version > _MAX_FORMAT:
            raise UnknownFormatError(shown, f"SST format version {version}: this reader checks versions up to {_MAX_FORMAT}")
        handles, checksum_type = tail[1:41], tail[0]
    else:
        raise CorruptFileError(shown, f"no SST footer (magic {magic:#x})")
    off, i = _varint(handles, 0, shown)
    length, _ = _varint(handles, i, shown)
    return checksum_type, (off, length)


def _block(read: Callable[[int, int], bytes], size: int, handle: tuple[int, int], checksum_type: int, shown: str, what: str) -> bytes:
    """The block at `handle`, its trailer's checksum verified."""
    off, length = handle
    if off + length + _TRAILER > size:
        raise CorruptFileError(shown, f"the {what} block ({off}+{length}) runs past the end of the file ({size} bytes)")
    raw = read(off, length + _TRAILER)
    body, kind = raw[:length], raw[length]
    (stored,) = struct.unpack_from("<I", raw, length + 1)
    if checksum_type != 0 and _checksum(checksum_type, body, kind, shown) != stored:
        raise CorruptFileError(shown, f"checksum mismatch in the {what} block at offset {off}")
    if what == "metaindex" and kind != 0:
        raise UnknownFormatError(shown, "a compressed metaindex block: not read by this reader")
    return body


def _checksum(checksum_type: int, body: bytes, kind: int, shown: str) -> int:
    last = bytes([kind])
    if checksum_type == 1:
        c = int(google_crc32c.value(body + last))
        return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    if checksum_type == 2:
        return xxhash.xxh32_intdigest(body + last)
    if checksum_type == 3:
        return xxhash.xxh64_intdigest(body + last) & 0xFFFFFFFF
    if checksum_type == 4:
        return ((xxhash.xxh3_64_intdigest(body) & 0xFFFFFFFF) ^ (kind * _XXH3_LAST_BYTE)) & 0xFFFFFFFF
    raise UnknownFormatError(shown, f"SST checksum type {checksum_type}: unknown to this reader")


def _block_entries(block: bytes, shown: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of an uncompressed block (prefix-compressed keys, restart array last)."""
    if len(block) < 4:
        raise CorruptFileError(shown, "a metaindex block too short for its restart count")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 * (restarts + 1)
    if restarts == 0 or limit < 0:
        raise CorruptFileError(shown, f"a metaindex block with {restarts} restart points")
    out: list[tuple[bytes, bytes]] = []
    key, i = b"", 0
    while i < limit:
        shared, i = _varint(block, i, shown)
        fresh, i = _varint(block, i, shown)
        length, i = _varint(block, i, shown)
        if shared > len(key) or i + fresh + length > limit:
            raise CorruptFileError(shown, "a metaindex entry runs past its block")
        key = key[:shared] + block[i : i + fresh]
        out.append((key, block[i + fresh : i + fresh + length]))
        i += fresh + length
    return out


def _varint(buf: bytes, i: int, shown: str) -> tuple[int, int]:
    value = shift = 0
    while i < len(buf) and shift < 64:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
    raise CorruptFileError(shown, "a malformed varint in an SST block handle")
