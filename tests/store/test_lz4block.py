"""LZ4Block container: round trips, block layout, damage detection, and Spark's own changelogs."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
import xxhash

from statebed_base.errors import CorruptFileError
from statebed_store import lz4block

FILE = "/ckpt/state/0/0/1_x.changelog"
HEADER = struct.Struct("<8sBiii")


def blocks(stream: bytes) -> list[tuple[int, int, int, int]]:
    """(token, compressed length, decompressed length, checksum) of every block, end marker included."""
    out, pos = [], 0
    while pos < len(stream):
        magic, token, clen, dlen, check = HEADER.unpack_from(stream, pos)
        assert magic == b"LZ4Block"
        out.append((token, clen, dlen, check))
        pos += HEADER.size + clen
    assert pos == len(stream)
    return out


END = (0x15, 0, 0, 0)  # raw method | level 5 (32 KiB blocks), both lengths 0


def compressible(n: int) -> bytes:
    return (b"statebed-" * (n // 9 + 1))[:n]


def test_empty_input_is_only_the_end_marker() -> None:
    stream = lz4block.compress(b"")
    assert blocks(stream) == [END]
    assert lz4block.decompress(stream, file=FILE) == (b"", True)


def test_one_byte() -> None:
    stream = lz4block.compress(b"x")
    (token, clen, dlen, check), end = blocks(stream)
    assert (token & 0xF0, dlen) == (0x10, 1)  # one byte does not compress: stored raw
    assert clen == 1 and check == xxhash.xxh32_intdigest(b"x", seed=0x9747B28C) & 0x0FFFFFFF
    assert end == END
    assert lz4block.decompress(stream, file=FILE) == (b"x", True)


def test_exactly_one_block() -> None:
    data = compressible(lz4block.DEFAULT_BLOCK_SIZE)
    stream = lz4block.compress(data)
    got = blocks(stream)
    assert len(got) == 2 and got[-1] == END
    token, clen, dlen, _ = got[0]
    assert token == 0x25 and dlen == lz4block.DEFAULT_BLOCK_SIZE and clen < dlen
    assert lz4block.decompress(stream, file=FILE) == (data, True)


def test_many_blocks_with_a_partial_last_one() -> None:
    size = lz4block.DEFAULT_BLOCK_SIZE
    data = compressible(5 * size + 123)
    stream = lz4block.compress(data)
    got = blocks(stream)
    assert [b[2] for b in got] == [size] * 5 + [123, 0]
    assert lz4block.decompress(stream, file=FILE) == (data, True)


def test_incompressible_data_is_stored_in_raw_blocks() -> None:
    data = random.Random(7).randbytes(3 * lz4block.DEFAULT_BLOCK_SIZE + 10)
    stream = lz4block.compress(data)
    got = blocks(stream)
    assert len(got) == 5
    for token, clen, dlen, _ in got[:-1]:
        assert token == 0x15 and clen == dlen
    # raw blocks are the data itself, right after each header
    assert stream[HEADER.size : HEADER.size + 100] == data[:100]
    assert lz4block.decompress(stream, file=FILE) == (data, True)


@pytest.mark.parametrize("block_size, token_level", [(1024, 0), (4096, 2), (64 * 1024, 6)])
def test_block_size_sets_the_level_nibble(block_size: int, token_level: int) -> None:
    data = compressible(3 * block_size)
    stream = lz4block.compress(data, block_size)
    got = blocks(stream)
    assert [b[2] for b in got] == [block_size] * 3 + [0]
    assert {b[0] & 0x0F for b in got} == {token_level}
    assert lz4block.decompress(stream, file=FILE) == (data, True)


def test_concatenated_streams_decode_to_the_concatenation() -> None:
    stream = lz4block.compress(b"abc") + lz4block.compress(compressible(40_000))
    assert lz4block.decompress(stream, file=FILE) == (b"abc" + compressible(40_000), True)


def test_every_truncation_is_an_error_naming_the_file() -> None:
    stream = lz4block.compress(compressible(50_000))
    for cut in sorted({1, 7, 8, 20, 21, 22, len(stream) // 2, len(stream) - 22, len(stream) - 21, len(stream) - 1}):
        with pytest.raises(CorruptFileError) as e:
            lz4block.decompress(stream[:cut], file=FILE)
        assert e.value.file == FILE and FILE in str(e.value), cut
        assert "truncated" in str(e.value) or "not an LZ4Block" in str(e.value), str(e.value)


def test_partial_prefix_decodes_whole_blocks_only() -> None:
    size = lz4block.DEFAULT_BLOCK_SIZE
    data = compressible(3 * size)
    stream = lz4block.compress(data)
    first_block_end = HEADER.size + blocks(stream)[0][1]
    payload, complete = lz4block.decompress(stream[: first_block_end + 10], file=FILE, partial=True)
    assert (payload, complete) == (data[:size], False)
    assert lz4block.decompress(stream, file=FILE, partial=True) == (data, True)


def test_a_flipped_byte_in_a_raw_block_fails_the_checksum() -> None:
    data = random.Random(3).randbytes(1000)
    stream = bytearray(lz4block.compress(data))
    stream[HEADER.size + 500] ^= 0x01
    with pytest.raises(CorruptFileError, match="checksum mismatch in LZ4 block at byte 0") as e:
        lz4block.decompress(bytes(stream), file=FILE)
    assert e.value.file == FILE


def test_every_flipped_byte_of_a_compressed_stream_is_detected() -> None:
    stream = lz4block.compress(compressible(3000) + b"tail-that-differs")
    for i in range(len(stream)):
        damaged = bytearray(stream)
        damaged[i] ^= 0x40
        try:
            out, _ = lz4block.decompress(bytes(damaged), file=FILE)
        except CorruptFileError as e:
            assert FILE in str(e)
            continue
        # The only undetectable flips are in the end marker's level nibble of the token.
        assert out == compressible(3000) + b"tail-that-differs", i


def test_not_an_lz4block_stream() -> None:
    with pytest.raises(CorruptFileError, match="not an LZ4Block stream") as e:
        lz4block.decompress(b"PK\x03\x04 this is a zip file", file=FILE)
    assert e.value.file == FILE
    with pytest.raises(CorruptFileError, match="empty"):
        lz4block.decompress(b"", file=FILE)


def test_bad_method_and_lengths_are_rejected() -> None:
    good = lz4block.compress(b"hello")
    bad_method = bytearray(good)
    bad_method[8] = 0x35
    with pytest.raises(CorruptFileError, match="unknown LZ4Block method 0x30"):
        lz4block.decompress(bytes(bad_method), file=FILE)
    raw_len_mismatch = HEADER.pack(b"LZ4Block", 0x15, 4, 5, 0) + b"abcd" + HEADER.pack(b"LZ4Block", 0x15, 0, 0, 0)
    with pytest.raises(CorruptFileError, match="bad LZ4Block lengths"):
        lz4block.decompress(raw_len_mismatch, file=FILE)
    too_big = HEADER.pack(b"LZ4Block", 0x10, 2048, 2048, 0) + bytes(2048)  # level 0 allows 1 KiB
    with pytest.raises(CorruptFileError, match="bad LZ4Block lengths"):
        lz4block.decompress(too_big, file=FILE)
    bad_end = HEADER.pack(b"LZ4Block", 0x15, 0, 0, 99)
    with pytest.raises(CorruptFileError, match="bad LZ4Block end marker"):
        lz4block.decompress(good[: -HEADER.size] + bad_end, file=FILE)


def spark_changelogs(root: Path) -> list[Path]:
    files = sorted(p for p in root.glob("*/state/**/*.changelog") if not p.name.startswith("."))
    assert files, f"no changelogs under {root}"
    return files


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
def test_decodes_every_spark_changelog(native: dict[str, Path], spark: str) -> None:
    kinds = set()
    for path in spark_changelogs(native[spark]):
        stream = path.read_bytes()
        got = blocks(stream)
        payload, complete = lz4block.decompress(stream, file=str(path))
        assert complete and len(payload) == sum(b[2] for b in got)
        assert payload.startswith(b"\x00\x02v3\x00"), path  # writeUTF("v3"), then writeUTF(lineage)
        kinds.update((b[0], b[2] > 0) for b in got)
        # Our encoder's output of the same payload decodes to the same bytes.
        assert lz4block.decompress(lz4block.compress(payload), file="re-encoded") == (payload, True)
    # Spark wrote LZ4-compressed blocks (0x25), raw blocks (0x15) and raw end markers.
    assert {(0x25, True), (0x15, True), (0x15, False)} <= kinds


def test_a_spark_changelog_byte_by_byte(native: dict[str, Path]) -> None:
    path = next(iter(sorted((native["4.1.4"] / "agg/state/0/1").glob("1_*.changelog"))))
    payload, _ = lz4block.decompress(path.read_bytes(), file=str(path))
    key = bytes.fromhex("00" + "0000000000000000" + "0200000010000000" + "6b31000000000000")
    value = bytes.fromhex("00" + "0000000000000000" + "0200000000000000")
    # v3, empty lineage, then put records `klen key vlen value` and the -1 end marker.
    record = struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    assert payload.startswith(b"\x00\x02v3\x00\x02[]" + record)
    assert payload.endswith(struct.pack(">i", -1))


def test_os_random_large_round_trip() -> None:
    data = os.urandom(200_000) + compressible(200_000)
    assert lz4block.decompress(lz4block.compress(data), file=FILE) == (data, True)
