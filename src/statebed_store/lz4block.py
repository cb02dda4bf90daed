"""The LZ4Block container that Spark's default `lz4` codec writes (lz4-java LZ4BlockOutputStream).

Per block: magic `LZ4Block`, a token byte (method 0x10 raw / 0x20 LZ4 in the high nibble,
log2(blockSize) - 10 in the low one), then little-endian int32 compressed length,
decompressed length and checksum (xxhash32 with seed 0x9747b28c of the uncompressed
bytes, masked to 28 bits). A block with both lengths 0 ends a stream; streams may be
concatenated. Writing the same container lets one reader serve Spark's files and ours.
"""

from __future__ import annotations

import struct

import lz4.block
import xxhash

from statebed_base.errors import CorruptFileError

__all__ = ["DEFAULT_BLOCK_SIZE", "MAGIC", "compress", "decompress"]

MAGIC = b"LZ4Block"
_HEADER = struct.Struct("<8sBiii")
HEADER_SIZE = _HEADER.size  # 21
_SEED = 0x9747B28C
_MASK = 0x0FFFFFFF
_RAW = 0x10
_LZ4 = 0x20
DEFAULT_BLOCK_SIZE = 32 * 1024  # Spark's spark.io.compression.lz4.blockSize


def _checksum(data: bytes | memoryview) -> int:
    return xxhash.xxh32_intdigest(data, seed=_SEED) & _MASK


def _level(block_size: int) -> int:
    level = max(0, (block_size - 1).bit_length() - 10)
    if not 0 <= level <= 15:
        raise ValueError(f"LZ4Block size {block_size} out of range")
    return level


def compress(data: bytes | bytearray | memoryview, block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
    """Encode `data` as one LZ4Block stream, end marker included."""
    level = _level(block_size)
    size = 1 << (level + 10)
    mv = memoryview(data)
    out: list[bytes] = []
    pack = _HEADER.pack
    for start in range(0, len(mv), size):
        block = mv[start : start + size]
        comp = lz4.block.compress(block, mode="default", store_size=False)
        if len(comp) >= len(block):
            out.append(pack(MAGIC, _RAW | level, len(block), len(block), _checksum(block)))
            out.append(bytes(block))
        else:
            out.append(pack(MAGIC, _LZ4 | level, len(comp), len(block), _checksum(block)))
            out.append(comp)
    out.append(pack(MAGIC, _RAW | level, 0, 0, 0))
    return b"".join(out)


def decompress(buf: bytes | memoryview, *, file: str, partial: bool = False) -> tuple[bytes, bool]:
    """Decode an LZ4Block stream, checking every block's checksum.

    Returns `(data, complete)`. With `partial=True` (a prefix of the file was fetched)
    an incomplete trailing block ends decoding quietly with `complete=False`; otherwise
    any truncation is a `CorruptFileError` naming `file`.
    """
    mv = memoryview(buf)
    n = len(mv)
    if n == 0:
        raise CorruptFileError(file, "file is empty (expected an LZ4Block stream)")
    if n >= 8 and bytes(mv[:8]) != MAGIC:
        raise CorruptFileError(
            file,
            f"not an LZ4Block stream (starts with {bytes(mv[:8])!r}); only Spark's default lz4 codec is supported",
        )
    out: list[bytes] = []
    pos = 0
    ended = False
    unpack = _HEADER.unpack_from
    while pos < n:
        if n - pos < HEADER_SIZE:
            if partial:
                return b"".join(out), False
            raise CorruptFileError(file, f"truncated: incomplete LZ4Block header at byte {pos}")
        magic, token, clen, dlen, check = unpack(mv, pos)
        if magic != MAGIC:
            raise CorruptFileError(file, f"bad LZ4Block magic at byte {pos}")
        method, level = token & 0xF0, token & 0x0F
        if method not in (_RAW, _LZ4):
            raise CorruptFileError(file, f"unknown LZ4Block method 0x{method:02x} at byte {pos}")
        max_size = 1 << (level + 10)
        if dlen < 0 or clen < 0 or dlen > max_size or (method == _RAW and clen != dlen):
            raise CorruptFileError(file, f"bad LZ4Block lengths at byte {pos}: compressed {clen}, decompressed {dlen}")
        pos += HEADER_SIZE
        if dlen == 0:
            if clen != 0 or check != 0:
                raise CorruptFileError(file, f"bad LZ4Block end marker at byte {pos - HEADER_SIZE}")
            ended = True
            continue
        if n - pos < clen:
            if partial:
                return b"".join(out), False
            raise CorruptFileError(file, f"truncated: LZ4Block at byte {pos - HEADER_SIZE} needs {clen} bytes, {n - pos} left")
        ended = False
        body = mv[pos : pos + clen]
        pos += clen
        if method == _RAW:
            block = bytes(body)
        else:
            try:
                block = lz4.block.decompress(body, uncompressed_size=dlen)
            except lz4.block.LZ4BlockError as e:
                raise CorruptFileError(file, f"LZ4 block at byte {pos - clen - HEADER_SIZE} does not decompress: {e}") from None
            if len(block) != dlen:
                raise CorruptFileError(
                    file, f"LZ4 block at byte {pos - clen - HEADER_SIZE} decompressed to {len(block)} bytes, expected {dlen}"
                )
        if _checksum(block) != check:
            raise CorruptFileError(file, f"checksum mismatch in LZ4 block at byte {pos - clen - HEADER_SIZE}")
        out.append(block)
    if not ended:
        if partial:
            return b"".join(out), False
        raise CorruptFileError(file, "truncated: LZ4Block stream has no end marker")
    return b"".join(out), True
